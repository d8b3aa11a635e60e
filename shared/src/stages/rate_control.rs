//! RateControl: the one place the stack's send rate is steered from outside SendEmail's hot
//! path. Once a minute (a schedule) it reads SES's quota, writes the ceiling it gives into
//! the rate item (SendEmail paces under it: `send_rate::trusted`), and sets SendEmail's event
//! source mapping's MaximumConcurrency to the environments the rate needs, and CreateEmails'
//! to what keeps that rate fed (`fan_out::composers_for`, within the operator's ceiling on
//! MongoDB connections), and SesEvents' to what handles the events the rate brings
//! (`events_path::handlers_for`). Before, every
//! SendEmail environment read the quota and listed the region's mappings every 5 minutes:
//! with hundreds of environments that used up the Lambda control-plane calls that pausing a
//! campaign and the reputation guard need, and SES's GetAccount.

use crate::domain::capacity::{binding, checks, warm_up, Account, Check, Stack};
use crate::domain::fan_out::{composers_for, Composer, ComposerSizing};
use crate::domain::public_urls::{PublicUrls, Short};
use crate::domain::send_rate::{
    epoch_us, trusted, Environment, QuotaUnknown, RateSource, SendRate, SharedRate,
};
use crate::ports::{AccountLimits, ConsumerScaling, DefaultLimits, Mailer, RateBucket};
use std::time::Duration;

/// Attempts at each write (the rate item, the mapping) before the invocation fails (the
/// schedule runs again within a minute in any case).
const ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The ceiling, and where it comes from (configured, SES quota).
    pub ceiling: f64,
    pub source: Option<RateSource>,
    /// SES's maximum send rate, when read.
    pub ses_max_send_rate: Option<f64>,
    /// Why SES's quota is not known (the configured rate is the ceiling then).
    pub quota_unknown: Option<String>,
    /// Whether the rate item was changed (a new ceiling, or its first rate).
    pub rate_written: bool,
    /// MaximumConcurrency wanted, and what it was when it changed.
    pub environments: u32,
    pub environments_were: Option<u32>,
    /// CreateEmails' MaximumConcurrency: what the ceiling needs and what it got, and what it
    /// was when it changed.
    pub create_emails: Option<ComposerSizing>,
    pub create_emails_were: Option<u32>,
    /// SesEvents' MaximumConcurrency, and what it was when it changed.
    pub ses_events: u32,
    pub ses_events_were: Option<u32>,
    /// The AWS limit the ceiling needs more of than the account allows (the one that binds
    /// hardest), if any (`domain::capacity`), and the account as read.
    pub binding: Option<Check>,
    pub account: Option<Account>,
    /// The public URLs whose reserved concurrency is below what the ceiling needs
    /// (`domain::public_urls`: first opens at the send rate, junk on top).
    pub public_urls_short: Vec<Short>,
}

/// Every metric a RateControl invocation may write besides the invocation's own.
pub const METRIC_NAMES: [&str; 4] = [
    "ceilingPerSecond",
    "sesMaxSendRate",
    "sendEmailEnvironments",
    "quotaUnknown",
];

impl Summary {
    /// The ceiling and the quota it comes from, as metrics: the dashboard draws the send
    /// rate against them.
    pub fn metrics(&self) -> Vec<crate::runtime::emf::Metric> {
        use crate::runtime::emf::Metric;
        let mut out = vec![
            Metric::per_second("ceilingPerSecond", self.ceiling),
            Metric::count("sendEmailEnvironments", f64::from(self.environments)),
        ];
        // A count, written only when it happened (`emf::nonzero`).
        if self.quota_unknown.is_some() {
            out.push(Metric::count("quotaUnknown", 1.0));
        }
        out.extend(
            self.ses_max_send_rate
                .map(|max| Metric::per_second("sesMaxSendRate", max)),
        );
        out
    }
}

pub struct RateControl<M, B> {
    mailer: M,
    bucket: B,
    senders: std::sync::Arc<dyn ConsumerScaling>,
    composers: std::sync::Arc<dyn ConsumerScaling>,
    handlers: std::sync::Arc<dyn ConsumerScaling>,
    configured: f64,
    ses_share: f64,
    send_email: Environment,
    create_emails: Composer,
    create_emails_ceiling: u32,
    stack: Stack,
    /// What the account allows (read each minute: a raise counts from the next one).
    account: std::sync::Arc<dyn AccountLimits>,
    public_urls: PublicUrls,
}

/// A step that failed on its every attempt.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ControlFailed(pub String);

impl<M: Mailer, B: RateBucket> RateControl<M, B> {
    /// `senders`, `composers` and `handlers` are SendEmail's, CreateEmails' and SesEvents'
    /// event source mappings.
    pub fn new(
        mailer: M,
        bucket: B,
        senders: std::sync::Arc<dyn ConsumerScaling>,
        composers: std::sync::Arc<dyn ConsumerScaling>,
        handlers: std::sync::Arc<dyn ConsumerScaling>,
        config: &crate::config::RateControlConfig,
    ) -> Self {
        Self {
            mailer,
            bucket,
            senders,
            composers,
            handlers,
            configured: config.send_rate_per_second,
            ses_share: config.ses_quota_share,
            send_email: config.send_email,
            create_emails: config.create_emails,
            create_emails_ceiling: config.create_emails_ceiling,
            stack: config.stack(),
            account: std::sync::Arc::new(DefaultLimits(String::new())),
            public_urls: config.public_urls,
        }
    }

    /// Where the account's limits are read from (AWS's defaults, region unknown, without).
    pub fn with_account(mut self, account: std::sync::Arc<dyn AccountLimits>) -> Self {
        self.account = account;
        self
    }

    pub async fn handle(&self) -> Result<Summary, ControlFailed> {
        let quota = (self.mailer.send_quota().await).and_then(|q| {
            if q.max_send_rate.is_finite() && q.max_send_rate > 0.0 {
                Ok(q)
            } else {
                Err(QuotaUnknown(format!(
                    "SES answered a maximum send rate of {}",
                    q.max_send_rate
                )))
            }
        });
        let seen = retried("reading the rate item", || async {
            (self.bucket.read().await)
                .map(|view| view.rate)
                .map_err(|e| e.0)
        })
        .await?;
        // Unread, the quota changes nothing: the ceiling an earlier read wrote still holds,
        // and the concurrency follows it, not the configured rate.
        let ceiling = match &quota {
            Ok(_) => SendRate::with_quota_share(self.configured, self.ses_share, &quota),
            Err(_) => trusted(&SendRate::configured(self.configured), seen.as_ref()),
        };
        let mut summary = Summary {
            ceiling: ceiling.campaign_wide(),
            source: Some(ceiling.source()),
            ses_max_send_rate: quota.as_ref().ok().map(|q| q.max_send_rate),
            quota_unknown: quota.as_ref().err().map(|e| e.to_string()),
            environments: ceiling.environments(&self.send_email),
            create_emails: Some(composers_for(
                ceiling.campaign_wide(),
                &self.create_emails,
                self.create_emails_ceiling,
            )),
            ses_events: self.stack.demand(ceiling.campaign_wide()).ses_events,
            public_urls_short: self.public_urls.check(ceiling.campaign_wide()).short(),
            ..Summary::default()
        };
        summary.rate_written = retried("writing the ceiling to the rate item", || {
            self.write_ceiling(&ceiling, seen.as_ref(), quota.is_ok())
        })
        .await?;
        summary.environments_were = retried("sizing SendEmail's event source mapping", || async {
            (self.senders.set_max_concurrency(summary.environments).await).map_err(|e| e.0)
        })
        .await?;
        let composers = summary.create_emails.map_or(2, |c| c.environments);
        summary.create_emails_were =
            retried("sizing CreateEmails' event source mapping", || async {
                (self.composers.set_max_concurrency(composers).await).map_err(|e| e.0)
            })
            .await?;
        summary.ses_events_were = retried("sizing SesEvents' event source mapping", || async {
            (self.handlers.set_max_concurrency(summary.ses_events).await).map_err(|e| e.0)
        })
        .await?;
        let mut account = self.account.read().await;
        account.ses_max_send_rate = summary.ses_max_send_rate;
        let demand = self.stack.demand(summary.ceiling);
        let limits = checks(&demand, &account, None);
        summary.binding = binding(&limits).cloned();
        if let Some(note) = warm_up(&demand, &account) {
            tracing::warn!("{note}");
        }
        summary.account = Some(account);
        if let Some(limit) = &summary.binding {
            tracing::warn!(
                limit = limit.limit,
                needed = limit.needed,
                available = limit.available,
                raise = limit.raise,
                "the send rate needs more of an AWS limit than the account allows (`mailctl plan` adds them all up)"
            );
        }
        if summary.create_emails.is_some_and(|c| c.capped()) {
            tracing::warn!(
                ?summary.create_emails,
                "CreateEmailsMaxConcurrency holds CreateEmails below the send rate: raise it (and the MongoDB connections it allows) or expect the rate unused"
            );
        }
        if !summary.public_urls_short.is_empty() {
            tracing::warn!(
                short = ?summary.public_urls_short,
                "a public URL's reserved concurrency is below what first opens at this send rate and junk need: raise the parameter (docs/open-time-content.md, Capacity)"
            );
        }
        tracing::info!(?summary, "send rate controlled");
        Ok(summary)
    }

    /// Moves the shared rate to `ceiling` where it is due: at once where the ceiling is
    /// lower, or where the item has no rate yet; after throttling, step by step as SendEmail
    /// does (`SharedRate::next`). A quota that could not be read changes nothing already set:
    /// the ceiling an earlier read wrote stays.
    async fn write_ceiling(
        &self,
        ceiling: &SendRate,
        seen: Option<&SharedRate>,
        quota_read: bool,
    ) -> Result<bool, String> {
        let now_ms = epoch_us(crate::runtime::clock::now()) / 1000;
        let next = match (seen, quota_read) {
            (None, _) => Some(SharedRate::at(ceiling, now_ms)),
            (Some(_), false) => None,
            (Some(seen), true) => seen.next(ceiling, now_ms, false),
        };
        match next {
            // Refused: another writer (a throttle) changed it first; the next minute sees it.
            Some(next) => (self.bucket.change_rate(seen, &next).await).map_err(|e| e.0),
            None => Ok(false),
        }
    }
}

// The scheduler's event carries nothing the control needs; the summary is the response.
// (Boxed: the SDK's nested futures would otherwise exceed the compiler's layout depth.)
crate::runtime::serve::stage! {
    impl<M: Mailer, B: RateBucket> for RateControl<M, B> {
        serde_json::Value => Result<(Summary, Vec<crate::runtime::emf::Metric>), ControlFailed>,
        |stage, _event, _invocation| {
            let summary = Box::pin(stage.handle()).await?;
            let metrics = summary.metrics();
            Ok((summary, metrics))
        }
    }
}

async fn retried<T, F, Fut>(what: &str, mut attempt: F) -> Result<T, ControlFailed>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut backoff = FIRST_BACKOFF;
    let mut last = String::new();
    for n in 1..=ATTEMPTS {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(err) => {
                tracing::warn!(attempt = n, reason = %err, "{what} failed");
                last = err;
            }
        }
        if n < ATTEMPTS {
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
    }
    Err(ControlFailed(format!("{what}: {last}")))
}

#[cfg(test)]
mod tests;

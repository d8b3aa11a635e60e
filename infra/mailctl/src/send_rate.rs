//! The send rate, as `plan` and `status` show it: how the stack would send (its rate, the
//! SendEmail and CreateEmails environments, SES's quota and charge) and the warnings on
//! them; the rate a running campaign is observed at and the ETA it promises.

use mailflow::adapters::sends::SendRecord;
use mailflow::domain::fan_out::{Composer, ComposerSizing};
use mailflow::domain::ledger::SendStatus;
use mailflow::domain::public_urls::PublicUrls;
use mailflow::domain::send_rate::{
    Environment, QuotaUnknown, SendQuota, SendRate, SharedRate, RATE_ITEM_TAKES_PER_SECOND,
};

/// What SES charges per email sent (us-east-1 list price; the rest of the pipeline adds about
/// 6 % to it: docs/deploying.md, "What 1M emails cost").
pub const SES_DOLLARS_PER_EMAIL: f64 = 0.10 / 1000.0;

/// SendEmail environments from which `plan` warns: half of an account's default Lambda
/// concurrency, which every function shares.
const ENVIRONMENTS_WORTH_A_WARNING: u32 = 500;

/// How the stack would send: its rate, the SendEmail environments it runs in, and SES's
/// quota as read.
pub struct Sending {
    pub rate: SendRate,
    pub environment: Environment,
    /// CreateEmails' environment and the most environments it may run.
    pub composer: Composer,
    pub composers_ceiling: u32,
    pub quota: Result<SendQuota, QuotaUnknown>,
    /// The public URLs' reserved concurrency and the pick slots (RateControl's environment).
    pub public_urls: PublicUrls,
    /// The whole stack's sizing and the account's limits, added up (`domain::capacity`).
    pub stack: mailflow::domain::capacity::Stack,
    pub account: mailflow::domain::capacity::Account,
}

/// Emails of `would_send` beyond what SES's 24-hour quota has left now (0 when it fits or
/// has no limit).
pub fn over_24_hour_quota(would_send: usize, quota: &SendQuota) -> u64 {
    quota
        .left_24_hours()
        .map_or(0, |left| (would_send as f64 - left).max(0.0).ceil() as u64)
}

/// The plan's line on how long the sends take at the rate (`hours`), who shares it, and
/// what SES charges.
pub fn plan_takes(
    hours: f64,
    send_rate: f64,
    rate_source: &str,
    environments: u32,
    ses_cost_usd: f64,
) -> String {
    let seconds = hours * 3600.0;
    let takes = match seconds {
        s if s < 60.0 => format!("{s:.0} s"),
        s if s < 3600.0 => format!("{:.0} min", s / 60.0),
        _ => format!("{hours:.1} h"),
    };
    format!(
        "at {send_rate}/s ({rate_source}; shared by {environments} SendEmail environments) the sends take {takes}; SES charges ${ses_cost_usd:.4} for them (the pipeline adds about 6 %)\n"
    )
}

/// The plan's warnings on the sizing at the rate: too many SendEmail environments,
/// CreateEmails held below the rate by its ceiling, the rate item taking too many writes.
pub fn plan_sizing(
    send_rate: f64,
    environments: u32,
    create_emails: Option<ComposerSizing>,
    rate_item_takes_per_second: f64,
    records_at_once: usize,
) -> String {
    let mut out = String::new();
    if environments >= ENVIRONMENTS_WORTH_A_WARNING {
        out.push_str(&format!(
            "SendEmail would run {environments} environments at once (an account's Lambda concurrency is 1,000 for every function together unless raised): give SendEmail more memory (SendEmailMemorySize) and larger batches (EmailsBatchSize), docs/send-rate.md\n",
        ));
    }
    if let Some(sizing) = create_emails.filter(|c| c.capped()) {
        out.push_str(&format!(
            "CreateEmails needs {} environments to keep {send_rate}/s fed but may run {} (CreateEmailsMaxConcurrency): it, not the rate, would bound the campaign at about {:.0}/s; raise CreateEmailsMaxConcurrency (each environment holds up to MONGODB_MAX_POOL_SIZE MongoDB connections), CreateEmailsMemorySize or UsersBatchSize (docs/send-rate.md)\n",
            sizing.needed,
            sizing.environments,
            send_rate * f64::from(sizing.environments) / f64::from(sizing.needed),
        ));
    }
    if rate_item_takes_per_second > RATE_ITEM_TAKES_PER_SECOND {
        out.push_str(&format!(
            "the send-rate item would take {rate_item_takes_per_second:.0} writes/s (batches of {records_at_once}; DynamoDB allows one item 1,000, this stack plans for {RATE_ITEM_TAKES_PER_SECOND:.0}): set EmailsBatchSize to {} (docs/send-rate.md)\n",
            Environment::batch_for(send_rate),
        ));
    }
    out
}

/// The plan's line on SES's quota: whether the campaign fits the 24 hours' (`over`: emails
/// beyond it), or why the quota is not known.
pub fn plan_quota(quota: Option<&SendQuota>, unknown: Option<&str>, over: u64) -> String {
    match (quota, unknown) {
        (Some(q), _) if over > 0 => format!(
            "SES 24-hour quota: {}; this campaign needs {over} more than is left: SES will refuse them until the window rolls, and SendEmail holds them an hour at a time until it does (docs/send-rate.md)\n",
            q.describe_24_hours(),
        ),
        (Some(q), _) => format!(
            "SES 24-hour quota: {}; the campaign fits\n",
            q.describe_24_hours()
        ),
        (None, Some(reason)) => format!("SES quota not known ({reason})\n"),
        (None, None) => String::new(),
    }
}

/// The window the current send rate is measured over.
const RATE_WINDOW_MS: u64 = 60_000;

/// Emails per second a campaign is sending at `now_ms`, over the last minute (None: nothing
/// sent in it). The current rate, not the campaign's average: a campaign that sent fast an
/// hour ago and now waits on retries has no rate to promise an ETA with.
pub fn observed(records: &[SendRecord], now_ms: u64) -> Option<f64> {
    let recent = records
        .iter()
        .filter(|r| r.status == Some(SendStatus::Sent))
        .filter_map(|r| r.completed_at_ms)
        .filter(|at| now_ms.saturating_sub(*at) <= RATE_WINDOW_MS)
        .count();
    // Over the last minute, or since the first claim if the campaign is younger than that.
    let first = records.iter().filter_map(|r| r.started_at_ms).min();
    let span_ms = first.map_or(RATE_WINDOW_MS, |f| {
        now_ms.saturating_sub(f).clamp(1000, RATE_WINDOW_MS)
    });
    (recent > 0).then(|| {
        let rate = recent as f64 / (span_ms as f64 / 1000.0);
        (rate * 10.0).round() / 10.0
    })
}

/// Seconds until `pending` messages drain. The shared rate is what the queue drains at while
/// it is sending (`observed`: Some); the observed one is the fallback before anything set it.
pub fn eta_seconds(pending: u64, shared: Option<SharedRate>, observed: Option<f64>) -> Option<u64> {
    let rate = match (shared, observed) {
        (Some(shared), Some(_)) => Some(shared.rate),
        (None, observed) => observed,
        (Some(_), None) => None,
    };
    rate.filter(|r| *r > 0.0)
        .map(|r| (pending as f64 / r).ceil() as u64)
}

/// `status`'s part on the rate: the shared rate, the observed one and the ETA; or that the
/// queues are empty, or that nothing was sent in the last minute (`retrying`: users waiting
/// to retry).
pub fn status_part(
    shared_rate: Option<&SharedRate>,
    observed: Option<f64>,
    eta_seconds: Option<u64>,
    pending: u64,
    retrying: usize,
) -> String {
    let shared = match shared_rate {
        Some(r) => format!(
            "shared rate {}/s ({}; ceiling {}/s) | ",
            (r.rate * 10.0).round() / 10.0,
            r.source.as_str(),
            r.ceiling,
        ),
        None => String::new(),
    };
    match (eta_seconds, observed) {
        (Some(eta), Some(rate)) => {
            format!("{shared}{rate}/s sent over the last minute | ETA {eta}s")
        }
        _ if pending == 0 => "queues empty".into(),
        _ => format!("nothing sent in the last minute | ETA unknown ({retrying} waiting to retry)"),
    }
}

/// `status`'s line on SES's quota, or why it is not known.
pub fn status_quota(quota: Option<&SendQuota>, unknown: Option<&str>) -> Option<String> {
    match (quota, unknown) {
        (Some(q), _) => Some(format!(
            "  SES: at most {}/s for the account (the stack sends at the lower of RateControl's SES_QUOTA_SHARE_PERCENT of this and SEND_RATE_PER_SECOND); 24-hour quota {}",
            q.max_send_rate,
            q.describe_24_hours()
        )),
        (None, Some(reason)) => Some(format!(
            "  SES quota not known ({reason}): the stack sends under the last ceiling RateControl wrote, or SEND_RATE_PER_SECOND"
        )),
        (None, None) => None,
    }
}

//! RateControl over in-memory ports: the ceiling, both mappings' sizing and their refusals.

use super::*;
use crate::config::RateControlConfig;
use crate::domain::events_path::Handler;
use crate::domain::send_rate::SendQuota;
use crate::ports::memory::MemoryRateBucket;
use crate::ports::{ControlError, OutgoingEmail, SendError};
use std::sync::{Arc, Mutex};

struct Quota(Result<f64, ()>);

impl Mailer for Quota {
    async fn send(&self, _: &OutgoingEmail) -> Result<String, SendError> {
        unreachable!("the control sends nothing")
    }

    async fn send_quota(&self) -> Result<SendQuota, QuotaUnknown> {
        match self.0 {
            Ok(max_send_rate) => Ok(SendQuota {
                max_send_rate,
                max_24_hour_send: 1e6,
                sent_last_24_hours: 0.0,
            }),
            Err(()) => Err(QuotaUnknown("GetAccount timed out".into())),
        }
    }
}

/// A mapping at `MaximumConcurrency` 2 that refuses the first `refusals` updates.
#[derive(Default)]
struct Mapping {
    max: Mutex<u32>,
    refusals: Mutex<u32>,
}

impl ConsumerScaling for Mapping {
    fn set_max_concurrency(
        &self,
        environments: u32,
    ) -> futures::future::BoxFuture<'_, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            let mut refusals = crate::runtime::lock(&self.refusals);
            if *refusals > 0 {
                *refusals -= 1;
                return Err(ControlError("TooManyRequestsException".into()));
            }
            let mut max = crate::runtime::lock(&self.max);
            let was = std::mem::replace(&mut *max, environments);
            Ok((was != environments).then_some(was))
        })
    }
}

fn config(rate: f64) -> RateControlConfig {
    RateControlConfig {
        campaigns_table_name: "campaigns".into(),
        sends_table_name: "sends".into(),
        send_rate_per_second: rate,
        ses_quota_share: 1.0,
        send_email: Environment::DEFAULT,
        emails_event_source_mapping_id: "uuid".into(),
        create_emails: Composer::DEFAULT,
        create_emails_ceiling: 5,
        users_event_source_mapping_id: "uuid-users".into(),
        ses_events: Handler::DEFAULT,
        track_opens_and_clicks: false,
        ses_events_event_source_mapping_id: "uuid-events".into(),
        public_urls: PublicUrls::DEFAULT,
    }
}

fn mapping(max: u32, refusals: u32) -> Arc<Mapping> {
    Arc::new(Mapping {
        max: Mutex::new(max),
        refusals: Mutex::new(refusals),
    })
}

#[tokio::test(start_paused = true)]
async fn the_quota_sets_the_items_ceiling_and_the_mappings_concurrency() {
    let bucket = Arc::new(MemoryRateBucket::default());
    let (handlers, composers) = (mapping(2, 0), mapping(5, 0));
    let mapping = self::mapping(2, 2);
    // Configured 1,000/s; SES allows 100: the ceiling is 100, 5 environments of 20/s.
    let control = RateControl::new(
        Quota(Ok(100.0)),
        bucket.clone(),
        mapping.clone(),
        composers.clone(),
        handlers.clone(),
        &config(1000.0),
    );
    let summary = control.handle().await.unwrap();
    assert_eq!(
        (summary.ceiling, summary.source, summary.rate_written),
        (100.0, Some(RateSource::SesQuota), true)
    );
    // Refused twice (Lambda's control plane throttling), set on the third attempt.
    assert_eq!(
        (summary.environments, summary.environments_were),
        (6, Some(2))
    );
    // CreateEmails: 100/s with headroom is two environments of 81/s, down from 5.
    let sizing = summary.create_emails.unwrap();
    assert_eq!(
        (
            sizing.environments,
            sizing.capped(),
            summary.create_emails_were
        ),
        (2, false, Some(5))
    );
    let rate = bucket.read().await.unwrap().rate.unwrap();
    assert_eq!(
        (rate.rate, rate.ceiling, rate.ceiling_from_ses),
        (100.0, 100.0, true)
    );
    // The template's public URLs are sized for its 14/s; at 100/s both fall short.
    let short: Vec<_> = summary
        .public_urls_short
        .iter()
        .map(|s| (s.parameter, s.configured, s.needed))
        .collect();
    assert_eq!(
        short,
        [
            ("UnsubscribeConcurrency", 26, 29),
            ("OpenContentConcurrency", 69, 235)
        ]
    );

    // A minute later nothing changed: no write to either.
    let again = control.handle().await.unwrap();
    assert_eq!(
        (
            again.rate_written,
            again.environments_were,
            again.create_emails_were
        ),
        (false, None, None)
    );

    // The quota could not be read: the ceiling SES gave stays, and so does the mapping.
    let blind = RateControl::new(
        Quota(Err(())),
        bucket.clone(),
        mapping.clone(),
        composers.clone(),
        handlers.clone(),
        &config(1000.0),
    );
    // (It sizes the mapping by that ceiling, not by the configured 1,000/s.)
    let summary = blind.handle().await.unwrap();
    assert_eq!(
        (
            summary.rate_written,
            summary.environments,
            summary.environments_were
        ),
        (false, 6, None)
    );
    assert_eq!(bucket.read().await.unwrap().rate.unwrap().ceiling, 100.0);
    // SES answering a maximum of 0 is not a quota: the same.
    let zero = RateControl::new(
        Quota(Ok(0.0)),
        bucket.clone(),
        mapping.clone(),
        composers.clone(),
        handlers.clone(),
        &config(1000.0),
    );
    let summary = zero.handle().await.unwrap();
    assert_eq!((summary.ceiling, summary.environments_were), (100.0, None));
}

#[tokio::test(start_paused = true)]
async fn create_emails_follows_the_rate_up_to_the_operators_ceiling() {
    let composers = mapping(5, 0);
    // 20,000/s needs 306 CreateEmails environments at the defaults; the ceiling is 5.
    let control = RateControl::new(
        Quota(Ok(20_000.0)),
        Arc::new(MemoryRateBucket::default()),
        mapping(2, 0),
        composers.clone(),
        mapping(2, 0),
        &config(20_000.0),
    );
    let sizing = control.handle().await.unwrap().create_emails.unwrap();
    assert_eq!((sizing.needed, sizing.environments), (306, 5));
    assert!(sizing.capped());
    // Given a vCPU, batches of 100 and room for 100: 38, set on the mapping.
    let mut roomy = config(20_000.0);
    roomy.create_emails = Composer {
        batch: 100,
        memory_mb: 1_769,
    };
    roomy.create_emails_ceiling = 100;
    let control = RateControl::new(
        Quota(Ok(20_000.0)),
        Arc::new(MemoryRateBucket::default()),
        mapping(2, 0),
        composers.clone(),
        mapping(2, 0),
        &roomy,
    );
    let summary = control.handle().await.unwrap();
    assert_eq!(
        (
            summary.create_emails.unwrap().environments,
            summary.create_emails_were
        ),
        (38, Some(5))
    );
    assert_eq!(*crate::runtime::lock(&composers.max), 38);
}

#[tokio::test(start_paused = true)]
async fn a_mapping_that_refuses_every_attempt_fails_the_invocation_with_its_reason() {
    let control = RateControl::new(
        Quota(Ok(14.0)),
        Arc::new(MemoryRateBucket::default()),
        mapping(2, ATTEMPTS),
        mapping(2, 0),
        mapping(2, 0),
        &config(14.0),
    );
    let err = control.handle().await.unwrap_err();
    assert!(
        err.0
            .contains("sizing SendEmail's event source mapping: TooManyRequestsException"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn ses_events_follows_the_events_the_rate_brings_and_a_binding_limit_is_named() {
    let handlers = mapping(2, 0);
    let control = RateControl::new(
        Quota(Ok(20_000.0)),
        Arc::new(MemoryRateBucket::default()),
        mapping(2, 0),
        mapping(5, 0),
        handlers.clone(),
        &config(20_000.0),
    )
    .with_account(Arc::new(crate::ports::DefaultLimits("us-east-1".into())));
    let summary = control.handle().await.unwrap();
    // 20,200 events/s, 95 a second each at 128 MB, with headroom: 266.
    assert_eq!(
        (summary.ses_events, summary.ses_events_were),
        (266, Some(2))
    );
    assert_eq!(*crate::runtime::lock(&handlers.max), 266);
    // 20,000/s writes 60,200 units a second to the sends table, past DynamoDB's default
    // 40,000: the hardest of the limits it exceeds.
    let binding = summary.binding.unwrap();
    assert_eq!(
        (binding.limit, binding.needed.round()),
        ("sends table write units/s", 60_200.0),
        "{binding:?}"
    );
    // The SES sandbox's rate binds nothing, and SesEvents runs at Lambda's minimum.
    let small = RateControl::new(
        Quota(Ok(14.0)),
        Arc::new(MemoryRateBucket::default()),
        mapping(2, 0),
        mapping(2, 0),
        handlers.clone(),
        &config(14.0),
    );
    let summary = small.handle().await.unwrap();
    assert_eq!((summary.ses_events, summary.binding), (2, None));
}

/// An account whose limits were lowered (or raised) is what the rate is checked against,
/// not AWS's defaults.
struct Lowered;

impl crate::ports::AccountLimits for Lowered {
    fn read(&self) -> futures::future::BoxFuture<'_, crate::domain::capacity::Account> {
        Box::pin(async {
            let mut account = crate::domain::capacity::Account::defaults("us-east-1");
            account.lambda_concurrency = 50;
            account
                .read
                .push(crate::domain::capacity::Account::LAMBDA_CONCURRENCY);
            account
        })
    }
}

#[tokio::test(start_paused = true)]
async fn the_account_as_read_is_what_binds() {
    let control = |account: Arc<dyn crate::ports::AccountLimits>| {
        RateControl::new(
            Quota(Ok(200.0)),
            Arc::new(MemoryRateBucket::default()),
            mapping(2, 0),
            mapping(2, 0),
            mapping(2, 0),
            &config(200.0),
        )
        .with_account(account)
    };
    let defaults = control(Arc::new(crate::ports::DefaultLimits("us-east-1".into())));
    let summary = defaults.handle().await.unwrap();
    assert_eq!(summary.binding, None, "{summary:?}");
    assert!(summary.account.unwrap().read.is_empty());
    let summary = control(Arc::new(Lowered)).handle().await.unwrap();
    let binding = summary
        .binding
        .expect("50 environments in all bind at 200/s");
    assert_eq!(
        (binding.limit, binding.available),
        ("Lambda concurrent executions", 50.0),
        "{binding:?}"
    );
    assert_eq!(summary.account.unwrap().read, ["lambda concurrency"]);
}

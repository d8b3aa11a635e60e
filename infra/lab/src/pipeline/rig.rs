//! One campaign's ports and sizing in the lab: the stages' environments and batches as
//! RateControl sizes them (`Sizing`), and the queues, SES, the sends table, the events path
//! and the account they share (`Rig`).

use super::directory::LabDirectory;
use super::events::{Account, EventsPath};
use super::polling::Ramp;
use super::sends_table::SendsTable;
use super::PipelineOptions;
use crate::rate::latency::millis;
use crate::rate::queue::LabQueue;
use crate::rate::standin::StandInSes;
use anyhow::Result;
use mailflow::domain::events_path::{events_per_email, handlers_for, Handler};
use mailflow::domain::fan_out::{composers_for, Composer};
use mailflow::domain::public_urls::PublicUrls;
use mailflow::domain::send_rate::{Environment, SendRate};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The environments and batches of CreateEmails and SendEmail: as given, or (0) as
/// RateControl sizes them for the quota.
pub(super) struct Sizing {
    pub(super) create_environments: u32,
    pub(super) send_batch: usize,
    pub(super) send_environments: u32,
    pub(super) handler: Handler,
    pub(super) events_environments: u32,
}

impl Sizing {
    pub(super) fn of(options: &PipelineOptions) -> Self {
        let quota = options.quota;
        let composer = Composer {
            batch: options.users_batch,
            memory_mb: options.create_memory_mb,
        };
        let create_environments = match options.create_concurrency {
            0 => composers_for(quota, &composer, options.create_ceiling).environments,
            n => n,
        };
        let send_batch = match options.send_batch {
            0 => Environment::batch_for(quota),
            n => n,
        };
        let sender = Environment {
            records_at_once: send_batch,
            memory_mb: options.send_memory_mb,
        };
        let send_environments = match options.send_concurrency {
            0 => SendRate::configured(quota).environments(&sender),
            n => n,
        };
        let handler = Handler {
            memory_mb: options.events_memory_mb,
            ..Handler::DEFAULT
        };
        let events_environments = match options.events_concurrency {
            0 => handlers_for(quota * events_per_email(false), &handler),
            n => n,
        };
        Self {
            create_environments,
            send_batch,
            send_environments,
            handler,
            events_environments,
        }
    }
}

/// One campaign's ports, shared by its stages: the audience, the users and emails queues
/// (visibility timeouts and receive counts as the template sets them), SES, the round trips
/// of SQS and DynamoDB, and the pollers' scaling and stop.
pub(super) struct Rig {
    pub(super) directory: LabDirectory,
    pub(super) users: Arc<LabQueue>,
    pub(super) emails: Arc<LabQueue>,
    pub(super) ses: Arc<StandInSes>,
    pub(super) sqs: (Duration, Duration),
    pub(super) store: (Duration, Duration),
    /// The ledger behind the sends table's limits.
    pub(super) sends: SendsTable,
    pub(super) ramp: Ramp,
    pub(super) done: Arc<AtomicBool>,
    pub(super) events: Arc<EventsPath>,
    pub(super) account: Arc<Account>,
}

impl Rig {
    pub(super) fn new(options: &PipelineOptions, seed: u64, started: Instant) -> Result<Self> {
        let (sqs, store, mongo, ses_latency) = (
            millis(&options.sqs_latency_ms)?,
            millis(&options.store_latency_ms)?,
            millis(&options.mongo_latency_ms)?,
            millis(&options.ses_latency_ms)?,
        );
        Ok(Self {
            directory: LabDirectory::new(options.users, mongo),
            users: Arc::new(LabQueue::new(Duration::from_secs(360), 5)),
            emails: Arc::new(LabQueue::new(Duration::from_secs(180), 10)),
            ses: Arc::new(
                StandInSes::new(options.quota, ses_latency, seed)
                    .with_daily_quota(options.ses_daily_quota),
            ),
            sqs,
            store,
            sends: SendsTable::new(
                Arc::default(),
                store,
                options.sends_table_quota,
                options.sends_index,
                seed,
            ),
            ramp: Ramp::new(started, !options.no_ramp),
            done: Arc::new(AtomicBool::new(false)),
            events: EventsPath::new(&options.region, options.send_events, seed),
            // Less the public URLs' reserved concurrency, RateControl's and GetUsers'.
            account: Account::new(options.account_concurrency.saturating_sub(
                PublicUrls::DEFAULT.unsubscribe_concurrency
                    + PublicUrls::DEFAULT.open_content_concurrency
                    + 2,
            )),
        })
    }

    /// Until every event of the emails accepted is handled or dead-lettered, or `limit` has
    /// passed.
    pub(super) async fn drain_events(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while !self.events.settled() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Until `emails` are accepted or `limit` has passed since `started`: the users and the
    /// jobs waiting on their queues, each second.
    pub(super) async fn sample_until_sent(
        &self,
        emails: usize,
        started: Instant,
        limit: Duration,
    ) -> (Vec<usize>, Vec<usize>) {
        let (mut users_queued, mut emails_queued) = (Vec::new(), Vec::new());
        let mut next_sample = started;
        loop {
            let accepted = self.ses.accepted_count();
            if accepted >= emails || started.elapsed() > limit {
                break;
            }
            if Instant::now() >= next_sample {
                users_queued.push(self.users.left().0);
                emails_queued.push(self.emails.left().0);
                next_sample += Duration::from_secs(1);
            }
            // Each second, with the samples: a campaign held for a day (SES's 24-hour quota)
            // wakes this 86,400 times, not 1.7 million.
            tokio::time::sleep_until(next_sample).await;
        }
        (users_queued, emails_queued)
    }
}

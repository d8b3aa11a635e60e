//! The three real stages on the lab's ports, configured and sized as the template does:
//! GetUsers' one invocation, CreateEmails' environments on the users queue and SendEmail's
//! on the emails queue, sharing the ports of one campaign (`Rig`).

use super::directory::LabDirectory;
use super::events::{Account, EventsPath, Publishing};
use super::polling::{failures, poll, Ramp};
use super::sending::{cpu_time, Sending};
use super::sends_table::SendsTable;
use super::PipelineOptions;
use crate::rate::item_limit::ItemLimit;
use crate::rate::latency::{millis, Computing, Cpu, Slow};
use crate::rate::queue::LabQueue;
use crate::rate::standin::{Ses, StandInSes};
use anyhow::Result;
use mailflow::config::{CreateEmailsConfig, GetUsersConfig, SendEmailConfig};
use mailflow::domain::events_path::{events_per_email, handlers_for, Handler};
use mailflow::domain::fan_out::{composers_for, Composer};
use mailflow::domain::public_urls::PublicUrls;
use mailflow::domain::send_rate::{Environment, SendRate};
use mailflow::domain::unsubscribe_link::Signer;
use mailflow::ports::memory::{MemoryCampaigns, MemoryRateBucket, MemoryWaitingRoom};
use mailflow::ports::WaitingRoom;
use mailflow::runtime::Invocation;
use mailflow::stages::create_emails::CreateEmails;
use mailflow::stages::get_users::GetUsers;
use mailflow::stages::send_email::{SendEmail, Wanted};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
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

fn config<T>(
    parse: fn(&dyn mailflow::config::Source) -> Result<T, mailflow::config::ConfigError>,
    vars: &[(&str, String)],
) -> Result<T> {
    let vars: BTreeMap<&str, String> = vars.iter().cloned().collect();
    Ok(parse(&|k: &str| vars.get(k).cloned())?)
}

/// GetUsers' one invocation, spawned: its users go to `users` (each costing `per_user` of
/// its CPU, each SendMessageBatch `sqs` away), timed in `enqueued`.
pub(super) fn start_get_users(
    options: &PipelineOptions,
    directory: LabDirectory,
    users: Arc<LabQueue>,
    enqueued: Arc<Mutex<Vec<Instant>>>,
    per_user: Duration,
    sqs: (Duration, Duration),
) -> Result<tokio::task::JoinHandle<Result<(), mailflow::stages::get_users::GetUsersError>>> {
    let stage = get_users(
        options,
        directory,
        GetUsersQueues {
            users,
            continuation: Arc::new(LabQueue::new(Duration::from_secs(900), 5)),
            enqueued,
            released: None,
            cpu: Arc::new(Cpu::default()),
            per_user,
            sqs,
        },
        MemoryWaitingRoom::default(),
    )?;
    Ok(tokio::spawn(async move {
        let invocation = Invocation::with_timeout("get-users-1", Duration::from_secs(900));
        let event = serde_json::json!({ "campaignId": "weekly-2026-W47" });
        stage.handle(event, &invocation).await.map(|_| ())
    }))
}

/// What GetUsers sends to and spends: the users and continuation queues, the times its
/// users were enqueued, its CPU and each user's share of it, SQS's round trip.
pub(super) struct GetUsersQueues {
    pub(super) users: Arc<LabQueue>,
    pub(super) continuation: Arc<LabQueue>,
    pub(super) enqueued: Arc<Mutex<Vec<Instant>>>,
    /// A local-time campaign's releases, as they went onto the users queue.
    pub(super) released: Option<super::sending::Released>,
    pub(super) cpu: Arc<Cpu>,
    pub(super) per_user: Duration,
    pub(super) sqs: (Duration, Duration),
}

/// GetUsers on the lab's ports and `waiting`, configured as the template does.
pub(super) fn get_users<W: WaitingRoom>(
    options: &PipelineOptions,
    directory: LabDirectory,
    queues: GetUsersQueues,
    waiting: W,
) -> Result<GetUsers<LabDirectory, Sending, MemoryCampaigns, W>> {
    let queue =
        |queue: Arc<LabQueue>, per_message, sent: Arc<Mutex<Vec<Instant>>>, released| Sending {
            queue,
            cpu: queues.cpu.clone(),
            per_message,
            latency: queues.sqs,
            slim: false,
            sent,
            released,
        };
    let stage = GetUsers::new(
        directory,
        queue(
            queues.users.clone(),
            queues.per_user,
            queues.enqueued.clone(),
            queues.released.clone(),
        ),
        queue(
            queues.continuation.clone(),
            Duration::ZERO,
            Arc::default(),
            None,
        ),
        MemoryCampaigns::default(),
        waiting,
        Arc::new(mailflow::ports::memory::MemoryResults::default()),
        config(
            GetUsersConfig::from_source,
            &[
                ("MONGODB_URI", "mongodb://127.0.0.1:1".into()),
                ("USERS_QUEUE_URL", "lab-users".into()),
                ("CONTINUATION_QUEUE_URL", "lab-continuation".into()),
                ("CAMPAIGNS_TABLE_NAME", "lab-campaigns".into()),
                ("SENDS_TABLE_NAME", "lab-sends".into()),
                ("WAITING_TABLE_NAME", "lab-waiting".into()),
                ("RELEASE_SCHEDULE_GROUP", "lab-releases".into()),
                (
                    "RELEASE_SCHEDULER_ROLE_ARN",
                    "arn:aws:iam::000000000000:role/lab".into(),
                ),
                (
                    "RELEASE_DEAD_LETTER_ARN",
                    "arn:aws:sqs:us-east-1:000000000000:lab".into(),
                ),
                (
                    "ENQUEUE_CONCURRENCY",
                    options.enqueue_concurrency.to_string(),
                ),
            ],
        )?,
    );
    Ok(stage)
}

const SECRET: &str = "a-lab-secret-long-enough-for-the-signer-0123456789";

/// The stages after GetUsers on `rig`'s ports, sized by `sizing`: CreateEmails on the users
/// queue (its sends timed in `composed`), SendEmail on the emails queue and SesEvents on
/// SES's events, each spending its `--cpu-us` figure per email.
pub(super) fn start_stages_after_get_users(
    rig: &Rig,
    options: &PipelineOptions,
    sizing: &Sizing,
    seed: u64,
    composed: Arc<Mutex<Vec<Instant>>>,
) -> Result<Vec<JoinHandle<()>>> {
    let [_, create_cpu, send_cpu] = options.cpu_us[..] else {
        anyhow::bail!("--cpu-us takes three figures: GetUsers, CreateEmails, SendEmail");
    };
    let mut tasks = start_create_emails(
        rig,
        options,
        sizing.create_environments,
        cpu_time(create_cpu, options.create_memory_mb),
        composed,
    )?;
    let per_send = cpu_time(send_cpu, options.send_memory_mb);
    tasks.extend(start_send_email(rig, options, sizing, per_send, seed)?);
    tasks.extend(rig.events.start_handlers(
        rig.sends.clone(),
        sizing.events_environments,
        sizing.handler,
        rig.ramp.clone(),
        rig.sqs,
        rig.store,
        rig.done.clone(),
        &rig.account,
    )?);
    Ok(tasks)
}

/// CreateEmails' environments on the users queue, each costing `per_email` of its CPU per
/// job it sends, timed in `composed`.
fn start_create_emails(
    rig: &Rig,
    options: &PipelineOptions,
    environments: u32,
    per_email: Duration,
    composed: Arc<Mutex<Vec<Instant>>>,
) -> Result<Vec<JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for environment in 0..environments {
        let cpu = Arc::new(Cpu::default());
        let stage = Arc::new(CreateEmails::new(
            rig.directory.clone(),
            Sending {
                queue: rig.emails.clone(),
                cpu,
                per_message: per_email,
                latency: rig.sqs,
                slim: true,
                sent: composed.clone(),
                released: None,
            },
            MemoryCampaigns::default(),
            // No pending one-click unsubscribes (their one BatchGetItem per batch is not
            // modelled).
            mailflow::ports::memory::MemoryRecords::default(),
            Signer::new(SECRET, "weekly-digest")?,
            config(
                CreateEmailsConfig::from_source,
                &[
                    ("MONGODB_URI", "mongodb://127.0.0.1:1".into()),
                    ("EMAILS_QUEUE_URL", "lab-emails".into()),
                    ("CAMPAIGNS_TABLE_NAME", "lab-campaigns".into()),
                    ("SENDS_TABLE_NAME", "lab-sends".into()),
                    ("UNSUBSCRIBE_SECRET", SECRET.into()),
                    (
                        "UNSUBSCRIBE_BASE_URL",
                        "https://u.example/unsubscribe".into(),
                    ),
                    ("OPEN_CONTENT_BASE_URL", "https://o.example/".into()),
                    ("RECORD_CONCURRENCY", options.users_batch.to_string()),
                ],
            )?,
        ));
        tasks.push(poll(
            rig.users.clone(),
            options.users_batch,
            environment,
            rig.ramp.clone(),
            rig.sqs,
            rig.done.clone(),
            rig.account.around(move |event| {
                let stage = stage.clone();
                async move { failures(&stage.handle(event).await.0) }
            }),
        ));
    }
    Ok(tasks)
}

/// SendEmail's environments on the emails queue, sharing the ledger (behind the sends table's
/// limits) and the rate item (behind DynamoDB's per-item limit), each spending `per_email` of
/// its CPU on each send.
fn start_send_email(
    rig: &Rig,
    options: &PipelineOptions,
    sizing: &Sizing,
    per_email: Duration,
    seed: u64,
) -> Result<Vec<JoinHandle<()>>> {
    let rate_item = Arc::new(ItemLimit::new(MemoryRateBucket::default(), seed));
    let send_config = config(
        SendEmailConfig::from_source,
        &[
            ("MONGODB_URI", "mongodb://127.0.0.1:1".into()),
            ("SENDS_TABLE_NAME", "lab-sends".into()),
            ("CAMPAIGNS_TABLE_NAME", "lab-campaigns".into()),
            ("EMAILS_QUEUE_URL", "lab-emails".into()),
            ("SENDER_ADDRESS", "lab@example.com".into()),
            ("SEND_RATE_PER_SECOND", options.quota.to_string()),
            ("VISIBILITY_TIMEOUT_SECONDS", "180".into()),
            ("FUNCTION_TIMEOUT_SECONDS", "30".into()),
            ("RECORD_CONCURRENCY", sizing.send_batch.to_string()),
            (
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
                options.send_memory_mb.to_string(),
            ),
        ]
        .into_iter()
        .chain(crate::rate::campaign::waiting_room_vars())
        .collect::<Vec<_>>(),
    )?;
    let store = rig.store;
    let mut tasks = Vec::new();
    for environment in 0..sizing.send_environments {
        let stage = Arc::new(SendEmail::new(
            rig.sends.clone(),
            Computing::new(
                Publishing {
                    inner: Ses(rig.ses.clone()),
                    events: rig.events.clone(),
                },
                per_email,
            ),
            Slow::new(rig.emails.clone(), store),
            MemoryCampaigns::default(),
            Slow::new(rate_item.clone(), store),
            MemoryWaitingRoom::default(),
            // A waited email's standing: one MongoDB round trip (the pending leave's
            // GetItem is not modelled, as in CreateEmails).
            Wanted {
                users: rig.directory.clone(),
                pending: mailflow::ports::memory::MemoryRecords::default(),
            },
            send_config.clone(),
        ));
        let invocations = Arc::new(std::sync::atomic::AtomicU64::new(0));
        tasks.push(poll(
            rig.emails.clone(),
            sizing.send_batch,
            environment,
            rig.ramp.clone(),
            rig.sqs,
            rig.done.clone(),
            rig.account.around(move |event| {
                let (stage, invocations) = (stage.clone(), invocations.clone());
                async move {
                    let n = invocations.fetch_add(1, Ordering::Relaxed);
                    let invocation = Invocation::with_timeout(
                        format!("send{environment}-{n}"),
                        Duration::from_secs(30),
                    );
                    failures(&stage.handle(event, &invocation).await.0)
                }
            }),
        ));
    }
    Ok(tasks)
}

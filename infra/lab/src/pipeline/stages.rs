//! The three real stages on the lab's ports, configured and sized as the template does:
//! GetUsers' one invocation, CreateEmails' environments on the users queue and SendEmail's
//! on the emails queue, sharing the ports of one campaign (`Rig`).

pub(super) use super::rig::{Rig, Sizing};

use super::directory::LabDirectory;
use super::events::Publishing;
use super::polling::{failures, poll};
use super::sending::{cpu_time, Sending};
use super::PipelineOptions;
use crate::rate::item_limit::ItemLimit;
use crate::rate::latency::{Computing, Cpu, Slow};
use crate::rate::queue::LabQueue;
use crate::rate::standin::Ses;
use anyhow::Result;
use mailflow::config::{CreateEmailsConfig, GetUsersConfig, SendEmailConfig};
use mailflow::domain::unsubscribe_link::Signer;
use mailflow::ports::memory::{MemoryCampaigns, MemoryRateBucket, MemoryWaitingRoom};
use mailflow::ports::WaitingRoom;
use mailflow::runtime::Invocation;
use mailflow::stages::create_emails::CreateEmails;
use mailflow::stages::get_users::GetUsers;
use mailflow::stages::send_email::{SendEmail, Wanted};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

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

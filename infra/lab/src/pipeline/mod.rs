//! Over 450 lines because the virtual-time model of every stage and port reads as one run.
//! `mailctl pipeline`: a whole campaign at rates the local stack cannot reach, in virtual
//! time. The real GetUsers, CreateEmails and SendEmail stages run over in-memory ports: a
//! synthetic audience behind MongoDB's round trips (`directory`), the users and emails
//! queues with SQS's semantics, the ledger and rate item behind DynamoDB's, and the SES
//! stand-in that throttles beyond its quota. Each execution environment has the CPU share
//! its memory buys (Lambda's 1,769 MB a vCPU) and spends each stage's measured CPU per
//! email on it, one at a time; the event source mappings add environments as Lambda's do
//! (five at first, then up to 300 more a minute). It reports when the first and the last
//! email went, the quota's use second by second, each stage's throughput and which of them
//! bounds the campaign.

pub(crate) mod directory;
#[cfg(test)]
mod quiet_hours;

use crate::rate::item_limit::ItemLimit;
use crate::rate::latency::{Computing, Cpu, Slow};
use crate::rate::queue::LabQueue;
use crate::rate::standin::{Ses, StandInSes};
use anyhow::{bail, Context, Result};
use aws_lambda_events::event::sqs::SqsEvent;
use directory::LabDirectory;
use mailflow::config::{CreateEmailsConfig, GetUsersConfig, SendEmailConfig};
use mailflow::domain::digest::Renderer;
use mailflow::domain::fan_out::{
    composers_for, Composer, CREATE_CPU_US_PER_EMAIL, GET_USERS_CPU_US_PER_USER,
};
use mailflow::domain::messages::{parse_body, EmailJob};
use mailflow::domain::send_rate::{Environment, SendRate, CPU_US_PER_EMAIL, MB_PER_VCPU};
use mailflow::domain::unsubscribe_link::Signer;
use mailflow::ports::memory::{MemoryCampaigns, MemoryLedger, MemoryRateBucket, MemoryWaitingRoom};
use mailflow::ports::{ConsumedQueue, OutgoingQueue, QueueError, SendReport};
use mailflow::runtime::Invocation;
use mailflow::stages::create_emails::CreateEmails;
use mailflow::stages::get_users::GetUsers;
use mailflow::stages::send_email::{SendEmail, Wanted};
use serde::Serialize;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone, Debug, clap::Args)]
pub struct PipelineOptions {
    /// Users in the audience (each gets one email).
    #[arg(long, default_value_t = 1_000_000)]
    pub users: usize,
    /// SES's maximum send rate, emails/s (the configured rate is the same).
    #[arg(long, default_value_t = 20_000.0)]
    pub quota: f64,
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// GetUsers' memory (MB) and SendMessageBatch calls in flight (ENQUEUE_CONCURRENCY).
    #[arg(long, default_value_t = 1_769)]
    pub get_users_memory_mb: u32,
    #[arg(long, default_value_t = 64)]
    pub enqueue_concurrency: usize,
    /// CreateEmails' memory (MB), its batch (UsersBatchSize) and its concurrency (0: as
    /// RateControl sizes it, `fan_out::composers_for`, within `create_ceiling`).
    #[arg(long, default_value_t = 1_769)]
    pub create_memory_mb: u32,
    #[arg(long, default_value_t = 100)]
    pub users_batch: usize,
    #[arg(long, default_value_t = 0)]
    pub create_concurrency: u32,
    #[arg(long, default_value_t = 1_000)]
    pub create_ceiling: u32,
    /// SendEmail's memory (MB), batch (EmailsBatchSize; 0: `Environment::batch_for`) and
    /// concurrency (0: as RateControl sizes it).
    #[arg(long, default_value_t = 1_769)]
    pub send_memory_mb: u32,
    #[arg(long, default_value_t = 0)]
    pub send_batch: usize,
    #[arg(long, default_value_t = 0)]
    pub send_concurrency: u32,
    /// CPU per email on a whole vCPU, µs: GetUsers, CreateEmails, SendEmail.
    #[arg(long, value_delimiter = ',', default_values_t = [GET_USERS_CPU_US_PER_USER, CREATE_CPU_US_PER_EMAIL, CPU_US_PER_EMAIL])]
    pub cpu_us: Vec<f64>,
    /// Environments at once from the start instead of Lambda's scaling (five, then 300 more
    /// a minute).
    #[arg(long)]
    pub no_ramp: bool,
    /// Answer times, low and high, ms: SQS, DynamoDB, MongoDB, SES.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 30])]
    pub sqs_latency_ms: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_values_t = [5, 15])]
    pub store_latency_ms: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_values_t = [1, 5])]
    pub mongo_latency_ms: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_values_t = [30, 80])]
    pub ses_latency_ms: Vec<u64>,
}

impl PipelineOptions {
    /// The template's earlier fixed sizing: GetUsers at 256 MB with 8 batches in flight,
    /// CreateEmails at 256 MB in batches of 10 on at most 5 environments.
    pub fn before(mut self) -> Self {
        self.get_users_memory_mb = 256;
        self.enqueue_concurrency = 8;
        self.create_memory_mb = 256;
        self.users_batch = 10;
        self.create_concurrency = 5;
        self
    }
}

/// Each stage's throughput over the campaign's steady state (the 10th to the 90th
/// percentile of the emails sent), emails or users per second; none for a stage that was
/// done before the steady state ended.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageRates {
    pub get_users: Option<f64>,
    pub create_emails: Option<f64>,
    pub send_email: f64,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineReport {
    pub users: usize,
    pub quota: f64,
    pub get_users_memory_mb: u32,
    pub enqueue_concurrency: usize,
    pub create_memory_mb: u32,
    pub users_batch: usize,
    pub create_environments: u32,
    pub send_memory_mb: u32,
    pub send_batch: usize,
    pub send_environments: u32,
    pub first_email_s: f64,
    pub last_email_s: f64,
    /// From the first email to the last.
    pub first_to_last_s: f64,
    /// When GetUsers had enqueued its last user.
    pub fan_out_s: f64,
    /// Emails/s between the 10th and the 90th percentile of the acceptances, as a share of
    /// the quota.
    pub steady_share: f64,
    pub rates: StageRates,
    /// What bounds the campaign: `SES quota`, `GetUsers`, `CreateEmails` or `SendEmail`.
    pub bound: String,
    /// Emails accepted each second, as a share of the quota.
    pub quota_use: Vec<f64>,
    /// Users waiting on the users queue and jobs on the emails queue, each second.
    pub users_queued: Vec<usize>,
    pub emails_queued: Vec<usize>,
    pub throttles: usize,
    pub lost: usize,
    pub sent_twice: usize,
    pub dead_lettered: usize,
}

fn millis(range: &[u64]) -> Result<(Duration, Duration)> {
    match range {
        [low, high] if low <= high => {
            Ok((Duration::from_millis(*low), Duration::from_millis(*high)))
        }
        other => bail!("a latency range is two numbers of ms, low then high: not {other:?}"),
    }
}

/// The CPU a given memory buys, per email, for work that takes `us` on a whole vCPU.
fn cpu_time(us: f64, memory_mb: u32) -> Duration {
    Duration::from_secs_f64(us / 1e6 * MB_PER_VCPU / f64::from(memory_mb.max(1)))
}

/// A queue as a stage sends to it: each message costs the sending environment `per_message`
/// of its CPU (one piece of work at a time), the call takes SQS's round trip, and each
/// message sent is timed. An emails queue keeps only what SendEmail needs of each job (its
/// rendered parts are dropped once made: a million of them would not fit in memory; their
/// cost to SendEmail is in its modelled CPU).
struct Sending {
    queue: Arc<LabQueue>,
    cpu: Arc<Cpu>,
    per_message: Duration,
    latency: (Duration, Duration),
    slim: bool,
    sent: Arc<Mutex<Vec<Instant>>>,
}

impl Sending {
    async fn charge(&self, messages: usize) {
        self.cpu.spend(self.per_message * messages as u32).await;
        let (low, high) = self.latency;
        let spread = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()) as f64
            / 1e9;
        tokio::time::sleep(low + (high - low).mul_f64(spread)).await;
    }

    fn bodies(&self, bodies: &[String]) -> Vec<String> {
        if !self.slim {
            return bodies.to_vec();
        }
        bodies
            .iter()
            .map(|body| match parse_body::<EmailJob>(Some(body)) {
                Ok(mut job) => {
                    job.html = "<p>(rendered)</p>".into();
                    job.text = "(rendered)".into();
                    serde_json::to_string(&job).unwrap_or_else(|_| body.clone())
                }
                Err(_) => body.clone(),
            })
            .collect()
    }

    fn timed(&self, n: usize) {
        let now = Instant::now();
        mailflow::runtime::lock(&self.sent).extend(std::iter::repeat_n(now, n));
    }
}

impl OutgoingQueue for Sending {
    async fn send_batch(&self, bodies: &[String]) -> Result<SendReport, QueueError> {
        self.charge(bodies.len()).await;
        let report = self.queue.send_batch(&self.bodies(bodies)).await?;
        self.timed(bodies.len());
        Ok(report)
    }

    async fn send_batch_delayed(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> Result<SendReport, QueueError> {
        self.charge(bodies.len()).await;
        let report = (self.queue)
            .send_batch_delayed(&self.bodies(bodies), delay_seconds)
            .await?;
        self.timed(bodies.len());
        Ok(report)
    }
}

impl ConsumedQueue for Sending {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        self.queue.change_visibility(receipt_handle, delay).await
    }
}

/// Lambda's scaling of an SQS event source mapping: five concurrent batches at first, then
/// up to 300 more a minute, never above MaximumConcurrency.
#[derive(Clone, Copy)]
struct Ramp {
    started: Instant,
    ramp: bool,
}

impl Ramp {
    fn allows(&self, environment: u32) -> bool {
        let more = (self.started.elapsed().as_secs_f64() * 5.0).floor() as u32;
        !self.ramp || environment < 5 + more
    }
}

/// One environment's poller: receives a batch, invokes, settles (partial batch response),
/// until `done`.
fn poll<F, Fut>(
    queue: Arc<LabQueue>,
    batch: usize,
    environment: u32,
    ramp: Ramp,
    latency: (Duration, Duration),
    done: Arc<AtomicBool>,
    invoke: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(SqsEvent) -> Fut + Send + 'static,
    Fut: Future<Output = Vec<String>> + Send,
{
    tokio::spawn(async move {
        while !done.load(Ordering::Relaxed) {
            if !ramp.allows(environment) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            // The poller's ReceiveMessage round trip.
            tokio::time::sleep(latency.0).await;
            // Past the in-flight quota a long poll gets nothing (a short one, OverLimit).
            let event = queue.receive(batch).unwrap_or_default();
            if event.records.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let failed = invoke(event.clone()).await;
            queue.settle(&event, &failed);
        }
    })
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
fn start_get_users(
    options: &PipelineOptions,
    directory: LabDirectory,
    users: Arc<LabQueue>,
    enqueued: Arc<Mutex<Vec<Instant>>>,
    per_user: Duration,
    sqs: (Duration, Duration),
) -> Result<tokio::task::JoinHandle<Result<(), mailflow::stages::get_users::GetUsersError>>> {
    let cpu = Arc::new(Cpu::default());
    let queue = |queue: Arc<LabQueue>, per_message, sent: Arc<Mutex<Vec<Instant>>>| Sending {
        queue,
        cpu: cpu.clone(),
        per_message,
        latency: sqs,
        slim: false,
        sent,
    };
    let stage = GetUsers::new(
        directory,
        queue(users, per_user, enqueued),
        queue(
            Arc::new(LabQueue::new(Duration::from_secs(900), 5)),
            Duration::ZERO,
            Arc::default(),
        ),
        MemoryCampaigns::default(),
        MemoryWaitingRoom::default(),
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
    Ok(tokio::spawn(async move {
        let invocation = Invocation::with_timeout("get-users-1", Duration::from_secs(900));
        let event = serde_json::json!({ "campaignId": "weekly-2026-W47" });
        stage.handle(event, &invocation).await.map(|_| ())
    }))
}

/// GetUsers alone: users per second from its start to its last user enqueued.
pub async fn fan_out_rate(options: &PipelineOptions) -> Result<f64> {
    let [get_cpu, ..] = options.cpu_us[..] else {
        bail!("--cpu-us takes three figures: GetUsers, CreateEmails, SendEmail");
    };
    let users = Arc::new(LabQueue::new(Duration::from_secs(360), 5));
    let enqueued = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    start_get_users(
        options,
        LabDirectory::new(options.users, millis(&options.mongo_latency_ms)?),
        users,
        enqueued.clone(),
        cpu_time(get_cpu, options.get_users_memory_mb),
        millis(&options.sqs_latency_ms)?,
    )?
    .await?
    .map_err(|e| anyhow::anyhow!("GetUsers failed: {e}"))?;
    let done = mailflow::runtime::lock(&enqueued).len();
    Ok(done as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

fn failures(response: &aws_lambda_events::event::sqs::SqsBatchResponse) -> Vec<String> {
    (response.batch_item_failures.iter())
        .map(|f| f.item_identifier.clone())
        .collect()
}

const SECRET: &str = "a-lab-secret-long-enough-for-the-signer-0123456789";

/// One campaign through the three stages.
pub async fn run_one(options: &PipelineOptions, seed: u64) -> Result<PipelineReport> {
    let [get_cpu, create_cpu, send_cpu] = options.cpu_us[..] else {
        bail!("--cpu-us takes three figures: GetUsers, CreateEmails, SendEmail");
    };
    let (sqs, store, mongo, ses_latency) = (
        millis(&options.sqs_latency_ms)?,
        millis(&options.store_latency_ms)?,
        millis(&options.mongo_latency_ms)?,
        millis(&options.ses_latency_ms)?,
    );
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

    let directory = LabDirectory::new(options.users, mongo);
    // Visibility timeouts and receive counts as the template sets them.
    let users = Arc::new(LabQueue::new(Duration::from_secs(360), 5));
    let emails = Arc::new(LabQueue::new(Duration::from_secs(180), 10));
    let enqueued = Arc::new(Mutex::new(Vec::new()));
    let composed = Arc::new(Mutex::new(Vec::new()));
    let ses = Arc::new(StandInSes::new(quota, ses_latency, seed));
    let ledger = Arc::new(MemoryLedger::default());
    let rate_item = Arc::new(ItemLimit::new(MemoryRateBucket::default(), seed));
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let ramp = Ramp {
        started,
        ramp: !options.no_ramp,
    };
    let mut tasks = Vec::new();

    // GetUsers: one invocation, started by the schedule.
    let get_users = start_get_users(
        options,
        directory.clone(),
        users.clone(),
        enqueued.clone(),
        cpu_time(get_cpu, options.get_users_memory_mb),
        sqs,
    )?;

    // CreateEmails' environments on the users queue.
    for environment in 0..create_environments {
        let cpu = Arc::new(Cpu::default());
        let stage = Arc::new(CreateEmails::new(
            directory.clone(),
            Sending {
                queue: emails.clone(),
                cpu,
                per_message: cpu_time(create_cpu, options.create_memory_mb),
                latency: sqs,
                slim: true,
                sent: composed.clone(),
            },
            MemoryCampaigns::default(),
            // No pending one-click unsubscribes (their one BatchGetItem per batch is not
            // modelled).
            mailflow::ports::memory::MemoryRecords::default(),
            Renderer::new("en")?,
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
            users.clone(),
            options.users_batch,
            environment,
            ramp,
            sqs,
            done.clone(),
            move |event| {
                let stage = stage.clone();
                async move { failures(&stage.handle(event).await.0) }
            },
        ));
    }

    // SendEmail's environments on the emails queue, sharing the rate item.
    let send_config = config(
        SendEmailConfig::from_source,
        &[
            ("MONGODB_URI", "mongodb://127.0.0.1:1".into()),
            ("SENDS_TABLE_NAME", "lab-sends".into()),
            ("CAMPAIGNS_TABLE_NAME", "lab-campaigns".into()),
            ("EMAILS_QUEUE_URL", "lab-emails".into()),
            ("SENDER_ADDRESS", "lab@example.com".into()),
            ("SEND_RATE_PER_SECOND", quota.to_string()),
            ("VISIBILITY_TIMEOUT_SECONDS", "180".into()),
            ("FUNCTION_TIMEOUT_SECONDS", "30".into()),
            ("RECORD_CONCURRENCY", send_batch.to_string()),
            (
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
                options.send_memory_mb.to_string(),
            ),
        ]
        .into_iter()
        .chain(crate::rate::waiting_room_vars())
        .collect::<Vec<_>>(),
    )?;
    for environment in 0..send_environments {
        let stage = Arc::new(SendEmail::new(
            Slow::new(ledger.clone(), store),
            Computing::new(Ses(ses.clone()), cpu_time(send_cpu, options.send_memory_mb)),
            Slow::new(emails.clone(), store),
            MemoryCampaigns::default(),
            Slow::new(rate_item.clone(), store),
            MemoryWaitingRoom::default(),
            // A waited email's standing: one MongoDB round trip (the pending leave's
            // GetItem is not modelled, as in CreateEmails).
            Wanted {
                users: directory.clone(),
                pending: mailflow::ports::memory::MemoryRecords::default(),
            },
            send_config.clone(),
        ));
        let invocations = Arc::new(std::sync::atomic::AtomicU64::new(0));
        tasks.push(poll(
            emails.clone(),
            send_batch,
            environment,
            ramp,
            sqs,
            done.clone(),
            move |event| {
                let (stage, invocations) = (stage.clone(), invocations.clone());
                async move {
                    let n = invocations.fetch_add(1, Ordering::Relaxed);
                    let invocation = Invocation::with_timeout(
                        format!("send{environment}-{n}"),
                        Duration::from_secs(30),
                    );
                    failures(&stage.handle(event, &invocation).await.0)
                }
            },
        ));
    }

    // Until every email is accepted (or the time limit), sampling the queues each second.
    let limit = Duration::from_secs_f64(options.users as f64 / quota * 10.0 + 300.0);
    let (mut users_queued, mut emails_queued) = (Vec::new(), Vec::new());
    let mut next_sample = started;
    loop {
        let accepted = ses.accepted_count();
        if accepted >= options.users || started.elapsed() > limit {
            break;
        }
        if Instant::now() >= next_sample {
            users_queued.push(users.left().0);
            emails_queued.push(emails.left().0);
            next_sample += Duration::from_secs(1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    get_users
        .await?
        .map_err(|e| anyhow::anyhow!("GetUsers failed: {e}"))?;

    let seen = ses.seen();
    let mut times: Vec<Instant> = seen.accepted.values().flatten().copied().collect();
    times.sort();
    if times.is_empty() {
        bail!("no email was sent in {:.0} s", limit.as_secs_f64());
    }
    let at = |share: f64| times[((times.len() - 1) as f64 * share).round() as usize];
    let (from, to) = (at(0.1), at(0.9));
    // A stage's throughput over the steady state, or none where it was done before the
    // steady state ended (it ran ahead of the emails, so it held nothing back).
    let rate_between = |events: &[Instant]| {
        let n = events.iter().filter(|t| **t >= from && **t <= to).count();
        let working = events.last().is_some_and(|last| *last >= to);
        working.then(|| n as f64 / (to - from).as_secs_f64().max(1e-9))
    };
    let enqueued = mailflow::runtime::lock(&enqueued).clone();
    let composed = mailflow::runtime::lock(&composed).clone();
    let rates = StageRates {
        get_users: rate_between(&enqueued),
        create_emails: rate_between(&composed),
        send_email: rate_between(&times).unwrap_or_default(),
    };
    let secs = |t: Instant| (t - started).as_secs_f64();
    let mut quota_use = vec![0.0; secs(*times.last().expect("sent")).ceil() as usize + 1];
    for t in &times {
        quota_use[secs(*t) as usize] += 1.0 / quota;
    }
    let (_, dead_lettered) = emails.left();
    Ok(PipelineReport {
        users: options.users,
        quota,
        get_users_memory_mb: options.get_users_memory_mb,
        enqueue_concurrency: options.enqueue_concurrency,
        create_memory_mb: options.create_memory_mb,
        users_batch: options.users_batch,
        create_environments,
        send_memory_mb: options.send_memory_mb,
        send_batch,
        send_environments,
        first_email_s: secs(times[0]),
        last_email_s: secs(*times.last().expect("sent")),
        first_to_last_s: (*times.last().expect("sent") - times[0]).as_secs_f64(),
        fan_out_s: enqueued.last().map_or(0.0, |t| secs(*t)),
        steady_share: rates.send_email / quota,
        bound: bound(&rates, quota).to_string(),
        rates,
        quota_use,
        users_queued,
        emails_queued,
        throttles: seen.throttled.len(),
        lost: options.users.saturating_sub(seen.accepted.len()),
        sent_twice: seen.accepted.values().filter(|t| t.len() > 1).count(),
        dead_lettered,
    })
}

/// The stage that holds the campaign back: SES's quota when the emails go at it; otherwise
/// the first stage, in the pipeline's order, that runs no faster than the emails go (the
/// stages after it wait for it), or SendEmail itself.
fn bound(rates: &StageRates, quota: f64) -> &'static str {
    let sending = rates.send_email;
    let holds_back = |rate: Option<f64>| rate.is_some_and(|r| r <= 1.05 * sending);
    if sending >= 0.95 * quota {
        "SES quota"
    } else if holds_back(rates.get_users) {
        "GetUsers"
    } else if holds_back(rates.create_emails) {
        "CreateEmails"
    } else {
        "SendEmail"
    }
}

/// `runs` campaigns, each on a paused current-thread runtime of its own (virtual time).
pub async fn run(options: &PipelineOptions) -> Result<Vec<PipelineReport>> {
    let options = options.clone();
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        runtime.block_on(async {
            mailflow::runtime::clock::follow_tokio_clock();
            let mut reports = Vec::new();
            for run in 0..options.runs {
                let report = run_one(&options, u64::from(run))
                    .await
                    .with_context(|| format!("run {}", run + 1))?;
                tracing::info!(?report, "pipeline run done");
                reports.push(report);
            }
            Ok(reports)
        })
    })
    .await?
}

fn range(values: impl Iterator<Item = f64>, digits: usize) -> String {
    let values: Vec<f64> = values.collect();
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (low, high) = (format!("{low:.digits$}"), format!("{high:.digits$}"));
    if low == high {
        low
    } else {
        format!("{low}-{high}")
    }
}

/// The runs as Markdown: a table of the figures (ranges over runs) and the first run's
/// quota use, second by second.
pub fn markdown(reports: &[PipelineReport]) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let f = |get: fn(&PipelineReport) -> f64, digits| range(reports.iter().map(get), digits);
    let mut out = format!(
        "{} users at {}/s, {} run(s). GetUsers {} MB, {} batches in flight; CreateEmails {} MB, batches of {}, {} environments; SendEmail {} MB, batches of {}, {} environments.\n\n",
        first.users,
        first.quota,
        reports.len(),
        first.get_users_memory_mb,
        first.enqueue_concurrency,
        first.create_memory_mb,
        first.users_batch,
        first.create_environments,
        first.send_memory_mb,
        first.send_batch,
        first.send_environments,
    );
    out.push_str("| figure | value |\n|---|---|\n");
    let rows: [(&str, String); 12] = [
        ("first email (s from the start)", f(|r| r.first_email_s, 1)),
        ("last email (s from the start)", f(|r| r.last_email_s, 1)),
        ("first to last email (s)", f(|r| r.first_to_last_s, 1)),
        ("GetUsers done (s)", f(|r| r.fan_out_s, 1)),
        ("steady send rate / quota", f(|r| r.steady_share, 2)),
        (
            "GetUsers users/s (steady; 0: done before it ended)",
            f(|r| r.rates.get_users.unwrap_or_default(), 0),
        ),
        (
            "CreateEmails emails/s (steady; 0: done before it ended)",
            f(|r| r.rates.create_emails.unwrap_or_default(), 0),
        ),
        ("SendEmail emails/s (steady)", f(|r| r.rates.send_email, 0)),
        ("SES throttles", f(|r| r.throttles as f64, 0)),
        (
            "lost / sent twice / dead-lettered",
            format!(
                "{} / {} / {}",
                f(|r| r.lost as f64, 0),
                f(|r| r.sent_twice as f64, 0),
                f(|r| r.dead_lettered as f64, 0)
            ),
        ),
        ("bound", {
            let mut bounds: Vec<&str> = reports.iter().map(|r| r.bound.as_str()).collect();
            bounds.dedup();
            bounds.join(", ")
        }),
        (
            "peak users queued / emails queued",
            format!(
                "{} / {}",
                f(
                    |r| r.users_queued.iter().copied().max().unwrap_or(0) as f64,
                    0
                ),
                f(
                    |r| r.emails_queued.iter().copied().max().unwrap_or(0) as f64,
                    0
                )
            ),
        ),
    ];
    for (name, value) in rows {
        out.push_str(&format!("| {name} | {value} |\n"));
    }
    out.push_str("\nQuota use each second (first run): ");
    let shares: Vec<String> = first.quota_use.iter().map(|s| format!("{s:.2}")).collect();
    out.push_str(&shares.join(" "));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        options: PipelineOptions,
    }

    /// GetUsers drives its SendMessageBatch calls while the audience reads its next cursor
    /// batch (MongoDB 10 ms and SQS 20 ms away, CPU not modelled): 16,300 users/s, where
    /// calls that waited out each getMore made 13,800.
    #[tokio::test(start_paused = true)]
    async fn get_users_sends_while_its_cursor_reads() {
        mailflow::runtime::clock::follow_tokio_clock();
        let mut options = Defaults::parse_from(["lab"]).options;
        options.users = 20_000;
        options.cpu_us = vec![0.0, 0.0, 0.0];
        options.mongo_latency_ms = vec![10, 10];
        options.sqs_latency_ms = vec![20, 20];
        let rate = fan_out_rate(&options).await.unwrap();
        assert!(rate > 15_000.0, "{rate:.0} users/s");
    }

    /// GetUsers reads the audience up to two cursor batches ahead (`read_ahead`): at the lab's
    /// defaults its CPU (40 µs a user on its one vCPU) allows 25,000 users/s, and it makes
    /// more than 20,000, where reading in line, every getMore's round trip stopping the
    /// enqueueing, made 19,900 (100,000 users; 24,100 with the read-ahead).
    #[tokio::test(start_paused = true)]
    async fn get_users_reads_the_audience_ahead_of_its_sends() {
        mailflow::runtime::clock::follow_tokio_clock();
        let mut options = Defaults::parse_from(["lab"]).options;
        options.users = 40_000;
        let rate = fan_out_rate(&options).await.unwrap();
        assert!(rate > 20_000.0, "{rate:.0} users/s");
    }

    /// The same campaign under the template's sizing and under the sizing before it: the
    /// quota bounds the first; five CreateEmails environments at 256 MB (about 470-480/s,
    /// well under the 1,200/s quota) bound the second. (Small, so that debug builds run it:
    /// the environments start at once. At 600/s the two were too close to tell apart: the
    /// composing could end before the sending's last tenth, and the run named SendEmail.)
    #[tokio::test]
    async fn the_quota_bounds_a_campaign_where_create_emails_did_before() {
        let mut options = Defaults::parse_from(["lab"]).options;
        options.users = 1_000;
        options.quota = 1_200.0;
        options.no_ramp = true;
        let now = run(&options).await.unwrap().remove(0);
        assert_eq!(now.bound, "SES quota", "{now:?}");
        assert!(now.steady_share >= 0.95, "{now:?}");
        let before = run(&options.clone().before()).await.unwrap().remove(0);
        assert_eq!(before.bound, "CreateEmails", "{before:?}");
        assert!(before.steady_share < 0.9, "{before:?}");
        for report in [&now, &before] {
            assert_eq!(
                (report.lost, report.sent_twice, report.dead_lettered),
                (0, 0, 0),
                "{report:?}"
            );
        }
    }
}

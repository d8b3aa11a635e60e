//! `mailctl pipeline`: a whole campaign at rates the local stack cannot reach, in virtual
//! time. The real GetUsers, CreateEmails and SendEmail stages run over in-memory ports: a
//! synthetic audience behind MongoDB's round trips (`directory`), the users and emails
//! queues with SQS's semantics, the ledger and rate item behind DynamoDB's, and the SES
//! stand-in that throttles beyond its quota and, if given one, its 24-hour quota. Each
//! execution environment has the CPU share its memory buys (Lambda's 1,769 MB a vCPU) and
//! spends each stage's measured CPU per email on it, one at a time (`sending`); the event
//! source mappings long-poll and add environments as Lambda's do (five at first, then up to
//! 300 more a minute; `polling`). `stages` wires the three stages to one campaign's ports.
//! It reports when the first and the last email went, the quota's use second by second,
//! each stage's throughput and which of them bounds the campaign (`report`, `markdown`). With
//! `--local-time`, a local-time campaign's holds and releases through the waiting table as
//! DynamoDB serves it (`local_time`, `waiting`), and with `--through-sending` on through the
//! stages to SES (`local_sending`).

pub(crate) mod directory;
mod events;
mod local_sending;
pub mod local_time;
mod markdown;
pub(crate) mod polling;
#[cfg(test)]
mod quiet_hours;
mod report;
mod rig;
mod sending;
mod sends_table;
mod stages;
mod waiting;

pub use markdown::markdown;
pub use report::{PipelineReport, StageRates};
pub use sends_table::{IndexDesign, SendsTableReport, TableQuota};

use crate::rate::latency::millis;
use crate::rate::queue::LabQueue;
use anyhow::{bail, Context, Result};
use directory::LabDirectory;
use mailflow::domain::aws_limits::LAMBDA_ACCOUNT_CONCURRENCY;
use mailflow::domain::events_path::Handler;
use mailflow::domain::fan_out::{CREATE_CPU_US_PER_EMAIL, GET_USERS_CPU_US_PER_USER};
use mailflow::domain::send_rate::CPU_US_PER_EMAIL;
use report::{report, steady_rates, Observed};
use sending::cpu_time;
use stages::{start_get_users, start_stages_after_get_users, Rig, Sizing};
use std::sync::atomic::Ordering;
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
    /// SES's 24-hour quota (`Max24HourSend`), emails; none: more than the run sends.
    #[arg(long)]
    pub ses_daily_quota: Option<usize>,
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
    #[command(flatten)]
    pub local_time: local_time::LocalTimeOptions,
    /// SES's events: the region (EventBridge's invocation quota), SEND events published too
    /// (the design before), SesEvents' memory (MB) and concurrency (0: as RateControl sizes
    /// it, `events_path::handlers_for`), and Lambda's concurrency in the account.
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    #[arg(long)]
    pub send_events: bool,
    #[arg(long, default_value_t = Handler::DEFAULT.memory_mb)]
    pub events_memory_mb: u32,
    #[arg(long, default_value_t = 0)]
    pub events_concurrency: u32,
    #[arg(long, default_value_t = LAMBDA_ACCOUNT_CONCURRENCY)]
    pub account_concurrency: u32,
    /// The sends table's write quota (and its index's): DynamoDB's default, a new on-demand
    /// table's, or the raised one docs/deploying.md asks for.
    #[arg(long, value_enum, default_value_t = TableQuota::Default)]
    pub sends_table_quota: TableQuota,
    /// Which writes put a record in the campaign index: as the adapter does (sparse), or
    /// the design before it (every write, 16 shards).
    #[arg(long, value_enum, default_value_t = IndexDesign::Sparse)]
    pub sends_index: IndexDesign,
}

impl PipelineOptions {
    /// The template's earlier sizing: GetUsers at 256 MB with 8 batches in flight,
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

/// One campaign through the three stages.
pub async fn run_one(options: &PipelineOptions, seed: u64) -> Result<PipelineReport> {
    let [get_cpu, ..] = options.cpu_us[..] else {
        bail!("--cpu-us takes three figures: GetUsers, CreateEmails, SendEmail");
    };
    refuse_zero_daily_quota(options)?;
    let sizing = Sizing::of(options);
    let started = Instant::now();
    let rig = Rig::new(options, seed, started)?;
    let enqueued = Arc::new(Mutex::new(Vec::new()));
    let composed = Arc::new(Mutex::new(Vec::new()));

    // GetUsers: one invocation, started by the schedule.
    let get_users = start_get_users(
        options,
        rig.directory.clone(),
        rig.users.clone(),
        enqueued.clone(),
        cpu_time(get_cpu, options.get_users_memory_mb),
        rig.sqs,
    )?;
    let tasks = start_stages_after_get_users(&rig, options, &sizing, seed, composed.clone())?;

    // Until every email is accepted (or the time limit), sampling the queues each second.
    let limit = sending_limit(options, options.users, 300.0);
    let (users_queued, emails_queued) = rig.sample_until_sent(options.users, started, limit).await;
    rig.drain_events(Duration::from_secs(600)).await;
    rig.done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    get_users
        .await?
        .map_err(|e| anyhow::anyhow!("GetUsers failed: {e}"))?;

    let seen = rig.ses.seen();
    let mut sent: Vec<Instant> = seen.accepted.values().flatten().copied().collect();
    sent.sort();
    if sent.is_empty() {
        bail!("no email was sent in {:.0} s", limit.as_secs_f64());
    }
    let enqueued = mailflow::runtime::lock(&enqueued).clone();
    let composed = mailflow::runtime::lock(&composed).clone();
    let sends_table = rig.sends.report(seen.accepted.keys());
    Ok(report(
        options,
        &sizing,
        Observed {
            started,
            rates: steady_rates(&sent, &enqueued, &composed),
            fan_out: enqueued.last().copied(),
            users_queued,
            emails_queued,
            throttles: seen.throttled.len(),
            over_daily_quota: seen.over_daily_quota.len(),
            lost: options.users.saturating_sub(seen.accepted.len()),
            sent_twice: seen.accepted.values().filter(|t| t.len() > 1).count(),
            dead_lettered: rig.emails.left().1,
            sent,
            events: (rig.events).report(sizing.events_environments, &rig.account),
            sends_table,
        },
    ))
}

/// A zero 24-hour quota sends nothing: refused rather than waited out.
fn refuse_zero_daily_quota(options: &PipelineOptions) -> Result<()> {
    if options.ses_daily_quota == Some(0) {
        bail!("--ses-daily-quota 0 would send nothing: give at least 1, or leave it out for no 24-hour quota");
    }
    Ok(())
}

/// How long `emails` may take to be accepted: ten times the quota's pace and `margin`
/// seconds; past a 24-hour quota, a day more for each quota's worth, and up to 90 minutes
/// for its hold (an hour, or 15 minutes as a fresh copy) to end.
fn sending_limit(options: &PipelineOptions, emails: usize, margin: f64) -> Duration {
    let days = options
        .ses_daily_quota
        .map_or(0, |max| emails.saturating_sub(1) / max.max(1));
    Duration::from_secs_f64(
        emails as f64 / options.quota * 10.0 + margin + days as f64 * (86_400.0 + 5_400.0),
    )
}

/// `runs` campaigns, each on a paused current-thread runtime of its own (virtual time).
pub async fn run(options: &PipelineOptions) -> Result<Vec<PipelineReport>> {
    runs(options, |options, seed| async move {
        run_one(&options, seed).await
    })
    .await
}

/// `runs` local-time campaigns (`local_time`), each on a paused runtime of its own.
pub async fn run_local_time(options: &PipelineOptions) -> Result<Vec<local_time::LocalTimeReport>> {
    runs(options, |options, seed| async move {
        local_time::run_one(&options, seed).await
    })
    .await
}

/// `one` run `runs` times, each on a paused current-thread runtime (virtual time) that the
/// stages' clock follows.
async fn runs<R, F, Fut>(options: &PipelineOptions, one: F) -> Result<Vec<R>>
where
    R: std::fmt::Debug + Send + 'static,
    F: Fn(PipelineOptions, u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<R>>,
{
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
                let report = one(options.clone(), u64::from(run))
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

#[cfg(test)]
mod tests;

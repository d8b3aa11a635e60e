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
//! each stage's throughput and which of them bounds the campaign (`markdown`). With
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
mod sending;
mod sends_table;
mod stages;
mod waiting;

pub use markdown::markdown;
pub use sends_table::{IndexDesign, SendsTableReport, TableQuota};

use crate::rate::latency::millis;
use crate::rate::queue::LabQueue;
use anyhow::{bail, Context, Result};
use directory::LabDirectory;
use mailflow::domain::aws_limits::LAMBDA_ACCOUNT_CONCURRENCY;
use mailflow::domain::events_path::Handler;
use mailflow::domain::fan_out::{CREATE_CPU_US_PER_EMAIL, GET_USERS_CPU_US_PER_USER};
use mailflow::domain::send_rate::CPU_US_PER_EMAIL;
use sending::cpu_time;
use serde::Serialize;
use stages::{start_create_emails, start_get_users, start_send_email, Rig, Sizing};
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
    /// Sends SES refused because the 24-hour quota was used up.
    pub over_daily_quota: usize,
    pub lost: usize,
    pub sent_twice: usize,
    pub dead_lettered: usize,
    /// SES's events through EventBridge to SesEvents, and the account's concurrency.
    pub events: events::EventsReport,
    pub sends_table: SendsTableReport,
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
    let [get_cpu, create_cpu, send_cpu] = options.cpu_us[..] else {
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
    let mut tasks = start_create_emails(
        &rig,
        options,
        sizing.create_environments,
        cpu_time(create_cpu, options.create_memory_mb),
        composed.clone(),
    )?;
    let per_send = cpu_time(send_cpu, options.send_memory_mb);
    tasks.extend(start_send_email(&rig, options, &sizing, per_send, seed)?);
    tasks.extend(rig.events.start_handlers(
        sizing.events_environments,
        sizing.handler,
        rig.ramp.clone(),
        rig.sqs,
        rig.store,
        rig.done.clone(),
        &rig.account,
    )?);

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
    let sends_table = rig.sends.report(seen.accepted.keys()).await;
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

/// What a campaign's run saw: its acceptances in order (at least one), each stage's
/// throughput, when GetUsers was done, the queues each second and the counts.
struct Observed {
    started: Instant,
    sent: Vec<Instant>,
    rates: StageRates,
    fan_out: Option<Instant>,
    users_queued: Vec<usize>,
    emails_queued: Vec<usize>,
    throttles: usize,
    over_daily_quota: usize,
    lost: usize,
    sent_twice: usize,
    dead_lettered: usize,
    events: events::EventsReport,
    sends_table: SendsTableReport,
}

/// Each stage's throughput over the steady state (the 10th to the 90th percentile of the
/// acceptances `sent`, in order), from the times it enqueued or composed.
fn steady_rates(sent: &[Instant], enqueued: &[Instant], composed: &[Instant]) -> StageRates {
    let at = |share: f64| sent[((sent.len() - 1) as f64 * share).round() as usize];
    let (from, to) = (at(0.1), at(0.9));
    // A stage's throughput over the steady state, or none where it was done before the
    // steady state ended (it ran ahead of the emails, so it held nothing back).
    let rate_between = |events: &[Instant]| {
        let n = events.iter().filter(|t| **t >= from && **t <= to).count();
        let working = events.last().is_some_and(|last| *last >= to);
        working.then(|| n as f64 / (to - from).as_secs_f64().max(1e-9))
    };
    StageRates {
        get_users: rate_between(enqueued),
        create_emails: rate_between(composed),
        send_email: rate_between(sent).unwrap_or_default(),
    }
}

fn report(options: &PipelineOptions, sizing: &Sizing, seen: Observed) -> PipelineReport {
    let quota = options.quota;
    let secs = |t: Instant| (t - seen.started).as_secs_f64();
    let (first, last) = (seen.sent[0], *seen.sent.last().expect("sent"));
    let mut quota_use = vec![0.0; secs(last).ceil() as usize + 1];
    for t in &seen.sent {
        quota_use[secs(*t) as usize] += 1.0 / quota;
    }
    PipelineReport {
        users: options.users,
        quota,
        get_users_memory_mb: options.get_users_memory_mb,
        enqueue_concurrency: options.enqueue_concurrency,
        create_memory_mb: options.create_memory_mb,
        users_batch: options.users_batch,
        create_environments: sizing.create_environments,
        send_memory_mb: options.send_memory_mb,
        send_batch: sizing.send_batch,
        send_environments: sizing.send_environments,
        first_email_s: secs(first),
        last_email_s: secs(last),
        first_to_last_s: (last - first).as_secs_f64(),
        fan_out_s: seen.fan_out.map_or(0.0, secs),
        steady_share: seen.rates.send_email / quota,
        bound: bound(&seen.rates, quota).to_string(),
        rates: seen.rates,
        quota_use,
        users_queued: seen.users_queued,
        emails_queued: seen.emails_queued,
        throttles: seen.throttles,
        over_daily_quota: seen.over_daily_quota,
        lost: seen.lost,
        sent_twice: seen.sent_twice,
        dead_lettered: seen.dead_lettered,
        events: seen.events,
        sends_table: seen.sends_table,
    }
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

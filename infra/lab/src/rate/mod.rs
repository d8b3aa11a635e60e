//! `mailctl rate`: the send rate under SES's own enforcement, at rates the local stack
//! cannot reach. The real SendEmail stage runs in N execution environments over in-memory
//! ports with round-trip latencies (`latency`): an emails queue with SQS's semantics
//! (`queue`), the ledger, the stack's rate item, and an SES stand-in that allows its maximum
//! send rate and answers 429 beyond it (`standin`). Each run sends `seconds` worth of emails at
//! the quota and reports the achieved rate over the steady state, the throttles, what was lost
//! or sent twice, the time to the first email and for the last 1 %, and the rate item's
//! requests per email; `static` runs the same with the old split (each environment at quota /
//! N, nothing shared) for comparison. `campaign` holds SendEmail's settings and the backlog,
//! `markdown` the table; the claims docs/benchmarks.md makes of the matrix are tested here.

pub(crate) mod campaign;
pub(crate) mod item_limit;
pub(crate) mod latency;
pub(crate) mod markdown;
pub(crate) mod queue;
pub(crate) mod standin;

pub use markdown::markdown;

use crate::pipeline::directory::LabDirectory;
use crate::pipeline::polling::{failures, poll, Ramp};
use anyhow::Result;
use campaign::{config, jobs};
use item_limit::ItemLimit;
use latency::{millis, Computing, Slow};
use mailflow::config::SendEmailConfig;
use mailflow::domain::send_rate::{Environment, SendRate, CPU_US_PER_EMAIL, MB_PER_VCPU};
use mailflow::ports::memory::{MemoryCampaigns, MemoryLedger, MemoryRateBucket, MemoryWaitingRoom};
use mailflow::ports::RateBucket;
use mailflow::runtime::Invocation;
use mailflow::stages::send_email::{SendEmail, Wanted};
use queue::LabQueue;
use serde::Serialize;
use standin::{Ses, StandInSes};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Clone, Debug, clap::Args)]
pub struct RateOptions {
    /// SES maximum send rates to run at (emails/s); the configured rate is the same.
    #[arg(long, value_delimiter = ',', default_value = "14,100,1000")]
    pub quotas: Vec<f64>,
    /// SendEmail environments sharing the rate (0: as many as SendEmail would run for the
    /// quota, `SendRate::environments`).
    #[arg(long, value_delimiter = ',', default_value = "1,2,8,32")]
    pub environments: Vec<u32>,
    /// Records per batch, sent at once (`EmailsBatchSize`; 0: the least that keeps the rate
    /// item within its budget at the quota, `Environment::batch_for`).
    #[arg(long, default_value_t = 10)]
    pub batch: usize,
    /// SendEmail's memory in MB: each environment then has that share of a vCPU, and each
    /// email takes `cpu_us_per_email` of a whole one. Unset: CPU is not modelled.
    #[arg(long)]
    pub memory_mb: Option<u32>,
    #[arg(long, default_value_t = CPU_US_PER_EMAIL)]
    pub cpu_us_per_email: f64,
    /// Run in virtual time (tokio's paused clock: time moves only when every task waits), so
    /// that the machine's own speed does not bound the rates it can show. CPU is then only
    /// what `memory_mb` models.
    #[arg(long)]
    pub virtual_time: bool,
    /// `shared` (the rate item), `static` (each environment at quota / N), or both.
    #[arg(long, value_delimiter = ',', default_value = "shared,static")]
    pub modes: Vec<Mode>,
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Each run sends this many seconds of emails at the quota (at least 200 emails).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// SES's answer time, low and high, in ms (drawn evenly per call).
    #[arg(long, value_delimiter = ',', default_value = "30,80")]
    pub ses_latency_ms: Vec<u64>,
    /// DynamoDB's and SQS's answer time, low and high, in ms.
    #[arg(long, value_delimiter = ',', default_value = "5,15")]
    pub store_latency_ms: Vec<u64>,
    /// SES refuses every send (429) from this second of the run to the next value.
    #[arg(long, value_delimiter = ',')]
    pub outage_seconds: Vec<f64>,
    /// Instead of the matrix: one environment with no quota to speak of (2,000 emails), for
    /// the throughput one environment sustains (`BATCH_ROUND_TRIPS_S`).
    #[arg(long)]
    pub environment_throughput: bool,
}

impl Default for RateOptions {
    fn default() -> Self {
        Self {
            quotas: vec![100.0],
            environments: vec![4],
            batch: 10,
            memory_mb: None,
            cpu_us_per_email: CPU_US_PER_EMAIL,
            virtual_time: false,
            modes: vec![Mode::Shared],
            runs: 1,
            seconds: 5.0,
            ses_latency_ms: vec![30, 80],
            store_latency_ms: vec![5, 15],
            outage_seconds: Vec::new(),
            environment_throughput: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    /// One rate item for every environment (SendEmail as it is).
    Shared,
    /// Each environment paced alone at quota / environments, as before the shared rate.
    Static,
}

/// One run's figures.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    pub quota: f64,
    pub environments: u32,
    pub batch: usize,
    pub memory_mb: Option<u32>,
    pub mode: Mode,
    pub emails: usize,
    /// Emails per second between the 10th and the 90th percentile of the acceptances, as a
    /// share of the quota.
    pub steady_share: f64,
    pub throttles: usize,
    pub steady_throttles_per_1000: f64,
    pub lost: usize,
    pub sent_twice: usize,
    pub dead_lettered: usize,
    pub first_email_ms: f64,
    /// Seconds from the 99th percentile acceptance to the last.
    pub last_1pct_s: f64,
    pub total_s: f64,
    /// Rate item requests (takes, rate changes, reads) per email.
    pub rate_requests_per_email: f64,
    /// Write units the rate item billed per email, and the requests its partition's limit
    /// throttled (each one an SDK retry after a backoff).
    pub item_write_units_per_email: f64,
    pub item_throttles: u64,
    /// The shared rate at the end, as a share of the quota (1: recovered).
    pub final_rate_share: Option<f64>,
}

/// One run: `quota` emails/s, `environments` SendEmail environments, `mode`; `seconds` of
/// sending at the quota (at least 200 emails).
pub async fn run_one(
    options: &RateOptions,
    quota: f64,
    environments: u32,
    mode: Mode,
    seed: u64,
) -> Result<RunReport> {
    let emails = ((quota * options.seconds).round() as usize).max(200);
    run_emails(options, quota, environments, mode, seed, emails).await
}

/// A run's shape: its quota, its SendEmail environments and their batch, its pacing, the
/// emails it sends, and when it started.
struct Run {
    quota: f64,
    environments: u32,
    batch: usize,
    mode: Mode,
    emails: usize,
    started: Instant,
}

async fn run_emails(
    options: &RateOptions,
    quota: f64,
    environments: u32,
    mode: Mode,
    seed: u64,
    emails: usize,
) -> Result<RunReport> {
    let (ses_latency, store_latency) = (
        millis(&options.ses_latency_ms)?,
        millis(&options.store_latency_ms)?,
    );
    let mut ses = StandInSes::new(quota, ses_latency, seed);
    if let [from, to] = options.outage_seconds[..] {
        ses.refuse_between = Some((Duration::from_secs_f64(from), Duration::from_secs_f64(to)));
    }
    let batch = match options.batch {
        0 => Environment::batch_for(quota),
        batch => batch,
    };
    // Without a memory, CPU is not modelled: the round trips bound an environment.
    let environment = Environment {
        records_at_once: batch,
        memory_mb: options.memory_mb.unwrap_or(10_240),
    };
    let environments = match environments {
        0 => SendRate::configured(quota).environments(&environment),
        n => n,
    };
    let cpu_per_email = match options.memory_mb {
        Some(mb) => {
            Duration::from_secs_f64(options.cpu_us_per_email / 1e6 * MB_PER_VCPU / f64::from(mb))
        }
        None => Duration::ZERO,
    };
    let queue = Arc::new(LabQueue::new(Duration::from_secs(20), 10));
    queue.send(jobs(emails));
    let shared = Arc::new(ItemLimit::new(MemoryRateBucket::default(), seed));
    let (buckets, rate) = match mode {
        Mode::Shared => (vec![shared.clone()], quota),
        Mode::Static => (
            (0..environments)
                .map(|_| Arc::new(ItemLimit::new(MemoryRateBucket::fixed(), seed)))
                .collect(),
            quota / f64::from(environments),
        ),
    };
    let senders = Senders {
        queue,
        ses: Arc::new(ses),
        ledger: Arc::new(MemoryLedger::default()),
        store_latency,
        cpu_per_email,
        users: emails,
        batch,
        config: config(rate, &environment)?,
        done: Arc::new(AtomicBool::new(false)),
    };
    let run = Run {
        quota,
        environments,
        batch,
        mode,
        emails,
        started: Instant::now(),
    };
    let tasks: Vec<_> = (0..environments)
        .map(|number| senders.start(number, buckets[number as usize % buckets.len()].clone()))
        .collect();
    let limit = Duration::from_secs_f64(options.seconds * 20.0 + 120.0);
    while senders.queue.left().0 > 0 && run.started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    senders.done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    report(options, &run, &senders, &buckets).await
}

/// What a run's SendEmail environments share: the emails queue, SES, the ledger, the round
/// trips of DynamoDB and SQS, the CPU an email costs, their batch and settings, and the stop.
struct Senders {
    queue: Arc<LabQueue>,
    ses: Arc<StandInSes>,
    ledger: Arc<MemoryLedger>,
    store_latency: (Duration, Duration),
    cpu_per_email: Duration,
    /// The audience the waited emails' standings are read from.
    users: usize,
    batch: usize,
    config: SendEmailConfig,
    done: Arc<AtomicBool>,
}

impl Senders {
    /// Environment `number`, paced by `bucket`, polling the queue until the run is done.
    fn start(&self, number: u32, bucket: Arc<ItemLimit<MemoryRateBucket>>) -> JoinHandle<()> {
        let store_latency = self.store_latency;
        let stage = Arc::new(SendEmail::new(
            Slow::new(self.ledger.clone(), store_latency),
            Computing::new(Ses(self.ses.clone()), self.cpu_per_email),
            Slow::new(self.queue.clone(), store_latency),
            MemoryCampaigns::default(),
            Slow::new(bucket, store_latency),
            MemoryWaitingRoom::default(),
            Wanted {
                users: LabDirectory::new(self.users, store_latency),
                pending: mailflow::ports::memory::MemoryRecords::default(),
            },
            self.config.clone(),
        ));
        let invocations = Arc::new(AtomicU64::new(0));
        let everyone_at_once = Ramp::new(Instant::now(), false);
        poll(
            self.queue.clone(),
            self.batch,
            number,
            everyone_at_once,
            store_latency,
            self.done.clone(),
            move |event| {
                let (stage, invocations) = (stage.clone(), invocations.clone());
                async move {
                    let n = invocations.fetch_add(1, Ordering::Relaxed) + 1;
                    let invocation = Invocation::with_timeout(
                        format!("env{number}-{n}"),
                        Duration::from_secs(30),
                    );
                    failures(&stage.handle(event, &invocation).await.0)
                }
            },
        )
    }
}

/// The run's figures, from what SES saw, what the queue kept and the rate items' counts.
async fn report(
    options: &RateOptions,
    run: &Run,
    senders: &Senders,
    items: &[Arc<ItemLimit<MemoryRateBucket>>],
) -> Result<RunReport> {
    let (left, dead_lettered) = senders.queue.left();
    if left > 0 {
        tracing::warn!(
            left,
            "the run's time limit passed with messages still queued"
        );
    }
    let (quota, emails) = (run.quota, run.emails);
    let seen = senders.ses.seen();
    let mut times: Vec<Instant> = seen.accepted.values().flatten().copied().collect();
    times.sort();
    let sent_twice = seen.accepted.values().filter(|t| t.len() > 1).count();
    let lost = emails - seen.accepted.len();
    let at = |share: f64| times[((times.len() - 1) as f64 * share).round() as usize];
    let (from, to) = (at(0.1), at(0.9));
    let steady = (to - from).as_secs_f64();
    let steady_emails = times.iter().filter(|t| **t >= from && **t <= to).count();
    let steady_throttles = seen
        .throttled
        .iter()
        .filter(|t| **t >= from && **t <= to)
        .count();
    let total = |get: fn(&ItemLimit<MemoryRateBucket>) -> u64| -> u64 {
        items.iter().map(|item| get(item)).sum()
    };
    let requests = total(|item| item.inner.requests.load(Ordering::Relaxed));
    let write_units = total(|item| item.write_units());
    let item_throttles = total(|item| item.throttles());
    let final_rate = match run.mode {
        Mode::Shared => items[0].inner.read().await?.rate.map(|r| r.rate / quota),
        Mode::Static => None,
    };
    Ok(RunReport {
        quota,
        environments: run.environments,
        batch: run.batch,
        memory_mb: options.memory_mb,
        mode: run.mode,
        emails,
        steady_share: steady_emails.saturating_sub(1) as f64 / steady.max(1e-9) / quota,
        throttles: seen.throttled.len(),
        steady_throttles_per_1000: steady_throttles as f64 * 1000.0 / steady_emails.max(1) as f64,
        lost,
        sent_twice,
        dead_lettered,
        first_email_ms: (times[0] - run.started).as_secs_f64() * 1000.0,
        last_1pct_s: (*times.last().expect("sent") - at(0.99)).as_secs_f64(),
        total_s: (*times.last().expect("sent") - run.started).as_secs_f64(),
        rate_requests_per_email: requests as f64 / emails as f64,
        item_write_units_per_email: write_units as f64 / emails as f64,
        item_throttles,
        final_rate_share: final_rate,
    })
}

/// The matrix: every quota x environments x mode, `runs` times each; in virtual time on a
/// runtime of its own when asked (`virtual_time`).
pub async fn run(options: &RateOptions) -> Result<Vec<RunReport>> {
    if !options.virtual_time {
        return matrix(options).await;
    }
    let options = options.clone();
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        runtime.block_on(async {
            mailflow::runtime::clock::follow_tokio_clock();
            matrix(&options).await
        })
    })
    .await?
}

async fn matrix(options: &RateOptions) -> Result<Vec<RunReport>> {
    if options.environment_throughput {
        let mut reports = Vec::new();
        for run in 0..options.runs {
            let mut report =
                run_emails(options, 1e6, 1, Mode::Shared, u64::from(run), 2_000).await?;
            // No quota to speak of: the share is meaningless, the rate is the figure (quota 0
            // marks it, for `markdown`).
            report.steady_share *= report.quota;
            report.quota = 0.0;
            reports.push(report);
        }
        return Ok(reports);
    }
    let mut reports = Vec::new();
    for &quota in &options.quotas {
        for &environments in &options.environments {
            for &mode in &options.modes {
                for run in 0..options.runs {
                    let report =
                        run_one(options, quota, environments, mode, u64::from(run)).await?;
                    tracing::info!(?report, "rate run done");
                    reports.push(report);
                }
            }
        }
    }
    Ok(reports)
}

#[cfg(test)]
mod tests;

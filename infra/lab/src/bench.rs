//! `mailctl bench`: runs a seeded campaign through the real function binaries, the three
//! stages at once as in production, each stage in its own processes so it can be measured
//! alone, and reports per stage: those processes' CPU time, peak RSS, cold start, the billable
//! requests they made (metered in the functions, see `mailflow::runtime::metering`) plus the event
//! source mappings' polling (counted by the runner), MongoDB round trips, then binary sizes
//! and the cost per million emails.
//! Over 400 lines on purpose: one measured run, from building the stack to the report;
//! the cost model is `cost.rs`.

use crate::cost::{self, CostPerMillion, PerEmail};
use anyhow::{bail, Context, Result};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use mailflow_local::function_host::{CpuTime, FunctionProcess, Logs, Outcome};
use mailflow_local::names;
use mailflow_local::pipeline::{SeededStack, CREATE_EMAILS, GET_USERS, SEND_EMAIL};
use mailflow_local::runner::{self, Consumer};
use mailflow_local::stack::Stack;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct BenchOptions {
    #[arg(long, default_value_t = 10_000)]
    pub users: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Only GetUsers: the fan-out to the users queue (try --users 100000).
    #[arg(long)]
    pub get_users_only: bool,
    /// Campaign-wide send rate (emails/s); high so that our code, not the pacer, is measured.
    #[arg(long, default_value_t = 5000.0)]
    pub send_rate: f64,
    /// Where the function binaries are.
    #[arg(long, default_value_os_t = mailflow_local::repo_root().join("target/release"))]
    pub bin_dir: PathBuf,
    /// Also write each function process's log lines (the first 20,000 of each) to
    /// <dir>/<function>-<n>.log.
    #[arg(long)]
    pub logs_dir: Option<PathBuf>,
}

/// One execution environment's process, measured when it ends.
#[derive(Debug, Default)]
struct Measured {
    cpu: CpuTime,
    peak_rss: u64,
    cold_start: Option<Duration>,
    logs: Logs,
}

async fn measure(process: FunctionProcess) -> Measured {
    let cpu = process.cpu_time().unwrap_or_default();
    let peak_rss = process.peak_rss().unwrap_or_default();
    let cold_start = process.cold_start();
    Measured {
        cpu,
        peak_rss,
        cold_start,
        logs: process.finish().await,
    }
}

/// The execution environments of one function: a process each, replaced (and a new cold
/// start paid) when an invocation times out or the process dies, as on Lambda.
struct Environments {
    function: &'static str,
    binary: PathBuf,
    env: BTreeMap<String, String>,
    timeout: Duration,
    memory_mb: u32,
    slots: Vec<tokio::sync::Mutex<Option<FunctionProcess>>>,
    ended: Mutex<Vec<Measured>>,
    invocations: AtomicU64,
    billed_ms: AtomicU64,
    last_answer: Mutex<Option<Instant>>,
}

impl Environments {
    async fn start(
        stack: &Stack,
        bin_dir: &Path,
        function: &'static str,
        count: usize,
    ) -> Result<Arc<Self>> {
        let spec = stack.template.function(function)?;
        let name = spec.binary.clone().with_context(|| {
            format!("{function} has no BuildProperties.Binary in template.yaml")
        })?;
        let environments = Arc::new(Self {
            function,
            binary: bin_dir.join(&name),
            env: stack.env(function)?,
            timeout: Duration::from_secs(spec.timeout.into()),
            memory_mb: spec.memory_size,
            slots: (0..count).map(|_| tokio::sync::Mutex::new(None)).collect(),
            ended: Mutex::default(),
            invocations: AtomicU64::new(0),
            billed_ms: AtomicU64::new(0),
            last_answer: Mutex::default(),
        });
        if !environments.binary.is_file() {
            bail!(
                "{} does not exist: build the functions first (cargo build --release -p get-users -p create-emails -p send-email)",
                environments.binary.display()
            );
        }
        for slot in &environments.slots {
            *slot.lock().await = Some(environments.spawn().await?);
        }
        Ok(environments)
    }

    async fn spawn(&self) -> Result<FunctionProcess> {
        FunctionProcess::spawn(
            self.function,
            &self.binary,
            &self.env,
            self.timeout,
            self.memory_mb,
        )
        .await
    }

    /// One invocation in environment `slot`; the process is replaced if it did not answer.
    async fn invoke(&self, slot: usize, event: Value) -> Outcome {
        let mut guard = self.slots[slot % self.slots.len()].lock().await;
        let Some(process) = guard.as_ref() else {
            return Outcome::Exited;
        };
        let started = Instant::now();
        let outcome = process.invoke(event).await;
        // Lambda bills each invocation rounded up to the millisecond.
        let billed = started.elapsed().as_micros().div_ceil(1000) as u64;
        self.billed_ms.fetch_add(billed, Ordering::Relaxed);
        self.invocations.fetch_add(1, Ordering::Relaxed);
        *self.last_answer.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        if matches!(outcome, Outcome::TimedOut | Outcome::Exited) {
            if let Some(old) = guard.take() {
                let measured = measure(old).await;
                self.ended
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(measured);
            }
            match self.spawn().await {
                Ok(fresh) => *guard = Some(fresh),
                Err(err) => tracing::error!(error = %err, "cannot restart {}", self.function),
            }
        }
        outcome
    }

    fn handlers(self: &Arc<Self>) -> Vec<runner::Handler> {
        (0..self.slots.len())
            .map(|slot| {
                let environments = self.clone();
                runner::handler(move |event: SqsEvent, _invocation| {
                    let environments = environments.clone();
                    async move {
                        let ids: Vec<String> = event
                            .records
                            .iter()
                            .filter_map(|r| r.message_id.clone())
                            .collect();
                        let payload = serde_json::to_value(&event).unwrap_or_default();
                        match environments.invoke(slot, payload).await {
                            Outcome::Response(v) => serde_json::from_value(v).unwrap_or_default(),
                            // A failed invocation returns its whole batch.
                            _ => {
                                let mut response = SqsBatchResponse::default();
                                response.batch_item_failures = ids
                                    .into_iter()
                                    .map(|id| {
                                        let mut failure = BatchItemFailure::default();
                                        failure.item_identifier = id;
                                        failure
                                    })
                                    .collect();
                                response
                            }
                        }
                    }
                })
            })
            .collect()
    }

    /// Stops every process and adds up what they used.
    async fn finish(&self) -> Vec<Measured> {
        let mut all = std::mem::take(&mut *self.ended.lock().unwrap_or_else(|p| p.into_inner()));
        for slot in &self.slots {
            if let Some(process) = slot.lock().await.take() {
                all.push(measure(process).await);
            }
        }
        all
    }
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageReport {
    pub function: String,
    pub environments: usize,
    pub invocations: u64,
    pub records: usize,
    /// Records returned for a retry: reported in batchItemFailures, or the whole batch of an
    /// invocation that timed out or crashed.
    pub records_failed: usize,
    pub wall_seconds: f64,
    pub cpu_seconds: f64,
    /// The part of `cpu_seconds` spent in the kernel (network I/O, mostly).
    pub system_cpu_seconds: f64,
    pub peak_rss_bytes: u64,
    pub cold_start_ms: Option<f64>,
    pub memory_mb: u32,
    pub billed_ms: u64,
    pub log_bytes: u64,
    pub log_lines: u64,
    /// Users enqueued (GetUsers only), from its invocations' last log lines.
    pub users_enqueued: u64,
    /// Log lines with an address, a credentialed connection string or a key:
    /// "process N line M: why" (see `mailflow_local::log_audit`).
    pub sensitive_log_lines: Vec<String>,
    /// Every request by `service.Operation`: the function's own (metered in the process)
    /// and its event source mapping's (`esm.ReceiveMessage`, `esm.DeleteMessageBatch`).
    pub requests: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BinaryReport {
    pub name: String,
    pub bytes: u64,
    pub zipped_bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchReport {
    pub machine: String,
    pub users: usize,
    pub eligible_users: usize,
    pub users_enqueued: u64,
    pub users_enqueued_per_second: f64,
    pub emails_sent: u64,
    pub stages: Vec<StageReport>,
    /// Our processes' CPU per email, in microseconds, per stage and in all.
    pub cpu_micros_per_email: BTreeMap<String, f64>,
    /// Billable AWS requests per email (SQS chunks, DynamoDB, SES) and MongoDB round trips.
    pub billable_requests_per_email: f64,
    pub mongodb_round_trips_per_email: f64,
    pub per_email: PerEmail,
    pub cost_per_million: CostPerMillion,
    pub seed_design_cost_per_million: CostPerMillion,
    pub binaries: Vec<BinaryReport>,
}

async fn stage_report(
    environments: &Environments,
    stats: Option<&runner::ConsumerStats>,
    wall: Duration,
    logs_dir: Option<&Path>,
) -> Result<StageReport> {
    let measured = environments.finish().await;
    if let Some(dir) = logs_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (i, m) in measured.iter().enumerate() {
            let path = dir.join(format!("{}-{i}.log", environments.function));
            let mut text = m.logs.lines.join("\n");
            text.push('\n');
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let mut requests = BTreeMap::new();
    for m in &measured {
        for (k, v) in &m.logs.requests {
            *requests.entry(k.clone()).or_default() += v;
        }
    }
    if let Some(s) = stats {
        requests.insert("esm.ReceiveMessage".into(), s.receive_requests as u64);
        requests.insert(
            format!(
                "esm.ReceiveMessage{}",
                mailflow::runtime::metering::SQS_CHUNKS_SUFFIX
            ),
            s.receive_chunks,
        );
        requests.insert("esm.DeleteMessageBatch".into(), s.delete_requests as u64);
        // A DeleteMessageBatch is billed as one request (its payload is far under 64 KiB).
        requests.insert(
            format!(
                "esm.DeleteMessageBatch{}",
                mailflow::runtime::metering::SQS_CHUNKS_SUFFIX
            ),
            s.delete_requests as u64,
        );
    }
    Ok(StageReport {
        function: environments.function.to_owned(),
        environments: measured.len(),
        invocations: environments.invocations.load(Ordering::Relaxed),
        records: stats.map_or(0, |s| s.records),
        records_failed: stats.map_or(0, |s| s.failures_reported),
        wall_seconds: wall.as_secs_f64(),
        cpu_seconds: measured.iter().map(|m| m.cpu.total().as_secs_f64()).sum(),
        system_cpu_seconds: measured.iter().map(|m| m.cpu.system.as_secs_f64()).sum(),
        peak_rss_bytes: measured.iter().map(|m| m.peak_rss).max().unwrap_or(0),
        cold_start_ms: measured
            .iter()
            .filter_map(|m| m.cold_start)
            .max()
            .map(|d| d.as_secs_f64() * 1e3),
        memory_mb: environments.memory_mb,
        billed_ms: environments.billed_ms.load(Ordering::Relaxed)
            + measured
                .iter()
                .filter_map(|m| m.cold_start)
                .map(|d| d.as_millis() as u64)
                .sum::<u64>(),
        log_bytes: measured.iter().map(|m| m.logs.bytes).sum(),
        log_lines: measured.iter().map(|m| m.logs.line_count).sum(),
        users_enqueued: measured.iter().map(|m| m.logs.users_enqueued).sum(),
        sensitive_log_lines: measured
            .iter()
            .enumerate()
            .flat_map(|(process, m)| {
                m.logs
                    .sensitive
                    .iter()
                    .map(move |(line, why)| format!("process {process} line {line}: {why}"))
            })
            .collect(),
        requests,
    })
}

/// The event source mapping of template.yaml, each worker invoking its own environment.
fn consumer(stack: &Stack, function: &str, handlers: Vec<runner::Handler>) -> Result<Consumer> {
    let timeout = Duration::from_secs(stack.template.function(function)?.timeout.into());
    let mut consumer = mailflow_local::pipeline::consumer(stack, function, handlers, timeout)?;
    consumer.concurrency = consumer.handlers.len() as u32;
    // Polled as Lambda does, so that empty receives are counted as they would be billed.
    consumer.long_poll = runner::LAMBDA_LONG_POLL;
    Ok(consumer)
}

fn concurrency(stack: &Stack, function: &str) -> Result<usize> {
    let spec = stack.template.function(function)?;
    Ok(spec
        .sqs_events
        .first()
        .and_then(|e| e.maximum_concurrency)
        .unwrap_or(1) as usize)
}

const DRAIN_LIMIT: Duration = Duration::from_secs(6 * 3600);

pub async fn bench(template: &Path, options: &BenchOptions) -> Result<BenchReport> {
    let parameters = BTreeMap::from([(
        names::SEND_RATE_PER_SECOND.to_string(),
        options.send_rate.to_string(),
    )]);
    let local =
        SeededStack::create(template, "bench", options.users, options.seed, parameters).await?;
    let stack = &local.stack;
    let sqs = mailflow::adapters::sqs_client(&stack.sdk);

    let get_users = Environments::start(stack, &options.bin_dir, GET_USERS, 1).await?;
    let mut consumers = vec![consumer(stack, GET_USERS, get_users.handlers())?];
    let mut downstream = Vec::new();
    // With GetUsers alone, the users queue is left to fill.
    if !options.get_users_only {
        for function in [CREATE_EMAILS, SEND_EMAIL] {
            let environments = Environments::start(
                stack,
                &options.bin_dir,
                function,
                concurrency(stack, function)?,
            )
            .await?;
            consumers.push(consumer(stack, function, environments.handlers())?);
            downstream.push(environments);
        }
    }

    // The schedule event, then GetUsers' continuations, while the consumers drain the queues.
    let started = Instant::now();
    let first = tokio::spawn({
        let (get_users, event) = (get_users.clone(), local.schedule_event()?);
        async move { get_users.invoke(0, event).await }
    });
    let stats =
        runner::run_until_drained_while(&sqs, consumers, DRAIN_LIMIT, || !first.is_finished())
            .await?;
    let first = first.await?;
    if !matches!(first, Outcome::Response(_)) {
        bail!("GetUsers failed: {first:?}");
    }
    let wall = started.elapsed();
    // GetUsers' own duration: until its last invocation (the last continuation) answered.
    let get_users_wall = get_users
        .last_answer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .map_or(wall, |t| t - started);
    let logs_dir = options.logs_dir.as_deref();
    let mut stages =
        vec![stage_report(&get_users, stats.get(GET_USERS), get_users_wall, logs_dir).await?];
    for environments in &downstream {
        let stats = stats.get(environments.function);
        stages.push(stage_report(environments, stats, wall, logs_dir).await?);
    }
    let users_enqueued = stages[0].users_enqueued;
    let users_enqueued_per_second = users_enqueued as f64 / get_users_wall.as_secs_f64();

    let mut emails_sent = 0;
    if !options.get_users_only {
        let records = mailflow_local::ledger_scan::records(
            &mailflow::adapters::dynamodb_client(&stack.sdk),
            stack.table_name(names::SENDS_TABLE)?,
            local.campaign.id.as_str(),
        )
        .await?;
        emails_sent = mailflow_local::ledger_scan::count_by_status(&records)
            .get("SENT")
            .copied()
            .unwrap_or(0) as u64;
        let expected = local.seeded.deliverable().count() as u64;
        if emails_sent != expected {
            bail!("the benchmark run is inconsistent: {emails_sent} SENT records, {expected} deliverable users");
        }
    }

    // Per email sent; with GetUsers alone, per user enqueued.
    let basis = if options.get_users_only {
        users_enqueued
    } else {
        emails_sent
    };
    let per = |n: f64| n / basis.max(1) as f64;
    let mut all_requests: BTreeMap<String, u64> = BTreeMap::new();
    let mut cpu_micros_per_email = BTreeMap::new();
    for stage in &stages {
        for (k, v) in &stage.requests {
            // The mappings' polling is SQS too.
            let key = k
                .strip_prefix("esm.")
                .map_or(k.clone(), |op| format!("sqs.{op}"));
            *all_requests.entry(key).or_default() += v;
        }
        cpu_micros_per_email.insert(stage.function.clone(), per(stage.cpu_seconds * 1e6));
    }
    cpu_micros_per_email.insert("total".into(), cpu_micros_per_email.values().sum());
    let (sqs_units, writes, reads, ses) = cost::billable_units(&all_requests);
    let mongo: u64 = all_requests
        .iter()
        .filter(|(k, _)| k.starts_with("mongodb."))
        .map(|(_, v)| v)
        .sum();
    let per_email = PerEmail {
        sqs_requests: per(sqs_units as f64),
        dynamodb_write_units: per(writes as f64),
        dynamodb_read_units: per(reads as f64),
        ses_emails: per(ses as f64),
        lambda_invocations: per(stages.iter().map(|s| s.invocations as f64).sum()),
        lambda_gb_seconds: per(stages
            .iter()
            .map(|s| s.billed_ms as f64 / 1e3 * f64::from(s.memory_mb) / 1024.0)
            .sum()),
        log_bytes: per(stages.iter().map(|s| s.log_bytes as f64).sum()),
    };
    let send_memory = stack.template.function(SEND_EMAIL)?.memory_size;
    Ok(BenchReport {
        machine: machine(),
        users: local.seeded.users,
        eligible_users: local.seeded.audience.len(),
        users_enqueued,
        users_enqueued_per_second,
        emails_sent,
        cpu_micros_per_email,
        billable_requests_per_email: per_email.sqs_requests
            + per_email.dynamodb_write_units
            + per_email.dynamodb_read_units
            + per_email.ses_emails,
        mongodb_round_trips_per_email: per(mongo as f64),
        cost_per_million: per_email.cost_per_million(),
        seed_design_cost_per_million: cost::seed_design(f64::from(send_memory)).cost_per_million(),
        per_email,
        stages,
        binaries: binaries(&options.bin_dir),
    })
}

/// Each function binary's size, and the size of the zip Lambda deploys (`bootstrap` alone).
fn binaries(bin_dir: &Path) -> Vec<BinaryReport> {
    ["get-users", "create-emails", "send-email"]
        .iter()
        .filter_map(|name| {
            let path = bin_dir.join(name);
            let bytes = std::fs::metadata(&path).ok()?.len();
            Some(BinaryReport {
                name: (*name).to_owned(),
                bytes,
                zipped_bytes: zipped_size(&path).ok(),
            })
        })
        .collect()
}

fn zipped_size(binary: &Path) -> Result<u64> {
    let dir = std::env::temp_dir().join(format!("mailflow-zip-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(binary, dir.join("bootstrap"))?;
    // Python's zipfile (deflate), as the machine has Python and no zip tool is assumed.
    let status = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-c", "function.zip", "bootstrap"])
        .current_dir(&dir)
        .status()?;
    let size = std::fs::metadata(dir.join("function.zip"))?.len();
    let _ = std::fs::remove_dir_all(&dir);
    if !status.success() {
        bail!("python3 -m zipfile failed");
    }
    Ok(size)
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / (1024 * 1024));
    format!(
        "{model}, {cores} cores, {memory_gib} GiB, {}",
        std::env::consts::ARCH
    )
}

/// The report as Markdown tables (what BENCHMARKS.md shows).
pub fn markdown(r: &BenchReport) -> String {
    let mut out = String::new();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    out.push_str(&format!(
        "Machine: {}. Users seeded: {}, eligible: {}, enqueued: {}, emails sent: {}.\n\n",
        r.machine, r.users, r.eligible_users, r.users_enqueued, r.emails_sent
    ));
    out.push_str("| stage | environments | invocations | records | records failed | wall s | CPU s | of which kernel | CPU µs/email | peak RSS MiB | cold start ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for s in &r.stages {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.0}% | {:.0} | {:.1} | {} |\n",
            s.function,
            s.environments,
            s.invocations,
            s.records,
            s.records_failed,
            s.wall_seconds,
            s.cpu_seconds,
            100.0 * s.system_cpu_seconds / s.cpu_seconds.max(f64::EPSILON),
            r.cpu_micros_per_email
                .get(&s.function)
                .copied()
                .unwrap_or(0.0),
            mib(s.peak_rss_bytes),
            s.cold_start_ms.map_or("-".into(), |c| format!("{c:.1}")),
        ));
    }
    out.push_str(&format!(
        "\nCPU per email, all stages: {:.0} µs. GetUsers fan-out: {:.0} users/s.\n",
        r.cpu_micros_per_email.get("total").copied().unwrap_or(0.0),
        r.users_enqueued_per_second
    ));
    out.push_str(&format!(
        "Log lines written: {}; with an address, a credentialed connection string or a key: {}.\n\n",
        r.stages.iter().map(|s| s.log_lines).sum::<u64>(),
        r.stages
            .iter()
            .map(|s| s.sensitive_log_lines.len())
            .sum::<usize>()
    ));
    let basis = if r.emails_sent > 0 {
        r.emails_sent
    } else {
        r.users_enqueued
    };
    let per_email = |n: u64| n as f64 / basis.max(1) as f64;
    out.push_str("| stage | request | count | per email |\n|---|---|---|---|\n");
    for s in &r.stages {
        for (k, v) in &s.requests {
            out.push_str(&format!(
                "| {} | {k} | {v} | {:.3} |\n",
                s.function,
                per_email(*v)
            ));
        }
    }
    out.push_str(&format!(
        "\nBillable AWS requests per email: {:.3} (SQS 64 KiB chunks {:.3}, DynamoDB writes {:.3}, reads {:.3}, SES {:.3}); MongoDB round trips per email: {:.3}.\n\n",
        r.billable_requests_per_email,
        r.per_email.sqs_requests,
        r.per_email.dynamodb_write_units,
        r.per_email.dynamodb_read_units,
        r.per_email.ses_emails,
        r.mongodb_round_trips_per_email
    ));
    out.push_str("| binary | size MiB | zipped MiB |\n|---|---|---|\n");
    for b in &r.binaries {
        out.push_str(&format!(
            "| {} | {:.1} | {} |\n",
            b.name,
            mib(b.bytes),
            b.zipped_bytes
                .map_or("-".into(), |z| format!("{:.2}", mib(z)))
        ));
    }
    out.push_str("\n| $ per 1M emails | Lambda | SQS | DynamoDB | logs | SES | total | total without SES |\n|---|---|---|---|---|---|---|---|\n");
    for (name, c) in [
        ("mailflow (measured)", &r.cost_per_million),
        ("seed design (modelled)", &r.seed_design_cost_per_million),
    ] {
        out.push_str(&format!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
            c.lambda, c.sqs, c.dynamodb, c.logs, c.ses, c.total, c.total_without_ses
        ));
    }
    out
}

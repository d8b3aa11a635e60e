//! What a bench run measured, per stage and per email, and the report as Markdown.

use super::environments::{Environments, Measured};
use crate::cost::{self, CostPerMillion, PerEmail};
use anyhow::{bail, Context, Result};
use mailflow_local::runner::{self};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

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
    /// The part of `cpu_seconds` the environments spent before their first invocation
    /// (init: clients, TLS roots, templates), which a longer campaign spreads thinner.
    pub init_cpu_seconds: f64,
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
    /// The definition the campaign ran from (campaigns/NAME), or none: the compiled digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
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

pub(super) async fn stage_report(
    environments: &Environments,
    stats: Option<&runner::ConsumerStats>,
    wall: Duration,
    logs_dir: Option<&Path>,
) -> Result<StageReport> {
    let measured = environments.finish().await;
    if let Some(dir) = logs_dir {
        write_logs(dir, environments.function, &measured)?;
    }
    let requests = requests(&measured, stats);
    Ok(StageReport {
        function: environments.function.to_owned(),
        environments: measured.len(),
        invocations: environments.invocations.load(Ordering::Relaxed),
        records: stats.map_or(0, |s| s.records),
        records_failed: stats.map_or(0, |s| s.failures_reported),
        wall_seconds: wall.as_secs_f64(),
        cpu_seconds: measured.iter().map(|m| m.cpu.total().as_secs_f64()).sum(),
        system_cpu_seconds: measured.iter().map(|m| m.cpu.system.as_secs_f64()).sum(),
        init_cpu_seconds: measured
            .iter()
            .map(|m| m.init_cpu.total().as_secs_f64())
            .sum(),
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

/// Each process's log lines to `<dir>/<function>-<n>.log`.
fn write_logs(dir: &Path, function: &str, measured: &[Measured]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (i, m) in measured.iter().enumerate() {
        let path = dir.join(format!("{function}-{i}.log"));
        let mut text = m.logs.lines.join("\n");
        text.push('\n');
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// A stage's requests by `service.Operation`: its processes' own, and its event source
/// mapping's polling.
fn requests(measured: &[Measured], stats: Option<&runner::ConsumerStats>) -> BTreeMap<String, u64> {
    let mut requests = BTreeMap::new();
    for m in measured {
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
    requests
}

/// Each function binary's size, and the size of the zip Lambda deploys (`bootstrap` alone).
pub(super) fn binaries(bin_dir: &Path) -> Vec<BinaryReport> {
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

pub(super) fn machine() -> String {
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

/// The report as Markdown tables (what docs/benchmarks.md shows).
pub fn markdown(r: &BenchReport) -> String {
    let campaign = match &r.definition {
        Some(name) => format!("the definition campaigns/{name}"),
        None => "the compiled digest".to_owned(),
    };
    let mut out = format!(
        "Machine: {}. Campaign: {campaign}. Users seeded: {}, eligible: {}, enqueued: {}, emails sent: {}.\n\n",
        r.machine, r.users, r.eligible_users, r.users_enqueued, r.emails_sent
    );
    stage_table(&mut out, r);
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
    request_table(&mut out, r);
    out.push_str(&format!(
        "\nBillable AWS requests per email: {:.3} (SQS 64 KiB chunks {:.3}, DynamoDB writes {:.3}, reads {:.3}, SES {:.3}); MongoDB round trips per email: {:.3}.\n\n",
        r.billable_requests_per_email,
        r.per_email.sqs_requests,
        r.per_email.dynamodb_write_units,
        r.per_email.dynamodb_read_units,
        r.per_email.ses_emails,
        r.mongodb_round_trips_per_email
    ));
    binary_and_cost_tables(&mut out, r);
    out
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Each stage's environments, invocations, records, time, CPU, memory and cold start.
fn stage_table(out: &mut String, r: &BenchReport) {
    out.push_str("| stage | environments | invocations | records | records failed | wall s | CPU s | of which kernel | of which init | CPU µs/email | peak RSS MiB | cold start ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for s in &r.stages {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.0}% | {:.0}% | {:.0} | {:.1} | {} |\n",
            s.function,
            s.environments,
            s.invocations,
            s.records,
            s.records_failed,
            s.wall_seconds,
            s.cpu_seconds,
            100.0 * s.system_cpu_seconds / s.cpu_seconds.max(f64::EPSILON),
            100.0 * s.init_cpu_seconds / s.cpu_seconds.max(f64::EPSILON),
            r.cpu_micros_per_email
                .get(&s.function)
                .copied()
                .unwrap_or(0.0),
            mib(s.peak_rss_bytes),
            s.cold_start_ms.map_or("-".into(), |c| format!("{c:.1}")),
        ));
    }
}

/// Every stage's requests, and each per email sent (per user enqueued without emails).
fn request_table(out: &mut String, r: &BenchReport) {
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
}

/// The binaries' sizes, and the cost per million emails, measured and of the seed design.
fn binary_and_cost_tables(out: &mut String, r: &BenchReport) {
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
}

/// The stages' requests and CPU, per email (or per user enqueued: `basis`).
pub(super) struct PerEmailFigures {
    pub per_email: PerEmail,
    /// Microseconds per stage, and in all.
    pub cpu_micros: BTreeMap<String, f64>,
    pub mongodb_round_trips: f64,
}

impl PerEmailFigures {
    pub(super) fn of(stages: &[StageReport], basis: u64) -> Self {
        let per = |n: f64| n / basis.max(1) as f64;
        let mut all_requests: BTreeMap<String, u64> = BTreeMap::new();
        let mut cpu_micros_per_email = BTreeMap::new();
        for stage in stages {
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
        Self {
            per_email,
            cpu_micros: cpu_micros_per_email,
            mongodb_round_trips: per(mongo as f64),
        }
    }
}

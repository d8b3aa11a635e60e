//! What `mailctl opens` measured: latency percentiles, CPU and backend requests of each kind
//! of request, the concurrent opens' counts, the cost per million opens and clicks, and the
//! report as the Markdown rows docs/benchmarks.md keeps.

use crate::cost;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Latency percentiles of one kind of request, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    pub requests: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub(super) fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let at = |q: f64| {
            samples
                .get(((samples.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .map_or(0.0, |d| (d.as_secs_f64() * 10_000.0).round() / 10.0)
        };
        Self {
            requests: samples.len(),
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// One kind of request, measured on its own environment.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kind {
    pub latency: Latency,
    /// CPU time of the environment per request (user + system), in milliseconds.
    pub cpu_ms_per_request: f64,
    /// Backend requests per request, by service and operation.
    pub backend_per_request: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpensReport {
    pub emails: usize,
    pub followers: usize,
    pub first_open: Kind,
    /// Another slot's card on an environment without the email in memory.
    pub other_slot: Kind,
    pub warm_open: Kind,
    pub badge: Kind,
    pub click: Kind,
    /// Warm opens one environment answered per second, one at a time.
    pub warm_opens_per_second: f64,
    /// Every slot's image and badge of an email at once, over six environments.
    pub concurrent_emails: usize,
    pub concurrent_requests: usize,
    /// Computations that froze (one per email means the lock held) and fallbacks.
    pub concurrent_frozen: u64,
    pub concurrent_fallbacks: u64,
    /// Cards that differed between requests of the same slot (0: consistent).
    pub concurrent_inconsistent: usize,
    pub peak_rss_mb: f64,
    pub cold_start_ms: f64,
    /// Dollars per million emails opened (first open: three cards and three badges) and per
    /// million clicks, at 128 MB on arm64 (cost.rs).
    pub cost_per_million_opens: f64,
    pub cost_per_million_clicks: f64,
}

/// Dollars per million of `parts` (a kind of request, how many of it): Lambda invocations
/// and GB-seconds at 128 MB (billed by the millisecond, at least 1 ms), DynamoDB units (an
/// item under 1 KiB is one unit; GetItem eventually consistent, half a read unit).
pub(super) fn cost_per_million(parts: &[(&Kind, f64)]) -> f64 {
    let per_one: f64 = parts
        .iter()
        .map(|(kind, n)| {
            let lambda = cost::LAMBDA_PER_REQUEST
                + kind.latency.p50_ms.max(1.0) / 1000.0 * 0.125 * cost::LAMBDA_ARM64_PER_GB_SECOND;
            let dynamo: f64 = kind
                .backend_per_request
                .iter()
                .map(|(op, count)| {
                    count
                        * match op.as_str() {
                            "dynamodb.UpdateItem" | "dynamodb.PutItem" => {
                                cost::DYNAMODB_PER_WRITE_UNIT
                            }
                            "dynamodb.GetItem" => cost::DYNAMODB_PER_READ_UNIT / 2.0,
                            "dynamodb.Query" => cost::DYNAMODB_PER_READ_UNIT,
                            "dynamodb.BatchGetItem" => 2.0 * cost::DYNAMODB_PER_READ_UNIT / 2.0,
                            _ => 0.0,
                        }
                })
                .sum();
            n * (lambda + dynamo)
        })
        .sum();
    (per_one * 1e6 * 100.0).round() / 100.0
}

impl OpensReport {
    /// The report as the Markdown rows docs/benchmarks.md keeps.
    pub fn markdown(&self) -> String {
        let row = |name: &str, k: &Kind| {
            let backend: Vec<String> = k
                .backend_per_request
                .iter()
                .map(|(op, n)| format!("{op} {n}"))
                .collect();
            format!(
                "| {name} | {} | {} | {} | {} | {} |\n",
                k.latency.requests,
                k.latency.p50_ms,
                k.latency.p99_ms,
                k.cpu_ms_per_request,
                backend.join(", ")
            )
        };
        let mut out = String::from(
            "| request | n | p50 ms | p99 ms | CPU ms/request | backend requests per request |\n|---|---|---|---|---|---|\n",
        );
        out += &row("first open (choose, freeze)", &self.first_open);
        out += &row("another slot, another environment", &self.other_slot);
        out += &row("open, warm environment (counted)", &self.warm_open);
        out += &row("badge", &self.badge);
        out += &row("click", &self.click);
        out += &format!(
            "\nwarm opens/s, one environment: {} | every slot at once: {} emails, {} requests, {} computations froze ({} fallbacks), {} inconsistent cards | peak RSS {} MB, cold start {} ms | ${} per million opens, ${} per million clicks\n",
            self.warm_opens_per_second,
            self.concurrent_emails,
            self.concurrent_requests,
            self.concurrent_frozen,
            self.concurrent_fallbacks,
            self.concurrent_inconsistent,
            self.peak_rss_mb,
            self.cold_start_ms,
            self.cost_per_million_opens,
            self.cost_per_million_clicks,
        );
        out
    }
}

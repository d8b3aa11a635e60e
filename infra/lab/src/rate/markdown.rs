//! The rate runs as a Markdown table, and the ranges over runs its cells show (the
//! pipeline's report shows them too).

use super::{Mode, RunReport};

/// `values` as one figure with `digits` decimals, or as low-high where they differ.
pub(crate) fn range(values: impl Iterator<Item = f64>, digits: usize) -> String {
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

/// The runs as a Markdown table, one row per quota x environments x mode, ranges over runs.
pub fn markdown(reports: &[RunReport]) -> String {
    if !reports.is_empty() && reports.iter().all(|r| r.quota == 0.0) {
        return format!(
            "| one environment, no quota | emails per run | emails/s over the steady state |\n|---|---|---|\n| {} runs | {} | {} |\n",
            reports.len(),
            reports[0].emails,
            range(reports.iter().map(|r| r.steady_share), 1)
        );
    }
    let mut out = String::from(
        "| quota/s | environments | batch | memory (MB) | pacing | emails | steady rate / quota | throttles / 1,000 (steady) | throttles (all) | lost | sent twice | DLQ | first email (ms) | last 1 % (s) | rate-item requests / email | rate-item write units / email | rate-item throttles |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut groups: Vec<(f64, u32, Mode)> = Vec::new();
    for r in reports {
        if !groups.contains(&(r.quota, r.environments, r.mode)) {
            groups.push((r.quota, r.environments, r.mode));
        }
    }
    for (quota, environments, mode) in groups {
        let runs: Vec<&RunReport> = (reports.iter())
            .filter(|r| (r.quota, r.environments, r.mode) == (quota, environments, mode))
            .collect();
        let f = |get: fn(&RunReport) -> f64, digits| range(runs.iter().map(|r| get(r)), digits);
        out.push_str(&format!(
            "| {quota} | {environments} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            runs[0].batch,
            runs[0].memory_mb.map_or("-".to_string(), |m| m.to_string()),
            match mode {
                Mode::Shared => "shared",
                Mode::Static => "static split",
            },
            runs[0].emails,
            f(|r| r.steady_share, 2),
            f(|r| r.steady_throttles_per_1000, 1),
            f(|r| r.throttles as f64, 0),
            f(|r| r.lost as f64, 0),
            f(|r| r.sent_twice as f64, 0),
            f(|r| r.dead_lettered as f64, 0),
            f(|r| r.first_email_ms, 0),
            f(|r| r.last_1pct_s, 2),
            f(|r| r.rate_requests_per_email, 3),
            f(|r| r.item_write_units_per_email, 4),
            f(|r| r.item_throttles as f64, 0),
        ));
    }
    out
}

//! A pipeline run's reports as Markdown: the figures as ranges over the runs, and the first
//! run's use of the quota, second by second.

use super::PipelineReport;
use crate::rate::markdown::range;

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
    // An event still unhandled at the end: its lag is beyond the run ("-").
    let lag = |get: fn(&PipelineReport) -> Option<f64>| {
        let lags: Option<Vec<f64>> = reports.iter().map(get).collect();
        lags.map_or("-".to_owned(), |l| range(l.into_iter(), 1))
    };
    let rows: [(&str, String); 16] = [
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
            "SES refusals for the 24-hour quota",
            f(|r| r.over_daily_quota as f64, 0),
        ),
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
        (
            "SES events handled / published (SesEvents environments)",
            format!(
                "{} / {} ({})",
                f(|r| r.events.handled as f64, 0),
                f(|r| r.events.events as f64, 0),
                f(|r| f64::from(r.events.environments), 0)
            ),
        ),
        (
            "event lag p50 / p99, acceptance to handled (s)",
            format!(
                "{} / {}",
                lag(|r| r.events.lag_p50_s),
                lag(|r| r.events.lag_p99_s)
            ),
        ),
        (
            "EventBridge throttles; account concurrency peak / available (waits)",
            format!(
                "{}; {} / {} ({})",
                f(|r| r.events.eventbridge_throttles as f64, 0),
                f(|r| f64::from(r.events.account_peak), 0),
                first.events.account_available,
                f(|r| r.events.account_waits as f64, 0)
            ),
        ),
    ];
    for (name, value) in rows {
        out.push_str(&format!("| {name} | {value} |\n"));
    }
    out.push_str(&sends_table(reports));
    out.push_str("\nQuota use each second (first run): ");
    out.push_str(&quota_use(&first.quota_use));
    out.push('\n');
    out
}

/// Each second's share of the quota; a long idle stretch (a campaign waiting for SES's
/// 24-hour quota) is said as its length, not as thousands of zeros.
fn quota_use(shares: &[f64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut idle = 0;
    for share in shares {
        if *share == 0.0 {
            idle += 1;
            continue;
        }
        match idle {
            0 => {}
            1..=10 => out.extend(std::iter::repeat_n("0.00".to_string(), idle)),
            _ => out.push(format!("(0.00 for {idle} s)")),
        }
        idle = 0;
        out.push(format!("{share:.2}"));
    }
    out.join(" ")
}

/// The sends table's limits: each one's write units per email, throttled attempts and the
/// busiest key's peak second (ranges over the runs), then what failed.
fn sends_table(reports: &[PipelineReport]) -> String {
    let first = &reports[0].sends_table;
    let f = |get: &dyn Fn(&PipelineReport) -> f64, digits| range(reports.iter().map(get), digits);
    let mut out = format!(
        "\nSends table: {:?} quota ({} write units/s, the index the same), {:?} campaign index.\n\n\
         | limit | units per email | throttled attempts | peak units/s on one key |\n|---|---|---|---|\n",
        first.quota, first.quota_write_units, first.design
    );
    for name in first.limits.keys() {
        let counts =
            |r: &PipelineReport| r.sends_table.limits.get(name).cloned().unwrap_or_default();
        out.push_str(&format!(
            "| {name} | {} | {} | {} |\n",
            f(&|r| counts(r).units / r.users.max(1) as f64, 2),
            f(&|r| counts(r).throttles as f64, 0),
            f(&|r| counts(r).peak_key_per_second, 0),
        ));
    }
    out.push_str(&format!(
        "\nLedger writes failed after the SDK's retries: {}; Delivery notes failed: {}; SES acceptances left unrecorded: {}.\n",
        f(&|r| r.sends_table.writes_failed as f64, 0),
        f(&|r| r.sends_table.notes_failed as f64, 0),
        f(&|r| r.sends_table.unrecorded as f64, 0),
    ));
    out
}

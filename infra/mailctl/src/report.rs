//! `mailctl report`: one campaign as one self-contained HTML file: its counts (the same as
//! `status --json`) and five plots drawn as inline SVG (`charts`: no script, no font,
//! nothing fetched: it opens offline and in a mail attachment). Each plot is a function of
//! its own here: what it shows, from the status and the records.

pub mod charts;

use crate::status::CampaignStatus;
use charts::{bar_chart, escape, histogram, line_chart, Bar, Series};
use mailflow::adapters::sends::SendRecord;
use mailflow::domain::ledger::{Engagement, SendStatus};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The report: `status` (its counts are the page's) and the campaign's records (the plots).
pub fn render(status: &CampaignStatus, records: &[SendRecord]) -> String {
    let sent: Vec<u64> = records
        .iter()
        .filter(|r| r.status == Some(SendStatus::Sent))
        .filter_map(|r| r.completed_at_ms)
        .collect();
    // From the first email sent, or the first event when no completion time was recorded.
    let first = sent
        .iter()
        .copied()
        .chain(records.iter().flat_map(|r| r.engagement.values().copied()))
        .min()
        .unwrap_or(0);
    let mut body = counts_table(status);
    body.push_str(&send_rate_plot(status, &sent, first));
    body.push_str(&outcomes_plot(status));
    body.push_str(&lateness_plot(records));
    body.push_str(&engagement_plot(records, first));
    body.push_str(&experiment_plot(status));
    format!(
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{id}</title><style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 700px; }}
table.counts {{ border-collapse: collapse; margin: 12px 0; font-size: 13px; }}
table.counts th, table.counts td {{ border: 1px solid #ccc; padding: 4px 6px; text-align: right; }}
figure {{ margin: 18px 0; }} figcaption {{ font-weight: 600; margin-bottom: 4px; }}
</style></head><body><h1>Campaign {id}</h1><p>State: {state}</p>{definition}{body}</body></html>"#,
        id = escape(&status.campaign_id),
        state = escape(status.state),
        definition = crate::status::view::definition_line(status)
            .map(|line| format!(r#"<p class="definition">{}</p>"#, escape(&line)))
            .unwrap_or_default(),
    )
}

/// The counts, as a table of one row.
fn counts_table(status: &CampaignStatus) -> String {
    let engaged = |what: &str| status.engagement.get(what).copied().unwrap_or(0);
    let counts = [
        ("sent", status.sent),
        ("failed", status.failed),
        ("dead-lettered", status.dead_lettered),
        ("cancelled", status.cancelled),
        ("skipped", status.skipped.values().sum()),
        ("delivered", engaged("delivered")),
        ("opened", engaged("opened")),
        ("opened by people", engaged("humanOpened")),
        ("clicked", engaged("clicked")),
        ("clicked by people", engaged("humanClicked")),
    ];
    let mut body = String::from(r#"<table class="counts"><tr>"#);
    for (label, _) in &counts {
        let _ = write!(body, "<th>{label}</th>");
    }
    body.push_str("</tr><tr>");
    for (label, n) in &counts {
        let _ = write!(body, r#"<td data-count="{label}">{n}</td>"#);
    }
    body.push_str("</tr></table>");
    body
}

/// Plot 1: sends per second, minute by minute from `first`, against the ceiling.
fn send_rate_plot(status: &CampaignStatus, sent: &[u64], first: u64) -> String {
    let per_minute = histogram(sent.iter().copied(), first, 60_000);
    let rate = Series {
        label: "emails per second (each minute's average)".into(),
        points: per_minute.iter().map(|(m, n)| (*m, n / 60.0)).collect(),
    };
    let ceiling = status
        .shared_rate
        .map(|r| (r.ceiling, "the stack's ceiling"))
        .or(status.ses_quota.map(|q| (q.max_send_rate, "SES's maximum")));
    line_chart(
        "Send rate over the campaign",
        &[rate],
        "minutes since the first email",
        "emails per second",
        ceiling,
    )
}

/// Plot 2: outcomes by reason.
fn outcomes_plot(status: &CampaignStatus) -> String {
    let bar = |label: String, n: usize| Bar {
        label,
        value: n as f64,
        interval: None,
    };
    let mut outcomes = vec![bar("sent".into(), status.sent)];
    for (what, groups) in [
        ("failed", &status.failed_by_reason),
        ("dead-lettered", &status.dead_lettered_by_reason),
    ] {
        for (reason, n) in groups {
            outcomes.push(bar(format!("{what}: {reason}"), *n));
        }
    }
    for (reason, n) in &status.skipped {
        outcomes.push(bar(format!("skipped: {reason}"), *n));
    }
    if status.cancelled > 0 {
        outcomes.push(bar("cancelled".into(), status.cancelled));
    }
    bar_chart("Outcomes by reason", &outcomes, "users")
}

/// Plot 3: local-time lateness by zone (median, minutes), the zones with the most emails; empty
/// without local-time sends.
fn lateness_plot(records: &[SendRecord]) -> String {
    let mut by_zone: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in records {
        if let Some(late) = r.late_ms {
            let zone = r.zone.clone().unwrap_or_else(|| "no zone recorded".into());
            by_zone.entry(zone).or_default().push(late);
        }
    }
    if by_zone.is_empty() {
        return String::new();
    }
    let mut zones: Vec<(String, Vec<i64>)> = by_zone.into_iter().collect();
    zones.sort_by_key(|(_, l)| std::cmp::Reverse(l.len()));
    zones.truncate(10);
    // Seconds while every email went within two minutes of its slot, else minutes.
    let latest = zones
        .iter()
        .flat_map(|(_, l)| l)
        .max()
        .copied()
        .unwrap_or(0);
    let (per, unit) = match latest < 120_000 {
        true => (1_000.0, "seconds late"),
        false => (60_000.0, "minutes late"),
    };
    let bars: Vec<Bar> = zones
        .into_iter()
        .map(|(zone, mut late)| {
            late.sort_unstable();
            let scaled = |ms: i64| ms.max(0) as f64 / per;
            Bar {
                // The city is enough under the plot (`America/Sao_Paulo`: Sao Paulo).
                label: zone.rsplit('/').next().unwrap_or(&zone).replace('_', " "),
                value: scaled(late[late.len() / 2]),
                interval: Some((scaled(late[0]), scaled(late[late.len() - 1]))),
            }
        })
        .collect();
    bar_chart(
        "Local-time lateness by zone: median, and the range",
        &bars,
        unit,
    )
}

/// Plot 4: opens and clicks by hour (by minute within the first two hours) from `first`, people
/// apart from proxies, prefetch and scanners.
fn engagement_plot(records: &[SendRecord], first: u64) -> String {
    let last_event = records
        .iter()
        .flat_map(|r| r.engagement.values().copied())
        .max()
        .unwrap_or(first);
    let (bucket_ms, unit) = match last_event.saturating_sub(first) < 2 * 3_600_000 {
        true => (60_000, "minute"),
        false => (3_600_000, "hour"),
    };
    let title = format!("Opens and clicks by {unit} (each email once)");
    if records.iter().all(|r| r.engagement.is_empty()) {
        return format!(
            r#"<p class="empty"><b>{}</b>: none recorded yet (SES's events, the pick slots).</p>"#,
            escape(&title)
        );
    }
    let hourly = |e: Engagement| {
        histogram(
            records.iter().filter_map(|r| r.engagement.get(&e).copied()),
            first,
            bucket_ms,
        )
    };
    let engaged = [
        (
            Engagement::Opened,
            "opens (all, Apple's prefetch and proxies included)",
        ),
        (Engagement::HumanOpened, "opens by people"),
        (Engagement::Clicked, "clicks (all, scanners included)"),
        (Engagement::HumanClicked, "clicks by people"),
    ];
    let series: Vec<Series> = engaged
        .iter()
        .map(|(e, label)| Series {
            label: (*label).into(),
            points: hourly(*e),
        })
        .collect();
    line_chart(
        &title,
        &series,
        &format!("{unit}s since the first email"),
        "emails",
        None,
    )
}

/// Plot 5: the experiment's variants: the rate people clicked (or opened), with its interval;
/// empty without an experiment.
fn experiment_plot(status: &CampaignStatus) -> String {
    let Some(e) = &status.experiment else {
        return String::new();
    };
    let bars: Vec<Bar> = e
        .variants
        .iter()
        .map(|v| Bar {
            label: v.name.clone(),
            value: v.rate.unwrap_or(0.0) * 100.0,
            interval: v.interval.map(|(lo, hi)| (lo * 100.0, hi * 100.0)),
        })
        .collect();
    let decided = match &e.decision {
        Some(d) => format!("winner {}: {}", d.winner, d.reason),
        None => format!(
            "not decided: {}",
            e.would_decide.clone().unwrap_or_default()
        ),
    };
    bar_chart(
        &format!("Experiment: rate per delivered email, 95 % interval ({decided})"),
        &bars,
        "percent",
    )
}

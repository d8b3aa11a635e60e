//! Over 450 lines because the two hand-drawn charts and the five plots made of them read
//! together: what a plot shows beside how it is drawn.
//! `mailctl report`: one campaign as one self-contained HTML file: its counts (the same as
//! `status --json`) and five plots drawn here as inline SVG (no script, no font, nothing
//! fetched: it opens offline and in a mail attachment). The plots are hand-drawn: a line
//! chart and a bar chart are all it needs, and a plotting crate (plotters) would bring a
//! font stack into the operator tool for them.

use crate::ops::CampaignStatus;
use mailflow::adapters::sends::SendRecord;
use mailflow::domain::ledger::{Engagement, SendStatus};
use std::collections::BTreeMap;
use std::fmt::Write;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 28.0;
const TOP: f64 = 12.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round upper bound for an axis.
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|m| *m >= max)
        .unwrap_or(max)
}

fn frame(out: &mut String, y_max: f64, y_label: &str, x_label: &str) {
    let plot_h = HEIGHT - BOTTOM - TOP;
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{b}" stroke="#444"/><line x1="{LEFT}" y1="{b}" x2="{WIDTH}" y2="{b}" stroke="#444"/>"##,
        b = HEIGHT - BOTTOM
    );
    for i in 0..=4 {
        let v = y_max * f64::from(i) / 4.0;
        let y = HEIGHT - BOTTOM - plot_h * f64::from(i) / 4.0;
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text><line x1="{LEFT}" y1="{y}" x2="{WIDTH}" y2="{y}" stroke="#eee"/>"##,
            LEFT - 4.0,
            y + 3.0,
            format_number(v)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text><text x="12" y="{}" font-size="11" transform="rotate(-90 12 {})" text-anchor="middle">{}</text>"##,
        (LEFT + WIDTH) / 2.0,
        HEIGHT - 4.0,
        escape(x_label),
        (TOP + HEIGHT - BOTTOM) / 2.0,
        (TOP + HEIGHT - BOTTOM) / 2.0,
        escape(y_label)
    );
}

fn format_number(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// One series of a line chart.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Lines over a shared x axis, with an optional horizontal reference (a quota).
pub fn line_chart(
    title: &str,
    series: &[Series],
    x_label: &str,
    y_label: &str,
    reference: Option<(f64, &str)>,
) -> String {
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(reference.map(|r| r.0))
        .fold(0.0f64, f64::max);
    let y_max = nice_max(y_top * 1.05);
    let (plot_w, plot_h) = (WIDTH - LEFT - 8.0, HEIGHT - BOTTOM - TOP);
    let x = |v: f64| LEFT + plot_w * v / x_max;
    let y = |v: f64| HEIGHT - BOTTOM - plot_h * v / y_max;
    let mut out = format!(
        r#"<figure><figcaption>{}</figcaption><svg role="img" aria-label="{}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">"#,
        escape(title),
        escape(title)
    );
    frame(&mut out, y_max, y_label, x_label);
    if let Some((value, label)) = reference {
        let _ = write!(
            out,
            r##"<line class="reference" x1="{LEFT}" y1="{r}" x2="{WIDTH}" y2="{r}" stroke="#d62728" stroke-dasharray="5 4"/><text x="{}" y="{}" font-size="10" text-anchor="end" fill="#d62728">{} {}</text>"##,
            WIDTH - 4.0,
            y(value) - 3.0,
            escape(label),
            format_number(value),
            r = y(value)
        );
    }
    for tick in [0.0, x_max / 2.0, x_max] {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" font-size="10" text-anchor="middle">{}</text>"#,
            x(tick),
            HEIGHT - BOTTOM + 11.0,
            format_number(tick)
        );
    }
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .map(|(px, py)| format!("{:.1},{:.1}", x(*px), y(*py)))
            .collect();
        // Each point marked too: a series of one point is still seen.
        for (px, py) in &s.points {
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{colour}"/>"#,
                x(*px),
                y(*py)
            );
        }
        let _ = write!(
            out,
            r#"<polyline class="series" fill="none" stroke="{colour}" stroke-width="2" points="{}"/><text x="{}" y="{}" font-size="10" fill="{colour}">{}</text>"#,
            points.join(" "),
            LEFT + 8.0,
            TOP + 10.0 + 12.0 * i as f64,
            escape(&s.label)
        );
    }
    out.push_str("</svg></figure>");
    out
}

/// One bar: its label, value, and an interval drawn as a whisker.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub interval: Option<(f64, f64)>,
}

pub fn bar_chart(title: &str, bars: &[Bar], y_label: &str) -> String {
    let y_top = bars
        .iter()
        .map(|b| b.interval.map_or(b.value, |i| i.1.max(b.value)))
        .fold(0.0f64, f64::max);
    let y_max = nice_max(y_top * 1.05);
    let (plot_w, plot_h) = (WIDTH - LEFT - 8.0, HEIGHT - BOTTOM - TOP);
    let slot = plot_w / bars.len().max(1) as f64;
    let y = |v: f64| HEIGHT - BOTTOM - plot_h * v / y_max;
    let mut out = format!(
        r#"<figure><figcaption>{}</figcaption><svg role="img" aria-label="{}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">"#,
        escape(title),
        escape(title)
    );
    frame(&mut out, y_max, y_label, "");
    // A label wider than its slot (at about 5 px a character) is cut; the bar's tooltip has
    // it whole.
    let fits = ((slot / 5.2) as usize).max(3);
    for (i, b) in bars.iter().enumerate() {
        let x0 = LEFT + slot * i as f64 + slot * 0.15;
        let w = slot * 0.7;
        let shown = match b.label.chars().count() > fits {
            true => format!("{}…", b.label.chars().take(fits - 1).collect::<String>()),
            false => b.label.clone(),
        };
        let _ = write!(
            out,
            r#"<rect class="bar" x="{x0:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect><text x="{:.1}" y="{}" font-size="9" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{}</text>"#,
            y(b.value),
            (HEIGHT - BOTTOM - y(b.value)).max(0.0),
            COLOURS[i % COLOURS.len()],
            escape(&b.label),
            format_number(b.value),
            x0 + w / 2.0,
            HEIGHT - BOTTOM + 11.0,
            escape(&shown),
            x0 + w / 2.0,
            y(b.value) - 3.0,
            format_number(b.value)
        );
        if let Some((lo, hi)) = b.interval {
            let cx = x0 + w / 2.0;
            let _ = write!(
                out,
                r##"<line class="interval" x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="#222" stroke-width="1.5"/>"##,
                y(lo),
                y(hi)
            );
        }
    }
    out.push_str("</svg></figure>");
    out
}

/// Counts per bucket of `width_ms` from `start_ms`, as (bucket index, count).
fn histogram(times: impl Iterator<Item = u64>, start_ms: u64, width_ms: u64) -> Vec<(f64, f64)> {
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    for t in times {
        *buckets
            .entry(t.saturating_sub(start_ms) / width_ms)
            .or_default() += 1;
    }
    let last = buckets.keys().next_back().copied().unwrap_or(0);
    (0..=last)
        .map(|b| (b as f64, buckets.get(&b).copied().unwrap_or(0) as f64))
        .collect()
}

/// The report: `status` (its counts are the page's) and the campaign's records (the plots).
pub fn render(status: &CampaignStatus, records: &[SendRecord]) -> String {
    let mut body = String::new();
    let counts = [
        ("sent", status.sent),
        ("failed", status.failed),
        ("dead-lettered", status.dead_lettered),
        ("cancelled", status.cancelled),
        ("skipped", status.skipped.values().sum()),
        (
            "delivered",
            status.engagement.get("delivered").copied().unwrap_or(0),
        ),
        (
            "opened",
            status.engagement.get("opened").copied().unwrap_or(0),
        ),
        (
            "opened by people",
            status.engagement.get("humanOpened").copied().unwrap_or(0),
        ),
        (
            "clicked",
            status.engagement.get("clicked").copied().unwrap_or(0),
        ),
        (
            "clicked by people",
            status.engagement.get("humanClicked").copied().unwrap_or(0),
        ),
    ];
    body.push_str(r#"<table class="counts"><tr>"#);
    for (label, _) in &counts {
        let _ = write!(body, "<th>{label}</th>");
    }
    body.push_str("</tr><tr>");
    for (label, n) in &counts {
        let _ = write!(body, r#"<td data-count="{label}">{n}</td>"#);
    }
    body.push_str("</tr></table>");

    // 1. Sends per second, minute by minute, against the ceiling.
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
    let per_minute = histogram(sent.iter().copied(), first, 60_000);
    let rate = Series {
        label: "emails per second (each minute's average)".into(),
        points: per_minute.iter().map(|(m, n)| (*m, n / 60.0)).collect(),
    };
    let ceiling = status
        .shared_rate
        .map(|r| (r.ceiling, "the stack's ceiling"))
        .or(status.ses_quota.map(|q| (q.max_send_rate, "SES's maximum")));
    body.push_str(&line_chart(
        "Send rate over the campaign",
        &[rate],
        "minutes since the first email",
        "emails per second",
        ceiling,
    ));

    // 2. Outcomes by reason.
    let mut outcomes = vec![Bar {
        label: "sent".into(),
        value: status.sent as f64,
        interval: None,
    }];
    for (what, groups) in [
        ("failed", &status.failed_by_reason),
        ("dead-lettered", &status.dead_lettered_by_reason),
    ] {
        for (reason, n) in groups {
            outcomes.push(Bar {
                label: format!("{what}: {reason}"),
                value: *n as f64,
                interval: None,
            });
        }
    }
    for (reason, n) in &status.skipped {
        outcomes.push(Bar {
            label: format!("skipped: {reason}"),
            value: *n as f64,
            interval: None,
        });
    }
    if status.cancelled > 0 {
        outcomes.push(Bar {
            label: "cancelled".into(),
            value: status.cancelled as f64,
            interval: None,
        });
    }
    body.push_str(&bar_chart("Outcomes by reason", &outcomes, "users"));

    // 3. Local-time lateness by zone (median, minutes), the zones with the most emails.
    let mut by_zone: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in records {
        if let Some(late) = r.late_ms {
            let zone = r.zone.clone().unwrap_or_else(|| "no zone recorded".into());
            by_zone.entry(zone).or_default().push(late);
        }
    }
    if !by_zone.is_empty() {
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
        body.push_str(&bar_chart(
            "Local-time lateness by zone: median, and the range",
            &bars,
            unit,
        ));
    }

    // 4. Opens and clicks by hour (by minute within the first two hours), people apart
    // from proxies, prefetch and scanners.
    let last_event = records
        .iter()
        .flat_map(|r| r.engagement.values().copied())
        .max()
        .unwrap_or(first);
    let (bucket_ms, unit) = match last_event.saturating_sub(first) < 2 * 3_600_000 {
        true => (60_000, "minute"),
        false => (3_600_000, "hour"),
    };
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
    let title = format!("Opens and clicks by {unit} (each email once)");
    if records.iter().all(|r| r.engagement.is_empty()) {
        let _ = write!(
            body,
            r#"<p class="empty"><b>{}</b>: none recorded yet (SES's events, the pick slots).</p>"#,
            escape(&title)
        );
    } else {
        body.push_str(&line_chart(
            &title,
            &series,
            &format!("{unit}s since the first email"),
            "emails",
            None,
        ));
    }

    // 5. The experiment's variants: the rate people clicked (or opened), with its interval.
    if let Some(e) = &status.experiment {
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
        body.push_str(&bar_chart(
            &format!("Experiment: rate per delivered email, 95 % interval ({decided})"),
            &bars,
            "percent",
        ));
    }

    format!(
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{id}</title><style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 700px; }}
table.counts {{ border-collapse: collapse; margin: 12px 0; font-size: 13px; }}
table.counts th, table.counts td {{ border: 1px solid #ccc; padding: 4px 6px; text-align: right; }}
figure {{ margin: 18px 0; }} figcaption {{ font-weight: 600; margin-bottom: 4px; }}
</style></head><body><h1>Campaign {id}</h1><p>State: {state}</p>{body}</body></html>"#,
        id = escape(&status.campaign_id),
        state = escape(status.state),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_scale_to_their_data_and_escape_labels() {
        let chart = line_chart(
            "<rate>",
            &[Series {
                label: "a & b".into(),
                points: vec![(0.0, 1.0), (2.0, 9.0)],
            }],
            "x",
            "y",
            Some((14.0, "ceiling")),
        );
        assert!(chart.contains("&lt;rate&gt;") && chart.contains("a &amp; b"));
        assert!(chart.contains(r#"class="reference""#));
        assert_eq!(nice_max(14.7), 20.0);
        assert_eq!(nice_max(0.0), 1.0);
        let bars = bar_chart(
            "t",
            &[Bar {
                label: "v".into(),
                value: 5.0,
                interval: Some((4.0, 6.0)),
            }],
            "%",
        );
        assert!(bars.contains(r#"class="bar""#) && bars.contains(r#"class="interval""#));
        assert_eq!(
            histogram([0, 59_999, 120_000].into_iter(), 0, 60_000),
            [(0.0, 2.0), (1.0, 0.0), (2.0, 1.0)]
        );
    }
}

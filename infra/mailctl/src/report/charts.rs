//! The two charts `report` draws, by hand as inline SVG: a line chart (with an optional
//! reference line, a quota) and a bar chart (with whiskers for intervals), and the
//! histogram the plots bucket times with. A plotting crate (plotters) would bring a font
//! stack into the operator tool for them.

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

pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The most intervals an axis is cut into (its ticks, 0 included, one more).
const MAX_INTERVALS: u32 = 5;

/// An axis from 0 with ticks at round values: the step is 1, 2 or 5 times a power of ten
/// (0, 10, 20 ... or 0, 0.2, 0.4 ..., never 12.5), the smallest such step that covers `max`
/// in at most `MAX_INTERVALS` intervals; the axis ends at the first tick at or above `max`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Axis {
    step: f64,
    intervals: u32,
}

impl Axis {
    fn covering(max: f64) -> Axis {
        // Nothing to show (or nothing sane): one unit, in one step.
        let max = if max.is_finite() && max > 0.0 {
            max
        } else {
            1.0
        };
        let raw = max / f64::from(MAX_INTERVALS);
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * magnitude)
            // A hair of slack: 0.1 * 3 is not quite 0.3 in floating point.
            .find(|step| step * f64::from(MAX_INTERVALS) >= max * (1.0 - 1e-9))
            .unwrap_or(10.0 * magnitude);
        let intervals = ((max / step) - 1e-9).ceil().max(1.0) as u32;
        Axis { step, intervals }
    }

    fn top(self) -> f64 {
        self.step * f64::from(self.intervals)
    }

    /// Every tick's value and its label, 0 first; each label as precise as the step.
    fn ticks(self) -> impl Iterator<Item = (f64, String)> {
        // The slack keeps 0.1 (log10 a hair under -1) at one decimal.
        let decimals = (-(self.step.log10() + 1e-9).floor()).max(0.0) as usize;
        (0..=self.intervals).map(move |i| {
            let v = self.step * f64::from(i);
            (v, format!("{v:.decimals$}"))
        })
    }
}

fn frame(out: &mut String, y_axis: Axis, y_label: &str, x_label: &str) {
    let plot_h = HEIGHT - BOTTOM - TOP;
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{b}" stroke="#444"/><line x1="{LEFT}" y1="{b}" x2="{WIDTH}" y2="{b}" stroke="#444"/>"##,
        b = HEIGHT - BOTTOM
    );
    for (v, label) in y_axis.ticks() {
        let y = HEIGHT - BOTTOM - plot_h * v / y_axis.top();
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" font-size="10" text-anchor="end">{label}</text><line x1="{LEFT}" y1="{y}" x2="{WIDTH}" y2="{y}" stroke="#eee"/>"##,
            LEFT - 4.0,
            y + 3.0,
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
    let x_axis = Axis::covering(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .fold(1.0f64, f64::max),
    );
    let x_max = x_axis.top();
    let y_top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(reference.map(|r| r.0))
        .fold(0.0f64, f64::max);
    let y_axis = Axis::covering(y_top * 1.05);
    let y_max = y_axis.top();
    let (plot_w, plot_h) = (WIDTH - LEFT - 8.0, HEIGHT - BOTTOM - TOP);
    let x = |v: f64| LEFT + plot_w * v / x_max;
    let y = |v: f64| HEIGHT - BOTTOM - plot_h * v / y_max;
    let mut out = format!(
        r#"<figure><figcaption>{}</figcaption><svg role="img" aria-label="{}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">"#,
        escape(title),
        escape(title)
    );
    frame(&mut out, y_axis, y_label, x_label);
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
    for (tick, label) in x_axis.ticks() {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" font-size="10" text-anchor="middle">{label}</text>"#,
            x(tick),
            HEIGHT - BOTTOM + 11.0,
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
    let y_axis = Axis::covering(y_top * 1.05);
    let y_max = y_axis.top();
    let (plot_w, plot_h) = (WIDTH - LEFT - 8.0, HEIGHT - BOTTOM - TOP);
    let slot = plot_w / bars.len().max(1) as f64;
    let y = |v: f64| HEIGHT - BOTTOM - plot_h * v / y_max;
    let mut out = format!(
        r#"<figure><figcaption>{}</figcaption><svg role="img" aria-label="{}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">"#,
        escape(title),
        escape(title)
    );
    frame(&mut out, y_axis, y_label, "");
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
pub fn histogram(
    times: impl Iterator<Item = u64>,
    start_ms: u64,
    width_ms: u64,
) -> Vec<(f64, f64)> {
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

#[cfg(test)]
mod tests;

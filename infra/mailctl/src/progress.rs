//! Progress of a long command (`run`, `resend`, `plan`) on stderr: on a terminal one line
//! redrawn in place a few times a second; otherwise (a file, a pipe, CI) a plain line every
//! few seconds. Counts, the rate and, when the total is known, the time left.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Progress {
    what: &'static str,
    started: Instant,
    terminal: bool,
    last: Mutex<Option<Instant>>,
}

impl Progress {
    pub fn new(what: &'static str) -> Self {
        Self::to(what, std::io::stderr().is_terminal())
    }

    fn to(what: &'static str, terminal: bool) -> Self {
        Self {
            what,
            started: Instant::now(),
            terminal,
            last: Mutex::new(None),
        }
    }

    fn every(&self) -> Duration {
        if self.terminal {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(5)
        }
    }

    /// `done` of `total` (when known) `unit`s, with `detail`; printed only if the last line
    /// is old enough.
    pub fn report(&self, done: u64, total: Option<u64>, unit: &str, detail: &str) {
        let mut last = mailflow::runtime::lock(&self.last);
        let now = Instant::now();
        // The first line waits a full interval too: a short command prints none.
        let since = last.unwrap_or(self.started);
        if now.duration_since(since) < self.every() {
            return;
        }
        *last = Some(now);
        let line = self.line(done, total, unit, detail, now.duration_since(self.started));
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }

    fn line(
        &self,
        done: u64,
        total: Option<u64>,
        unit: &str,
        detail: &str,
        elapsed: Duration,
    ) -> String {
        let rate = done as f64 / elapsed.as_secs_f64().max(0.001);
        let mut line = match total {
            Some(total) => format!("{}: {done} of {total} {unit}", self.what),
            None => format!("{}: {done} {unit}", self.what),
        };
        if !detail.is_empty() {
            line.push_str(&format!(", {detail}"));
        }
        line.push_str(&format!(" · {rate:.1}/s · {}", clock(elapsed)));
        if let Some(total) = total.filter(|_| rate > 0.0) {
            let left = total.saturating_sub(done) as f64 / rate;
            line.push_str(&format!(
                " · about {} left",
                clock(Duration::from_secs_f64(left))
            ));
        }
        line
    }

    /// Ends the redrawn line on a terminal (the command's own output follows).
    pub fn finish(&self) {
        if self.terminal && mailflow::runtime::lock(&self.last).is_some() {
            eprintln!();
        }
    }
}

/// `1h02m03s`, `2m05s`, `7s`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_the_counts_the_rate_and_the_time_left() {
        let p = Progress::to("run", false);
        let line = p.line(
            500,
            Some(2000),
            "users",
            "480 sent",
            Duration::from_secs(50),
        );
        assert_eq!(
            line,
            "run: 500 of 2000 users, 480 sent · 10.0/s · 50s · about 2m30s left"
        );
        let line = p.line(30, None, "users read", "", Duration::from_secs(3723));
        assert_eq!(line, "run: 30 users read · 0.0/s · 1h02m03s");
    }
}

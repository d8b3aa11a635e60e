//! A campaign's guardrails (docs/pinpoint.md), as `plan` and `status` show them: its
//! holdout, deadline and cap exemption, and the stack's frequency caps and quiet hours;
//! what they would hold back before it starts, and what they held back once it runs.

use crate::experiment::ExperimentPlan;
use crate::format::format_ms;
use mailflow::domain::guardrails::{CampaignGuardrails, FrequencyCaps, QuietHours, QuietPolicy};
use serde::Serialize;
use std::collections::BTreeMap;

/// What the campaign's guardrails and the stack's caps and quiet hours would decide, as of
/// now (docs/pinpoint.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuardrailsPlan {
    pub holdout_bp: u32,
    /// Users in the holdout group: recorded held_out, never sent.
    pub held_out: usize,
    pub deadline_ms: Option<i64>,
    /// Users whose email would fall in their quiet hours: held until they end (defer), or
    /// recorded quiet_hours (skip: not counted in `wouldSend`).
    pub in_quiet_hours: usize,
    pub quiet_policy: Option<&'static str>,
    /// Users the frequency caps would hold back if sent now (each user's `#caps` item read).
    pub capped: usize,
    pub cap_exempt: bool,
    /// The A/B experiment's groups (docs/experiments.md).
    pub experiment: Option<ExperimentPlan>,
    /// When the last email would go at the rate, each starting when its user may go (now,
    /// their local time, after quiet hours, or the experiment's decision for the rest).
    pub last_send_ms: Option<i64>,
    /// Of those it would send, the emails that would go after the deadline: recorded expired.
    pub past_deadline: u64,
}

/// The guardrails `plan` applies: the campaign's (as recorded, or as its start would record
/// them), the stack's caps and quiet hours (SendEmail's), and the users' cap histories.
pub struct Guardrails<C> {
    pub campaign: CampaignGuardrails,
    pub caps: FrequencyCaps,
    pub quiet: Option<QuietHours>,
    pub fallback_zone: mailflow::domain::local_time::ZoneName,
    pub history: C,
    /// The campaign's experiment (as recorded, or as its start would record it).
    pub experiment: Option<mailflow::domain::experiment::Experiment>,
}

impl GuardrailsPlan {
    /// The guardrails a plan starts from, nobody counted yet.
    pub fn of<C>(guardrails: &Guardrails<C>) -> Self {
        GuardrailsPlan {
            holdout_bp: guardrails.campaign.holdout_bp,
            deadline_ms: guardrails.campaign.deadline_ms,
            quiet_policy: guardrails.quiet.map(|q| match q.policy {
                QuietPolicy::Defer => "defer",
                QuietPolicy::Skip => "skip",
            }),
            cap_exempt: guardrails.campaign.cap_exempt,
            experiment: guardrails.experiment.as_ref().map(ExperimentPlan::of),
            ..Default::default()
        }
    }

    /// The plan's guardrail lines: who they would hold back, the experiment's groups, and a
    /// deadline the sends would not meet at `send_rate`.
    pub fn describe(&self, send_rate: f64) -> Option<String> {
        let g = self;
        let mut parts = Vec::new();
        if g.holdout_bp > 0 {
            parts.push(format!(
                "holdout {}.{:02} %: {} held out",
                g.holdout_bp / 100,
                g.holdout_bp % 100,
                g.held_out
            ));
        }
        if let Some(policy) = g.quiet_policy {
            parts.push(format!(
                "{} due in their quiet hours ({policy})",
                g.in_quiet_hours
            ));
        }
        if g.cap_exempt {
            parts.push("exempt from frequency caps".into());
        } else if g.capped > 0 {
            parts.push(format!(
                "{} held back by frequency caps if sent now",
                g.capped
            ));
        }
        let mut out = String::new();
        if !parts.is_empty() {
            out.push_str(&format!("guardrails: {}\n", parts.join("; ")));
        }
        if let Some(e) = &g.experiment {
            out.push_str(&e.describe());
        }
        if let Some(line) = self.past_deadline_line(send_rate) {
            out.push_str(&line);
        }
        (!out.is_empty()).then_some(out)
    }

    /// The warning that the sends at `send_rate` would not all go before the deadline.
    fn past_deadline_line(&self, send_rate: f64) -> Option<String> {
        let (Some(deadline), Some(last)) = (self.deadline_ms, self.last_send_ms) else {
            return None;
        };
        if self.past_deadline == 0 {
            return None;
        }
        let now = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
        let hours = |ms: i64| (ms - now) as f64 / 3_600_000.0;
        Some(format!(
            "the deadline is {:.1} h away and the last email would go in {:.1} h (each from when its user may go: now, their local time, after quiet hours, or the experiment's decision for the rest; then at {}/s): about {} users would be recorded expired (raise the rate, or give a later --deadline)\n",
            hours(deadline),
            hours(last),
            send_rate,
            self.past_deadline
        ))
    }
}

/// `status`'s guardrails line, None when there is nothing to say: the holdout next to the
/// group sent to (and its clicks), the deadline and any move of it (`deadline_moved`: when,
/// and from what), skips by reason.
pub fn status_line(
    guardrails: Option<CampaignGuardrails>,
    skipped: &BTreeMap<String, usize>,
    sent: usize,
    clicked: usize,
    deadline_moved: Option<(u64, Option<i64>)>,
) -> Option<String> {
    let g = guardrails.unwrap_or_default();
    if skipped.is_empty() && g == Default::default() {
        return None;
    }
    let held_out = skipped.get("held_out").copied().unwrap_or(0);
    let mut parts = Vec::new();
    if g.holdout_bp > 0 || held_out > 0 {
        parts.push(format!(
            "holdout {}.{:02} %: {held_out} held out (no email) vs {sent} sent ({clicked} clicked)",
            g.holdout_bp / 100,
            g.holdout_bp % 100,
        ));
    }
    if let Some(deadline) = g.deadline_ms {
        let moved = match deadline_moved {
            Some((at, from)) => format!(
                " (moved at {} from {})",
                format_ms(at),
                from.map_or("none".into(), |d| format_ms(d.max(0) as u64))
            ),
            None => String::new(),
        };
        parts.push(format!(
            "deadline {}{moved}",
            format_ms(deadline.max(0) as u64)
        ));
    }
    if g.cap_exempt {
        parts.push("exempt from frequency caps".into());
    }
    let skipped: Vec<String> = skipped
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    if !skipped.is_empty() {
        parts.push(format!("SKIPPED by guardrails: {}", skipped.join(" ")));
    }
    Some(format!("  {}", parts.join(" | ")))
}

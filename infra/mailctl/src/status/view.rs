//! The text `mailctl status` prints for a `CampaignStatus`: the headline (state, progress
//! bar, counts, queues, DLQs, rate and ETA, engagement), then a line per feature that has
//! something to say, the holds, and the failures by reason.

use super::CampaignStatus;
use crate::format::format_ms;

/// The progress bar's width, in characters.
const BAR_WIDTH: usize = 30;

/// Adds `text` as a line.
fn push_line(out: &mut String, text: &str) {
    out.push_str(text);
    out.push('\n');
}

/// Everything `status` prints for `s`, line by line.
pub fn describe(s: &CampaignStatus) -> String {
    let mut out = String::new();
    push_line(&mut out, &headline(s));
    if let Some(topic) = &s.topic {
        push_line(
            &mut out,
            &crate::topics::status_line(topic, &s.excluded, s.excluded_run_ms),
        );
    }
    if let Some(line) = definition_line(s) {
        push_line(&mut out, &line);
    }
    if let Some(line) = crate::public_urls::status_line(&s.open_content) {
        push_line(&mut out, &line);
    }
    let clicked = s.engagement.get("clicked").copied().unwrap_or(0);
    let moved = s
        .deadline_moved_at_ms
        .map(|at| (at, s.deadline_moved_from_ms));
    if let Some(line) =
        crate::guardrails::status_line(s.guardrails, &s.skipped, s.sent, clicked, moved)
    {
        push_line(&mut out, &line);
    }
    if let Some(experiment) = &s.experiment {
        out.push_str(&experiment.describe());
    }
    for line in holds(s) {
        push_line(&mut out, &line);
    }
    if let Some(local) = &s.local_time {
        out.push_str(&local.describe());
    }
    let quota = (s.ses_quota.as_ref(), s.ses_quota_unknown.as_deref());
    if let Some(line) = crate::send_rate::status_quota(quota.0, quota.1) {
        push_line(&mut out, &line);
    }
    for (what, reasons) in [
        ("FAILED", &s.failed_by_reason),
        ("dead-lettered", &s.dead_lettered_by_reason),
    ] {
        for (reason, n) in reasons {
            push_line(&mut out, &format!("  {what} {n}: {reason}"));
        }
    }
    out
}

/// The campaign definition version it ran (`definition orders v1`), if it ran one.
pub fn definition_line(s: &CampaignStatus) -> Option<String> {
    let pinned = s.definition.as_ref()?;
    Some(format!("definition {} v{}", pinned.name, pinned.version))
}

/// The first two lines: the state and a progress bar of the users decided, the counts, the
/// queues and DLQs, the rate and ETA; then the engagement and the reconciled sends.
fn headline(s: &CampaignStatus) -> String {
    let done = s.sent + s.failed + s.dead_lettered + s.skipped.values().sum::<usize>();
    let total = done as u64 + s.in_progress as u64 + s.users_pending + s.emails_pending;
    let filled = progress_filled(done as u64, total);
    let engagement: Vec<String> = s
        .engagement
        .iter()
        .map(|(what, n)| format!("{what} {n}"))
        .collect();
    let eta = crate::send_rate::status_part(
        s.shared_rate.as_ref(),
        s.send_rate,
        s.eta_seconds,
        s.users_pending + s.emails_pending,
        s.retrying,
    );
    format!(
        "{} {} [{}{}] sent {} failed {} dead-lettered {} in progress {} | queued: users {} emails {} | duplicates suppressed {} | DLQ now (all campaigns): users {} emails {} continuation {} | {}\n  {} | reconciled from SES events {}",
        s.campaign_id,
        s.state,
        "#".repeat(filled),
        ".".repeat(BAR_WIDTH - filled),
        s.sent,
        s.failed,
        s.dead_lettered,
        s.in_progress,
        s.users_pending,
        s.emails_pending,
        s.duplicates_suppressed,
        s.users_dlq,
        s.emails_dlq,
        s.continuation_dlq
            .map_or_else(|| "? (MAILFLOW_CONTINUATION_DLQ_URL not set)".into(), |n| n.to_string()),
        eta,
        engagement.join(" "),
        s.reconciled,
    )
}

/// Characters of the progress bar filled with `done` of `total` decided (all of it when
/// there is nothing to decide).
fn progress_filled(done: u64, total: u64) -> usize {
    (done * BAR_WIDTH as u64)
        .checked_div(total)
        .map_or(BAR_WIDTH, |f| f as usize)
}

/// The cancellation or the pause, if the campaign has one; or that the consumers are
/// stopped by another campaign's pause.
fn holds(s: &CampaignStatus) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(at) = s.cancelled_at_ms {
        lines.push(format!(
            "  CANCELLED at {at} ms by {}: {} ({} users recorded CANCELLED; skips are in run summaries and CreateEmails' logs)",
            s.cancelled_by.as_deref().unwrap_or("?"),
            s.cancel_reason.as_deref().unwrap_or(""),
            s.cancelled
        ));
    }
    if let Some(at) = s.paused_at_ms {
        lines.push(format!(
            "  PAUSED since {} by {}: {} | consumers {:?} | resume before {} (the queues keep messages 14 days)",
            format_ms(at),
            s.paused_by.as_deref().unwrap_or("?"),
            s.pause_reason.as_deref().unwrap_or(""),
            s.consumers,
            s.resume_before_ms.map_or("?".into(), format_ms),
        ));
    } else if s.consumers.get("Disabled").is_some_and(|n| *n > 0) {
        lines.push(format!(
            "  consumers {:?}: another campaign on this stack is paused, and the queues are shared",
            s.consumers
        ));
    }
    lines
}

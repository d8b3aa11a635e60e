//! `status`, `report` and `redrive`: a campaign's state from its records and the queues (as
//! text, JSON or an HTML page with plots), and DLQs moved back to their queues.

use super::campaign::fail_on_problems;
use super::{target, QueueChoice, TargetArgs};
use anyhow::Result;
use mailctl::ops;
use std::time::Duration;

pub async fn status(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    watch: bool,
    json: bool,
    t: &TargetArgs,
) -> Result<()> {
    mailflow::domain::campaign::CampaignId::parse(campaign)?;
    let target = target(sdk, t).await?;
    // The account's quota, read once: it bounds the rate SendEmail sends at.
    let quota = mailflow::adapters::ses::send_quota(sdk).await;
    loop {
        let mut s = ops::status(sdk, &target, campaign).await?;
        match &quota {
            Ok(q) => s.ses_quota = Some(*q),
            Err(reason) => s.ses_quota_unknown = Some(reason.to_string()),
        }
        if json {
            println!("{}", serde_json::to_string(&s)?);
        } else {
            print_status(&s);
        }
        if !watch {
            return Ok(());
        }
        if s.users_pending + s.emails_pending == 0 {
            // Watched to the end: the exit status says how it ended.
            return fail_on_problems(&s);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// `report`: the campaign's status and records, as one HTML file (`mailctl::report`).
pub async fn report(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    out: Option<std::path::PathBuf>,
    t: &TargetArgs,
) -> Result<()> {
    let target = super::target(sdk, t).await?;
    let status = ops::status(sdk, &target, campaign).await?;
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let records =
        mailflow_local::ledger_scan::records(&dynamo, &target.sends_table, campaign).await?;
    let path = out.unwrap_or_else(|| format!("{campaign}-report.html").into());
    std::fs::write(&path, mailctl::report::render(&status, &records))?;
    println!("{}", path.display());
    Ok(())
}

pub async fn redrive(
    sdk: &aws_config::SdkConfig,
    queue: QueueChoice,
    t: &TargetArgs,
) -> Result<()> {
    let target = target(sdk, t).await?;
    let (dlq, source) = match queue {
        QueueChoice::Users => (&target.users_dlq, &target.users_queue),
        QueueChoice::Emails => (&target.emails_dlq, &target.emails_queue),
        QueueChoice::Continuation => match (&target.continuation_dlq, &target.continuation_queue) {
            (Some(dlq), Some(queue)) => (dlq, queue),
            _ => anyhow::bail!(
                "set {} and {} (the stack's outputs {} and {}; redeploy a stack that lacks them)",
                mailctl::stack_outputs::CONTINUATION_DLQ.var,
                mailctl::stack_outputs::CONTINUATION_QUEUE.var,
                mailctl::stack_outputs::CONTINUATION_DLQ.output,
                mailctl::stack_outputs::CONTINUATION_QUEUE.output
            ),
        },
        QueueChoice::SesEvents => (&target.ses_events_dlq, &target.ses_events_queue),
    };
    let moved =
        mailflow_local::queues::redrive(&aws_sdk_sqs::Client::new(sdk), dlq, source).await?;
    println!("moved {moved} messages from {dlq} to {source}");
    Ok(())
}

fn print_status(s: &ops::CampaignStatus) {
    let done = s.sent + s.failed + s.dead_lettered + s.skipped.values().sum::<usize>();
    let total = done as u64 + s.in_progress as u64 + s.users_pending + s.emails_pending;
    let width = 30;
    let filled = (done as u64 * width as u64)
        .checked_div(total)
        .map_or(width, |f| f as usize);
    let engagement: Vec<String> = s
        .engagement
        .iter()
        .map(|(what, n)| format!("{what} {n}"))
        .collect();
    let shared = match &s.shared_rate {
        Some(r) => format!(
            "shared rate {}/s ({}; ceiling {}/s) | ",
            (r.rate * 10.0).round() / 10.0,
            r.source.as_str(),
            r.ceiling,
        ),
        None => String::new(),
    };
    let eta = match (s.eta_seconds, s.send_rate) {
        (Some(eta), Some(rate)) => {
            format!("{shared}{rate}/s sent over the last minute | ETA {eta}s")
        }
        _ if s.users_pending + s.emails_pending == 0 => "queues empty".into(),
        _ => format!(
            "nothing sent in the last minute | ETA unknown ({} waiting to retry)",
            s.retrying
        ),
    };
    println!(
        "{} {} [{}{}] sent {} failed {} dead-lettered {} in progress {} | queued: users {} emails {} | duplicates suppressed {} | DLQ now (all campaigns): users {} emails {} continuation {} | {}\n  {} | reconciled from SES events {}",
        s.campaign_id,
        s.state,
        "#".repeat(filled),
        ".".repeat(width - filled),
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
    );
    if let Some(topic) = &s.topic {
        println!(
            "  topic {topic} | left out of the audience: {} ({})",
            s.excluded.total(),
            s.excluded.describe()
        );
    }
    let o = &s.open_content;
    if o.picks_frozen + o.opens + o.proxy_opens + o.machine_opens + o.clicks + o.ignored_clicks > 0
    {
        println!(
            "  pick slots: opened {} (+{} through image proxies, {} by machines) | clicks {} ({} unique, {} not counted: HEAD, scanners, at delivery) | picks frozen {} ({} fallback)",
            o.opens,
            o.proxy_opens,
            o.machine_opens,
            o.clicks,
            o.unique_clicks,
            o.ignored_clicks,
            o.picks_frozen,
            o.fallbacks,
        );
    }
    if let Some(line) = guardrails_line(s) {
        println!("{line}");
    }
    if let Some(experiment) = &s.experiment {
        print!("{}", experiment.describe());
    }
    if let Some(at) = s.cancelled_at_ms {
        println!(
            "  CANCELLED at {at} ms by {}: {} ({} users recorded CANCELLED; skips are in run summaries and CreateEmails' logs)",
            s.cancelled_by.as_deref().unwrap_or("?"),
            s.cancel_reason.as_deref().unwrap_or(""),
            s.cancelled
        );
    }
    if let Some(at) = s.paused_at_ms {
        println!(
            "  PAUSED since {} by {}: {} | consumers {:?} | resume before {} (the queues keep messages 14 days)",
            ops::format_ms(at),
            s.paused_by.as_deref().unwrap_or("?"),
            s.pause_reason.as_deref().unwrap_or(""),
            s.consumers,
            s.resume_before_ms.map_or("?".into(), ops::format_ms),
        );
    } else if s.consumers.get("Disabled").is_some_and(|n| *n > 0) {
        println!(
            "  consumers {:?}: another campaign on this stack is paused, and the queues are shared",
            s.consumers
        );
    }
    if let Some(local) = &s.local_time {
        print!("{}", local.describe());
    }
    match (&s.ses_quota, &s.ses_quota_unknown) {
        (Some(q), _) => println!(
            "  SES: at most {}/s for the account (the stack sends at the lower of RateControl's SES_QUOTA_SHARE_PERCENT of this and SEND_RATE_PER_SECOND); 24-hour quota {}",
            q.max_send_rate,
            q.describe_24_hours()
        ),
        (None, Some(reason)) => println!(
            "  SES quota not known ({reason}): the stack sends under the last ceiling RateControl wrote, or SEND_RATE_PER_SECOND"
        ),
        (None, None) => {}
    }
    for (what, reasons) in [
        ("FAILED", &s.failed_by_reason),
        ("dead-lettered", &s.dead_lettered_by_reason),
    ] {
        for (reason, n) in reasons {
            println!("  {what} {n}: {reason}");
        }
    }
}

/// The campaign's guardrails and what they decided: the holdout next to the group sent to
/// (and its clicks), the deadline and any move of it, skips by reason.
fn guardrails_line(s: &ops::CampaignStatus) -> Option<String> {
    let g = s.guardrails.unwrap_or_default();
    if s.skipped.is_empty() && g == Default::default() {
        return None;
    }
    let held_out = s.skipped.get("held_out").copied().unwrap_or(0);
    let mut parts = Vec::new();
    if g.holdout_bp > 0 || held_out > 0 {
        let clicked = s.engagement.get("clicked").copied().unwrap_or(0);
        parts.push(format!(
            "holdout {}.{:02} %: {held_out} held out (no email) vs {} sent ({clicked} clicked)",
            g.holdout_bp / 100,
            g.holdout_bp % 100,
            s.sent
        ));
    }
    if let Some(deadline) = g.deadline_ms {
        let moved = match s.deadline_moved_at_ms {
            Some(at) => format!(
                " (moved at {} from {})",
                ops::format_ms(at),
                s.deadline_moved_from_ms
                    .map_or("none".into(), |d| ops::format_ms(d.max(0) as u64))
            ),
            None => String::new(),
        };
        parts.push(format!(
            "deadline {}{moved}",
            ops::format_ms(deadline.max(0) as u64)
        ));
    }
    if g.cap_exempt {
        parts.push("exempt from frequency caps".into());
    }
    let skipped: Vec<String> = s
        .skipped
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    if !skipped.is_empty() {
        parts.push(format!("SKIPPED by guardrails: {}", skipped.join(" ")));
    }
    Some(format!("  {}", parts.join(" | ")))
}

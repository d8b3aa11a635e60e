//! What a chaos run found: its counts, the checks of the ledger and the SES record against
//! the seeded audience, and the report as Markdown.

use super::faults::Unrecorded;
use super::runs::RunOutcome;
use super::ChaosOptions;
use anyhow::Result;
use mailflow::adapters::sends::SendRecord;
use mailflow::domain::ledger::SendStatus;
use mailflow_local::names;
use mailflow_local::pipeline::SeededStack;
use mailflow_local::runner::ConsumerStats;
use mailflow_local::seed::SeedReport;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Dead-letter messages found after the drain, by whose send they concern.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DlqAccount {
    pub messages: usize,
    /// The user's record was already SENT (or FAILED): the message was a spare copy.
    pub settled: usize,
    /// The user had no final record yet: redriven, as an operator would, and drained again.
    pub unsettled: usize,
    pub unreadable: usize,
    pub redriven: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosReport {
    pub options: Option<ChaosOptions>,
    pub users: usize,
    pub audience: usize,
    pub deliverable: usize,
    pub invalid_addresses: usize,
    /// Messages handed to a second invocation, by function.
    pub second_deliveries: BTreeMap<String, usize>,
    /// Invocations killed, by stage and point (GetUsers runs are in `runs`).
    pub kills: BTreeMap<String, usize>,
    pub throttles: usize,
    /// SES calls that got no answer (the AWS outage): outcome unknown.
    pub unknown_outcomes: usize,
    /// DELIVERY events SES published for accepted emails, and the records SesEvents found still
    /// IN_PROGRESS (their attempt killed after SES accepted) and marked SENT before a retry.
    pub send_events: usize,
    pub reconciled: usize,
    pub mongo_restarts: usize,
    pub aws_outages: usize,
    /// Open connections of the functions the AWS outage cut.
    pub aws_connections_cut: usize,
    /// The operator's pause and resume part-way (`mailctl pause|resume`), and the emails
    /// recorded SENT between the pause taking hold (its in-hand batches done) and the resume:
    /// must be 0.
    pub paused_seconds: u64,
    pub sent_while_paused: usize,
    pub outage_seconds: u64,
    /// Send slots released (`--local-time`).
    pub slots_released: usize,
    pub runs: Vec<RunOutcome>,
    pub dlq: DlqAccount,
    pub records: BTreeMap<String, usize>,
    pub emails: usize,
    /// Emails beyond the first for some user, and what the injected faults allow.
    pub extra_emails: usize,
    pub extra_email_bound: usize,
    /// Eligible users without a SENT record and an email.
    pub lost: usize,
    pub ineligible_emailed: usize,
    pub panics: usize,
    pub consumers: BTreeMap<String, ConsumerStats>,
    pub wall_seconds: f64,
    /// Every broken promise; empty when the run passed.
    pub violations: Vec<String>,
}

/// Compares the ledger and the SES record with the seeded audience.
pub(super) async fn check(
    report: &mut ChaosReport,
    local: &SeededStack,
    endpoint: &str,
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    campaign: &str,
    unrecorded: &Unrecorded,
) -> Result<()> {
    let records: BTreeMap<String, _> =
        mailflow_local::ledger_scan::records(dynamo, table, campaign)
            .await?
            .into_iter()
            .map(|r| (r.user_id.clone(), r))
            .collect();
    for record in records.values() {
        *report
            .records
            .entry(
                record
                    .status
                    .map_or("unreadable", |s| s.as_str())
                    .to_owned(),
            )
            .or_default() += 1;
    }
    let emails = emails_by_user(report, local, endpoint).await?;
    let mut problems = deliverable_problems(report, &local.seeded, &records, &emails, unrecorded);
    problems.extend(eligibility_problems(
        report,
        &local.seeded,
        &records,
        &emails,
    ));
    if report.sent_while_paused > 0 {
        problems.push(format!(
            "{} emails sent while the campaign was paused (after its in-hand batches)",
            report.sent_while_paused
        ));
    }
    if !problems.is_empty() {
        let shown = problems.len().min(20);
        report.violations.push(format!(
            "{} users wrong: {}{}",
            problems.len(),
            problems[..shown].join("; "),
            if problems.len() > shown { "; ..." } else { "" }
        ));
    }
    Ok(())
}

/// Emails in the SES record, by the user their address was seeded for (the address itself
/// where none was), counted in `report.emails` too.
async fn emails_by_user(
    report: &mut ChaosReport,
    local: &SeededStack,
    endpoint: &str,
) -> Result<BTreeMap<String, usize>> {
    let owner: BTreeMap<&str, &str> = local
        .seeded
        .addresses
        .iter()
        .map(|(user, address)| (address.as_str(), user.as_str()))
        .collect();
    let mut emails: BTreeMap<String, usize> = BTreeMap::new();
    for message in mailflow_local::ses_record::sent_to_domain(endpoint, &local.domain).await? {
        for to in &message.to {
            report.emails += 1;
            let user = owner.get(to.as_str()).copied().unwrap_or(to.as_str());
            *emails.entry(user.to_owned()).or_default() += 1;
        }
    }
    Ok(emails)
}

/// Every deliverable user must have a SENT record and an email, and no more emails beyond
/// the first than the SES calls the faults left unrecorded for them.
fn deliverable_problems(
    report: &mut ChaosReport,
    seeded: &SeedReport,
    records: &BTreeMap<String, SendRecord>,
    emails: &BTreeMap<String, usize>,
    unrecorded: &Unrecorded,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (user, _) in seeded.deliverable() {
        let status = records.get(user).and_then(|r| r.status);
        let got = emails.get(user).copied().unwrap_or(0);
        if status != Some(SendStatus::Sent) || got == 0 {
            report.lost += 1;
            problems.push(format!("{user}: record {status:?}, {got} emails"));
        }
        let allowed = unrecorded.allowed.get(user).copied().unwrap_or(0);
        let extra = got.saturating_sub(1);
        report.extra_emails += extra;
        report.extra_email_bound += allowed;
        if extra > allowed {
            let calls = unrecorded.called_in.get(user).cloned().unwrap_or_default();
            problems.push(format!(
                "{user}: {got} emails, more than one plus {allowed} unrecorded sends (SES called in {})",
                calls.join(", ")
            ));
        }
    }
    problems
}

/// An invalid address is FAILED with a reason; nobody outside the audience (or with an
/// invalid address) gets an email, and nobody outside it a send record.
fn eligibility_problems(
    report: &mut ChaosReport,
    seeded: &SeedReport,
    records: &BTreeMap<String, SendRecord>,
    emails: &BTreeMap<String, usize>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for user in &seeded.invalid_addresses {
        let record = records.get(user);
        let failed_with_reason = record.is_some_and(|r| {
            r.status == Some(SendStatus::Failed)
                && r.last_error.as_deref().is_some_and(|e| !e.is_empty())
        });
        if !failed_with_reason {
            problems.push(format!(
                "{user} (invalid address): not FAILED with a reason"
            ));
        }
    }
    for (user, n) in emails {
        if !seeded.audience.contains_key(user) || seeded.invalid_addresses.contains(user) {
            report.ineligible_emailed += 1;
            problems.push(format!("{user} is not eligible but got {n} emails"));
        }
    }
    for user in records.keys() {
        if !seeded.audience.contains_key(user) {
            problems.push(format!(
                "{user} is not in the audience but has a send record"
            ));
        }
    }
    problems
}

/// The report as Markdown, for docs/reliability.md.
pub fn markdown(r: &ChaosReport) -> String {
    let mut out = String::from("| Chaos run | |\n|---|---|\n");
    setup_rows(&mut out, r);
    fault_rows(&mut out, r);
    outcome_rows(&mut out, r);
    if r.violations.is_empty() {
        out.push_str("\nPassed: nothing lost, no duplicate beyond the bound.\n");
    } else {
        out.push_str("\nFAILED:\n");
        for v in &r.violations {
            out.push_str(&format!("- {v}\n"));
        }
    }
    out
}

/// One row of the report's table.
fn line(out: &mut String, k: &str, v: String) {
    out.push_str(&format!("| {k} | {v} |\n"));
}

/// The audience, the slots released, the pause, and the GetUsers runs.
fn setup_rows(out: &mut String, r: &ChaosReport) {
    line(
        out,
        "users seeded / audience / deliverable",
        format!("{} / {} / {}", r.users, r.audience, r.deliverable),
    );
    line(
        out,
        "invalid addresses in the audience",
        r.invalid_addresses.to_string(),
    );
    if r.slots_released > 0 {
        line(
            out,
            "local time: send slots released one by one during the faults",
            r.slots_released.to_string(),
        );
    }
    line(
        out,
        "paused part-way (pause, then resume), emails sent while paused",
        format!("{} s, {}", r.paused_seconds, r.sent_while_paused),
    );
    for (function, n) in &r.second_deliveries {
        line(
            out,
            &format!("messages delivered twice ({function})"),
            n.to_string(),
        );
    }
    for run in &r.runs {
        line(
            out,
            &format!("GetUsers run: {}", run.name),
            format!(
                "{} attempts{}, {}, {} users enqueued",
                run.attempts,
                if run.killed { " (first killed)" } else { "" },
                if run.completed {
                    "completed"
                } else {
                    "did not complete"
                },
                run.users_enqueued
            ),
        );
    }
}

/// The kills, SES's throttles and silences, its events, and the outages.
fn fault_rows(out: &mut String, r: &ChaosReport) {
    for (point, n) in &r.kills {
        line(out, &format!("killed: {point}"), n.to_string());
    }
    line(out, "SES calls throttled", r.throttles.to_string());
    line(
        out,
        "SES calls without an answer",
        r.unknown_outcomes.to_string(),
    );
    line(
        out,
        "SES DELIVERY events / records they reconciled (IN_PROGRESS made SENT)",
        format!("{} / {}", r.send_events, r.reconciled),
    );
    line(
        out,
        "MongoDB stopped and restarted",
        format!("{} x {} s", r.mongo_restarts, r.outage_seconds),
    );
    line(
        out,
        "AWS endpoint unreachable (open connections cut)",
        format!(
            "{} x {} s ({})",
            r.aws_outages, r.outage_seconds, r.aws_connections_cut
        ),
    );
}

/// The dead letters, the records and emails, and what went wrong.
fn outcome_rows(out: &mut String, r: &ChaosReport) {
    line(
        out,
        "dead-letter messages (spare copies / redriven)",
        format!(
            "{} ({} / {})",
            r.dlq.messages, r.dlq.settled, r.dlq.redriven
        ),
    );
    let records: Vec<String> = r.records.iter().map(|(s, n)| format!("{s} {n}")).collect();
    line(out, "send records", records.join(", "));
    line(out, "emails in the SES record", r.emails.to_string());
    line(out, "emails lost", r.lost.to_string());
    line(
        out,
        "duplicate emails (bound: SES calls in invocations cut short, or unanswered)",
        format!("{} (<= {})", r.extra_emails, r.extra_email_bound),
    );
    line(
        out,
        "ineligible users emailed",
        r.ineligible_emailed.to_string(),
    );
    line(out, "panics", r.panics.to_string());
    line(out, "wall time", format!("{:.0} s", r.wall_seconds));
}

/// What the dead-letter queues hold after the drain, accounted by whose send each message
/// concerns, then moved back to their source queues as an operator's redrive would.
pub(super) async fn account_dead_letters(
    report: &mut ChaosReport,
    local: &SeededStack,
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    campaign: &str,
) -> Result<()> {
    let sqs = aws_sdk_sqs::Client::new(&local.stack.sdk);
    let settled: BTreeSet<String> = mailflow_local::ledger_scan::records(dynamo, table, campaign)
        .await?
        .into_iter()
        .filter(|r| matches!(r.status, Some(s) if s != SendStatus::InProgress))
        .map(|r| r.user_id)
        .collect();
    for (dlq, source) in [
        (names::USERS_DLQ, names::USERS_QUEUE),
        (names::EMAILS_DLQ, names::EMAILS_QUEUE),
        (names::CONTINUATION_DLQ, names::CONTINUATION_QUEUE),
        (names::SES_EVENTS_DLQ, names::SES_EVENTS_QUEUE),
    ] {
        let moved = mailflow_local::queues::redrive_inspecting(
            &sqs,
            local.stack.queue_url(dlq)?,
            local.stack.queue_url(source)?,
            |body| {
                report.dlq.messages += 1;
                let user = serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| v["userId"].as_str().map(str::to_owned));
                match user {
                    Some(user) if settled.contains(&user) => report.dlq.settled += 1,
                    Some(_) => report.dlq.unsettled += 1,
                    None => report.dlq.unreadable += 1,
                }
            },
        )
        .await?;
        report.dlq.redriven += moved;
    }
    Ok(())
}

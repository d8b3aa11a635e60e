//! `mailctl status`'s answer, worked out from what was read: `StatusFacts` is everything
//! the stores said (the ledger, the campaigns table, the queues, the waiting room, the pick
//! counters, the rate item), `CampaignStatus::of` the counts, the state and the ETA at a
//! given instant, `view` the text. Nothing here does I/O (`ops::status` reads the facts), so
//! the state machine and the ETA are tested with facts made by hand.

pub mod view;

use crate::experiment::ExperimentStatus;
use crate::local_time::LocalTimeStatus;
use mailflow::adapters::sends::SendRecord;
use mailflow::domain::campaign_state::{CampaignRecord, Hold};
use mailflow::domain::ledger::{Engagement, SendStatus};
use mailflow::domain::local_time::WaitingReport;
use mailflow::domain::open_content::OpenCounters;
use mailflow::domain::send_rate::SharedRate;
use serde::Serialize;
use std::collections::BTreeMap;

/// What the stores hold of one campaign, read once (`ops::status`).
#[derive(Clone, Debug, Default)]
pub struct StatusFacts {
    pub campaign: String,
    /// Its records in the sends table.
    pub records: Vec<SendRecord>,
    /// Its row in the campaigns table (None: never started here).
    pub record: Option<CampaignRecord>,
    /// Messages in the campaign queues (visible, in flight or delayed) and in the DLQs.
    pub users_pending: u64,
    pub emails_pending: u64,
    pub users_dlq: u64,
    pub emails_dlq: u64,
    /// None where the stack's output is not set.
    pub continuation_dlq: Option<u64>,
    /// The campaign queues' event source mappings by state.
    pub consumers: BTreeMap<String, usize>,
    /// The waiting room's record (None: not a local-time campaign).
    pub waiting: Option<WaitingReport>,
    /// The pick slots' counts.
    pub open_content: OpenCounters,
    /// The stack's shared rate (None: nothing set it yet).
    pub shared_rate: Option<SharedRate>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CampaignStatus {
    pub campaign_id: String,
    /// `cancelled` (an operator cancelled it); `paused` (an operator or the reputation guard
    /// paused it); `not started` (never started here: no record, queues empty); `finished`
    /// when the queues are empty (they are shared: empty means no campaign has a message
    /// left) and no send is in progress; `waiting` when, that aside, users of a local-time
    /// campaign still wait for their slot; `running` otherwise (then some queued messages may be
    /// another campaign's).
    pub state: &'static str,
    /// When GetUsers started it (ms), from the campaigns table.
    pub started_at_ms: Option<u64>,
    /// The pause, if it is paused: since when (ms), by whom, why.
    pub paused_at_ms: Option<u64>,
    pub paused_by: Option<String>,
    pub pause_reason: Option<String>,
    /// While paused: SQS deletes a message 14 days (the queues' retention) after it was
    /// sent; resume before this (ms) or `mailctl resend` the campaign afterwards.
    pub resume_before_ms: Option<u64>,
    /// The campaign queues' event source mappings by state (e.g. {"Disabled": 3} while a
    /// pause holds them); empty when not known.
    pub consumers: BTreeMap<String, usize>,
    /// Users queue: waiting to be rendered (visible, in flight, or waiting out a retry delay).
    pub users_pending: u64,
    /// Emails queue: rendered, waiting to be sent (visible, in flight, or waiting out a retry
    /// delay).
    pub emails_pending: u64,
    pub in_progress: usize,
    /// Of those in progress: released after an error, waiting for their retry.
    pub retrying: usize,
    pub sent: usize,
    pub failed: usize,
    /// FAILED records by reason (the recorded error up to its first parenthesis).
    pub failed_by_reason: BTreeMap<String, usize>,
    /// Users whose email job went to the emails DLQ and who are still not sent (a redrive or
    /// a resend that sends them turns them SENT, and they leave this count).
    pub dead_lettered: usize,
    pub dead_lettered_by_reason: BTreeMap<String, usize>,
    pub duplicates_suppressed: u64,
    /// Campaign analytics from the SES events and unsubscribes: delivered, bounced,
    /// softBounced, complained, opened, clicked, unsubscribed (each user counted once).
    pub engagement: BTreeMap<&'static str, usize>,
    /// Sends an SES event marked SENT after their attempt died before it could.
    pub reconciled: usize,
    /// Messages in the DLQs now (every campaign's: a DLQ is shared).
    pub users_dlq: u64,
    pub emails_dlq: u64,
    /// GetUsers' runs and releases that failed for good (users of a local-time campaign
    /// may still be held behind one); None where the stack's output is not set.
    pub continuation_dlq: Option<u64>,
    /// Users not sent to because the campaign was cancelled (CANCELLED records).
    pub cancelled: usize,
    /// Users SendEmail decided not to send to (SKIPPED records), by reason: held_out (the
    /// holdout group), expired (the deadline passed), frequency_cap, quiet_hours, or the
    /// person's standing read again for an email that waited (unsubscribed, suppressed,
    /// left_topic, unreadable_choice, vanished).
    pub skipped: BTreeMap<String, usize>,
    /// Its deadline, holdout (basis points) and cap exemption, as recorded when it started.
    pub guardrails: Option<mailflow::domain::guardrails::CampaignGuardrails>,
    /// A later start moved the deadline: when (ms), and what it was before (None: none).
    pub deadline_moved_at_ms: Option<u64>,
    pub deadline_moved_from_ms: Option<i64>,
    /// The campaign's cancellation, if an operator cancelled it: when (ms), by whom, why.
    pub cancelled_at_ms: Option<u64>,
    pub cancelled_by: Option<String>,
    pub cancel_reason: Option<String>,
    /// Emails per second over the last minute (None: nothing sent in it).
    pub send_rate: Option<f64>,
    /// The stack's shared rate now (the rate item): emails per second, the ceiling it returns
    /// to, what sets it (configured, SES quota, lowered after throttling).
    pub shared_rate: Option<SharedRate>,
    /// Seconds until the queues drain at the shared rate (at the observed one when the stack
    /// has none yet; None: no rate to go by).
    pub eta_seconds: Option<u64>,
    /// What SES lets the account send (GetAccount), or why it is not known.
    pub ses_quota: Option<mailflow::domain::send_rate::SendQuota>,
    pub ses_quota_unknown: Option<String>,
    /// A local-time campaign's delivery (None: everyone at once).
    pub local_time: Option<LocalTimeStatus>,
    /// The pick slots' counts (OpenContent): opens (a person's client, an image proxy, a
    /// machine), clicks counted, unique and ignored, picks frozen and fallbacks.
    pub open_content: OpenCounters,
    /// The campaign's topic, as it first started (None: recorded before topics).
    pub topic: Option<String>,
    /// The campaign definition version it was run from (None: the weekly digest).
    pub definition: Option<mailflow::domain::definition::pin::PinnedDefinition>,
    /// Users with new followers its audience left out, by reason: the latest run's (each run
    /// reads the whole audience again), over its segments.
    pub excluded: mailflow::domain::topics::ExclusionCounts,
    /// When that run started (ms; 0: not known).
    pub excluded_run_ms: i64,
    /// Its A/B experiment: each variant's results and the decision.
    pub experiment: Option<ExperimentStatus>,
}

/// The campaign queues' MessageRetentionPeriod (template.yaml): 14 days.
pub const QUEUE_RETENTION_MS: u64 = 14 * 24 * 3600 * 1000;

impl CampaignStatus {
    /// The status `facts` make at `now_ms`.
    pub fn of(facts: &StatusFacts, now_ms: u64) -> Self {
        let mut status = Self::counted(&facts.campaign, &facts.records);
        if let Some(record) = &facts.record {
            status.recorded(record);
        }
        status.users_pending = facts.users_pending;
        status.emails_pending = facts.emails_pending;
        status.users_dlq = facts.users_dlq;
        status.emails_dlq = facts.emails_dlq;
        status.continuation_dlq = facts.continuation_dlq;
        status.consumers = facts.consumers.clone();
        status.experiment = facts.record.as_ref().and_then(|r| {
            let experiment = r.experiment.as_ref()?;
            Some(crate::experiment::status(
                experiment,
                r.decision.as_ref(),
                &facts.records,
                now_ms as i64,
            ))
        });
        if status.paused_at_ms.is_some() {
            status.resume_before_ms = status.started_at_ms.map(|s| s + QUEUE_RETENTION_MS);
        }
        status.local_time = (facts.waiting.as_ref())
            .map(|report| LocalTimeStatus::of(report, &facts.records, now_ms as i64));
        status.open_content = facts.open_content.clone();
        status.state = state(&status, facts.records.is_empty());
        // A paused campaign's releases wait for the resume and a cancelled one's drop their
        // users: neither has stranded users.
        if let Some(local) = status
            .local_time
            .as_mut()
            .filter(|_| matches!(status.state, "paused" | "cancelled"))
        {
            local.stranded = 0;
            local.slots.iter_mut().for_each(|s| s.stranded = false);
        }
        status.send_rate = crate::send_rate::observed(&facts.records, now_ms);
        status.shared_rate = facts.shared_rate;
        let pending = status.users_pending + status.emails_pending;
        status.eta_seconds =
            crate::send_rate::eta_seconds(pending, status.shared_rate, status.send_rate);
        status
    }

    /// The counts of the campaign's records.
    fn counted(campaign: &str, records: &[SendRecord]) -> Self {
        let count = |s: SendStatus| records.iter().filter(|r| r.status == Some(s)).count();
        let by_reason = |s: SendStatus| {
            let mut groups = BTreeMap::new();
            for r in records.iter().filter(|r| r.status == Some(s)) {
                let reason = reason_group(r.last_error.as_deref().unwrap_or("no reason recorded"));
                *groups.entry(reason).or_default() += 1;
            }
            groups
        };
        let mut skipped = BTreeMap::new();
        for r in records
            .iter()
            .filter(|r| r.status == Some(SendStatus::Skipped))
        {
            let reason = r.skip_reason.clone().unwrap_or_else(|| "unknown".into());
            *skipped.entry(reason).or_default() += 1;
        }
        CampaignStatus {
            campaign_id: campaign.to_owned(),
            in_progress: count(SendStatus::InProgress),
            retrying: records
                .iter()
                .filter(|r| r.status == Some(SendStatus::InProgress) && r.last_error.is_some())
                .count(),
            sent: count(SendStatus::Sent),
            failed: count(SendStatus::Failed),
            failed_by_reason: by_reason(SendStatus::Failed),
            dead_lettered: count(SendStatus::DeadLettered),
            dead_lettered_by_reason: by_reason(SendStatus::DeadLettered),
            cancelled: count(SendStatus::Cancelled),
            skipped,
            duplicates_suppressed: records.iter().map(|r| r.duplicates_suppressed).sum(),
            engagement: Engagement::ALL
                .iter()
                .map(|e| {
                    let n = records
                        .iter()
                        .filter(|r| r.engagement.contains_key(e))
                        .count();
                    (e.as_str(), n)
                })
                .collect(),
            reconciled: records
                .iter()
                .filter(|r| r.reconciled_at_ms.is_some())
                .count(),
            ..Default::default()
        }
    }

    /// What the campaigns table says: its start, guardrails, topic, definition, and any hold.
    fn recorded(&mut self, record: &CampaignRecord) {
        self.guardrails = record.guardrails;
        self.deadline_moved_at_ms = record.deadline_moved.map(|(at, _)| at);
        self.deadline_moved_from_ms = record.deadline_moved.and_then(|(_, from)| from);
        self.started_at_ms = record.started_at_ms;
        self.topic = record.topic.clone();
        self.definition = record.definition.clone();
        self.excluded = record.excluded.clone();
        self.excluded_run_ms = record.excluded_run_ms;
        match &record.hold {
            Some(Hold::Cancelled(c)) => {
                self.cancelled_at_ms = Some(c.at_ms);
                self.cancelled_by = Some(c.by.clone());
                self.cancel_reason = Some(c.reason.clone());
            }
            Some(Hold::Paused(p)) => {
                self.paused_at_ms = Some(p.at_ms);
                self.paused_by = Some(p.by.clone());
                self.pause_reason = Some(p.reason.clone());
            }
            None => {}
        }
    }

    /// Users the campaign could not send to (FAILED, or their job in a DLQ), plus messages
    /// left in the DLQs: zero when the campaign ended well.
    pub fn problems(&self) -> u64 {
        (self.failed + self.dead_lettered) as u64
            + self.users_dlq
            + self.emails_dlq
            + self.continuation_dlq.unwrap_or(0)
            + self.stranded()
    }

    /// Users of a local-time campaign still held after their slot's sweep (none once the
    /// campaign is cancelled: its holds are dropped; none while it is paused: its releases
    /// wait for the resume).
    pub fn stranded(&self) -> u64 {
        self.local_time.as_ref().map_or(0, |l| l.stranded)
    }
}

/// The campaign's state (`CampaignStatus::state`): a hold first, then the queues, the sends
/// in progress and the waiting room; `no_records`: nothing of it in the sends table.
fn state(s: &CampaignStatus, no_records: bool) -> &'static str {
    let waiting = s.local_time.as_ref().map_or(0, |l| l.still_waiting);
    let queues_empty = s.users_pending + s.emails_pending == 0;
    if s.cancelled_at_ms.is_some() {
        "cancelled"
    } else if s.paused_at_ms.is_some() {
        "paused"
    } else if queues_empty && s.in_progress == 0 && waiting > 0 {
        "waiting"
    } else if queues_empty && no_records {
        "not started"
    } else if queues_empty && s.in_progress == 0 {
        "finished"
    } else {
        "running"
    }
}

/// A recorded error, grouped: the text before its first parenthesis (which holds details
/// such as a request id or an attempt count).
pub fn reason_group(error: &str) -> String {
    let reason = error.split(" (").next().unwrap_or(error).trim();
    // SES's sandbox names the identities it refused: no address leaves in a report.
    reason
        .split(' ')
        .map(|word| {
            if word.contains('@') {
                "<address>"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests;

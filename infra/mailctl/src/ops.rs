//! Operator actions on a deployed or local stack: the resources a command works on, and a
//! campaign's status. Resources are named by the stack's outputs in the environment (AWS) or
//! by the prefix `mailctl provision` made them under (local stack). Redrive is in
//! `mailflow_local::queues`, which the chaos run uses too.

use anyhow::{Context, Result};
use aws_sdk_sqs::Client as Sqs;
use mailflow::ledger::{Engagement, SendStatus};
use mailflow::ports::CampaignStates;
use mailflow_local::ledger_scan;
use mailflow_local::names;
use mailflow_local::queues::depth;
use serde::Serialize;
use std::collections::BTreeMap;

/// The resources an operator command works on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub sends_table: String,
    pub campaigns_table: String,
    pub users_queue: String,
    pub users_dlq: String,
    pub emails_queue: String,
    pub emails_dlq: String,
    pub ses_events_queue: String,
    pub ses_events_dlq: String,
    /// GetUsers' function name (AWS only: starts campaigns by invoking it).
    pub get_users_function: Option<String>,
}

impl Target {
    /// From the stack's outputs, exported as MAILFLOW_* variables (`stack_outputs`).
    pub fn from_env() -> Result<Self> {
        use crate::stack_outputs as out;
        Ok(Self {
            sends_table: out::SENDS_TABLE.read()?,
            campaigns_table: out::CAMPAIGNS_TABLE.read()?,
            users_queue: out::USERS_QUEUE.read()?,
            users_dlq: out::USERS_DLQ.read()?,
            emails_queue: out::EMAILS_QUEUE.read()?,
            emails_dlq: out::EMAILS_DLQ.read()?,
            ses_events_queue: out::SES_EVENTS_QUEUE.read()?,
            ses_events_dlq: out::SES_EVENTS_DLQ.read()?,
            get_users_function: out::GET_USERS_FUNCTION.read().ok(),
        })
    }

    /// A stack `mailctl provision` / `demo` created under `prefix` on the local stack.
    pub async fn from_prefix(sqs: &Sqs, prefix: &str) -> Result<Self> {
        let url = |logical: &'static str| async move {
            let name = format!("{prefix}-{logical}");
            sqs.get_queue_url()
                .queue_name(&name)
                .send()
                .await
                .with_context(|| format!("queue {name} not found: is {prefix:?} the prefix `mailctl provision` printed?"))?
                .queue_url
                .context("GetQueueUrl returned no URL")
        };
        Ok(Self {
            sends_table: format!("{prefix}-{}", names::SENDS_TABLE),
            campaigns_table: format!("{prefix}-{}", names::CAMPAIGNS_TABLE),
            users_queue: url(names::USERS_QUEUE).await?,
            users_dlq: url(names::USERS_DLQ).await?,
            emails_queue: url(names::EMAILS_QUEUE).await?,
            emails_dlq: url(names::EMAILS_DLQ).await?,
            ses_events_queue: url(names::SES_EVENTS_QUEUE).await?,
            ses_events_dlq: url(names::SES_EVENTS_DLQ).await?,
            get_users_function: None,
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CampaignStatus {
    pub campaign_id: String,
    /// `cancelled` (an operator cancelled it); `not started` (no record, queues empty);
    /// `finished` when the queues are empty (they are shared: empty means no campaign has a
    /// message left) and no send is in progress; `running` otherwise (then some queued
    /// messages may be another campaign's).
    pub state: &'static str,
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
    /// Users not sent to because the campaign was cancelled (CANCELLED records).
    pub cancelled: usize,
    /// The campaign's cancellation, if an operator cancelled it: when (ms), by whom, why.
    pub cancelled_at_ms: Option<u64>,
    pub cancelled_by: Option<String>,
    pub cancel_reason: Option<String>,
    /// Emails per second over the last minute (None: nothing sent in it).
    pub send_rate: Option<f64>,
    /// Seconds until the queues drain at that rate (None: no current rate to go by).
    pub eta_seconds: Option<u64>,
    /// What SES lets the account send (GetAccount), or why it is not known.
    pub ses_quota: Option<mailflow::rate::SendQuota>,
    pub ses_quota_unknown: Option<String>,
}

impl CampaignStatus {
    /// Users the campaign could not send to (FAILED, or their job in a DLQ), plus messages
    /// left in the DLQs: zero when the campaign ended well.
    pub fn problems(&self) -> u64 {
        (self.failed + self.dead_lettered) as u64 + self.users_dlq + self.emails_dlq
    }
}

/// The stack's campaigns table (cancellations).
pub fn campaigns_table(
    dynamo: &aws_sdk_dynamodb::Client,
    target: &Target,
) -> mailflow::adapters::campaigns::CampaignsTable {
    mailflow::adapters::campaigns::CampaignsTable::new(dynamo.clone(), &target.campaigns_table)
}

/// The window the current send rate is measured over.
const RATE_WINDOW_MS: u64 = 60_000;

/// A recorded error, grouped: the text before its first parenthesis (which holds details
/// such as a request id or an attempt count).
pub fn reason_group(error: &str) -> String {
    error.split(" (").next().unwrap_or(error).trim().to_owned()
}

pub async fn status(
    sqs: &Sqs,
    dynamo: &aws_sdk_dynamodb::Client,
    target: &Target,
    campaign: &str,
) -> Result<CampaignStatus> {
    let records = ledger_scan::records(dynamo, &target.sends_table, campaign).await?;
    let cancellation = campaigns_table(dynamo, target)
        .cancellation(campaign)
        .await?;
    let count = |s: SendStatus| records.iter().filter(|r| r.status == Some(s)).count();
    let by_reason = |s: SendStatus| {
        let mut groups = BTreeMap::new();
        for r in records.iter().filter(|r| r.status == Some(s)) {
            let reason = reason_group(r.last_error.as_deref().unwrap_or("no reason recorded"));
            *groups.entry(reason).or_default() += 1;
        }
        groups
    };
    let total = |url: &str| {
        let url = url.to_owned();
        async move { depth(sqs, &url).await.map(|(v, i)| v + i) }
    };
    let mut status = CampaignStatus {
        campaign_id: campaign.to_owned(),
        users_pending: total(&target.users_queue).await?,
        emails_pending: total(&target.emails_queue).await?,
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
        users_dlq: total(&target.users_dlq).await?,
        emails_dlq: total(&target.emails_dlq).await?,
        cancelled_at_ms: cancellation.as_ref().map(|c| c.at_ms),
        cancelled_by: cancellation.as_ref().map(|c| c.by.clone()),
        cancel_reason: cancellation.map(|c| c.reason),
        ..Default::default()
    };
    let queues_empty = status.users_pending + status.emails_pending == 0;
    status.state = if status.cancelled_at_ms.is_some() {
        "cancelled"
    } else if queues_empty && records.is_empty() {
        "not started"
    } else if queues_empty && status.in_progress == 0 {
        "finished"
    } else {
        "running"
    };
    // The current rate, not the campaign's average: a campaign that sent fast an hour ago
    // and now waits on retries has no rate to promise an ETA with.
    let now = mailflow::ledger::epoch_ms(std::time::SystemTime::now());
    let recent = records
        .iter()
        .filter(|r| r.status == Some(SendStatus::Sent))
        .filter_map(|r| r.completed_at_ms)
        .filter(|at| now.saturating_sub(*at) <= RATE_WINDOW_MS)
        .count();
    // Over the last minute, or since the first claim if the campaign is younger than that.
    let first = records.iter().filter_map(|r| r.started_at_ms).min();
    let span_ms = first.map_or(RATE_WINDOW_MS, |f| {
        now.saturating_sub(f).clamp(1000, RATE_WINDOW_MS)
    });
    if recent > 0 {
        let rate = recent as f64 / (span_ms as f64 / 1000.0);
        status.send_rate = Some((rate * 10.0).round() / 10.0);
        let pending = status.users_pending + status.emails_pending;
        status.eta_seconds = Some((pending as f64 / rate).ceil() as u64);
    }
    Ok(status)
}

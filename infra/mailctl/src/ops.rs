//! Over 450 lines because `status` reads every store a campaign touches (the ledger, the
//! campaigns table, the queues, the waiting room, the pick counters) into one answer.
//! Operator actions on a deployed or local stack: the resources a command works on, and a
//! campaign's status. Resources are named by the stack's outputs in the environment (AWS) or
//! by the prefix `mailctl provision` made them under (local stack). Redrive is in
//! `mailflow_local::queues`, which the chaos run uses too.

use anyhow::{Context, Result};
use aws_sdk_sqs::Client as Sqs;
use mailflow::adapters::event_sources::EventSourceMappings;
use mailflow::adapters::rate_item::RateItem;
use mailflow::domain::campaign_state::Hold;
use mailflow::domain::ledger::{Engagement, SendStatus};
use mailflow::ports::RateBucket;
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
    /// Local-time campaigns' waiting users (`WaitingRoom`).
    pub waiting_table: String,
    /// Open-time content: frozen picks, clicks, the campaign's open and click counts.
    pub open_content_table: String,
    pub users_queue: String,
    pub users_dlq: String,
    pub emails_queue: String,
    pub emails_dlq: String,
    /// GetUsers' checkpoints, continued releases and failed asynchronous invocations (None:
    /// a stack deployed before these outputs; `status` then does not count its DLQ).
    pub continuation_queue: Option<String>,
    pub continuation_dlq: Option<String>,
    pub ses_events_queue: String,
    pub ses_events_dlq: String,
    /// GetUsers' function name (AWS only: starts campaigns by invoking it).
    pub get_users_function: Option<String>,
    /// The event source mappings of the campaign queues (what a pause disables).
    pub event_source_mappings: Vec<String>,
}

fn split_ids(ids: &str) -> Vec<String> {
    ids.split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

impl Target {
    /// From the stack's outputs, exported as MAILFLOW_* variables (`stack_outputs`).
    pub fn from_env() -> Result<Self> {
        use crate::stack_outputs as out;
        Ok(Self {
            sends_table: out::SENDS_TABLE.read()?,
            campaigns_table: out::CAMPAIGNS_TABLE.read()?,
            waiting_table: out::WAITING_TABLE.read()?,
            open_content_table: out::OPEN_CONTENT_TABLE.read()?,
            users_queue: out::USERS_QUEUE.read()?,
            users_dlq: out::USERS_DLQ.read()?,
            emails_queue: out::EMAILS_QUEUE.read()?,
            emails_dlq: out::EMAILS_DLQ.read()?,
            continuation_queue: out::CONTINUATION_QUEUE.read().ok(),
            continuation_dlq: out::CONTINUATION_DLQ.read().ok(),
            ses_events_queue: out::SES_EVENTS_QUEUE.read()?,
            ses_events_dlq: out::SES_EVENTS_DLQ.read()?,
            get_users_function: out::GET_USERS_FUNCTION.read().ok(),
            event_source_mappings: out::EVENT_SOURCE_MAPPINGS
                .read()
                .map(|ids| split_ids(&ids))
                .unwrap_or_default(),
        })
    }

    /// A stack `mailctl provision` / `demo` created under `prefix` on the local stack.
    pub async fn from_prefix(sdk: &aws_config::SdkConfig, prefix: &str) -> Result<Self> {
        let sqs = &Sqs::new(sdk);
        let lambda = aws_sdk_lambda::Client::new(sdk);
        let mut event_source_mappings = Vec::new();
        for function in names::CAMPAIGN_CONSUMERS {
            let name = format!("{prefix}-{function}");
            let listed = lambda
                .list_event_source_mappings()
                .function_name(&name)
                .send()
                .await
                .with_context(|| format!("listing the event source mappings of {name}"))?;
            event_source_mappings.extend(
                listed
                    .event_source_mappings()
                    .iter()
                    .filter_map(|m| m.uuid.clone()),
            );
        }
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
            waiting_table: format!("{prefix}-{}", names::WAITING_TABLE),
            open_content_table: format!("{prefix}-{}", names::OPEN_CONTENT_TABLE),
            users_queue: url(names::USERS_QUEUE).await?,
            users_dlq: url(names::USERS_DLQ).await?,
            emails_queue: url(names::EMAILS_QUEUE).await?,
            emails_dlq: url(names::EMAILS_DLQ).await?,
            continuation_queue: Some(url(names::CONTINUATION_QUEUE).await?),
            continuation_dlq: Some(url(names::CONTINUATION_DLQ).await?),
            ses_events_queue: url(names::SES_EVENTS_QUEUE).await?,
            ses_events_dlq: url(names::SES_EVENTS_DLQ).await?,
            get_users_function: None,
            event_source_mappings,
        })
    }
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
    pub shared_rate: Option<mailflow::domain::send_rate::SharedRate>,
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
    pub open_content: mailflow::domain::open_content::OpenCounters,
    /// The campaign's topic, as it first started (None: recorded before topics).
    pub topic: Option<String>,
    /// Users with new followers its audience left out, by reason (every GetUsers segment).
    pub excluded: mailflow::domain::topics::ExclusionCounts,
    /// Its A/B experiment: each variant's results and the decision.
    pub experiment: Option<crate::experiment::ExperimentStatus>,
}

/// What `status` shows of a local-time campaign.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalTimeStatus {
    /// Users given the fallback zone: no usable `timezone`, or one the IANA database does
    /// not know.
    pub timezone_missing: u64,
    pub timezone_invalid: u64,
    /// Local time passed at the start: sent at once, or skipped (by the campaign's policy).
    pub passed_sent_now: u64,
    pub passed_skipped: u64,
    /// Local time passed at the start: held for the same time the next day.
    pub passed_next_day: u64,
    /// Local time before the campaign's window closed: held for the same time the next day.
    pub next_day_after_window: u64,
    /// Due within 15 minutes of the decision: enqueued with an SQS delay.
    pub delayed: u64,
    /// Due at the start (or passed within the start grace): sent at once, on time.
    pub due_now: u64,
    /// Users kept for a later slot, in all (SendEmail's quiet-hours holds too); those still
    /// waiting, by UTC hour of their slot.
    pub held: u64,
    pub still_waiting: u64,
    pub waiting_by_hour: Vec<mailflow::domain::local_time::HourWaiting>,
    /// Each slot: held, released at the instant, released by the sweep, still waiting.
    pub slots: Vec<mailflow::domain::local_time::SlotStatus>,
    /// Each run's own counts (a resend or a re-run is a run of its own), in start order.
    pub runs: Vec<RunCounts>,
    /// Users still waiting although their slot's sweep has passed: nothing will release
    /// them (a problem, like a DLQ message).
    pub stranded: u64,
    pub slots_released: usize,
    /// Slots' release minus their instant, over released users (p50, p99, max).
    pub release_lateness: Option<mailflow::domain::local_time::Lateness>,
    /// Sent minus the user's local send time, over the emails sent (p50, p99, max): what a
    /// recipient sees.
    pub lateness: Option<mailflow::domain::local_time::Lateness>,
}

/// One run of a local-time campaign, as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunCounts {
    pub started_at: String,
    pub counts: mailflow::domain::local_time::LocalTimeCounts,
}

impl LocalTimeStatus {
    /// Its lines of `mailctl status`.
    pub fn describe(&self) -> String {
        let l = self;
        let mut out = format!(
        "  local time: {} held for their slot, {} still waiting; {} on the next day (local time before the window closed); {} sent at once, {} moved to the next day and {} skipped (local time passed at the start), {} delayed under 15 minutes, {} due at the start | fallback zone for {} without a zone and {} with an unknown one\n",
        l.held, l.still_waiting, l.next_day_after_window, l.passed_sent_now, l.passed_next_day, l.passed_skipped, l.delayed, l.due_now, l.timezone_missing, l.timezone_invalid
    );
        if l.runs.len() > 1 {
            for run in &l.runs {
                let c = &run.counts;
                out.push_str(&format!(
                    "    run started {}: {} held, {} on the next day (before the window closed); {} sent at once, {} moved to the next day, {} skipped; {} delayed\n",
                    run.started_at,
                    c.waiting.values().sum::<u64>(),
                    c.next_day_after_window,
                    c.passed_sent_now,
                    c.passed_next_day,
                    c.passed_skipped,
                    c.delayed
                ));
            }
        }
        for slot in &l.slots {
            out.push_str(&format!(
                "    slot {}: held {} | released {} | swept {} | still waiting {}{}\n",
                slot.slot,
                slot.held,
                slot.released,
                slot.swept,
                slot.waiting,
                if slot.stranded {
                    " STRANDED: its sweep has passed; `mailctl release` releases them"
                } else {
                    ""
                }
            ));
        }
        let seconds = |ms: i64| ms as f64 / 1000.0;
        if let Some(late) = &l.lateness {
            out.push_str(&format!(
                "  sent after the local time: p50 {:.1}s p99 {:.1}s max {:.1}s\n",
                seconds(late.p50_ms),
                seconds(late.p99_ms),
                seconds(late.max_ms)
            ));
        }
        if let Some(late) = &l.release_lateness {
            out.push_str(&format!(
                "  {} slots released, after their instant: p50 {:.1}s p99 {:.1}s max {:.1}s\n",
                l.slots_released,
                seconds(late.p50_ms),
                seconds(late.p99_ms),
                seconds(late.max_ms)
            ));
        }
        out
    }
}

impl CampaignStatus {
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

/// The stack's campaigns table (each campaign's state).
pub fn campaigns_table(
    dynamo: &aws_sdk_dynamodb::Client,
    target: &Target,
) -> mailflow::adapters::campaigns::CampaignsTable {
    mailflow::adapters::campaigns::CampaignsTable::new(dynamo.clone(), &target.campaigns_table)
}

/// The campaign queues' MessageRetentionPeriod (template.yaml): 14 days.
pub const QUEUE_RETENTION_MS: u64 = 14 * 24 * 3600 * 1000;

/// The campaign queues' event source mappings.
pub fn mappings(sdk: &aws_config::SdkConfig, target: &Target) -> EventSourceMappings {
    EventSourceMappings::new(
        aws_sdk_lambda::Client::new(sdk),
        target.event_source_mappings.clone(),
    )
}

/// The mappings by state; empty when they are not known or cannot be read (status still
/// answers from the ledger and the queues).
async fn consumer_states(sdk: &aws_config::SdkConfig, target: &Target) -> BTreeMap<String, usize> {
    let mut states = BTreeMap::new();
    if let Ok(listed) = mappings(sdk, target).states().await {
        for (_, state) in listed {
            *states.entry(state).or_default() += 1;
        }
    }
    states
}

/// The window the current send rate is measured over.
const RATE_WINDOW_MS: u64 = 60_000;

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

pub async fn status(
    sdk: &aws_config::SdkConfig,
    target: &Target,
    campaign: &str,
) -> Result<CampaignStatus> {
    let (sqs, dynamo) = (&Sqs::new(sdk), &aws_sdk_dynamodb::Client::new(sdk));
    let records = ledger_scan::records(dynamo, &target.sends_table, campaign).await?;
    let record = campaigns_table(dynamo, target).record(campaign).await?;
    let hold = record.as_ref().and_then(|r| r.hold.clone());
    let (cancellation, pause) = match hold {
        Some(Hold::Cancelled(c)) => (Some(c), None),
        Some(Hold::Paused(p)) => (None, Some(p)),
        None => (None, None),
    };
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
        skipped: {
            let mut groups = BTreeMap::new();
            for r in records
                .iter()
                .filter(|r| r.status == Some(SendStatus::Skipped))
            {
                let reason = r.skip_reason.clone().unwrap_or_else(|| "unknown".into());
                *groups.entry(reason).or_default() += 1;
            }
            groups
        },
        guardrails: record.as_ref().and_then(|r| r.guardrails),
        deadline_moved_at_ms: record
            .as_ref()
            .and_then(|r| r.deadline_moved)
            .map(|(at, _)| at),
        deadline_moved_from_ms: record
            .as_ref()
            .and_then(|r| r.deadline_moved)
            .and_then(|(_, from)| from),
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
        continuation_dlq: match &target.continuation_dlq {
            Some(url) => Some(total(url).await?),
            None => None,
        },
        cancelled_at_ms: cancellation.as_ref().map(|c| c.at_ms),
        cancelled_by: cancellation.as_ref().map(|c| c.by.clone()),
        cancel_reason: cancellation.map(|c| c.reason),
        started_at_ms: record.as_ref().and_then(|r| r.started_at_ms),
        topic: record.as_ref().and_then(|r| r.topic.clone()),
        excluded: record
            .as_ref()
            .map(|r| r.excluded.clone())
            .unwrap_or_default(),
        paused_at_ms: pause.as_ref().map(|p| p.at_ms),
        paused_by: pause.as_ref().map(|p| p.by.clone()),
        pause_reason: pause.as_ref().map(|p| p.reason.clone()),
        consumers: consumer_states(sdk, target).await,
        ..Default::default()
    };
    let now_ms = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
    status.experiment = record.as_ref().and_then(|r| {
        let experiment = r.experiment.as_ref()?;
        Some(crate::experiment::status(
            experiment,
            r.decision.as_ref(),
            &records,
            now_ms,
        ))
    });
    if status.paused_at_ms.is_some() {
        status.resume_before_ms = status.started_at_ms.map(|s| s + QUEUE_RETENTION_MS);
    }
    status.local_time = local_time_status(dynamo, target, campaign).await?;
    if let Ok(id) = mailflow::domain::campaign::CampaignId::parse(campaign) {
        use mailflow::ports::OpenContentStore;
        status.open_content = mailflow::adapters::open_content::OpenContentTable::new(
            dynamo.clone(),
            &target.open_content_table,
        )
        .counters(&id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if let Some(local) = status.local_time.as_mut() {
        local.lateness = mailflow::domain::local_time::Lateness::of(
            records
                .iter()
                .filter_map(|r| r.late_ms)
                .map(|l| (l, 1))
                .collect(),
        );
    }
    let waiting = status.local_time.as_ref().map_or(0, |l| l.still_waiting);
    let queues_empty = status.users_pending + status.emails_pending == 0;
    status.state = if status.cancelled_at_ms.is_some() {
        "cancelled"
    } else if status.paused_at_ms.is_some() {
        "paused"
    } else if queues_empty && status.in_progress == 0 && waiting > 0 {
        "waiting"
    } else if queues_empty && records.is_empty() {
        "not started"
    } else if queues_empty && status.in_progress == 0 {
        "finished"
    } else {
        "running"
    };
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
    // The current rate, not the campaign's average: a campaign that sent fast an hour ago
    // and now waits on retries has no rate to promise an ETA with.
    let now = mailflow::domain::ledger::epoch_ms(std::time::SystemTime::now());
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
    }
    let shared = RateItem::new(dynamo.clone(), &target.campaigns_table)
        .read()
        .await?;
    status.shared_rate = shared.rate;
    // The shared rate is what the queue drains at while it is sending; the observed one is
    // the fallback before anything set it.
    let pending = status.users_pending + status.emails_pending;
    let rate = match (status.shared_rate, status.send_rate) {
        (Some(shared), Some(_)) => Some(shared.rate),
        (None, observed) => observed,
        (Some(_), None) => None,
    };
    status.eta_seconds = rate
        .filter(|r| *r > 0.0)
        .map(|r| (pending as f64 / r).ceil() as u64);
    Ok(status)
}

/// The waiting table's record of a local-time campaign.
async fn local_time_status(
    dynamo: &aws_sdk_dynamodb::Client,
    target: &Target,
    campaign: &str,
) -> Result<Option<LocalTimeStatus>> {
    let Ok(id) = mailflow::domain::campaign::CampaignId::parse(campaign) else {
        return Ok(None);
    };
    let report = mailflow::adapters::waiting::read_report(dynamo, &target.waiting_table, &id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let now_ms = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
    Ok(report.map(|r| LocalTimeStatus {
        timezone_missing: r.counts.timezone_missing,
        timezone_invalid: r.counts.timezone_invalid,
        passed_sent_now: r.counts.passed_sent_now,
        passed_skipped: r.counts.passed_skipped,
        passed_next_day: r.counts.passed_next_day,
        next_day_after_window: r.counts.next_day_after_window,
        delayed: r.counts.delayed,
        due_now: r.counts.due_now,
        held: r.held(),
        still_waiting: r.still_waiting(),
        waiting_by_hour: r.waiting_by_hour(),
        slots: r.slots(now_ms),
        runs: r
            .runs
            .iter()
            .map(|(started, counts)| RunCounts {
                started_at: if *started > 0 {
                    mailflow::domain::local_time::rfc3339_ms(*started)
                } else {
                    "before runs were kept apart".into()
                },
                counts: counts.clone(),
            })
            .collect(),
        stranded: r.stranded(now_ms),
        slots_released: r.slots_released(),
        release_lateness: r.release_lateness(),
        lateness: None,
    }))
}

/// The release events (`mailctl release`) for a local-time campaign's slots whose sweep time
/// has passed by `now_ms` and that still hold users: each the sweep its schedule would send
/// (an earlier one would only wait for that time).
pub fn release_events(
    campaign: &str,
    report: &mailflow::domain::local_time::WaitingReport,
    now_ms: i64,
) -> Vec<serde_json::Value> {
    report
        .waiting_now
        .iter()
        .filter(|(slot_ms, waiting)| {
            **slot_ms + mailflow::domain::local_time::SWEEP_AFTER_MS <= now_ms && **waiting > 0
        })
        .map(|(slot_ms, _)| {
            serde_json::json!({"releaseWaiting": {
                "campaignId": campaign, "slotMs": slot_ms, "sweep": true,
            }})
        })
        .collect()
}

/// A time in milliseconds since the epoch, as RFC 3339.
pub fn format_ms(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

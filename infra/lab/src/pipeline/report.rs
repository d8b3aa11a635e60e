//! What a campaign's run reports: when the first and the last email went, each stage's
//! throughput over the steady state, which stage bounds it, the queues and the quota's use
//! second by second, and what was lost, sent twice or dead-lettered.

use super::events::EventsReport;
use super::stages::Sizing;
use super::{PipelineOptions, SendsTableReport};
use serde::Serialize;
use tokio::time::Instant;

/// Each stage's throughput over the campaign's steady state (the 10th to the 90th
/// percentile of the emails sent), emails or users per second; none for a stage that was
/// done before the steady state ended.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageRates {
    pub get_users: Option<f64>,
    pub create_emails: Option<f64>,
    pub send_email: f64,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineReport {
    pub users: usize,
    pub quota: f64,
    pub get_users_memory_mb: u32,
    pub enqueue_concurrency: usize,
    pub create_memory_mb: u32,
    pub users_batch: usize,
    pub create_environments: u32,
    pub send_memory_mb: u32,
    pub send_batch: usize,
    pub send_environments: u32,
    pub first_email_s: f64,
    pub last_email_s: f64,
    /// From the first email to the last.
    pub first_to_last_s: f64,
    /// When GetUsers had enqueued its last user.
    pub fan_out_s: f64,
    /// Emails/s between the 10th and the 90th percentile of the acceptances, as a share of
    /// the quota.
    pub steady_share: f64,
    pub rates: StageRates,
    /// What bounds the campaign: `SES quota`, `GetUsers`, `CreateEmails` or `SendEmail`.
    pub bound: String,
    /// Emails accepted each second, as a share of the quota.
    pub quota_use: Vec<f64>,
    /// Users waiting on the users queue and jobs on the emails queue, each second.
    pub users_queued: Vec<usize>,
    pub emails_queued: Vec<usize>,
    pub throttles: usize,
    /// Sends SES refused because the 24-hour quota was used up.
    pub over_daily_quota: usize,
    pub lost: usize,
    pub sent_twice: usize,
    pub dead_lettered: usize,
    /// SES's events through EventBridge to SesEvents, and the account's concurrency.
    pub events: EventsReport,
    pub sends_table: SendsTableReport,
}

/// What a campaign's run saw: its acceptances in order (at least one), each stage's
/// throughput, when GetUsers was done, the queues each second and the counts.
pub(super) struct Observed {
    pub(super) started: Instant,
    pub(super) sent: Vec<Instant>,
    pub(super) rates: StageRates,
    pub(super) fan_out: Option<Instant>,
    pub(super) users_queued: Vec<usize>,
    pub(super) emails_queued: Vec<usize>,
    pub(super) throttles: usize,
    pub(super) over_daily_quota: usize,
    pub(super) lost: usize,
    pub(super) sent_twice: usize,
    pub(super) dead_lettered: usize,
    pub(super) events: EventsReport,
    pub(super) sends_table: SendsTableReport,
}

/// Each stage's throughput over the steady state (the 10th to the 90th percentile of the
/// acceptances `sent`, in order), from the times it enqueued or composed.
pub(super) fn steady_rates(
    sent: &[Instant],
    enqueued: &[Instant],
    composed: &[Instant],
) -> StageRates {
    let at = |share: f64| sent[((sent.len() - 1) as f64 * share).round() as usize];
    let (from, to) = (at(0.1), at(0.9));
    // A stage's throughput over the steady state, or none where it was done before the
    // steady state ended (it ran ahead of the emails, so it held nothing back).
    let rate_between = |events: &[Instant]| {
        let n = events.iter().filter(|t| **t >= from && **t <= to).count();
        let working = events.last().is_some_and(|last| *last >= to);
        working.then(|| n as f64 / (to - from).as_secs_f64().max(1e-9))
    };
    StageRates {
        get_users: rate_between(enqueued),
        create_emails: rate_between(composed),
        send_email: rate_between(sent).unwrap_or_default(),
    }
}

pub(super) fn report(options: &PipelineOptions, sizing: &Sizing, seen: Observed) -> PipelineReport {
    let quota = options.quota;
    let secs = |t: Instant| (t - seen.started).as_secs_f64();
    let (first, last) = (seen.sent[0], *seen.sent.last().expect("sent"));
    let mut quota_use = vec![0.0; secs(last).ceil() as usize + 1];
    for t in &seen.sent {
        quota_use[secs(*t) as usize] += 1.0 / quota;
    }
    PipelineReport {
        users: options.users,
        quota,
        get_users_memory_mb: options.get_users_memory_mb,
        enqueue_concurrency: options.enqueue_concurrency,
        create_memory_mb: options.create_memory_mb,
        users_batch: options.users_batch,
        create_environments: sizing.create_environments,
        send_memory_mb: options.send_memory_mb,
        send_batch: sizing.send_batch,
        send_environments: sizing.send_environments,
        first_email_s: secs(first),
        last_email_s: secs(last),
        first_to_last_s: (last - first).as_secs_f64(),
        fan_out_s: seen.fan_out.map_or(0.0, secs),
        steady_share: seen.rates.send_email / quota,
        bound: bound(&seen.rates, quota).to_string(),
        rates: seen.rates,
        quota_use,
        users_queued: seen.users_queued,
        emails_queued: seen.emails_queued,
        throttles: seen.throttles,
        over_daily_quota: seen.over_daily_quota,
        lost: seen.lost,
        sent_twice: seen.sent_twice,
        dead_lettered: seen.dead_lettered,
        events: seen.events,
        sends_table: seen.sends_table,
    }
}

/// The stage that holds the campaign back: SES's quota when the emails go at it; otherwise
/// the first stage, in the pipeline's order, that runs no faster than the emails go (the
/// stages after it wait for it), or SendEmail itself.
fn bound(rates: &StageRates, quota: f64) -> &'static str {
    let sending = rates.send_email;
    let holds_back = |rate: Option<f64>| rate.is_some_and(|r| r <= 1.05 * sending);
    if sending >= 0.95 * quota {
        "SES quota"
    } else if holds_back(rates.get_users) {
        "GetUsers"
    } else if holds_back(rates.create_emails) {
        "CreateEmails"
    } else {
        "SendEmail"
    }
}

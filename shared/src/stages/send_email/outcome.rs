//! What one record's send came to: done (acknowledged) or again (returned, with when), and
//! the batch's counts of both.

use crate::domain::campaign::CampaignId;
use crate::stages::summary::summary;
use std::collections::HashMap;
use std::time::Duration;

summary! {
    /// Per-batch counts, logged and returned to callers such as the local runner.
    pub struct Summary {
        pub sent: usize,
        /// Already SENT: acknowledged without sending (a duplicate delivery or a re-run).
        pub duplicates: usize,
        /// Rejected permanently now (recorded FAILED) or earlier (left FAILED).
        pub failed: usize,
        pub previously_failed: usize,
        /// Held by another attempt's live lease: returned to come back later.
        pub busy: usize,
        /// Returned because SES kept throttling until the invocation's time ran short.
        pub throttled: usize,
        /// SES's throttles, each answered by a lower shared rate and a later slot.
        pub throttles: usize,
        /// Unsent because the shared schedule had no slot before the invocation's deadline:
        /// put back on the queue as a new message that comes when it has (not an error, no
        /// SES call, no receive counted), or returned with that delay if the queue refused.
        pub paced: usize,
        /// Returned because sending is paused or the account suspended.
        pub stopped: usize,
        /// The campaign is paused: handed back unclaimed, sent after the resume.
        pub paused: usize,
        /// Returned because of an error (bad body, ledger or service error, deadline).
        pub retried: usize,
        /// SES accepted but the ledger could not be updated under the claim.
        pub unrecorded: usize,
        /// The campaign was cancelled: recorded CANCELLED (or left to a live attempt) and
        /// acknowledged.
        pub cancelled: usize,
        /// Decided by a guardrail (recorded SKIPPED), by reason.
        pub skipped: std::collections::BTreeMap<&'static str, usize>,
        /// SKIPPED before: acknowledged (a resend with --include-failed reconsiders them).
        pub previously_skipped: usize,
        /// Inside the user's quiet hours: handed back to the waiting room for their end (or,
        /// within 15 minutes of it, put back on the queue delayed until then).
        pub deferred: usize,
        /// SES's 24-hour quota was used up: held on the queue for an hour (or put back as a
        /// fresh copy near the receive limit), unsent, the shared rate untouched.
        pub daily_quota_held: usize,
        /// How late each email let go from the waiting room went after its slot (its user's
        /// local time, or an experiment's decision), ms (`lateMs` on its record): a
        /// distribution, for the dashboard's p50 and p99.
        #[serde(skip_serializing_if = "is_empty")]
        pub late_ms: crate::stages::summary::Samples,
    }
}

fn is_empty(samples: &crate::stages::summary::Samples) -> bool {
    samples.0.is_empty()
}

pub(super) enum Done {
    /// With how late it went after its slot (ms), for an email let go from the waiting room.
    Sent(Option<i64>),
    Duplicate,
    Failed,
    PreviouslyFailed,
    Unrecorded,
    Cancelled,
    /// No send slot in time: acknowledged, its copy on the queue comes back for one.
    Paced,
    Skipped(crate::domain::guardrails::Skip),
    PreviouslySkipped,
    /// In the user's quiet hours, which end within 15 minutes: acknowledged, a fresh copy
    /// comes back delayed until their end.
    Requeued,
    /// In the user's quiet hours: acknowledged, the user held in the waiting room for the
    /// slot at their end, to be rendered again then.
    HandedBack {
        campaign: CampaignId,
        slot_ms: i64,
    },
    /// Held for SES's 24-hour quota near its receive limit: acknowledged, a fresh copy comes
    /// back later.
    QuotaRequeued,
}

pub(super) enum Again {
    Busy,
    /// The campaign is paused: the record goes back untouched, to be sent after the resume.
    Paused,
    Throttled,
    /// No send slot before the deadline.
    Paced,
    Stopped,
    Error,
    /// Inside the user's quiet hours, the queue refused the delayed copy: back when they end
    /// (within 15 minutes).
    Quiet,
    /// SES's 24-hour quota is used up: back in an hour.
    DailyQuota,
}

/// A record to return, and when it should come back (None: after the queue's visibility).
pub(super) struct Retry {
    pub why: Again,
    pub delay: Option<Duration>,
}

impl Retry {
    pub fn error(delay: Option<Duration>) -> Self {
        Self {
            why: Again::Error,
            delay,
        }
    }
}

/// A batch's results counted: the summary, the records to return, and how many emails were
/// handed back to the waiting room per (campaign, slot).
pub(super) struct Tally {
    pub summary: Summary,
    pub failed: Vec<String>,
    pub handed_back: HashMap<(CampaignId, i64), u64>,
}

impl Tally {
    /// Counts every record's result; `throttles` is how many throttles SES answered.
    pub fn of(results: Vec<(String, Result<Done, Retry>)>, throttles: usize) -> Self {
        let mut tally = Tally {
            summary: Summary {
                throttles,
                ..Summary::default()
            },
            failed: Vec::new(),
            handed_back: HashMap::new(),
        };
        for (id, result) in results {
            match result {
                Ok(done) => tally.done(done),
                Err(retry) => {
                    tally.again(retry.why);
                    tally.failed.push(id);
                }
            }
        }
        tally
    }

    fn done(&mut self, done: Done) {
        let summary = &mut self.summary;
        match done {
            Done::HandedBack { campaign, slot_ms } => {
                summary.deferred += 1;
                *self.handed_back.entry((campaign, slot_ms)).or_default() += 1;
            }
            Done::Sent(late_ms) => {
                summary.sent += 1;
                if let Some(ms) = late_ms {
                    summary.late_ms.push(ms);
                }
            }
            Done::Duplicate => summary.duplicates += 1,
            Done::Failed => summary.failed += 1,
            Done::PreviouslyFailed => summary.previously_failed += 1,
            Done::Unrecorded => summary.unrecorded += 1,
            Done::Cancelled => summary.cancelled += 1,
            Done::Paced => summary.paced += 1,
            Done::Skipped(skip) => *summary.skipped.entry(skip.as_str()).or_default() += 1,
            Done::PreviouslySkipped => summary.previously_skipped += 1,
            Done::Requeued => summary.deferred += 1,
            Done::QuotaRequeued => summary.daily_quota_held += 1,
        }
    }

    fn again(&mut self, why: Again) {
        let summary = &mut self.summary;
        match why {
            Again::Busy => summary.busy += 1,
            Again::Paused => summary.paused += 1,
            Again::Throttled => summary.throttled += 1,
            Again::Paced => summary.paced += 1,
            Again::Stopped => summary.stopped += 1,
            Again::Error => summary.retried += 1,
            Again::Quiet => summary.deferred += 1,
            Again::DailyQuota => summary.daily_quota_held += 1,
        }
    }
}

impl Summary {
    /// The batch's one log line.
    pub(super) fn log(&self, duration: Duration) {
        tracing::info!(
            sent = self.sent,
            duplicates = self.duplicates,
            failed = self.failed,
            busy = self.busy,
            throttled = self.throttled,
            throttles = self.throttles,
            paced = self.paced,
            stopped = self.stopped,
            paused = self.paused,
            retried = self.retried,
            previously_failed = self.previously_failed,
            unrecorded = self.unrecorded,
            cancelled = self.cancelled,
            skipped = ?self.skipped,
            previously_skipped = self.previously_skipped,
            deferred = self.deferred,
            daily_quota_held = self.daily_quota_held,
            duration_ms = duration.as_millis() as u64,
            "SendEmail batch done"
        );
    }
}

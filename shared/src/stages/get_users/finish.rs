//! A run segment's end: its counts recorded (the waiting room's report, the campaign's
//! exclusions), the run's held users weighed against the deadline, the checkpoint left on
//! the continuation queue when the audience did not fit, and the summary logged.

use super::fan_out::Segment;
use super::release::PAUSED_LOOK_AGAIN_SECONDS;
use super::request::{Checkpoint, Run};
use super::{GetUsers, GetUsersError, Queue, Summary, FINISHED_LOG_MESSAGE};
use crate::domain::campaign::{Campaign, CampaignId};
use crate::domain::campaign_state::Hold;
use crate::domain::digest::OddFollows;
use crate::domain::local_time;
use crate::domain::send_rate::sends_at_rate;
use crate::ports::{CampaignStates, OutgoingQueue, UserDirectory, WaitingRoom};
use std::time::Instant;

impl<D: UserDirectory, Q: Queue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// Records what the segment decided, leaves its checkpoint if the audience did not fit,
    /// and sums it up.
    pub(super) async fn finish(
        &self,
        run: &Run,
        segment: Segment,
        odd_follows: OddFollows,
        started: Instant,
    ) -> Result<Summary, GetUsersError> {
        let campaign = &run.campaign;
        // A segment that decided nobody (a paused campaign's checkpoint looking again) is not
        // a segment: it records nothing and its checkpoint keeps the number, so that a long
        // pause does not grow the report item by one entry a minute.
        let idle = segment.last == run.after && segment.refused == 0 && run.segment > 0;
        // A campaign without local time holds users for their quiet hours or an
        // experiment's decision: recorded too, so that `status` and `mailctl release` see them.
        let counts = &segment.counts;
        let held = run.delivery.is_some() || counts.quiet_deferred + counts.experiment_held > 0;
        let run_started = run
            .delivery
            .as_ref()
            .map_or(run.started_at_ms, |d| d.started_at_ms);
        // Every held user is stored: now the segment's counts (written whole, so a retried
        // segment repeats them harmlessly).
        if held && !idle {
            self.waiting
                .record_segment(&campaign.id, run_started, run.segment, counts)
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
        }
        self.campaigns
            .states()
            .record_exclusions(&campaign.id, run_started, run.segment, &segment.excluded)
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        let cancelled = matches!(segment.hold, Some(Hold::Cancelled(_)));
        let paused = matches!(segment.hold, Some(Hold::Paused(_)));
        let complete = segment.complete && segment.hold.is_none();
        // The whole audience is decided: its held users weighed against the deadline.
        let users_past_deadline = match complete {
            true => self.held_past_deadline(&campaign.id, run_started).await,
            false => 0,
        };
        // Everything up to `last` is on the queue now: only then is it a safe checkpoint.
        if !complete && !cancelled {
            self.leave_checkpoint(run, &segment, idle, paused).await?;
        }
        let summary = Summary {
            campaign_id: campaign.id.to_string(),
            segment: run.segment,
            users_enqueued: segment.report.sent,
            users_refused: segment.refused,
            excluded: segment.excluded,
            follows_skipped: odd_follows.followees,
            followers_skipped: odd_follows.followers,
            entries_retried: segment.report.retried,
            duration_ms: started.elapsed().as_millis(),
            complete,
            cancelled,
            paused,
            continued_after: if complete || cancelled {
                None
            } else {
                segment.last
            },
            local_time: held.then_some(segment.counts),
            users_past_deadline,
        };
        log(&summary);
        Ok(summary)
    }

    /// The checkpoint the next segment starts from: after the last user on its way.
    async fn leave_checkpoint(
        &self,
        run: &Run,
        segment: &Segment,
        idle: bool,
        paused: bool,
    ) -> Result<(), GetUsersError> {
        let campaign = &run.campaign;
        let checkpoint = Checkpoint {
            campaign_id: campaign.id.clone(),
            window: campaign.window,
            topic: campaign.topic.clone(),
            include_failed: run.include_failed,
            include_cancelled: run.include_cancelled,
            after: segment.last.clone(),
            segment: if idle { run.segment } else { run.segment + 1 },
            delivery: run.delivery.clone(),
            started_at_ms: Some(run.started_at_ms),
            definition: run.pinned.clone(),
        };
        let body = serde_json::to_string(&checkpoint).unwrap_or_default();
        // Paused: the pause stopped this queue's consumer; should it still run, the
        // checkpoint looks again in a minute rather than at once.
        let delay = if paused { PAUSED_LOOK_AGAIN_SECONDS } else { 0 };
        self.continuation.send_batch_delayed(&[body], delay).await?;
        Ok(())
    }
}

/// The line each invocation ends with.
fn log(summary: &Summary) {
    tracing::info!(
        campaign = %summary.campaign_id,
        segment = summary.segment,
        users_enqueued = summary.users_enqueued,
        users_refused = summary.users_refused,
        excluded = %summary.excluded.describe(),
        follows_skipped = summary.follows_skipped,
        followers_skipped = summary.followers_skipped,
        entries_retried = summary.entries_retried,
        duration_ms = summary.duration_ms as u64,
        complete = summary.complete,
        cancelled = summary.cancelled,
        paused = summary.paused,
        "{FINISHED_LOG_MESSAGE}"
    );
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// Whether the campaign is paused or cancelled (then nothing more is enqueued).
    pub(super) async fn hold(&self, campaign: &Campaign) -> Option<Hold> {
        let hold = self.campaigns.hold(campaign.id.as_str()).await;
        match &hold {
            Some(Hold::Cancelled(c)) => {
                tracing::info!(campaign = %campaign.id, cancelled_at_ms = c.at_ms, "campaign cancelled: no further fan-out")
            }
            Some(Hold::Paused(c)) => {
                tracing::info!(campaign = %campaign.id, paused_at_ms = c.at_ms, "campaign paused: fan-out stopped, checkpoint parked until the resume")
            }
            None => {}
        }
        hold
    }

    /// Users the run (started at `run_started_ms`) held that would go after the campaign's
    /// deadline at the stack's rate, each slot from its instant; a warning names them. Only
    /// now is the audience's size known, so the start could not refuse it. 0 when there is
    /// no deadline, nobody held, or the records could not be read (logged: the run itself
    /// is done).
    async fn held_past_deadline(&self, campaign: &CampaignId, run_started_ms: i64) -> u64 {
        let state = match self.campaigns.state(campaign.as_str()).await {
            Ok(state) => state,
            Err(err) => {
                tracing::warn!(%campaign, reason = %err, "the deadline was not weighed against the held users: the campaign's state was not read");
                return 0;
            }
        };
        let Some(deadline_ms) = state.guardrails.deadline_ms else {
            return 0;
        };
        let report = match self.waiting.report(campaign).await {
            Ok(report) => report,
            Err(err) => {
                tracing::warn!(%campaign, reason = %err, "the deadline was not weighed against the held users: the waiting room was not read");
                return 0;
            }
        };
        let Some(counts) = report.as_ref().and_then(|r| r.runs.get(&run_started_ms)) else {
            return 0;
        };
        let rate = self.config.send_rate_per_second;
        let sends = sends_at_rate(&counts.waiting, rate, Some(deadline_ms));
        if sends.past_deadline > 0 {
            tracing::warn!(
                %campaign,
                users_past_deadline = sends.past_deadline,
                deadline = %local_time::rfc3339_ms(deadline_ms),
                last_send = %local_time::rfc3339_ms(sends.last_ms.unwrap_or_default()),
                rate,
                "held users would go after the campaign's deadline at the send rate: they will be recorded expired; give a later --deadline with a resend, or raise the rate"
            );
        }
        sends.past_deadline
    }
}

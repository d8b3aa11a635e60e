//! Before the send: the campaign's state (read again once a read fails, then the record
//! backs off), and the claim of the record under this invocation's lease, or what a refusal
//! decides.

use super::outcome::{Again, Done, Retry};
use super::standing::Standings;
use super::{SendEmail, MARK_ATTEMPTS};
use crate::domain::campaign_state::{CampaignState, Hold};
use crate::domain::ledger::{self, epoch_ms, Claim, ClaimOutcome, Refusal};
use crate::domain::messages::EmailJob;
use crate::ports::{CampaignStates, Mailer, RateBucket, RetryQueue, SendLedger, WaitingRoom};
use crate::runtime::Invocation;
use aws_lambda_events::event::sqs::SqsMessage;
use std::time::Duration;

impl<
        M: Mailer,
        L: SendLedger,
        Q: RetryQueue,
        S: CampaignStates,
        B: RateBucket,
        W: WaitingRoom,
        P: Standings,
    > SendEmail<M, L, Q, S, B, W, P>
{
    /// The job's campaign as it stands, or what a cancellation, a pause or a failed read
    /// makes of the record.
    ///
    /// Read, not assumed: a holdout or a deadline not known would not be applied. A read
    /// that fails is tried again at once (a dropped connection), and then the record comes
    /// back with the backoff by its receives (2 s first, not the queue's 180 s visibility
    /// timeout; up to 5 minutes, so an outage does not use up its receives).
    pub(super) async fn campaign_state(
        &self,
        job: &EmailJob,
        record: &SqsMessage,
    ) -> Result<CampaignState, Result<Done, Retry>> {
        let mut read = self.campaigns.state(job.campaign_id.as_str()).await;
        for attempt in 1..MARK_ATTEMPTS {
            if read.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            read = self.campaigns.state(job.campaign_id.as_str()).await;
        }
        let state = match read {
            Ok(state) => state,
            Err(err) => {
                tracing::warn!(campaign = %job.campaign_id, reason = %err, "campaign state not read; will retry");
                return Err(Err(Retry::error(Some(self.backoff(record)))));
            }
        };
        match &state.hold {
            Some(Hold::Cancelled(cancellation)) => Err(self.cancel(job, cancellation).await),
            // Not claimed: after the resume it is sent as if the pause had not been.
            Some(Hold::Paused(_)) => Err(Err(Retry {
                why: Again::Paused,
                delay: None,
            })),
            None => Ok(state),
        }
    }

    /// Claims the job's record under this invocation's lease: the claim and the send errors
    /// noted on it so far, or what the refusal decides (a duplicate, busy, failed before...).
    pub(super) async fn claim(
        &self,
        job: &EmailJob,
        message_id: &str,
        invocation: &Invocation,
    ) -> Result<(Claim, u64), Result<Done, Retry>> {
        let now = crate::runtime::clock::now();
        let claim = Claim {
            key: job.key(),
            token: format!("{}:{message_id}", invocation.request_id),
            started_at_ms: epoch_ms(now),
            lease_until_ms: epoch_ms(ledger::lease_until(
                now,
                invocation.deadline,
                self.config.lease_clock_skew,
                self.config.visibility_timeout,
            )),
            due: job.due,
            deadline_ms: None,
            variant: job.variant.clone(),
            zone: job.zone.clone(),
        };
        match self.ledger.claim(&claim, job.reclaim()).await {
            Ok(ClaimOutcome::Claimed {
                attempt,
                send_errors,
            }) => {
                tracing::debug!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, attempt, "claimed");
                Ok((claim, send_errors))
            }
            Ok(ClaimOutcome::Refused(refusal)) => Err(self.refused(&claim, refusal).await),
            Err(err) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "claim failed; will retry");
                Err(Err(Retry::error(None)))
            }
        }
    }

    /// What a refused claim decides: acknowledged, or (busy) back after the holder's lease.
    async fn refused(&self, claim: &Claim, refusal: Refusal) -> Result<Done, Retry> {
        match refusal {
            Refusal::AlreadySent => {
                if let Err(err) = self.ledger.note_duplicate(&claim.key).await {
                    tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "could not count the suppressed duplicate");
                }
                Ok(Done::Duplicate)
            }
            Refusal::Failed { .. } => Ok(Done::PreviouslyFailed),
            Refusal::Cancelled => Ok(Done::Cancelled),
            Refusal::Skipped { .. } => Ok(Done::PreviouslySkipped),
            Refusal::Busy { lease_until_ms } => {
                // Never acknowledge: if the holder dies, this copy may be the only one left.
                let wait =
                    lease_until_ms.saturating_sub(epoch_ms(crate::runtime::clock::now())) + 1000;
                Err(Retry {
                    why: Again::Busy,
                    delay: Some(Duration::from_millis(wait)),
                })
            }
        }
    }
}

//! SES's 24-hour quota used up. SES answers it with a throttling code, but it is not a rate:
//! sending slower lets nothing through, so the shared rate is left alone (lowering it would
//! slow every campaign on the stack for nothing), and the records are held on the queue
//! until the rolling window has room again rather than retried every few minutes into the
//! DLQ.

use super::outcome::{Again, Done, Retry};
use super::standing::Standings;
use super::SendEmail;
use crate::domain::ledger::Claim;
use crate::ports::{CampaignStates, Mailer, RateBucket, RetryQueue, SendLedger, WaitingRoom};
use aws_lambda_events::event::sqs::SqsMessage;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// How long a record waits for the quota. The window rolls: room comes back as the sends of
/// 24 hours ago age out of it, a little at a time, so an hour wastes at most an hour of it,
/// at one receive an hour per record (held near the receive limit as a fresh copy, never
/// the DLQ's), well under SQS's 12-hour bound.
pub(super) const DAILY_QUOTA_HOLD: Duration = Duration::from_secs(3600);

/// Why the rest of a batch is not sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Halted {
    /// SES refuses the account (sending paused, suspended).
    Stopped,
    /// The account's 24-hour quota is used up.
    DailyQuota,
}

/// A batch's halt, set by the first record SES answers so, read by the others.
#[derive(Default)]
pub(super) struct Halt(AtomicU8);

impl Halt {
    pub(super) fn set(&self, why: Halted) {
        let code = match why {
            Halted::Stopped => 1,
            Halted::DailyQuota => 2,
        };
        self.0.store(code, Ordering::SeqCst);
    }

    pub(super) fn get(&self) -> Option<Halted> {
        match self.0.load(Ordering::SeqCst) {
            1 => Some(Halted::Stopped),
            2 => Some(Halted::DailyQuota),
            _ => None,
        }
    }
}

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
    /// Holds a record for the quota: its claim (if it has one) given back, not dead-lettered
    /// (the record does not go to the DLQ), and the record hidden for `DAILY_QUOTA_HOLD`.
    pub(super) async fn hold_for_quota(
        &self,
        claim: Option<&Claim>,
        record: &SqsMessage,
    ) -> Result<Done, Retry> {
        if let Some(claim) = claim {
            // Not sent for hours: its cap reservation would skip the person's other
            // campaigns' emails meanwhile; the send that goes counts it again.
            self.uncount(&claim.key).await;
            self.give_back(claim, "SES 24-hour quota used up", false, false)
                .await;
        }
        if self.near_receive_limit(record)
            && self
                .requeue(record, DAILY_QUOTA_HOLD.min(Duration::from_secs(900)))
                .await
        {
            return Ok(Done::QuotaRequeued);
        }
        Err(Retry {
            why: Again::DailyQuota,
            delay: Some(DAILY_QUOTA_HOLD),
        })
    }
}

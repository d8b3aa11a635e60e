//! How a record goes back to the emails queue: returned with a delay by how often SQS has
//! delivered it, or, where a return would cost it a receive towards the DLQ, put back as a
//! fresh copy and the original deleted.

use super::outcome::{Again, Retry};
use super::standing::Standings;
use super::SendEmail;
use crate::ports::{CampaignStates, Mailer, RateBucket, RetryQueue, SendLedger, WaitingRoom};
use aws_lambda_events::event::sqs::SqsMessage;
use std::time::Duration;

/// How often SQS has delivered this record (1 on the first receive).
pub(super) fn receive_count(record: &SqsMessage) -> usize {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
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
    /// Backoff for a throttled record: by how often SQS has delivered it.
    pub(super) fn backoff(&self, record: &SqsMessage) -> Duration {
        let delays = &self.config.retry_delays;
        delays[receive_count(record)
            .saturating_sub(1)
            .min(delays.len() - 1)]
    }

    /// This receive is the last before the DLQ.
    pub(super) fn last_receive(&self, record: &SqsMessage) -> bool {
        receive_count(record) >= self.config.max_receive_count as usize
    }

    /// A return that hides this record again must not cost it the receive that sends it to
    /// the DLQ: it goes back as a fresh copy instead.
    pub(super) fn near_receive_limit(&self, record: &SqsMessage) -> bool {
        receive_count(record) + 1 >= self.config.max_receive_count as usize
    }

    /// Sending is stopped (SES refuses the account): back to the queue at the longest delay.
    pub(super) fn stopped(&self) -> Retry {
        Retry {
            why: Again::Stopped,
            delay: self.config.retry_delays.last().copied(),
        }
    }

    pub(super) async fn delay(&self, record: &SqsMessage, delay: Duration) {
        let Some(receipt) = record.receipt_handle.as_deref() else {
            return;
        };
        if let Err(err) = self.queue.change_visibility(receipt, delay).await {
            // Not fatal: the record still comes back, after the queue's visibility timeout.
            tracing::warn!(reason = %err, "could not set the retry delay");
        }
    }

    /// Sends the record's body again as a new message that comes back after `wait`; false
    /// if the queue refused (then the record itself is returned with that delay).
    pub(super) async fn requeue(&self, record: &SqsMessage, wait: Duration) -> bool {
        let Some(body) = record.body.as_deref() else {
            return false;
        };
        match self.queue.requeue(body, wait).await {
            Ok(()) => {
                // The original goes now: should this invocation time out, its batch comes
                // back whole, and a record already copied would be copied again each time.
                if let Some(receipt) = record.receipt_handle.as_deref() {
                    if let Err(err) = self.queue.delete(receipt).await {
                        tracing::warn!(reason = %err, "could not delete a requeued email's original; the batch response acknowledges it");
                    }
                }
                true
            }
            Err(err) => {
                tracing::warn!(reason = %err, "could not put a paced email back on the queue; returning the record instead");
                false
            }
        }
    }
}

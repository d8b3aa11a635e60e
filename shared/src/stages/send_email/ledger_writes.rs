//! SendEmail's writes to the ledger after the claim: SENT, FAILED, SKIPPED, CANCELLED, the claim given
//! back or left to the DLQ, each retried within the invocation's time as its outcome allows.

use super::*;
use crate::domain::guardrails::Skip;

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
    pub(super) async fn mark_sent(
        &self,
        claim: &Claim,
        ses_message_id: &str,
        invocation: &Invocation,
    ) -> Done {
        // Worked out once: the record and the metrics say the same.
        let late_ms = late_ms(claim);
        match self
            .retry_write(
                || self.ledger.mark_sent(claim, ses_message_id, late_ms),
                |_| invocation.remaining() > MARK_SENT_MARGIN,
            )
            .await
        {
            Ok(Ok(())) => Done::Sent(late_ms),
            Ok(Err(LostClaim {
                status,
                ses_message_id: recorded,
                ..
            })) => {
                if recorded.as_deref() == Some(ses_message_id) {
                    return Done::Sent(late_ms);
                }
                // Another attempt took over after our lease ended (we were too slow).
                tracing::error!(
                    campaign = %claim.key.campaign_id(), user = %claim.key.user_id,
                    ?status,
                    ses_message_id,
                    "sent, but the claim had passed to another attempt: possible duplicate"
                );
                Done::Unrecorded
            }
            Err(err) => {
                // Acknowledge anyway: a retry would send again. The SES event can reconcile.
                tracing::error!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, ses_message_id, "sent, but SENT could not be recorded");
                Done::Unrecorded
            }
        }
    }

    /// The campaign was cancelled: this email is not sent; its record ends CANCELLED (unless
    /// it is SENT or a live attempt holds it) and the message is acknowledged.
    pub(super) async fn cancel(
        &self,
        job: &EmailJob,
        cancellation: &StateChange,
    ) -> Result<Done, Retry> {
        let now = epoch_ms(crate::runtime::clock::now()).max(cancellation.at_ms);
        match self.ledger.cancel_send(&job.key(), now).await {
            Ok(written) => {
                if written {
                    // An earlier attempt may have counted it towards the caps.
                    self.uncount(&job.key()).await;
                }
                Ok(Done::Cancelled)
            }
            Err(err) => {
                tracing::warn!(campaign = %job.campaign_id, user = %job.user_id, reason = %err, "could not record the cancellation; will retry");
                Err(Retry::error(None))
            }
        }
    }

    /// Records FAILED with the reason (a permanent error) and acknowledges the record.
    pub(super) async fn fail(&self, claim: &Claim, reason: &str) -> Result<Done, Retry> {
        tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, %reason, "rejected permanently; recorded FAILED");
        match self
            .retry_mark(|| self.ledger.mark_failed(claim, reason))
            .await
        {
            Ok(Ok(())) => Ok(Done::Failed),
            Ok(Err(lost)) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, ?lost.status, "claim lost before FAILED could be recorded");
                Ok(Done::Failed)
            }
            // The claim stays IN_PROGRESS; the record retries after the lease.
            Err(_) => Err(Retry::error(None)),
        }
    }

    /// Records SKIPPED with a guardrail's reason and acknowledges the record. An earlier
    /// attempt may have counted it towards the caps (then throttled, paced): taken out.
    pub(super) async fn skip(&self, claim: &Claim, skip: Skip) -> Result<Done, Retry> {
        if skip.may_be_counted() {
            self.uncount(&claim.key).await;
        }
        match self
            .retry_mark(|| self.ledger.mark_skipped(claim, skip))
            .await
        {
            Ok(Ok(())) => Ok(Done::Skipped(skip)),
            Ok(Err(lost)) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, ?lost.status, "claim lost before SKIPPED could be recorded");
                Ok(Done::Skipped(skip))
            }
            // The claim stays IN_PROGRESS; the record retries after the lease.
            Err(_) => Err(Retry::error(None)),
        }
    }

    /// Hands the claim back for a retry: released, or, on the message's last receive,
    /// DEAD_LETTERED, since the message goes to the DLQ now.
    pub(super) async fn give_back(
        &self,
        claim: &Claim,
        reason: &str,
        send_error: bool,
        last_receive: bool,
    ) {
        if last_receive {
            // Not sent (SES did not accept it): a redrive or a resend counts it again.
            self.uncount(&claim.key).await;
            return self.dead_letter(claim, reason).await;
        }
        match self
            .retry_mark(|| self.ledger.release(claim, reason, send_error))
            .await
        {
            Ok(_) => {}
            // The lease still ends on its own; the retry only waits longer.
            Err(err) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "could not release the claim")
            }
        }
    }

    pub(super) async fn dead_letter(&self, claim: &Claim, reason: &str) {
        tracing::error!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, %reason, "last receive of this email's message: it goes to the emails DLQ; recorded DEAD_LETTERED");
        if let Err(err) = self
            .retry_mark(|| self.ledger.mark_dead_lettered(claim, reason))
            .await
        {
            tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "could not record DEAD_LETTERED");
        }
    }

    async fn retry_mark<F, Fut>(&self, write: F) -> Marked
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Marked>,
    {
        self.retry_write(write, |attempt| attempt < MARK_ATTEMPTS)
            .await
    }

    /// Retries a ledger write that failed (not one refused by its condition) with backoff
    /// while `again(attempts so far)` allows.
    async fn retry_write<F, Fut>(&self, write: F, again: impl Fn(u32) -> bool) -> Marked
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Marked>,
    {
        let mut attempt = 0;
        loop {
            match write().await {
                Err(err) if again(attempt + 1) => {
                    attempt += 1;
                    tracing::warn!(reason = %err, attempt, "ledger write failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 << attempt.min(3))).await;
                }
                other => return other,
            }
        }
    }
}

/// How late an email let go from the waiting room went after its slot (system clock,
/// as `Due` counts it).
fn late_ms(claim: &Claim) -> Option<i64> {
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    claim.due.map(|due| due.late_ms(now))
}

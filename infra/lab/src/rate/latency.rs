//! The in-memory ports behind the round trips DynamoDB and SQS would take: each call waits a
//! latency drawn from a range before it is answered, so that an environment's throughput is
//! bounded as it is on Lambda; and the CPU an environment has (`Computing`).

use super::queue::LabQueue;
use anyhow::{bail, Result};
use mailflow::domain::guardrails::{CapHistory, Skip};
use mailflow::domain::ledger::{Claim, ClaimOutcome, LedgerError, Reclaim, SendKey};
use mailflow::domain::send_rate::{QuotaUnknown, SendQuota, SharedRate};
use mailflow::ports::memory::MemoryLedger;
use mailflow::ports::{
    CapLedger, ConsumedQueue, Mailer, Marked, OutgoingEmail, QueueError, RateBucket, RateError,
    RateView, RetryQueue, SendError, SendLedger, SlotRequest, Taken,
};
use std::sync::Arc;
use std::time::Duration;

/// A latency range from the command line: two numbers of ms, low then high.
pub(crate) fn millis(range: &[u64]) -> Result<(Duration, Duration)> {
    match range {
        [low, high] if low <= high => {
            Ok((Duration::from_millis(*low), Duration::from_millis(*high)))
        }
        other => bail!("a latency range is two numbers of ms, low then high: not {other:?}"),
    }
}

/// `inner`, `latency` later (a low and a high; drawn evenly between them per call).
pub struct Slow<T> {
    pub inner: Arc<T>,
    pub latency: (Duration, Duration),
}

impl<T> Clone for Slow<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            latency: self.latency,
        }
    }
}

impl<T> Slow<T> {
    pub fn new(inner: Arc<T>, latency: (Duration, Duration)) -> Self {
        Self { inner, latency }
    }

    pub(crate) async fn wait(&self) {
        let (low, high) = self.latency;
        // Spread without a shared generator: the clock's nanoseconds are random enough here.
        let spread = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()) as f64
            / 1e9;
        tokio::time::sleep(low + (high - low).mul_f64(spread)).await;
    }
}

impl CapLedger for Slow<MemoryLedger> {
    async fn cap_history(&self, user_id: &str) -> Result<CapHistory, LedgerError> {
        self.wait().await;
        self.inner.cap_history(user_id).await
    }

    async fn write_cap_history(
        &self,
        user_id: &str,
        history: &CapHistory,
        keep_ms: i64,
    ) -> Result<bool, LedgerError> {
        self.wait().await;
        self.inner
            .write_cap_history(user_id, history, keep_ms)
            .await
    }
}

impl SendLedger for Slow<MemoryLedger> {
    async fn claim(&self, claim: &Claim, reclaim: Reclaim) -> Result<ClaimOutcome, LedgerError> {
        self.wait().await;
        self.inner.claim(claim, reclaim).await
    }

    async fn note_duplicate(&self, key: &SendKey) -> Result<(), LedgerError> {
        self.wait().await;
        self.inner.note_duplicate(key).await
    }

    async fn mark_sent(&self, claim: &Claim, ses_message_id: &str, late_ms: Option<i64>) -> Marked {
        self.wait().await;
        self.inner.mark_sent(claim, ses_message_id, late_ms).await
    }

    async fn mark_failed(&self, claim: &Claim, reason: &str) -> Marked {
        self.wait().await;
        self.inner.mark_failed(claim, reason).await
    }

    async fn release(&self, claim: &Claim, reason: &str, send_error: bool) -> Marked {
        self.wait().await;
        self.inner.release(claim, reason, send_error).await
    }

    async fn mark_dead_lettered(&self, claim: &Claim, reason: &str) -> Marked {
        self.wait().await;
        self.inner.mark_dead_lettered(claim, reason).await
    }

    async fn mark_skipped(&self, claim: &Claim, skip: Skip) -> Marked {
        self.wait().await;
        self.inner.mark_skipped(claim, skip).await
    }

    async fn cancel_send(&self, key: &SendKey, at_ms: u64) -> Result<bool, LedgerError> {
        self.wait().await;
        self.inner.cancel_send(key, at_ms).await
    }
}

impl<B: RateBucket> RateBucket for Slow<B> {
    async fn take(&self, request: &SlotRequest) -> Result<Taken, RateError> {
        self.wait().await;
        self.inner.take(request).await
    }

    async fn change_rate(
        &self,
        seen: Option<&SharedRate>,
        next: &SharedRate,
    ) -> Result<bool, RateError> {
        self.wait().await;
        self.inner.change_rate(seen, next).await
    }

    async fn read(&self) -> Result<RateView, RateError> {
        self.wait().await;
        self.inner.read().await
    }
}

impl ConsumedQueue for Slow<LabQueue> {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        self.wait().await;
        self.inner.change_visibility(receipt_handle, delay).await
    }
}

impl RetryQueue for Slow<LabQueue> {
    async fn requeue(&self, body: &str, delay: Duration) -> Result<(), QueueError> {
        self.wait().await;
        self.inner.requeue(body, delay).await
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        self.wait().await;
        self.inner.delete(receipt_handle).await
    }
}

/// One environment's share of a CPU, as a schedule: each piece of work starts when the one
/// before it ends and takes its time. Kept as instants rather than as a lock held across a
/// sleep, because tokio's timer fires on whole milliseconds: 400 µs slept as such would take
/// a millisecond, and the CPU would seem two and a half times slower than modelled.
#[derive(Default)]
pub struct Cpu {
    busy_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Cpu {
    /// Waits until `work` of this CPU is done, after the work already scheduled on it.
    pub async fn spend(&self, work: Duration) {
        if work.is_zero() {
            return;
        }
        let done = {
            let mut busy = mailflow::runtime::lock(&self.busy_until);
            let now = tokio::time::Instant::now();
            let done = busy.map_or(now, |b| b.max(now)) + work;
            *busy = Some(done);
            done
        };
        tokio::time::sleep_until(done).await;
    }
}

/// One environment's share of a CPU: each email takes `per_email` of it, one email at a time
/// (Lambda gives a function CPU in proportion to its memory), before `inner` sends it.
pub struct Computing<M> {
    pub inner: M,
    pub per_email: Duration,
    cpu: Cpu,
}

impl<M> Computing<M> {
    pub fn new(inner: M, per_email: Duration) -> Self {
        Self {
            inner,
            per_email,
            cpu: Cpu::default(),
        }
    }
}

impl<M: Mailer> Mailer for Computing<M> {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        self.cpu.spend(self.per_email).await;
        self.inner.send(email).await
    }

    async fn send_quota(&self) -> Result<SendQuota, QuotaUnknown> {
        self.inner.send_quota().await
    }
}

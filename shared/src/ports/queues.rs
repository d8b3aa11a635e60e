//! The queues: what the stages put on them (with SendMessageBatch's limits as the
//! contract) and how a consumed record comes back.

use std::future::Future;
use std::time::Duration;

/// The outgoing queue's batch contract (SQS SendMessageBatch): at most 10 entries and
/// 256 KiB in total; `batches` cuts a stage's bodies to fit.
pub const MAX_BATCH_ENTRIES: usize = 10;
pub const MAX_BATCH_BYTES: usize = 256 * 1024;

/// Splits bodies into SendMessageBatch-sized groups (by count and by bytes), keeping order.
pub fn batches(bodies: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, body) in bodies.iter().enumerate() {
        let full =
            i - start == MAX_BATCH_ENTRIES || (i > start && bytes + body.len() > MAX_BATCH_BYTES);
        if full {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += body.len();
    }
    if start < bodies.len() {
        out.push(start..bodies.len());
    }
    out
}

/// A queue the stages put messages on: the users queue and the continuation queue
/// (GetUsers), the emails queue (CreateEmails).
pub trait OutgoingQueue: Send + Sync {
    /// Up to `MAX_BATCH_ENTRIES` bodies (`MAX_BATCH_BYTES` in all) in one SendMessageBatch; entries the service reports as failed are
    /// sent again, and those that still fail are named in the error (never dropped silently).
    fn send_batch(
        &self,
        bodies: &[String],
    ) -> impl Future<Output = Result<SendReport, QueueError>> + Send;
    /// `send_batch`, each message invisible for `delay_seconds` first (at most
    /// `MAX_DELAY_SECONDS`, SQS's limit).
    fn send_batch_delayed(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> impl Future<Output = Result<SendReport, QueueError>> + Send;
}

/// SQS's longest message delay: 15 minutes.
pub const MAX_DELAY_SECONDS: u32 = 900;

/// A queue a stage consumes: when a record it returns comes back (SendEmail's emails queue,
/// GetUsers' continuation queue).
pub trait ConsumedQueue: Send + Sync {
    /// Makes a received message visible again after `delay` (SQS caps it at 12 hours).
    fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// The queue a record came from, as SendEmail uses it: to set when a returned record comes
/// back, or to put it back as a fresh message.
pub trait RetryQueue: ConsumedQueue {
    /// Puts `body` on the queue again as a new message, invisible for `delay` (at most
    /// SQS's 15 minutes): its receive count starts again, so waiting costs no receive.
    fn requeue(
        &self,
        body: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
    /// Deletes a received message now (its copy is on the queue), rather than with the
    /// batch's response, which an invocation that times out never gives.
    fn delete(&self, receipt_handle: &str) -> impl Future<Output = Result<(), QueueError>> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue {queue}: {operation} failed: {detail}")]
    Call {
        queue: String,
        operation: &'static str,
        detail: String,
    },
    #[error(
        "queue {queue}: {count} entries still failed after {attempts} attempts (first: {first})"
    )]
    EntriesFailed {
        queue: String,
        attempts: u32,
        count: usize,
        first: String,
        /// Indexes (into the bodies given) of the entries that were not sent.
        unsent: Vec<usize>,
    },
}

/// What a batched send did: how many entries had to be sent again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    pub sent: usize,
    pub retried: usize,
}

impl<T: OutgoingQueue> OutgoingQueue for std::sync::Arc<T> {
    fn send_batch(
        &self,
        bodies: &[String],
    ) -> impl Future<Output = Result<SendReport, QueueError>> + Send {
        (**self).send_batch(bodies)
    }
    fn send_batch_delayed(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> impl Future<Output = Result<SendReport, QueueError>> + Send {
        (**self).send_batch_delayed(bodies, delay_seconds)
    }
}

impl<T: ConsumedQueue> ConsumedQueue for std::sync::Arc<T> {
    fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<(), QueueError>> + Send {
        (**self).change_visibility(receipt_handle, delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_by_count_and_bytes() {
        let small: Vec<String> = (0..23).map(|i| i.to_string()).collect();
        assert_eq!(batches(&small), vec![0..10, 10..20, 20..23]);
        let big: Vec<String> = (0..4).map(|_| "x".repeat(100 * 1024)).collect();
        assert_eq!(batches(&big), vec![0..2, 2..4]);
        assert!(batches(&[]).is_empty());
    }
}

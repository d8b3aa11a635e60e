//! In-memory queues: one that records the retry delays SendEmail asks for, one that keeps
//! what GetUsers and CreateEmails put on it.

use crate::ports::{ConsumedQueue, OutgoingQueue, QueueError, RetryQueue, SendReport};
use std::sync::Mutex;
use std::time::Duration;

/// Records the visibility changes asked of it (receipt handle, delay) and the messages put
/// on it again (body, delay); `refuse_requeue` makes the latter fail.
#[derive(Default)]
pub struct MemoryQueue {
    pub delays: Mutex<Vec<(String, Duration)>>,
    pub requeued: Mutex<Vec<(String, Duration)>>,
    /// Receipt handles deleted at once (a requeued record's original).
    pub deleted: Mutex<Vec<String>>,
    pub refuse_requeue: std::sync::atomic::AtomicBool,
}

impl MemoryQueue {
    pub fn delays(&self) -> Vec<(String, Duration)> {
        crate::runtime::lock(&self.delays).clone()
    }
}

impl ConsumedQueue for MemoryQueue {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        crate::runtime::lock(&self.delays).push((receipt_handle.to_owned(), delay));
        Ok(())
    }
}

impl RetryQueue for MemoryQueue {
    async fn requeue(&self, body: &str, delay: Duration) -> Result<(), QueueError> {
        if self
            .refuse_requeue
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(QueueError::Call {
                queue: "memory".into(),
                operation: "SendMessage",
                detail: "connection refused".into(),
            });
        }
        crate::runtime::lock(&self.requeued).push((body.to_owned(), delay));
        Ok(())
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        crate::runtime::lock(&self.deleted).push(receipt_handle.to_owned());
        Ok(())
    }
}

/// An outgoing queue that keeps every body put on it; bodies containing a refused marker are
/// reported as failed entries (as SQS reports them), and a closed outbox refuses every call.
/// Consumed too (GetUsers' continuation queue): it records the visibility changes asked of it.
#[derive(Default)]
pub struct MemoryOutbox {
    pub bodies: Mutex<Vec<String>>,
    /// (delay in seconds, body) of every delayed message (also in `bodies`).
    pub delayed: Mutex<Vec<(u32, String)>>,
    /// (receipt handle, delay) of every visibility change.
    pub visibility: Mutex<Vec<(String, Duration)>>,
    pub refused: Mutex<Vec<String>>,
    pub closed: std::sync::atomic::AtomicBool,
}

impl MemoryOutbox {
    pub fn bodies(&self) -> Vec<String> {
        crate::runtime::lock(&self.bodies).clone()
    }

    /// Entries whose body contains `marker` fail.
    pub fn refuse(&self, marker: &str) {
        crate::runtime::lock(&self.refused).push(marker.to_owned());
    }

    fn check_open(&self, operation: &'static str) -> Result<(), QueueError> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(QueueError::Call {
                queue: "memory".into(),
                operation,
                detail: "connection refused".into(),
            });
        }
        Ok(())
    }
}

impl OutgoingQueue for MemoryOutbox {
    async fn send_batch(&self, bodies: &[String]) -> Result<SendReport, QueueError> {
        self.check_open("SendMessageBatch")?;
        let refused = crate::runtime::lock(&self.refused).clone();
        let unsent: Vec<usize> = (0..bodies.len())
            .filter(|&i| refused.iter().any(|m| bodies[i].contains(m.as_str())))
            .collect();
        let mut kept = crate::runtime::lock(&self.bodies);
        kept.extend(
            (0..bodies.len())
                .filter(|i| !unsent.contains(i))
                .map(|i| bodies[i].clone()),
        );
        if unsent.is_empty() {
            return Ok(SendReport {
                sent: bodies.len(),
                retried: 0,
            });
        }
        Err(QueueError::EntriesFailed {
            queue: "memory".into(),
            attempts: 3,
            count: unsent.len(),
            first: "InternalError".into(),
            unsent,
        })
    }

    async fn send_batch_delayed(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> Result<SendReport, QueueError> {
        let report = self.send_batch(bodies).await?;
        crate::runtime::lock(&self.delayed)
            .extend(bodies.iter().map(|b| (delay_seconds, b.clone())));
        Ok(report)
    }
}

impl ConsumedQueue for MemoryOutbox {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        self.check_open("ChangeMessageVisibility")?;
        crate::runtime::lock(&self.visibility).push((receipt_handle.to_owned(), delay));
        Ok(())
    }
}

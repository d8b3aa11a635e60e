//! SQS: batched sends that retry the entries SQS reports as `Failed` (none is ever dropped
//! silently), and visibility changes for backoff.

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use aws_sdk_sqs::Client;
use std::time::Duration;

const SEND_ATTEMPTS: u32 = 5;

use crate::ports::OutgoingQueue;
pub use crate::ports::{QueueError, SendReport};

#[derive(Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
}

impl SqsQueue {
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    fn call_error<E, R>(
        &self,
        operation: &'static str,
        err: &aws_sdk_sqs::error::SdkError<E, R>,
    ) -> QueueError
    where
        E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        QueueError::Call {
            queue: self.url.clone(),
            operation,
            detail: super::describe(err),
        }
    }
}

impl OutgoingQueue for SqsQueue {
    /// Sends up to 10 bodies in one SendMessageBatch, re-sending the entries that come back
    /// in `Failed` (with a short backoff) until all are in or the attempts run out.
    async fn send_batch(&self, bodies: &[String]) -> Result<SendReport, QueueError> {
        self.send_entries(bodies, 0).await
    }

    async fn send_batch_delayed(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> Result<SendReport, QueueError> {
        self.send_entries(bodies, delay_seconds.min(crate::ports::MAX_DELAY_SECONDS))
            .await
    }
}

impl SqsQueue {
    /// The SendMessageBatch entries of the `pending` bodies, each id its index in `bodies`.
    fn entries(
        &self,
        bodies: &[String],
        pending: &[usize],
        delay_seconds: u32,
    ) -> Result<Vec<SendMessageBatchRequestEntry>, QueueError> {
        pending
            .iter()
            .map(|&i| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(&bodies[i])
                    .set_delay_seconds((delay_seconds > 0).then_some(delay_seconds as i32))
                    .build()
                    .map_err(|e| QueueError::Call {
                        queue: self.url.clone(),
                        operation: "SendMessageBatch",
                        detail: e.to_string(),
                    })
            })
            .collect()
    }

    async fn send_entries(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> Result<SendReport, QueueError> {
        let mut pending: Vec<usize> = (0..bodies.len()).collect();
        let mut report = SendReport::default();
        let mut last_failure = String::new();
        for attempt in 0..SEND_ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            if attempt > 0 {
                report.retried += pending.len();
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
            let entries = self.entries(bodies, &pending, delay_seconds)?;
            let out = match self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => out,
                Err(err) => {
                    // The whole call failed: every pending entry is retried.
                    last_failure = super::describe(&err);
                    continue;
                }
            };
            report.sent += out.successful.len();
            let mut still = Vec::new();
            let mut sender_fault = false;
            for failed in out.failed {
                last_failure = format!("{}: {}", failed.code, failed.message.unwrap_or_default());
                // A sender fault (e.g. a body too large) will never succeed: do not loop.
                sender_fault |= failed.sender_fault;
                if let Ok(i) = failed.id.parse::<usize>() {
                    still.push(i);
                }
            }
            if sender_fault {
                return Err(QueueError::EntriesFailed {
                    queue: self.url.clone(),
                    attempts: attempt + 1,
                    count: still.len(),
                    first: last_failure,
                    unsent: still,
                });
            }
            pending = still;
        }
        if pending.is_empty() {
            Ok(report)
        } else {
            Err(QueueError::EntriesFailed {
                queue: self.url.clone(),
                attempts: SEND_ATTEMPTS,
                count: pending.len(),
                first: last_failure,
                unsent: pending,
            })
        }
    }
}

impl crate::ports::ConsumedQueue for SqsQueue {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(delay.as_secs().min(43_200) as i32)
            .send()
            .await
            .map_err(|e| self.call_error("ChangeMessageVisibility", &e))?;
        Ok(())
    }
}

impl crate::ports::RetryQueue for SqsQueue {
    async fn requeue(&self, body: &str, delay: Duration) -> Result<(), QueueError> {
        // Whole seconds, rounded up (never back before its slot), at least one.
        let seconds = delay
            .as_millis()
            .div_ceil(1000)
            .clamp(1, u128::from(crate::ports::MAX_DELAY_SECONDS));
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .delay_seconds(seconds as i32)
            .send()
            .await
            .map_err(|e| self.call_error("SendMessage", &e))?;
        Ok(())
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| self.call_error("DeleteMessage", &e))?;
        Ok(())
    }
}
/// Messages in a queue: visible, and in flight or delayed (a local-time user due within 15
/// minutes waits on the users queue with a delay). Read the same on AWS and on the local
/// emulator; `mailctl status` and the simulator's drain both count by it.
pub async fn queue_depth(sqs: &Client, url: &str) -> Result<(u64, u64), QueueError> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(A::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .map_err(|err| QueueError::Call {
            queue: url.to_owned(),
            operation: "GetQueueAttributes",
            detail: super::describe(&err),
        })?
        .attributes
        .unwrap_or_default();
    let get = |k: A| attrs.get(&k).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok((
        get(A::ApproximateNumberOfMessages),
        get(A::ApproximateNumberOfMessagesNotVisible) + get(A::ApproximateNumberOfMessagesDelayed),
    ))
}

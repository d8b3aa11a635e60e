//! The three pipeline stages, and the two functions that handle what comes back (SES
//! events, unsubscribes). Each is a struct built once at init (clients, config) with a
//! `handle` method the binary's `service_fn` calls; tests and the local runner call it too.

pub mod create_emails;
pub mod get_users;
pub mod send_email;
pub mod ses_events;
pub mod unsubscribe;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsMessage};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a stage needs to know about its invocation.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub request_id: String,
    pub deadline: SystemTime,
}

impl Invocation {
    pub fn from_context(ctx: &lambda_runtime::Context) -> Self {
        Self {
            request_id: ctx.request_id.clone(),
            deadline: UNIX_EPOCH + Duration::from_millis(ctx.deadline),
        }
    }

    /// For callers outside Lambda (the local runner, tests): a deadline `timeout` from now.
    pub fn with_timeout(request_id: impl Into<String>, timeout: Duration) -> Self {
        Self {
            request_id: request_id.into(),
            deadline: SystemTime::now() + timeout,
        }
    }

    pub fn remaining(&self) -> Duration {
        self.deadline
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    }
}

/// The partial-batch driver of the SQS consumers: `process` runs on every record, at most
/// `concurrency` at once, each on its own (a bad record fails alone, never the batch), and
/// each record's message id comes back with its outcome, for the stage to count and to
/// report the failed ones with `batch_response`.
pub async fn each_record<T, F, Fut>(
    records: Vec<SqsMessage>,
    concurrency: usize,
    process: F,
) -> Vec<(String, T)>
where
    F: Fn(SqsMessage) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    use futures::stream::{self, StreamExt};
    stream::iter(records)
        .map(|record| {
            let id = record.message_id.clone().unwrap_or_default();
            let outcome = process(record);
            async move { (id, outcome.await) }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}

/// Builds the partial batch response from the ids of the records that must come back.
pub fn batch_response(failed: impl IntoIterator<Item = String>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for id in failed {
        let mut item = BatchItemFailure::default();
        item.item_identifier = id;
        response.batch_item_failures.push(item);
    }
    response
}

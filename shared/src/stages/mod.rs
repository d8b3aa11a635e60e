//! The three pipeline stages, and the two functions that handle what comes back (SES
//! events, unsubscribes). Each is a struct built once at init (clients, config) with a
//! `handle` method the binary's `service_fn` calls; tests and the local runner call it too.

pub mod create_emails;
pub mod get_users;
pub mod send_email;
pub mod ses_events;
pub mod unsubscribe;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse};
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

//! What a stage is told about the Lambda invocation it serves.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a stage needs to know about its invocation.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub request_id: String,
    pub deadline: SystemTime,
    /// The ARN this invocation was made through (`None` outside Lambda): GetUsers points a
    /// send slot's one-time schedule at it.
    pub function_arn: Option<String>,
}

impl Invocation {
    pub fn from_context(ctx: &lambda_runtime::Context) -> Self {
        Self {
            request_id: ctx.request_id.clone(),
            deadline: UNIX_EPOCH + Duration::from_millis(ctx.deadline),
            function_arn: Some(ctx.invoked_function_arn.clone()).filter(|a| !a.is_empty()),
        }
    }

    /// For callers outside Lambda (the local runner, tests): a deadline `timeout` from now.
    pub fn with_timeout(request_id: impl Into<String>, timeout: Duration) -> Self {
        Self {
            request_id: request_id.into(),
            deadline: crate::runtime::clock::now() + timeout,
            function_arn: None,
        }
    }

    pub fn remaining(&self) -> Duration {
        self.deadline
            .duration_since(crate::runtime::clock::now())
            .unwrap_or(Duration::ZERO)
    }
}

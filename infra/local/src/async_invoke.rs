//! Lambda's asynchronous invocations, locally: what EventBridge Scheduler and SNS use
//! (`InvocationType: Event`). The caller only hands the event over; Lambda runs the function,
//! and when it fails (an error, a timeout) runs it again up to `MaximumRetryAttempts` times
//! (2 by default: one minute after the first failure, two minutes after the second), then
//! sends the event to the function's on-failure destination, or drops it when it has none.
//! The delays run on the simulator's clock, so a skipped idle stretch skips them too.

use crate::scheduler::SimClock;
use crate::template::AsyncInvokeSpec;
use futures::future::BoxFuture;
use futures::FutureExt;
use mailflow::ports::Clock;
use mailflow::runtime::lock;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Lambda's waits before the first and the second retry.
pub const RETRY_DELAYS_MS: [i64; 2] = [60_000, 120_000];

/// Runs one invocation of the function to its end (its own timeout included).
pub type Invoke = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// What happened to the events handed over, for tests and reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AsyncStats {
    pub events: usize,
    pub attempts: usize,
    pub failed_attempts: usize,
    pub succeeded: usize,
    /// Events sent to the on-failure destination after the last retry failed.
    pub to_destination: usize,
    /// Events dropped after the last retry failed (no destination, or it refused them).
    pub dropped: usize,
    /// When each attempt started, on the simulator's clock.
    pub attempts_at_ms: Vec<i64>,
}

struct Retry {
    due_ms: i64,
    attempt: u32,
    event: Value,
}

/// One function's asynchronous invocations.
pub struct AsyncInvoker {
    function: String,
    invoke: Invoke,
    spec: AsyncInvokeSpec,
    /// The on-failure destination queue's URL (the spec names its logical id).
    destination: Option<(aws_sdk_sqs::Client, String)>,
    clock: Arc<SimClock>,
    running: AtomicUsize,
    retries: Mutex<Vec<Retry>>,
    stats: Mutex<AsyncStats>,
}

impl AsyncInvoker {
    pub fn new(
        function: &str,
        invoke: Invoke,
        spec: AsyncInvokeSpec,
        destination: Option<(aws_sdk_sqs::Client, String)>,
        clock: Arc<SimClock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            function: function.to_owned(),
            invoke,
            spec,
            destination,
            clock,
            running: AtomicUsize::new(0),
            retries: Mutex::default(),
            stats: Mutex::default(),
        })
    }

    /// Hands `event` over, as `Invoke` with `InvocationType: Event` does: accepted at once,
    /// run in the background.
    pub fn submit(self: &Arc<Self>, event: Value) {
        lock(&self.stats).events += 1;
        self.spawn(0, event);
    }

    fn spawn(self: &Arc<Self>, attempt: u32, event: Value) {
        self.running.fetch_add(1, Ordering::SeqCst);
        lock(&self.stats).attempts_at_ms.push(self.clock.now_ms());
        let this = self.clone();
        tokio::spawn(async move {
            // A panic is a failed attempt, as on Lambda.
            let outcome = std::panic::AssertUnwindSafe((this.invoke)(event.clone()))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err("the function panicked".to_owned()));
            this.finished(attempt, event, outcome).await;
            this.running.fetch_sub(1, Ordering::SeqCst);
        });
    }

    async fn finished(&self, attempt: u32, event: Value, outcome: Result<(), String>) {
        {
            let mut stats = lock(&self.stats);
            stats.attempts += 1;
            match &outcome {
                Ok(()) => stats.succeeded += 1,
                Err(_) => stats.failed_attempts += 1,
            }
        }
        let Err(error) = outcome else { return };
        if attempt < self.spec.maximum_retry_attempts {
            let delay = RETRY_DELAYS_MS[(attempt as usize).min(RETRY_DELAYS_MS.len() - 1)];
            tracing::warn!(function = %self.function, attempt = attempt + 1, %error, retry_in_ms = delay, "asynchronous invocation failed; Lambda retries it");
            lock(&self.retries).push(Retry {
                due_ms: self.clock.now_ms() + delay,
                attempt: attempt + 1,
                event,
            });
            return;
        }
        let Some((sqs, url)) = &self.destination else {
            tracing::error!(function = %self.function, attempts = attempt + 1, %error, "asynchronous invocation failed on every attempt and the function has no on-failure destination: the event is dropped");
            lock(&self.stats).dropped += 1;
            return;
        };
        // The record Lambda sends an SQS destination: the request, the response, the event.
        let timestamp = jiff::Timestamp::from_millisecond(self.clock.now_ms())
            .map(|t| t.to_string())
            .unwrap_or_default();
        let record = json!({
            "version": "1.0",
            "timestamp": timestamp,
            "requestContext": {
                "requestId": format!("{}-async-{}", self.function, lock(&self.stats).events),
                "functionArn": format!("arn:aws:lambda:local:000000000000:function:{}:$LATEST", self.function),
                "condition": "RetriesExhausted",
                "approximateInvokeCount": attempt + 1,
            },
            "requestPayload": event,
            "responseContext": {
                "statusCode": 200,
                "executedVersion": "$LATEST",
                "functionError": "Unhandled",
            },
            "responsePayload": {"errorMessage": error, "errorType": "Error"},
        });
        let sent = sqs
            .send_message()
            .queue_url(url)
            .message_body(record.to_string())
            .send()
            .await;
        match sent {
            Ok(_) => {
                tracing::warn!(function = %self.function, attempts = attempt + 1, %error, "asynchronous invocation failed on every attempt; the event went to the on-failure destination");
                lock(&self.stats).to_destination += 1;
            }
            Err(err) => {
                tracing::error!(function = %self.function, error = %aws_sdk_sqs::error::DisplayErrorContext(&err), "the on-failure destination refused the event: it is dropped");
                lock(&self.stats).dropped += 1;
            }
        }
    }

    /// Starts the retries that are due on the simulator's clock.
    pub fn run_due(self: &Arc<Self>) {
        let now = self.clock.now_ms();
        let due: Vec<Retry> = {
            let mut retries = lock(&self.retries);
            let (due, waiting) = retries.drain(..).partition(|r| r.due_ms <= now);
            *retries = waiting;
            due
        };
        for retry in due {
            self.spawn(retry.attempt, retry.event);
        }
    }

    /// Whether an invocation is running or a retry is due now.
    pub fn busy(&self) -> bool {
        let now = self.clock.now_ms();
        self.running.load(Ordering::SeqCst) > 0
            || lock(&self.retries).iter().any(|r| r.due_ms <= now)
    }

    /// Invocations running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// When the next waiting retry is due (simulator time).
    pub fn next_retry_ms(&self) -> Option<i64> {
        lock(&self.retries).iter().map(|r| r.due_ms).min()
    }

    pub fn stats(&self) -> AsyncStats {
        lock(&self.stats).clone()
    }
}

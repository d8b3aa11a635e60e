//! Lambda's event source mappings over the lab's queues: one poller per execution
//! environment, receiving, invoking and settling, and the scaling that lets the
//! environments in (`Ramp`).

use crate::rate::queue::LabQueue;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Lambda's scaling of an SQS event source mapping: five concurrent batches at first, then
/// up to 300 more a minute, never above MaximumConcurrency. A mapping that sat idle starts
/// again at five (`restart`: a local-time slot hours after the last).
#[derive(Clone)]
pub(crate) struct Ramp {
    started: Arc<std::sync::Mutex<Instant>>,
    ramp: bool,
}

impl Ramp {
    /// Scaling from `started` (`ramp`), or every environment at once.
    pub(crate) fn new(started: Instant, ramp: bool) -> Self {
        Self {
            started: Arc::new(std::sync::Mutex::new(started)),
            ramp,
        }
    }

    fn allows(&self, environment: u32) -> bool {
        let started = *mailflow::runtime::lock(&self.started);
        let more = (started.elapsed().as_secs_f64() * 5.0).floor() as u32;
        !self.ramp || environment < 5 + more
    }

    /// The mapping scales from five again, from now.
    pub(crate) fn restart(&self) {
        *mailflow::runtime::lock(&self.started) = Instant::now();
    }
}

/// How long an event source mapping's receive waits for a message (SQS's longest,
/// `WaitTimeSeconds` 20, as Lambda's pollers use).
const LONG_POLL: Duration = Duration::from_secs(20);

/// One environment's poller: receives a batch, invokes, settles (partial batch response),
/// until `done`.
pub(crate) fn poll<F, Fut>(
    queue: Arc<LabQueue>,
    batch: usize,
    environment: u32,
    ramp: Ramp,
    latency: (Duration, Duration),
    done: Arc<AtomicBool>,
    invoke: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(SqsEvent) -> Fut + Send + 'static,
    Fut: Future<Output = Vec<String>> + Send,
{
    tokio::spawn(async move {
        while !done.load(Ordering::Relaxed) {
            if !ramp.allows(environment) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            // The poller's ReceiveMessage round trip, after which the mapping may have
            // scaled down (`Ramp::restart`) meanwhile.
            tokio::time::sleep(latency.0).await;
            if !ramp.allows(environment) {
                continue;
            }
            let changed = queue.changes().notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // Past the in-flight quota a long poll gets nothing (a short one, OverLimit).
            let event = queue.receive(batch).unwrap_or_default();
            if event.records.is_empty() {
                // A long poll: it answers as soon as there is something to receive.
                queue.wait_for_change(changed, LONG_POLL).await;
                continue;
            }
            let failed = invoke(event.clone()).await;
            queue.settle(&event, &failed);
        }
    })
}

/// The records a partial batch response hands back for a retry.
pub(crate) fn failures(response: &SqsBatchResponse) -> Vec<String> {
    (response.batch_item_failures.iter())
        .map(|f| f.item_identifier.clone())
        .collect()
}

//! Runs SQS consumers the way Lambda's event source mapping does, against the local queues:
//! long polls, batches of up to BatchSize gathered for up to
//! MaximumBatchingWindowInSeconds, at most MaximumConcurrency invocations at once, partial batch
//! responses honoured when the invocation succeeded (only successes are deleted; failures
//! reappear after their visibility timeout and reach the DLQ after maxReceiveCount), the whole
//! batch returned when it failed, timed out or crashed, and each invocation ended at its
//! function Timeout with a real deadline passed in. Handlers run in-process (see docs/local-stack.md).
//! Each poller honours its event source mapping's State (a pause disables it).
//! A consumer may carry `Faults` (the chaos run): second deliveries and invocations that
//! die at chosen points, as Lambda and SQS do it in production.
//! Over 400 lines on purpose: one event source mapping (polling, batching, invoking,
//! deleting, faults) is one piece of behaviour.

use crate::queues::depth;
use anyhow::{bail, Result};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use aws_sdk_sqs::Client;
use futures::future::BoxFuture;
use futures::FutureExt;
use mailflow::runtime::Invocation;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What an invocation ended with: its partial batch response, or the function's error (on
/// Lambda an unhandled error or panic), in which case the whole batch comes back.
pub type Outcome = Result<SqsBatchResponse, String>;

pub type Handler = Arc<dyn Fn(SqsEvent, Invocation) -> BoxFuture<'static, Outcome> + Send + Sync>;

pub struct Consumer {
    pub function: String,
    pub queue_url: String,
    pub queue_arn: String,
    pub batch_size: u32,
    /// MaximumBatchingWindowInSeconds: receives continue until the batch is full or this
    /// much time has passed since the first record arrived.
    pub batching_window: Duration,
    /// ReceiveMessage's WaitTimeSeconds.
    pub long_poll: Duration,
    pub concurrency: u32,
    pub timeout: Duration,
    /// One handler per execution environment (up to `concurrency`), so per-environment
    /// state such as SendEmail's rate pacer behaves as on Lambda.
    pub handlers: Vec<Handler>,
    /// Faults to inject (None: a faithful event source mapping).
    pub faults: Option<Arc<dyn Faults>>,
    /// The event source mapping registered on the local stack, whose State this poller
    /// honours: while it is disabled (`mailctl pause`), nothing is received or delivered.
    pub mapping: Option<Arc<crate::event_sources::MappingState>>,
}

/// Where an invocation dies when a fault injector kills it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kill {
    /// Before the handler runs: nothing of the batch is done.
    BeforeStart,
    /// This long into the handler, at whatever point it has reached.
    After(Duration),
    /// After the handler returned, before the event source mapping deletes the batch.
    BeforeDelete,
}

/// Faults injected into an event source mapping (the chaos run).
pub trait Faults: Send + Sync {
    /// Whether a newly received message is also handed to a second invocation, and after
    /// how long (an at-least-once delivery: same message id, same body; with no delay, at
    /// the same time as the first).
    fn deliver_twice(&self, function: &str) -> Option<Duration>;
    /// Whether, and where, this invocation dies.
    fn kill(&self, function: &str) -> Option<Kill>;
    /// Told after each invocation whether its handler ran to the end (false: killed or timed
    /// out part-way, so whatever it was doing was left half done).
    fn ended(&self, _request_id: &str, _finished: bool) {}
}

/// The invocation a handler's code runs in.
struct Scope {
    request_id: String,
    kill_switch: tokio::sync::Notify,
}

tokio::task_local! {
    static INVOCATION: Arc<Scope>;
}

/// The request id of the invocation the caller runs in (None outside the runner).
pub fn current_request_id() -> Option<String> {
    INVOCATION.try_with(|s| s.request_id.clone()).ok()
}

/// Ends the current invocation at once, as a crash of its execution environment would: the
/// runner drops it where it stands, deletes nothing, and its messages return after their
/// visibility timeout. For fault injectors inside a handler; outside the runner it never
/// returns either.
pub async fn crash() -> ! {
    let _ = INVOCATION.try_with(|s| s.kill_switch.notify_one());
    futures::future::pending().await
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerStats {
    pub invocations: usize,
    pub records: usize,
    pub failures_reported: usize,
    /// Invocations that ended with an error: their whole batch came back.
    pub errors: usize,
    pub timeouts: usize,
    /// Invocations a fault injector killed.
    pub crashes: usize,
    /// Messages handed to a second invocation by a fault injector.
    pub second_deliveries: usize,
    /// The event source mapping's own SQS requests (billed to the account on AWS too):
    /// ReceiveMessage calls (empty ones included), their 64 KiB billing chunks, and
    /// DeleteMessageBatch calls.
    pub receive_requests: usize,
    /// Times the poller found its event source mapping disabled and received nothing.
    pub disabled_polls: usize,
    pub receive_chunks: u64,
    pub delete_requests: usize,
}

impl ConsumerStats {
    /// Adds another round's counts (a drain that ran several rounds).
    pub fn add(&mut self, other: &ConsumerStats) {
        self.invocations += other.invocations;
        self.records += other.records;
        self.failures_reported += other.failures_reported;
        self.errors += other.errors;
        self.timeouts += other.timeouts;
        self.crashes += other.crashes;
        self.second_deliveries += other.second_deliveries;
        self.receive_requests += other.receive_requests;
        self.disabled_polls += other.disabled_polls;
        self.receive_chunks += other.receive_chunks;
        self.delete_requests += other.delete_requests;
    }
}

/// Wraps an async handler into the runner's handler type.
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(SqsEvent, Invocation) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Outcome> + Send + 'static,
{
    Arc::new(move |event, invocation| Box::pin(f(event, invocation)))
}

fn to_lambda_record(message: aws_sdk_sqs::types::Message, arn: &str) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id;
    record.receipt_handle = message.receipt_handle;
    record.md5_of_body = message.md5_of_body;
    record.body = message.body;
    record.attributes = message
        .attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.as_str().to_owned(), v))
        .collect();
    record.event_source = Some("aws:sqs".into());
    record.event_source_arn = Some(arn.to_owned());
    record
}

/// Lambda's pollers long-poll for 20 s (`mailctl bench` does too). A poll is never abandoned
/// (the server would still hand it messages, lost until their visibility timeout), so a run
/// waits for its pending polls when it ends; tests and the demo poll for 5 s to end sooner.
pub const LAMBDA_LONG_POLL: Duration = Duration::from_secs(20);
pub const QUICK_LONG_POLL: Duration = Duration::from_secs(5);

struct Shared {
    /// Tells this run's request ids from an earlier run's in the same process.
    run: usize,
    stop: AtomicBool,
    in_flight: AtomicUsize,
    /// Second deliveries waiting for an invocation, by function, each with when it is due.
    redeliveries: Mutex<BTreeMap<String, Vec<(Instant, aws_sdk_sqs::types::Message)>>>,
    invocations: AtomicUsize,
    stats: Mutex<BTreeMap<String, ConsumerStats>>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn redeliveries(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<(Instant, aws_sdk_sqs::types::Message)>>>
    {
        mailflow::runtime::lock(&self.redeliveries)
    }

    fn stats(&self, function: &str, update: impl FnOnce(&mut ConsumerStats)) {
        let mut stats = mailflow::runtime::lock(&self.stats);
        update(stats.entry(function.to_owned()).or_default());
    }
}

/// One ReceiveMessage, counted.
async fn receive(
    sqs: &Client,
    consumer: &Consumer,
    shared: &Shared,
    max: usize,
    wait_seconds: i32,
) -> Vec<aws_sdk_sqs::types::Message> {
    let request = sqs
        .receive_message()
        .queue_url(&consumer.queue_url)
        .max_number_of_messages(max.clamp(1, 10) as i32)
        .wait_time_seconds(wait_seconds)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await;
    match request {
        Ok(out) => {
            let messages = out.messages.unwrap_or_default();
            let bytes: usize = messages.iter().map(|m| m.body().unwrap_or("").len()).sum();
            shared.stats(&consumer.function, |s| {
                s.receive_requests += 1;
                s.receive_chunks += (bytes as u64)
                    .div_ceil(mailflow::runtime::metering::SQS_BILLING_CHUNK)
                    .max(1);
            });
            messages
        }
        Err(err) => {
            tracing::warn!(queue = %consumer.queue_url, error = %aws_sdk_sqs::error::DisplayErrorContext(&err), "receive failed");
            tokio::time::sleep(Duration::from_millis(500)).await;
            Vec::new()
        }
    }
}

/// Makes received messages visible again at once.
async fn release(sqs: &Client, queue_url: &str, messages: &[aws_sdk_sqs::types::Message]) {
    for (i, message) in messages.iter().enumerate() {
        let Some(receipt) = message.receipt_handle() else {
            continue;
        };
        if let Err(err) = sqs
            .change_message_visibility()
            .queue_url(queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(0)
            .send()
            .await
        {
            tracing::warn!(message = i, error = %aws_sdk_sqs::error::DisplayErrorContext(&err), "could not hand a message back; it returns after its visibility timeout");
        }
    }
}

/// A batch for one invocation: second deliveries that are due first, else a long poll and
/// the batching window.
async fn next_batch(
    sqs: &Client,
    consumer: &Consumer,
    shared: &Shared,
    batch_size: usize,
) -> Vec<aws_sdk_sqs::types::Message> {
    {
        let mut waiting = shared.redeliveries();
        if let Some(queue) = waiting.get_mut(&consumer.function) {
            let now = Instant::now();
            let mut due = Vec::new();
            queue.retain(|(at, message)| {
                let take = *at <= now && due.len() < batch_size;
                if take {
                    due.push(message.clone());
                }
                !take
            });
            if !due.is_empty() {
                return due;
            }
        }
    }
    let mut messages = receive(
        sqs,
        consumer,
        shared,
        batch_size,
        consumer.long_poll.as_secs() as i32,
    )
    .await;
    if messages.is_empty() || shared.stopping() {
        return messages;
    }
    let window_ends = Instant::now() + consumer.batching_window;
    while messages.len() < batch_size && !shared.stopping() {
        let left = window_ends.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let wait = left.as_secs_f64().ceil() as i32;
        let more = receive(sqs, consumer, shared, batch_size - messages.len(), wait).await;
        messages.extend(more);
    }
    if let Some(faults) = &consumer.faults {
        let twice: Vec<_> = messages
            .iter()
            .filter_map(|m| {
                let after = faults.deliver_twice(&consumer.function)?;
                Some((Instant::now() + after, m.clone()))
            })
            .collect();
        if !twice.is_empty() {
            shared.stats(&consumer.function, |s| s.second_deliveries += twice.len());
            shared
                .redeliveries()
                .entry(consumer.function.clone())
                .or_default()
                .extend(twice);
        }
    }
    messages
}

/// How an invocation ended, as the event source mapping sees it.
enum Ended {
    Returned(SqsBatchResponse),
    /// The function failed: Lambda ignores any partial response and returns the whole batch.
    Failed(String),
    TimedOut,
    /// Killed by a fault injector; `finished` if the handler had returned (before the delete).
    Crashed {
        finished: bool,
    },
}

/// Runs the handler as Lambda would, with the consumer's faults applied.
async fn invoke(
    consumer: &Consumer,
    handler: &Handler,
    event: SqsEvent,
    request_id: String,
) -> Ended {
    let faults = consumer.faults.as_ref();
    let kill = faults.and_then(|f| f.kill(&consumer.function));
    let limit = match kill {
        Some(Kill::After(after)) => after.min(consumer.timeout),
        _ => consumer.timeout,
    };
    let ended = if kill == Some(Kill::BeforeStart) {
        Ended::Crashed { finished: false }
    } else {
        let invocation = Invocation::with_timeout(request_id.clone(), consumer.timeout);
        let scope = Arc::new(Scope {
            request_id: request_id.clone(),
            kill_switch: tokio::sync::Notify::new(),
        });
        // A panic fails the invocation, as on Lambda (the runtime reports it as an error).
        let run = INVOCATION.scope(scope.clone(), handler(event, invocation));
        let run = async {
            match std::panic::AssertUnwindSafe(run).catch_unwind().await {
                Ok(outcome) => outcome,
                Err(_) => Err("the handler panicked".to_owned()),
            }
        };
        // Lambda ends the invocation at its Timeout: the future is dropped, nothing is deleted.
        tokio::select! {
            outcome = tokio::time::timeout(limit, run) => match (outcome, kill) {
                (Ok(_), Some(Kill::BeforeDelete)) => Ended::Crashed { finished: true },
                (Ok(Ok(response)), _) => Ended::Returned(response),
                (Ok(Err(error)), _) => Ended::Failed(error),
                (Err(_), Some(Kill::After(_))) => Ended::Crashed { finished: false },
                (Err(_), _) => Ended::TimedOut,
            },
            _ = scope.kill_switch.notified() => Ended::Crashed { finished: false },
        }
    };
    if let Some(faults) = faults {
        let finished = matches!(
            ended,
            Ended::Returned(_) | Ended::Failed(_) | Ended::Crashed { finished: true }
        );
        faults.ended(&request_id, finished);
    }
    ended
}

async fn worker(sqs: Client, consumer: Arc<Consumer>, environment: usize, shared: Arc<Shared>) {
    let handler = consumer.handlers[environment % consumer.handlers.len()].clone();
    let batch_size = consumer.batch_size.clamp(1, 10) as usize;
    while !shared.stopping() {
        if let Some(mapping) = &consumer.mapping {
            if !mapping.enabled().await {
                shared.stats(&consumer.function, |s| s.disabled_polls += 1);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        }
        let messages = next_batch(&sqs, &consumer, &shared, batch_size).await;
        if shared.stopping() {
            // Received as the run ended (by a poll that began before): hand them back.
            release(&sqs, &consumer.queue_url, &messages).await;
            break;
        }
        if messages.is_empty() {
            continue;
        }
        shared.in_flight.fetch_add(messages.len(), Ordering::SeqCst);
        let n = messages.len();
        let mut event = SqsEvent::default();
        event.records = messages
            .into_iter()
            .map(|m| to_lambda_record(m, &consumer.queue_arn))
            .collect();
        let receipts: Vec<(String, String)> = event
            .records
            .iter()
            .filter_map(|r| Some((r.message_id.clone()?, r.receipt_handle.clone()?)))
            .collect();
        let seq = shared.invocations.fetch_add(1, Ordering::SeqCst);
        let request_id = format!("{}-{}-{seq}", consumer.function, shared.run);
        let ended = invoke(&consumer, &handler, event, request_id).await;
        let all = || receipts.iter().map(|(id, _)| id.clone()).collect();
        let failed: HashSet<String> = match &ended {
            // An empty identifier or one not in the batch makes the whole batch a failure.
            Ended::Returned(response)
                if response
                    .batch_item_failures
                    .iter()
                    .any(|f| !receipts.iter().any(|(id, _)| *id == f.item_identifier)) =>
            {
                tracing::warn!(function = %consumer.function, "the partial batch response names a record not in the batch; the whole batch returns");
                all()
            }
            Ended::Returned(response) => response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect(),
            Ended::Failed(error) => {
                tracing::warn!(function = %consumer.function, %error, records = n, "invocation failed; its whole batch returns after the visibility timeout");
                all()
            }
            Ended::TimedOut | Ended::Crashed { .. } => all(),
        };
        let done: Vec<_> = receipts
            .iter()
            .filter(|(id, _)| !failed.contains(id))
            .collect();
        let deletes = done.len().div_ceil(10);
        for chunk in done.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, (_, receipt))| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(receipt)
                        .build()
                        .ok()
                })
                .collect();
            if let Err(err) = sqs
                .delete_message_batch()
                .queue_url(&consumer.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&err), "delete failed; messages will be redelivered");
            }
        }
        shared.stats(&consumer.function, |s| {
            s.invocations += 1;
            s.records += n;
            if matches!(ended, Ended::Returned(_)) {
                s.failures_reported += failed.len();
            }
            s.errors += usize::from(matches!(ended, Ended::Failed(_)));
            s.timeouts += usize::from(matches!(ended, Ended::TimedOut));
            s.crashes += usize::from(matches!(ended, Ended::Crashed { .. }));
            s.delete_requests += deletes;
        });
        shared.in_flight.fetch_sub(n, Ordering::SeqCst);
    }
}

/// Runs the consumers until every queue is empty and nothing is in flight (checked three
/// times in a row), or fails after `max_wait`.
pub async fn run_until_drained(
    sqs: &Client,
    consumers: Vec<Consumer>,
    max_wait: Duration,
) -> Result<BTreeMap<String, ConsumerStats>> {
    run_until_drained_while(sqs, consumers, max_wait, || false).await
}

/// As `run_until_drained`, but never drained while `producing()` says more is coming (a
/// GetUsers invocation still enqueueing, for instance).
pub async fn run_until_drained_while(
    sqs: &Client,
    consumers: Vec<Consumer>,
    max_wait: Duration,
    producing: impl Fn() -> bool,
) -> Result<BTreeMap<String, ConsumerStats>> {
    run_until_drained_then(sqs, consumers, max_wait, producing, || {
        Box::pin(async { Ok(Quiet::Done) })
    })
    .await
}

/// What a run does once its queues are quiet (`run_until_drained_then`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiet {
    /// Nothing more is coming: the run ends.
    Done,
    /// Something new was started (the simulator's clock moved to the next schedule): the
    /// consumers go on, `max_wait` counted afresh.
    Advanced,
    /// Something still runs: look again, within the same `max_wait`.
    Waiting,
}

/// As `run_until_drained_while`, and when everything is quiet asks `on_quiet` what comes
/// next, rather than stopping the consumers and starting them again.
pub async fn run_until_drained_then<'a>(
    sqs: &Client,
    consumers: Vec<Consumer>,
    max_wait: Duration,
    producing: impl Fn() -> bool,
    on_quiet: impl Fn() -> BoxFuture<'a, Result<Quiet>>,
) -> Result<BTreeMap<String, ConsumerStats>> {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let shared = Arc::new(Shared {
        run: RUNS.fetch_add(1, Ordering::SeqCst),
        stop: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        redeliveries: Mutex::default(),
        invocations: AtomicUsize::new(0),
        stats: Mutex::new(BTreeMap::new()),
    });
    let urls: Vec<String> = consumers.iter().map(|c| c.queue_url.clone()).collect();
    let mut tasks = Vec::new();
    for consumer in consumers {
        let consumer = Arc::new(consumer);
        if consumer.handlers.is_empty() {
            bail!("{}: no handler", consumer.function);
        }
        for environment in 0..consumer.concurrency.max(1) as usize {
            tasks.push(tokio::spawn(worker(
                sqs.clone(),
                consumer.clone(),
                environment,
                shared.clone(),
            )));
        }
    }
    let mut started = Instant::now();
    let mut quiet = 0;
    let result = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut busy = shared.in_flight.load(Ordering::SeqCst) > 0
            || shared.redeliveries().values().any(|q| !q.is_empty())
            || producing();
        // Queue depths only when they can decide (each is a scan of the queue on the emulator).
        let timed_out = started.elapsed() > max_wait;
        let check = !busy || timed_out;
        let mut depths = Vec::new();
        for url in urls.iter().filter(|_| check) {
            match depth(sqs, url).await {
                Ok((visible, invisible)) => {
                    busy |= visible + invisible > 0;
                    depths.push(format!("{url}: {visible} visible, {invisible} in flight"));
                }
                // SQS unreachable for a moment (the chaos run makes it so): not drained.
                Err(err) => {
                    busy = true;
                    depths.push(format!("{url}: depth unknown ({err:#})"));
                }
            }
        }
        quiet = if busy { 0 } else { quiet + 1 };
        if quiet >= 3 {
            match on_quiet().await {
                Ok(Quiet::Done) => break Ok(()),
                Ok(Quiet::Advanced) => {
                    quiet = 0;
                    started = Instant::now();
                    continue;
                }
                Ok(Quiet::Waiting) => quiet = 0,
                // Not decided (the scheduler unreachable for a moment): look again.
                Err(err) => {
                    tracing::warn!(reason = %format!("{err:#}"), "could not tell whether anything is due; looking again");
                    quiet = 0;
                }
            }
        }
        if timed_out {
            break Err(depths.join("; "));
        }
    };
    shared.stop.store(true, Ordering::SeqCst);
    for task in tasks {
        let _ = task.await;
    }
    let stats = mailflow::runtime::lock(&shared.stats).clone();
    match result {
        Ok(()) => Ok(stats),
        Err(depths) => bail!("the campaign did not drain within {max_wait:?}: {depths}"),
    }
}

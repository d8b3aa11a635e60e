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
//! Where batches come from is `batches`; one execution environment invoking and deleting
//! is `worker`; this module holds the consumer, its faults and the run that drains.

mod batches;
mod worker;

use crate::queues::depth;
use anyhow::{bail, Result};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::Client;
use futures::future::BoxFuture;
use mailflow::runtime::Invocation;
use std::collections::BTreeMap;
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
    let tasks = start_workers(sqs, consumers, &shared)?;
    let mut started = Instant::now();
    let mut quiet = 0;
    let result = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut busy = shared.in_flight.load(Ordering::SeqCst) > 0
            || shared.redeliveries().values().any(|q| !q.is_empty())
            || producing();
        // Queue depths only when they can decide (each is a scan of the queue on the emulator).
        let timed_out = started.elapsed() > max_wait;
        let mut depths = Vec::new();
        if !busy || timed_out {
            let (queued, described) = queue_depths(sqs, &urls).await;
            busy |= queued;
            depths = described;
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

/// One worker per execution environment of each consumer (its MaximumConcurrency).
fn start_workers(
    sqs: &Client,
    consumers: Vec<Consumer>,
    shared: &Arc<Shared>,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for consumer in consumers {
        let consumer = Arc::new(consumer);
        if consumer.handlers.is_empty() {
            bail!("{}: no handler", consumer.function);
        }
        for environment in 0..consumer.concurrency.max(1) as usize {
            tasks.push(tokio::spawn(worker::worker(
                sqs.clone(),
                consumer.clone(),
                environment,
                shared.clone(),
            )));
        }
    }
    Ok(tasks)
}

/// Whether any of the queues at `urls` holds a message (visible or in flight; one whose
/// depth cannot be read counts as not empty), and each queue's depth described.
async fn queue_depths(sqs: &Client, urls: &[String]) -> (bool, Vec<String>) {
    let mut queued = false;
    let mut depths = Vec::new();
    for url in urls {
        match depth(sqs, url).await {
            Ok((visible, invisible)) => {
                queued |= visible + invisible > 0;
                depths.push(format!("{url}: {visible} visible, {invisible} in flight"));
            }
            // SQS unreachable for a moment (the chaos run makes it so): not drained.
            Err(err) => {
                queued = true;
                depths.push(format!("{url}: depth unknown ({err:#})"));
            }
        }
    }
    (queued, depths)
}

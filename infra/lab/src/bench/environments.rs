//! The function binaries as the bench runs them: each stage's execution environments as
//! processes on the Runtime API, invoked by their event source mapping, measured when they end.

use anyhow::{bail, Context, Result};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use mailflow_local::function_host::{CpuTime, FunctionProcess, Logs, Outcome};
use mailflow_local::runner::{self, Consumer};
use mailflow_local::stack::Stack;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One execution environment's process, measured when it ends.
#[derive(Debug, Default)]
pub(super) struct Measured {
    pub(super) cpu: CpuTime,
    /// Of `cpu`, what the process used before its first invocation (init).
    pub(super) init_cpu: CpuTime,
    pub(super) peak_rss: u64,
    pub(super) cold_start: Option<Duration>,
    pub(super) logs: Logs,
}

pub(super) async fn measure(process: FunctionProcess) -> Measured {
    let cpu = process.cpu_time();
    // A process already gone (replaced after a timeout or a crash) counts for neither.
    let init_cpu = cpu.and(process.init_cpu_time()).unwrap_or_default();
    let cpu = cpu.unwrap_or_default();
    let peak_rss = process.peak_rss().unwrap_or_default();
    let cold_start = process.cold_start();
    Measured {
        cpu,
        init_cpu,
        peak_rss,
        cold_start,
        logs: process.finish().await,
    }
}

/// The execution environments of one function: a process each, replaced (and a new cold
/// start paid) when an invocation times out or the process dies, as on Lambda.
pub(super) struct Environments {
    pub(super) function: &'static str,
    pub(super) binary: PathBuf,
    pub(super) env: BTreeMap<String, String>,
    pub(super) timeout: Duration,
    pub(super) memory_mb: u32,
    pub(super) slots: Vec<tokio::sync::Mutex<Option<FunctionProcess>>>,
    pub(super) ended: Mutex<Vec<Measured>>,
    pub(super) invocations: AtomicU64,
    pub(super) billed_ms: AtomicU64,
    pub(super) last_answer: Mutex<Option<Instant>>,
}

impl Environments {
    pub(super) async fn start(
        stack: &Stack,
        bin_dir: &Path,
        function: &'static str,
        count: usize,
    ) -> Result<Arc<Self>> {
        let spec = stack.template.function(function)?;
        let name = spec.binary.clone().with_context(|| {
            format!("{function} has no BuildProperties.Binary in template.yaml")
        })?;
        let environments = Arc::new(Self {
            function,
            binary: bin_dir.join(&name),
            env: stack.env(function)?,
            timeout: Duration::from_secs(spec.timeout.into()),
            memory_mb: spec.memory_size,
            slots: (0..count).map(|_| tokio::sync::Mutex::new(None)).collect(),
            ended: Mutex::default(),
            invocations: AtomicU64::new(0),
            billed_ms: AtomicU64::new(0),
            last_answer: Mutex::default(),
        });
        if !environments.binary.is_file() {
            bail!(
                "{} does not exist: build the functions first (cargo build --release -p get-users -p create-emails -p send-email)",
                environments.binary.display()
            );
        }
        for slot in &environments.slots {
            *slot.lock().await = Some(environments.spawn().await?);
        }
        Ok(environments)
    }

    pub(super) async fn spawn(&self) -> Result<FunctionProcess> {
        FunctionProcess::spawn(
            self.function,
            &self.binary,
            &self.env,
            self.timeout,
            self.memory_mb,
        )
        .await
    }

    /// One invocation in environment `slot`; the process is replaced if it did not answer.
    pub(super) async fn invoke(&self, slot: usize, event: Value) -> Outcome {
        let mut guard = self.slots[slot % self.slots.len()].lock().await;
        let Some(process) = guard.as_ref() else {
            return Outcome::Exited;
        };
        let started = Instant::now();
        let outcome = process.invoke(event).await;
        // Lambda bills each invocation rounded up to the millisecond.
        let billed = started.elapsed().as_micros().div_ceil(1000) as u64;
        self.billed_ms.fetch_add(billed, Ordering::Relaxed);
        self.invocations.fetch_add(1, Ordering::Relaxed);
        *mailflow::runtime::lock(&self.last_answer) = Some(Instant::now());
        if matches!(outcome, Outcome::TimedOut | Outcome::Exited) {
            if let Some(old) = guard.take() {
                let measured = measure(old).await;
                mailflow::runtime::lock(&self.ended).push(measured);
            }
            match self.spawn().await {
                Ok(fresh) => *guard = Some(fresh),
                Err(err) => tracing::error!(error = %err, "cannot restart {}", self.function),
            }
        }
        outcome
    }

    pub(super) fn handlers(self: &Arc<Self>) -> Vec<runner::Handler> {
        (0..self.slots.len())
            .map(|slot| {
                let environments = self.clone();
                runner::handler(move |event: SqsEvent, _invocation| {
                    let environments = environments.clone();
                    async move {
                        let ids: Vec<String> = event
                            .records
                            .iter()
                            .filter_map(|r| r.message_id.clone())
                            .collect();
                        let payload = serde_json::to_value(&event).unwrap_or_default();
                        match environments.invoke(slot, payload).await {
                            Outcome::Response(v) => {
                                Ok(serde_json::from_value(v).unwrap_or_default())
                            }
                            // A failed invocation returns its whole batch.
                            _ => {
                                let mut response = SqsBatchResponse::default();
                                response.batch_item_failures = ids
                                    .into_iter()
                                    .map(|id| {
                                        let mut failure = BatchItemFailure::default();
                                        failure.item_identifier = id;
                                        failure
                                    })
                                    .collect();
                                Ok(response)
                            }
                        }
                    }
                })
            })
            .collect()
    }

    /// Stops every process and adds up what they used.
    pub(super) async fn finish(&self) -> Vec<Measured> {
        let mut all = std::mem::take(&mut *mailflow::runtime::lock(&self.ended));
        for slot in &self.slots {
            if let Some(process) = slot.lock().await.take() {
                all.push(measure(process).await);
            }
        }
        all
    }
}

/// The event source mapping of template.yaml, each worker invoking its own environment.
pub(super) fn consumer(
    stack: &Stack,
    function: &str,
    handlers: Vec<runner::Handler>,
) -> Result<Consumer> {
    let timeout = Duration::from_secs(stack.template.function(function)?.timeout.into());
    let mut consumer = mailflow_local::pipeline::consumer(stack, function, handlers, timeout)?;
    consumer.concurrency = consumer.handlers.len() as u32;
    // Polled as Lambda does, so that empty receives are counted as they would be billed.
    consumer.long_poll = runner::LAMBDA_LONG_POLL;
    Ok(consumer)
}

pub(super) fn concurrency(stack: &Stack, function: &str) -> Result<usize> {
    Ok(mailflow_local::pipeline::concurrency(stack, function)? as usize)
}

//! One execution environment of an event source mapping: the handler invoked as Lambda
//! invokes it (its Timeout, a panic an error, the consumer's faults applied), then the
//! records that did not fail deleted and the invocation counted.

use super::batches::{next_batch, release, to_lambda_record};
use super::{Consumer, Handler, Kill, Scope, Shared, INVOCATION};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use aws_sdk_sqs::Client;
use futures::FutureExt;
use mailflow::runtime::Invocation;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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

/// One execution environment of `consumer`'s event source mapping: polls while the mapping
/// is enabled and invokes its handler on each batch until the run stops.
pub(super) async fn worker(
    sqs: Client,
    consumer: Arc<Consumer>,
    environment: usize,
    shared: Arc<Shared>,
) {
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
        let n = messages.len();
        shared.in_flight.fetch_add(n, Ordering::SeqCst);
        invoke_batch(&sqs, &consumer, &handler, &shared, messages).await;
        shared.in_flight.fetch_sub(n, Ordering::SeqCst);
    }
}

/// One invocation with `messages`: the handler run, then the records that did not fail
/// deleted, and the invocation counted.
async fn invoke_batch(
    sqs: &Client,
    consumer: &Consumer,
    handler: &Handler,
    shared: &Shared,
    messages: Vec<aws_sdk_sqs::types::Message>,
) {
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
    let ended = invoke(consumer, handler, event, request_id).await;
    let failed = failed_records(consumer, &ended, &receipts, n);
    let done: Vec<_> = receipts
        .iter()
        .filter(|(id, _)| !failed.contains(id))
        .collect();
    let deletes = done.len().div_ceil(10);
    delete(sqs, &consumer.queue_url, &done).await;
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
}

/// The message ids of the batch (`receipts`, of `records` messages) that come back: those
/// the partial batch response names, or all of them when the invocation did not return or
/// its response names a record not in the batch.
fn failed_records(
    consumer: &Consumer,
    ended: &Ended,
    receipts: &[(String, String)],
    records: usize,
) -> HashSet<String> {
    let all = || receipts.iter().map(|(id, _)| id.clone()).collect();
    match ended {
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
            tracing::warn!(function = %consumer.function, %error, records, "invocation failed; its whole batch returns after the visibility timeout");
            all()
        }
        Ended::TimedOut | Ended::Crashed { .. } => all(),
    }
}

/// Deletes the records that are done (message id, receipt handle), ten to a request.
async fn delete(sqs: &Client, queue_url: &str, done: &[&(String, String)]) {
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
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&err), "delete failed; messages will be redelivered");
        }
    }
}

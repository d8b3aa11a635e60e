//! SQS helpers that work the same on AWS and on the local emulator: a queue's depth, and
//! moving a DLQ's messages back to their queue (StartMessageMoveTask where the service has
//! it, receive / send / delete where it does not).

use anyhow::{bail, Context, Result};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use aws_sdk_sqs::Client;
use std::time::Duration;

/// A queue's depth: the shared adapter's reading.
pub use mailflow::adapters::sqs::queue_depth as depth;

/// Moves every message of `dlq` back to `source`. Uses StartMessageMoveTask where the service
/// supports it; otherwise see `redrive_inspecting`.
pub async fn redrive(sqs: &Client, dlq: &str, source: &str) -> Result<u64> {
    if let Some(moved) = move_task(sqs, dlq, source).await? {
        return Ok(moved);
    }
    redrive_inspecting(sqs, dlq, source, |_| {}).await
}

/// Moves every message of `dlq` back to `source`, showing each body to `inspect` first:
/// receives, sends to the source, and only then deletes from the DLQ, so a crash midway can
/// duplicate a message (harmless downstream) but never lose one.
pub async fn redrive_inspecting(
    sqs: &Client,
    dlq: &str,
    source: &str,
    mut inspect: impl FnMut(&str),
) -> Result<u64> {
    let mut moved = 0;
    loop {
        let out = sqs
            .receive_message()
            .queue_url(dlq)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .with_context(|| format!("receiving from {dlq}"))?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok(moved);
        }
        for message in messages {
            let body = message.body.clone().unwrap_or_default();
            inspect(&body);
            sqs.send_message()
                .queue_url(source)
                .message_body(body)
                .send()
                .await
                .with_context(|| {
                    format!("sending back to {source} (the message stays in the DLQ)")
                })?;
            if let Some(receipt) = message.receipt_handle() {
                sqs.delete_message()
                    .queue_url(dlq)
                    .receipt_handle(receipt)
                    .send()
                    .await
                    .with_context(|| format!("deleting from {dlq} after it was re-sent"))?;
            }
            moved += 1;
        }
    }
}

/// The service's own redrive, waited for; None when the service does not offer it.
async fn move_task(sqs: &Client, dlq: &str, source: &str) -> Result<Option<u64>> {
    let arn = |url: &str| {
        let url = url.to_owned();
        async move {
            sqs.get_queue_attributes()
                .queue_url(&url)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .send()
                .await?
                .attributes
                .and_then(|mut a| a.remove(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
                .with_context(|| format!("no ARN for {url}"))
        }
    };
    let (dlq_arn, source_arn) = (arn(dlq).await?, arn(source).await?);
    let started = sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn(&source_arn)
        .send()
        .await;
    if let Err(err) = started {
        // Emulators without the API answer 500/unknown operation: fall back.
        tracing::info!(error = %aws_sdk_sqs::error::DisplayErrorContext(&err), "StartMessageMoveTask unavailable; moving messages one by one");
        return Ok(None);
    }
    loop {
        let tasks = sqs
            .list_message_move_tasks()
            .source_arn(&dlq_arn)
            .max_results(1)
            .send()
            .await?;
        let Some(task) = tasks.results.unwrap_or_default().into_iter().next() else {
            bail!("the move task for {dlq} disappeared");
        };
        match task.status.as_deref() {
            Some("COMPLETED") => {
                return Ok(Some(task.approximate_number_of_messages_moved.max(0) as u64))
            }
            Some("FAILED" | "CANCELLED") => bail!(
                "moving messages from {dlq} stopped: {}",
                task.failure_reason
                    .unwrap_or_else(|| "no reason given".into())
            ),
            _ => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
}

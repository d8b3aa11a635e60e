//! Where an event source mapping's batches come from: long polls of the queue gathered for
//! the batching window, second deliveries a fault injector scheduled, and messages handed
//! back when a run ends.

use super::{Consumer, Faults, Shared};
use aws_lambda_events::event::sqs::SqsMessage;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use aws_sdk_sqs::Client;
use std::time::{Duration, Instant};

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
pub(super) async fn release(
    sqs: &Client,
    queue_url: &str,
    messages: &[aws_sdk_sqs::types::Message],
) {
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
pub(super) async fn next_batch(
    sqs: &Client,
    consumer: &Consumer,
    shared: &Shared,
    batch_size: usize,
) -> Vec<aws_sdk_sqs::types::Message> {
    let due = due_redeliveries(consumer, shared, batch_size);
    if !due.is_empty() {
        return due;
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
        deliver_twice(consumer, shared, faults.as_ref(), &messages);
    }
    messages
}

/// Up to `batch_size` second deliveries of `consumer` that are due, taken off the waiting list.
fn due_redeliveries(
    consumer: &Consumer,
    shared: &Shared,
    batch_size: usize,
) -> Vec<aws_sdk_sqs::types::Message> {
    let mut waiting = shared.redeliveries();
    let mut due = Vec::new();
    if let Some(queue) = waiting.get_mut(&consumer.function) {
        let now = Instant::now();
        queue.retain(|(at, message)| {
            let take = *at <= now && due.len() < batch_size;
            if take {
                due.push(message.clone());
            }
            !take
        });
    }
    due
}

/// Puts on the waiting list the received `messages` that `faults` hands to a second
/// invocation, each due after the delay it chose.
fn deliver_twice(
    consumer: &Consumer,
    shared: &Shared,
    faults: &dyn Faults,
    messages: &[aws_sdk_sqs::types::Message],
) {
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

/// A received message as Lambda hands it to the function: an SQS event record.
pub(super) fn to_lambda_record(message: aws_sdk_sqs::types::Message, arn: &str) -> SqsMessage {
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

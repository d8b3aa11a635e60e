//! The emails queue, in memory, with the SQS semantics SendEmail relies on: a received
//! message is invisible for the visibility timeout, a returned one comes back when its
//! visibility (ChangeMessageVisibility) ends, each receive counts (ApproximateReceiveCount),
//! after `max_receive_count` receives a message moves to the DLQ, and a message sent again
//! (with a delay) is a new one whose count starts at zero.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use mailflow::ports::{QueueError, RetryQueue};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

struct Message {
    body: String,
    receives: u32,
    visible_at: Instant,
}

pub struct LabQueue {
    visibility: Duration,
    max_receive_count: u32,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    messages: BTreeMap<u64, Message>,
    /// Receipt handle -> message id, for the messages in flight.
    receipts: HashMap<String, u64>,
    dead_lettered: usize,
}

impl LabQueue {
    pub fn new(visibility: Duration, max_receive_count: u32) -> Self {
        Self {
            visibility,
            max_receive_count,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        mailflow::runtime::lock(&self.state)
    }

    pub fn send(&self, bodies: impl IntoIterator<Item = String>) {
        let mut state = self.state();
        let now = Instant::now();
        for body in bodies {
            state.next_id += 1;
            let id = state.next_id;
            state.messages.insert(
                id,
                Message {
                    body,
                    receives: 0,
                    visible_at: now,
                },
            );
        }
    }

    /// Up to `max` visible messages, as one event source mapping batch.
    pub fn receive(&self, max: usize) -> SqsEvent {
        let mut state = self.state();
        let now = Instant::now();
        let mut records = Vec::new();
        let mut dead = Vec::new();
        let visible: Vec<u64> = (state.messages.iter())
            .filter(|(_, m)| m.visible_at <= now)
            .map(|(id, _)| *id)
            .take(max)
            .collect();
        for id in visible {
            let message = state.messages.get_mut(&id).expect("listed");
            if message.receives >= self.max_receive_count {
                dead.push(id);
                continue;
            }
            message.receives += 1;
            message.visible_at = now + self.visibility;
            let receipt = format!("{id}-{}", message.receives);
            let mut record = SqsMessage::default();
            record.message_id = Some(id.to_string());
            record.receipt_handle = Some(receipt.clone());
            record.body = Some(message.body.clone());
            record.attributes.insert(
                "ApproximateReceiveCount".into(),
                message.receives.to_string(),
            );
            records.push(record);
            state.receipts.insert(receipt, id);
        }
        for id in dead {
            state.messages.remove(&id);
            state.dead_lettered += 1;
        }
        let mut event = SqsEvent::default();
        event.records = records;
        event
    }

    /// Deletes the batch's messages except those reported failed (partial batch response).
    pub fn settle(&self, event: &SqsEvent, failed: &[String]) {
        let mut state = self.state();
        for record in &event.records {
            let receipt = record.receipt_handle.clone().unwrap_or_default();
            let id = state.receipts.remove(&receipt);
            let message_id = record.message_id.clone().unwrap_or_default();
            if let Some(id) = id.filter(|_| !failed.contains(&message_id)) {
                state.messages.remove(&id);
            }
        }
    }

    /// Messages not yet deleted (in flight or waiting), and those moved to the DLQ.
    pub fn left(&self) -> (usize, usize) {
        let state = self.state();
        (state.messages.len(), state.dead_lettered)
    }
}

impl RetryQueue for LabQueue {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        let mut state = self.state();
        if let Some(id) = state.receipts.get(receipt_handle).copied() {
            if let Some(message) = state.messages.get_mut(&id) {
                message.visible_at = Instant::now() + delay;
            }
        }
        Ok(())
    }

    async fn requeue(&self, body: &str, delay: Duration) -> Result<(), QueueError> {
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        // As SQS takes it: whole seconds (the adapter rounds up, at least one), at most 15
        // minutes.
        let seconds = (delay.as_millis().div_ceil(1000) as u64)
            .clamp(1, u64::from(mailflow::ports::MAX_DELAY_SECONDS));
        let delay = Duration::from_secs(seconds);
        state.messages.insert(
            id,
            Message {
                body: body.to_owned(),
                receives: 0,
                visible_at: Instant::now() + delay,
            },
        );
        Ok(())
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut state = self.state();
        if let Some(id) = state.receipts.remove(receipt_handle) {
            state.messages.remove(&id);
        }
        Ok(())
    }
}

//! A queue in memory with the SQS semantics the stages rely on: a received message is
//! invisible for the visibility timeout, a returned one comes back when its visibility
//! (ChangeMessageVisibility) ends, each receive counts (ApproximateReceiveCount), after
//! `max_receive_count` receives a message moves to the DLQ, and a message sent again (with a
//! delay) is a new one whose count starts at zero, and SQS's quota of in-flight messages
//! (received, neither deleted nor visible again; a delayed message is not in flight): past
//! it a receive is refused with OverLimit, which a long poll, as Lambda's event source
//! mapping makes, sees as nothing to receive. Receives cost O(log n), so that a queue of a
//! million users stays cheap to the lab.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use mailflow::ports::{
    ConsumedQueue, OutgoingQueue, QueueError, RetryQueue, SendReport, MAX_DELAY_SECONDS,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// SQS's most messages in flight on a standard queue ("approximately 120,000").
pub const SQS_IN_FLIGHT_LIMIT: usize = 120_000;

/// A receive refused because the queue has its most messages in flight, as SQS answers a
/// short poll (`OverLimit`).
#[derive(Debug, PartialEq, Eq)]
pub struct OverLimit;

struct Message {
    body: String,
    receives: u32,
    /// Bumped at every change of visibility: only the newest entry of a message is valid.
    generation: u64,
    /// Received and not visible again yet.
    in_flight: bool,
}

pub struct LabQueue {
    visibility: Duration,
    max_receive_count: u32,
    in_flight_limit: usize,
    state: Mutex<State>,
    /// Told at every change a receive could see: what a long poll waits on.
    changed: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    next_id: u64,
    messages: HashMap<u64, Message>,
    /// Visible messages in the order they became visible (entries whose message was since
    /// received, deleted or delayed are skipped).
    ready: VecDeque<(u64, u64)>,
    /// Messages invisible until an instant; an entry whose instant is no longer its
    /// message's is stale and skipped.
    later: BinaryHeap<Reverse<(Instant, u64, u64)>>,
    /// Receipt handle -> message id, for the messages in flight.
    receipts: HashMap<String, u64>,
    dead_lettered: usize,
    /// Messages in flight now, the most there were, and the receives refused for them.
    in_flight: usize,
    peak_in_flight: usize,
    refused_receives: usize,
}

impl State {
    fn put(&mut self, body: String, visible_at: Instant, now: Instant) {
        self.next_id += 1;
        let id = self.next_id;
        self.messages.insert(
            id,
            Message {
                body,
                receives: 0,
                generation: 0,
                in_flight: false,
            },
        );
        self.show_at(id, visible_at, now);
    }

    /// Message `id` is no longer in flight (visible again, or deleted).
    fn landed(&mut self, id: u64) {
        if let Some(message) = self.messages.get_mut(&id) {
            if std::mem::take(&mut message.in_flight) {
                self.in_flight -= 1;
            }
        }
    }

    fn remove(&mut self, id: u64) {
        self.landed(id);
        self.messages.remove(&id);
    }

    /// Makes message `id` visible at `at` (its earlier entries become stale).
    fn show_at(&mut self, id: u64, at: Instant, now: Instant) {
        let Some(message) = self.messages.get_mut(&id) else {
            return;
        };
        message.generation += 1;
        let generation = message.generation;
        if at <= now {
            self.landed(id);
            self.ready.push_back((id, generation));
        } else {
            self.later.push(Reverse((at, id, generation)));
        }
    }

    fn valid(&self, id: u64, generation: u64) -> bool {
        self.messages
            .get(&id)
            .is_some_and(|m| m.generation == generation)
    }

    /// Moves the messages whose visibility ended to the back of the ready line.
    fn due(&mut self, now: Instant) {
        while let Some(Reverse((at, id, generation))) = self.later.peek().copied() {
            if at > now {
                break;
            }
            self.later.pop();
            if self.valid(id, generation) {
                self.landed(id);
                self.ready.push_back((id, generation));
            }
        }
    }
}

impl LabQueue {
    pub fn new(visibility: Duration, max_receive_count: u32) -> Self {
        Self {
            visibility,
            max_receive_count,
            in_flight_limit: SQS_IN_FLIGHT_LIMIT,
            state: Mutex::default(),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// What a long poll waits on (`wait_for_change`): take it, and enable it, before the
    /// receive that finds nothing, so that a change between the two is not missed.
    pub fn changes(&self) -> &tokio::sync::Notify {
        &self.changed
    }

    /// A long poll's wait after a receive found nothing, as Lambda's pollers make them: until
    /// the queue changes (a message sent, returned or deleted), a hidden message's
    /// visibility ends, or `wait` passes.
    pub async fn wait_for_change(
        &self,
        changed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        wait: Duration,
    ) {
        // A receive hides what it takes without a word: a message it returns to view within
        // the wait is woken for by the visibility timeout, at the latest.
        let deadline = Instant::now() + wait.min(self.visibility);
        let next = self.state().later.peek().map(|Reverse((at, _, _))| *at);
        let until = next.map_or(deadline, |at| at.min(deadline));
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        mailflow::runtime::lock(&self.state)
    }

    pub fn send(&self, bodies: impl IntoIterator<Item = String>) {
        let mut state = self.state();
        let now = Instant::now();
        for body in bodies {
            state.put(body, now, now);
        }
        self.changed.notify_waiters();
    }

    /// Up to `max` visible messages, as one event source mapping batch (no more than the
    /// in-flight quota leaves room for); refused while the quota is reached.
    pub fn receive(&self, max: usize) -> Result<SqsEvent, OverLimit> {
        let mut state = self.state();
        let now = Instant::now();
        state.due(now);
        let room = self.in_flight_limit.saturating_sub(state.in_flight);
        if room == 0 {
            state.refused_receives += 1;
            return Err(OverLimit);
        }
        let mut records = Vec::new();
        while records.len() < max.min(room) {
            let Some((id, generation)) = state.ready.pop_front() else {
                break;
            };
            if !state.valid(id, generation) {
                continue;
            }
            let message = state.messages.get_mut(&id).expect("valid");
            if message.receives >= self.max_receive_count {
                state.messages.remove(&id);
                state.dead_lettered += 1;
                continue;
            }
            message.receives += 1;
            message.in_flight = true;
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
            state.in_flight += 1;
            state.peak_in_flight = state.peak_in_flight.max(state.in_flight);
            state.show_at(id, now + self.visibility, now);
            state.receipts.insert(receipt, id);
        }
        let mut event = SqsEvent::default();
        event.records = records;
        Ok(event)
    }

    /// Deletes the batch's messages except those reported failed (partial batch response).
    pub fn settle(&self, event: &SqsEvent, failed: &[String]) {
        let mut state = self.state();
        for record in &event.records {
            let receipt = record.receipt_handle.clone().unwrap_or_default();
            let id = state.receipts.remove(&receipt);
            let message_id = record.message_id.clone().unwrap_or_default();
            if let Some(id) = id.filter(|_| !failed.contains(&message_id)) {
                state.remove(id);
            }
        }
        self.changed.notify_waiters();
    }

    /// Messages not yet deleted (in flight or waiting), and those moved to the DLQ.
    pub fn left(&self) -> (usize, usize) {
        let state = self.state();
        (state.messages.len(), state.dead_lettered)
    }

    /// The most messages that were in flight at once, and the receives refused because the
    /// quota was reached.
    #[cfg(test)]
    pub fn in_flight_peak_and_refusals(&self) -> (usize, usize) {
        let state = self.state();
        (state.peak_in_flight, state.refused_receives)
    }
}

/// As SQS takes a delay: whole seconds (the adapter rounds up), at most 15 minutes.
fn whole_seconds(delay: Duration) -> Duration {
    Duration::from_secs((delay.as_millis().div_ceil(1000) as u64).min(u64::from(MAX_DELAY_SECONDS)))
}

impl ConsumedQueue for LabQueue {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        let mut state = self.state();
        let now = Instant::now();
        if let Some(id) = state.receipts.get(receipt_handle).copied() {
            state.show_at(id, now + delay, now);
        }
        self.changed.notify_waiters();
        Ok(())
    }
}

impl RetryQueue for LabQueue {
    async fn requeue(&self, body: &str, delay: Duration) -> Result<(), QueueError> {
        let mut state = self.state();
        let now = Instant::now();
        // At least one second, as the adapter asks.
        let at = now + whole_seconds(delay).max(Duration::from_secs(1));
        state.put(body.to_owned(), at, now);
        self.changed.notify_waiters();
        Ok(())
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut state = self.state();
        if let Some(id) = state.receipts.remove(receipt_handle) {
            state.remove(id);
        }
        self.changed.notify_waiters();
        Ok(())
    }
}

impl OutgoingQueue for LabQueue {
    async fn send_batch(&self, bodies: &[String]) -> Result<SendReport, QueueError> {
        self.send(bodies.iter().cloned());
        Ok(SendReport {
            sent: bodies.len(),
            retried: 0,
        })
    }

    async fn send_batch_delayed(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> Result<SendReport, QueueError> {
        let mut state = self.state();
        let now = Instant::now();
        let at = now + whole_seconds(Duration::from_secs(u64::from(delay_seconds)));
        for body in bodies {
            state.put(body.clone(), at, now);
        }
        self.changed.notify_waiters();
        Ok(SendReport {
            sent: bodies.len(),
            retried: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Received messages count until deleted or visible again; delayed ones never do; past
    /// 120,000 a receive is refused, and a deletion makes room again.
    #[tokio::test(start_paused = true)]
    async fn receives_stop_at_sqs_in_flight_quota() {
        let queue = LabQueue::new(Duration::from_secs(180), 10);
        queue.send((0..SQS_IN_FLIGHT_LIMIT + 5).map(|i| i.to_string()));
        let delayed = ["later".to_string()];
        queue.send_batch_delayed(&delayed, 1).await.unwrap();
        let mut received = Vec::new();
        while let Ok(event) = queue.receive(10) {
            assert!(!event.records.is_empty());
            received.extend(event.records);
        }
        assert_eq!(received.len(), SQS_IN_FLIGHT_LIMIT);
        assert_eq!(
            queue.in_flight_peak_and_refusals(),
            (SQS_IN_FLIGHT_LIMIT, 1)
        );
        // The delayed message comes due; still no room for it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(queue.receive(10).map(|e| e.records.len()), Err(OverLimit));
        let receipt = received[0].receipt_handle.clone().unwrap();
        queue.delete(&receipt).await.unwrap();
        assert_eq!(queue.receive(10).map(|e| e.records.len()), Ok(1));
        // A message made visible again leaves the flight too.
        let receipt = received[1].receipt_handle.clone().unwrap();
        queue
            .change_visibility(&receipt, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(queue.receive(10).map(|e| e.records.len()), Ok(1));
        assert_eq!(queue.in_flight_peak_and_refusals().1, 2);
    }
}

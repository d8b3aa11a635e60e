//! A queue as a stage sends to it (`Sending`): each message costs the sending environment
//! its CPU, each call SQS's round trip, and each message sent is timed; and the CPU a given
//! memory buys (`cpu_time`).

use crate::rate::latency::Cpu;
use crate::rate::queue::LabQueue;
use mailflow::domain::messages::{parse_body, EmailJob, UserMessage};
use mailflow::domain::send_rate::MB_PER_VCPU;
use mailflow::ports::{ConsumedQueue, OutgoingQueue, QueueError, SendReport};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The CPU a given memory buys, per email, for work that takes `us` on a whole vCPU.
pub(super) fn cpu_time(us: f64, memory_mb: u32) -> Duration {
    Duration::from_secs_f64(us / 1e6 * MB_PER_VCPU / f64::from(memory_mb.max(1)))
}

/// A queue as a stage sends to it: each message costs the sending environment `per_message`
/// of its CPU (one piece of work at a time), the call takes SQS's round trip, and each
/// message sent is timed. An emails queue keeps only what SendEmail needs of each job (its
/// rendered parts are dropped once made: a million of them would not fit in memory; their
/// cost to SendEmail is in its modelled CPU).
pub(super) struct Sending {
    pub(super) queue: Arc<LabQueue>,
    pub(super) cpu: Arc<Cpu>,
    pub(super) per_message: Duration,
    pub(super) latency: (Duration, Duration),
    pub(super) slim: bool,
    pub(super) sent: Arc<Mutex<Vec<Instant>>>,
    /// A users queue's local-time releases, kept as they are sent: who, and their due.
    pub(super) released: Option<Released>,
}

/// The users a local-time campaign released onto the users queue, each with its `Due`.
pub(super) type Released = Arc<Mutex<Vec<(String, mailflow::domain::local_time::Due)>>>;

impl Sending {
    async fn charge(&self, messages: usize) {
        self.cpu.spend(self.per_message * messages as u32).await;
        let (low, high) = self.latency;
        let spread = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()) as f64
            / 1e9;
        tokio::time::sleep(low + (high - low).mul_f64(spread)).await;
    }

    fn bodies(&self, bodies: &[String]) -> Vec<String> {
        if !self.slim {
            return bodies.to_vec();
        }
        bodies
            .iter()
            .map(|body| match parse_body::<EmailJob>(Some(body)) {
                Ok(mut job) => {
                    job.html = "<p>(rendered)</p>".into();
                    job.text = "(rendered)".into();
                    serde_json::to_string(&job).unwrap_or_else(|_| body.clone())
                }
                Err(_) => body.clone(),
            })
            .collect()
    }

    fn timed(&self, bodies: &[String]) {
        let now = Instant::now();
        mailflow::runtime::lock(&self.sent).extend(std::iter::repeat_n(now, bodies.len()));
        if let Some(released) = &self.released {
            let due = bodies.iter().filter_map(|body| {
                let message = parse_body::<UserMessage>(Some(body)).ok()?;
                Some((message.user_id, message.due?))
            });
            mailflow::runtime::lock(released).extend(due);
        }
    }
}

impl OutgoingQueue for Sending {
    async fn send_batch(&self, bodies: &[String]) -> Result<SendReport, QueueError> {
        self.charge(bodies.len()).await;
        let report = self.queue.send_batch(&self.bodies(bodies)).await?;
        self.timed(bodies);
        Ok(report)
    }

    async fn send_batch_delayed(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> Result<SendReport, QueueError> {
        self.charge(bodies.len()).await;
        let report = (self.queue)
            .send_batch_delayed(&self.bodies(bodies), delay_seconds)
            .await?;
        self.timed(bodies);
        Ok(report)
    }
}

impl ConsumedQueue for Sending {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        self.queue.change_visibility(receipt_handle, delay).await
    }
}

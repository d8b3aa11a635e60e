//! SendEmail's side of the shared send rate: this environment's slots, taken from the stack's
//! rate item a chunk at a time (`RateBucket::take`, one write per chunk) and handed to its
//! records in order; throttling reported back to the item, so that every environment slows
//! down. The ceiling is the configured rate, or the lower one RateControl wrote from SES's
//! quota (`trusted`).
//!
//! Each record of a batch holds a `Ticket` until it takes its slot or needs none (a
//! duplicate, a paused campaign...): the live tickets are the demand a chunk is sized by.

use crate::domain::send_rate::{
    chunk_for, epoch_us, trusted, SendRate, SharedRate, Slots, MAX_CHUNK_SPAN, MAX_LATENESS,
};
use crate::ports::{RateBucket, RateError, SlotRequest};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The metrics `Pacer::gauges` writes.
pub const GAUGE_NAMES: [&str; 2] = ["sharedRatePerSecond", "rateAtFloor"];

pub struct Pacer<B> {
    bucket: B,
    /// Records per full batch (`EmailsBatchSize`): its chunks are sized by it.
    batch: usize,
    local: Mutex<Local>,
    demand: AtomicUsize,
    /// Whether the last batch was full, when it began, and whether this one and the last were
    /// full and close enough together that a chunk's rest is still fresh for this one (a deep
    /// queue).
    last_full: AtomicBool,
    last_began: std::sync::Mutex<Option<Instant>>,
    deep: AtomicBool,
    /// SES's throttles seen by this environment.
    throttles: AtomicU64,
    /// A slot was taken since the last `gauges`: the view is this invocation's.
    sending: AtomicBool,
}

#[derive(Default)]
struct Local {
    /// Slot times (µs since the epoch) taken and not used yet.
    slots: VecDeque<u64>,
    /// The shared rate as the item last showed it.
    rate: Option<SharedRate>,
}

/// Why a record gets no slot now.
#[derive(Debug, thiserror::Error)]
pub enum NoSlot {
    /// The shared schedule is taken until after this invocation's deadline: the record should
    /// come back in this long (many environments for the rate, a rate lowered by throttling).
    #[error("the shared send schedule is full for {0:?}, past this invocation's deadline")]
    Full(Duration),
    #[error(transparent)]
    Failed(#[from] RateError),
}

/// A record's claim on a slot; dropped unused, it no longer counts in the demand.
pub struct Ticket<'a> {
    demand: &'a AtomicUsize,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.demand.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<B: RateBucket> Pacer<B> {
    /// `batch`: the records of a full batch (`EmailsBatchSize`).
    pub fn new(bucket: B, batch: usize) -> Self {
        Self {
            bucket,
            batch,
            local: Mutex::default(),
            demand: AtomicUsize::new(0),
            last_full: AtomicBool::new(false),
            last_began: std::sync::Mutex::new(None),
            deep: AtomicBool::new(false),
            throttles: AtomicU64::new(0),
            sending: AtomicBool::new(false),
        }
    }

    /// A batch of `records` begins: its size, and the time since the last one began, tell
    /// whether slots taken for two batches would be used (a batch slower than half of
    /// `MAX_LATENESS`, its CPU for instance, would find the rest of the chunk stale).
    pub fn batch(&self, records: usize) {
        let full = records >= self.batch;
        let last = self.last_full.swap(full, Ordering::Relaxed);
        let now = Instant::now();
        let began = crate::runtime::lock(&self.last_began).replace(now);
        let close = began.is_some_and(|b| now.duration_since(b) <= MAX_LATENESS / 2);
        self.deep.store(last && full && close, Ordering::Relaxed);
    }

    pub fn ticket(&self) -> Ticket<'_> {
        self.demand.fetch_add(1, Ordering::Relaxed);
        Ticket {
            demand: &self.demand,
        }
    }

    pub fn throttles(&self) -> u64 {
        self.throttles.load(Ordering::Relaxed)
    }

    /// The shared rate this environment sent at since the last call, as metrics: the rate
    /// and 1 when throttling holds it at its floor. Nothing when it took no slot since (a
    /// paused campaign, duplicates only: a view that old says nothing of SES now), nor while
    /// another batch holds the view.
    pub fn gauges(&self) -> Vec<crate::runtime::emf::Metric> {
        use crate::runtime::emf::Metric;
        if !self.sending.swap(false, Ordering::Relaxed) {
            return Vec::new();
        }
        let Some(rate) = self.local.try_lock().ok().and_then(|local| local.rate) else {
            return Vec::new();
        };
        let [shared, at_floor] = GAUGE_NAMES;
        vec![
            Metric::per_second(shared, rate.rate),
            Metric::count(at_floor, f64::from(u8::from(rate.at_floor()))),
        ]
    }

    /// Waits for this environment's next slot and takes it, `ticket` with it; a slot after
    /// `latest` (the last moment a send still fits in the invocation) is neither taken nor
    /// waited for (`NoSlot::Full`): the record goes back to the queue rather than outlive its
    /// invocation.
    pub async fn acquire(
        &self,
        ticket: Ticket<'_>,
        ceiling: &SendRate,
        latest: SystemTime,
    ) -> Result<(), NoSlot> {
        let latest_us = epoch_us(latest);
        let slot = {
            let mut local = self.local.lock().await;
            loop {
                let now_us = epoch_us(crate::runtime::clock::now());
                let late = MAX_LATENESS.as_micros() as u64;
                while local.slots.front().is_some_and(|s| s + late < now_us) {
                    local.slots.pop_front();
                }
                if let Some(slot) = local.slots.pop_front() {
                    break slot;
                }
                let rate = self.rate(&mut local, ceiling, now_us / 1000).await?;
                let interval_us = Slots::interval_at(rate);
                // Never more than MAX_CHUNK_SPAN of the schedule, nor past the deadline:
                // slots this invocation cannot use are lost to every environment.
                let by_time = MAX_CHUNK_SPAN.as_micros() as u64 / interval_us;
                let by_deadline = latest_us.saturating_sub(now_us) / interval_us;
                let count = chunk_for(
                    self.demand.load(Ordering::Relaxed),
                    self.deep.load(Ordering::Relaxed),
                    self.batch,
                )
                .min(by_time.min(by_deadline).clamp(1, u64::from(u32::MAX)) as u32);
                let request = SlotRequest {
                    count,
                    interval_us,
                    now_us,
                    latest_us,
                };
                let taken = self.bucket.take(&request).await?;
                if taken.slots.count == 0 {
                    let wait = taken.slots.first_us.saturating_sub(now_us);
                    return Err(NoSlot::Full(Duration::from_micros(wait)));
                }
                if taken.view.rate.is_some() {
                    local.rate = taken.view.rate;
                }
                local.slots.extend(taken.slots.times());
                // This take's first slot is used however slow the write was (one send, not
                // a burst): otherwise a store slower than MAX_LATENESS discards every chunk
                // it grants, and the environment takes and wastes slots until its deadline.
                if let Some(slot) = local.slots.pop_front() {
                    break slot;
                }
            }
        };
        drop(ticket);
        self.sending.store(true, Ordering::Relaxed);
        if slot > latest_us {
            // Taken earlier (a chunk's rest) and too late for this invocation: lost.
            let wait = slot.saturating_sub(epoch_us(crate::runtime::clock::now()));
            return Err(NoSlot::Full(Duration::from_micros(wait)));
        }
        let wait = slot.saturating_sub(epoch_us(crate::runtime::clock::now()));
        tokio::time::sleep(Duration::from_micros(wait)).await;
        Ok(())
    }

    /// The shared rate to take slots at: as the item last showed it, moved on first where
    /// it is due (back up after throttling, to a new ceiling) or set where it never was.
    async fn rate(
        &self,
        local: &mut Local,
        ceiling: &SendRate,
        now_ms: u64,
    ) -> Result<f64, RateError> {
        let ceiling = &trusted(ceiling, local.rate.as_ref());
        let next = match &local.rate {
            None => Some(SharedRate::at(ceiling, now_ms)),
            Some(seen) => seen.next(ceiling, now_ms, false),
        };
        if let Some(next) = next {
            if self.bucket.change_rate(local.rate.as_ref(), &next).await? {
                local.rate = Some(next);
            } else {
                // Another environment changed it first: adopt its rate, or each take would
                // try the same refused write again (a failed read: the next take's answer
                // shows it).
                match self.bucket.read().await {
                    Ok(view) => local.rate = view.rate.or(local.rate),
                    Err(err) => {
                        tracing::warn!(reason = %err, "could not read the shared send rate")
                    }
                }
            }
        }
        // Never above this environment's own ceiling, whatever another one wrote (a deploy
        // that lowered the rate, still rolling out).
        let own = ceiling.campaign_wide();
        Ok(local.rate.map_or(own, |r| r.rate.min(own)))
    }

    /// SES throttled a send: the shared rate goes down (once per burst, whoever reports it
    /// first) and this environment's slots, taken at the old rate, are given up.
    pub async fn throttled(&self, ceiling: &SendRate) {
        self.throttles.fetch_add(1, Ordering::Relaxed);
        let mut local = self.local.lock().await;
        local.slots.clear();
        let now_ms = epoch_us(crate::runtime::clock::now()) / 1000;
        let Some(seen) = local.rate else { return };
        let Some(next) = seen.next(&trusted(ceiling, Some(&seen)), now_ms, true) else {
            return;
        };
        match self.bucket.change_rate(Some(&seen), &next).await {
            Ok(true) => {
                tracing::warn!(
                    rate = next.rate,
                    ceiling = next.ceiling,
                    "SES throttled: the shared send rate is lowered"
                );
                local.rate = Some(next);
            }
            // Another environment lowered it first: adopt its rate (and its lowering time), so
            // that the rest of the burst's throttles here write nothing.
            Ok(false) => match self.bucket.read().await {
                Ok(view) => local.rate = view.rate.or(local.rate),
                Err(err) => tracing::warn!(reason = %err, "could not read the shared send rate"),
            },
            Err(err) => tracing::warn!(reason = %err, "could not lower the shared send rate"),
        }
    }
}

#[cfg(test)]
mod tests;

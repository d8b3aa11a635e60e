//! SendEmail's side of the shared send rate: this environment's slots, taken from the stack's
//! rate item a chunk at a time (`RateBucket::take`, one write per chunk) and handed to its
//! records in order; throttling reported back to the item, so that every environment slows
//! down; SES's quota read again every `QUOTA_REFRESH`.
//!
//! Each record of a batch holds a `Ticket` until it takes its slot or needs none (a
//! duplicate, a paused campaign...): the live tickets are the demand a chunk is sized by.

use crate::domain::send_rate::{
    chunk_for, epoch_us, QuotaUnknown, SendQuota, SendRate, SharedRate, Slots, FULL_BATCH,
    MAX_LATENESS, QUOTA_REFRESH,
};
use crate::ports::{RateBucket, RateError, SlotRequest};
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// An environment that took no slots for this long no longer counts as sending.
pub const QUIET_AFTER: Duration = Duration::from_secs(60);

pub struct Pacer<B> {
    bucket: B,
    /// This execution environment, as the rate item knows it.
    environment: String,
    configured: f64,
    /// The ceiling as last read, and when (None: not yet).
    ceiling: Mutex<Option<(SendRate, Instant)>>,
    local: Mutex<Local>,
    demand: AtomicUsize,
    /// Whether the last batch was full, and whether this one and the last were (a deep queue).
    last_full: AtomicBool,
    deep: AtomicBool,
    /// SES's throttles seen by this environment.
    throttles: AtomicU64,
}

#[derive(Default)]
struct Local {
    /// Slot times (µs since the epoch) taken and not used yet.
    slots: VecDeque<u64>,
    /// The shared rate as the item last showed it.
    rate: Option<SharedRate>,
    /// Environments gone quiet, to forget at the next take.
    forget: Vec<String>,
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

fn environment_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(epoch_us(SystemTime::now()).into());
    format!("{:012x}", hasher.finish() & 0xffff_ffff_ffff)
}

impl<B: RateBucket> Pacer<B> {
    /// `configured`: `SEND_RATE_PER_SECOND`, the ceiling until SES's quota is read.
    pub fn new(bucket: B, configured: f64) -> Self {
        Self {
            bucket,
            environment: environment_id(),
            configured,
            ceiling: Mutex::new(None),
            local: Mutex::default(),
            demand: AtomicUsize::new(0),
            last_full: AtomicBool::new(false),
            deep: AtomicBool::new(false),
            throttles: AtomicU64::new(0),
        }
    }

    /// A batch of `records` begins: its size tells how deep the queue is.
    pub fn batch(&self, records: usize) {
        let full = records >= FULL_BATCH;
        let last = self.last_full.swap(full, Ordering::Relaxed);
        self.deep.store(last && full, Ordering::Relaxed);
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

    /// The ceiling; SES's quota is read (`read_quota`) first when it is due: the new ceiling
    /// is returned as well then, for the concurrency to follow it.
    pub async fn ceiling<F>(&self, read_quota: impl FnOnce() -> F) -> (SendRate, Option<SendRate>)
    where
        F: Future<Output = Result<SendQuota, QuotaUnknown>>,
    {
        let mut ceiling = self.ceiling.lock().await;
        match *ceiling {
            Some((rate, read)) if read.elapsed() < QUOTA_REFRESH => (rate, None),
            _ => {
                let rate = SendRate::with_quota(self.configured, &read_quota().await);
                *ceiling = Some((rate, Instant::now()));
                (rate, Some(rate))
            }
        }
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
                let now_us = epoch_us(SystemTime::now());
                let late = MAX_LATENESS.as_micros() as u64;
                while local.slots.front().is_some_and(|s| s + late < now_us) {
                    local.slots.pop_front();
                }
                if let Some(slot) = local.slots.pop_front() {
                    break slot;
                }
                let rate = self.rate(&mut local, ceiling, now_us / 1000).await?;
                let count = chunk_for(
                    self.demand.load(Ordering::Relaxed),
                    self.deep.load(Ordering::Relaxed),
                );
                let forget = std::mem::take(&mut local.forget);
                let request = SlotRequest {
                    count,
                    interval_us: Slots::interval_at(rate),
                    now_us,
                    latest_us,
                    environment: &self.environment,
                    forget: &forget,
                };
                let taken = self.bucket.take(&request).await?;
                if taken.slots.count == 0 {
                    local.forget = forget;
                    let wait = taken.slots.first_us.saturating_sub(now_us);
                    return Err(NoSlot::Full(Duration::from_micros(wait)));
                }
                let quiet = (now_us / 1000).saturating_sub(QUIET_AFTER.as_millis() as u64);
                local.forget = (taken.view.environments.iter())
                    .filter(|(_, at)| *at < quiet)
                    .map(|(id, _)| id.clone())
                    .take(5)
                    .collect();
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
        if slot > latest_us {
            // Taken earlier (a chunk's rest) and too late for this invocation: lost.
            let wait = slot.saturating_sub(epoch_us(SystemTime::now()));
            return Err(NoSlot::Full(Duration::from_micros(wait)));
        }
        let wait = slot.saturating_sub(epoch_us(SystemTime::now()));
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
        Ok(local.rate.map_or(ceiling.campaign_wide(), |r| r.rate))
    }

    /// SES throttled a send: the shared rate goes down (once per burst, whoever reports it
    /// first) and this environment's slots, taken at the old rate, are given up.
    pub async fn throttled(&self, ceiling: &SendRate) {
        self.throttles.fetch_add(1, Ordering::Relaxed);
        let mut local = self.local.lock().await;
        local.slots.clear();
        let now_ms = epoch_us(SystemTime::now()) / 1000;
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

/// The ceiling to pace under: this environment's, or, where it could not read SES's quota
/// (its ceiling is only the configured rate), the lower one an environment that read the
/// quota wrote. Otherwise the two would raise and lower the shared rate in turn.
fn trusted(ceiling: &SendRate, seen: Option<&SharedRate>) -> SendRate {
    match seen {
        Some(seen)
            if ceiling.ses_max.is_none()
                && seen.ceiling_from_ses
                && seen.ceiling < ceiling.configured =>
        {
            SendRate {
                ses_max: Some(seen.ceiling),
                ..*ceiling
            }
        }
        _ => *ceiling,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::memory::MemoryRateBucket;
    use crate::ports::{RateView, Taken};
    use std::sync::Arc;

    fn far() -> SystemTime {
        SystemTime::now() + Duration::from_secs(60)
    }

    #[tokio::test]
    async fn environments_share_one_schedule_taken_in_chunks() {
        let bucket = Arc::new(MemoryRateBucket::default());
        let ceiling = SendRate::configured(1000.0);
        let pacers: Vec<_> = (0..4).map(|_| Pacer::new(bucket.clone(), 1000.0)).collect();
        let started = SystemTime::now();
        for pacer in &pacers {
            for _ in 0..10 {
                pacer.batch(10);
                let tickets: Vec<_> = (0..10).map(|_| pacer.ticket()).collect();
                for ticket in tickets {
                    pacer.acquire(ticket, &ceiling, far()).await.unwrap();
                }
            }
        }
        // 400 sends at 1,000/s from one shared schedule: not before 0.39 s. The first batch
        // took its 10; once the queue shows deep, each take of 20 served two batches (1 + 5
        // per environment), beside setting the rate (one write per environment, the three
        // that lost the race read it).
        assert!(started.elapsed().unwrap() >= Duration::from_millis(390));
        // 31 requests in a quiet run. A loaded machine can let a chunk's rest go stale
        // (MAX_LATENESS) and cost another take, so what is certain is the chunks: every
        // second batch of each environment began with a take of MAX_CHUNK.
        let requests = bucket.requests.load(Ordering::Relaxed);
        assert!(
            requests >= 4 * 6 + 4 + 3,
            "{requests} requests for 400 slots"
        );
        let asked = crate::runtime::lock(&bucket.asked).clone();
        let chunks = asked
            .iter()
            .filter(|n| **n == crate::domain::send_rate::MAX_CHUNK)
            .count();
        assert!(chunks >= 4 * 5, "takes asked for {asked:?}");
        let view = bucket.read().await.unwrap();
        assert_eq!(
            view.sending(epoch_us(SystemTime::now()) / 1000, QUIET_AFTER),
            4
        );
    }

    #[tokio::test]
    async fn a_throttle_lowers_the_rate_every_environment_takes_slots_at() {
        let bucket = Arc::new(MemoryRateBucket::default());
        let ceiling = SendRate::configured(100.0);
        let (a, b) = (
            Pacer::new(bucket.clone(), 100.0),
            Pacer::new(bucket.clone(), 100.0),
        );
        a.acquire(a.ticket(), &ceiling, far()).await.unwrap();
        b.acquire(b.ticket(), &ceiling, far()).await.unwrap();
        a.throttled(&ceiling).await;
        a.throttled(&ceiling).await;
        assert_eq!(a.throttles(), 2);
        let rate = bucket.read().await.unwrap().rate.unwrap();
        assert_eq!(rate.rate, 70.0, "lowered once for the burst");
        // B's chunk of 11 was taken at 100/s; its next chunk is at the lowered rate.
        for _ in 0..11 {
            b.acquire(b.ticket(), &ceiling, far()).await.unwrap();
        }
        assert_eq!(b.local.lock().await.rate.unwrap().rate, 70.0);
    }

    #[tokio::test]
    async fn a_burst_of_throttles_costs_each_environment_a_constant_number_of_rate_requests() {
        let bucket = Arc::new(MemoryRateBucket::default());
        let ceiling = SendRate::configured(100.0);
        let (a, b) = (
            Pacer::new(bucket.clone(), 100.0),
            Pacer::new(bucket.clone(), 100.0),
        );
        a.acquire(a.ticket(), &ceiling, far()).await.unwrap();
        b.acquire(b.ticket(), &ceiling, far()).await.unwrap();
        // A lowers the rate first; B, whose view is now stale, meets twenty throttles of the
        // same burst: one refused change and one read, then nothing.
        a.throttled(&ceiling).await;
        let before = bucket.requests.load(Ordering::Relaxed);
        for _ in 0..20 {
            b.throttled(&ceiling).await;
        }
        assert_eq!(bucket.requests.load(Ordering::Relaxed) - before, 2);
        assert_eq!(b.local.lock().await.rate.unwrap().rate, 70.0);
    }

    #[tokio::test]
    async fn an_environment_without_the_quota_keeps_the_ceiling_one_with_it_wrote() {
        let bucket = Arc::new(MemoryRateBucket::default());
        let read = SendRate {
            configured: 100.0,
            ses_max: Some(50.0),
        };
        // B's read of SES's quota failed: it falls back to the configured rate.
        let unknown = SendRate::configured(100.0);
        let (a, b) = (
            Pacer::new(bucket.clone(), 100.0),
            Pacer::new(bucket.clone(), 100.0),
        );
        a.acquire(a.ticket(), &read, far()).await.unwrap();
        let written = bucket.read().await.unwrap().rate.unwrap();
        for _ in 0..10 {
            b.acquire(b.ticket(), &unknown, far()).await.unwrap();
            a.acquire(a.ticket(), &read, far()).await.unwrap();
        }
        // The rate A wrote first is the one there is: never raised by B and lowered again.
        let rate = bucket.read().await.unwrap().rate.unwrap();
        assert_eq!(rate, written);
        assert_eq!((rate.rate, rate.ceiling), (50.0, 50.0));
        // A throttle B meets lowers from that ceiling and keeps it.
        b.throttled(&unknown).await;
        let rate = bucket.read().await.unwrap().rate.unwrap();
        assert_eq!((rate.rate, rate.ceiling), (35.0, 50.0));
        assert!(rate.ceiling_from_ses);
    }

    #[tokio::test]
    async fn a_raised_configured_rate_is_taken_up_where_no_environment_reads_the_quota() {
        let bucket = Arc::new(MemoryRateBucket::default());
        let old = Pacer::new(bucket.clone(), 50.0);
        old.acquire(old.ticket(), &SendRate::configured(50.0), far())
            .await
            .unwrap();
        // A deploy raised SEND_RATE_PER_SECOND; SES's quota cannot be read anywhere.
        let new = Pacer::new(bucket.clone(), 100.0);
        new.acquire(new.ticket(), &SendRate::configured(100.0), far())
            .await
            .unwrap();
        new.acquire(new.ticket(), &SendRate::configured(100.0), far())
            .await
            .unwrap();
        let rate = bucket.read().await.unwrap().rate.unwrap();
        assert_eq!((rate.rate, rate.ceiling), (100.0, 100.0));
    }

    #[tokio::test]
    async fn a_slot_after_the_deadline_is_not_waited_for() {
        let pacer = Pacer::new(MemoryRateBucket::default(), 1.0);
        let ceiling = SendRate::configured(1.0);
        let soon = || SystemTime::now() + Duration::from_millis(500);
        pacer
            .acquire(pacer.ticket(), &ceiling, soon())
            .await
            .unwrap();
        // The next slot is a second after the first: past a deadline half a second away, so
        // nothing is taken and the record is told when the schedule frees up.
        let requests = pacer.bucket.requests.load(Ordering::Relaxed);
        match pacer.acquire(pacer.ticket(), &ceiling, soon()).await {
            Err(NoSlot::Full(wait)) => assert!(wait <= Duration::from_secs(1), "{wait:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(pacer.bucket.requests.load(Ordering::Relaxed), requests + 1);
    }

    /// A store slower than `MAX_LATENESS` (DynamoDB retrying a throttled write, a loaded
    /// emulator): each take still sends, rather than discarding its stale chunk and taking
    /// again until the deadline.
    struct Slow(MemoryRateBucket);

    impl RateBucket for Slow {
        async fn take(&self, request: &SlotRequest<'_>) -> Result<Taken, RateError> {
            let taken = self.0.take(request).await;
            tokio::time::sleep(MAX_LATENESS * 2).await;
            taken
        }
        async fn change_rate(
            &self,
            seen: Option<&SharedRate>,
            next: &SharedRate,
        ) -> Result<bool, RateError> {
            self.0.change_rate(seen, next).await
        }
        async fn read(&self) -> Result<RateView, RateError> {
            self.0.read().await
        }
    }

    #[tokio::test]
    async fn a_slow_store_still_grants_a_send_per_take() {
        let pacer = Pacer::new(Slow(MemoryRateBucket::default()), 1000.0);
        let ceiling = SendRate::configured(1000.0);
        pacer.batch(10);
        let tickets: Vec<_> = (0..10).map(|_| pacer.ticket()).collect();
        for ticket in tickets {
            pacer.acquire(ticket, &ceiling, far()).await.unwrap();
        }
        // The first take's ten slots span 10 ms and all but its first are stale when it
        // answers: one send per take, not a loop of takes that never sends.
        let takes = pacer.bucket.0.requests.load(Ordering::Relaxed) - 1;
        assert_eq!(takes, 10, "one take per send at worst");
    }

    #[tokio::test]
    async fn a_ticket_given_up_no_longer_counts() {
        let pacer = Pacer::new(MemoryRateBucket::default(), 14.0);
        let tickets: Vec<_> = (0..6).map(|_| pacer.ticket()).collect();
        assert_eq!(pacer.demand.load(Ordering::Relaxed), 6);
        drop(tickets);
        assert_eq!(pacer.demand.load(Ordering::Relaxed), 0);
    }
}

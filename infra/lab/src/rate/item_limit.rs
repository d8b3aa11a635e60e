//! DynamoDB's limit on one item, in front of the rate item: a partition serves at most 1,000
//! write units and 3,000 read units per second, and one item lives in one partition. Every
//! take and rate change of the rate item is one write unit (the item stays under 1 KB; a
//! write its condition refuses is billed too), a strongly consistent read one read unit.
//! Beyond the limit DynamoDB answers ThrottlingException, and the SDK tries again after an
//! exponential backoff with jitter (standard mode: 3 attempts in all), which is modelled
//! here, before the stage sees the error.

use mailflow::domain::send_rate::SharedRate;
use mailflow::ports::{RateBucket, RateError, RateView, SlotRequest, Taken};
use mailflow_local::seed::Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub const WRITE_UNITS_PER_SECOND: f64 = 1_000.0;
pub const READ_UNITS_PER_SECOND: f64 = 3_000.0;
/// The SDK's standard retry mode: attempts in all, and the first backoff's ceiling.
const ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

pub struct ItemLimit<B> {
    pub inner: B,
    state: Mutex<Buckets>,
    pub write_units: AtomicU64,
    pub throttles: AtomicU64,
}

struct Buckets {
    writes: f64,
    reads: f64,
    refilled: Instant,
    rng: Rng,
}

impl<B> ItemLimit<B> {
    pub fn new(inner: B, seed: u64) -> Self {
        Self {
            inner,
            state: Mutex::new(Buckets {
                writes: WRITE_UNITS_PER_SECOND,
                reads: READ_UNITS_PER_SECOND,
                refilled: Instant::now(),
                rng: Rng::new(seed),
            }),
            write_units: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
        }
    }

    /// Waits until the item serves one request of `units` (write or read), or fails as the
    /// SDK does after its last attempt.
    async fn admit(&self, write: bool) -> Result<(), RateError> {
        for attempt in 0..ATTEMPTS {
            let backoff = {
                let mut b = mailflow::runtime::lock(&self.state);
                let now = Instant::now();
                let elapsed = now.duration_since(b.refilled).as_secs_f64();
                b.refilled = now;
                b.writes =
                    (b.writes + elapsed * WRITE_UNITS_PER_SECOND).min(WRITE_UNITS_PER_SECOND);
                b.reads = (b.reads + elapsed * READ_UNITS_PER_SECOND).min(READ_UNITS_PER_SECOND);
                let units = if write { &mut b.writes } else { &mut b.reads };
                if *units >= 1.0 {
                    *units -= 1.0;
                    if write {
                        self.write_units.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                self.throttles.fetch_add(1, Ordering::Relaxed);
                FIRST_BACKOFF.mul_f64(b.rng.unit() * f64::from(1u32 << attempt))
            };
            tokio::time::sleep(backoff).await;
        }
        Err(RateError(
            "ThrottlingException: the rate item's partition exceeded its throughput".into(),
        ))
    }
}

impl<B: RateBucket> RateBucket for ItemLimit<B> {
    async fn take(&self, request: &SlotRequest) -> Result<Taken, RateError> {
        self.admit(true).await?;
        self.inner.take(request).await
    }

    async fn change_rate(
        &self,
        seen: Option<&SharedRate>,
        next: &SharedRate,
    ) -> Result<bool, RateError> {
        self.admit(true).await?;
        self.inner.change_rate(seen, next).await
    }

    async fn read(&self) -> Result<RateView, RateError> {
        self.admit(false).await?;
        self.inner.read().await
    }
}

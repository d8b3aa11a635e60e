//! The stack's rate item, in memory: the same take and change rules as the DynamoDB item
//! (`adapters::rate_item`), shared by the environments of a test or a lab run.

use crate::domain::send_rate::{SharedRate, Slots};
use crate::ports::{RateBucket, RateError, RateView, SlotRequest, Taken};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default)]
struct Item {
    next_free_us: Option<u64>,
    rate: Option<SharedRate>,
}

#[derive(Default)]
pub struct MemoryRateBucket {
    item: Mutex<Item>,
    /// Requests made to it (takes and rate changes), as DynamoDB would bill them.
    pub requests: AtomicU64,
    /// How many slots each take asked for, in order.
    pub asked: Mutex<Vec<u32>>,
    /// When set, rate changes are refused: each environment keeps the rate it was built
    /// with (the lab's "static split", where nothing is shared).
    pub fixed_rate: bool,
}

impl MemoryRateBucket {
    pub fn fixed() -> Self {
        Self {
            fixed_rate: true,
            ..Self::default()
        }
    }

    fn item(&self) -> std::sync::MutexGuard<'_, Item> {
        crate::runtime::lock(&self.item)
    }

    fn view(item: &Item) -> RateView {
        RateView { rate: item.rate }
    }
}

impl RateBucket for MemoryRateBucket {
    async fn take(&self, request: &SlotRequest) -> Result<Taken, RateError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        crate::runtime::lock(&self.asked).push(request.count);
        let mut item = self.item();
        let first_us = (item.next_free_us).map_or(request.now_us, |next| next.max(request.now_us));
        let count = if first_us > request.latest_us {
            0
        } else {
            item.next_free_us = Some(first_us + u64::from(request.count) * request.interval_us);
            request.count
        };
        Ok(Taken {
            slots: Slots {
                first_us,
                interval_us: request.interval_us,
                count,
            },
            view: Self::view(&item),
        })
    }

    async fn change_rate(
        &self,
        seen: Option<&SharedRate>,
        next: &SharedRate,
    ) -> Result<bool, RateError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut item = self.item();
        if self.fixed_rate && item.rate.is_some() {
            return Ok(false);
        }
        let current = item.rate.map(|r| r.changed_at_ms);
        if current != seen.map(|r| r.changed_at_ms) {
            return Ok(false);
        }
        item.rate = Some(*next);
        Ok(true)
    }

    async fn read(&self) -> Result<RateView, RateError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(Self::view(&self.item()))
    }
}

//! DynamoDB's limit on one item, in front of the rate item: one item lives in one partition,
//! which serves at most 1,000 write units and 3,000 read units a second (`crate::limits`,
//! with the SDK's retries). Every take and rate change of the rate item is one write unit
//! (the item stays under 1 KB; a write its condition refuses is billed too), a strongly
//! consistent read one read unit. A take that finds the stack idle costs the adapter two
//! writes (`adapters::rate_item`: the ADD its condition refuses, then the SET that starts
//! the schedule now), and is charged both.

use crate::limits::{Charge, Limit, Throughput};
use mailflow::domain::aws_limits::{DYNAMODB_PARTITION_READ_UNITS, DYNAMODB_PARTITION_WRITE_UNITS};
use mailflow::domain::send_rate::SharedRate;
use mailflow::ports::{RateBucket, RateError, RateView, SlotRequest, Taken};

const WRITES: Limit = Limit {
    name: "rate item writes",
    per_second: DYNAMODB_PARTITION_WRITE_UNITS,
};
const READS: Limit = Limit {
    name: "rate item reads",
    per_second: DYNAMODB_PARTITION_READ_UNITS,
};

pub struct ItemLimit<B> {
    pub inner: B,
    limits: Throughput,
}

impl<B> ItemLimit<B> {
    pub fn new(inner: B, seed: u64) -> Self {
        Self {
            inner,
            limits: Throughput::new(seed),
        }
    }

    /// Write units served.
    pub fn write_units(&self) -> u64 {
        self.limits
            .counts()
            .get(WRITES.name)
            .map_or(0, |c| c.units as u64)
    }

    /// Requests refused (each attempt the SDK made).
    pub fn throttles(&self) -> u64 {
        self.limits.throttles(WRITES.name) + self.limits.throttles(READS.name)
    }

    async fn admit(&self, limit: Limit) -> Result<(), RateError> {
        self.limits
            .admit(&[Charge::new(limit, "", 1.0)])
            .await
            .map_err(|e| RateError(format!("the rate item's partition: {e}")))
    }
}

impl<B: RateBucket> RateBucket for ItemLimit<B> {
    async fn take(&self, request: &SlotRequest) -> Result<Taken, RateError> {
        self.admit(WRITES).await?;
        let taken = self.inner.take(request).await?;
        if taken.slots.count > 0 && taken.slots.first_us == request.now_us {
            self.admit(WRITES).await?;
        }
        Ok(taken)
    }

    async fn change_rate(
        &self,
        seen: Option<&SharedRate>,
        next: &SharedRate,
    ) -> Result<bool, RateError> {
        self.admit(WRITES).await?;
        self.inner.change_rate(seen, next).await
    }

    async fn read(&self) -> Result<RateView, RateError> {
        self.admit(READS).await?;
        self.inner.read().await
    }
}

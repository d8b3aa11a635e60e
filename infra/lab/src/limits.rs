//! AWS's throughput limits as the lab enforces them: token buckets, one per limit and key
//! (a DynamoDB partition, a table, an index, an account's EventBridge invocations), each
//! refilled at its rate and holding one second of it. A request is charged to every bucket
//! it touches at once, and passes only if all of them have room: a base-table write whose
//! global secondary index partition is out of capacity is throttled with it (DynamoDB's
//! back-pressure). A refused request is tried again as the SDK's standard retry mode does
//! (three attempts in all, exponential backoff with full jitter, the first up to a second),
//! and fails with a ThrottlingException after the last, so a design that exceeds a limit
//! fails in the lab as it would on AWS. Each limit counts its units and its throttles.
//!
//! A limit marked as an on-demand table's (`Throughput::grows`) starts at its rate and
//! grows as DynamoDB's on-demand capacity does: up to twice the busiest second it served
//! 30 minutes or more ago, never above the table's quota.

use mailflow_local::seed::Rng;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The SDK's standard retry mode: attempts in all, and the first backoff's ceiling.
pub const ATTEMPTS: u32 = 3;
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// How long DynamoDB takes to make an on-demand table's peak its new baseline: it serves
/// twice a peak at once and scales beyond it within 30 minutes.
pub const ON_DEMAND_GROWTH_AFTER: Duration = Duration::from_secs(30 * 60);

/// One limit: its name (as reports and errors say it) and its rate, units a second.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    pub name: &'static str,
    pub per_second: f64,
}

/// What one request costs under one limit: the limit, the key within it (a partition key;
/// empty for a limit on the whole table or account) and its units.
#[derive(Clone, Debug)]
pub struct Charge {
    pub limit: Limit,
    pub key: String,
    pub units: f64,
}

impl Charge {
    pub fn new(limit: Limit, key: impl Into<String>, units: f64) -> Self {
        Self {
            limit,
            key: key.into(),
            units,
        }
    }
}

/// The request was refused on its last attempt: which limit and key held it back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ThrottlingException: {limit} {key} exceeded its throughput after {ATTEMPTS} attempts")]
pub struct Throttled {
    pub limit: &'static str,
    pub key: String,
}

/// Units served and throttles, per limit.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Counts {
    pub units: f64,
    pub throttles: u64,
    /// The most units one key took in any one second.
    pub peak_key_per_second: f64,
}

pub struct Throughput {
    state: Mutex<State>,
}

struct State {
    buckets: HashMap<(&'static str, String), Bucket>,
    counts: HashMap<&'static str, Counts>,
    growing: HashMap<&'static str, Growth>,
    rng: Rng,
}

/// An on-demand table's capacity as it grows from its start.
struct Growth {
    /// The table's quota: it grows no further.
    ceiling: f64,
    /// Whole seconds served (start, units), until they are old enough to count as a peak.
    seconds: VecDeque<(Instant, f64)>,
    /// The busiest of the seconds at least `ON_DEMAND_GROWTH_AFTER` old.
    settled_peak: f64,
}

impl Growth {
    /// What the table serves now: its start, or twice its settled peak, within its quota.
    fn per_second(&mut self, start: f64, now: Instant) -> f64 {
        while let Some(&(began, units)) = self.seconds.front() {
            if now.duration_since(began) < ON_DEMAND_GROWTH_AFTER {
                break;
            }
            self.settled_peak = self.settled_peak.max(units);
            self.seconds.pop_front();
        }
        start.max(2.0 * self.settled_peak).min(self.ceiling)
    }
}

struct Bucket {
    level: f64,
    refilled: Instant,
    /// Units taken in the current whole second since `second_started`.
    this_second: f64,
    second_started: Instant,
}

impl Throughput {
    pub fn new(seed: u64) -> Self {
        Self {
            state: Mutex::new(State {
                buckets: HashMap::new(),
                counts: HashMap::new(),
                growing: HashMap::new(),
                rng: Rng::new(seed),
            }),
        }
    }

    /// Waits until every charge fits its bucket (then takes them all), or fails as the SDK
    /// does after its last attempt.
    pub async fn admit(&self, charges: &[Charge]) -> Result<(), Throttled> {
        for attempt in 0..ATTEMPTS {
            let refused = {
                let mut state = mailflow::runtime::lock(&self.state);
                match state.try_take(charges) {
                    Ok(()) => return Ok(()),
                    Err(refused) => {
                        let backoff =
                            FIRST_BACKOFF.mul_f64(state.rng.unit() * f64::from(1u32 << attempt));
                        (refused, backoff)
                    }
                }
            };
            if attempt + 1 == ATTEMPTS {
                return Err(refused.0);
            }
            tokio::time::sleep(refused.1).await;
        }
        unreachable!("the last attempt returns")
    }

    /// BatchWriteItem's way: each item (its charges) taken on its own, the refused ones
    /// coming back unprocessed (`false`). Only a call whose every item is refused is
    /// throttled as a whole, and the SDK retries it as `admit` does, failing after its last
    /// attempt.
    pub async fn admit_each(&self, items: &[Vec<Charge>]) -> Result<Vec<bool>, Throttled> {
        for attempt in 0..ATTEMPTS {
            let refused = {
                let mut state = mailflow::runtime::lock(&self.state);
                let mut refused = None;
                let taken: Vec<bool> = (items.iter())
                    .map(|charges| match state.try_take(charges) {
                        Ok(()) => true,
                        Err(e) => {
                            refused.get_or_insert(e);
                            false
                        }
                    })
                    .collect();
                match refused {
                    Some(refused) if !taken.contains(&true) => {
                        let backoff =
                            FIRST_BACKOFF.mul_f64(state.rng.unit() * f64::from(1u32 << attempt));
                        (refused, backoff)
                    }
                    _ => return Ok(taken),
                }
            };
            if attempt + 1 == ATTEMPTS {
                return Err(refused.0);
            }
            tokio::time::sleep(refused.1).await;
        }
        unreachable!("the last attempt returns")
    }

    /// `limit` is a new on-demand table's (or index's): it grows from its rate up to
    /// `ceiling`, as DynamoDB grows it (`ON_DEMAND_GROWTH_AFTER`).
    pub fn grows(&self, limit: Limit, ceiling: f64) {
        mailflow::runtime::lock(&self.state).growing.insert(
            limit.name,
            Growth {
                ceiling,
                seconds: VecDeque::new(),
                settled_peak: 0.0,
            },
        );
    }

    /// Units and throttles per limit, by name.
    pub fn counts(&self) -> HashMap<&'static str, Counts> {
        mailflow::runtime::lock(&self.state).counts.clone()
    }

    /// Throttles of one limit.
    pub fn throttles(&self, limit: &str) -> u64 {
        self.counts().get(limit).map_or(0, |c| c.throttles)
    }
}

impl State {
    fn try_take(&mut self, charges: &[Charge]) -> Result<(), Throttled> {
        let now = Instant::now();
        for charge in charges {
            let bucket = self
                .buckets
                .entry((charge.limit.name, charge.key.clone()))
                .or_insert_with(|| Bucket {
                    level: charge.limit.per_second,
                    refilled: now,
                    this_second: 0.0,
                    second_started: now,
                });
            debug_assert!(
                charge.key.is_empty() || !self.growing.contains_key(charge.limit.name),
                "a growing limit is a whole table's: it has no keys"
            );
            let per_second = match self.growing.get_mut(charge.limit.name) {
                Some(growth) => growth.per_second(charge.limit.per_second, now),
                None => charge.limit.per_second,
            };
            let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
            bucket.refilled = now;
            bucket.level = (bucket.level + elapsed * per_second).min(per_second);
            if bucket.level < charge.units {
                self.counts.entry(charge.limit.name).or_default().throttles += 1;
                return Err(Throttled {
                    limit: charge.limit.name,
                    key: charge.key.clone(),
                });
            }
        }
        for charge in charges {
            let bucket = self
                .buckets
                .get_mut(&(charge.limit.name, charge.key.clone()))
                .expect("refilled above");
            bucket.level -= charge.units;
            if now.duration_since(bucket.second_started) >= Duration::from_secs(1) {
                if let Some(growth) = self.growing.get_mut(charge.limit.name) {
                    // A second's burst (the bucket's one second held) is not a peak the
                    // table scales to: what it served at its rate is.
                    let rate = growth.per_second(charge.limit.per_second, now);
                    (growth.seconds)
                        .push_back((bucket.second_started, bucket.this_second.min(rate)));
                }
                bucket.second_started = now;
                bucket.this_second = 0.0;
            }
            bucket.this_second += charge.units;
            let counts = self.counts.entry(charge.limit.name).or_default();
            counts.units += charge.units;
            counts.peak_key_per_second = counts.peak_key_per_second.max(bucket.this_second);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARTITION: Limit = Limit {
        name: "partition",
        per_second: 10.0,
    };
    const TABLE: Limit = Limit {
        name: "table",
        per_second: 15.0,
    };

    #[tokio::test(start_paused = true)]
    async fn a_key_serves_its_rate_and_a_request_beyond_it_fails_after_the_sdks_retries() {
        let limits = Throughput::new(1);
        for _ in 0..10 {
            limits
                .admit(&[Charge::new(PARTITION, "a", 1.0)])
                .await
                .unwrap();
        }
        // Another key has its own bucket.
        limits
            .admit(&[Charge::new(PARTITION, "b", 1.0)])
            .await
            .unwrap();
        // Ten more at once on "a": the bucket refills at 10/s while they back off, so
        // some pass on a retry; a steady 30/s on one key cannot.
        let mut refused = 0;
        for _ in 0..30 {
            if limits
                .admit(&[Charge::new(PARTITION, "a", 10.0)])
                .await
                .is_err()
            {
                refused += 1;
            }
        }
        assert!(refused > 0);
        assert!(limits.throttles("partition") > 0);
    }

    /// A new on-demand table asked for four times its start: it serves its start for 30
    /// minutes, then twice that peak, then its quota.
    #[tokio::test(start_paused = true)]
    async fn a_new_on_demand_table_doubles_its_peak_each_half_hour_up_to_its_quota() {
        let limits = Throughput::new(4);
        limits.grows(TABLE, 35.0);
        let mut served = [0u32; 3];
        // 40 requests of one unit a second for 65 minutes, each tried once.
        for tick in 0..(65 * 60 * 40) {
            tokio::time::advance(Duration::from_millis(25)).await;
            let taken = mailflow::runtime::lock(&limits.state)
                .try_take(&[Charge::new(TABLE, "", 1.0)])
                .is_ok();
            let minute = tick / (60 * 40);
            let window = match minute {
                1..=28 => 0,
                31..=58 => 1,
                61.. => 2,
                _ => continue,
            };
            served[window] += u32::from(taken);
        }
        let per_second = |served: u32, minutes: u32| f64::from(served) / f64::from(minutes * 60);
        let first = per_second(served[0], 28);
        let second = per_second(served[1], 28);
        let third = per_second(served[2], 4);
        assert!((first - 15.0).abs() < 0.5, "{first}");
        assert!((second - 30.0).abs() < 0.5, "{second}");
        assert!((third - 35.0).abs() < 0.5, "{third}");
    }

    /// A table used below its start does not grow: its peak is what it served.
    #[tokio::test(start_paused = true)]
    async fn a_new_on_demand_table_used_lightly_stays_at_its_start() {
        let limits = Throughput::new(5);
        limits.grows(TABLE, 35.0);
        let mut served = 0u32;
        // 4 a second for 40 minutes, then 40 a second for 2 minutes.
        for tick in 0..(40 * 60 * 4) {
            tokio::time::advance(Duration::from_millis(250)).await;
            let taken = mailflow::runtime::lock(&limits.state)
                .try_take(&[Charge::new(TABLE, "", 1.0)])
                .is_ok();
            assert!(taken, "at {tick}");
        }
        for _ in 0..(2 * 60 * 40) {
            tokio::time::advance(Duration::from_millis(25)).await;
            served += u32::from(
                mailflow::runtime::lock(&limits.state)
                    .try_take(&[Charge::new(TABLE, "", 1.0)])
                    .is_ok(),
            );
        }
        let per_second = f64::from(served) / 120.0;
        assert!((per_second - 15.0).abs() < 0.5, "{per_second}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_returns_its_refused_items_and_fails_only_when_all_are() {
        let limits = Throughput::new(3);
        let item = |key: &str| vec![Charge::new(PARTITION, key, 6.0)];
        // "a" has room for one item of 6 units, "b" for one: the second of each comes back.
        let taken = limits
            .admit_each(&[item("a"), item("a"), item("b"), item("b")])
            .await
            .unwrap();
        assert_eq!(taken, [true, false, true, false]);
        // Nothing fits at once, but the SDK's backoff lets "a" refill.
        let later = limits.admit_each(&[item("a")]).await.unwrap();
        assert_eq!(later, [true]);
        // A call whose every item is too big for its bucket fails after the retries.
        let refused = limits
            .admit_each(&[vec![Charge::new(PARTITION, "c", 11.0)]])
            .await
            .unwrap_err();
        assert_eq!(refused.key, "c");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_refused_whole_when_any_of_its_buckets_is_out() {
        let limits = Throughput::new(2);
        // The table allows 15 a second across keys: 10 on "a" and 5 on "b" fit...
        limits
            .admit(&[
                Charge::new(PARTITION, "a", 10.0),
                Charge::new(TABLE, "", 10.0),
            ])
            .await
            .unwrap();
        limits
            .admit(&[
                Charge::new(PARTITION, "b", 5.0),
                Charge::new(TABLE, "", 5.0),
            ])
            .await
            .unwrap();
        // ...and one more on a fresh key waits for the table, not the partition.
        let started = Instant::now();
        limits
            .admit(&[
                Charge::new(PARTITION, "c", 5.0),
                Charge::new(TABLE, "", 5.0),
            ])
            .await
            .unwrap();
        assert!(started.elapsed() > Duration::ZERO);
        let counts = limits.counts();
        assert_eq!(counts["table"].units, 20.0);
        // The refused attempt took nothing from "c".
        assert_eq!(counts["partition"].units, 20.0);
        assert!(counts["table"].throttles >= 1);
    }
}

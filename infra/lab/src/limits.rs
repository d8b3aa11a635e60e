//! AWS's throughput limits as the lab enforces them: token buckets, one per limit and key
//! (a DynamoDB partition, a table, an index, an account's EventBridge invocations), each
//! refilled at its rate and holding one second of it. A request is charged to every bucket
//! it touches at once, and passes only if all of them have room: a base-table write whose
//! global secondary index partition is out of capacity is throttled with it (DynamoDB's
//! back-pressure). A refused request is tried again as the SDK's standard retry mode does
//! (three attempts in all, exponential backoff with full jitter, the first up to a second),
//! and fails with a ThrottlingException after the last, so a design that exceeds a limit
//! fails in the lab as it would on AWS. Each limit counts its units and its throttles.

use mailflow_local::seed::Rng;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The SDK's standard retry mode: attempts in all, and the first backoff's ceiling.
pub const ATTEMPTS: u32 = 3;
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);

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
    rng: Rng,
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
            let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
            bucket.refilled = now;
            bucket.level =
                (bucket.level + elapsed * charge.limit.per_second).min(charge.limit.per_second);
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

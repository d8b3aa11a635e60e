//! The send rate, in one place. `SendRate` is the ceiling: the configured rate, or SES's
//! maximum when that is lower. `SharedRate` is what the whole stack sends at now, kept in one
//! item every SendEmail environment shares (`ports::RateBucket`): the ceiling, lowered after
//! SES throttles (multiplicative decrease) and raised back step by step while it does not
//! (additive increase). `Slots` are the send times an environment takes from that item, a
//! chunk at a time, so that together the environments never send faster than the shared rate.
//! `SendRate::environments` derives SendEmail's concurrency from the rate and the
//! `Environment` it runs in.

use std::time::Duration;

/// Why SES's quota is not known (the configured rate is used then): one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuotaUnknown(pub String);

/// What SES lets the account send (read by `Mailer::send_quota`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendQuota {
    /// Emails per second.
    pub max_send_rate: f64,
    /// Emails per rolling 24 hours, and how many of them are used.
    pub max_24_hour_send: f64,
    pub sent_last_24_hours: f64,
}

impl SendQuota {
    /// Emails the rolling 24 hours still allow; None when there is no limit (SES's
    /// `Max24HourSend` of -1).
    pub fn left_24_hours(&self) -> Option<f64> {
        (self.max_24_hour_send >= 0.0)
            .then(|| (self.max_24_hour_send - self.sent_last_24_hours).max(0.0))
    }

    /// The 24-hour quota as an operator reads it: "120 of 50000 used", or "unlimited".
    pub fn describe_24_hours(&self) -> String {
        match self.left_24_hours() {
            Some(_) => format!(
                "{} of {} used",
                self.sent_last_24_hours, self.max_24_hour_send
            ),
            None => format!("unlimited ({} sent)", self.sent_last_24_hours),
        }
    }
}

/// SendEmail's CPU time per email on one vCPU: the highest measured (2,032 µs, among 21 runs
/// of `infra/bench-compare.sh` on a loaded two-core machine), rounded up, so that the
/// concurrency sized from it errs towards more environments. Lambda gives a function CPU in
/// proportion to its memory, one vCPU at `MB_PER_VCPU`: at 128 MB an email takes 29 ms of
/// an environment's time.
pub const CPU_US_PER_EMAIL: f64 = 2_100.0;
pub const MB_PER_VCPU: f64 = 1_769.0;
/// What a batch waits for besides CPU: the receive, the claims, SES, the marks, and its
/// slowest record (one environment of 10 records, SES answering in 30-80 ms and the ledger
/// in 5-15 ms, takes 0.11 s a batch without CPU: `mailctl rate --environment-throughput`,
/// docs/benchmarks.md). 0.25 leaves room for an SES or a DynamoDB slower than that.
pub const BATCH_ROUND_TRIPS_S: f64 = 0.25;
/// DynamoDB serves one item at most 1,000 write units per second; takes of the rate item
/// (one unit each: the item stays under 1 KB) are kept to a fifth of that, for rate changes
/// and for room.
pub const RATE_ITEM_TAKES_PER_SECOND: f64 = 200.0;

/// SQS event source mappings take a MaximumConcurrency from 2 to 1000.
const MIN_ENVIRONMENTS: u32 = 2;
const MAX_ENVIRONMENTS: u32 = 1000;

/// One SendEmail environment as deployed: the records it sends at once (its batch,
/// `EmailsBatchSize`, and `RECORD_CONCURRENCY`) and its memory (`SendEmailMemorySize`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    pub records_at_once: usize,
    pub memory_mb: u32,
}

impl Environment {
    /// The template's defaults.
    pub const DEFAULT: Self = Self {
        records_at_once: 10,
        memory_mb: 128,
    };

    /// Emails per second it sustains: a batch of its records takes their CPU, one after
    /// another on its share of a vCPU, and the round trips.
    pub fn rate(&self) -> f64 {
        let records = self.records_at_once.max(1) as f64;
        let cpu_s = CPU_US_PER_EMAIL / 1e6 * MB_PER_VCPU / f64::from(self.memory_mb.max(1));
        records / (records * cpu_s + BATCH_ROUND_TRIPS_S)
    }

    /// The rate item's takes per second when the stack sends at `rate`, a take per batch
    /// (two batches share one only where batches follow each other within milliseconds).
    pub fn takes_per_second(&self, rate: f64) -> f64 {
        rate / self.records_at_once.max(1) as f64
    }

    /// The smallest batch that keeps the rate item's takes within `RATE_ITEM_TAKES_PER_SECOND`
    /// at `rate` (SQS allows up to 10,000 with a batching window; 100 is this stack's bound).
    pub fn batch_for(rate: f64) -> usize {
        ((rate / RATE_ITEM_TAKES_PER_SECOND).ceil() as usize).clamp(10, 100)
    }
}

/// The ceiling, the whole rule in one place: the configured `SEND_RATE_PER_SECOND`, or SES's
/// maximum send rate when that is lower (sending faster only earns throttling). SendEmail,
/// `mailctl plan` and `mailctl status` all read it from here.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendRate {
    /// `SEND_RATE_PER_SECOND`.
    pub configured: f64,
    /// SES's `MaxSendRate`, when SES said it.
    pub ses_max: Option<f64>,
}

impl SendRate {
    /// The configured rate alone (SES's quota not asked).
    pub fn configured(configured: f64) -> Self {
        Self {
            configured,
            ses_max: None,
        }
    }

    /// The rate once SES's quota is read. Where SES did not say (`quota` is the reason), the
    /// configured rate; either way the outcome is logged.
    pub fn with_quota(configured: f64, quota: &Result<SendQuota, QuotaUnknown>) -> Self {
        let rate = Self {
            ses_max: quota.as_ref().ok().map(|q| q.max_send_rate),
            ..Self::configured(configured)
        };
        match quota {
            Ok(quota) => {
                tracing::info!(
                    configured,
                    max_send_rate = quota.max_send_rate,
                    max_24_hour_send = quota.max_24_hour_send,
                    sent_last_24_hours = quota.sent_last_24_hours,
                    effective = rate.campaign_wide(),
                    "SES quota read"
                );
                if rate.capped_by_ses() {
                    tracing::warn!(
                        configured,
                        effective = rate.campaign_wide(),
                        "SEND_RATE_PER_SECOND is above the account's maximum send rate: sending at the maximum"
                    );
                }
            }
            Err(reason) => tracing::info!(
                %reason,
                configured,
                "SES quota not known: sending at the configured SEND_RATE_PER_SECOND"
            ),
        }
        rate
    }

    /// `with_quota` for a stack that may use `share` (0 to 1) of the account's maximum send
    /// rate: two stacks on one SES account each take their part, not all of it.
    pub fn with_quota_share(
        configured: f64,
        share: f64,
        quota: &Result<SendQuota, QuotaUnknown>,
    ) -> Self {
        let ours = quota.clone().map(|q| SendQuota {
            max_send_rate: q.max_send_rate * share,
            ..q
        });
        Self::with_quota(configured, &ours)
    }

    /// Whether SES's maximum, not the configuration, sets the rate.
    pub fn capped_by_ses(&self) -> bool {
        self.ses_max.is_some_and(|max| max < self.configured)
    }

    /// Emails per second, all environments together, before any throttling.
    pub fn campaign_wide(&self) -> f64 {
        match self.ses_max {
            Some(max) => self.configured.min(max),
            None => self.configured,
        }
    }

    /// Where the ceiling comes from.
    pub fn source(&self) -> RateSource {
        if self.capped_by_ses() {
            RateSource::SesQuota
        } else {
            RateSource::Configured
        }
    }

    /// SendEmail's MaximumConcurrency for this rate: enough environments like `environment`
    /// to carry it, within what an SQS event source mapping allows.
    pub fn environments(&self, environment: &Environment) -> u32 {
        let needed = (self.campaign_wide() / environment.rate()).ceil();
        (needed as u32).clamp(MIN_ENVIRONMENTS, MAX_ENVIRONMENTS)
    }
}

/// What sets the shared rate now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RateSource {
    /// `SEND_RATE_PER_SECOND`.
    Configured,
    /// SES's maximum send rate, below the configured rate.
    SesQuota,
    /// Lowered after SES throttled, on its way back to the ceiling.
    Throttled,
}

impl RateSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::SesQuota => "SES quota",
            Self::Throttled => "lowered after throttling",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Configured, Self::SesQuota, Self::Throttled]
            .into_iter()
            .find(|s| s.as_str() == raw)
    }
}

/// A throttle lowers the shared rate to this share of what it was...
const DECREASE: f64 = 0.7;
/// ...at most once per this long: the throttles of one burst count once.
const DECREASE_SPACING_MS: u64 = 1_000;
/// While SES does not throttle, the rate climbs back by this share of itself plus this share
/// of the ceiling (quickly from far below, carefully near the top: from the floor to the
/// ceiling in 8 steps, from a single decrease in 2)...
const GROWTH: f64 = 0.25;
const INCREASE: f64 = 0.05;
/// ...once per this long.
const INCREASE_STEP_MS: u64 = 1_000;
/// Never below this share of the ceiling (nor 0.1 email/s): a long refusal must not stop
/// the stack for minutes after SES is back.
const FLOOR: f64 = 0.02;

/// The rate every environment shares, as the stack's rate item holds it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SharedRate {
    /// Emails per second, now.
    pub rate: f64,
    /// The `SendRate` it returns to.
    pub ceiling: f64,
    pub source: RateSource,
    /// When it last changed (ms since the epoch): the version its conditional writes check.
    pub changed_at_ms: u64,
    /// When a throttle last lowered it (0: never).
    pub lowered_at_ms: u64,
    /// The ceiling is SES's maximum send rate, read by the environment that wrote it (below
    /// the configured rate): one that cannot read the quota keeps it.
    pub ceiling_from_ses: bool,
}

impl SharedRate {
    /// The rate at the ceiling, as a stack starts.
    pub fn at(ceiling: &SendRate, now_ms: u64) -> Self {
        Self {
            rate: ceiling.campaign_wide(),
            ceiling: ceiling.campaign_wide(),
            source: ceiling.source(),
            changed_at_ms: now_ms,
            lowered_at_ms: 0,
            ceiling_from_ses: ceiling.capped_by_ses(),
        }
    }

    /// Whether throttling has pushed it down to its floor (`FLOOR` of the ceiling): SES
    /// refusing for as long as this lasts is what the rate-at-floor alarm is for.
    pub fn at_floor(&self) -> bool {
        self.rate <= (self.ceiling * FLOOR).max(0.1) + 1e-9
    }

    /// What the rate becomes at `now_ms` under `ceiling` (this environment's view of it),
    /// after SES throttled (`throttled`) or not; None when it stays as it is.
    pub fn next(&self, ceiling: &SendRate, now_ms: u64, throttled: bool) -> Option<Self> {
        let top = ceiling.campaign_wide();
        let since = now_ms.saturating_sub(self.changed_at_ms);
        let floor = (top * FLOOR).max(0.1);
        let rate = if throttled {
            if now_ms.saturating_sub(self.lowered_at_ms) < DECREASE_SPACING_MS {
                return None;
            }
            (self.rate.min(top) * DECREASE).max(floor)
        } else if (self.ceiling - top).abs() > 1e-9 {
            match self.source {
                RateSource::Throttled => self.rate.min(top),
                _ => top,
            }
        } else if self.rate < top && since >= INCREASE_STEP_MS {
            (self.rate * (1.0 + GROWTH) + top * INCREASE).min(top)
        } else {
            return None;
        };
        Some(Self {
            rate,
            ceiling: top,
            source: if rate < top {
                RateSource::Throttled
            } else {
                ceiling.source()
            },
            changed_at_ms: now_ms.max(self.changed_at_ms + 1),
            lowered_at_ms: if throttled {
                now_ms
            } else {
                self.lowered_at_ms
            },
            ceiling_from_ses: ceiling.capped_by_ses(),
        })
    }
}

/// A take's slots span at most this much of the schedule (at 14/s, 20 slots; at 20,000/s it
/// never binds): a big batch at a low rate must not reserve the schedule for longer than its
/// invocation can use it.
pub const MAX_CHUNK_SPAN: Duration = Duration::from_millis(1_500);

/// The ceiling to pace under: `ceiling`, or, where it holds no SES maximum (the quota was not
/// read), the lower SES-derived one `seen` carries (RateControl wrote it). A ceiling that is
/// not a positive number is ignored.
pub fn trusted(ceiling: &SendRate, seen: Option<&SharedRate>) -> SendRate {
    match seen {
        Some(seen)
            if ceiling.ses_max.is_none()
                && seen.ceiling_from_ses
                && seen.ceiling.is_finite()
                && seen.ceiling > 0.0
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

/// A slot later than this is not used (an environment that fell behind must not send its
/// missed slots in a burst): SES tolerates short bursts, well above this.
pub const MAX_LATENESS: Duration = Duration::from_millis(250);

/// Send times taken from the shared bucket: `count` slots `interval_us` apart from `first_us`
/// (µs since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slots {
    pub first_us: u64,
    pub interval_us: u64,
    pub count: u32,
}

impl Slots {
    /// The interval between two slots at `rate` emails per second.
    pub fn interval_at(rate: f64) -> u64 {
        (1e6 / rate).round().max(1.0) as u64
    }

    /// The slot times, in order.
    pub fn times(&self) -> impl Iterator<Item = u64> + '_ {
        (0..u64::from(self.count)).map(|i| self.first_us + i * self.interval_us)
    }
}

/// How many slots an environment takes at once for `demand` records that may send. In a
/// deep queue (`deep`: this batch and the one before were full) its slots and the next
/// batch's, which comes within milliseconds: one DynamoDB write serves two batches.
/// Otherwise exactly its slots, since slots taken and not used are lost to every environment
/// (a stack with more environments than batches, the end of a campaign). At most two full
/// batches: at 14 emails/s and batches of 10, 1.4 s of sending.
pub fn chunk_for(demand: usize, deep: bool, batch: usize) -> u32 {
    let max = 2 * batch.max(1) as u32;
    if deep && demand >= batch {
        max
    } else {
        (demand.clamp(1, max as usize)) as u32
    }
}

/// Microseconds since the epoch.
pub fn epoch_us(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// When the sends would end, one after another at the rate from the instant each may go.
#[derive(Debug, Default, PartialEq)]
pub struct SendsAtRate {
    /// When the last email goes (None: nothing to send).
    pub last_ms: Option<i64>,
    /// Emails that would go after the deadline.
    pub past_deadline: u64,
}

/// `starts`: emails by the instant their users may go. Each group goes at `rate` from its
/// instant or once the one before has finished, whichever is later (as
/// `local_time::slot_loads`). `mailctl plan` and the end of a campaign's fan-out (GetUsers)
/// weigh a deadline with it.
pub fn sends_at_rate(
    starts: &std::collections::BTreeMap<i64, u64>,
    rate: f64,
    deadline_ms: Option<i64>,
) -> SendsAtRate {
    let ms_per_email = 1000.0 / rate.max(0.001);
    let mut free_at = f64::MIN;
    let mut past = 0.0;
    for (at, emails) in starts {
        let start = free_at.max(*at as f64);
        let finish = start + *emails as f64 * ms_per_email;
        free_at = finish;
        if let Some(deadline) = deadline_ms.map(|d| d as f64).filter(|d| finish > *d) {
            past += ((finish - deadline.max(start)) / ms_per_email).min(*emails as f64);
        }
    }
    SendsAtRate {
        last_ms: (!starts.is_empty()).then(|| free_at.ceil() as i64),
        past_deadline: past.ceil() as u64,
    }
}

#[cfg(test)]
mod tests;

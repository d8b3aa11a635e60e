//! An SES stand-in that enforces the account's maximum send rate as SES does: recipients per
//! second, with short bursts tolerated (a token bucket holding `burst` seconds of the rate),
//! and 429 "Maximum sending rate exceeded" beyond it; each call takes a latency drawn from a
//! range. It can also refuse everything for a while (an outage of the quota), and it keeps
//! what the run needs to judge: every acceptance with its time, every throttle.

use mailflow::domain::send_rate::{QuotaUnknown, SendQuota};
use mailflow::ports::{Mailer, OutgoingEmail, SendError};
use mailflow_local::seed::Rng;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub struct StandInSes {
    max_send_rate: f64,
    burst: f64,
    latency: (Duration, Duration),
    state: Mutex<State>,
    /// Refuse every send (429) from `.0` to `.1` after the start.
    pub refuse_between: Option<(Duration, Duration)>,
    started: Instant,
}

struct State {
    tokens: f64,
    refilled: Instant,
    rng: Rng,
    /// When each email was accepted, by (campaign, user).
    accepted: HashMap<(String, String), Vec<Instant>>,
    throttled: Vec<Instant>,
}

/// What the stand-in saw.
pub struct Seen {
    pub accepted: HashMap<(String, String), Vec<Instant>>,
    pub throttled: Vec<Instant>,
}

impl StandInSes {
    pub fn new(max_send_rate: f64, latency: (Duration, Duration), seed: u64) -> Self {
        let now = Instant::now();
        Self {
            max_send_rate,
            burst: 1.0,
            latency,
            state: Mutex::new(State {
                tokens: max_send_rate,
                refilled: now,
                rng: Rng::new(seed),
                accepted: HashMap::new(),
                throttled: Vec::new(),
            }),
            refuse_between: None,
            started: now,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        mailflow::runtime::lock(&self.state)
    }

    /// How many emails were accepted at least once.
    pub fn accepted_count(&self) -> usize {
        self.state().accepted.len()
    }

    pub fn seen(&self) -> Seen {
        let state = self.state();
        Seen {
            accepted: state.accepted.clone(),
            throttled: state.throttled.clone(),
        }
    }

    /// Takes a token at `now`, or says the rate is exceeded.
    fn admit(&self, state: &mut State, now: Instant) -> bool {
        let capacity = (self.max_send_rate * self.burst).max(1.0);
        let elapsed = now.duration_since(state.refilled).as_secs_f64();
        state.tokens = (state.tokens + elapsed * self.max_send_rate).min(capacity);
        state.refilled = now;
        if let Some((from, to)) = self.refuse_between {
            let since = now.duration_since(self.started);
            if since >= from && since < to {
                return false;
            }
        }
        if state.tokens >= 1.0 {
            state.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The stand-in as every environment's mailer.
#[derive(Clone)]
pub struct Ses(pub std::sync::Arc<StandInSes>);

impl Mailer for Ses {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        self.0.send(email).await
    }

    async fn send_quota(&self) -> Result<SendQuota, QuotaUnknown> {
        Ok(self.0.quota())
    }
}

impl StandInSes {
    pub async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        let (low, high) = self.latency;
        let latency = {
            let mut state = self.state();
            low + (high - low).mul_f64(state.rng.unit())
        };
        // SES decides on arrival; the answer takes the rest of the round trip.
        tokio::time::sleep(latency / 2).await;
        let now = Instant::now();
        let admitted = {
            let mut state = self.state();
            let admitted = self.admit(&mut state, now);
            if admitted {
                let key = (
                    email.key.campaign_id().to_owned(),
                    email.key.user_id().to_owned(),
                );
                state.accepted.entry(key).or_default().push(now);
            } else {
                state.throttled.push(now);
            }
            admitted
        };
        tokio::time::sleep(latency / 2).await;
        if admitted {
            Ok(format!("standin-{}", now.elapsed().as_nanos()))
        } else {
            Err(SendError::Throttled(
                "TooManyRequestsException: Maximum sending rate exceeded.".into(),
            ))
        }
    }

    pub fn quota(&self) -> SendQuota {
        SendQuota {
            max_send_rate: self.max_send_rate,
            max_24_hour_send: 1e9,
            sent_last_24_hours: 0.0,
        }
    }
}

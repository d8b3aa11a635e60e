//! An SES stand-in that enforces the account's maximum send rate as SES does: recipients per
//! second, with short bursts tolerated (a token bucket holding `burst` seconds of the rate),
//! and 429 "Maximum sending rate exceeded" beyond it; each call takes a latency drawn from a
//! range. It can hold the account's 24-hour quota as SES does (a rolling window of
//! acceptances, "Daily message quota exceeded" once it is full), refuse everything for a
//! while (an outage of the quota), and it keeps what the run needs to judge: every
//! acceptance with its time, every throttle, every refusal for the 24-hour quota.

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
    /// The account's `Max24HourSend` (None: more than any run sends).
    max_24_hour_send: Option<usize>,
    started: Instant,
}

/// SES's rolling window for `Max24HourSend`.
const DAY: Duration = Duration::from_secs(86_400);

struct State {
    tokens: f64,
    refilled: Instant,
    rng: Rng,
    /// When each email was accepted, by (campaign, user).
    accepted: HashMap<(String, String), Vec<Instant>>,
    throttled: Vec<Instant>,
    /// Every acceptance in order: the 24-hour window counts from them.
    window: std::collections::VecDeque<Instant>,
    over_daily_quota: Vec<Instant>,
    /// Acceptances so far: each message id is unique, as SES's are.
    ids: u64,
}

/// What the stand-in saw.
pub struct Seen {
    pub accepted: HashMap<(String, String), Vec<Instant>>,
    pub throttled: Vec<Instant>,
    /// Sends refused because the 24-hour quota was used up.
    pub over_daily_quota: Vec<Instant>,
}

/// Why a send was not accepted.
enum Refusal {
    Rate,
    DailyQuota,
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
                window: Default::default(),
                over_daily_quota: Vec::new(),
                ids: 0,
            }),
            refuse_between: None,
            max_24_hour_send: None,
            started: now,
        }
    }

    /// The same, holding `Max24HourSend` (None: more than any run sends).
    pub fn with_daily_quota(mut self, max_24_hour_send: Option<usize>) -> Self {
        self.max_24_hour_send = max_24_hour_send;
        self
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
            over_daily_quota: state.over_daily_quota.clone(),
        }
    }

    /// Acceptances within the 24 hours before `now` (older ones leave the window).
    fn sent_last_24_hours(state: &mut State, now: Instant) -> usize {
        while state
            .window
            .front()
            .is_some_and(|t| now.duration_since(*t) >= DAY)
        {
            state.window.pop_front();
        }
        state.window.len()
    }

    /// Takes a token at `now`, or says why not: the 24-hour quota full (no token taken, as
    /// SES counts only what it sends), or the rate exceeded.
    fn admit(&self, state: &mut State, now: Instant) -> Result<(), Refusal> {
        let capacity = (self.max_send_rate * self.burst).max(1.0);
        let elapsed = now.duration_since(state.refilled).as_secs_f64();
        state.tokens = (state.tokens + elapsed * self.max_send_rate).min(capacity);
        state.refilled = now;
        if let Some((from, to)) = self.refuse_between {
            let since = now.duration_since(self.started);
            if since >= from && since < to {
                return Err(Refusal::Rate);
            }
        }
        if self
            .max_24_hour_send
            .is_some_and(|max| Self::sent_last_24_hours(state, now) >= max)
        {
            return Err(Refusal::DailyQuota);
        }
        if state.tokens >= 1.0 {
            state.tokens -= 1.0;
            state.window.push_back(now);
            Ok(())
        } else {
            Err(Refusal::Rate)
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
            let admitted = self.admit(&mut state, now).map(|()| {
                state.ids += 1;
                state.ids
            });
            match admitted {
                Ok(_) => {
                    let key = (
                        email.key.campaign_id().to_owned(),
                        email.key.user_id().to_owned(),
                    );
                    state.accepted.entry(key).or_default().push(now);
                }
                Err(Refusal::Rate) => state.throttled.push(now),
                Err(Refusal::DailyQuota) => state.over_daily_quota.push(now),
            }
            admitted
        };
        tokio::time::sleep(latency / 2).await;
        // As SES answers each (both with a throttling code; the adapter tells them apart by
        // the message).
        match admitted {
            Ok(id) => Ok(format!("standin-{id:016x}")),
            Err(Refusal::Rate) => Err(SendError::Throttled(
                "TooManyRequestsException: Maximum sending rate exceeded.".into(),
            )),
            Err(Refusal::DailyQuota) => Err(SendError::DailyQuota(
                "TooManyRequestsException: Daily message quota exceeded.".into(),
            )),
        }
    }

    pub fn quota(&self) -> SendQuota {
        let sent = Self::sent_last_24_hours(&mut self.state(), Instant::now());
        SendQuota {
            max_send_rate: self.max_send_rate,
            max_24_hour_send: self.max_24_hour_send.map_or(1e9, |max| max as f64),
            sent_last_24_hours: sent as f64,
        }
    }
}

//! The faults the chaos run injects: kills at chosen points of CreateEmails and SendEmail
//! (through the runner's `Faults`), SES throttling and lost answers (through a mailer that
//! wraps SES), and the record of what was done, for the checks.

use super::ChaosOptions;
use anyhow::Result;
use mailflow::adapters::ses::SesMailer;
use mailflow::ports::{Mailer, OutgoingEmail, SendError};
use mailflow_local::pipeline::{lock, CREATE_EMAILS, SEND_EMAIL};
use mailflow_local::runner::{self, Faults, Kill};
use mailflow_local::seed::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fault injector did, shared by the event source mappings and the mailer.
pub(super) struct Injector {
    pub(super) kill_share: f64,
    pub(super) send_kill_share: f64,
    pub(super) throttle_share: f64,
    pub(super) rng: Mutex<Rng>,
    pub(super) kills: Mutex<BTreeMap<String, usize>>,
    pub(super) throttles: AtomicUsize,
    pub(super) unknown_outcomes: AtomicUsize,
    /// SES DELIVERY events published (one per accepted email).
    pub(super) send_events: AtomicUsize,
    /// SES calls without an answer, by user: each may have sent an email nobody recorded.
    pub(super) unanswered: Mutex<BTreeMap<String, usize>>,
    /// (request id, user) of every SES call made: from the moment it starts SES may accept
    /// the email, whether or not the invocation lives to see the answer.
    pub(super) calls: Mutex<Vec<(String, String)>>,
    /// Invocations that did not run to the end (killed or timed out).
    pub(super) broken: Mutex<BTreeSet<String>>,
    /// Invocations seen per stage, and SES calls: every `FORCE_EVERY`th one the dice spared
    /// meets a fault point still unmet (`unmet`), so the run meets every fault whatever the
    /// batching.
    seen: Mutex<BTreeMap<&'static str, usize>>,
    ses_calls: AtomicUsize,
}

/// Each stage's kill points, as the report names them (`"<stage>: <point>"`).
const CREATE_EMAILS_POINTS: [&str; 3] = ["before it starts", "before the SQS delete", "part-way"];
const SEND_EMAIL_POINTS: [&str; 2] = ["before the claim", "before the SQS delete"];
const BEFORE_SES: &str = "SendEmail: after the claim, before SES";
const AFTER_SES: &str = "SendEmail: after SES accepted, before SENT";
/// The shares decide the faults; on a loaded machine the queues hand out bigger batches, so
/// fewer invocations, and a CI run of 400 users once met no kill at one point (the test then
/// proves nothing there). So the 20th, 40th... invocation of a stage (and SES call), when the
/// dice spared it, meets a point the run has not met yet, if any: CreateEmails' three points
/// by its 60th invocation at the latest.
const FORCE_EVERY: usize = 20;

impl Injector {
    pub(super) fn new(options: &ChaosOptions) -> Self {
        Self {
            kill_share: options.kill_share,
            send_kill_share: options.send_kill_share,
            throttle_share: options.throttle_share,
            rng: Mutex::new(Rng::new(options.seed ^ 0xC4A0_5EED)),
            kills: Mutex::default(),
            throttles: AtomicUsize::new(0),
            unknown_outcomes: AtomicUsize::new(0),
            send_events: AtomicUsize::new(0),
            unanswered: Mutex::default(),
            calls: Mutex::default(),
            broken: Mutex::default(),
            seen: Mutex::default(),
            ses_calls: AtomicUsize::new(0),
        }
    }

    /// The first of `points` (full names) not met yet.
    fn unmet<'a>(&self, points: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        let kills = lock(&self.kills);
        points.into_iter().find(|p| !kills.contains_key(*p))
    }

    fn roll(&self) -> f64 {
        lock(&self.rng).unit()
    }

    fn killed(&self, point: &str) {
        *lock(&self.kills).entry(point.to_owned()).or_default() += 1;
    }

    /// Per user, the emails that may have gone out without SENT being recorded: every SES
    /// call made in an invocation that was killed or timed out before it finished (SES may
    /// have accepted it and SENT not been written: the one window no key closes), and every
    /// SES call without an answer. Each allows that user one extra email.
    pub(super) fn unrecorded_sends(&self) -> Unrecorded {
        let mut unrecorded = Unrecorded {
            allowed: lock(&self.unanswered).clone(),
            ..Default::default()
        };
        let broken = lock(&self.broken);
        for (request, user) in lock(&self.calls).iter() {
            let cut = broken.contains(request);
            if cut {
                *unrecorded.allowed.entry(user.clone()).or_default() += 1;
            }
            let how = if cut { "cut short" } else { "finished" };
            unrecorded
                .called_in
                .entry(user.clone())
                .or_default()
                .push(format!("{request} ({how})"));
        }
        unrecorded
    }
}

/// Extra emails the faults allow each user, and the invocations that called SES for them
/// (shown when a user got more).
#[derive(Default)]
pub(super) struct Unrecorded {
    pub(super) allowed: BTreeMap<String, usize>,
    pub(super) called_in: BTreeMap<String, Vec<String>>,
}

impl Faults for Injector {
    /// Every message on the users and emails queues, again within 3 s: a fifth at once,
    /// while the first is being handled, the rest after it (as most duplicates arrive).
    fn deliver_twice(&self, function: &str) -> Option<Duration> {
        if function != CREATE_EMAILS && function != SEND_EMAIL {
            return None;
        }
        let mut rng = lock(&self.rng);
        Some(if rng.below(5) == 0 {
            Duration::ZERO
        } else {
            Duration::from_millis(rng.below(3000))
        })
    }

    fn kill(&self, function: &str) -> Option<Kill> {
        let stage = match function {
            CREATE_EMAILS => "CreateEmails",
            SEND_EMAIL => "SendEmail",
            _ => return None,
        };
        let (roll, after) = {
            let mut rng = lock(&self.rng);
            (rng.unit(), Duration::from_millis(rng.below(400)))
        };
        let seen = {
            let mut seen = lock(&self.seen);
            let n = seen.entry(stage).or_default();
            *n += 1;
            *n
        };
        let points: &[&str] = match stage {
            "SendEmail" => &SEND_EMAIL_POINTS,
            _ => &CREATE_EMAILS_POINTS,
        };
        let share = self.kill_share;
        let point = if roll < share {
            points[0]
        } else if roll < 2.0 * share {
            "before the SQS delete"
        } else if stage == "CreateEmails" && roll < 3.0 * share {
            "part-way"
        } else if share > 0.0 && seen % FORCE_EVERY == 0 {
            let full: Vec<String> = points.iter().map(|p| format!("{stage}: {p}")).collect();
            let unmet = self.unmet(full.iter().map(String::as_str))?;
            points[full.iter().position(|p| p == unmet)?]
        } else {
            return None;
        };
        self.killed(&format!("{stage}: {point}"));
        Some(match point {
            "before the SQS delete" => Kill::BeforeDelete,
            "part-way" => Kill::After(after),
            _ => Kill::BeforeStart,
        })
    }

    fn ended(&self, request_id: &str, finished: bool) {
        if !finished {
            lock(&self.broken).insert(request_id.to_owned());
        }
    }
}

/// The real SES adapter behind the injector: throttling, and kills just before and just
/// after the call (the invocation dies there, see `runner::crash`).
#[derive(Clone)]
pub(super) struct ChaosMailer {
    pub(super) inner: SesMailer,
    pub(super) injector: Arc<Injector>,
    /// SES's DELIVERY event for every accepted email, as the configuration set publishes it.
    pub(super) events: mailflow_local::ses_event_source::Publisher,
}

impl Mailer for ChaosMailer {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        let injector = &self.injector;
        let mut roll = injector.roll();
        let (throttle, kill) = (injector.throttle_share, injector.send_kill_share);
        let call = injector.ses_calls.fetch_add(1, Ordering::Relaxed) + 1;
        if roll >= throttle + 2.0 * kill && call % FORCE_EVERY == 0 {
            // A roll that meets the first fault of the send not met yet.
            if throttle > 0.0 && injector.throttles.load(Ordering::Relaxed) == 0 {
                roll = 0.0;
            } else if let Some(point) = injector.unmet([BEFORE_SES, AFTER_SES]) {
                roll = throttle + if point == BEFORE_SES { 0.0 } else { kill };
            }
        }
        if roll < throttle {
            injector.throttles.fetch_add(1, Ordering::Relaxed);
            return Err(SendError::Throttled(
                "TooManyRequestsException: Maximum sending rate exceeded (injected)".into(),
            ));
        }
        if roll < throttle + kill {
            injector.killed(BEFORE_SES);
            runner::crash().await
        }
        let request = runner::current_request_id().unwrap_or_default();
        lock(&injector.calls).push((request, email.key.user_id.clone()));
        let result = self.inner.send(email).await;
        if let Ok(ses_message_id) = &result {
            injector.send_events.fetch_add(1, Ordering::Relaxed);
            self.events
                .delivered(email.key.campaign_id(), &email.key.user_id, ses_message_id);
        }
        match &result {
            Err(SendError::Unknown(_)) => {
                injector.unknown_outcomes.fetch_add(1, Ordering::Relaxed);
                *lock(&injector.unanswered)
                    .entry(email.key.user_id.clone())
                    .or_default() += 1;
            }
            Ok(_) if roll < throttle + 2.0 * kill => {
                injector.killed(AFTER_SES);
                runner::crash().await
            }
            _ => {}
        }
        result
    }
}

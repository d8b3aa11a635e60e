//! SendEmail's exactly-once promise against the local stack: duplicates, overlapping runs,
//! invocations killed at each step, live leases, throttling, permanent rejections, the next
//! week's campaign, and the send rate. Faults are injected around the real SES adapter; an
//! invocation is "killed" the way Lambda does it, by ending it at its Timeout.
//! Each test is a `Scenario`: a stack of its own, its timeouts, and a plan for the fault
//! injector: the catalogue of exactly-once faults (t1 to t12) shares this one fixture.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use mailflow::adapters::sends::SendsLedger;
use mailflow::adapters::ses::SesMailer;
use mailflow::domain::campaign::CampaignId;
use mailflow::domain::ledger::{epoch_ms, Claim, SendKey, SendStatus};
use mailflow::ports::{Mailer, OutgoingEmail, OutgoingQueue, SendError, SendLedger};
use mailflow::runtime::Invocation;
use mailflow_local::names;
use mailflow_local::pipeline::{LocalPipeline, PipelineOptions, SEND_EMAIL};
use mailflow_local::provision::StackOptions;
use mailflow_local::runner::{self, ConsumerStats};
use mailflow_tests::{ses, test_env, TestEnv};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

const W46: &str = "weekly-2026-W46";

/// What the fault injector does with the n-th SES call.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Action {
    Pass,
    /// The invocation dies after the claim, before SES is called.
    HangBefore,
    /// The invocation dies after SES accepted, before SENT is written.
    HangAfter,
    Throttle,
    /// The account's sending is paused.
    Paused,
    /// SES answers an error with no code and no message (as the local emulator does for an
    /// address it cannot handle).
    Refuse,
}

type Plan = Arc<dyn Fn(usize) -> Action + Send + Sync>;

/// Shared record of what the fault injector did (all clones see the same state).
#[derive(Clone)]
struct Faults {
    plan: Plan,
    calls: Arc<AtomicUsize>,
    /// (user, when SES was called) for every call that reached SES.
    accepted: Arc<Mutex<Vec<(String, Instant)>>>,
    /// Users whose invocation was hung (killed).
    hung: Arc<Mutex<Vec<String>>>,
}

impl Faults {
    fn new(plan: impl Fn(usize) -> Action + Send + Sync + 'static) -> Self {
        Self {
            plan: Arc::new(plan),
            calls: Arc::default(),
            accepted: Arc::default(),
            hung: Arc::default(),
        }
    }

    /// Builds the mailer SendEmail uses: the real SES adapter behind the injector.
    fn mailer(
        &self,
    ) -> impl FnOnce(&aws_config::SdkConfig, &mailflow::config::SendEmailConfig) -> Faulty {
        let faults = self.clone();
        move |sdk, config| Faulty {
            inner: ses(sdk, config),
            faults,
        }
    }

    fn hung(&self) -> Vec<String> {
        self.hung.lock().unwrap().clone()
    }
}

#[derive(Clone)]
struct Faulty {
    inner: SesMailer,
    faults: Faults,
}

impl Mailer for Faulty {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        let n = self.faults.calls.fetch_add(1, Ordering::SeqCst);
        let action = (self.faults.plan)(n);
        if action == Action::Throttle {
            return Err(SendError::Throttled(
                "TooManyRequestsException: injected".into(),
            ));
        }
        if action == Action::Paused {
            return Err(SendError::Stopped(
                "SendingPausedException: injected".into(),
            ));
        }
        if action == Action::Refuse {
            return Err(mailflow::adapters::ses::classify_bare(
                500,
                Some("injected"),
            ));
        }
        if action == Action::HangBefore {
            self.faults
                .hung
                .lock()
                .unwrap()
                .push(email.key.user_id.clone());
            return futures::future::pending().await;
        }
        self.faults
            .accepted
            .lock()
            .unwrap()
            .push((email.key.user_id.clone(), Instant::now()));
        let result = self.inner.send(email).await;
        if action == Action::HangAfter {
            self.faults
                .hung
                .lock()
                .unwrap()
                .push(email.key.user_id.clone());
            return futures::future::pending().await;
        }
        result
    }
}

/// The timeouts a scenario runs with.
#[derive(Clone, Copy)]
enum Timing {
    /// The template's: for tests that count attempts, which a short Timeout on a loaded
    /// machine could add to (an attempt cut after its claim).
    Template,
    /// Short, so that tests which wait out a lease finish in seconds: SendEmail Timeout 6 s,
    /// emails queue visibility 10 s, skew 1 s, throttling backoff 1, 1, 2 s.
    Quick,
    /// This SendEmail Timeout and emails queue visibility, in seconds (and `Quick`'s skew and
    /// backoff).
    Custom { timeout: u64, visibility: u32 },
}

/// One exactly-once scenario: a stack of its own, and SendEmail sending through the real SES
/// adapter behind the fault injector, which plays `plan` on the n-th SES call.
struct Scenario {
    env: TestEnv,
    faults: Faults,
    pipeline: LocalPipeline<Faulty>,
}

impl Timing {
    /// The emails queue's visibility timeout and SendEmail's Timeout, when not the template's.
    fn short(self) -> Option<(u32, u64)> {
        match self {
            Timing::Template => None,
            Timing::Quick => Some((10, 6)),
            Timing::Custom {
                timeout,
                visibility,
            } => Some((visibility, timeout)),
        }
    }

    fn pipeline(self) -> PipelineOptions {
        let mut options = PipelineOptions::default();
        if let Some((visibility, timeout)) = self.short() {
            let vars = [
                ("FUNCTION_TIMEOUT_SECONDS", timeout.to_string()),
                ("VISIBILITY_TIMEOUT_SECONDS", visibility.to_string()),
                ("LEASE_CLOCK_SKEW_SECONDS", "1".into()),
                ("RETRY_DELAYS_SECONDS", "1,1,2".into()),
            ];
            options.env.insert(
                SEND_EMAIL,
                vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            );
            options
                .timeouts
                .insert(SEND_EMAIL, Duration::from_secs(timeout));
        }
        options
    }
}

impl Scenario {
    async fn new(
        test: &str,
        timing: Timing,
        plan: impl Fn(usize) -> Action + Send + Sync + 'static,
    ) -> Self {
        Self::with(test, timing, |_| {}, |_| {}, plan).await
    }

    /// As `new`, with the stack's options and SendEmail's environment adjusted after
    /// `timing`'s.
    async fn with(
        test: &str,
        timing: Timing,
        stack: impl FnOnce(&mut StackOptions),
        send_email_env: impl FnOnce(&mut BTreeMap<String, String>),
        plan: impl Fn(usize) -> Action + Send + Sync + 'static,
    ) -> Self {
        let env = test_env(test, |o| {
            if let Some((visibility, _)) = timing.short() {
                o.visibility_timeouts
                    .insert(names::EMAILS_QUEUE.into(), visibility);
            }
            stack(o);
        })
        .await
        .unwrap();
        let mut options = timing.pipeline();
        let mut vars = options.env.remove(SEND_EMAIL).unwrap_or_default();
        send_email_env(&mut vars);
        if !vars.is_empty() {
            options.env.insert(SEND_EMAIL, vars);
        }
        let faults = Faults::new(plan);
        let pipeline = env.pipeline(options, faults.mailer()).await.unwrap();
        Self {
            env,
            faults,
            pipeline,
        }
    }
}

/// The plan of a scenario whose first SES call meets `first` and every other passes.
fn first_call(first: Action) -> impl Fn(usize) -> Action + Send + Sync + 'static {
    move |n| if n == 0 { first } else { Action::Pass }
}

fn pass(_: usize) -> Action {
    Action::Pass
}

/// The emails of `campaign` for `users`, as CreateEmails enqueues them.
fn jobs(env: &TestEnv, campaign: &str, users: &[String]) -> Vec<serde_json::Value> {
    users.iter().map(|u| job(env, campaign, u, false)).collect()
}

fn job(env: &TestEnv, campaign: &str, user: &str, include_failed: bool) -> serde_json::Value {
    serde_json::json!({
        "campaignId": campaign, "userId": user, "to": format!("{user}@{}", env.domain),
        "subject": format!("hello {user}"), "html": format!("<p>{campaign}</p>"), "text": campaign,
        "includeFailed": include_failed,
    })
}

async fn enqueue(env: &TestEnv, jobs: &[serde_json::Value]) {
    let queue = mailflow::adapters::sqs::SqsQueue::new(
        env.sqs(),
        env.stack.queue_url(names::EMAILS_QUEUE).unwrap(),
    );
    for chunk in jobs.chunks(10) {
        let bodies: Vec<String> = chunk.iter().map(|j| j.to_string()).collect();
        queue.send_batch(&bodies).await.unwrap();
    }
}

async fn drain<M: Mailer + Clone + 'static>(
    env: &TestEnv,
    pipeline: &LocalPipeline<M>,
) -> ConsumerStats {
    let stats = runner::run_until_drained(
        &env.sqs(),
        vec![pipeline.send_consumer().unwrap()],
        Duration::from_secs(240),
    )
    .await
    .unwrap();
    stats.get(SEND_EMAIL).cloned().unwrap_or_default()
}

/// Emails each user got, from one read of the SES emulator's record.
async fn emails(env: &TestEnv) -> impl Fn(&str) -> usize {
    let sent = env.sent().await.unwrap();
    let domain = env.domain.clone();
    move |user: &str| sent.get(&format!("{user}@{domain}")).map_or(0, Vec::len)
}

fn users(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("u{i:03}")).collect()
}

fn record(id: &str, body: &serde_json::Value) -> SqsMessage {
    let mut r = SqsMessage::default();
    r.message_id = Some(id.into());
    r.body = Some(body.to_string());
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn t1_the_same_message_delivered_twice_at_once_sends_one_email() {
    let env = test_env("dup-at-once", |_| {}).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let users = users(10);
    let event = |copy: &str| {
        let mut e = SqsEvent::default();
        e.records = users
            .iter()
            .map(|u| record(&format!("{copy}-{u}"), &job(&env, W46, u, false)))
            .collect();
        e
    };
    let (a, b) = (event("a"), event("b"));
    let (inv_a, inv_b) = (
        Invocation::with_timeout("a", Duration::from_secs(30)),
        Invocation::with_timeout("b", Duration::from_secs(30)),
    );
    let ((resp_a, sum_a), (resp_b, sum_b)) = tokio::join!(
        pipeline.send_email[0].handle(a, &inv_a),
        pipeline.send_email[1].handle(b, &inv_b)
    );
    assert_eq!(sum_a.sent + sum_b.sent, 10);
    let counted: u64 = env
        .records(W46)
        .await
        .unwrap()
        .values()
        .map(|r| r.duplicates_suppressed)
        .sum();
    assert_eq!(
        counted as usize,
        sum_a.duplicates + sum_b.duplicates,
        "duplicates are counted on the record"
    );
    assert_eq!(
        sum_a.duplicates + sum_b.duplicates + sum_a.busy + sum_b.busy,
        10
    );
    // A copy that met a live lease is returned, never acknowledged.
    assert_eq!(
        resp_a.batch_item_failures.len() + resp_b.batch_item_failures.len(),
        sum_a.busy + sum_b.busy
    );
    let emails_to = emails(&env).await;
    for u in &users {
        assert_eq!(emails_to(u), 1, "{u}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn t2_two_overlapping_runs_of_a_campaign_send_one_email_per_user() {
    let env = test_env("overlap", |_| {}).await.unwrap();
    let campaign = mailflow::domain::campaign::Campaign::from_id(W46, None).unwrap();
    let seeded = env.seed(60, &campaign).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let start = serde_json::json!({"campaignId": W46});
    let (first, second) = tokio::join!(pipeline.start(start.clone()), pipeline.start(start));
    let expected = seeded.audience.len() as u64;
    assert_eq!(first.unwrap()["usersEnqueued"], expected);
    assert_eq!(second.unwrap()["usersEnqueued"], expected);
    runner::run_until_drained(
        &env.sqs(),
        pipeline.consumers().unwrap(),
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    let sent = env.sent().await.unwrap();
    for (user, _) in seeded.deliverable() {
        assert_eq!(
            sent.get(&seeded.addresses[user]).map_or(0, Vec::len),
            1,
            "{user}"
        );
    }
    assert_eq!(sent.len(), seeded.deliverable().count());
    let totals = pipeline.totals.lock().unwrap().send_email.clone();
    assert!(
        totals.duplicates + totals.busy >= seeded.deliverable().count(),
        "{totals:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn t3_killed_after_the_claim_before_ses_sends_once_after_the_lease() {
    let Scenario {
        env,
        faults,
        pipeline,
    } = Scenario::new("kill-before", Timing::Quick, first_call(Action::HangBefore)).await;
    let users = users(3);
    enqueue(&env, &jobs(&env, W46, &users)).await;
    let stats = drain(&env, &pipeline).await;
    assert!(
        stats.timeouts >= 1,
        "the first invocation must have been killed: {stats:?}"
    );
    let hung = faults.hung();
    assert_eq!(hung.len(), 1);
    let records = env.records(W46).await.unwrap();
    let emails_to = emails(&env).await;
    for u in &users {
        assert_eq!(emails_to(u), 1, "{u}");
        assert_eq!(records[u].status, Some(SendStatus::Sent));
    }
    assert!(
        records[&hung[0]].attempt >= 2,
        "the killed claim was taken over after its lease"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn t4_killed_after_ses_accepted_before_sent_causes_at_most_one_duplicate() {
    let Scenario {
        env,
        faults,
        pipeline,
    } = Scenario::new("kill-after", Timing::Quick, first_call(Action::HangAfter)).await;
    let users = users(3);
    enqueue(&env, &jobs(&env, W46, &users)).await;
    let stats = drain(&env, &pipeline).await;
    assert!(stats.timeouts >= 1, "{stats:?}");
    let hung = faults.hung();
    let records = env.records(W46).await.unwrap();
    let emails_to = emails(&env).await;
    for u in &users {
        let got = emails_to(u);
        if hung.contains(u) {
            // The documented window: SES accepted, the invocation died before SENT was
            // written, and after the lease a retry sent again. Exactly one duplicate.
            assert_eq!(
                got, 2,
                "{u}: the crash window allows one duplicate, no more"
            );
        } else {
            assert_eq!(got, 1, "{u}");
        }
        assert_eq!(records[u].status, Some(SendStatus::Sent));
    }
    assert_eq!(hung.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn t5_a_live_lease_returns_the_message_which_is_sent_later() {
    // The template's timeouts: the copy that met the lease comes back when the lease ends
    // (SendEmail sets its visibility to that), not at the queue's timeout; and a short
    // Timeout on a loaded machine could cut an attempt after its claim, adding an attempt
    // this test counts.
    let Scenario {
        env,
        faults,
        pipeline,
    } = Scenario::new("live-lease", Timing::Template, pass).await;
    // Another attempt holds the claim for four more seconds.
    let ledger = SendsLedger::new(
        env.dynamo(),
        env.stack.table_name(names::SENDS_TABLE).unwrap(),
        90,
    );
    let now = SystemTime::now();
    let lease_until = now + Duration::from_secs(4);
    let holder = Claim {
        key: SendKey::new("u000", CampaignId::parse(W46).unwrap()),
        token: "someone-else".into(),
        started_at_ms: epoch_ms(now),
        lease_until_ms: epoch_ms(lease_until),
        due: None,
        deadline_ms: None,
        variant: None,
        zone: None,
    };
    ledger.claim(&holder, Default::default()).await.unwrap();
    let lease_ends = Instant::now() + Duration::from_secs(4);
    enqueue(&env, &[job(&env, W46, "u000", false)]).await;
    let stats = drain(&env, &pipeline).await;
    let totals = pipeline.totals.lock().unwrap().send_email.clone();
    assert!(
        totals.busy >= 1,
        "the first delivery met the live lease: {totals:?}"
    );
    assert!(
        stats.failures_reported >= 1,
        "and was returned as a batch item failure"
    );
    assert_eq!(totals.sent, 1);
    let emails_to = emails(&env).await;
    assert_eq!(emails_to("u000"), 1);
    let accepted = faults.accepted.lock().unwrap().clone();
    assert_eq!(accepted.len(), 1);
    assert!(
        accepted[0].1 >= lease_ends,
        "sent before the other attempt's lease ended"
    );
    assert_eq!(env.records(W46).await.unwrap()["u000"].attempt, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn t6_throttling_lowers_the_rate_and_everything_is_sent_once() {
    // A Timeout no loaded machine reaches: this test is about throttling, and an invocation
    // cut short mid-send would add the crash window's duplicate (t4's subject).
    let every_third = |n| {
        if n % 3 == 1 {
            Action::Throttle
        } else {
            Action::Pass
        }
    };
    let timing = Timing::Custom {
        timeout: 30,
        visibility: 60,
    };
    let Scenario { env, pipeline, .. } = Scenario::new("throttle", timing, every_third).await;
    let users = users(30);
    enqueue(&env, &jobs(&env, W46, &users)).await;
    drain(&env, &pipeline).await;
    let totals = pipeline.totals.lock().unwrap().send_email.clone();
    // Throttling is a signal: the emails waited for a slot at the lowered rate and went again.
    assert!(totals.throttles >= 5, "{totals:?}");
    // The outcome, from the ledger and the SES record rather than the handlers' counters: an
    // invocation that a loaded machine lets run past its timeout sends, but never reports;
    // its records come back and count as duplicates.
    let records = env.records(W46).await.unwrap();
    let emails_to = emails(&env).await;
    for u in &users {
        assert_eq!(records[u].status, Some(SendStatus::Sent), "{u}: {totals:?}");
        assert_eq!(emails_to(u), 1, "{u}");
    }
    assert_eq!(env.depth(names::EMAILS_DLQ).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn t7_a_permanent_rejection_is_failed_and_only_retried_on_resend_with_include_failed() {
    // The template's timeouts: nothing here waits out a lease, and a short Timeout on a
    // loaded machine could return the record for want of time (a retry, not this test's
    // subject, which counts attempts).
    let Scenario {
        env,
        faults,
        pipeline,
    } = Scenario::new("rejected", Timing::Template, pass).await;
    let mut bad = job(&env, W46, "u000", false);
    bad["to"] = "u000-no-domain".into();
    enqueue(&env, &[bad.clone()]).await;
    let stats = drain(&env, &pipeline).await;
    assert_eq!(stats.failures_reported, 0, "acknowledged, not retried");
    let record = &env.records(W46).await.unwrap()["u000"];
    assert_eq!(record.status, Some(SendStatus::Failed));
    assert!(
        record
            .last_error
            .as_deref()
            .unwrap()
            .contains("not one RFC 5322 mailbox"),
        "{record:?}"
    );
    // Parsed and refused before SES: it never sees the address.
    assert_eq!(faults.calls.load(Ordering::SeqCst), 0);

    // A plain re-run leaves it alone: no call to SES.
    enqueue(&env, &[bad]).await;
    drain(&env, &pipeline).await;
    assert_eq!(faults.calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        pipeline.totals.lock().unwrap().send_email.previously_failed,
        1
    );

    // The operator fixed the address and resends with include-failed: now it goes out.
    enqueue(&env, &[job(&env, W46, "u000", true)]).await;
    drain(&env, &pipeline).await;
    let record = &env.records(W46).await.unwrap()["u000"];
    assert_eq!(record.status, Some(SendStatus::Sent));
    // Claimed again (a loaded machine may give that claim back for want of time and claim
    // once more: seen once in a fresh-clone run), and one email, whatever the attempts.
    assert!(record.attempt >= 2, "{record:?}");
    let emails_to = emails(&env).await;
    assert_eq!(emails_to("u000"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn t8_next_weeks_campaign_sends_again_while_last_weeks_records_exist() {
    let Scenario { env, pipeline, .. } = Scenario::new("next-week", Timing::Template, pass).await;
    let users = users(5);
    enqueue(&env, &jobs(&env, W46, &users)).await;
    drain(&env, &pipeline).await;
    enqueue(&env, &jobs(&env, "weekly-2026-W47", &users)).await;
    drain(&env, &pipeline).await;
    let (w46, w47) = (
        env.records(W46).await.unwrap(),
        env.records("weekly-2026-W47").await.unwrap(),
    );
    let emails_to = emails(&env).await;
    for u in &users {
        assert_eq!(emails_to(u), 2, "{u}: one email per weekly campaign");
        assert_eq!(w46[u].status, Some(SendStatus::Sent));
        assert_eq!(w47[u].status, Some(SendStatus::Sent));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn t9_the_observed_send_rate_never_exceeds_the_configured_rate() {
    const RATE: f64 = 20.0;
    let rate = |o: &mut StackOptions| {
        o.parameters
            .insert(names::SEND_RATE_PER_SECOND.into(), RATE.to_string());
    };
    let Scenario {
        env,
        faults,
        pipeline,
    } = Scenario::with("rate", Timing::Template, rate, |_| {}, pass).await;
    let users = users(200);
    enqueue(&env, &jobs(&env, W46, &users)).await;
    drain(&env, &pipeline).await;
    let mut times: Vec<Instant> = faults
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| *t)
        .collect();
    times.sort();
    assert_eq!(times.len(), 200);
    let span = (*times.last().unwrap() - times[0]).as_secs_f64();
    // The environments share one schedule of slots; one used late (at most MAX_LATENESS)
    // may meet the next on time. And the pacer checks a slot's lateness a moment before this
    // fake SES records the send: a loaded machine that holds a thread between the two
    // shortened the span by 10 ms once (199 intervals in 9.69 s), so one interval more is
    // allowed. Slower is fine (a busy machine); faster than that never.
    let late = mailflow::domain::send_rate::MAX_LATENESS.as_secs_f64();
    assert!(
        times.len() as f64 - 1.0 <= RATE * (span + late) + 1.0,
        "{} sends in {span:.2}s exceed {RATE}/s",
        times.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn t10_sending_paused_stops_the_batch_and_returns_every_unsent_record() {
    let Scenario {
        env,
        faults,
        pipeline,
    } = Scenario::new("paused", Timing::Quick, |_| Action::Paused).await;
    let users = users(10);
    let mut event = SqsEvent::default();
    event.records = users
        .iter()
        .map(|u| record(&format!("m-{u}"), &job(&env, W46, u, false)))
        .collect();
    // Time enough that no record comes back for want of it (a loaded machine took 17 s to
    // claim ten): the pause, not the deadline, must be what returns them.
    let invocation = Invocation::with_timeout("paused", Duration::from_secs(60));
    let (response, summary) = pipeline.send_email[0].handle(event, &invocation).await;
    assert_eq!(
        response.batch_item_failures.len(),
        10,
        "every record comes back: {summary:?}"
    );
    assert_eq!(summary.stopped, 10, "{summary:?}");
    assert_eq!(summary.sent + summary.failed, 0);
    // The first refusal stops the rest: they never reach SES.
    assert!(
        faults.calls.load(Ordering::SeqCst) < 10,
        "the batch went on calling SES"
    );
    // Claims were released: the retry does not wait out a lease. (Read by key: a record in
    // flight is not in the campaign index.)
    for user in &users {
        let r = env.record(W46, user).await.unwrap().expect(user);
        assert_eq!(r.status, Some(SendStatus::InProgress), "{user}");
        assert_eq!(r.lease_until_ms, Some(0), "{user}: claim not released");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn t11_an_error_that_repeats_on_every_attempt_ends_failed_not_in_the_dlq() {
    let Scenario {
        env,
        faults,
        pipeline,
    } = Scenario::new("refused", Timing::Quick, |_| Action::Refuse).await;
    enqueue(&env, &[job(&env, W46, "u000", false)]).await;
    drain(&env, &pipeline).await;
    let record = &env.records(W46).await.unwrap()["u000"];
    assert_eq!(record.status, Some(SendStatus::Failed), "{record:?}");
    let reason = record.last_error.as_deref().unwrap();
    assert!(
        reason.contains("HTTP 500 with no error code or message (request id injected)")
            && reason.contains("refused on 3 attempts"),
        "{reason}"
    );
    // MAX_SEND_ERRORS (3) attempts, not maxReceiveCount (10).
    assert_eq!(faults.calls.load(Ordering::SeqCst), 3);
    assert_eq!(env.depth(names::EMAILS_DLQ).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn t12_a_message_that_reaches_the_dlq_leaves_its_record_dead_lettered_until_sent() {
    // Throttled on every one of its receives, retried at once: the last receive sends it to
    // the DLQ.
    let no_backoff = |vars: &mut BTreeMap<String, String>| {
        vars.insert("RETRY_DELAYS_SECONDS".into(), "0".into());
    };
    let Scenario {
        env,
        faults,
        pipeline,
    } = Scenario::with(
        "dead-letter",
        Timing::Quick,
        |_| {},
        no_backoff,
        |_| Action::Throttle,
    )
    .await;
    enqueue(&env, &[job(&env, W46, "u000", false)]).await;
    drain(&env, &pipeline).await;
    let record = &env.records(W46).await.unwrap()["u000"];
    assert_eq!(record.status, Some(SendStatus::DeadLettered), "{record:?}");
    // The last receive's reason: SES's throttling, or, when the throttled rate left no
    // send slot or too little time before the deadline (a loaded machine), that.
    let reason = record.last_error.as_deref().unwrap_or_default();
    assert!(
        [
            "TooManyRequestsException",
            "no send slot before the deadline",
            "deadline too near to send"
        ]
        .iter()
        .any(|why| reason.contains(why)),
        "{record:?}"
    );
    assert!(
        faults.calls.load(Ordering::SeqCst) > 0,
        "SES was never called"
    );
    assert_eq!(env.depth(names::EMAILS_DLQ).await.unwrap(), 1);

    // Redriven once SES accepts again: sent once, and the record says so.
    mailflow_local::queues::redrive(
        &env.sqs(),
        env.stack.queue_url(names::EMAILS_DLQ).unwrap(),
        env.stack.queue_url(names::EMAILS_QUEUE).unwrap(),
    )
    .await
    .unwrap();
    let pipeline = env.pipeline(Timing::Quick.pipeline(), ses).await.unwrap();
    drain(&env, &pipeline).await;
    let record = &env.records(W46).await.unwrap()["u000"];
    assert_eq!(record.status, Some(SendStatus::Sent), "{record:?}");
    assert_eq!(
        record.last_error, None,
        "the throttling is history once SENT"
    );
    assert_eq!(emails(&env).await("u000"), 1);
}

//! The guardrails over in-memory ports: each decided once under the claim, recorded with its
//! reason, and the cap's race between two campaigns.

use super::super::SendEmail;
use crate::config::SendEmailConfig;
use crate::domain::guardrails::{CampaignGuardrails, CapEntry, CapHistory};
use crate::domain::ledger::{epoch_ms, SendStatus};
use crate::domain::messages::UserMessage;
use crate::ports::memory::{
    MemoryCampaigns, MemoryQueue, MemoryRateBucket, MemoryRecords, MemorySubscribers,
    MemoryWaitingRoom, ScriptedMailer,
};
use crate::ports::{SendError, WaitingRoom};
use crate::runtime::Invocation;
use crate::stages::send_email::Wanted;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use std::time::Duration;

use crate::domain::guardrails::{CapCheck, FrequencyCaps};
use crate::ports::memory::MemoryLedger;
use crate::ports::CapLedger;

/// Two campaigns read the same history for one user under a cap of one: the first write
/// wins, the second is refused by the version, reads again and finds the cap reached.
#[tokio::test]
async fn two_campaigns_racing_for_one_user_pass_a_cap_of_one_once() {
    let ledger = MemoryLedger::default();
    let caps = FrequencyCaps::parse("1/16h", "").unwrap();
    let utc = jiff::tz::TimeZone::UTC;
    let now = 1_795_000_000_000;
    let a_read = ledger.cap_history("u1").await.unwrap();
    let b_read = ledger.cap_history("u1").await.unwrap();
    let CapCheck::Allowed(a_next) = caps.check(&a_read, "a", "digest", now, &utc) else {
        panic!("a is allowed on an empty history")
    };
    let CapCheck::Allowed(b_next) = caps.check(&b_read, "b", "digest", now, &utc) else {
        panic!("b read the same empty history")
    };
    assert!(ledger.write_cap_history("u1", &a_next, 0).await.unwrap());
    assert!(!ledger.write_cap_history("u1", &b_next, 0).await.unwrap());
    let b_again = ledger.cap_history("u1").await.unwrap();
    assert_eq!(
        caps.check(&b_again, "b", "digest", now + 1, &utc),
        CapCheck::Capped("1/16h".into())
    );
    // a's retry finds its own email counted, and goes on.
    assert_eq!(
        caps.check(&b_again, "a", "digest", now + 1, &utc),
        CapCheck::Counted
    );
}

const CAMPAIGN: &str = "promo-1";

type Standings = Wanted<MemorySubscribers, MemoryRecords>;

type Stage = SendEmail<
    ScriptedMailer,
    MemoryLedger,
    MemoryQueue,
    MemoryCampaigns,
    MemoryRateBucket,
    std::sync::Arc<MemoryWaitingRoom>,
    Standings,
>;

fn stage(extra: &[(&str, &str)], ledger: MemoryLedger, mailer: ScriptedMailer) -> Stage {
    stage_with(extra, ledger, mailer, standings(&[]))
}

/// Subscribed `users` (and no pending leave): whom a standing read again lets through.
fn standings(users: &[&str]) -> Standings {
    Wanted {
        users: MemorySubscribers::with(users),
        pending: MemoryRecords::default(),
    }
}

fn config(extra: &[(&str, &str)]) -> SendEmailConfig {
    let vars: Vec<(String, String)> = [
        ("SENDS_TABLE_NAME", "sends"),
        ("CAMPAIGNS_TABLE_NAME", "campaigns"),
        ("EMAILS_QUEUE_URL", "http://emails"),
        ("SENDER_ADDRESS", "news@example.com"),
        ("VISIBILITY_TIMEOUT_SECONDS", "180"),
        ("FUNCTION_TIMEOUT_SECONDS", "30"),
        ("SEND_RATE_PER_SECOND", "10000"),
        ("MONGODB_URI", "mongodb://127.0.0.1:1/"),
        ("WAITING_TABLE_NAME", "waiting"),
        ("RELEASE_SCHEDULE_GROUP", "releases"),
        (
            "RELEASE_SCHEDULER_ROLE_ARN",
            "arn:aws:iam::000000000000:role/releases",
        ),
        (
            "RELEASE_DEAD_LETTER_ARN",
            "arn:aws:sqs:us-east-1:000000000000:schedule-dlq",
        ),
        (
            "RELEASE_FUNCTION_ARN",
            "arn:aws:lambda:us-east-1:000000000000:function:get-users",
        ),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    SendEmailConfig::from_source(&|k: &str| {
        vars.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    })
    .unwrap()
}

fn stage_with<M: crate::ports::Mailer>(
    extra: &[(&str, &str)],
    ledger: MemoryLedger,
    mailer: M,
    standings: Standings,
) -> SendEmail<
    M,
    MemoryLedger,
    MemoryQueue,
    MemoryCampaigns,
    MemoryRateBucket,
    std::sync::Arc<MemoryWaitingRoom>,
    Standings,
> {
    SendEmail::new(
        ledger,
        mailer,
        MemoryQueue::default(),
        MemoryCampaigns::default(),
        MemoryRateBucket::default(),
        std::sync::Arc::new(MemoryWaitingRoom::default()),
        standings,
        config(extra),
    )
}

const RELEASE_FUNCTION: &str = "arn:aws:lambda:us-east-1:000000000000:function:get-users";

fn window() -> crate::domain::campaign::Window {
    serde_json::from_value(serde_json::json!({
        "since": "2026-11-16T00:00:00Z", "until": "2026-11-23T00:00:00Z",
    }))
    .unwrap()
}

fn event(user: &str, include_failed: bool) -> SqsEvent {
    rendered_at(user, include_failed, now_ms())
}

/// A job rendered at `rendered_ms`.
fn rendered_at(user: &str, include_failed: bool, rendered_ms: i64) -> SqsEvent {
    let job = serde_json::json!({
        "campaignId": CAMPAIGN, "userId": user, "to": "ada@example.com", "subject": "s",
        "html": "<p>h</p>", "text": "t", "includeFailed": include_failed, "topic": "product-news",
        "renderedAt": rendered_ms,
        "window": window(),
    });
    let mut record = SqsMessage::default();
    record.message_id = Some(format!("m-{user}"));
    record.receipt_handle = Some(format!("r-{user}"));
    record.body = Some(job.to_string());
    let mut event = SqsEvent::default();
    event.records = vec![record];
    event
}

fn now_ms() -> i64 {
    epoch_ms(std::time::SystemTime::now()) as i64
}

async fn handle(stage: &Stage, user: &str, include_failed: bool) -> super::super::Summary {
    let invocation = Invocation::with_timeout("request-1", Duration::from_secs(30));
    stage
        .handle(event(user, include_failed), &invocation)
        .await
        .1
}

fn status(stage: &Stage, user: &str) -> (Option<SendStatus>, Option<String>) {
    let r = stage.ledger.get(user, CAMPAIGN).unwrap_or_default();
    (r.status, r.last_error)
}

/// A user whose draw puts them in a 50 % holdout, and one whose draw does not.
fn users_in_and_out() -> (String, String) {
    let draw = |u: &String| crate::domain::guardrails::held_out(CAMPAIGN, u, 5000);
    let users: Vec<String> = (0..50).map(|i| format!("u{i}")).collect();
    (
        users.iter().find(|u| draw(u)).unwrap().clone(),
        users.iter().find(|u| !draw(u)).unwrap().clone(),
    )
}

#[tokio::test]
async fn the_held_out_are_recorded_and_stay_out_even_when_a_resend_includes_the_skipped() {
    let stage = stage(&[], MemoryLedger::default(), ScriptedMailer::default());
    let holdout = CampaignGuardrails {
        holdout_bp: 5000,
        ..Default::default()
    };
    stage.campaigns.states().set_guardrails(CAMPAIGN, holdout);
    let (inside, outside) = users_in_and_out();
    let summary = handle(&stage, &inside, false).await;
    assert_eq!(summary.skipped.get("held_out"), Some(&1));
    assert_eq!(
        status(&stage, &inside),
        (Some(SendStatus::Skipped), Some("held_out".into()))
    );
    let again = handle(&stage, &inside, true).await;
    assert_eq!(again.previously_skipped, 1, "not reclaimed");
    assert_eq!(handle(&stage, &outside, false).await.sent, 1);
    assert_eq!(stage.mailer.calls().len(), 1, "only the one outside");
}

#[tokio::test]
async fn after_the_deadline_the_rest_expires_unless_a_start_just_moved_it() {
    let stage = stage(&[], MemoryLedger::default(), ScriptedMailer::default());
    let passed = CampaignGuardrails {
        deadline_ms: Some(now_ms() - 1),
        ..Default::default()
    };
    stage.campaigns.states().set_guardrails(CAMPAIGN, passed);
    let summary = handle(&stage, "u1", false).await;
    assert_eq!(summary.skipped.get("expired"), Some(&1));
    assert_eq!(status(&stage, "u1").1.as_deref(), Some("expired"));
    // The deadline moves while the passed one is still cached: the table is read again.
    let moved = CampaignGuardrails {
        deadline_ms: Some(now_ms() + 3_600_000),
        ..Default::default()
    };
    stage.campaigns.states().set_guardrails(CAMPAIGN, moved);
    assert_eq!(handle(&stage, "u2", false).await.sent, 1);
    // The expired user is sent by a resend that includes the skipped.
    assert_eq!(handle(&stage, "u1", true).await.sent, 1);
    assert_eq!(status(&stage, "u1").0, Some(SendStatus::Sent));
}

/// The campaign's deadline is recorded by the wall clock (GetUsers' start, `mailctl`), and
/// the guard judged it by the wall clock: a clock given for quiet hours (`with_clock`) that
/// is behind does not send past the deadline.
#[tokio::test]
async fn the_deadline_is_judged_by_the_wall_clock_not_the_quiet_hours_clock() {
    let behind = crate::ports::memory::MemoryClock::at(now_ms() - 86_400_000);
    let stage = stage(&[], MemoryLedger::default(), ScriptedMailer::default()).with_clock(behind);
    let passed = CampaignGuardrails {
        deadline_ms: Some(now_ms() - 1),
        ..Default::default()
    };
    stage.campaigns.states().set_guardrails(CAMPAIGN, passed);
    let summary = handle(&stage, "u1", false).await;
    assert_eq!(summary.skipped.get("expired"), Some(&1));
    assert_eq!(summary.sent, 0);
}

#[tokio::test]
async fn after_the_deadline_the_held_out_stay_held_out_and_a_resend_never_sends_them() {
    let stage = stage(&[], MemoryLedger::default(), ScriptedMailer::default());
    let passed = CampaignGuardrails {
        holdout_bp: 5000,
        deadline_ms: Some(now_ms() - 1),
        ..Default::default()
    };
    stage.campaigns.states().set_guardrails(CAMPAIGN, passed);
    let (inside, outside) = users_in_and_out();
    assert_eq!(
        handle(&stage, &inside, false).await.skipped.get("held_out"),
        Some(&1)
    );
    assert_eq!(
        handle(&stage, &outside, false).await.skipped.get("expired"),
        Some(&1)
    );
    assert_eq!(status(&stage, &inside).1.as_deref(), Some("held_out"));
    // A later deadline and a resend that includes the skipped: the expired one goes, the
    // held-out one stays out.
    let moved = CampaignGuardrails {
        holdout_bp: 5000,
        deadline_ms: Some(now_ms() + 3_600_000),
        ..Default::default()
    };
    stage.campaigns.states().set_guardrails(CAMPAIGN, moved);
    assert_eq!(handle(&stage, &outside, true).await.sent, 1);
    assert_eq!(handle(&stage, &inside, true).await.sent, 0);
    assert_eq!(stage.mailer.calls().len(), 1, "only the one outside");
}

/// Quiet hours around the wall clock's hour in UTC (the fallback zone of a job without one).
fn quiet_now() -> String {
    let hour = (now_ms() / 3_600_000) % 24;
    format!("{hour:02}:00-{:02}:00", (hour + 2) % 24)
}

/// The end of `quiet_now()` (UTC, the next whole hour but one).
fn quiet_now_ends() -> i64 {
    (now_ms() / 3_600_000 + 2) * 3_600_000
}

/// A user met in their quiet hours is handed back to the waiting room for the slot at their
/// end, with that slot's release and sweep schedules, and the email is acknowledged: not
/// hidden on the queue for hours, where it would count in flight.
#[tokio::test]
async fn in_quiet_hours_a_user_waits_in_the_waiting_room_for_their_end_or_is_skipped() {
    let quiet = quiet_now();
    let defer = stage(
        &[("QUIET_HOURS", &quiet)],
        MemoryLedger::default(),
        ScriptedMailer::default(),
    );
    let invocation = Invocation::with_timeout("request-1", Duration::from_secs(30));
    let mut batch = event("u1", false);
    batch.records.extend(event("u2", false).records);
    let (response, summary) = defer.handle(batch, &invocation).await;
    assert!(response.batch_item_failures.is_empty(), "acknowledged");
    assert_eq!(summary.deferred, 2);
    assert!(defer.mailer.calls().is_empty());
    assert!(defer.queue.delays().is_empty(), "not hidden on the queue");
    assert!(crate::runtime::lock(&defer.queue.requeued).is_empty());
    let slot = quiet_now_ends();
    let held = crate::runtime::lock(&defer.waiting.held).clone();
    let users = held
        .get(&(CAMPAIGN.to_string(), slot))
        .unwrap_or_else(|| panic!("held for the quiet hours' end: {held:?}"));
    let message: UserMessage = serde_json::from_str(&users["u1"]).unwrap();
    assert_eq!(message.window, window());
    assert_eq!(message.topic.as_str(), "product-news");
    assert!(
        message.due.is_none(),
        "the release sets when it let the user go"
    );
    assert!(users.contains_key("u2"));
    // Its release and its sweep, invoking GetUsers, made sure of once for both users.
    let schedules = crate::runtime::lock(&defer.waiting.schedules).clone();
    assert_eq!(schedules.len(), 2, "{schedules:?}");
    for ((campaign, schedule), (target, event)) in &schedules {
        assert_eq!((campaign.as_str(), schedule.slot_ms), (CAMPAIGN, slot));
        assert_eq!(target, RELEASE_FUNCTION);
        let release: crate::stages::get_users::ReleaseEvent =
            serde_json::from_value(event.clone()).unwrap();
        assert_eq!(release.release_waiting.slot_ms, slot);
        assert_eq!(release.release_waiting.sweep, schedule.sweep);
    }
    let report = defer
        .waiting
        .report(&crate::domain::campaign::CampaignId::parse(CAMPAIGN).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.quiet_held.get(&slot), Some(&2), "counted for status");
    assert_eq!(
        defer.ledger.get("u1", CAMPAIGN).unwrap().lease_until_ms,
        Some(0),
        "the claim is given back"
    );
    let skip = stage(
        &[("QUIET_HOURS", &quiet), ("QUIET_HOURS_POLICY", "skip")],
        MemoryLedger::default(),
        ScriptedMailer::default(),
    );
    assert_eq!(
        handle(&skip, "u1", false).await.skipped.get("quiet_hours"),
        Some(&1)
    );
}

/// Quiet hours that end within 15 minutes, and a job without its window (rendered before
/// jobs carried it): a fresh copy delayed until the end (at most 15 minutes), never hidden,
/// so never in flight, and never sent to the DLQ whatever its receive count.
#[tokio::test]
async fn quiet_hours_ending_soon_wait_on_the_queue_as_a_delayed_copy() {
    let minute = now_ms() / 60_000;
    let hhmm = |m: i64| {
        let m = m.rem_euclid(24 * 60);
        format!("{:02}:{:02}", m / 60, m % 60)
    };
    let ending_soon = format!("{}-{}", hhmm(minute - 60), hhmm(minute + 3));
    let long = quiet_now();
    for (quiet, window) in [(ending_soon.as_str(), true), (long.as_str(), false)] {
        let stage = stage(
            &[("QUIET_HOURS", quiet)],
            MemoryLedger::default(),
            ScriptedMailer::default(),
        );
        let mut last = event("u1", false);
        if !window {
            let mut job: serde_json::Value =
                serde_json::from_str(last.records[0].body.as_deref().unwrap()).unwrap();
            job.as_object_mut().unwrap().remove("window");
            last.records[0].body = Some(job.to_string());
        }
        last.records[0]
            .attributes
            .insert("ApproximateReceiveCount".into(), "10".into());
        let invocation = Invocation::with_timeout("request-2", Duration::from_secs(30));
        let (response, summary) = stage.handle(last, &invocation).await;
        assert!(response.batch_item_failures.is_empty(), "acknowledged");
        assert_eq!(summary.deferred, 1);
        assert!(stage.queue.delays().is_empty(), "not hidden on the queue");
        let requeued = crate::runtime::lock(&stage.queue.requeued).clone();
        assert_eq!(requeued.len(), 1, "{quiet}: {requeued:?}");
        assert!(
            requeued[0].1 >= Duration::from_secs(60) && requeued[0].1 <= Duration::from_secs(900),
            "{quiet}: {requeued:?}"
        );
        assert!(crate::runtime::lock(&stage.waiting.held).is_empty());
        assert_ne!(
            stage.ledger.get("u1", CAMPAIGN).unwrap().status,
            Some(SendStatus::DeadLettered)
        );
    }
}

#[tokio::test]
async fn a_cap_reached_by_another_campaign_skips_and_an_exempt_campaign_goes() {
    let ledger = MemoryLedger::default();
    let other = CapHistory {
        version: 0,
        entries: vec![CapEntry {
            campaign: "weekly-2026-W47".into(),
            topic: "digest".into(),
            at_ms: now_ms() - 60_000,
        }],
    };
    assert!(ledger.write_cap_history("u1", &other, 0).await.unwrap());
    let capped = stage(
        &[("FREQUENCY_CAPS", "1/16h")],
        ledger,
        ScriptedMailer::default(),
    );
    assert_eq!(
        handle(&capped, "u1", false)
            .await
            .skipped
            .get("frequency_cap"),
        Some(&1)
    );
    assert!(capped.mailer.calls().is_empty());
    // A second delivery of the same message is a duplicate of a decided record.
    assert_eq!(handle(&capped, "u1", false).await.previously_skipped, 1);
    // The same user, capped the same way, in a campaign started exempt: sent.
    let ledger = MemoryLedger::default();
    assert!(ledger.write_cap_history("u1", &other, 0).await.unwrap());
    let exempt = stage(
        &[("FREQUENCY_CAPS", "1/16h")],
        ledger,
        ScriptedMailer::default(),
    );
    let guardrails = CampaignGuardrails {
        cap_exempt: true,
        ..Default::default()
    };
    exempt
        .campaigns
        .states()
        .set_guardrails(CAMPAIGN, guardrails);
    assert_eq!(handle(&exempt, "u1", false).await.sent, 1);
    let history = exempt.ledger.cap_history("u1").await.unwrap();
    assert_eq!(history.entries.len(), 1, "an exempt email is not counted");
}

#[tokio::test]
async fn an_email_counted_then_refused_is_taken_out_of_the_caps() {
    let stage = stage(
        &[("FREQUENCY_CAPS", "1/16h")],
        MemoryLedger::default(),
        ScriptedMailer::answering([Err(SendError::Permanent("MessageRejected: x".into()))]),
    );
    assert_eq!(handle(&stage, "u1", false).await.failed, 1);
    let history = stage.ledger.cap_history("u1").await.unwrap();
    assert!(history.entries.is_empty(), "{history:?}");
    assert_eq!(history.version, 2, "counted, then taken out");
}

/// An email held for hours (SES's 24-hour quota used up, or the account's sending stopped)
/// is taken out of the caps while it waits: its reservation would otherwise skip the
/// person's other campaigns' emails, for good, until it goes.
#[tokio::test]
async fn an_email_held_for_the_daily_quota_or_a_stopped_account_is_taken_out_of_the_caps() {
    let quota = || {
        crate::adapters::ses::classify(
            Some("ThrottlingException"),
            "Daily message quota exceeded.",
            true,
        )
    };
    let stopped = || SendError::Stopped("SendingPausedException: paused".into());
    for (why, answer) in [("quota", quota()), ("stopped", stopped())] {
        let stage = stage(
            &[("FREQUENCY_CAPS", "1/16h")],
            MemoryLedger::default(),
            ScriptedMailer::answering([Err(answer)]),
        );
        handle(&stage, "u1", false).await;
        let history = stage.ledger.cap_history("u1").await.unwrap();
        assert!(history.entries.is_empty(), "{why}: {history:?}");
        assert_eq!(history.version, 2, "{why}: counted, then taken out");
    }
}

/// Whoever chose since the email was rendered, an hour ago, gets it no more: unsubscribed,
/// out of the topic (by the page, or by a one-click MongoDB did not take), suppressed, or no
/// such user any more; each recorded SKIPPED with its reason, counted. Under the bound, the
/// standing is not read again: the email that did not wait costs no read.
#[tokio::test]
async fn an_email_that_waited_goes_only_to_whom_still_wants_it() {
    use crate::domain::topics::TopicId;
    use crate::ports::{ChangedVia, PendingLeaves, SubscriberStore, SuppressionReason};
    let people = [
        "stays",
        "unsubscribed",
        "left",
        "left-by-one-click",
        "bounced",
    ];
    let stage = stage_with(
        &[],
        MemoryLedger::default(),
        ScriptedMailer::default(),
        standings(&people),
    );
    let key = |user: &str| {
        crate::domain::ledger::SendKey::new(
            user.to_owned(),
            crate::domain::campaign::CampaignId::parse(CAMPAIGN).unwrap(),
        )
    };
    let topic = TopicId::parse("product-news").unwrap();
    let users = &stage.standings.users;
    users
        .unsubscribe(&key("unsubscribed"), "weekly-digest", 0)
        .await
        .unwrap();
    users
        .leave_topic(&key("left"), &topic, ChangedVia::Page, 0)
        .await
        .unwrap();
    users
        .suppress(&key("bounced"), SuppressionReason::Bounce, "", 0)
        .await
        .unwrap();
    stage
        .standings
        .pending
        .record_leave(&key("left-by-one-click"), &topic, 1)
        .await
        .unwrap();

    let an_hour_ago = now_ms() - 3_600_000;
    let invocation = Invocation::with_timeout("request-1", Duration::from_secs(30));
    let mut skipped = std::collections::BTreeMap::new();
    for user in people.iter().chain(&["gone"]) {
        let summary = stage
            .handle(rendered_at(user, false, an_hour_ago), &invocation)
            .await
            .1;
        for (reason, n) in summary.skipped {
            *skipped.entry(reason).or_insert(0) += n;
        }
    }
    assert_eq!(
        skipped,
        [
            ("left_topic", 2),
            ("suppressed", 1),
            ("unsubscribed", 1),
            ("vanished", 1)
        ]
        .into()
    );
    let sent: Vec<String> = stage
        .mailer
        .calls()
        .iter()
        .map(|e| e.key.user_id.clone())
        .collect();
    assert_eq!(sent, ["stays"]);
    assert_eq!(
        status(&stage, "left-by-one-click"),
        (Some(SendStatus::Skipped), Some("left_topic".into()))
    );

    // Rendered a moment ago: sent on CreateEmails' reading, without a read of its own.
    let reads = users.calls.load(std::sync::atomic::Ordering::SeqCst);
    let summary = stage
        .handle(event("gone-but-fresh", false), &invocation)
        .await
        .1;
    assert_eq!(summary.sent, 1);
    assert_eq!(users.calls.load(std::sync::atomic::Ordering::SeqCst), reads);
}

/// A standing that can never be read again (the campaign's pinned definition cannot be
/// found) is decided at once: FAILED with the reason, not sent, not left to the queue. One
/// that cannot be read now (MongoDB down) goes back to the queue.
#[tokio::test]
async fn an_email_that_waited_whose_standing_can_never_be_read_fails_at_once() {
    use crate::ports::{StoreError, SubscriberError};
    let stage = stage_with(
        &[],
        MemoryLedger::default(),
        ScriptedMailer::default(),
        standings(&["ada", "bob"]),
    );
    let why = "campaign weekly-2026-W47: its recipients cannot be found: definition orders version 3 cannot be read";
    let failing = |err| *crate::runtime::lock(&stage.standings.users.failing) = Some(err);
    let an_hour_ago = now_ms() - 3_600_000;
    let invocation = Invocation::with_timeout("request-1", Duration::from_secs(30));

    failing(SubscriberError::Lasting(why.into()));
    let (response, summary) = stage
        .handle(rendered_at("ada", false, an_hour_ago), &invocation)
        .await;
    assert!(response.batch_item_failures.is_empty(), "{summary:?}");
    assert_eq!((summary.failed, summary.sent), (1, 0), "{summary:?}");
    let (ada, error) = status(&stage, "ada");
    assert_eq!(ada, Some(SendStatus::Failed));
    assert!(error.unwrap().contains(why));

    failing(SubscriberError::Store(StoreError::mongo("no primary")));
    let (response, summary) = stage
        .handle(rendered_at("bob", false, an_hour_ago), &invocation)
        .await;
    assert_eq!(response.batch_item_failures.len(), 1, "{summary:?}");
    assert_ne!(status(&stage, "bob").0, Some(SendStatus::Failed));
    assert!(stage.mailer.calls().is_empty());
}

/// An email counted towards the caps by an attempt that did not send it (throttled, then held
/// overnight) is counted again when it goes: dated at the send, so another campaign five hours
/// later meets `1/16h`; and if, meanwhile, another campaign's email went, the rules stop it.
#[tokio::test]
async fn a_cap_reservation_of_an_earlier_attempt_is_checked_again_and_dated_at_the_send() {
    let caps = FrequencyCaps::parse("1/16h", "").unwrap();
    let utc = jiff::tz::TimeZone::UTC;
    let reserved_at = now_ms() - 11 * 3_600_000;
    let ours = CapEntry {
        campaign: CAMPAIGN.into(),
        topic: "product-news".into(),
        at_ms: reserved_at,
    };
    let ledger = MemoryLedger::default();
    let history = CapHistory {
        version: 0,
        entries: vec![ours.clone()],
    };
    assert!(ledger.write_cap_history("u1", &history, 0).await.unwrap());
    let first = stage(
        &[("FREQUENCY_CAPS", "1/16h")],
        ledger,
        ScriptedMailer::default(),
    );
    let before = now_ms();
    assert_eq!(handle(&first, "u1", false).await.sent, 1);
    let history = first.ledger.cap_history("u1").await.unwrap();
    assert_eq!(history.entries.len(), 1, "{history:?}");
    assert!(
        history.entries[0].at_ms >= before,
        "dated at the send: {history:?}"
    );
    // Five hours after the send, another campaign: capped.
    assert_eq!(
        caps.check(&history, "other", "digest", before + 5 * 3_600_000, &utc),
        CapCheck::Capped("1/16h".into())
    );

    // Another campaign's email went while ours waited: ours is capped now, and its
    // reservation taken out.
    let ledger = MemoryLedger::default();
    let theirs = CapEntry {
        campaign: "weekly-2026-W47".into(),
        topic: "digest".into(),
        at_ms: now_ms() - 3_600_000,
    };
    let history = CapHistory {
        version: 0,
        entries: vec![ours, theirs.clone()],
    };
    assert!(ledger.write_cap_history("u2", &history, 0).await.unwrap());
    let second = stage(
        &[("FREQUENCY_CAPS", "1/16h")],
        ledger,
        ScriptedMailer::default(),
    );
    let summary = handle(&second, "u2", false).await;
    assert_eq!(summary.skipped.get("frequency_cap"), Some(&1));
    assert!(second.mailer.calls().is_empty());
    assert_eq!(
        second.ledger.cap_history("u2").await.unwrap().entries,
        [theirs]
    );
}

/// A mailer that answers from a script and moves a clock on after each answer: a throttled
/// send's next slot comes this much later.
struct Later {
    inner: ScriptedMailer,
    clock: std::sync::Arc<crate::ports::memory::MemoryClock>,
    step_ms: i64,
}

impl crate::ports::Mailer for Later {
    async fn send(&self, email: &crate::ports::OutgoingEmail) -> Result<String, SendError> {
        let answer = self.inner.send(email).await;
        let now = crate::ports::Clock::now_ms(self.clock.as_ref());
        self.clock.set(now + self.step_ms);
        answer
    }
}

/// Quiet hours are asked right before each SES call, not only before the wait for a slot: a
/// send throttled at 20:59:50 whose next slot comes after 21:00 is handed back to the waiting
/// room for 08:00 (or skipped), not sent in them; and its cap reservation is taken out
/// meanwhile.
#[tokio::test]
async fn quiet_hours_that_begin_while_an_email_waits_to_be_sent_hold_it() {
    // 2026-11-26 20:59:50 UTC.
    let evening = 1_795_726_790_000;
    assert_eq!(
        jiff::Timestamp::from_millisecond(evening)
            .unwrap()
            .to_string(),
        "2026-11-26T20:59:50Z"
    );
    for (policy, skipped) in [("defer", false), ("skip", true)] {
        let clock = crate::ports::memory::MemoryClock::at(evening);
        let mailer = Later {
            inner: ScriptedMailer::answering([Err(SendError::Throttled("slow down".into()))]),
            clock: clock.clone(),
            step_ms: 20_000,
        };
        let stage = stage_with(
            &[
                ("QUIET_HOURS", "21:00-08:00"),
                ("QUIET_HOURS_POLICY", policy),
                ("FREQUENCY_CAPS", "1/16h"),
            ],
            MemoryLedger::default(),
            mailer,
            standings(&[]),
        )
        .with_clock(clock);
        let invocation = Invocation::with_timeout("request-1", Duration::from_secs(30));
        let summary = stage.handle(event("u1", false), &invocation).await.1;
        assert_eq!(
            stage.mailer.inner.calls().len(),
            1,
            "{policy}: not sent again in them"
        );
        assert_eq!(summary.sent, 0, "{policy}");
        if skipped {
            assert_eq!(summary.skipped.get("quiet_hours"), Some(&1));
        } else {
            assert_eq!(summary.deferred, 1);
            assert!(stage.queue.delays().is_empty(), "not hidden on the queue");
            // 08:00 the next morning: from 21:00:10, when the next slot came, 10h59m50s on.
            let morning = evening + 10_000 + 11 * 3_600_000;
            let held = crate::runtime::lock(&stage.waiting.held).clone();
            assert!(
                held.get(&(CAMPAIGN.to_string(), morning))
                    .is_some_and(|users| users.contains_key("u1")),
                "held for the quiet hours' end: {held:?}"
            );
        }
        let history = stage.ledger.cap_history("u1").await.unwrap();
        assert!(history.entries.is_empty(), "{policy}: {history:?}");
    }
}

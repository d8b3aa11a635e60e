//! SendEmail over in-memory ports: the fixtures its tests share (a stage, a record, a
//! ledger as it stands before the message), and the tests of what the decision table does
//! not cross: the ports failing, an unparseable body, the campaign controls, the daily
//! quota and the shared rate.

use super::*;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::{SendKey, SendStatus};
use crate::ports::memory::{
    MemoryCampaigns, MemoryLedger, MemoryQueue, MemoryRateBucket, MemoryRecords, MemorySubscribers,
    MemoryWaitingRoom, Record, ScriptedMailer,
};
use std::time::Duration;

/// The stage under test, over in-memory ports.
type Stage = SendEmail<
    ScriptedMailer,
    MemoryLedger,
    MemoryQueue,
    MemoryCampaigns,
    MemoryRateBucket,
    MemoryWaitingRoom,
    Wanted<MemorySubscribers, MemoryRecords>,
>;

/// USER, subscribed, with no pending leave.
fn standings() -> Wanted<MemorySubscribers, MemoryRecords> {
    Wanted {
        users: MemorySubscribers::with(&[USER]),
        pending: MemoryRecords::default(),
    }
}

pub(super) const USER: &str = "oid:65a1f0c2e4b0a1b2c3d4e5f6";
pub(super) const CAMPAIGN: &str = "weekly-2026-W47";
/// What a send took: the function's 30 s Timeout, as on Lambda.
pub(super) const TIMEOUT: Duration = Duration::from_secs(30);

fn config() -> SendEmailConfig {
    SendEmailConfig::from_source(&config_var).unwrap()
}

fn config_var(k: &str) -> Option<String> {
    {
        let v = match k {
            "SENDS_TABLE_NAME" => "sends",
            "CAMPAIGNS_TABLE_NAME" => "campaigns",
            "EMAILS_QUEUE_URL" => "http://emails",
            "SENDER_ADDRESS" => "news@example.com",
            "VISIBILITY_TIMEOUT_SECONDS" => "180",
            "FUNCTION_TIMEOUT_SECONDS" => "30",
            "SEND_RATE_PER_SECOND" => "10000",
            "MONGODB_URI" => "mongodb://127.0.0.1:1/",
            "WAITING_TABLE_NAME" => "waiting",
            "RELEASE_SCHEDULE_GROUP" => "releases",
            "RELEASE_SCHEDULER_ROLE_ARN" => "arn:aws:iam::000000000000:role/releases",
            "RELEASE_DEAD_LETTER_ARN" => "arn:aws:sqs:us-east-1:000000000000:schedule-dlq",
            "RELEASE_FUNCTION_ARN" => "arn:aws:lambda:us-east-1:000000000000:function:get-users",
            _ => return None,
        };
        Some(v.to_owned())
    }
}

pub(super) fn event(to: &str, receives: u32, include_failed: bool) -> SqsEvent {
    let job = serde_json::json!({
        "campaignId": CAMPAIGN, "userId": USER, "to": to, "subject": "s", "html": "<p>h</p>",
        "text": "t", "includeFailed": include_failed,
        "renderedAt": epoch_ms(crate::runtime::clock::now()),
    });
    let mut record = SqsMessage::default();
    record.message_id = Some("m1".into());
    record.receipt_handle = Some("r1".into());
    record.body = Some(job.to_string());
    record
        .attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    let mut event = SqsEvent::default();
    event.records = vec![record];
    event
}

/// A record as it stands before the message arrives.
#[derive(Clone, Copy, Debug)]
pub(super) enum Before {
    Nothing,
    ExpiredLease,
    LiveLease,
    Sent,
    Failed,
    FailedIncluded,
    DeadLettered,
}

pub(super) fn ledger(before: Before, send_errors: u64) -> MemoryLedger {
    let record = |status, lease| Record {
        status: Some(status),
        lease_until_ms: lease,
        token: Some("an-earlier-attempt".into()),
        attempt: 1,
        send_errors,
        last_error: Some("earlier".into()),
        ..Default::default()
    };
    let far = epoch_ms(std::time::SystemTime::now() + Duration::from_secs(100));
    match before {
        Before::Nothing => MemoryLedger::default(),
        Before::ExpiredLease => {
            MemoryLedger::with(USER, CAMPAIGN, record(SendStatus::InProgress, Some(1)))
        }
        Before::LiveLease => {
            MemoryLedger::with(USER, CAMPAIGN, record(SendStatus::InProgress, Some(far)))
        }
        Before::Sent => MemoryLedger::with(USER, CAMPAIGN, record(SendStatus::Sent, None)),
        Before::Failed | Before::FailedIncluded => {
            MemoryLedger::with(USER, CAMPAIGN, record(SendStatus::Failed, None))
        }
        Before::DeadLettered => {
            MemoryLedger::with(USER, CAMPAIGN, record(SendStatus::DeadLettered, None))
        }
    }
}

pub(super) const ADA: &str = "ada@example.com";

/// SendEmail over in-memory ports, with `ledger` and `campaigns`.
pub(super) fn stage(
    ledger: MemoryLedger,
    mailer: ScriptedMailer,
    campaigns: MemoryCampaigns,
) -> Stage {
    SendEmail::new(
        ledger,
        mailer,
        MemoryQueue::default(),
        campaigns,
        MemoryRateBucket::default(),
        MemoryWaitingRoom::default(),
        standings(),
        config(),
    )
}

pub(super) fn invocation(time_left: Duration) -> Invocation {
    Invocation::with_timeout("request-1", time_left)
}

#[tokio::test]
async fn a_ledger_that_does_not_answer_returns_the_record_unsent() {
    let mailer = ScriptedMailer::default();
    let ledger = MemoryLedger::default();
    ledger.fail_writes(1);
    let stage = stage(ledger, mailer, MemoryCampaigns::default());
    let invocation = invocation(TIMEOUT);
    let (response, summary) = stage.handle(event(ADA, 1, false), &invocation).await;
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!((summary.retried, stage.mailer.calls().len()), (1, 0));
    assert!(
        stage.queue.delays().is_empty(),
        "back after the visibility timeout"
    );
}

#[tokio::test]
async fn an_unparseable_body_fails_alone() {
    let mut event = event(ADA, 1, false);
    let mut bad = event.records[0].clone();
    bad.message_id = Some("m0".into());
    bad.body = Some("{".into());
    event.records.insert(0, bad);
    let stage = stage(
        MemoryLedger::default(),
        ScriptedMailer::default(),
        MemoryCampaigns::default(),
    );
    let invocation = invocation(TIMEOUT);
    let (response, summary) = stage.handle(event, &invocation).await;
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["m0"]);
    assert_eq!(summary.sent, 1);
}

#[tokio::test]
async fn a_local_time_email_is_measured_by_its_lateness_and_the_rate_it_went_at() {
    let mut event = event(ADA, 1, false);
    let now = crate::domain::ledger::epoch_ms(crate::runtime::clock::now()) as i64;
    let mut job: serde_json::Value =
        serde_json::from_str(event.records[0].body.as_deref().unwrap()).unwrap();
    job["due"] = serde_json::json!({"slotLateMs": 1_200, "releasedAtMs": now});
    event.records[0].body = Some(job.to_string());
    let stage = stage(
        MemoryLedger::default(),
        ScriptedMailer::default(),
        MemoryCampaigns::default(),
    );
    let (_, summary) = stage.handle(event, &invocation(TIMEOUT)).await;
    assert_eq!(summary.sent, 1);
    let late = &summary.late_ms.0;
    assert!(
        late.len() == 1 && (1_200..61_200).contains(&late[0]),
        "{late:?}"
    );
    let gauges = crate::runtime::Stage::gauges(&stage);
    let gauge = |name: &str| gauges.iter().find(|m| m.name == name).map(|m| m.values[0]);
    assert!(
        gauge("sharedRatePerSecond").is_some_and(|r| r > 0.0),
        "{gauges:?}"
    );
    assert_eq!(gauge("rateAtFloor"), Some(0.0));
    // Only an invocation that sent at the rate says what it is.
    assert!(crate::runtime::Stage::gauges(&stage).is_empty());
}

#[tokio::test]
async fn a_cancelled_campaign_sends_nothing_more_and_its_records_end_cancelled() {
    for (before, after) in [
        (Before::Nothing, SendStatus::Cancelled),
        (Before::ExpiredLease, SendStatus::Cancelled),
        (Before::Sent, SendStatus::Sent),
    ] {
        let campaigns = MemoryCampaigns::default();
        campaigns.cancel(CAMPAIGN);
        let stage = stage(ledger(before, 0), ScriptedMailer::default(), campaigns);
        let invocation = invocation(TIMEOUT);
        let (response, summary) = stage.handle(event(ADA, 1, false), &invocation).await;
        assert!(
            response.batch_item_failures.is_empty(),
            "{before:?}: acknowledged"
        );
        assert_eq!(summary.cancelled, 1, "{before:?}");
        assert!(stage.mailer.calls().is_empty(), "{before:?}: nothing sent");
        let record = stage.ledger.get(USER, CAMPAIGN).unwrap();
        assert_eq!(record.status, Some(after), "{before:?}");
    }
}

/// SES's "Daily message quota exceeded" comes with a throttling code, but no slower rate lets
/// a send through: the batch is held for an hour on the queue (one receive, never the DLQ),
/// the claims given back, and the shared rate every campaign sends at is left as it was.
#[tokio::test]
async fn the_daily_quota_holds_the_batch_and_leaves_the_shared_rate_alone() {
    let quota = || {
        crate::adapters::ses::classify(
            Some("ThrottlingException"),
            "Daily message quota exceeded.",
            true,
        )
    };
    let users = [
        "oid:65a1f0c2e4b0a1b2c3d4e5f1",
        "oid:65a1f0c2e4b0a1b2c3d4e5f2",
        USER,
    ];
    let mut batch = SqsEvent::default();
    for (i, user) in users.iter().enumerate() {
        let mut record = event(ADA, 1, false).records.remove(0);
        let mut job: serde_json::Value =
            serde_json::from_str(record.body.as_deref().unwrap()).unwrap();
        job["userId"] = (*user).into();
        record.body = Some(job.to_string());
        record.message_id = Some(format!("m{i}"));
        record.receipt_handle = Some(format!("r{i}"));
        batch.records.push(record);
    }
    let stage = stage(
        MemoryLedger::default(),
        ScriptedMailer::answering(users.map(|_| Err(quota()))),
        MemoryCampaigns::default(),
    );
    let (response, summary) = stage.handle(batch, &invocation(TIMEOUT)).await;
    assert_eq!(response.batch_item_failures.len(), 3, "returned, unsent");
    let counts = serde_json::to_value(&summary).unwrap();
    assert_eq!(counts["dailyQuotaHeld"], 3, "{counts}");
    assert_eq!(
        (counts["throttles"].as_u64(), counts["throttled"].as_u64()),
        (Some(0), Some(0)),
        "{counts}"
    );
    assert_eq!(stage.pacer.throttles(), 0, "the shared rate is not lowered");
    let mut delays = stage.queue.delays();
    delays.sort();
    assert_eq!(
        delays,
        ["r0", "r1", "r2"].map(|r| (r.to_owned(), Duration::from_secs(3600)))
    );
    for user in users {
        let record = stage.ledger.get(user, CAMPAIGN);
        if let Some(record) = record {
            assert_eq!(
                (record.status, record.lease_until_ms),
                (Some(SendStatus::InProgress), Some(0)),
                "{user}: the claim given back, not dead-lettered"
            );
        }
    }
}

#[tokio::test]
async fn a_paused_campaign_hands_its_records_back_unclaimed() {
    let campaigns = MemoryCampaigns::default();
    campaigns.pause(CAMPAIGN);
    let stage = stage(
        ledger(Before::Nothing, 0),
        ScriptedMailer::default(),
        campaigns,
    );
    let invocation = invocation(TIMEOUT);
    let (response, summary) = stage.handle(event(ADA, 1, false), &invocation).await;
    assert_eq!(response.batch_item_failures.len(), 1, "handed back");
    assert_eq!(summary.paused, 1);
    assert!(stage.mailer.calls().is_empty(), "nothing sent");
    assert_eq!(stage.ledger.get(USER, CAMPAIGN), None, "nothing claimed");
}

#[tokio::test]
async fn a_cancelled_record_is_sent_only_by_a_resend_of_the_reopened_campaign() {
    for (reopened, sent) in [(false, 0), (true, 1)] {
        let ledger = MemoryLedger::default();
        let key = SendKey::new(USER, CampaignId::parse(CAMPAIGN).unwrap());
        ledger.cancel_send(&key, 1).await.unwrap();
        let stage = stage(
            ledger,
            ScriptedMailer::default(),
            MemoryCampaigns::default(),
        );
        let mut event = event(ADA, 1, false);
        let mut job: serde_json::Value =
            serde_json::from_str(event.records[0].body.as_deref().unwrap()).unwrap();
        job["includeCancelled"] = reopened.into();
        event.records[0].body = Some(job.to_string());
        let invocation = invocation(TIMEOUT);
        let (response, summary) = stage.handle(event, &invocation).await;
        assert!(response.batch_item_failures.is_empty(), "{reopened}");
        assert_eq!(summary.sent, sent, "{reopened}");
        assert_eq!(stage.mailer.calls().len(), sent, "{reopened}");
        let status = stage.ledger.get(USER, CAMPAIGN).unwrap().status;
        let expected = if reopened {
            SendStatus::Sent
        } else {
            SendStatus::Cancelled
        };
        assert_eq!(status, Some(expected));
    }
}

/// A batch of five at one email a second with five seconds left: what finds no send slot
/// before the deadline goes back on the queue as a new message, delayed until a slot
/// comes, and is acknowledged, so that waiting for the rate never counts a receive towards
/// the DLQ (at the SES sandbox's 1/s it would, on almost every record). If the queue
/// refuses the copy, the record itself is returned with that delay, as before.
#[tokio::test]
async fn a_record_with_no_send_slot_in_time_goes_back_as_a_new_message_not_a_receive() {
    for queue_refuses in [false, true] {
        let slow = |k: &str| match k {
            "SEND_RATE_PER_SECOND" => Some("1".to_owned()),
            _ => None,
        };
        let vars = |k: &str| slow(k).or_else(|| config_var(k));
        let stage = SendEmail::new(
            MemoryLedger::default(),
            ScriptedMailer::default(),
            MemoryQueue::default(),
            MemoryCampaigns::default(),
            MemoryRateBucket::default(),
            MemoryWaitingRoom::default(),
            standings(),
            SendEmailConfig::from_source(&vars).unwrap(),
        );
        stage
            .queue
            .refuse_requeue
            .store(queue_refuses, std::sync::atomic::Ordering::SeqCst);
        let mut batch = SqsEvent::default();
        for n in 0..5 {
            let mut one = event(&format!("user{n}@example.com"), 1, false);
            let mut record = one.records.remove(0);
            let mut job: serde_json::Value =
                serde_json::from_str(record.body.as_deref().unwrap()).unwrap();
            job["userId"] = format!("u{n}").into();
            record.body = Some(job.to_string());
            record.message_id = Some(format!("m{n}"));
            record.receipt_handle = Some(format!("r{n}"));
            batch.records.push(record);
        }
        let (response, summary) = stage
            .handle(batch, &invocation(Duration::from_secs(5)))
            .await;
        let row = format!("queue refuses: {queue_refuses}; {summary:?}");
        assert!(summary.sent >= 1 && summary.paced >= 1, "{row}");
        assert_eq!(summary.sent + summary.paced, 5, "{row}");
        let requeued = crate::runtime::lock(&stage.queue.requeued).clone();
        if queue_refuses {
            assert!(requeued.is_empty(), "{row}");
            assert_eq!(response.batch_item_failures.len(), summary.paced, "{row}");
            assert_eq!(stage.queue.delays().len(), summary.paced, "{row}");
        } else {
            assert!(response.batch_item_failures.is_empty(), "{row}");
            assert!(stage.queue.delays().is_empty(), "{row}");
            assert_eq!(requeued.len(), summary.paced, "{row}");
            // Each original deleted at once, not left to the batch response.
            let deleted = crate::runtime::lock(&stage.queue.deleted).clone();
            assert_eq!(deleted.len(), summary.paced, "{row}");
            for (body, delay) in &requeued {
                assert!(*delay > Duration::ZERO, "{row}");
                // The copy is the email as it came; its user's claim was given back.
                let job: serde_json::Value = serde_json::from_str(body).unwrap();
                let user = job["userId"].as_str().unwrap();
                let record = stage.ledger.get(user, CAMPAIGN).unwrap();
                assert_eq!(record.status, Some(SendStatus::InProgress), "{row}");
                assert_eq!(record.lease_until_ms, Some(0), "{row}");
            }
        }
    }
}

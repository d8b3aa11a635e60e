//! The exactly-once decision table over in-memory ports: every claim outcome crossed with
//! every SES outcome, the deadline and the last receive, each a row that says what is
//! acknowledged, when a returned record comes back, the record's state and the count. The
//! campaign controls and the failures of the ports themselves follow the table.
//! Over 450 lines because it is the table: its rows, and the one check every row goes through.

use super::*;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::{SendKey, SendStatus};
use crate::ports::memory::{
    MemoryCampaigns, MemoryLedger, MemoryQueue, MemoryRateBucket, MemoryRecords, MemorySubscribers,
    MemoryWaitingRoom, Record, ScriptedMailer,
};

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

const USER: &str = "oid:65a1f0c2e4b0a1b2c3d4e5f6";
const CAMPAIGN: &str = "weekly-2026-W47";
/// What a send took: the function's 30 s Timeout, as on Lambda.
const TIMEOUT: Duration = Duration::from_secs(30);

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

fn event(to: &str, receives: u32, include_failed: bool) -> SqsEvent {
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
enum Before {
    Nothing,
    ExpiredLease,
    LiveLease,
    Sent,
    Failed,
    FailedIncluded,
    DeadLettered,
}

fn ledger(before: Before, send_errors: u64) -> MemoryLedger {
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

/// What SES answers the one send of a case.
#[derive(Clone, Copy, Debug)]
enum Ses {
    Accepts,
    Throttled,
    /// SES's 24-hour quota is used up.
    DailyQuota,
    Stopped,
    Rejected,
    NotAccepted,
    /// The same refusal as on the two attempts before (`MAX_SEND_ERRORS` is 3).
    RefusedAgain,
    NoAnswer,
}

impl Ses {
    fn answer(self) -> Option<SendError> {
        Some(match self {
            Ses::Accepts => return None,
            Ses::Throttled => SendError::Throttled("TooManyRequestsException: x".into()),
            Ses::DailyQuota => {
                SendError::DailyQuota("Throttling: Daily message quota exceeded".into())
            }
            Ses::Stopped => SendError::Stopped("SendingPausedException: x".into()),
            Ses::Rejected => SendError::Permanent("MessageRejected: x".into()),
            Ses::NotAccepted => SendError::NotAccepted("InternalFailure: x".into()),
            Ses::RefusedAgain => SendError::NotAccepted(
                "HTTP 500 with no error code or message (request id r)".into(),
            ),
            Ses::NoAnswer => SendError::Unknown("timed out".into()),
        })
    }
}

/// Whether the message is acknowledged, and if not, when it comes back.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Back {
    /// Acknowledged: deleted from the queue.
    Never,
    /// Returned with this delay, in whole seconds, within the inclusive range.
    In(u64, u64),
    /// Returned; the delay is the backoff of its receive count.
    Returned,
}

/// The ledger record after the message.
#[derive(Clone, Copy, Debug)]
enum After {
    /// No record: nothing was claimed.
    Nothing,
    /// SENT, with SES's message id.
    Sent,
    /// FAILED, its last error containing this.
    Failed(&'static str),
    /// The claim given back (IN_PROGRESS, lease 0), with this many send errors counted.
    Released(u64),
    /// IN_PROGRESS with its lease still running (SES may have the email).
    Kept,
    DeadLettered,
    /// SENT before, the duplicate counted on the record.
    DuplicateNoted,
    /// As it was.
    Still(SendStatus),
}

/// One row of the table.
struct Case {
    before: Before,
    send_errors: u64,
    ses: Ses,
    to: &'static str,
    receives: u32,
    /// Seconds left in the invocation.
    time_left: u64,
    back: Back,
    after: After,
    ses_calls: usize,
    /// The one count of the summary that is 1 (every other is 0).
    counted: &'static str,
}

const ADA: &str = "ada@example.com";

/// A first delivery of a record that can be claimed, by SES's answer.
const FIRST_SEND: [(Ses, Back, After, &str); 7] = [
    (Ses::Accepts, Back::Never, After::Sent, "sent"),
    // A throttle lowers the shared rate; the email waits for a slot and goes again.
    (Ses::Throttled, Back::Never, After::Sent, "sent"),
    // The 24-hour quota: held an hour, the rate untouched.
    (
        Ses::DailyQuota,
        Back::In(3600, 3600),
        After::Released(0),
        "dailyQuotaHeld",
    ),
    // The longest retry delay.
    (
        Ses::Stopped,
        Back::In(300, 300),
        After::Released(0),
        "stopped",
    ),
    (
        Ses::Rejected,
        Back::Never,
        After::Failed("MessageRejected: x"),
        "failed",
    ),
    (
        Ses::NotAccepted,
        Back::In(2, 2),
        After::Released(1),
        "retried",
    ),
    // No answer: SES may have the email, so the claim is kept until its lease ends
    // (deadline 30 s + 5 s skew) and the record comes back just after.
    (Ses::NoAnswer, Back::In(34, 36), After::Kept, "retried"),
];

/// Records that cannot be claimed never reach SES.
#[rustfmt::skip]
const NOT_CLAIMABLE: &[Case] = &[
    // Never acknowledged: if the holder dies, this copy may be the last; back when the lease ends.
    Case { before: Before::LiveLease, send_errors: 0, ses: Ses::Accepts, to: ADA, receives: 1, time_left: 30,
           back: Back::In(99, 101), after: After::Still(SendStatus::InProgress), ses_calls: 0, counted: "busy" },
    Case { before: Before::Sent, send_errors: 0, ses: Ses::Accepts, to: ADA, receives: 1, time_left: 30,
           back: Back::Never, after: After::DuplicateNoted, ses_calls: 0, counted: "duplicates" },
    Case { before: Before::Failed, send_errors: 0, ses: Ses::Accepts, to: ADA, receives: 1, time_left: 30,
           back: Back::Never, after: After::Still(SendStatus::Failed), ses_calls: 0, counted: "previouslyFailed" },
];

/// Too little time left to claim, send and mark.
#[rustfmt::skip]
const DEADLINE: &[Case] = &[
    // Too near the deadline: nothing claimed, back at once.
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::Accepts, to: ADA, receives: 1, time_left: 2,
           back: Back::In(0, 0), after: After::Nothing, ses_calls: 0, counted: "retried" },
];

/// A refusal that repeats is as good as permanent.
#[rustfmt::skip]
const REPEATED_ERRORS: &[Case] = &[
    // An error that repeats ends FAILED on the third attempt.
    Case { before: Before::ExpiredLease, send_errors: 2, ses: Ses::RefusedAgain, to: ADA, receives: 3, time_left: 30,
           back: Back::Never, after: After::Failed("(refused on 3 attempts)"), ses_calls: 1, counted: "failed" },
    Case { before: Before::DeadLettered, send_errors: 2, ses: Ses::RefusedAgain, to: ADA, receives: 3, time_left: 30,
           back: Back::Never, after: After::Failed("(refused on 3 attempts)"), ses_calls: 1, counted: "failed" },
];

/// The last receive before the DLQ.
#[rustfmt::skip]
const LAST_RECEIVE: &[Case] = &[
    // On the last receive (maxReceiveCount 10) a record that cannot be sent says so.
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::Throttled, to: ADA, receives: 10, time_left: 5,
           back: Back::Returned, after: After::DeadLettered, ses_calls: 1, counted: "throttled" },
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::NotAccepted, to: ADA, receives: 10, time_left: 30,
           back: Back::Returned, after: After::DeadLettered, ses_calls: 1, counted: "retried" },
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::NoAnswer, to: ADA, receives: 10, time_left: 30,
           back: Back::Returned, after: After::DeadLettered, ses_calls: 1, counted: "retried" },
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::Stopped, to: ADA, receives: 10, time_left: 30,
           back: Back::Returned, after: After::DeadLettered, ses_calls: 1, counted: "stopped" },
    // Waiting for the 24-hour quota never sends a record to the DLQ: a fresh copy waits instead.
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::DailyQuota, to: ADA, receives: 10, time_left: 30,
           back: Back::Never, after: After::Released(0), ses_calls: 1, counted: "dailyQuotaHeld" },
    // One receive earlier, the same throttling is an ordinary retry, after the backoff.
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::Throttled, to: ADA, receives: 9, time_left: 5,
           back: Back::In(300, 300), after: After::Released(0), ses_calls: 1, counted: "throttled" },
    // Too little time to wait for another slot: back to the queue, unsent and unclaimed.
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::Throttled, to: ADA, receives: 1, time_left: 5,
           back: Back::In(2, 2), after: After::Released(0), ses_calls: 1, counted: "throttled" },
];

/// Addresses: exactly one mailbox reaches SES.
#[rustfmt::skip]
const ADDRESSES: &[Case] = &[
    // Not one mailbox: FAILED before SES.
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::Accepts, to: "ada@example.com, eve@example.com", receives: 1, time_left: 30,
           back: Back::Never, after: After::Failed("holds 2 addresses"), ses_calls: 0, counted: "failed" },
    // An internationalised domain goes out (in punycode).
    Case { before: Before::Nothing, send_errors: 0, ses: Ses::Accepts, to: "Ada <ada@bücher.example>", receives: 1, time_left: 30,
           back: Back::Never, after: After::Sent, ses_calls: 1, counted: "sent" },
];

/// The claimable records crossed with SES's answers to their first delivery.
fn first_sends() -> Vec<Case> {
    let claimable = [
        Before::Nothing,
        Before::ExpiredLease,
        Before::DeadLettered,
        Before::FailedIncluded,
    ];
    claimable
        .into_iter()
        .flat_map(|before| {
            FIRST_SEND.map(|(ses, back, after, counted)| Case {
                before,
                send_errors: 0,
                ses,
                to: ADA,
                receives: 1,
                time_left: 30,
                back,
                after,
                // A throttled send goes again once a slot at the lowered rate comes.
                ses_calls: if matches!(ses, Ses::Throttled) { 2 } else { 1 },
                counted,
            })
        })
        .collect()
}

/// SendEmail over in-memory ports, with `ledger` and `campaigns`.
fn stage(ledger: MemoryLedger, mailer: ScriptedMailer, campaigns: MemoryCampaigns) -> Stage {
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

fn invocation(time_left: Duration) -> Invocation {
    Invocation::with_timeout("request-1", time_left)
}

/// Runs one row and checks every column; the row is named in any failure.
async fn check(case: &Case) {
    let row = format!(
        "{:?} with {} send errors, SES {:?}, to {:?}, receive {}, {} s left",
        case.before, case.send_errors, case.ses, case.to, case.receives, case.time_left
    );
    let stage = stage(
        ledger(case.before, case.send_errors),
        ScriptedMailer::answering(case.ses.answer().map(Err)),
        MemoryCampaigns::default(),
    );
    let include_failed = matches!(case.before, Before::FailedIncluded);
    let event = event(case.to, case.receives, include_failed);
    let invocation = invocation(Duration::from_secs(case.time_left));
    let (response, summary) = stage.handle(event, &invocation).await;

    let acknowledged = response.batch_item_failures.is_empty();
    let delays = stage.queue.delays();
    assert!(delays.len() <= 1, "{row}: {delays:?}");
    let delay = delays.first().map(|(_, d)| d.as_secs_f64());
    match case.back {
        Back::Never => assert!(acknowledged, "{row}: acknowledged"),
        Back::Returned => assert!(!acknowledged, "{row}: returned"),
        Back::In(low, high) => {
            assert!(!acknowledged, "{row}: returned");
            let delay = delay.unwrap_or_else(|| panic!("{row}: no delay set"));
            assert!(
                (low as f64..=high as f64 + 0.999).contains(&delay),
                "{row}: back in {delay} s, not {low}-{high}"
            );
        }
    }

    let record = stage.ledger.get(USER, CAMPAIGN);
    let status = record.as_ref().and_then(|r| r.status);
    let now = epoch_ms(std::time::SystemTime::now());
    match (case.after, &record) {
        (After::Nothing, None) => {}
        (After::Sent, Some(r)) => {
            assert_eq!(status, Some(SendStatus::Sent), "{row}");
            assert_eq!(r.ses_message_id.as_deref(), Some("ses-message-id"), "{row}");
            assert_eq!(
                r.last_error, None,
                "{row}: no earlier attempt's error on SENT"
            );
        }
        (After::Failed(reason), Some(r)) => {
            assert_eq!(status, Some(SendStatus::Failed), "{row}");
            let error = r.last_error.as_deref().unwrap_or_default();
            assert!(error.contains(reason), "{row}: {error}");
        }
        (After::Released(errors), Some(r)) => {
            assert_eq!(
                (status, r.lease_until_ms),
                (Some(SendStatus::InProgress), Some(0)),
                "{row}"
            );
            assert_eq!(r.send_errors, errors, "{row}: send errors");
        }
        (After::Kept, Some(r)) => {
            assert_eq!(status, Some(SendStatus::InProgress), "{row}");
            assert!(r.lease_until_ms.unwrap_or(0) > now, "{row}: claim kept");
        }
        (After::DeadLettered, Some(r)) => {
            assert_eq!(status, Some(SendStatus::DeadLettered), "{row}");
            assert!(r.last_error.is_some(), "{row}: says why");
        }
        (After::DuplicateNoted, Some(r)) => {
            assert_eq!(status, Some(SendStatus::Sent), "{row}");
            assert_eq!(r.duplicates_suppressed, 1, "{row}: counted on the record");
        }
        (After::Still(expected), Some(_)) => assert_eq!(status, Some(expected), "{row}"),
        (expected, record) => panic!("{row}: expected {expected:?}, the ledger holds {record:?}"),
    }

    assert_eq!(
        stage.mailer.calls().len(),
        case.ses_calls,
        "{row}: SES calls"
    );
    let mut counts = serde_json::to_value(&summary).unwrap();
    let throttles = counts["throttles"].take();
    let expected = u64::from(matches!(case.ses, Ses::Throttled) && case.ses_calls > 0);
    assert_eq!(throttles, expected, "{row}: throttles");
    assert_eq!(counts[case.counted], 1, "{row}: {counts}");
    let total: u64 = counts
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(total, 1, "{row}: one count only: {counts}");
}

async fn check_all(rows: &[Case]) {
    assert!(!rows.is_empty());
    for case in rows {
        check(case).await;
    }
}

#[tokio::test]
async fn a_claimable_record_follows_what_ses_answers() {
    let rows = first_sends();
    assert_eq!(rows.len(), 4 * FIRST_SEND.len());
    check_all(&rows).await;
}

#[tokio::test]
async fn a_record_that_cannot_be_claimed_never_reaches_ses() {
    check_all(NOT_CLAIMABLE).await;
}

#[tokio::test]
async fn too_near_the_deadline_nothing_is_claimed_and_the_record_returns_at_once() {
    check_all(DEADLINE).await;
}

#[tokio::test]
async fn an_error_that_repeats_ends_failed_after_max_send_errors() {
    check_all(REPEATED_ERRORS).await;
}

#[tokio::test]
async fn on_the_last_receive_a_record_that_cannot_be_sent_says_dead_lettered() {
    check_all(LAST_RECEIVE).await;
}

#[tokio::test]
async fn an_address_that_is_not_one_mailbox_is_failed_before_ses() {
    check_all(ADDRESSES).await;
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

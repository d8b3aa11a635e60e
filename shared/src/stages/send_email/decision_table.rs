//! The exactly-once decision table over in-memory ports: every claim outcome crossed with
//! every SES outcome, the deadline and the last receive, each checked for what is
//! acknowledged, when a returned record comes back, the record's state and the counts.
//!
//! Over 400 lines on purpose: the whole table in one place, a few lines per case.

use super::*;
use crate::domain::ledger::SendStatus;
use crate::ports::memory::{MemoryCampaigns, MemoryLedger, MemoryQueue, Record, ScriptedMailer};

const USER: &str = "oid:65a1f0c2e4b0a1b2c3d4e5f6";
const CAMPAIGN: &str = "weekly-2026-W47";
/// What a send took: the function's 30 s Timeout, as on Lambda.
const TIMEOUT: Duration = Duration::from_secs(30);

fn config() -> SendEmailConfig {
    let vars = |k: &str| {
        let v = match k {
            "SENDS_TABLE_NAME" => "sends",
            "CAMPAIGNS_TABLE_NAME" => "campaigns",
            "EMAILS_QUEUE_URL" => "http://emails",
            "SENDER_ADDRESS" => "news@example.com",
            "VISIBILITY_TIMEOUT_SECONDS" => "180",
            "FUNCTION_TIMEOUT_SECONDS" => "30",
            "SEND_RATE_PER_SECOND" => "10000",
            _ => return None,
        };
        Some(v.to_owned())
    };
    SendEmailConfig::from_source(&vars).unwrap()
}

fn event(to: &str, receives: u32, include_failed: bool) -> SqsEvent {
    let job = serde_json::json!({
        "campaignId": CAMPAIGN, "userId": USER, "to": to, "subject": "s", "html": "<p>h</p>",
        "text": "t", "includeFailed": include_failed,
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
    let far = epoch_ms(SystemTime::now() + Duration::from_secs(100));
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

/// What came of one message.
#[derive(Debug)]
struct Seen {
    acknowledged: bool,
    /// The retry delay set on the returned record (None: none set).
    delay: Option<Duration>,
    record: Option<Record>,
    ses_calls: usize,
    summary: Summary,
}

async fn deliver(
    before: Before,
    send_errors: u64,
    ses: Option<SendError>,
    to: &str,
    receives: u32,
    time_left: Duration,
) -> Seen {
    let mailer = ScriptedMailer::answering(ses.map(Err));
    let stage = SendEmail::new(
        ledger(before, send_errors),
        mailer,
        MemoryQueue::default(),
        MemoryCampaigns::default(),
        config(),
    );
    let include_failed = matches!(before, Before::FailedIncluded);
    let invocation = Invocation::with_timeout("request-1", time_left);
    let (response, summary) = stage
        .handle(event(to, receives, include_failed), &invocation)
        .await;
    let delays = stage.queue.delays();
    assert!(delays.len() <= 1, "{delays:?}");
    Seen {
        acknowledged: response.batch_item_failures.is_empty(),
        delay: delays.first().map(|(_, d)| *d),
        record: stage.ledger.get(USER, CAMPAIGN),
        ses_calls: stage.mailer.calls().len(),
        summary,
    }
}

async fn first_delivery(before: Before, ses: Option<SendError>) -> Seen {
    deliver(before, 0, ses, "ada@example.com", 1, TIMEOUT).await
}

fn status(seen: &Seen) -> Option<SendStatus> {
    seen.record.as_ref().and_then(|r| r.status)
}

const CLAIMABLE: [Before; 4] = [
    Before::Nothing,
    Before::ExpiredLease,
    Before::DeadLettered,
    Before::FailedIncluded,
];

#[tokio::test]
async fn a_claimable_record_follows_what_ses_answers() {
    for before in CLAIMABLE {
        let seen = first_delivery(before, None).await;
        assert!(seen.acknowledged, "{before:?}: {seen:?}");
        assert_eq!(status(&seen), Some(SendStatus::Sent), "{before:?}");
        assert_eq!(
            seen.record.as_ref().unwrap().ses_message_id.as_deref(),
            Some("ses-message-id")
        );
        assert_eq!((seen.ses_calls, seen.summary.sent), (1, 1), "{before:?}");

        let seen = first_delivery(
            before,
            Some(SendError::Throttled("TooManyRequestsException: x".into())),
        )
        .await;
        assert!(!seen.acknowledged, "{before:?}");
        assert_eq!(
            seen.delay,
            Some(Duration::from_secs(2)),
            "first retry delay"
        );
        assert_eq!(status(&seen), Some(SendStatus::InProgress), "{before:?}");
        assert_eq!(
            seen.record.as_ref().unwrap().lease_until_ms,
            Some(0),
            "released"
        );
        assert_eq!(seen.summary.throttled, 1);

        let seen = first_delivery(
            before,
            Some(SendError::Stopped("SendingPausedException: x".into())),
        )
        .await;
        assert!(!seen.acknowledged);
        assert_eq!(
            seen.delay,
            Some(Duration::from_secs(300)),
            "the longest retry delay"
        );
        assert_eq!(
            seen.record.as_ref().unwrap().lease_until_ms,
            Some(0),
            "released"
        );
        assert_eq!(seen.summary.stopped, 1);

        let seen = first_delivery(
            before,
            Some(SendError::Permanent("MessageRejected: x".into())),
        )
        .await;
        assert!(seen.acknowledged, "{before:?}");
        assert_eq!(status(&seen), Some(SendStatus::Failed));
        assert_eq!(
            seen.record.as_ref().unwrap().last_error.as_deref(),
            Some("MessageRejected: x")
        );
        assert_eq!(seen.summary.failed, 1);

        let seen = first_delivery(
            before,
            Some(SendError::NotAccepted("InternalFailure: x".into())),
        )
        .await;
        assert!(!seen.acknowledged);
        assert_eq!(seen.delay, Some(Duration::from_secs(2)));
        let record = seen.record.as_ref().unwrap();
        assert_eq!(
            (record.status, record.lease_until_ms),
            (Some(SendStatus::InProgress), Some(0))
        );
        assert_eq!(record.send_errors, 1, "{before:?}: counted");
        assert_eq!(seen.summary.retried, 1);

        // No answer: SES may have the email, so the claim is kept until its lease ends
        // (deadline 30 s + 5 s skew) and the record comes back just after.
        let seen = first_delivery(before, Some(SendError::Unknown("timed out".into()))).await;
        assert!(!seen.acknowledged);
        let delay = seen.delay.unwrap();
        assert!(
            (Duration::from_secs(34)..=Duration::from_secs(36)).contains(&delay),
            "{delay:?}"
        );
        let record = seen.record.as_ref().unwrap();
        assert_eq!(record.status, Some(SendStatus::InProgress));
        assert!(
            record.lease_until_ms.unwrap() > epoch_ms(SystemTime::now()),
            "claim kept"
        );
        assert_eq!(seen.summary.retried, 1);
    }
}

#[tokio::test]
async fn a_record_that_cannot_be_claimed_never_reaches_ses() {
    let seen = first_delivery(Before::LiveLease, None).await;
    assert!(
        !seen.acknowledged,
        "never acknowledged: this copy may be the last"
    );
    let delay = seen.delay.unwrap();
    assert!(
        (Duration::from_secs(99)..=Duration::from_secs(101)).contains(&delay),
        "until the lease ends: {delay:?}"
    );
    assert_eq!((seen.ses_calls, seen.summary.busy), (0, 1));

    let seen = first_delivery(Before::Sent, None).await;
    assert!(seen.acknowledged);
    assert_eq!((seen.ses_calls, seen.summary.duplicates), (0, 1));
    assert_eq!(
        seen.record.unwrap().duplicates_suppressed,
        1,
        "counted on the record"
    );

    let seen = first_delivery(Before::Failed, None).await;
    assert!(seen.acknowledged);
    assert_eq!((seen.ses_calls, seen.summary.previously_failed), (0, 1));
    assert_eq!(seen.record.unwrap().status, Some(SendStatus::Failed));
}

#[tokio::test]
async fn too_near_the_deadline_nothing_is_claimed_and_the_record_returns_at_once() {
    let seen = deliver(
        Before::Nothing,
        0,
        None,
        "ada@example.com",
        1,
        Duration::from_secs(2),
    )
    .await;
    assert!(!seen.acknowledged);
    assert_eq!(seen.delay, Some(Duration::ZERO));
    assert_eq!((seen.record, seen.ses_calls), (None, 0));
}

#[tokio::test]
async fn an_error_that_repeats_ends_failed_after_max_send_errors() {
    // Two earlier attempts were refused: the third refusal (MAX_SEND_ERRORS 3) is final.
    for before in [Before::ExpiredLease, Before::DeadLettered] {
        let seen = deliver(
            before,
            2,
            Some(SendError::NotAccepted(
                "HTTP 500 with no error code or message (request id r)".into(),
            )),
            "ada@example.com",
            3,
            TIMEOUT,
        )
        .await;
        assert!(seen.acknowledged, "{before:?}: {seen:?}");
        let record = seen.record.unwrap();
        assert_eq!(record.status, Some(SendStatus::Failed));
        assert!(record
            .last_error
            .unwrap()
            .ends_with("(refused on 3 attempts)"));
    }
}

#[tokio::test]
async fn on_the_last_receive_a_record_that_cannot_be_sent_says_dead_lettered() {
    for ses in [
        SendError::Throttled("TooManyRequestsException: x".into()),
        SendError::NotAccepted("InternalFailure: x".into()),
        SendError::Unknown("timed out".into()),
        SendError::Stopped("SendingPausedException: x".into()),
    ] {
        let seen = deliver(
            Before::Nothing,
            0,
            Some(ses.clone()),
            "ada@example.com",
            10,
            TIMEOUT,
        )
        .await;
        assert!(!seen.acknowledged, "{ses:?}");
        let record = seen.record.unwrap();
        assert_eq!(record.status, Some(SendStatus::DeadLettered), "{ses:?}");
        assert!(record.last_error.is_some());
    }
    // One receive earlier, the same throttling is an ordinary retry.
    let seen = deliver(
        Before::Nothing,
        0,
        Some(SendError::Throttled("x".into())),
        "ada@example.com",
        9,
        TIMEOUT,
    )
    .await;
    assert_eq!(status(&seen), Some(SendStatus::InProgress));
}

#[tokio::test]
async fn an_address_that_is_not_one_mailbox_is_failed_before_ses() {
    let seen = deliver(
        Before::Nothing,
        0,
        None,
        "ada@example.com, eve@example.com",
        1,
        TIMEOUT,
    )
    .await;
    assert!(seen.acknowledged);
    assert_eq!(seen.ses_calls, 0);
    let record = seen.record.unwrap();
    assert_eq!(record.status, Some(SendStatus::Failed));
    assert!(record.last_error.unwrap().contains("holds 2 addresses"));

    // An internationalised domain goes out in punycode, to and only to that address.
    let seen = deliver(
        Before::Nothing,
        0,
        None,
        "Ada <ada@bücher.example>",
        1,
        TIMEOUT,
    )
    .await;
    assert_eq!(status(&seen), Some(SendStatus::Sent));
}

#[tokio::test]
async fn a_ledger_that_does_not_answer_returns_the_record_unsent() {
    let mailer = ScriptedMailer::default();
    let ledger = MemoryLedger::default();
    ledger.fail_writes(1);
    let stage = SendEmail::new(
        ledger,
        mailer,
        MemoryQueue::default(),
        MemoryCampaigns::default(),
        config(),
    );
    let invocation = Invocation::with_timeout("request-1", TIMEOUT);
    let (response, summary) = stage
        .handle(event("ada@example.com", 1, false), &invocation)
        .await;
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!((summary.retried, stage.mailer.calls().len()), (1, 0));
    assert!(
        stage.queue.delays().is_empty(),
        "back after the visibility timeout"
    );
}

#[tokio::test]
async fn an_unparseable_body_fails_alone() {
    let mut event = event("ada@example.com", 1, false);
    let mut bad = event.records[0].clone();
    bad.message_id = Some("m0".into());
    bad.body = Some("{".into());
    event.records.insert(0, bad);
    let stage = SendEmail::new(
        MemoryLedger::default(),
        ScriptedMailer::default(),
        MemoryQueue::default(),
        MemoryCampaigns::default(),
        config(),
    );
    let invocation = Invocation::with_timeout("request-1", TIMEOUT);
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
async fn a_cancelled_campaign_sends_nothing_more_and_its_records_end_cancelled() {
    for (before, after) in [
        (Before::Nothing, SendStatus::Cancelled),
        (Before::ExpiredLease, SendStatus::Cancelled),
        (Before::Sent, SendStatus::Sent),
    ] {
        let campaigns = MemoryCampaigns::default();
        campaigns.cancel(CAMPAIGN);
        let stage = SendEmail::new(
            ledger(before, 0),
            ScriptedMailer::default(),
            MemoryQueue::default(),
            campaigns,
            config(),
        );
        let invocation = Invocation::with_timeout("request-1", TIMEOUT);
        let (response, summary) = stage
            .handle(event("ada@example.com", 1, false), &invocation)
            .await;
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

#[tokio::test]
async fn a_paused_campaign_hands_its_records_back_unclaimed() {
    let campaigns = MemoryCampaigns::default();
    campaigns.pause(CAMPAIGN);
    let stage = SendEmail::new(
        ledger(Before::Nothing, 0),
        ScriptedMailer::default(),
        MemoryQueue::default(),
        campaigns,
        config(),
    );
    let invocation = Invocation::with_timeout("request-1", TIMEOUT);
    let (response, summary) = stage
        .handle(event("ada@example.com", 1, false), &invocation)
        .await;
    assert_eq!(response.batch_item_failures.len(), 1, "handed back");
    assert_eq!(summary.paused, 1);
    assert!(stage.mailer.calls().is_empty(), "nothing sent");
    assert_eq!(stage.ledger.get(USER, CAMPAIGN), None, "nothing claimed");
}

#[tokio::test]
async fn a_cancelled_record_is_sent_only_by_a_resend_of_the_reopened_campaign() {
    for (reopened, sent) in [(false, 0), (true, 1)] {
        let ledger = MemoryLedger::default();
        ledger.cancel_send(USER, CAMPAIGN, 1).await.unwrap();
        let stage = SendEmail::new(
            ledger,
            ScriptedMailer::default(),
            MemoryQueue::default(),
            MemoryCampaigns::default(),
            config(),
        );
        let mut event = event("ada@example.com", 1, false);
        let mut job: serde_json::Value =
            serde_json::from_str(event.records[0].body.as_deref().unwrap()).unwrap();
        job["includeCancelled"] = reopened.into();
        event.records[0].body = Some(job.to_string());
        let invocation = Invocation::with_timeout("request-1", TIMEOUT);
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

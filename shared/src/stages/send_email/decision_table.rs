//! The exactly-once decision table over in-memory ports: every claim outcome crossed with
//! every SES outcome, the deadline and the last receive, each a row that says what is
//! acknowledged, when a returned record comes back, the record's state and the count. The
//! campaign controls and the failures of the ports themselves are in `tests`, with the
//! fixtures both share.

use super::tests::{event, invocation, ledger, stage, Before, ADA, CAMPAIGN, USER};
use crate::domain::ledger::{epoch_ms, SendStatus};
use crate::ports::memory::{MemoryCampaigns, Record, ScriptedMailer};
use crate::ports::SendError;
use aws_lambda_events::event::sqs::SqsBatchResponse;
use std::time::Duration;

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

    check_back(case, &row, &response, &stage.queue.delays());
    check_record(case, &row, stage.ledger.get(USER, CAMPAIGN));

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

/// The row's `back` column: acknowledged, or returned (with the delay it comes back after).
fn check_back(case: &Case, row: &str, response: &SqsBatchResponse, delays: &[(String, Duration)]) {
    let acknowledged = response.batch_item_failures.is_empty();
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
}

/// The row's `after` column: the ledger's record after the message.
fn check_record(case: &Case, row: &str, record: Option<Record>) {
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

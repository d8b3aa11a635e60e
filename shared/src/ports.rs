//! Ports: the small interfaces SendEmail depends on, so that its exactly-once decisions can
//! be tested in memory (`memory`, for unit tests) and faults injected around the real
//! services. The adapters implement them: `adapters::ses::SesMailer` (Mailer),
//! `adapters::dynamo::DynamoLedger` (SendLedger), `adapters::sqs::SqsQueue` (RetryQueue).

use crate::ledger::{Claim, ClaimOutcome, LedgerError, LostClaim};
#[cfg(test)]
pub(crate) mod memory;
use std::future::Future;
use std::time::Duration;

/// The sends ledger as SendEmail uses it (`crate::ledger` describes the state machine).
/// Every write is conditional; a refused one reports what the record holds instead.
pub trait SendLedger: Send + Sync {
    /// Claims (userId, campaignId) for one attempt: on no record, an IN_PROGRESS record whose
    /// lease has ended, a DEAD_LETTERED one, or (with `include_failed`) a FAILED one.
    fn claim(
        &self,
        claim: &Claim,
        include_failed: bool,
    ) -> impl Future<Output = Result<ClaimOutcome, LedgerError>> + Send;
    /// Counts a suppressed duplicate on a SENT record.
    fn note_duplicate(
        &self,
        user_id: &str,
        campaign_id: &str,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// SENT with the SES message id, while this attempt holds the claim.
    fn mark_sent(&self, claim: &Claim, ses_message_id: &str)
        -> impl Future<Output = Marked> + Send;
    /// FAILED with the reason, while this attempt holds the claim.
    fn mark_failed(&self, claim: &Claim, reason: &str) -> impl Future<Output = Marked> + Send;
    /// Ends the lease now; `send_error` counts an error the service answered with.
    fn release(
        &self,
        claim: &Claim,
        reason: &str,
        send_error: bool,
    ) -> impl Future<Output = Marked> + Send;
    /// DEAD_LETTERED with the reason: the message's last receive ended without a send.
    fn mark_dead_lettered(
        &self,
        claim: &Claim,
        reason: &str,
    ) -> impl Future<Output = Marked> + Send;
}

/// A write under a claim: done, refused because the claim was lost (with what the record
/// holds now), or failed.
pub type Marked = Result<Result<(), LostClaim>, LedgerError>;

/// The queue a record came from, as SendEmail uses it: to set when a returned record comes
/// back.
pub trait RetryQueue: Send + Sync {
    fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue {queue}: {operation} failed: {detail}")]
    Call {
        queue: String,
        operation: &'static str,
        detail: String,
    },
    #[error(
        "queue {queue}: {count} entries still failed after {attempts} attempts (first: {first})"
    )]
    EntriesFailed {
        queue: String,
        attempts: u32,
        count: usize,
        first: String,
        /// Indexes (into the bodies given) of the entries that were not sent.
        unsent: Vec<usize>,
    },
}

/// What a batched send did: how many entries had to be sent again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    pub sent: usize,
    pub retried: usize,
}

/// One email as SendEmail hands it to the mail service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingEmail {
    pub to: String,
    pub subject: String,
    pub html: String,
    pub text: String,
    /// Tags that tie SES events back to the ledger record.
    pub campaign_id: String,
    pub user_id: String,
    /// The one-click unsubscribe URL (RFC 8058), sent as List-Unsubscribe headers.
    pub unsubscribe_url: Option<String>,
}

/// Why a send did not go out, classified once by the adapter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Too many requests / sending rate exceeded: retry later with backoff.
    #[error("throttled: {0}")]
    Throttled(String),
    /// The account cannot send (sending paused, account suspended): stop the batch.
    #[error("sending stopped: {0}")]
    Stopped(String),
    /// This email can never be sent as it is (rejected, unverified sender, bad address).
    #[error("rejected: {0}")]
    Permanent(String),
    /// The service answered with an error: the email was not accepted, retry later.
    #[error("service error: {0}")]
    NotAccepted(String),
    /// No answer (timeout, connection lost): the email may or may not have been accepted.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

pub trait Mailer: Send + Sync {
    /// Sends one email; returns the service's message id.
    fn send(&self, email: &OutgoingEmail)
        -> impl Future<Output = Result<String, SendError>> + Send;
}

//! The mail service: one email handed to it, and why a send did not go out.

use crate::domain::ledger::SendKey;
use crate::domain::send_rate::{QuotaUnknown, SendQuota};
use std::future::Future;

/// One email as SendEmail hands it to the mail service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingEmail {
    pub to: String,
    pub subject: String,
    pub html: String,
    pub text: String,
    /// The ledger record's key, sent as the SES tags that tie its events back to it.
    pub key: SendKey,
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
    /// The account's 24-hour sending quota is used up: no send goes before its rolling
    /// window lets one through, whatever the rate.
    #[error("24-hour quota used up: {0}")]
    DailyQuota(String),
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

    /// What the service lets the account send (SES GetAccount), or why that is not known.
    fn send_quota(&self) -> impl Future<Output = Result<SendQuota, QuotaUnknown>> + Send {
        async {
            Err(QuotaUnknown(
                "this mail service has no quota to read".into(),
            ))
        }
    }
}

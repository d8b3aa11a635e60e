//! Ports: the small interfaces the stages depend on where tests need to stand in for a
//! service (to inject a crash or throttling around the real SES call).

use std::future::Future;

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

//! What the SES events and the Unsubscribe function note on existing send records.

use crate::domain::ledger::{Engagement, LedgerError, SendKey, SendStatus};
use std::future::Future;

/// What the SES events and the Unsubscribe function note on existing send records; they
/// never create or claim one.
pub trait SendRecordNotes: Send + Sync {
    /// Notes `what` on the record (the first time is kept); the record's status, or None when
    /// there is no record.
    fn note(
        &self,
        key: &SendKey,
        what: Engagement,
        at_ms: u64,
    ) -> impl Future<Output = Result<Option<SendStatus>, LedgerError>> + Send;
    /// The record's status (a hint: the writes that act on it are conditional).
    fn status_of(
        &self,
        key: &SendKey,
    ) -> impl Future<Output = Result<Option<SendStatus>, LedgerError>> + Send;
    /// SES sent this email: an IN_PROGRESS or DEAD_LETTERED record becomes SENT. Whether it did.
    fn reconcile_sent(
        &self,
        key: &SendKey,
        ses_message_id: &str,
        at_ms: u64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;
}

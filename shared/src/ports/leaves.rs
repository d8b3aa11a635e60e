//! One-click leaves MongoDB did not take, kept in the sends table until the person
//! chooses the topic again.

use crate::domain::ledger::{LedgerError, SendKey};
use crate::domain::topics::TopicId;
use std::future::Future;

/// One-click unsubscribes that MongoDB did not take in time, kept in the sends table (no
/// MongoDB needed) on an item of their own per user and topic (`userId`, `#left#<topic>`:
/// no campaign id holds a `#`), never expiring. CreateEmails leaves out of every campaign of
/// the topic a user whose leave stands, so the person gets no further email of that topic
/// whatever MongoDB says (docs/emails.md).
pub trait PendingLeaves: Send + Sync {
    /// The user of `key` left `topic` at `at_ms` (from the email of `key`); a later leave
    /// moves the time on.
    fn record_leave(
        &self,
        key: &SendKey,
        topic: &TopicId,
        at_ms: u64,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// The user chose `topic` again at `at_ms` (the preference centre's save, MongoDB
    /// answering): a leave recorded before then no longer stands. Nothing when there is none.
    fn rejoined(
        &self,
        user_id: &str,
        topic: &TopicId,
        at_ms: u64,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// Of `users`, those whose recorded leave of `topic` stands.
    fn standing_leaves(
        &self,
        users: &[String],
        topic: &TopicId,
    ) -> impl Future<Output = Result<std::collections::HashSet<String>, LedgerError>> + Send;
}

/// The sort key of a user's pending leave of `topic` in the sends table.
pub fn pending_leave_key(topic: &TopicId) -> String {
    format!("#left#{topic}")
}

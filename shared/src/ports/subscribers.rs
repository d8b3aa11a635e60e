//! Who may be emailed: unsubscribes, topic choices and suppressions, and what a change found.

use super::StoreError;
use crate::domain::ledger::SendKey;
use crate::domain::topics::{Preferences, Save, TopicId, Topics};
use std::future::Future;

/// Who may be emailed (MongoDB's users): unsubscribes and suppressions, each idempotent.
/// Each call names the campaign whose email it came from (`key`): its users are where that
/// campaign's recipients are (ours, or those its definition names).
pub trait SubscriberStore: Send + Sync {
    /// The user of `key` leaves `list`, from the email of `key`.
    fn unsubscribe(
        &self,
        key: &SendKey,
        list: &str,
        at_ms: i64,
    ) -> impl Future<Output = Result<Change, SubscriberError>> + Send;
    /// The user of `key` leaves `topic` (a one-click unsubscribe, or the page's button),
    /// from the email of `key`; the first time is kept.
    fn leave_topic(
        &self,
        key: &SendKey,
        topic: &TopicId,
        via: ChangedVia,
        at_ms: i64,
    ) -> impl Future<Output = Result<Change, SubscriberError>> + Send;
    /// What the preference centre shows: the choices and stored language of the user of
    /// `key`, among the recipients of its campaign (None: no such user).
    fn preferences(
        &self,
        key: &SendKey,
        topics: &Topics,
    ) -> impl Future<Output = Result<Option<(Preferences, Option<String>)>, SubscriberError>> + Send;
    /// Writes a save of the preference centre (each changed topic, and a resubscribe),
    /// recording when and from the email of `key`.
    fn save_preferences(
        &self,
        key: &SendKey,
        save: &Save,
        at_ms: i64,
    ) -> impl Future<Output = Result<Change, SubscriberError>> + Send;
    /// The user of `key` is never emailed again, for what happened to the email of `key`.
    fn suppress(
        &self,
        key: &SendKey,
        reason: SuppressionReason,
        detail: &str,
        at_ms: i64,
    ) -> impl Future<Output = Result<Change, SubscriberError>> + Send;
}

/// Why a subscriber's read or change did not happen.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SubscriberError {
    /// A store did not answer, or answered with an error: the same call may work later.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The same call fails the same way every time: the campaign's recipients cannot be
    /// found (its pinned definition version cannot be read, or this build refuses it), or
    /// the user's document cannot take the write. The text names which, and why.
    #[error("{0}")]
    Lasting(String),
}

impl SubscriberError {
    pub fn is_lasting(&self) -> bool {
        matches!(self, Self::Lasting(_))
    }
}

/// Where every failure is a store's error (the preference centre answers both the same).
impl From<SubscriberError> for StoreError {
    fn from(err: SubscriberError) -> Self {
        match err {
            SubscriberError::Store(err) => err,
            SubscriberError::Lasting(why) => StoreError(why),
        }
    }
}

/// What a change to a subscriber found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Made,
    /// Already so (a repeated request, a duplicate event).
    AlreadyDone,
    NoSuchUser,
}

/// Where a topic choice was made (recorded with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangedVia {
    /// A mail client's one-click unsubscribe (RFC 8058).
    OneClick,
    /// The preference centre.
    Page,
}

impl ChangedVia {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OneClick => "one-click",
            Self::Page => "page",
        }
    }
}

/// Why an address is never emailed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuppressionReason {
    /// A permanent (hard) bounce: the address does not exist or refuses mail.
    Bounce,
    /// The recipient marked the email as spam.
    Complaint,
}

impl SuppressionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bounce => "bounce",
            Self::Complaint => "complaint",
        }
    }
}

//! One user's standing read afresh, for an email that waited.

use super::SubscriberError;
use crate::domain::ledger::SendKey;
use crate::domain::topics::{Standing, TopicId};
use std::future::Future;

/// One user's standing as their document says it now: SendEmail reads it again before it
/// sends an email that waited since it was rendered (`stages::send_email::Wanted`).
pub trait UserStandings: Send + Sync {
    /// The standing of the user of `key` for its campaign, of `topic`, read where the
    /// campaign's recipients are (None: no such user).
    fn standing(
        &self,
        key: &SendKey,
        topic: &TopicId,
    ) -> impl Future<Output = Result<Option<Standing>, SubscriberError>> + Send;
}

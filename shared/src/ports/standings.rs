//! One user's standing read afresh, for an email that waited.

use super::StoreError;
use crate::domain::topics::{Standing, TopicId};
use std::future::Future;

/// One user's standing as their document says it now: SendEmail reads it again before it
/// sends an email that waited since it was rendered (`stages::send_email::Wanted`).
pub trait UserStandings: Send + Sync {
    /// Their standing for a campaign of `topic` (None: no such user).
    fn standing(
        &self,
        user_id: &str,
        topic: &TopicId,
    ) -> impl Future<Output = Result<Option<Standing>, StoreError>> + Send;
}

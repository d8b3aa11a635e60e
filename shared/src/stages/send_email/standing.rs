//! A person's standing read again at the send. CreateEmails applied the audience rule when
//! it rendered the email, but an email can wait hours after that (a backlog at the send
//! rate, quiet hours): one that waited longer than `STANDING_CHECK_AFTER` is not sent to a
//! person who has since unsubscribed, been suppressed or left its topic, by the page or by a
//! one-click MongoDB did not take (the pending leave in the sends table).

use crate::domain::guardrails::Skip;
use crate::domain::ledger::SendKey;
use crate::domain::topics::Topic;
use crate::ports::{PendingLeaves, StoreError, SubscriberError, UserStandings};
use std::future::Future;
use std::time::Duration;

/// An email rendered longer ago than this has its person's standing read again before it is
/// sent (a pending-leave GetItem, then one MongoDB find by `_id`). Under it, the send skips
/// both reads: an email that did not wait costs nothing more.
pub const STANDING_CHECK_AFTER: Duration = Duration::from_secs(5 * 60);

/// Whether a person still wants a topic's emails, read now.
pub trait Standings: Send + Sync {
    /// Why the person of `key` no longer gets its campaign's email, of `topic` (None: they
    /// still do).
    fn left(
        &self,
        key: &SendKey,
        topic: &Topic,
    ) -> impl Future<Output = Result<Option<Skip>, SubscriberError>> + Send;
}

/// The standing as CreateEmails reads it: a pending one-click leave of the topic (the sends
/// table), then the user's document (MongoDB, where the campaign's recipients are).
pub struct Wanted<U, P> {
    pub users: U,
    pub pending: P,
}

impl<U: UserStandings, P: PendingLeaves> Standings for Wanted<U, P> {
    async fn left(&self, key: &SendKey, topic: &Topic) -> Result<Option<Skip>, SubscriberError> {
        let user = [key.user_id().to_owned()];
        let leaves = self
            .pending
            .standing_leaves(&user, &topic.id)
            .await
            .map_err(|err| StoreError(err.to_string()))?;
        if !leaves.is_empty() {
            return Ok(Some(Skip::LeftTopic));
        }
        Ok(match self.users.standing(key, &topic.id).await? {
            None => Some(Skip::Vanished),
            Some(standing) => standing.exclusion(topic).map(Skip::from),
        })
    }
}

/// Whether an email rendered at `rendered_at_ms` has waited long enough at `now_ms` to have
/// its standing read again. A job without the time (rendered by a version before it was
/// carried, in flight at the deploy) is sent on CreateEmails' reading, as it was then.
pub fn waited(rendered_at_ms: Option<i64>, now_ms: i64) -> bool {
    rendered_at_ms.is_some_and(|at| now_ms - at > STANDING_CHECK_AFTER.as_millis() as i64)
}

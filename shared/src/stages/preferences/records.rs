//! What the function writes in the sends table besides MongoDB: a one-click MongoDB did not
//! take (a pending leave, lifted when the topic is chosen again) and each change's note for
//! the campaign analytics, each within its own bound.

use super::{busy, Unsubscribe};
use crate::domain::ledger::{epoch_ms, Engagement};
use crate::domain::topics::TopicId;
use crate::domain::unsubscribe_link::Subscription;
use crate::ports::{Change, PendingLeaves, SendRecordNotes, StoreError, SubscriberStore};
use crate::runtime::function_url::HttpResponse;
use std::time::{Duration, SystemTime};

/// What the function writes in the sends table: analytics notes and pending leaves.
pub trait Records: SendRecordNotes + PendingLeaves {}
impl<T: SendRecordNotes + PendingLeaves> Records for T {}

/// The longest the record of a one-click MongoDB did not take waits (DynamoDB): the last
/// chance not to lose the leave, so it gets most of what the function's 10 s leave after
/// MongoDB's 3 s and the note's 1 s (a throttled table's retries back off for seconds).
const RECORD_TIMEOUT: Duration = Duration::from_secs(4);
/// The longest an analytics note or a rejoin waits (DynamoDB; neither decides the answer).
const NOTE_TIMEOUT: Duration = Duration::from_secs(1);

impl<S: SubscriberStore, R: Records> Unsubscribe<S, R> {
    /// A one-click MongoDB did not take (`err`): recorded in the sends table, where
    /// CreateEmails honours it, and answered 202; 503 only if that fails too.
    pub(super) async fn pending(
        &self,
        subscription: &Subscription,
        token: &str,
        err: &StoreError,
        language: &'static str,
        at: SystemTime,
    ) -> HttpResponse {
        let key = subscription.key();
        let recorded = tokio::time::timeout(
            RECORD_TIMEOUT,
            self.records
                .record_leave(&key, &subscription.topic, epoch_ms(at)),
        )
        .await;
        match recorded {
            Ok(Ok(())) => {
                tracing::warn!(reason = %err, "MongoDB did not take the one-click; recorded as a pending leave, which every later campaign honours");
                let mut page = self
                    .left(subscription, token, Ok(Change::Made), language, at)
                    .await;
                page.status = 202;
                page
            }
            Ok(Err(record)) => {
                tracing::error!(reason = %record, "the pending leave could not be recorded either");
                busy(language, err)
            }
            Err(_) => {
                tracing::error!("the pending leave could not be recorded in time either");
                busy(language, err)
            }
        }
    }

    /// The topic chosen again on the page: a pending one-click of it no longer stands.
    pub(super) async fn rejoined(&self, subscription: &Subscription, topic: &TopicId, at_ms: i64) {
        let at_ms = u64::try_from(at_ms).unwrap_or(0);
        let rejoined = self.records.rejoined(&subscription.user_id, topic, at_ms);
        match tokio::time::timeout(NOTE_TIMEOUT, rejoined).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::error!(reason = %err, %topic, "topic chosen again, but an earlier pending one-click of it could not be lifted")
            }
            Err(_) => {
                tracing::error!(%topic, "topic chosen again, but an earlier pending one-click of it could not be lifted in time")
            }
        }
    }

    /// For the campaign analytics; the change itself is already saved.
    pub(super) async fn note(&self, subscription: &Subscription, at: SystemTime) {
        let key = subscription.key();
        let note = self
            .records
            .note(&key, Engagement::Unsubscribed, epoch_ms(at));
        match tokio::time::timeout(NOTE_TIMEOUT, note).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => {
                tracing::warn!(reason = %err, "unsubscribe saved, but not counted in the campaign analytics")
            }
            Err(_) => tracing::warn!(
                "unsubscribe saved, but not counted in the campaign analytics in time"
            ),
        }
    }
}

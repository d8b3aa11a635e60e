//! The audience: subscribed users whose address is not suppressed, with at least one new
//! follower in the window, in user id order, streamed with two cursors and never held in
//! memory.
//!
//! It is a merge join of two sorted index scans: the window's follows ordered by followeeId
//! (index `followeeId_1_createdAt_1`, keys only) and the eligible users ordered by `_id`.
//! Both resume after a checkpoint (the last user id enqueued), which is how GetUsers
//! continues a large audience in a fresh invocation.

use super::{follows_index_keys, window_filter, FOLLOWS, USERS};
use crate::campaign::Window;
use futures::TryStreamExt;
use mongodb::bson::{doc, Document};
use mongodb::options::Hint;
use mongodb::{Cursor, Database};
use serde::Deserialize;

#[derive(Deserialize)]
struct FolloweeKey {
    #[serde(rename = "followeeId")]
    followee_id: String,
}

#[derive(Deserialize)]
struct UserKey {
    #[serde(rename = "_id")]
    id: String,
}

pub struct Audience {
    followees: Cursor<FolloweeKey>,
    users: Cursor<UserKey>,
    last_followee: Option<String>,
    user_head: Option<String>,
}

const CURSOR_BATCH: u32 = 1000;

impl Audience {
    /// The audience filter on follows, exposed so a test can `explain` it.
    pub fn follows_filter(window: &Window, after: Option<&str>) -> Document {
        let mut filter = doc! { "createdAt": window_filter(window) };
        if let Some(after) = after {
            filter.insert("followeeId", doc! { "$gt": after });
        }
        filter
    }

    pub fn follows_hint() -> Hint {
        Hint::Keys(follows_index_keys())
    }

    pub async fn open(
        db: &Database,
        window: &Window,
        after: Option<&str>,
    ) -> mongodb::error::Result<Self> {
        let followees = db
            .collection::<FolloweeKey>(FOLLOWS)
            .find(Self::follows_filter(window, after))
            .sort(doc! { "followeeId": 1 })
            .projection(doc! { "_id": 0, "followeeId": 1 })
            .hint(Self::follows_hint())
            .batch_size(CURSOR_BATCH)
            .await?;
        // A suppression (permanent bounce, complaint) is never emailed again.
        let mut users_filter = doc! { "subscribed": true, "suppression": { "$exists": false } };
        if let Some(after) = after {
            users_filter.insert("_id", doc! { "$gt": after });
        }
        let users = db
            .collection::<UserKey>(USERS)
            .find(users_filter)
            .sort(doc! { "_id": 1 })
            .projection(doc! { "_id": 1 })
            .hint(Hint::Keys(doc! { "_id": 1 }))
            .batch_size(CURSOR_BATCH)
            .await?;
        Ok(Self {
            followees,
            users,
            last_followee: None,
            user_head: None,
        })
    }

    /// The next user of the audience, in ascending id order.
    pub async fn next(&mut self) -> mongodb::error::Result<Option<String>> {
        loop {
            let Some(followee) = self.next_followee().await? else {
                return Ok(None);
            };
            // Advance the users cursor to the first subscribed user >= followee.
            loop {
                match &self.user_head {
                    Some(user) if *user >= followee => break,
                    _ => match self.users.try_next().await? {
                        Some(user) => self.user_head = Some(user.id),
                        None => return Ok(None),
                    },
                }
            }
            if self.user_head.as_deref() == Some(followee.as_str()) {
                return Ok(Some(followee));
            }
        }
    }

    /// The next distinct followee (follows arrive sorted, so duplicates are adjacent).
    async fn next_followee(&mut self) -> mongodb::error::Result<Option<String>> {
        while let Some(key) = self.followees.try_next().await? {
            if self.last_followee.as_deref() != Some(key.followee_id.as_str()) {
                self.last_followee = Some(key.followee_id.clone());
                return Ok(Some(key.followee_id));
            }
        }
        Ok(None)
    }
}

//! The pick directory on MongoDB (`ports::PickDirectory`): a recipient's newest followers
//! (the follows index, at most `limit` follows), then in parallel whom of them the recipient
//! follows (the follow-back index `{followerId: 1, followeeId: 1}`) and their user documents
//! (names, and whether they exist). Three round trips, two of them at once, whatever the
//! recipient's audience. No hints: each query's equality prefix has exactly one index, which
//! the planner picks (the explain test shows it), and a hint makes SecantusDB scan the whole
//! index (about 250 ms at 5,000 follows instead of 5). The driver waits up to 30 s for a
//! server it cannot reach: OpenContent bounds every call it makes here (the choice, the
//! subscription check, the cold start's index check), so that a MongoDB that hangs costs a
//! request its bound, never its answer.

use super::bson_ids as ids;
use super::mongo::{
    follow_back_keys, follows_index_keys, CREATED_AT, FOLLOWEE_ID, FOLLOWER_ID, FOLLOWS, NAME,
    SUBSCRIBED, SUPPRESSION, USERS,
};
use crate::domain::open_content::picks::Follower;
use crate::domain::user_id::UserId;
use crate::ports::{IndexCheck, PickDirectory, StoreError};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::Database;
use std::collections::{HashMap, HashSet};

#[derive(Clone)]
pub struct MongoPicks {
    db: Database,
}

impl MongoPicks {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

/// The recipient's follows, newest first: a backwards range of the follows index.
pub fn newest_follows(recipient: &Bson) -> (Document, Document) {
    (
        doc! { FOLLOWEE_ID: recipient.clone() },
        doc! { FOLLOWEE_ID: -1, CREATED_AT: -1 },
    )
}

/// Which of `candidates` the recipient follows: a range of the follow-back index per
/// candidate.
pub fn followed_back(recipient: &Bson, candidates: &[Bson]) -> Document {
    doc! { FOLLOWER_ID: recipient.clone(), FOLLOWEE_ID: { "$in": candidates.to_vec() } }
}

impl PickDirectory for MongoPicks {
    async fn followers(
        &self,
        recipient: &UserId,
        limit: usize,
    ) -> Result<(Vec<Follower>, HashSet<String>), StoreError> {
        let me = ids::to_bson(recipient);
        let follows = self.db.collection::<Document>(FOLLOWS);
        let (filter, sort) = newest_follows(&me);
        let newest: Vec<UserId> = follows
            .find(filter)
            .sort(sort)
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .projection(doc! { "_id": 0, FOLLOWER_ID: 1 })
            .await?
            // A follower id no user can have (a number, null, an array) is nobody to pick.
            .try_filter_map(|d| async move { Ok(d.get(FOLLOWER_ID).and_then(ids::from_bson)) })
            .try_collect()
            .await?;
        let wanted: Vec<Bson> = {
            let mut seen = HashSet::new();
            newest
                .iter()
                .filter(|id| seen.insert((*id).clone()))
                .map(ids::to_bson)
                .collect()
        };
        if wanted.is_empty() {
            return Ok((Vec::new(), HashSet::new()));
        }
        let back = async {
            follows
                .find(followed_back(&me, &wanted))
                .projection(doc! { "_id": 0, FOLLOWEE_ID: 1 })
                .await?
                .try_filter_map(|d| async move {
                    Ok(d.get(FOLLOWEE_ID)
                        .and_then(ids::from_bson)
                        .map(|id| id.to_string()))
                })
                .try_collect::<HashSet<String>>()
                .await
        };
        let users = async {
            self.db
                .collection::<Document>(USERS)
                .find(doc! { "_id": { "$in": wanted.clone() } })
                .projection(doc! { NAME: 1 })
                .await?
                .try_filter_map(|d| async move {
                    Ok(d.get("_id").and_then(ids::from_bson).map(|id| {
                        // A name of another type is no name.
                        (id, d.get_str(NAME).ok().map(str::to_owned))
                    }))
                })
                .try_collect::<HashMap<UserId, Option<String>>>()
                .await
        };
        let (back, users) = tokio::try_join!(back, users)?;
        let followers = newest
            .into_iter()
            .map(|id| {
                let found = users.get(&id);
                Follower {
                    id: id.to_string(),
                    name: found.cloned().flatten(),
                    exists: found.is_some(),
                }
            })
            .collect();
        Ok((followers, back))
    }

    async fn may_count(&self, recipient: &UserId) -> Result<bool, StoreError> {
        let user = self
            .db
            .collection::<Document>(USERS)
            .find_one(doc! { "_id": ids::to_bson(recipient) })
            .projection(doc! { SUBSCRIBED: 1, SUPPRESSION: 1 })
            .await?;
        Ok(user.is_some_and(|u| {
            u.get_bool(SUBSCRIBED).unwrap_or(false) && !u.contains_key(SUPPRESSION)
        }))
    }

    /// Both indexes the choice reads through, with one `listIndexes`: a missing one is
    /// `Missing` with what to run (the cold start refuses to serve); MongoDB not answering
    /// is an error (the cold start serves what needs no MongoDB).
    async fn check_indexes(&self) -> Result<IndexCheck, StoreError> {
        let found: Vec<Document> = match self
            .db
            .collection::<Document>(FOLLOWS)
            .list_indexes()
            .await
        {
            Ok(cursor) => cursor
                .try_collect::<Vec<_>>()
                .await?
                .into_iter()
                .map(|index| index.keys)
                .collect(),
            // No follows collection yet: no index either.
            Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == 26) => {
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
        let missing: Vec<String> = [
            (follows_index_keys(), "the audience scan, the enrichment and the picks"),
            (follow_back_keys(), "the follow-back picks"),
        ]
        .into_iter()
        .filter(|(keys, _)| !found.contains(keys))
        .map(|(keys, why)| {
            format!(
                "the index {keys} on {}.{FOLLOWS} is missing: {why} need it; create it with `mailctl create-indexes` (see docs/deploying.md) or as `db.{FOLLOWS}.createIndex({keys})`",
                self.db.name()
            )
        })
        .collect();
        Ok(if missing.is_empty() {
            IndexCheck::Present
        } else {
            IndexCheck::Missing(missing.join("; "))
        })
    }
}

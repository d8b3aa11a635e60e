//! The audience's merge join: documents whose `by` field names a user (a definition's
//! audience query, in that field's order) against the users in `_id` order, each user whom
//! the campaign's topic lets in (subscribed, not suppressed, not out of the topic:
//! `Standing::exclusion`) once, in user id order, streamed with two cursors and never held
//! in memory. Those left out are counted by reason as the join meets them.
//!
//! Ids may be strings or ObjectIds, mixed in one collection; the join runs once per id type
//! (strings, then ObjectIds, MongoDB's own order), each pass a range of the same indexes, so
//! it never depends on how a server orders one type against another. Both scans resume
//! after a checkpoint (the last user id enqueued), which is how GetUsers continues a large
//! audience in a fresh invocation.

use super::window_filter;
use crate::adapters::bson_ids::{self as ids, from_bson, type_name};
use crate::adapters::field_path::{self, Field};
use crate::adapters::mongo::{CREATED_AT, FOLLOWEE_ID, FOLLOWS};
use crate::adapters::profile::ProfileFields;
use crate::domain::campaign::Window;
use crate::domain::digest::{OddFollow, OddFollows};
use crate::domain::local_time::ZoneField;
use crate::domain::topics::{Exclusion, Topic, TopicId};
use crate::domain::user_id::UserId;
use crate::ports::AudienceMember;
use futures::TryStreamExt;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::Hint;
use mongodb::{Cursor, Database};
use std::sync::Arc;

/// The id types the audience can hold, in MongoDB's sort order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IdType {
    Text,
    ObjectId,
}

impl IdType {
    pub(crate) const ALL: [IdType; 2] = [IdType::Text, IdType::ObjectId];

    pub(crate) fn of(id: &UserId) -> Self {
        match id {
            UserId::Text(_) => Self::Text,
            UserId::ObjectId(_) => Self::ObjectId,
        }
    }

    /// `{$gte: <smallest value of the type>}`: MongoDB compares within one type only, so this
    /// is the whole type and nothing else, as one index range.
    fn all_of_type(self) -> Document {
        match self {
            Self::Text => doc! { "$gte": "" },
            Self::ObjectId => doc! { "$gte": ObjectId::from_bytes([0; 12]) },
        }
    }

    pub fn range(self, after: Option<&UserId>) -> Document {
        match after {
            Some(after) if IdType::of(after) == self => doc! { "$gt": ids::to_bson(after) },
            _ => self.all_of_type(),
        }
    }
}

/// One id type's merge join: documents whose `by` field names a user, in that order (the
/// follows, or a definition's audience), against the users in `_id` order
/// (`adapters::definition`).
pub(crate) struct Pass {
    kind: IdType,
    keys: Cursor<Document>,
    users: Cursor<Document>,
    join: Arc<Join>,
    last_key: Option<UserId>,
    /// The users cursor's current user, and why they are left out (None: they are in).
    user_head: Option<(AudienceMember, Option<Exclusion>)>,
}

/// Where the join reads: the keys' collection and field, and the users' fields.
pub(crate) struct Join {
    pub keys_collection: String,
    pub by: String,
    pub users: ProfileFields,
}

pub(crate) const CURSOR_BATCH: u32 = 1000;

/// The users of one id type after `after`, in `_id` order, with the fields the audience
/// rule and local-time delivery read.
pub(crate) async fn users_cursor(
    db: &Database,
    fields: &ProfileFields,
    topic: &TopicId,
    kind: IdType,
    after: Option<&UserId>,
) -> mongodb::error::Result<Cursor<Document>> {
    let standing = fields.standing.paths(topic);
    let projection = field_path::projection(
        ["_id"]
            .into_iter()
            .chain(standing.iter().map(String::as_str))
            .chain(fields.zone.as_deref()),
    );
    db.collection::<Document>(&fields.collection)
        .find(doc! { "_id": kind.range(after) })
        .sort(doc! { "_id": 1 })
        .projection(projection)
        .hint(Hint::Keys(doc! { "_id": 1 }))
        .batch_size(CURSOR_BATCH)
        .await
}

/// The window's follows whose followeeId or followerId is not a usable id (a number,
/// null, missing, empty, an array even of ids...): nobody is found through them. Both
/// counts in one pass over the window; up to `limit` odd followees are described.
pub(crate) async fn odd_follows(
    db: &Database,
    window: &Window,
    limit: i64,
) -> mongodb::error::Result<OddFollows> {
    let usable = |field: &str| {
        doc! { "$and": [
            { "$in": [{ "$type": field }, ["string", "objectId"]] },
            { "$ne": [field, ""] },
        ] }
    };
    let pipeline = [
        doc! { "$match": { CREATED_AT: window_filter(window) } },
        doc! { "$group": {
            "_id": Bson::Null,
            "followees": { "$sum": { "$cond": [usable("$followeeId"), 0, 1] } },
            "followers": { "$sum": { "$cond": [usable("$followerId"), 0, 1] } },
        } },
    ];
    let follows = db.collection::<Document>(FOLLOWS);
    let counts = follows.aggregate(pipeline).await?.try_next().await?;
    let count = |name: &str| match counts.as_ref().and_then(|c| c.get(name)) {
        Some(Bson::Int32(n)) => *n as u64,
        Some(Bson::Int64(n)) => *n as u64,
        _ => 0,
    };
    let mut odd = OddFollows {
        followees: count("followees"),
        followers: count("followers"),
        described: Vec::new(),
    };
    if odd.followees == 0 {
        return Ok(odd);
    }
    let filter = doc! {
        CREATED_AT: window_filter(window),
        // `$type` matches an array by its elements: arrays are named on their own.
        "$or": [
            { FOLLOWEE_ID: { "$not": { "$type": ["string", "objectId"] } } },
            { FOLLOWEE_ID: { "$type": "array" } },
            { FOLLOWEE_ID: "" },
        ],
    };
    let described = follows
        .find(filter)
        .projection(doc! { "_id": 1, FOLLOWEE_ID: 1 })
        .limit(limit)
        .await?
        .map_ok(|d| OddFollow {
            reason: ids::bad_field(FOLLOWS, &d, FOLLOWEE_ID, "a string or an ObjectId"),
        })
        .try_collect()
        .await?;
    odd.described = described;
    Ok(odd)
}

impl Pass {
    pub(crate) fn new(
        kind: IdType,
        keys: Cursor<Document>,
        users: Cursor<Document>,
        join: Arc<Join>,
    ) -> Self {
        Self {
            kind,
            keys,
            users,
            join,
            last_key: None,
            user_head: None,
        }
    }

    /// The next user with a key (a new follower), and why they are left out (None: in).
    pub(crate) async fn next(
        &mut self,
        topic: &Topic,
    ) -> mongodb::error::Result<Option<(AudienceMember, Option<Exclusion>)>> {
        loop {
            let Some(key) = self.next_key().await? else {
                return Ok(None);
            };
            // Advance the users cursor to the first user >= key.
            loop {
                match &self.user_head {
                    Some((user, _)) if user.id >= key => break,
                    _ => match self.users.try_next().await? {
                        Some(user) => {
                            let collection = self.join.users.collection.as_str();
                            let Some(id) = self.id_of(&user, "_id", collection) else {
                                continue;
                            };
                            let fields = &self.join.users;
                            let zone = fields.zone.as_deref().map_or(ZoneField::Missing, |path| {
                                match field_path::get(&user, path) {
                                    Field::Blocked { found, .. } => zone_field(Some(found)),
                                    field => zone_field(field.value()),
                                }
                            });
                            let member = AudienceMember { id, zone };
                            let exclusion =
                                fields.standing.standing(&user, &topic.id).exclusion(topic);
                            self.user_head = Some((member, exclusion));
                        }
                        None => return Ok(None),
                    },
                }
            }
            if let Some(head) = self.user_head.as_ref().filter(|(u, _)| u.id == key) {
                return Ok(Some(head.clone()));
            }
        }
    }

    /// The next distinct key (they arrive sorted, so duplicates are adjacent).
    async fn next_key(&mut self) -> mongodb::error::Result<Option<UserId>> {
        while let Some(doc) = self.keys.try_next().await? {
            let join = self.join.clone();
            let Some(id) = self.id_of(&doc, &join.by, &join.keys_collection) else {
                continue;
            };
            if self.last_key.as_ref() != Some(&id) {
                self.last_key = Some(id.clone());
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// The id in `field`, if it is of this pass's type. An index range of one type can still
    /// return another value when the field is an array (each element is a key) or an empty
    /// string: those are skipped, once each, with a warning.
    fn id_of(&self, doc: &Document, field: &str, collection: &str) -> Option<UserId> {
        let value = field_path::get(doc, field).value();
        match value.and_then(from_bson) {
            Some(id) if IdType::of(&id) == self.kind => Some(id),
            _ => {
                tracing::warn!(
                    collection,
                    field,
                    found = type_name(value),
                    "skipped a value that is not a usable user id"
                );
                None
            }
        }
    }
}

/// The time zone field as local-time delivery reads it.
pub(crate) fn zone_field(value: Option<&Bson>) -> ZoneField {
    match value {
        None | Some(Bson::Null) => ZoneField::Missing,
        Some(Bson::String(s)) if s.trim().is_empty() => ZoneField::Missing,
        Some(Bson::String(s)) => ZoneField::Text(s.clone()),
        other => ZoneField::Other(type_name(other)),
    }
}

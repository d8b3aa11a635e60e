//! The user directory on MongoDB (`ports::UserDirectory`): the audience (`audience`) and
//! each user's digest (`enrich`), read from two collections.
//!
//! Data model: `users {_id, email, name, subscribed: bool, locale?, suppression?, topics?}`
//! (`topics`: `crate::adapters::preferences`) and
//! `follows {followerId, followeeId, createdAt: date}`, where every id is a string or an
//! ObjectId (`crate::domain::user_id` says how they travel outside MongoDB, `bson_ids` converts).

mod audience;
mod enrich;

pub use audience::{Audience, IdType};

use crate::domain::campaign::Window;
use crate::domain::digest::{Enrichment, OddFollows};
use crate::domain::topics::Topic;
use crate::domain::user_id::UserId;
use crate::ports::{StoreError, UserDirectory};
use mongodb::bson::doc;
use mongodb::{Database, IndexModel};

pub const USERS: &str = "users";
pub const FOLLOWS: &str = "follows";
/// The user document's IANA time zone (local-time delivery); read by the audience scan.
pub const TIMEZONE: &str = "timezone";
/// Serves both the audience scan (followees in id order, window on createdAt) and the
/// per-user enrichment (one followee's newest follows in the window).
pub const FOLLOWS_INDEX: &str = "followeeId_1_createdAt_1";

fn follows_index_keys() -> mongodb::bson::Document {
    doc! { "followeeId": 1, "createdAt": 1 }
}

/// The users and follows collections of one database.
#[derive(Clone)]
pub struct MongoDirectory {
    db: Database,
}

impl MongoDirectory {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

impl UserDirectory for MongoDirectory {
    type Audience = Audience;

    fn audience(&self, window: &Window, topic: &Topic, after: Option<UserId>) -> Audience {
        Audience::open(&self.db, window, topic, after)
    }

    async fn odd_follows(&self, window: &Window, limit: i64) -> Result<OddFollows, StoreError> {
        Ok(Audience::odd_follows(&self.db, window, limit).await?)
    }

    async fn enrich(
        &self,
        user_id: &UserId,
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> Result<Enrichment, StoreError> {
        let mut one = enrich::enrich_many(
            &self.db,
            std::slice::from_ref(user_id),
            window,
            topic,
            shown,
        )
        .await?;
        Ok(one.pop().unwrap_or(Enrichment::Skip(
            crate::domain::digest::SkipReason::Vanished,
        )))
    }

    async fn enrich_many(
        &self,
        user_ids: &[UserId],
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> Result<Vec<Enrichment>, StoreError> {
        Ok(enrich::enrich_many(&self.db, user_ids, window, topic, shown).await?)
    }

    async fn check_indexes(&self) -> Result<(), StoreError> {
        check_indexes(&self.db).await
    }
}

/// What the functions do at cold start: one listIndexes. A missing index fails them with
/// what to run, rather than have a cold start build it on a collection of millions.
pub async fn check_indexes(db: &Database) -> Result<(), StoreError> {
    use futures::TryStreamExt;
    let wanted = follows_index_keys();
    let found = match db
        .collection::<mongodb::bson::Document>(FOLLOWS)
        .list_indexes()
        .await
    {
        Ok(cursor) => cursor
            .try_collect::<Vec<_>>()
            .await
            .map_err(StoreError::from)?
            .iter()
            .any(|index| index.keys == wanted),
        // No follows collection yet: no index either.
        Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == 26) => {
            false
        }
        Err(e) => return Err(e.into()),
    };
    if found {
        return Ok(());
    }
    Err(StoreError(format!(
        "the index {wanted} on {}.{FOLLOWS} is missing: the audience scan and the enrichment need it; create it before a campaign with `mailctl create-indexes` (see docs/deploying.md) or as `db.{FOLLOWS}.createIndex({wanted})`",
        db.name()
    )))
}

/// Creates the indexes the queries rely on (idempotent; cheap when they exist): the follows
/// index, and the follow-back index of the open-time picks (`adapters::picks`); at
/// provisioning and deploy time (`mailctl provision`, `mailctl create-indexes`), never at a
/// function's cold start.
pub async fn create_indexes(db: &Database) -> mongodb::error::Result<()> {
    let index = IndexModel::builder()
        .keys(follows_index_keys())
        .options(
            mongodb::options::IndexOptions::builder()
                .name(FOLLOWS_INDEX.to_string())
                .build(),
        )
        .build();
    let started = std::time::Instant::now();
    db.collection::<mongodb::bson::Document>(FOLLOWS)
        .create_index(index)
        .await?;
    crate::adapters::picks::create_index(db).await?;
    tracing::info!(
        duration_ms = started.elapsed().as_millis() as u64,
        "follows indexes created (or there already)"
    );
    Ok(())
}

fn bson_time(t: time::OffsetDateTime) -> mongodb::bson::DateTime {
    mongodb::bson::DateTime::from_millis((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

fn window_filter(window: &Window) -> mongodb::bson::Document {
    doc! { "$gte": bson_time(window.since), "$lt": bson_time(window.until) }
}

//! The user directory on MongoDB (`ports::UserDirectory`): the audience (`audience`) and
//! each user's digest (`enrich`), read from two collections.
//! The collections, their fields and the indexes are named in `adapters::mongo`.

mod audience;
mod enrich;

pub(crate) use audience::{users_cursor, Join, Pass, CURSOR_BATCH};
pub use audience::{Audience, IdType};

use super::definition::{DefinitionAudience, DefinitionRun, RunError};
use super::mongo::{follows_index_keys, FOLLOWS};
use crate::domain::campaign::Window;
use crate::domain::definition::Prepared;
use crate::domain::digest::{Enrichment, OddFollows};
use crate::domain::topics::ExclusionCounts;
use crate::domain::topics::Topic;
use crate::domain::user_id::UserId;
use crate::ports::{
    AudienceMember, AudienceScan, DefinitionCampaign, PrepareError, StoreError, UserDirectory,
};
use mongodb::bson::doc;
use mongodb::Database;

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

/// How long one of a definition's queries of a batch's users may take (MongoDB's
/// `maxTimeMS`): a query that needs longer for ten users lacks an index, and is the
/// definition's fault (its users are skipped as `definition_failed`; a re-run takes them
/// again). A third of CreateEmails' timeout.
pub const DATA_QUERY_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

impl MongoDirectory {
    /// The run of a definition's campaign (its pipelines read as BSON: microseconds).
    fn run(&self, campaign: &DefinitionCampaign) -> Result<DefinitionRun, RunError> {
        DefinitionRun::new(
            self.db.clone(),
            campaign.loaded.definition.clone(),
            campaign.topic.clone(),
            &campaign.window,
            &campaign.campaign,
        )
    }
}

impl UserDirectory for MongoDirectory {
    type Audience = Audience;
    type DefinitionAudience = DefinitionScan;

    fn definition_audience(
        &self,
        campaign: &DefinitionCampaign,
        after: Option<UserId>,
    ) -> DefinitionScan {
        match self.run(campaign) {
            Ok(run) => DefinitionScan::Scan(Box::new(run.audience(after))),
            Err(err) => DefinitionScan::Refused(err.to_string()),
        }
    }

    async fn prepare(
        &self,
        campaign: &DefinitionCampaign,
        user_ids: &[UserId],
    ) -> Result<Vec<Prepared>, PrepareError> {
        let run = self
            .run(campaign)
            .map(|run| run.with_max_time(DATA_QUERY_TIME_LIMIT));
        match run.map(|run| async move { run.prepare(user_ids).await }) {
            Ok(prepared) => prepared.await,
            Err(err) => Err(err),
        }
        .map_err(|err| match err {
            RunError::Store(e) => PrepareError::Store(e),
            fault => PrepareError::Definition(fault.to_string()),
        })
    }

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
    Err(StoreError::mongo(format!(
        "the index {wanted} on {}.{FOLLOWS} is missing: the audience scan and the enrichment need it; create it before a campaign with `mailctl create-indexes` (see docs/deploying.md) or as `db.{FOLLOWS}.createIndex({wanted})`",
        db.name()
    )))
}

pub(crate) fn bson_time(t: time::OffsetDateTime) -> mongodb::bson::DateTime {
    mongodb::bson::DateTime::from_millis((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

fn window_filter(window: &Window) -> mongodb::bson::Document {
    doc! { "$gte": bson_time(window.since), "$lt": bson_time(window.until) }
}

/// A definition's audience, or why its pipelines could not even be read.
pub enum DefinitionScan {
    Scan(Box<DefinitionAudience>),
    Refused(String),
}

impl AudienceScan for DefinitionScan {
    async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
        match self {
            Self::Scan(scan) => scan.next().await,
            Self::Refused(reason) => Err(StoreError(reason.clone())),
        }
    }

    fn excluded(&self) -> &ExclusionCounts {
        static NONE: std::sync::LazyLock<ExclusionCounts> =
            std::sync::LazyLock::new(ExclusionCounts::default);
        match self {
            Self::Scan(scan) => scan.excluded(),
            Self::Refused(_) => &NONE,
        }
    }

    fn definition_fault(&self) -> Option<&str> {
        match self {
            Self::Scan(scan) => scan.definition_fault(),
            Self::Refused(reason) => Some(reason),
        }
    }
}

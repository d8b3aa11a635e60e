//! The user directory on MongoDB (`ports::UserDirectory`): a definition's audience and
//! data (`definition`, the bundled digest's as any other's), over one database.

use super::definition::{DefinitionAudience, DefinitionRun, RunError};
use super::directory::{check_indexes, odd_follows};
use crate::domain::campaign::Window;
use crate::domain::definition::Prepared;
use crate::domain::digest::OddFollows;
use crate::domain::topics::{ExclusionCounts, Topic};
use crate::domain::user_id::UserId;
use crate::ports::definitions::LoadedDefinition;
use crate::ports::{
    AudienceMember, AudienceScan, DefinitionCampaign, PrepareError, StoreError, UserDirectory,
};
use mongodb::Database;
use std::sync::{Arc, Mutex};

/// The users and follows collections of one database.
#[derive(Clone)]
pub struct MongoDirectory {
    db: Database,
    /// The last batch's run: the next batch is most likely of the same campaign, and a
    /// run reads its pipelines once (`DefinitionRun::new`).
    last_run: Arc<Mutex<Option<(RunKey, DefinitionRun)>>>,
}

/// What a run is made from: the version (held, so its address is not another's), the
/// campaign, its window and its topic.
struct RunKey {
    loaded: Arc<LoadedDefinition>,
    campaign: String,
    window: Window,
    topic: Topic,
}

impl RunKey {
    fn of(campaign: &DefinitionCampaign) -> Self {
        Self {
            loaded: campaign.loaded.clone(),
            campaign: campaign.campaign.clone(),
            window: campaign.window,
            topic: campaign.topic.clone(),
        }
    }

    fn is(&self, campaign: &DefinitionCampaign) -> bool {
        Arc::ptr_eq(&self.loaded, &campaign.loaded)
            && self.campaign == campaign.campaign
            && self.window == campaign.window
            && self.topic == campaign.topic
    }
}

impl MongoDirectory {
    pub fn new(db: Database) -> Self {
        Self {
            db,
            last_run: Arc::default(),
        }
    }
}

/// How long a definition's queries of one batch of users may take in all (MongoDB's
/// `maxTimeMS`, shared among the recipients' read and each data query): two thirds of
/// CreateEmails' timeout. A query over its share is retried with the record, and on its
/// last tries decided as the definition's fault (`create_emails::definition`).
pub const DATA_QUERIES_BUDGET: std::time::Duration = std::time::Duration::from_secs(40);

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

impl MongoDirectory {
    /// The run a batch of `campaign` is read with: its queries share a budget well inside
    /// CreateEmails' timeout.
    fn batch_run(&self, campaign: &DefinitionCampaign) -> Result<DefinitionRun, RunError> {
        let mut last = crate::runtime::lock(&self.last_run);
        if let Some((key, run)) = last.as_ref() {
            if key.is(campaign) {
                return Ok(run.clone());
            }
        }
        let queries = 1 + campaign.loaded.definition.data.len() as u32;
        let limit = (DATA_QUERIES_BUDGET / queries).max(std::time::Duration::from_secs(2));
        let run = self.run(campaign)?.with_max_time(limit);
        *last = Some((RunKey::of(campaign), run.clone()));
        Ok(run)
    }
}

impl UserDirectory for MongoDirectory {
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
        // The batch's queries share a budget well inside CreateEmails' timeout.
        let run = self.batch_run(campaign);
        match run.map(|run| async move { run.prepare(user_ids).await }) {
            Ok(prepared) => prepared.await,
            Err(err) => Err(err),
        }
        .map_err(|err| match err {
            RunError::Store(e) => PrepareError::Store(e),
            slow @ RunError::Slow { .. } => PrepareError::Slow(slow.to_string()),
            fault => PrepareError::Definition(fault.to_string()),
        })
    }

    async fn odd_follows(&self, window: &Window, limit: i64) -> Result<OddFollows, StoreError> {
        Ok(odd_follows(&self.db, window, limit).await?)
    }

    async fn check_indexes(&self) -> Result<(), StoreError> {
        check_indexes(&self.db).await
    }
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

//! The user directory: a campaign's audience, scanned one user at a time, and each
//! user's digest.

use super::definitions::LoadedDefinition;
use super::StoreError;
use crate::domain::campaign::Window;
use crate::domain::definition::Prepared;
use crate::domain::digest::{Enrichment, OddFollows};
use crate::domain::local_time::ZoneField;
use crate::domain::topics::{ExclusionCounts, Topic};
use crate::domain::user_id::UserId;
use std::future::Future;
use std::sync::Arc;

/// Who a campaign reaches and what each one's email says (MongoDB's users and follows):
/// what GetUsers and CreateEmails read.
pub trait UserDirectory: Send + Sync {
    type Audience: AudienceScan + 'static;
    type DefinitionAudience: AudienceScan + 'static;
    /// The audience of a campaign of `topic` over `window` after `after` (a checkpoint): the
    /// users with at least one new follower whom the topic's audience rule lets in
    /// (`Standing::exclusion`), each once, in ascending id order (`UserId`'s order).
    fn audience(&self, window: &Window, topic: &Topic, after: Option<UserId>) -> Self::Audience;
    /// The window's follows whose followeeId or followerId no user can have: how many of
    /// each, and up to `limit` of the first kind described.
    fn odd_follows(
        &self,
        window: &Window,
        limit: i64,
    ) -> impl Future<Output = Result<OddFollows, StoreError>> + Send;
    /// One user's digest for `window`, read afresh, naming up to `shown` recent followers (or
    /// why they get none, the audience rule of `topic` among the reasons).
    fn enrich(
        &self,
        user_id: &UserId,
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> impl Future<Output = Result<Enrichment, StoreError>> + Send;
    /// `enrich` for several users of one window at once (an SQS batch), in their order; a
    /// failure fails them all (the caller then reads them one by one).
    fn enrich_many(
        &self,
        user_ids: &[UserId],
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> impl Future<Output = Result<Vec<Enrichment>, StoreError>> + Send;
    /// A pushed definition's audience (`campaign.toml`'s `[audience]`), as `audience`
    /// streams the digest's: in id order, after `after`, the topic rule applied.
    fn definition_audience(
        &self,
        campaign: &DefinitionCampaign,
        after: Option<UserId>,
    ) -> Self::DefinitionAudience;
    /// Each of `user_ids`' email inputs (their fields and each data query's result) or why
    /// they get none, in their order: one read of the users and one per data query for
    /// the whole batch.
    fn prepare(
        &self,
        campaign: &DefinitionCampaign,
        user_ids: &[UserId],
    ) -> impl Future<Output = Result<Vec<Prepared>, PrepareError>> + Send;
    /// Cold-start check that the queries' indexes exist (an error says how to create them).
    fn check_indexes(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The audience, one user at a time, never held in memory.
pub trait AudienceScan: Send {
    fn next(&mut self) -> impl Future<Output = Result<Option<AudienceMember>, StoreError>> + Send;
    /// The users with new followers left out so far, by reason.
    fn excluded(&self) -> &ExclusionCounts;
    /// Why the scan failed when the campaign's definition is at fault (a query MongoDB
    /// refuses): the run fails once with it; a retry would fail the same way. None: any
    /// error `next` returned was the store's, and retrying may help.
    fn definition_fault(&self) -> Option<&str> {
        None
    }
}

/// One user of the audience: their id, and their time zone field as the document holds it
/// (read by the same scan, so local-time delivery costs no extra read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudienceMember {
    pub id: UserId,
    pub zone: ZoneField,
}

/// One campaign of a pushed definition: what its queries run with.
#[derive(Clone)]
pub struct DefinitionCampaign {
    pub loaded: Arc<LoadedDefinition>,
    pub campaign: String,
    pub window: Window,
    pub topic: Topic,
}

/// Why a batch of a definition's users was not read.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PrepareError {
    /// The definition is at fault (a query MongoDB refuses, or one over its time limit):
    /// the same batch would fail the same way.
    #[error("{0}")]
    Definition(String),
    /// A query ran over its time limit: a missing index repeats it, an overloaded server
    /// may not.
    #[error("{0}")]
    Slow(String),
    /// The store did not answer: a retry may help.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The audience of a directory that runs no definitions (the in-memory ones): it fails at
/// once, as the definition's fault.
pub struct NoDefinitions;

impl AudienceScan for NoDefinitions {
    async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
        Err(StoreError(NO_DEFINITIONS.into()))
    }
    fn excluded(&self) -> &ExclusionCounts {
        static NONE: std::sync::LazyLock<ExclusionCounts> =
            std::sync::LazyLock::new(ExclusionCounts::default);
        &NONE
    }
    fn definition_fault(&self) -> Option<&str> {
        Some(NO_DEFINITIONS)
    }
}

/// What a directory without MongoDB says of a definition.
pub const NO_DEFINITIONS: &str = "this user directory runs no campaign definitions (MongoDB does)";

//! The user directory: a campaign's audience, scanned one user at a time, and each user's
//! email inputs, as its definition's queries read them.

use super::definitions::LoadedDefinition;
use super::StoreError;
use crate::domain::campaign::Window;
use crate::domain::definition::Prepared;
use crate::domain::digest::OddFollows;
use crate::domain::local_time::ZoneField;
use crate::domain::topics::{ExclusionCounts, Topic};
use crate::domain::user_id::UserId;
use std::future::Future;
use std::sync::Arc;

/// Who a campaign reaches and what each one's email says (MongoDB's users and follows):
/// what GetUsers and CreateEmails read.
pub trait UserDirectory: Send + Sync {
    type DefinitionAudience: AudienceScan + 'static;
    /// The window's follows whose followeeId or followerId no user can have: how many of
    /// each, and up to `limit` of the first kind described.
    fn odd_follows(
        &self,
        window: &Window,
        limit: i64,
    ) -> impl Future<Output = Result<OddFollows, StoreError>> + Send;
    /// A definition's audience (`campaign.toml`'s `[audience]`): each user once, in id
    /// order (`UserId`'s), after `after` (a checkpoint), those the topic's audience rule
    /// leaves out (`Standing::exclusion`) counted by reason.
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

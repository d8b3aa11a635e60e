//! The campaigns table as the pipeline's functions read and write it.

use crate::domain::campaign::{Campaign, CampaignId};
use crate::domain::campaign_state::{CampaignRecord, CampaignState};
use crate::domain::definition::pin::PinnedDefinition;
use crate::domain::experiment::{Decision, Experiment};
use crate::domain::guardrails::CampaignGuardrails;
use crate::domain::ledger::LedgerError;
use crate::domain::topics::ExclusionCounts;
use std::future::Future;

/// The campaigns table as the pipeline's functions read it.
pub trait CampaignStates: Send + Sync {
    /// Whether the campaign may send now (paused or cancelled: no) and its guardrails.
    fn state(
        &self,
        campaign_id: &str,
    ) -> impl Future<Output = Result<CampaignState, LedgerError>> + Send;
    /// Records that GetUsers started the campaign (RUNNING, unless it has a state already),
    /// so that `mailctl` and the reputation guard know it, with the window, topic and
    /// guardrails it first started with; the record as it is now (a later start settles
    /// against it: `Campaign::settle`, `GuardrailRequest::settle`).
    /// An experiment is recorded only with the first start: a campaign started without one
    /// gets none (its record, without one, says so). The definition version is recorded by
    /// the first start that names one and never replaced (`domain::definition::pin`).
    fn register(
        &self,
        campaign: &Campaign,
        guardrails: &CampaignGuardrails,
        experiment: Option<&Experiment>,
        definition: Option<&PinnedDefinition>,
        at_ms: u64,
    ) -> impl Future<Output = Result<CampaignRecord, LedgerError>> + Send;
    /// A later start gave another deadline: written, with when and what it replaced.
    fn move_deadline(
        &self,
        campaign: &CampaignId,
        guardrails: &CampaignGuardrails,
        from: Option<i64>,
        at_ms: u64,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// Records the experiment's decision unless one is recorded; the one recorded (the
    /// first write wins: a scheduled release and `mailctl experiment pick` may race).
    fn record_decision(
        &self,
        campaign: &CampaignId,
        decision: &Decision,
    ) -> impl Future<Output = Result<Decision, LedgerError>> + Send;
    /// Users of a run segment left out of the audience, by reason (written whole: a retried
    /// segment repeats them harmlessly), under the run that started at `run_started_ms`.
    fn record_exclusions(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &ExclusionCounts,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
}

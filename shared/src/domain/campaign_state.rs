//! What the campaigns table keeps of a campaign and the pipeline reads of it: whether it
//! may send now (paused, cancelled), who changed that, its guardrails and its experiment.

use super::campaign::Window;
use super::definition_pin::PinnedDefinition;
use super::experiment::{Decision, Experiment};
use super::guardrails::CampaignGuardrails;
use super::topics::ExclusionCounts;
use std::sync::Arc;

/// Who changed a campaign's state, when (ms since the epoch) and why: an operator through
/// `mailctl pause|resume|cancel`, or the reputation guard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateChange {
    pub at_ms: u64,
    pub by: String,
    pub reason: String,
}

/// Why the pipeline must not send a campaign's email now. A running campaign has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Nothing of it is consumed or sent until `mailctl resume`; nothing is lost.
    Paused(StateChange),
    /// Final: no further email; every user not yet sent to ends CANCELLED.
    Cancelled(StateChange),
}

/// What the pipeline's functions read of a campaign: whether it may send now, and its
/// guardrails.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CampaignState {
    pub hold: Option<Hold>,
    pub guardrails: CampaignGuardrails,
    /// Started before guardrails were recorded: a later start gives it none of the
    /// stack's defaults (a resend must not hold out users the campaign owes an email).
    pub started_without_guardrails: bool,
    /// Its A/B experiment, and the winner once decided.
    pub experiment: Option<Arc<Experiment>>,
    pub decision: Option<Arc<Decision>>,
    /// A start registered it (a record exists).
    pub registered: bool,
    /// The definition version its first run pinned (None: the built-in digest).
    pub definition: Option<PinnedDefinition>,
}

/// A campaign's row in the campaigns table: GetUsers registers it RUNNING when it starts it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CampaignRecord {
    pub started_at_ms: Option<u64>,
    /// The window it was first started with (None for campaigns recorded before windows were).
    pub window: Option<Window>,
    /// Its topic as first started (None for campaigns recorded before topics were).
    pub topic: Option<String>,
    /// Users left out of its audience by its latest run, by reason, over that run's
    /// segments (each run reads the whole audience again: runs are not added up).
    pub excluded: ExclusionCounts,
    /// When that run started (ms; 0: recorded before runs were kept apart, or none).
    pub excluded_run_ms: i64,
    pub hold: Option<Hold>,
    /// The last change of state (a resume leaves one with `hold` None).
    pub last_change: Option<StateChange>,
    /// Its deadline, holdout and cap exemption (None for campaigns recorded before them).
    pub guardrails: Option<CampaignGuardrails>,
    /// The deadline's last move by a later start: when, and what it was before.
    pub deadline_moved: Option<(u64, Option<i64>)>,
    /// Its A/B experiment as first started, and the decision once made.
    pub experiment: Option<Experiment>,
    pub decision: Option<Decision>,
    /// The definition version its first run registered (None: the built-in digest, or
    /// recorded before definitions); never changed by a later run.
    pub definition: Option<PinnedDefinition>,
}

//! The A/B half of GetUsers (docs/experiments.md): the test group goes at once in its
//! variants; the rest waits in the waiting room for the decision's slot, whose release
//! decides the winner (once: the campaign's record keeps the first decision) and lets the
//! rest go with it.

use super::{GetUsers, GetUsersError};
use crate::domain::campaign::CampaignId;
use crate::domain::campaign_state::CampaignState;
use crate::domain::delivery::ExperimentView;
use crate::domain::experiment::{self, Decision, Experiment};
use crate::ports::{CampaignStates, OutgoingQueue, UserDirectory, WaitingRoom};
use std::sync::Arc;

/// A run's view of its campaign's experiment.
pub(super) struct ExperimentRun {
    experiment: Arc<Experiment>,
    /// The decided winner (None: the rest waits for the decision).
    winner: Option<String>,
    /// When the rest is let go without a winner yet: the decision's time, or later while the
    /// test group still sends.
    decide_at_ms: Option<i64>,
}

/// What a decision's time finds.
pub(super) enum Decided {
    Now(Decision),
    /// The test group's last email is more recent than the wait: not before this instant.
    WaitsUntil(i64),
}

/// What a slot's release lets the rest go with.
pub(super) enum ReleaseWinner {
    /// Nothing to decide: no experiment, or a slot of the test group's local times.
    NoExperiment,
    Winner(String),
    /// The decision waits for the test group (`Decided::WaitsUntil`).
    WaitsUntil(i64),
}

impl ExperimentRun {
    /// The run's view of the experiment, as the delivery rule asks it (`ExperimentView`).
    pub(super) fn view(&self) -> ExperimentView<'_> {
        ExperimentView {
            experiment: &self.experiment,
            winner: self.winner.as_deref(),
            decide_at_ms: self.decide_at_ms,
        }
    }
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// The campaign's experiment for a run, decided first if its time has come (a resend
    /// after the wait, or a release the pause kept back).
    pub(super) async fn experiment_run(
        &self,
        campaign: &CampaignId,
    ) -> Result<Option<ExperimentRun>, GetUsersError> {
        let state = self
            .campaigns
            .state(campaign.as_str())
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        let Some(experiment) = state.experiment.clone() else {
            return Ok(None);
        };
        // A paused or cancelled campaign decides nothing: its run enqueues nobody, and the
        // decision waits for the resume (a cancelled one's never comes).
        let due = state.hold.is_none()
            && experiment
                .decide_at_ms
                .is_some_and(|at| at <= self.clock.now_ms());
        let mut decide_at_ms = experiment.decide_at_ms;
        let winner = match due {
            true => match self.decision(campaign, &state).await? {
                Decided::Now(decision) => Some(decision.winner),
                Decided::WaitsUntil(at) => {
                    decide_at_ms = Some(at);
                    None
                }
            },
            false => state.decision.as_ref().map(|d| d.winner.clone()),
        };
        Ok(Some(ExperimentRun {
            experiment,
            winner,
            decide_at_ms,
        }))
    }

    /// The winner a slot's release lets the rest go with: decided now if the slot is the
    /// decision's or later and no decision is recorded.
    pub(super) async fn release_winner(
        &self,
        campaign: &CampaignId,
        state: &CampaignState,
        slot_ms: i64,
    ) -> Result<ReleaseWinner, GetUsersError> {
        let Some(experiment) = &state.experiment else {
            return Ok(ReleaseWinner::NoExperiment);
        };
        if state.decision.is_none() && experiment.decide_at_ms.is_some_and(|at| slot_ms < at) {
            return Ok(ReleaseWinner::NoExperiment);
        }
        Ok(match self.decision(campaign, state).await? {
            Decided::Now(decision) => ReleaseWinner::Winner(decision.winner),
            Decided::WaitsUntil(at) => ReleaseWinner::WaitsUntil(at),
        })
    }

    /// The recorded decision, or the rule's on the results so far, recorded (the first
    /// write wins: the one recorded is returned); or, while the test group's last email is
    /// more recent than the wait, when to look again.
    async fn decision(
        &self,
        campaign: &CampaignId,
        state: &CampaignState,
    ) -> Result<Decided, GetUsersError> {
        if let Some(decision) = &state.decision {
            return Ok(Decided::Now((**decision).clone()));
        }
        let Some(experiment) = &state.experiment else {
            return Err(GetUsersError::Campaigns(format!(
                "{campaign} has no experiment to decide"
            )));
        };
        let tallies = self
            .results
            .tallies(campaign, experiment)
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        let now_ms = self.clock.now_ms();
        if let Some(at) = experiment.due_at(&tallies).filter(|at| *at > now_ms) {
            tracing::info!(%campaign, due = %crate::domain::local_time::rfc3339_ms(at), "experiment not decided yet: the test group's last email is more recent than the wait");
            return Ok(Decided::WaitsUntil(at));
        }
        let decided = experiment::decide(experiment, &tallies, None, now_ms);
        let recorded = self
            .campaigns
            .states()
            .record_decision(campaign, &decided)
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        tracing::info!(%campaign, winner = %recorded.winner, by = ?recorded.by, reason = %recorded.reason, "experiment decided");
        Ok(Decided::Now(recorded))
    }
}

//! A campaign's first start, decided before and after the campaigns table records it: the
//! guardrails it starts with (the start's, else the stack's defaults), its experiment dated
//! from when the test group has had its email, and, against the record the table keeps, what
//! a later start may and may not change (window, topic, holdout, exemption, experiment) and
//! whether it moves the deadline. Pure: GetUsers does the reads and writes around it.

use super::campaign::{Campaign, CampaignError, CampaignId};
use super::campaign_state::CampaignRecord;
use super::experiment::{Experiment, ExperimentError};
use super::guardrails::{
    CampaignGuardrails, GuardrailDefaults, GuardrailRequest, QuietHours, QuietPolicy,
};
use super::local_time::LocalDelivery;

/// Why a start is refused: it would be refused the same way again.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Campaign(#[from] CampaignError),
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
}

/// What a start asks for, beside its campaign.
#[derive(Clone, Copy, Debug)]
pub struct StartRequest<'a> {
    pub guardrails: &'a GuardrailRequest,
    pub experiment: Option<&'a Experiment>,
    pub delivery: Option<&'a LocalDelivery>,
    /// The stack's quiet hours: the test group's, deferred, delay the experiment's wait.
    pub quiet_hours: Option<QuietHours>,
}

/// What the table is asked to record at the start.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    pub guardrails: CampaignGuardrails,
    pub experiment: Option<Experiment>,
}

/// The start, settled against the record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settled {
    /// The guardrails the campaign runs with (as first recorded).
    pub guardrails: CampaignGuardrails,
    /// A deadline this start moves: the guardrails to write.
    pub moved: Option<CampaignGuardrails>,
}

impl StartRequest<'_> {
    fn quiet_ms(&self) -> i64 {
        quiet_ms(self.quiet_hours)
    }

    /// What to register at `now_ms` (the wall clock: the default deadline counts from it).
    /// `defaults` are the stack's guardrails; a campaign started before guardrails were
    /// recorded (`started_without_guardrails`) takes none of them: its resend owes everyone
    /// not yet sent an email. The experiment's wait is dated from `clock_ms`, the campaign's
    /// clock its slots are on. An experiment whose deadline would expire its rest is refused
    /// before anything is written.
    pub fn registration(
        &self,
        id: &CampaignId,
        defaults: GuardrailDefaults,
        started_without_guardrails: bool,
        now_ms: i64,
        clock_ms: i64,
    ) -> Result<Registration, StartError> {
        let defaults = match started_without_guardrails {
            true => GuardrailDefaults::default(),
            false => defaults,
        };
        let guardrails = self.guardrails.initial(defaults, now_ms);
        let experiment = (self.experiment)
            .map(|e| dated_experiment(e, self.delivery, self.quiet_hours, clock_ms));
        if let Some(e) = &experiment {
            e.check_deadline(id, guardrails.deadline_ms, self.quiet_ms())?;
        }
        Ok(Registration {
            guardrails,
            experiment,
        })
    }

    /// Settles the start against the campaign's record: its experiment, window and topic
    /// are fixed when it first starts (`campaign` takes the recorded topic when the start
    /// named none); so are its holdout and cap exemption; a deadline given moves it, and once
    /// it has passed nothing more of the campaign starts.
    pub fn settle(
        &self,
        campaign: &mut Campaign,
        topic_named: bool,
        registered: &Registration,
        recorded: &CampaignRecord,
        now_ms: i64,
    ) -> Result<Settled, StartError> {
        if let Some(given) = self.experiment {
            match &recorded.experiment {
                Some(recorded) => recorded.settle(given, &campaign.id)?,
                None => return Err(ExperimentError::Late(campaign.id.clone()).into()),
            }
        }
        campaign.settle(recorded.window, recorded.topic.as_deref(), topic_named)?;
        let guardrails = recorded.guardrails.unwrap_or(registered.guardrails);
        let moved = self.guardrails.settle(&campaign.id, guardrails, now_ms)?;
        // The rest of an experiment is sent after its decision: a deadline before it would
        // expire them all.
        if let Some(e) = &recorded.experiment {
            let deadline = moved.unwrap_or(guardrails).deadline_ms;
            e.check_deadline(&campaign.id, deadline, self.quiet_ms())?;
        }
        Ok(Settled { guardrails, moved })
    }
}

/// How long quiet hours that defer hold an email back (0 without them).
fn quiet_ms(quiet_hours: Option<QuietHours>) -> i64 {
    quiet_hours
        .filter(|q| q.policy == QuietPolicy::Defer)
        .map_or(0, |q| q.length_ms())
}

/// The experiment as a start at `now_ms` records it: its wait starts when the whole test
/// group has had its email (with local time, once the last zone's local time has come; after
/// quiet hours that defer it). `mailctl plan` dates an unstarted campaign's decision by it.
pub fn dated_experiment(
    experiment: &Experiment,
    delivery: Option<&LocalDelivery>,
    quiet_hours: Option<QuietHours>,
    now_ms: i64,
) -> Experiment {
    let test_sent_by = Experiment::test_group_let_go_by(
        delivery.and_then(|d| d.latest_slot()),
        quiet_ms(quiet_hours),
        now_ms,
    );
    Experiment {
        local_time: delivery.is_some(),
        ..experiment.clone()
    }
    .starting_at(test_sent_by)
}

#[cfg(test)]
mod tests;

//! Campaigns and the sending switch, in memory.

use crate::domain::campaign::{Campaign, CampaignId, Window};
use crate::domain::campaign_state::{CampaignRecord, CampaignState, Hold, StateChange};
use crate::domain::definition::pin::PinnedDefinition;
use crate::domain::experiment::{Decision, Experiment, Tally};
use crate::domain::guardrails::CampaignGuardrails;
use crate::domain::ledger::LedgerError;
use crate::domain::topics::{ExclusionCounts, TopicId};
use crate::ports::{CampaignStates, ControlError, SendingSwitch};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Experiments' results, set by a test: each campaign's tallies per variant.
#[derive(Default)]
pub struct MemoryResults(pub Mutex<HashMap<String, BTreeMap<String, Tally>>>);

impl crate::ports::ExperimentResults for MemoryResults {
    fn tallies<'a>(
        &'a self,
        campaign: &'a CampaignId,
        _: &'a Experiment,
    ) -> futures::future::BoxFuture<'a, Result<BTreeMap<String, Tally>, LedgerError>> {
        let tallies = crate::runtime::lock(&self.0)
            .get(campaign.as_str())
            .cloned()
            .unwrap_or_default();
        Box::pin(async move { Ok(tallies) })
    }
}

/// Campaigns by id: registered ones (RUNNING) and held ones (paused or cancelled), and
/// whether the consumers are stopped (the reputation guard's switch).
#[derive(Default)]
pub struct MemoryCampaigns {
    pub registered: Mutex<HashMap<String, u64>>,
    /// The window and topic each campaign was first started with.
    pub windows: Mutex<HashMap<String, (Window, TopicId)>>,
    /// Users left out of the audience, per campaign and run segment.
    pub excluded: Mutex<HashMap<(String, i64, u32), ExclusionCounts>>,
    pub holds: Mutex<HashMap<String, Hold>>,
    /// Each campaign's guardrails as recorded.
    pub guardrails: Mutex<HashMap<String, CampaignGuardrails>>,
    pub consumers_stopped: Mutex<bool>,
    pub experiments: Mutex<HashMap<String, Experiment>>,
    pub decisions: Mutex<HashMap<String, Decision>>,
    /// The definition version each campaign was pinned to.
    pub definitions: Mutex<HashMap<String, PinnedDefinition>>,
}

fn test_change() -> StateChange {
    StateChange {
        at_ms: 1,
        by: "operator".into(),
        reason: "test".into(),
    }
}

impl MemoryCampaigns {
    fn holds(&self) -> std::sync::MutexGuard<'_, HashMap<String, Hold>> {
        crate::runtime::lock(&self.holds)
    }

    pub fn cancel(&self, campaign_id: &str) {
        self.holds()
            .insert(campaign_id.to_owned(), Hold::Cancelled(test_change()));
    }

    pub fn pause(&self, campaign_id: &str) {
        self.holds()
            .insert(campaign_id.to_owned(), Hold::Paused(test_change()));
    }

    pub fn resume(&self, campaign_id: &str) {
        self.holds().remove(campaign_id);
    }

    pub fn hold_of(&self, campaign_id: &str) -> Option<Hold> {
        self.holds().get(campaign_id).cloned()
    }

    /// Records the campaign's guardrails (as a first start would).
    pub fn set_guardrails(&self, campaign_id: &str, guardrails: CampaignGuardrails) {
        crate::runtime::lock(&self.guardrails).insert(campaign_id.to_owned(), guardrails);
    }
}

impl CampaignStates for MemoryCampaigns {
    async fn state(&self, campaign_id: &str) -> Result<CampaignState, LedgerError> {
        let registered = crate::runtime::lock(&self.registered).contains_key(campaign_id);
        let recorded = crate::runtime::lock(&self.guardrails).contains_key(campaign_id);
        Ok(CampaignState {
            started_without_guardrails: registered && !recorded,
            hold: self.hold_of(campaign_id),
            guardrails: crate::runtime::lock(&self.guardrails)
                .get(campaign_id)
                .copied()
                .unwrap_or_default(),
            experiment: crate::runtime::lock(&self.experiments)
                .get(campaign_id)
                .cloned()
                .map(Arc::new),
            decision: crate::runtime::lock(&self.decisions)
                .get(campaign_id)
                .cloned()
                .map(Arc::new),
            registered,
            definition: crate::runtime::lock(&self.definitions)
                .get(campaign_id)
                .cloned(),
        })
    }

    async fn record_decision(
        &self,
        campaign: &CampaignId,
        decision: &Decision,
    ) -> Result<Decision, LedgerError> {
        Ok(crate::runtime::lock(&self.decisions)
            .entry(campaign.to_string())
            .or_insert_with(|| decision.clone())
            .clone())
    }

    async fn move_deadline(
        &self,
        campaign: &CampaignId,
        guardrails: &CampaignGuardrails,
        _: Option<i64>,
        _: u64,
    ) -> Result<(), LedgerError> {
        self.set_guardrails(campaign.as_str(), *guardrails);
        Ok(())
    }

    async fn register(
        &self,
        campaign: &Campaign,
        guardrails: &CampaignGuardrails,
        experiment: Option<&Experiment>,
        definition: Option<&PinnedDefinition>,
        at_ms: u64,
    ) -> Result<CampaignRecord, LedgerError> {
        let id = campaign.id.as_str();
        let mut definitions = crate::runtime::lock(&self.definitions);
        if let (false, Some(d)) = (definitions.contains_key(id), definition) {
            definitions.insert(id.to_owned(), d.clone());
        }
        let definition = definitions.get(id).cloned();
        drop(definitions);
        let first = !crate::runtime::lock(&self.registered).contains_key(id);
        crate::runtime::lock(&self.registered)
            .entry(id.to_owned())
            .or_insert(at_ms);
        let mut experiments = crate::runtime::lock(&self.experiments);
        if let (true, Some(e)) = (first, experiment) {
            experiments.insert(id.to_owned(), e.clone());
        }
        let experiment = experiments.get(id).cloned();
        drop(experiments);
        let (window, topic) = crate::runtime::lock(&self.windows)
            .entry(id.to_owned())
            .or_insert((campaign.window, campaign.topic.clone()))
            .clone();
        let guardrails = *crate::runtime::lock(&self.guardrails)
            .entry(id.to_owned())
            .or_insert(*guardrails);
        Ok(CampaignRecord {
            window: Some(window),
            topic: Some(topic.to_string()),
            guardrails: Some(guardrails),
            experiment,
            decision: crate::runtime::lock(&self.decisions).get(id).cloned(),
            definition,
            ..Default::default()
        })
    }

    async fn record_exclusions(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &ExclusionCounts,
    ) -> Result<(), LedgerError> {
        crate::runtime::lock(&self.excluded).insert(
            (campaign.to_string(), run_started_ms, segment),
            counts.clone(),
        );
        Ok(())
    }
}

impl SendingSwitch for MemoryCampaigns {
    async fn stop_consumers(&self) -> Result<usize, ControlError> {
        *crate::runtime::lock(&self.consumers_stopped) = true;
        Ok(3)
    }

    async fn running_campaigns(&self) -> Result<Vec<String>, ControlError> {
        let holds = self.holds();
        let mut running: Vec<String> = crate::runtime::lock(&self.registered)
            .keys()
            .filter(|id| !holds.contains_key(*id))
            .cloned()
            .collect();
        running.sort();
        Ok(running)
    }

    async fn pause(&self, campaign_id: &str, change: &StateChange) -> Result<bool, ControlError> {
        let mut holds = self.holds();
        if holds.contains_key(campaign_id) {
            return Ok(false);
        }
        holds.insert(campaign_id.to_owned(), Hold::Paused(change.clone()));
        Ok(true)
    }
}

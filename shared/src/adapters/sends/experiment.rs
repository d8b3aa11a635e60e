//! An A/B experiment's tallies, from its campaign's send records.

use super::records::{campaign_records, SendRecord};
use super::SendRecords;
use crate::domain::campaign::CampaignId;
use crate::domain::experiment::{Assignment, Experiment, Tally};
use crate::domain::ledger::{Engagement, LedgerError, SendStatus};
use crate::ports::ExperimentResults;
use futures::future::BoxFuture;
use std::collections::BTreeMap;

/// Each variant's results in the test group, from a campaign's records: sent, delivered,
/// the people who opened and clicked (each record counted once), and its last email. The rest, sent the
/// winner, is left out: it would mix the winner's test with its roll-out.
pub fn experiment_tallies(
    records: &[SendRecord],
    experiment: &Experiment,
) -> BTreeMap<String, Tally> {
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    for r in records {
        let Some(variant) = &r.variant else { continue };
        if experiment.assign(&r.campaign_id, &r.user_id) == Assignment::Rest {
            continue;
        }
        let t = tallies.entry(variant.clone()).or_default();
        let has = |e: Engagement| r.engagement.contains_key(&e);
        t.sent += u64::from(r.status == Some(SendStatus::Sent));
        t.delivered += u64::from(has(Engagement::Delivered));
        t.human_clicks += u64::from(has(Engagement::HumanClicked));
        t.human_opens += u64::from(has(Engagement::HumanOpened));
        // Its last email: the latest claim or completion (one still being sent counts).
        let at = r.completed_at_ms.max(r.started_at_ms).map(|ms| ms as i64);
        t.last_sent_ms = t.last_sent_ms.max(at);
    }
    tallies
}

/// Read when an experiment is decided: one query per shard of the campaign's records.
impl ExperimentResults for SendRecords {
    fn tallies<'a>(
        &'a self,
        campaign: &'a CampaignId,
        experiment: &'a Experiment,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Tally>, LedgerError>> {
        Box::pin(async move {
            let records = campaign_records(&self.client, &self.table, campaign.as_str()).await?;
            Ok(experiment_tallies(&records, experiment))
        })
    }
}

#[cfg(test)]
mod tests;

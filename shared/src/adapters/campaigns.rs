//! The campaigns table (`CAMPAIGNS_TABLE_NAME`): one item per campaign, keyed by
//! `campaignId`. GetUsers registers a campaign RUNNING when it starts it; `mailctl pause`,
//! `resume` and `cancel` and the reputation guard move it between RUNNING, PAUSED and
//! CANCELLED (final) with conditional writes, keeping who, when and why of the last change.
//! The pipeline's functions read it (`CampaignStates`).

use super::describe;
use super::item::{n, number, s, Item};
use crate::domain::campaign::{rfc3339, Campaign, CampaignId, Window};
use crate::domain::campaign_state::{CampaignRecord, CampaignState, Hold, StateChange};
use crate::domain::definition::pin::PinnedDefinition;
use crate::domain::experiment::{Decision, Experiment};
use crate::domain::guardrails::CampaignGuardrails;
use crate::domain::ledger::LedgerError;
use crate::domain::topics::ExclusionCounts;
use crate::ports::CampaignStates;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;
use std::collections::HashMap;
use std::sync::Arc;

pub const RUNNING: &str = "RUNNING";
pub const PAUSED: &str = "PAUSED";
pub const CANCELLED: &str = "CANCELLED";
/// Each run segment's users left out of the audience: `excluded<run started ms>.<segment>`
/// (`excluded<segment>` from before runs were kept apart: a run of its own, started at 0).
const EXCLUDED_PREFIX: &str = "excluded";

/// The experiment as first started, and its decision (JSON).
const EXPERIMENT: &str = "experiment";
const DECISION: &str = "experimentDecision";
/// The definition and version the campaign's first run registered.
const DEFINITION: &str = "definition";
const DEFINITION_VERSION: &str = "definitionVersion";

/// Why a change of state was refused: the campaign as it is (None: never started here).
#[derive(Debug)]
pub struct Refused(pub Option<CampaignRecord>);

#[derive(Clone)]
pub struct CampaignsTable {
    client: Client,
    table: String,
}

/// A string attribute, empty when absent.
fn text(item: &Item, key: &str) -> String {
    super::item::text(item, key).unwrap_or_default()
}

/// The window the campaign was first started with, as recorded.
fn window(item: &Item) -> Option<Window> {
    let at = |key| {
        time::OffsetDateTime::parse(
            &text(item, key),
            &time::format_description::well_known::Rfc3339,
        )
        .ok()
    };
    Window::new(at("windowSince")?, at("windowUntil")?).ok()
}

/// The definition version the record pins (None: none, or half written by hand).
fn pinned(item: &Item) -> Option<PinnedDefinition> {
    Some(PinnedDefinition {
        name: super::item::text(item, DEFINITION)?,
        version: number(item, DEFINITION_VERSION)?,
    })
}

fn record(item: &Item) -> CampaignRecord {
    let last_change = number::<u64>(item, "stateAt").map(|at_ms| StateChange {
        at_ms,
        by: text(item, "stateBy"),
        reason: text(item, "stateReason"),
    });
    let hold = match (text(item, "state").as_str(), &last_change) {
        (PAUSED, Some(c)) => Some(Hold::Paused(c.clone())),
        (CANCELLED, Some(c)) => Some(Hold::Cancelled(c.clone())),
        _ => None,
    };
    let (excluded_run_ms, excluded) = latest_run_exclusions(item);
    CampaignRecord {
        experiment: serde_json::from_str(&text(item, EXPERIMENT)).ok(),
        decision: serde_json::from_str(&text(item, DECISION)).ok(),
        guardrails: serde_json::from_str(&text(item, "guardrails")).ok(),
        deadline_moved: number::<u64>(item, "deadlineMovedAt").map(|at| {
            let from = text(item, "deadlineMovedFrom").parse().ok();
            (at, from)
        }),
        started_at_ms: number::<u64>(item, "startedAt"),
        window: window(item),
        topic: Some(text(item, "topic")).filter(|t| !t.is_empty()),
        definition: pinned(item),
        excluded,
        excluded_run_ms,
        hold,
        last_change,
    }
}

/// The latest run's users left out of the audience, over its segments, and when it started:
/// each run reads the whole audience again, so adding runs up would count users twice.
fn latest_run_exclusions(item: &Item) -> (i64, ExclusionCounts) {
    let mut runs: std::collections::BTreeMap<i64, ExclusionCounts> = Default::default();
    for (key, value) in item {
        if let (Some(key), AttributeValue::S(json)) = (key.strip_prefix(EXCLUDED_PREFIX), value) {
            if let Ok(counts) = serde_json::from_str::<ExclusionCounts>(json) {
                let run = key
                    .split_once('.')
                    .and_then(|(run, _)| run.parse().ok())
                    .unwrap_or(0);
                runs.entry(run).or_default().merge(&counts);
            }
        }
    }
    runs.pop_last().unwrap_or_default()
}

impl CampaignsTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn error(&self, operation: &'static str, detail: String) -> LedgerError {
        LedgerError {
            table: self.table.clone(),
            operation,
            detail,
        }
    }

    /// The campaign's item (consistent read), or None when it was never started or
    /// controlled here.
    pub async fn record(&self, campaign_id: &str) -> Result<Option<CampaignRecord>, LedgerError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("campaignId", s(campaign_id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error("read campaign state", describe(&e)))?;
        Ok(out.item.as_ref().map(record))
    }

    /// Moves the campaign to `to` if its state is one of `from` (`None` in `from`: or it has
    /// no item yet). Refused carries the campaign as it is when the condition does not hold.
    pub async fn change_state(
        &self,
        campaign_id: &str,
        from: &[Option<&str>],
        to: &str,
        change: &StateChange,
    ) -> Result<Result<(), Refused>, LedgerError> {
        let mut conditions = Vec::new();
        let mut values = HashMap::from([
            (":to".to_owned(), s(to)),
            (":at".into(), n(change.at_ms)),
            (":by".into(), s(change.by.clone())),
            (":why".into(), s(change.reason.clone())),
        ]);
        for (i, state) in from.iter().enumerate() {
            match state {
                None => conditions.push("attribute_not_exists(campaignId)".to_owned()),
                Some(state) => {
                    conditions.push(format!("#s = :from{i}"));
                    values.insert(format!(":from{i}"), s(*state));
                }
            }
        }
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("campaignId", s(campaign_id))
            .update_expression("SET #s = :to, stateAt = :at, stateBy = :by, stateReason = :why")
            .condition_expression(conditions.join(" OR "))
            .expression_attribute_names("#s", "state")
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match result {
            Ok(_) => Ok(Ok(())),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(Err(Refused(self.record(campaign_id).await?)))
            }
            Err(err) => Err(self.error("change campaign state", describe(&err))),
        }
    }

    /// The ids of the campaigns in `state` (a scan: one item per campaign ever started, so
    /// the table stays small).
    pub async fn campaigns_in(&self, state: &str) -> Result<Vec<String>, LedgerError> {
        let mut ids = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("#s = :state")
                .expression_attribute_names("#s", "state")
                .expression_attribute_values(":state", s(state))
                .projection_expression("campaignId")
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.error("list campaigns", describe(&e)))?;
            ids.extend(out.items().iter().map(|item| text(item, "campaignId")));
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(ids),
            }
        }
    }

    /// The campaigns whose runs pinned a definition version, with their records (a scan,
    /// as `campaigns_in`; the definitions' own items carry no `definitionVersion`).
    pub async fn pinned_campaigns(&self) -> Result<Vec<(String, CampaignRecord)>, LedgerError> {
        let mut found = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("attribute_exists(#defv)")
                .expression_attribute_names("#defv", DEFINITION_VERSION)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.error("list campaigns", describe(&e)))?;
            found.extend(
                out.items()
                    .iter()
                    .map(|item| (text(item, "campaignId"), record(item))),
            );
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(found),
            }
        }
    }
}

impl CampaignStates for CampaignsTable {
    async fn state(&self, campaign_id: &str) -> Result<CampaignState, LedgerError> {
        Ok(self
            .record(campaign_id)
            .await?
            .map(|r| CampaignState {
                started_without_guardrails: r.started_at_ms.is_some() && r.guardrails.is_none(),
                hold: r.hold,
                guardrails: r.guardrails.unwrap_or_default(),
                experiment: r.experiment.map(Arc::new),
                decision: r.decision.map(Arc::new),
                registered: r.started_at_ms.is_some(),
                definition: r.definition,
            })
            .unwrap_or_default())
    }

    /// One UpdateItem: the window, topic and guardrails are set only if there are none, and
    /// the item as it stands after the write says which the campaign has.
    async fn register(
        &self,
        campaign: &Campaign,
        guardrails: &CampaignGuardrails,
        experiment: Option<&Experiment>,
        definition: Option<&PinnedDefinition>,
        at_ms: u64,
    ) -> Result<CampaignRecord, LedgerError> {
        let mut update = String::from(
            "SET startedAt = if_not_exists(startedAt, :at), #s = if_not_exists(#s, :running), \
             windowSince = if_not_exists(windowSince, :since), \
             windowUntil = if_not_exists(windowUntil, :until), \
             topic = if_not_exists(topic, :topic), \
             guardrails = if_not_exists(guardrails, :guardrails)",
        );
        let mut request = self.client.update_item();
        if let Some(experiment) = experiment {
            // Only with the first start (or the retry of one that wrote it): a campaign
            // started without an experiment is left without one.
            update.push_str(", #e = if_not_exists(#e, :e)");
            request = request
                .condition_expression("attribute_not_exists(startedAt) OR attribute_exists(#e)")
                .expression_attribute_names("#e", EXPERIMENT)
                .expression_attribute_values(
                    ":e",
                    s(serde_json::to_string(experiment).unwrap_or_default()),
                );
        }
        if let Some(definition) = definition {
            // Both or neither: a record never pins half a version.
            update.push_str(
                ", #def = if_not_exists(#def, :def), #defv = if_not_exists(#defv, :defv)",
            );
            request = request
                .expression_attribute_names("#def", DEFINITION)
                .expression_attribute_names("#defv", DEFINITION_VERSION)
                .expression_attribute_values(":def", s(definition.name.clone()))
                .expression_attribute_values(":defv", n(definition.version));
        }
        let result = request
            .table_name(&self.table)
            .key("campaignId", s(campaign.id.to_string()))
            .update_expression(update)
            .expression_attribute_names("#s", "state")
            .expression_attribute_values(":at", n(at_ms))
            .expression_attribute_values(":running", s(RUNNING))
            .expression_attribute_values(":since", s(rfc3339(campaign.window.since)))
            .expression_attribute_values(":until", s(rfc3339(campaign.window.until)))
            .expression_attribute_values(":topic", s(campaign.topic.to_string()))
            .expression_attribute_values(
                ":guardrails",
                s(serde_json::to_string(guardrails).unwrap_or_default()),
            )
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(out) => Ok(record(&out.attributes.unwrap_or_default())),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(self.record(campaign.id.as_str()).await?.unwrap_or_default())
            }
            Err(err) => Err(self.error("register campaign", describe(&err))),
        }
    }

    async fn move_deadline(
        &self,
        campaign: &CampaignId,
        guardrails: &CampaignGuardrails,
        from: Option<i64>,
        at_ms: u64,
    ) -> Result<(), LedgerError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("campaignId", s(campaign.to_string()))
            .update_expression(
                "SET guardrails = :guardrails, deadlineMovedAt = :at, deadlineMovedFrom = :from",
            )
            .expression_attribute_values(
                ":guardrails",
                s(serde_json::to_string(guardrails).unwrap_or_default()),
            )
            .expression_attribute_values(":at", n(at_ms))
            .expression_attribute_values(
                ":from",
                s(from.map_or_else(|| "none".into(), |d| d.to_string())),
            )
            .send()
            .await
            .map_err(|e| self.error("move campaign deadline", describe(&e)))?;
        Ok(())
    }

    /// A conditional write: the first decision stays; a later one reads it back.
    async fn record_decision(
        &self,
        campaign: &CampaignId,
        decision: &Decision,
    ) -> Result<Decision, LedgerError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("campaignId", s(campaign.to_string()))
            .update_expression("SET #d = :d")
            .condition_expression("attribute_exists(campaignId) AND attribute_not_exists(#d)")
            .expression_attribute_names("#d", DECISION)
            .expression_attribute_values(
                ":d",
                s(serde_json::to_string(decision).unwrap_or_default()),
            )
            .send()
            .await;
        match result {
            Ok(_) => Ok(decision.clone()),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                self.record(campaign.as_str())
                    .await?
                    .and_then(|r| r.decision)
                    .ok_or_else(|| {
                        self.error(
                            "record experiment decision",
                            "the campaign was never started here".into(),
                        )
                    })
            }
            Err(err) => Err(self.error("record experiment decision", describe(&err))),
        }
    }

    async fn record_exclusions(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &ExclusionCounts,
    ) -> Result<(), LedgerError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("campaignId", s(campaign.to_string()))
            .update_expression("SET #segment = :counts")
            .expression_attribute_names(
                "#segment",
                format!("{EXCLUDED_PREFIX}{run_started_ms}.{segment}"),
            )
            .expression_attribute_values(
                ":counts",
                s(serde_json::to_string(counts).unwrap_or_default()),
            )
            .send()
            .await
            .map_err(|e| self.error("record exclusions", describe(&e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_are_the_latest_run_s_never_runs_added_up() {
        let counts = |n: u64| {
            s(serde_json::to_string(&ExclusionCounts {
                unsubscribed: n,
                ..Default::default()
            })
            .unwrap())
        };
        let mut item: Item = [("campaignId".to_owned(), s("weekly-2026-W47"))].into();
        // Before runs were kept apart, then two runs of two segments and one.
        item.insert("excluded0".into(), counts(7));
        item.insert("excluded1000.0".into(), counts(3));
        item.insert("excluded1000.1".into(), counts(4));
        item.insert("excluded2000.0".into(), counts(6));
        item.insert("excluded2000.1".into(), counts(1));
        item.insert("excludedjunk".into(), s("not json"));
        let r = record(&item);
        assert_eq!((r.excluded_run_ms, r.excluded.unsubscribed), (2000, 7));
        // Only records from before: that one run.
        let old: Item = [("excluded0".to_owned(), counts(7))].into();
        let r = record(&old);
        assert_eq!((r.excluded_run_ms, r.excluded.unsubscribed), (0, 7));
    }
}

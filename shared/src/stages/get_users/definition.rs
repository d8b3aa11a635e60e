//! A campaign of a pushed definition: the start that names only the definition (its
//! schedule's `{"definition": "<name>"}`) given the campaign its window rule makes, a first
//! start given the latest version, and the version each segment runs, read once per
//! environment.

use super::request::Run;
use super::{GetUsers, GetUsersError, Queue};
use crate::domain::campaign::Campaign;
use crate::domain::topics::Topics;
use crate::ports::{
    load_pinned, CampaignStates, DefinitionCampaign, DefinitionError, LoadedDefinition,
    OutgoingQueue, UserDirectory, WaitingRoom,
};
use serde_json::Value;
use std::sync::Arc;
use time::OffsetDateTime;

impl From<DefinitionError> for GetUsersError {
    fn from(err: DefinitionError) -> Self {
        match err {
            // The definitions table did not answer: a retry may help.
            DefinitionError::Store(reason) => Self::Campaigns(reason),
            refused => Self::DefinitionRefused(refused.to_string()),
        }
    }
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// A definition's latest version: what a first start that names none runs.
    pub(super) async fn latest_version(&self, name: &str) -> Result<u32, GetUsersError> {
        match self.definitions.latest(name).await? {
            Some(info) => Ok(info.version),
            None => Err(DefinitionError::Unknown(name.to_owned()).into()),
        }
    }
}

impl<D: UserDirectory, Q: Queue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// A manual or scheduled start that names a definition, completed from it: without a
    /// `campaignId`, the campaign of the definition's window rule at `at` (a schedule's
    /// firing time) or the clock's now (`Campaign::for_definition`); with one of its own
    /// ids and no window, that id's window, by the version the campaign is pinned to (else
    /// the one a first start runs, which it names). Any other event is returned as it came.
    pub(super) async fn complete_definition_start(
        &self,
        mut event: Value,
    ) -> Result<Value, GetUsersError> {
        let Some(start) = event.as_object_mut() else {
            return Ok(event);
        };
        let Some(name) = start.get("definition").and_then(Value::as_str) else {
            return Ok(event);
        };
        let name = name.to_owned();
        // The instant whose period a schedule's firing runs (its scheduled time, which a
        // retry hours later keeps); else the clock's now.
        let at = match start.remove("at") {
            None => None,
            Some(Value::String(at)) => Some(
                OffsetDateTime::parse(&at, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| {
                        GetUsersError::BadRequest(format!("at {at:?} is not an RFC 3339 time: {e}"))
                    })?,
            ),
            Some(other) => {
                return Err(GetUsersError::BadRequest(format!(
                    "at {other} is not an RFC 3339 time"
                )))
            }
        };
        let asked =
            match start.get("definitionVersion") {
                None => None,
                Some(v) => Some(v.as_u64().and_then(|v| u32::try_from(v).ok()).ok_or_else(
                    || {
                        GetUsersError::BadRequest(format!(
                            "definitionVersion {v} is not a version number"
                        ))
                    },
                )?),
            };
        // The version a new campaign runs: the one asked for, else the latest (read once).
        let mut first_version = None;
        let id = match start.get("campaignId").and_then(Value::as_str) {
            Some(id) if !id.starts_with(&format!("{name}-")) => {
                return Err(GetUsersError::BadRequest(format!(
                    "campaign {id} is not one of definition {name}'s: their ids start with \"{name}-\" (leave campaignId out for the period of its window rule)"
                )))
            }
            Some(id) => id.to_owned(),
            None => {
                let version = match asked {
                    Some(version) => version,
                    None => self.latest_version(&name).await?,
                };
                first_version = Some(version);
                let rule = self.definitions.load(&name, version).await?;
                let at = at.unwrap_or_else(|| {
                    OffsetDateTime::from_unix_timestamp_nanos(
                        i128::from(self.clock.now_ms()) * 1_000_000,
                    )
                    .unwrap_or_else(|_| OffsetDateTime::now_utc())
                });
                let topic = Topics::builtin().resolve(Some(&rule.definition.topic))?;
                let id = Campaign::for_definition(
                    &name,
                    rule.definition.window_days,
                    topic.id.clone(),
                    at,
                )
                .id;
                start.insert("campaignId".into(), id.to_string().into());
                id.to_string()
            }
        };
        // A campaign already started keeps its definition's version, window and topic: a
        // retry, a re-run or a resend is never judged by what was pushed since.
        let state = self
            .campaigns
            .states()
            .state(&id)
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        let version = match (&state.definition, state.registered) {
            (Some(pinned), _) if pinned.name == name => pinned.version,
            // Another definition's: the start is refused with both names (`pin::settle`).
            (Some(_), _) => return Ok(event),
            (None, true) => {
                return Err(GetUsersError::BadRequest(format!(
                    "campaign {id} was started without a definition: definition {name} cannot take it over; start it under a new campaign id"
                )))
            }
            (None, false) => {
                let version = match first_version.or(asked) {
                    Some(version) => version,
                    None => self.latest_version(&name).await?,
                };
                start.insert("definitionVersion".into(), version.into());
                let loaded = self.definitions.load(&name, version).await?;
                let topic = Topics::builtin().resolve(Some(&loaded.definition.topic))?;
                if !start.contains_key("topic") {
                    start.insert("topic".into(), topic.id.to_string().into());
                }
                version
            }
        };
        if start.contains_key("since") || start.contains_key("until") {
            return Ok(event);
        }
        let loaded = self.definitions.load(&name, version).await?;
        // Not an id of its window rule: the start gives the window (since, until).
        let Some(window) = Campaign::definition_window(&id, &name, loaded.definition.window_days)
        else {
            return Ok(event);
        };
        let rfc3339 = crate::domain::campaign::rfc3339;
        start.insert("since".into(), rfc3339(window.since).into());
        start.insert("until".into(), rfc3339(window.until).into());
        Ok(event)
    }

    /// The version `run` uses (the bundled digest when it pinned none), parsed, with what
    /// its queries run with.
    pub(super) async fn definition_campaign(
        &self,
        run: &Run,
    ) -> Result<DefinitionCampaign, GetUsersError> {
        let loaded: Arc<LoadedDefinition> =
            load_pinned(self.definitions.as_ref(), run.pinned.as_ref()).await?;
        let topic = Topics::builtin().get(run.campaign.topic.as_str())?.clone();
        Ok(DefinitionCampaign {
            loaded,
            campaign: run.campaign.id.to_string(),
            window: run.campaign.window,
            topic,
        })
    }
}

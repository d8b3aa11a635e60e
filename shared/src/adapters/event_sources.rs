//! Lambda's event source mappings of the campaign queues (GetUsers' continuations, the users
//! queue, the emails queue): disabling them stops every consumer at once and leaves the
//! messages where they are, untouched and with their receive counts unchanged, for as long as
//! the queues retain them. This is how a pause stops a campaign; resuming enables them again.

use super::campaigns::{CampaignsTable, Refused, PAUSED, RUNNING};
use super::describe;
use crate::domain::campaign::StateChange;
use crate::ports::{ControlError, SendingSwitch};
use std::time::{Duration, Instant};

/// The mappings' `State` once a disable has taken effect.
pub const DISABLED: &str = "Disabled";
/// The State while a disable is being applied (the pollers are stopping).
pub const DISABLING: &str = "Disabling";
pub const ENABLED: &str = "Enabled";

#[derive(Clone)]
pub struct EventSourceMappings {
    client: aws_sdk_lambda::Client,
    ids: Vec<String>,
}

impl EventSourceMappings {
    pub fn new(client: aws_sdk_lambda::Client, ids: Vec<String>) -> Self {
        Self { client, ids }
    }

    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Enables or disables every mapping (UpdateEventSourceMapping); Lambda applies it within
    /// seconds (`wait_for`).
    pub async fn set_enabled(&self, enabled: bool) -> Result<(), ControlError> {
        for id in &self.ids {
            self.client
                .update_event_source_mapping()
                .uuid(id)
                .enabled(enabled)
                .send()
                .await
                .map_err(|e| {
                    ControlError(format!(
                        "event source mapping {id}: could not {} it: {}",
                        if enabled { "enable" } else { "disable" },
                        describe(&e)
                    ))
                })?;
        }
        Ok(())
    }

    /// Each mapping's `State` (Enabled, Disabling, Disabled, Enabling, ...).
    pub async fn states(&self) -> Result<Vec<(String, String)>, ControlError> {
        let mut states = Vec::new();
        for id in &self.ids {
            let out = self
                .client
                .get_event_source_mapping()
                .uuid(id)
                .send()
                .await
                .map_err(|e| {
                    ControlError(format!("event source mapping {id}: {}", describe(&e)))
                })?;
            states.push((id.clone(), out.state.unwrap_or_default()));
        }
        Ok(states)
    }

    /// Waits until every mapping is in `state`; false if one is not within `limit`.
    pub async fn wait_for(&self, state: &str, limit: Duration) -> Result<bool, ControlError> {
        let started = Instant::now();
        loop {
            if self.states().await?.iter().all(|(_, s)| s == state) {
                return Ok(true);
            }
            if started.elapsed() > limit {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The stack's sending as an operator (`mailctl pause|resume`) and the reputation guard
/// switch it: the campaigns table and the campaign queues' mappings.
pub struct StackSending {
    pub mappings: EventSourceMappings,
    pub campaigns: CampaignsTable,
}

/// How long a pause or a resume waits for Lambda to apply a change to the mappings.
pub const MAPPING_WAIT: Duration = Duration::from_secs(120);

impl StackSending {
    /// Pauses a running campaign: its state first (so that the functions hold back what is
    /// already in hand), then the mappings, waited for until Disabled.
    pub async fn pause_campaign(
        &self,
        campaign_id: &str,
        change: &StateChange,
    ) -> Result<Result<(), Refused>, ControlError> {
        if let Err(refused) = self
            .campaigns
            .change_state(campaign_id, &[Some(RUNNING)], PAUSED, change)
            .await?
        {
            return Ok(Err(refused));
        }
        self.mappings.set_enabled(false).await?;
        self.settled(DISABLED).await?;
        Ok(Ok(()))
    }

    /// Resumes a paused campaign; the mappings run again unless another campaign is still
    /// paused (the queues are shared). Ok(the campaigns still paused).
    pub async fn resume_campaign(
        &self,
        campaign_id: &str,
        change: &StateChange,
    ) -> Result<Result<Vec<String>, Refused>, ControlError> {
        if let Err(refused) = self
            .campaigns
            .change_state(campaign_id, &[Some(PAUSED)], RUNNING, change)
            .await?
        {
            return Ok(Err(refused));
        }
        Ok(Ok(self.release_consumers().await?))
    }

    /// Enables the mappings unless a campaign is paused; the campaigns that are.
    pub async fn release_consumers(&self) -> Result<Vec<String>, ControlError> {
        let still_paused = self.campaigns.campaigns_in(PAUSED).await?;
        if still_paused.is_empty() {
            self.mappings.set_enabled(true).await?;
            self.settled(ENABLED).await?;
        }
        Ok(still_paused)
    }

    async fn settled(&self, state: &str) -> Result<(), ControlError> {
        if self.mappings.wait_for(state, MAPPING_WAIT).await? {
            return Ok(());
        }
        Err(ControlError(format!(
            "the event source mappings {} did not report {state} within {MAPPING_WAIT:?}: check them (`aws lambda get-event-source-mapping`)",
            self.mappings.ids.join(", ")
        )))
    }
}

impl SendingSwitch for StackSending {
    async fn stop_consumers(&self) -> Result<usize, ControlError> {
        self.mappings.set_enabled(false).await?;
        Ok(self.mappings.ids.len())
    }

    async fn running_campaigns(&self) -> Result<Vec<String>, ControlError> {
        Ok(self.campaigns.campaigns_in(RUNNING).await?)
    }

    async fn pause(&self, campaign_id: &str, change: &StateChange) -> Result<bool, ControlError> {
        let outcome = self
            .campaigns
            .change_state(
                campaign_id,
                &[Some(RUNNING)],
                super::campaigns::PAUSED,
                change,
            )
            .await?;
        Ok(outcome.is_ok())
    }
}

/// An event source mapping by its UUID, whose MaximumConcurrency RateControl sets:
/// SendEmail's on the emails queue (`EMAILS_EVENT_SOURCE_MAPPING_ID`) and CreateEmails' on
/// the users queue (`USERS_EVENT_SOURCE_MAPPING_ID`).
pub struct ConsumerMapping {
    client: aws_sdk_lambda::Client,
    uuid: String,
}

impl ConsumerMapping {
    pub fn new(client: aws_sdk_lambda::Client, uuid: impl Into<String>) -> Self {
        Self {
            client,
            uuid: uuid.into(),
        }
    }

    async fn current(&self) -> Result<Option<i32>, ControlError> {
        let mapping = (self.client.get_event_source_mapping().uuid(&self.uuid))
            .send()
            .await
            .map_err(|e| {
                ControlError(format!(
                    "event source mapping {}: could not read it: {}",
                    self.uuid,
                    describe(&e)
                ))
            })?;
        Ok(mapping.scaling_config.and_then(|s| s.maximum_concurrency))
    }
}

impl crate::ports::ConsumerScaling for ConsumerMapping {
    fn set_max_concurrency(
        &self,
        environments: u32,
    ) -> futures::future::BoxFuture<'_, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            let (uuid, current) = (&self.uuid, self.current().await?);
            let wanted = environments as i32;
            if current == Some(wanted) {
                return Ok(None);
            }
            self.client
                .update_event_source_mapping()
                .uuid(uuid)
                .scaling_config(
                    aws_sdk_lambda::types::ScalingConfig::builder()
                        .maximum_concurrency(wanted)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| {
                    ControlError(format!(
                        "event source mapping {uuid}: could not set its MaximumConcurrency: {}",
                        describe(&e)
                    ))
                })?;
            Ok(Some(current.unwrap_or(0) as u32))
        })
    }
}

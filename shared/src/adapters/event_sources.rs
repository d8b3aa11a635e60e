//! Lambda's event source mappings of the campaign queues (GetUsers' continuations, the users
//! queue, the emails queue): disabling them stops every consumer at once and leaves the
//! messages where they are, untouched and with their receive counts unchanged, for as long as
//! the queues retain them. This is how a pause stops a campaign; resuming enables them again.

use super::campaigns::{CampaignsTable, Refused, PAUSED, RUNNING};
use super::describe;
use crate::domain::campaign_state::StateChange;
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
    /// seconds (`wait_for`). See `switch_each` for what a refusal does.
    pub async fn set_enabled(&self, enabled: bool) -> Result<(), ControlError> {
        // Boxed: the SDK's future nested in the retries is too deep a type for the compiler.
        switch_each(
            &self.ids,
            enabled,
            |id| -> futures::future::BoxFuture<'_, _> {
                Box::pin(async move {
                    use aws_sdk_lambda::error::ProvideErrorMetadata;
                    (self.client.update_event_source_mapping().uuid(id))
                        .enabled(enabled)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| UpdateRefused {
                            code: e.code().map(str::to_owned),
                            detail: describe(&e),
                        })
                })
            },
        )
        .await
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

/// Attempts at one mapping's update, half a second apart at first and doubling (15.5 s of
/// waiting in all): Lambda refuses an update while another of the same mapping is in progress
/// (ResourceInUseException, RateControl setting its MaximumConcurrency every minute) and
/// throttles bursts of them; both pass within seconds.
const UPDATE_ATTEMPTS: u32 = 6;
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// An UpdateEventSourceMapping Lambda refused: its error code (None: no answer came), and
/// the whole error as text.
#[derive(Debug)]
pub struct UpdateRefused {
    pub code: Option<String>,
    pub detail: String,
}

/// Whether a refusal passes by itself: the mapping is being updated, the calls are throttled,
/// Lambda failed, or no answer came. Any other (not found, access denied) would repeat.
fn transient(code: Option<&str>) -> bool {
    matches!(
        code,
        None | Some(
            "ResourceInUseException"
                | "TooManyRequestsException"
                | "ThrottlingException"
                | "ServiceException"
        )
    )
}

/// Switches every mapping in `ids` to `enabled` through `update`, trying a transient refusal
/// again with backoff. A mapping that still refuses does not stop the others; the error names
/// each one left in the other state, why, and the command that switches it by hand.
async fn switch_each<'a, F, Fut>(
    ids: &'a [String],
    enabled: bool,
    update: F,
) -> Result<(), ControlError>
where
    F: Fn(&'a str) -> Fut,
    Fut: std::future::Future<Output = Result<(), UpdateRefused>>,
{
    let (verb, left, flag) = if enabled {
        ("enable", "disabled", "--enabled")
    } else {
        ("disable", "enabled", "--no-enabled")
    };
    let mut stuck = Vec::new();
    for id in ids {
        let mut attempt = 1;
        while let Err(refused) = update(id).await {
            if attempt >= UPDATE_ATTEMPTS || !transient(refused.code.as_deref()) {
                tracing::error!(mapping = %id, reason = %refused.detail, attempts = attempt, "event source mapping left {left}");
                stuck.push(format!(
                    "{id} (could not {verb} it, {attempt} attempt(s): {}; `aws lambda update-event-source-mapping --uuid {id} {flag}`)",
                    refused.detail
                ));
                break;
            }
            tracing::warn!(mapping = %id, reason = %refused.detail, attempt, "event source mapping not updated; trying again");
            tokio::time::sleep(FIRST_RETRY * 2u32.pow(attempt - 1)).await;
            attempt += 1;
        }
    }
    if stuck.is_empty() {
        return Ok(());
    }
    Err(ControlError(format!(
        "event source mapping(s) left {left}: {}",
        stuck.join("; ")
    )))
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
        (self.mappings.set_enabled(false).await).map_err(|e| {
            ControlError(format!(
                "{campaign_id} is recorded PAUSED, but not every consumer is stopped: {e}"
            ))
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Lambda as a fake: each mapping refuses its first `busy` updates with `code`.
    struct Lambda {
        busy: usize,
        code: Option<&'static str>,
        calls: Mutex<Vec<String>>,
    }

    impl Lambda {
        fn new(busy: usize, code: Option<&'static str>) -> Self {
            Self {
                busy,
                code,
                calls: Mutex::default(),
            }
        }

        async fn update(&self, id: &str) -> Result<(), UpdateRefused> {
            let mut calls = self.calls.lock().unwrap();
            calls.push(id.to_owned());
            if calls.iter().filter(|c| *c == id).count() <= self.busy {
                return Err(UpdateRefused {
                    code: self.code.map(str::to_owned),
                    detail: format!("{}: busy", self.code.unwrap_or("no answer")),
                });
            }
            Ok(())
        }

        fn calls_for(&self, id: &str) -> usize {
            self.calls
                .lock()
                .unwrap()
                .iter()
                .filter(|c| *c == id)
                .count()
        }
    }

    fn ids() -> Vec<String> {
        ["continuation", "users", "emails"]
            .map(String::from)
            .to_vec()
    }

    #[tokio::test(start_paused = true)]
    async fn a_mapping_in_use_is_disabled_on_a_later_attempt() {
        let lambda = Lambda::new(3, Some("ResourceInUseException"));
        let started = tokio::time::Instant::now();
        switch_each(&ids(), false, |id| lambda.update(id))
            .await
            .unwrap();
        for id in ids() {
            assert_eq!(lambda.calls_for(&id), 4, "{id}");
        }
        // 0.5 + 1 + 2 s of backoff for each (the clock is tokio's, paused).
        assert_eq!(started.elapsed(), Duration::from_millis(3 * 3_500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_mapping_that_stays_in_use_is_named_and_the_others_still_switch() {
        let lambda = &Lambda::new(UPDATE_ATTEMPTS as usize, Some("TooManyRequestsException"));
        let err = switch_each(&ids(), false, |id| async move {
            // Only the users queue's mapping stays busy.
            if id == "users" {
                return lambda.update(id).await;
            }
            Ok(())
        })
        .await
        .unwrap_err();
        assert_eq!(lambda.calls_for("users"), UPDATE_ATTEMPTS as usize);
        assert_eq!(
            err.to_string(),
            "event source mapping(s) left enabled: users (could not disable it, 6 attempt(s): TooManyRequestsException: busy; `aws lambda update-event-source-mapping --uuid users --no-enabled`)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_that_would_repeat_is_not_tried_again() {
        let lambda = Lambda::new(1, Some("ResourceNotFoundException"));
        let err = switch_each(&ids(), true, |id| lambda.update(id))
            .await
            .unwrap_err();
        for id in ids() {
            assert_eq!(lambda.calls_for(&id), 1, "{id}");
        }
        let message = err.to_string();
        assert!(message.starts_with("event source mapping(s) left disabled: continuation (could not enable it, 1 attempt(s)"), "{message}");
        assert!(message.contains("--uuid emails --enabled"), "{message}");
    }
}

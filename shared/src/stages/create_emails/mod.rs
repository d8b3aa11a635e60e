//! CreateEmails: for each user message, read its data from MongoDB, render, and put the
//! email job on the emails queue. Records are processed concurrently (bounded); jobs go out in
//! SendMessageBatch calls; every record that did not make it is reported for retry.
//!
//! A user whose one-click unsubscribe MongoDB did not take in time (recorded in the sends
//! table instead: `PendingLeaves`) is left out of the topic's campaigns while that leave
//! stands, whatever MongoDB says: one BatchGetItem per batch, read with the batch's users
//! (`prefetch`).

mod definition;
mod prefetch;

pub(crate) use prefetch::Read;

use super::summary::summary;
use super::CampaignStateCache;
use crate::config::CreateEmailsConfig;
use crate::domain::campaign::Window;
use crate::domain::campaign_state::Hold;
use crate::domain::digest::SkipReason;
use crate::domain::experiment::Variant;
use crate::domain::ledger::LedgerError;
use crate::domain::messages::{parse_body, BodyError, EmailJob, UserMessage};
use crate::domain::open_content::{Language, SlotSealer, SlotUrls};
use crate::domain::topics::{Topic, Topics};
use crate::domain::unsubscribe_link::{self, Signer};
use crate::domain::user_id::{UserId, UserIdError};
use crate::ports::batches;
use crate::ports::{
    CampaignStates, DefinitionLoader, OutgoingQueue, PendingLeaves, QueueError, StoreError,
    UserDirectory,
};
use crate::runtime::batch::{batch_response, each_record};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::stream::{self, StreamExt};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;

summary! {
    pub struct Summary {
        pub rendered: usize,
        pub enqueued: usize,
        pub skipped: BTreeMap<&'static str, usize>,
        pub failed: usize,
        /// Records of a paused campaign, handed back (reported as failures, not counted there).
        pub held: usize,
    }
}

/// Why a user's email could not be composed: the record fails, and comes back.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    UserId(#[from] UserIdError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The pending one-click unsubscribes (the sends table) could not be read.
    #[error(transparent)]
    PendingLeaves(#[from] LedgerError),
    /// The campaign's experiment (its variants' subjects and bodies) could not be read.
    #[error("the campaign's experiment was not read: {0}")]
    Experiment(LedgerError),
    #[error("cannot serialise job: {0}")]
    Serialise(serde_json::Error),
    /// The definitions table did not answer.
    #[error("the campaign's definition was not read: {0}")]
    Definition(String),
}

/// The job of a rendered email: what the message says of the send, as it came.
fn job_of(
    message: UserMessage,
    user_id: String,
    to: String,
    rendered: crate::domain::digest::Rendered,
    unsubscribe_url: String,
    variant: Option<&Variant>,
) -> EmailJob {
    EmailJob {
        campaign_id: message.campaign_id,
        user_id,
        to,
        subject: rendered.subject,
        html: rendered.html,
        text: rendered.text,
        unsubscribe_url: Some(unsubscribe_url),
        include_failed: message.include_failed,
        include_cancelled: message.include_cancelled,
        due: message.due,
        topic: message.topic,
        zone: message.zone,
        variant: variant.map(|v| v.name.clone()),
        rendered_at_ms: Some(crate::domain::ledger::epoch_ms(crate::runtime::clock::now()) as i64),
        window: Some(message.window),
        definition: message.definition,
    }
}

/// A message of a topic this build does not declare (a deploy removed it while the campaign
/// ran): the same message would fail the same way, so it is skipped now, counted, logged.
fn unknown_topic(message: &UserMessage) -> SkipReason {
    tracing::error!(campaign = %message.campaign_id, topic = %message.topic, "a topic shared/topics.json does not declare; user skipped");
    SkipReason::UnknownTopic
}

enum Outcome {
    Job(String),
    Skipped(SkipReason),
    /// The campaign is paused: handed back unrendered; it returns after the queue's
    /// visibility timeout once the resume has enabled the event source mappings again.
    Held,
}

/// Generic over the user directory (MongoDB on Lambda), the emails queue (SQS), the
/// campaigns table and the pending one-click unsubscribes (DynamoDB: the sends table).
pub struct CreateEmails<D, Q, S, P> {
    directory: D,
    pending: P,
    emails: Q,
    campaigns: CampaignStateCache<S>,
    signer: Signer,
    /// Seals the pick slots' URLs, when emails carry picks.
    sealer: Option<SlotSealer>,
    /// The pushed definitions (the campaigns table), for campaigns that run one.
    definitions: Arc<dyn DefinitionLoader>,
    config: CreateEmailsConfig,
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, P: PendingLeaves>
    CreateEmails<D, Q, S, P>
{
    /// `emails` and `campaigns` are the queue and the table `config` names, `pending` the
    /// sends table.
    pub fn new(
        directory: D,
        emails: Q,
        campaigns: S,
        pending: P,
        signer: Signer,
        config: CreateEmailsConfig,
    ) -> Self {
        Self {
            directory,
            pending,
            emails,
            campaigns: CampaignStateCache::new(campaigns),
            sealer: config.picks.as_ref().map(|_| signer.slot_sealer()),
            signer,
            definitions: Arc::new(crate::ports::definitions::NoDefinitionStore),
            config,
        }
    }

    /// Where pushed definitions are read (without one, only the bundled digest renders).
    pub fn with_definitions(mut self, definitions: Arc<dyn DefinitionLoader>) -> Self {
        self.definitions = definitions;
        self
    }

    /// The email one user gets in one campaign (or why they get none): read afresh from
    /// MongoDB, rendered in their locale, with their unsubscribe link. `mailctl preview`
    /// calls this too, so it shows exactly what is sent.
    pub async fn compose(
        &self,
        message: UserMessage,
    ) -> Result<Result<EmailJob, SkipReason>, ComposeError> {
        Ok(self.compose_in_locale(message).await?.map(|(job, _)| job))
    }

    /// `compose`, with the locale whose templates rendered the email (`mailctl plan`
    /// counts the audience by it).
    pub async fn compose_in_locale(
        &self,
        message: UserMessage,
    ) -> Result<Result<(EmailJob, String), SkipReason>, ComposeError> {
        self.compose_with(message, None).await
    }

    /// `compose_in_locale` in an experiment's variant.
    async fn compose_with(
        &self,
        message: UserMessage,
        variant: Option<&Variant>,
    ) -> Result<Result<(EmailJob, String), SkipReason>, ComposeError> {
        let user_id = crate::domain::user_id::UserId::parse(&message.user_id)?;
        let Some(topic) = Topics::builtin().find(&message.topic) else {
            return Ok(Err(unknown_topic(&message)));
        };
        let read = self.read_definition_user(&message, topic, user_id).await?;
        self.render_read(message, read, variant)
    }

    /// The job for a user whose data is read (or why they get none), in their experiment's
    /// variant if they have one, with the language that rendered it.
    fn render_read(
        &self,
        message: UserMessage,
        read: Read,
        variant: Option<&Variant>,
    ) -> Result<Result<(EmailJob, String), SkipReason>, ComposeError> {
        match read {
            Read::Skipped(reason) => Ok(Err(reason)),
            Read::Definition(loaded, prepared) => {
                self.render_definition_job(message, &loaded, prepared, variant)
            }
            Read::Failed | Read::Slow(_) => Ok(Err(SkipReason::DefinitionFailed)),
        }
    }

    /// The experiment's variant a message names, from the campaign's record (None: it names
    /// none). Read through the cache: an experiment is fixed when the campaign starts.
    async fn variant_of(
        &self,
        message: &UserMessage,
    ) -> Result<Option<Result<Variant, SkipReason>>, ComposeError> {
        let Some(name) = &message.variant else {
            return Ok(None);
        };
        let state = self
            .campaigns
            .state(message.campaign_id.as_str())
            .await
            .map_err(ComposeError::Experiment)?;
        // GetUsers records the experiment before it enqueues anyone: a state without one is
        // a read from before that, and comes back.
        let Some(experiment) = state.experiment else {
            return Err(ComposeError::Experiment(LedgerError {
                table: "campaigns".into(),
                operation: "read experiment",
                detail: format!("{} has no experiment recorded yet", message.campaign_id),
            }));
        };
        Ok(Some(experiment.variant(name).cloned().ok_or_else(|| {
            tracing::error!(campaign = %message.campaign_id, variant = %name, "a variant the campaign's experiment does not have; user skipped");
            SkipReason::UnknownVariant
        })))
    }

    async fn process(
        &self,
        record: &SqsMessage,
        prefetched: Option<Result<Read, StoreError>>,
    ) -> Result<Outcome, ComposeError> {
        let message: UserMessage = parse_body(record.body.as_deref())?;
        match self.campaigns.hold(message.campaign_id.as_str()).await {
            Some(Hold::Cancelled(_)) => return Ok(Outcome::Skipped(SkipReason::CampaignCancelled)),
            // Handed back untouched: rendered after the resume.
            Some(Hold::Paused(_)) => return Ok(Outcome::Held),
            None => {}
        }
        let variant = match self.variant_of(&message).await? {
            Some(Err(reason)) => return Ok(Outcome::Skipped(reason)),
            Some(Ok(variant)) => Some(variant),
            None => None,
        };
        // Not in the batch read (its campaign was held then, or the pending leaves could not
        // be read): read alone.
        let read = match prefetched {
            Some(read) => read?,
            None => {
                let user_id = UserId::parse(&message.user_id)?;
                let left = self
                    .pending
                    .standing_leaves(&[user_id.to_string()], &message.topic)
                    .await?;
                match (left.is_empty(), Topics::builtin().find(&message.topic)) {
                    (false, _) => Read::Skipped(SkipReason::LeftTopic),
                    (true, Some(topic)) => {
                        self.read_definition_user(&message, topic, user_id).await?
                    }
                    (true, None) => Read::Skipped(unknown_topic(&message)),
                }
            }
        };
        let read = match read {
            Read::Slow(reason) => definition::slow(reason, record, &message)?,
            other => other,
        };
        let composed = self
            .render_read(message, read, variant.as_ref())
            .map(|r| r.map(|(job, _)| job));
        match composed? {
            Ok(job) => Ok(Outcome::Job(
                serde_json::to_string(&job).map_err(ComposeError::Serialise)?,
            )),
            Err(reason) => Ok(Outcome::Skipped(reason)),
        }
    }

    pub async fn handle(&self, event: SqsEvent) -> (SqsBatchResponse, Summary) {
        let started = std::time::Instant::now();
        let mut summary = Summary::default();
        let mut failed: Vec<String> = Vec::new();
        let prefetched = self.prefetch(&event.records).await;
        let prefetched = &prefetched;
        let outcomes = each_record(
            event.records,
            self.config.record_concurrency,
            |record| async move {
                let id = record.message_id.clone().unwrap_or_default();
                self.process(&record, prefetched.get(&id).cloned()).await
            },
        )
        .await;

        let mut jobs: Vec<(String, String)> = Vec::new();
        for (id, outcome) in outcomes {
            match outcome {
                Ok(Outcome::Job(body)) => jobs.push((id, body)),
                Ok(Outcome::Skipped(reason)) => {
                    *summary.skipped.entry(reason.as_str()).or_default() += 1
                }
                Ok(Outcome::Held) => {
                    summary.held += 1;
                    failed.push(id);
                }
                Err(reason) => {
                    tracing::warn!(message_id = %id, %reason, "record failed; it will be retried");
                    failed.push(id);
                }
            }
        }
        summary.rendered = jobs.len();

        let bodies: Vec<String> = jobs.iter().map(|(_, b)| b.clone()).collect();
        let sends = batches(&bodies).into_iter().map(|range| {
            let bodies = &bodies[range.clone()];
            async move { (range, self.emails.send_batch(bodies).await) }
        });
        let results: Vec<_> = stream::iter(sends).buffer_unordered(4).collect().await;
        for (range, result) in results {
            let unsent: Vec<usize> = match result {
                Ok(report) => {
                    summary.enqueued += report.sent;
                    Vec::new()
                }
                Err(QueueError::EntriesFailed { unsent, first, .. }) => {
                    tracing::warn!(reason = %first, count = unsent.len(), "email jobs not enqueued; records will be retried");
                    summary.enqueued += range.len() - unsent.len();
                    unsent.into_iter().map(|i| range.start + i).collect()
                }
                Err(err) => {
                    tracing::warn!(reason = %err, "email jobs not enqueued; records will be retried");
                    range.collect()
                }
            };
            failed.extend(unsent.into_iter().map(|i| jobs[i].0.clone()));
        }
        summary.failed = failed.len() - summary.held;
        tracing::info!(
            rendered = summary.rendered,
            enqueued = summary.enqueued,
            skipped = ?summary.skipped,
            failed = summary.failed,
            held = summary.held,
            duration_ms = started.elapsed().as_millis() as u64,
            "CreateEmails batch done"
        );
        (batch_response(failed), summary)
    }
}

crate::runtime::serve::stage! {
    impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, P: PendingLeaves> for CreateEmails<D, Q, S, P> {
        SqsEvent => Result<(SqsBatchResponse, Summary), std::convert::Infallible>,
        |stage, event, _invocation| Ok(stage.handle(event).await)
    }
}

#[cfg(test)]
mod tests;

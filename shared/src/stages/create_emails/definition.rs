//! A campaign's definition at work (a pushed version, or the bundled digest): its users'
//! data read by the definition's queries (`UserDirectory::prepare`) and their emails rendered by its templates. A
//! definition that cannot run (refused by this build, or a query MongoDB refuses) would fail
//! the same way on every retry: its users are skipped with the reason (`definition_failed`),
//! logged once per batch, never retried into the DLQ.

use super::*;
use crate::domain::definition::render::Email;
use crate::domain::definition::Prepared;
use crate::domain::topics::Topic;
use crate::ports::{
    load_pinned, DefinitionCampaign, DefinitionError, LoadedDefinition, PrepareError,
};

/// From this receive on, a record whose definition's query ran over its time limit is
/// skipped (`definition_failed`) rather than tried again: the users queue sends a record to
/// its DLQ after its fifth.
pub(super) const SLOW_LAST_RECEIVE: u32 = 3;

/// A definition's query over its time limit for this record: tried again (the record
/// fails and comes back) until its last tries, then skipped as `definition_failed`.
pub(super) fn slow(
    reason: String,
    record: &SqsMessage,
    message: &UserMessage,
) -> Result<Read, ComposeError> {
    let receives = receives(record);
    if receives < SLOW_LAST_RECEIVE {
        return Err(ComposeError::Definition(reason));
    }
    tracing::error!(campaign = %message.campaign_id, %reason, receives, "the campaign's definition stayed slower than its time limit; user skipped");
    Ok(Read::Failed)
}

/// How often SQS has delivered the record (1 on the first receive).
pub(super) fn receives(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, P: PendingLeaves>
    CreateEmails<D, Q, S, P>
{
    /// The definition version `message` names (the bundled digest when it names none), with
    /// what its queries run with; Err(read) when it cannot run (the same every time: the
    /// users skipped), Err of the store when it was not read (retried).
    pub(super) async fn definition_campaign(
        &self,
        message: &UserMessage,
        topic: &Topic,
    ) -> Result<Result<DefinitionCampaign, Read>, ComposeError> {
        match load_pinned(self.definitions.as_ref(), message.definition.as_ref()).await {
            Ok(loaded) => Ok(Ok(DefinitionCampaign {
                loaded,
                campaign: message.campaign_id.to_string(),
                window: message.window,
                topic: topic.clone(),
            })),
            Err(DefinitionError::Store(reason)) => Err(ComposeError::Definition(reason)),
            Err(refused) => {
                tracing::error!(campaign = %message.campaign_id, reason = %refused, "the campaign's definition cannot run; its users are skipped");
                Ok(Err(Read::Failed))
            }
        }
    }

    /// One user of a definition's campaign read alone (not in a batch read).
    pub(super) async fn read_definition_user(
        &self,
        message: &UserMessage,
        topic: &Topic,
        user_id: UserId,
    ) -> Result<Read, ComposeError> {
        let campaign = match self.definition_campaign(message, topic).await? {
            Ok(campaign) => campaign,
            Err(failed) => return Ok(failed),
        };
        let prepared = self
            .directory
            .prepare(&campaign, std::slice::from_ref(&user_id))
            .await;
        Ok(match prepared {
            Ok(mut one) => Read::Definition(
                campaign.loaded,
                one.pop()
                    .unwrap_or(Prepared::Skip(SkipReason::Vanished.as_str().into())),
            ),
            Err(PrepareError::Store(err)) => return Err(err.into()),
            Err(PrepareError::Slow(reason)) => Read::Slow(reason),
            Err(PrepareError::Definition(reason)) => {
                tracing::error!(campaign = %message.campaign_id, %reason, "the campaign's definition failed; user skipped");
                Read::Failed
            }
        })
    }

    /// The job for a user of a definition's campaign (or why they get none), with the
    /// language that rendered it.
    pub(super) fn render_definition_job(
        &self,
        message: UserMessage,
        loaded: &LoadedDefinition,
        prepared: Prepared,
        variant: Option<&Variant>,
    ) -> Result<Result<(EmailJob, String), SkipReason>, ComposeError> {
        let data = match prepared {
            Prepared::Ready(data) => data,
            Prepared::Skip(reason) => return Ok(Err(SkipReason::named(&reason))),
        };
        let Some(topic) = Topics::builtin().find(&message.topic) else {
            return Ok(Err(unknown_topic(&message)));
        };
        let user_id = data.user_id.to_string();
        let unsubscribe_url = unsubscribe_link::link(
            &self.config.unsubscribe_base_url,
            &self.signer.token(&message.campaign_id, &topic.id, &user_id),
        );
        let language = loaded
            .templates
            .language_for(data.language.as_deref())
            .to_owned();
        // Picks only for a definition that declares where they come from.
        let picks = match (
            &self.config.picks,
            &self.sealer,
            loaded.definition.open_content,
        ) {
            (Some(links), Some(sealer), Some(_)) => SlotUrls::for_email(
                sealer,
                &links.base_url,
                &message.campaign_id,
                &user_id,
                Language::of_locale(&language),
                links.slots,
            ),
            _ => Vec::new(),
        };
        let email = Email {
            window: &message.window,
            topic,
            manage_url: &unsubscribe_url,
            picks: &picks,
            variant: variant.and_then(|v| v.template.as_deref()),
            subject: variant
                .and_then(|v| v.subject.get(language.as_str()))
                .map(String::as_str),
        };
        let rendered = match loaded.templates.render(&data, &email) {
            Ok(rendered) => rendered,
            // The same data fails the same way on every retry: decided now, counted.
            Err(reason) => {
                tracing::error!(campaign = %message.campaign_id, user = %data.user_id, %reason, "email not rendered; user skipped");
                return Ok(Err(SkipReason::Unrenderable));
            }
        };
        let job = job_of(
            message,
            user_id,
            data.email,
            rendered,
            unsubscribe_url,
            variant,
        );
        Ok(Ok((job, language)))
    }
}

//! A batch's users read together before its records are processed: per (window, topic,
//! campaign, definition), the pending one-click leaves in one read and the users in one
//! batch read (the definition's `prepare`); user by user when a batch read fails.

use super::*;
use crate::domain::definition::pin::PinnedDefinition;
use crate::domain::definition::Prepared;
use crate::ports::{LoadedDefinition, PrepareError};

/// What was read of one user.
#[derive(Clone)]
pub(crate) enum Read {
    /// Left out before the definition's queries ran (a pending one-click leave).
    Skipped(SkipReason),
    /// A definition's inputs (or its reason to skip), with the version that renders them.
    Definition(Arc<LoadedDefinition>, Prepared),
    /// The campaign's definition cannot run (logged once): skipped, `definition_failed`.
    Failed,
    /// A query ran over its time limit: the record comes back, and on its last tries is
    /// skipped as `definition_failed` (`process`).
    Slow(String),
}

/// Users read together: the same window, topic, campaign and definition version (the
/// queries see the campaign id; None: the bundled digest).
#[derive(PartialEq)]
struct GroupKey<'t> {
    window: Window,
    topic: &'t Topic,
    campaign: String,
    definition: Option<PinnedDefinition>,
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, P: PendingLeaves>
    CreateEmails<D, Q, S, P>
{
    /// The users of a batch read together: per group, one batch read for the whole batch;
    /// if that fails, each user alone, so that one user the store cannot answer for fails
    /// alone. Records that do not parse or are held are left out (their `process` says
    /// why), and so are a group's whose definition was not read (each record asks again).
    pub(super) async fn prefetch(
        &self,
        records: &[SqsMessage],
    ) -> HashMap<String, Result<Read, StoreError>> {
        // (message id, user) of each group, and one of its messages.
        type Group<'t> = (GroupKey<'t>, UserMessage, Vec<(String, UserId)>);
        let mut groups: Vec<Group<'_>> = Vec::new();
        for record in records {
            let Ok(message) = parse_body::<UserMessage>(record.body.as_deref()) else {
                continue;
            };
            let Ok(user_id) = UserId::parse(&message.user_id) else {
                continue;
            };
            let Some(topic) = Topics::builtin().find(&message.topic) else {
                continue;
            };
            if self
                .campaigns
                .hold(message.campaign_id.as_str())
                .await
                .is_some()
            {
                continue;
            }
            let id = record.message_id.clone().unwrap_or_default();
            let key = GroupKey {
                window: message.window,
                topic,
                campaign: message.campaign_id.to_string(),
                definition: message.definition.clone(),
            };
            match groups.iter_mut().find(|(g, _, _)| *g == key) {
                Some((_, _, users)) => users.push((id, user_id)),
                None => groups.push((key, message, vec![(id, user_id)])),
            }
        }
        let mut read = HashMap::new();
        for (key, message, mut users) in groups {
            let topic = key.topic;
            // Who left the topic by a one-click MongoDB did not take: skipped unread. When
            // that cannot be read, the group is left out here, and each record asks alone.
            let ids: Vec<String> = users.iter().map(|(_, u)| u.to_string()).collect();
            match self.pending.standing_leaves(&ids, &topic.id).await {
                Ok(left) => users.retain(|(id, user)| {
                    let stays = !left.contains(&user.to_string());
                    if !stays {
                        read.insert(id.clone(), Ok(Read::Skipped(SkipReason::LeftTopic)));
                    }
                    stays
                }),
                Err(err) => {
                    tracing::warn!(reason = %err, users = ids.len(), "pending one-click unsubscribes not read; reading them user by user");
                    continue;
                }
            }
            if users.is_empty() {
                continue;
            }
            let ids: Vec<UserId> = users.iter().map(|(_, u)| u.clone()).collect();
            // None: each record reads its user alone.
            if let Some(all) = self.read_definition(&message, topic, &ids).await {
                read.extend(
                    users
                        .into_iter()
                        .map(|(id, _)| id)
                        .zip(all.into_iter().map(Ok)),
                );
            }
        }
        read
    }

    /// A definition's inputs for one group's users (None: not read; each record asks
    /// again). A definition that cannot run fails them all at once, logged once.
    async fn read_definition(
        &self,
        message: &UserMessage,
        topic: &Topic,
        ids: &[UserId],
    ) -> Option<Vec<Read>> {
        let campaign = match self.definition_campaign(message, topic).await {
            Ok(Ok(campaign)) => campaign,
            Ok(Err(failed)) => return Some(vec![failed; ids.len()]),
            Err(err) => {
                tracing::warn!(reason = %err, users = ids.len(), "the campaign's definition was not read; reading its users one by one");
                return None;
            }
        };
        match self.directory.prepare(&campaign, ids).await {
            Ok(all) => Some(
                all.into_iter()
                    .map(|p| Read::Definition(campaign.loaded.clone(), p))
                    .collect(),
            ),
            Err(PrepareError::Definition(reason)) => {
                tracing::error!(campaign = %message.campaign_id, %reason, users = ids.len(), "the campaign's definition failed; its users are skipped");
                Some(vec![Read::Failed; ids.len()])
            }
            Err(PrepareError::Slow(reason)) => {
                tracing::warn!(campaign = %message.campaign_id, %reason, users = ids.len(), "the campaign's definition was slower than its time limit; its users come back");
                Some(vec![Read::Slow(reason); ids.len()])
            }
            Err(PrepareError::Store(err)) => {
                tracing::warn!(reason = %err, users = ids.len(), "batch read failed; reading its users one by one");
                None
            }
        }
    }
}

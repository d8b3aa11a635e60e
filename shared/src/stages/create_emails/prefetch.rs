//! A batch's users read together before its records are processed: per (window, topic), the
//! pending one-click leaves in one read and the users in `enrich_many`'s three round trips;
//! user by user when a batch read fails.

use super::*;

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, P: PendingLeaves>
    CreateEmails<D, Q, S, P>
{
    /// The users of a batch read together: per window, `enrich_many` (three round trips for
    /// the whole batch); if that fails, each user alone, so that one user the store cannot
    /// answer for fails alone. Records that do not parse or are held are left out (their
    /// `process` says why).
    pub(super) async fn prefetch(
        &self,
        records: &[SqsMessage],
    ) -> HashMap<String, Result<Enrichment, StoreError>> {
        // Users are read together per (window, topic): (message id, user) of each group.
        type Group<'t> = ((Window, &'t Topic), Vec<(String, UserId)>);
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
            let group = (message.window, topic);
            match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, users)) => users.push((id, user_id)),
                None => groups.push((group, vec![(id, user_id)])),
            }
        }
        let shown = self.config.recent_followers_shown;
        let mut read = HashMap::new();
        for ((window, topic), mut users) in groups {
            // Who left the topic by a one-click MongoDB did not take: skipped unread. When
            // that cannot be read, the group is left out here, and each record asks alone.
            let ids: Vec<String> = users.iter().map(|(_, u)| u.to_string()).collect();
            match self.pending.standing_leaves(&ids, &topic.id).await {
                Ok(left) => users.retain(|(id, user)| {
                    let stays = !left.contains(&user.to_string());
                    if !stays {
                        read.insert(id.clone(), Ok(Enrichment::Skip(SkipReason::LeftTopic)));
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
            match self
                .directory
                .enrich_many(&ids, &window, topic, shown)
                .await
            {
                Ok(all) => read.extend(
                    users
                        .into_iter()
                        .map(|(id, _)| id)
                        .zip(all.into_iter().map(Ok)),
                ),
                Err(err) => {
                    tracing::warn!(reason = %err, users = ids.len(), "batch read failed; reading its users one by one");
                    for (id, user_id) in users {
                        let one = self.directory.enrich(&user_id, &window, topic, shown).await;
                        read.insert(id, one);
                    }
                }
            }
        }
        read
    }
}

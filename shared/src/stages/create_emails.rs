//! CreateEmails: for each user message, enrich from MongoDB, render, and put the email job on
//! the emails queue. Records are processed concurrently (bounded); jobs go out in
//! SendMessageBatch calls; every record that did not make it is reported for retry.

use super::summary::summary;
use super::CampaignStateCache;
use crate::config::CreateEmailsConfig;
use crate::domain::campaign::Hold;
use crate::domain::campaign::Window;
use crate::domain::digest::{Enrichment, Renderer, SkipReason};
use crate::domain::messages::{parse_body, EmailJob, UserMessage};
use crate::domain::unsubscribe_link::{self, Signer};
use crate::domain::user_id::UserId;
use crate::ports::batches;
use crate::ports::{CampaignStates, OutgoingQueue, QueueError, UserDirectory};
use crate::runtime::batch::{batch_response, each_record};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::stream::{self, StreamExt};
use std::collections::BTreeMap;
use std::collections::HashMap;

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

enum Outcome {
    Job(String),
    Skipped(SkipReason),
    /// The campaign is paused: handed back unrendered; it returns after the queue's
    /// visibility timeout once the resume has enabled the event source mappings again.
    Held,
}

/// Generic over the user directory (MongoDB on Lambda), the emails queue (SQS) and the
/// campaigns table (DynamoDB).
pub struct CreateEmails<D, Q, S> {
    directory: D,
    emails: Q,
    campaigns: CampaignStateCache<S>,
    renderer: Renderer,
    signer: Signer,
    config: CreateEmailsConfig,
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates> CreateEmails<D, Q, S> {
    /// `emails` and `campaigns` are the queue and the table `config` names.
    pub fn new(
        directory: D,
        emails: Q,
        campaigns: S,
        renderer: Renderer,
        signer: Signer,
        config: CreateEmailsConfig,
    ) -> Self {
        Self {
            directory,
            emails,
            campaigns: CampaignStateCache::new(campaigns),
            renderer,
            signer,
            config,
        }
    }

    /// The email one user gets in one campaign (or why they get none): read afresh from
    /// MongoDB, rendered in their locale, with their unsubscribe link. `mailctl preview`
    /// calls this too, so it shows exactly what is sent.
    pub async fn compose(
        &self,
        message: UserMessage,
    ) -> Result<Result<EmailJob, SkipReason>, String> {
        Ok(self.compose_in_locale(message).await?.map(|(job, _)| job))
    }

    /// `compose`, with the locale whose templates rendered the email (`mailctl plan`
    /// counts the audience by it).
    pub async fn compose_in_locale(
        &self,
        message: UserMessage,
    ) -> Result<Result<(EmailJob, &'static str), SkipReason>, String> {
        let user_id = crate::domain::user_id::UserId::parse(&message.user_id)?;
        let enrichment = self
            .directory
            .enrich(
                &user_id,
                &message.window,
                self.config.recent_followers_shown,
            )
            .await
            .map_err(|e| e.to_string())?;
        self.render_job(message, enrichment)
    }

    /// The job for a user whose enrichment is read (or why they get none).
    fn render_job(
        &self,
        message: UserMessage,
        enrichment: Enrichment,
    ) -> Result<Result<(EmailJob, &'static str), SkipReason>, String> {
        let digest = match enrichment {
            Enrichment::Ready(d) => d,
            Enrichment::Skip(reason) => return Ok(Err(reason)),
        };
        let unsubscribe_url = unsubscribe_link::link(
            &self.config.unsubscribe_base_url,
            &self.signer.token(&message.campaign_id, &digest.user_id),
        );
        let rendered = self
            .renderer
            .render(&digest, &message.window, &unsubscribe_url)
            .map_err(|e| e.to_string())?;
        let locale = self.renderer.locale_for(digest.locale.as_deref());
        let job = EmailJob {
            campaign_id: message.campaign_id,
            user_id: digest.user_id,
            to: digest.email,
            subject: rendered.subject,
            html: rendered.html,
            text: rendered.text,
            unsubscribe_url: Some(unsubscribe_url),
            include_failed: message.include_failed,
            include_cancelled: message.include_cancelled,
        };
        Ok(Ok((job, locale)))
    }

    /// The users of a batch read together: per window, `enrich_many` (three round trips for
    /// the whole batch); if that fails, each user alone, so that one user the store cannot
    /// answer for fails alone. Records that do not parse or are held are left out (their
    /// `process` says why).
    async fn prefetch(
        &self,
        records: &[SqsMessage],
    ) -> HashMap<String, Result<Enrichment, String>> {
        let mut groups: Vec<(Window, Vec<(String, UserId)>)> = Vec::new();
        for record in records {
            let Ok(message) = parse_body::<UserMessage>(record.body.as_deref()) else {
                continue;
            };
            let Ok(user_id) = UserId::parse(&message.user_id) else {
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
            match groups.iter_mut().find(|(w, _)| *w == message.window) {
                Some((_, users)) => users.push((id, user_id)),
                None => groups.push((message.window, vec![(id, user_id)])),
            }
        }
        let shown = self.config.recent_followers_shown;
        let mut read = HashMap::new();
        for (window, users) in groups {
            let ids: Vec<UserId> = users.iter().map(|(_, u)| u.clone()).collect();
            match self.directory.enrich_many(&ids, &window, shown).await {
                Ok(all) => read.extend(
                    users
                        .into_iter()
                        .map(|(id, _)| id)
                        .zip(all.into_iter().map(Ok)),
                ),
                Err(err) => {
                    tracing::warn!(reason = %err, users = ids.len(), "batch read failed; reading its users one by one");
                    for (id, user_id) in users {
                        let one = self.directory.enrich(&user_id, &window, shown).await;
                        read.insert(id, one.map_err(|e| e.to_string()));
                    }
                }
            }
        }
        read
    }

    async fn process(
        &self,
        record: &SqsMessage,
        prefetched: Option<Result<Enrichment, String>>,
    ) -> Result<Outcome, String> {
        let message: UserMessage = parse_body(record.body.as_deref())?;
        match self.campaigns.hold(message.campaign_id.as_str()).await {
            Some(Hold::Cancelled(_)) => return Ok(Outcome::Skipped(SkipReason::CampaignCancelled)),
            // Handed back untouched: rendered after the resume.
            Some(Hold::Paused(_)) => return Ok(Outcome::Held),
            None => {}
        }
        let composed = match prefetched {
            Some(enrichment) => self
                .render_job(message, enrichment?)
                .map(|r| r.map(|(job, _)| job)),
            // Not in the batch read (its campaign was held then): read alone.
            None => self.compose(message).await,
        };
        match composed? {
            Ok(job) => serde_json::to_string(&job)
                .map(Outcome::Job)
                .map_err(|e| format!("cannot serialise job: {e}")),
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

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates> crate::runtime::Stage
    for CreateEmails<D, Q, S>
{
    type Event = SqsEvent;
    type Response = SqsBatchResponse;
    type Summary = Summary;
    type Error = std::convert::Infallible;

    async fn invoke(
        &self,
        event: SqsEvent,
        _: &crate::runtime::Invocation,
    ) -> Result<(SqsBatchResponse, Summary), Self::Error> {
        Ok(self.handle(event).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CreateEmailsConfig;
    use crate::domain::campaign::Campaign;
    use crate::ports::memory::directory::{MemoryDirectory, User};
    use crate::ports::memory::{MemoryCampaigns, MemoryOutbox};
    use aws_lambda_events::event::sqs::SqsMessage;

    const OID: &str = "oid:65a1f0c2e4b0a1b2c3d4e5f6";

    fn campaign() -> Campaign {
        Campaign::from_id("weekly-2026-W47", None).unwrap()
    }

    /// A directory with one user of every kind; `in_window` is a moment inside the window.
    fn directory() -> MemoryDirectory {
        let at = campaign().window.since + time::Duration::hours(1);
        let later = at + time::Duration::hours(1);
        let before = campaign().window.since - time::Duration::hours(1);
        let user = |subscribed, suppressed, email: Option<&str>, invalid| User {
            email: email.map(str::to_owned),
            name: Some("Someone".into()),
            locale: None,
            subscribed,
            suppressed,
            invalid,
        };
        MemoryDirectory::default()
            .user("alice", User::named("Alice", "alice@example.com"))
            .user(OID, User::named("Olga", "olga@example.com"))
            .user("bob", User::named("Bob", "bob@example.com"))
            .user("nameless", user(true, false, Some("n@example.com"), false))
            .user("quit", user(false, false, Some("q@example.com"), false))
            .user("bounced", user(true, true, Some("b@example.com"), false))
            .user("mute", user(true, false, None, false))
            .user("odd", user(true, false, Some("o@example.com"), true))
            .user("lonely", User::named("Lonely", "l@example.com"))
            // Alice: Bob twice (counted once), a follower with no name, one before the window.
            .follow("bob", "alice", at)
            .follow("bob", "alice", later)
            .follow("ghost", "alice", at)
            .follow("lonely", "alice", before)
            .follow("alice", OID, at)
            .follow("lonely", "lonely", before)
            .follow("bob", "quit", at)
            .follow("bob", "bounced", at)
            .follow("bob", "mute", at)
            .follow("bob", "odd", at)
    }

    type Stage = CreateEmails<MemoryDirectory, MemoryOutbox, MemoryCampaigns>;

    fn stage(directory: MemoryDirectory) -> Stage {
        let vars = |k: &str| {
            let v = match k {
                "MONGODB_URI" => "mongodb://127.0.0.1:1",
                "EMAILS_QUEUE_URL" => "http://emails",
                "CAMPAIGNS_TABLE_NAME" => "campaigns",
                "UNSUBSCRIBE_SECRET" => "a-secret-long-enough-for-the-signer-0123456789",
                "UNSUBSCRIBE_BASE_URL" => "https://example.com/unsubscribe",
                _ => return None,
            };
            Some(v.to_owned())
        };
        let config = CreateEmailsConfig::from_source(&vars).unwrap();
        let signer = Signer::new(
            "a-secret-long-enough-for-the-signer-0123456789",
            &config.unsubscribe.list,
        )
        .unwrap();
        CreateEmails::new(
            directory,
            MemoryOutbox::default(),
            MemoryCampaigns::default(),
            Renderer::new("en").unwrap(),
            signer,
            config,
        )
    }

    fn record(id: &str, body: &str) -> SqsMessage {
        let mut record = SqsMessage::default();
        record.message_id = Some(format!("m-{id}"));
        record.body = Some(body.to_owned());
        record
    }

    fn message(user: &str) -> SqsMessage {
        let message = UserMessage {
            campaign_id: campaign().id,
            user_id: user.to_owned(),
            window: campaign().window,
            include_failed: false,
            include_cancelled: false,
        };
        record(user, &serde_json::to_string(&message).unwrap())
    }

    fn event(users: &[&str]) -> SqsEvent {
        let mut event = SqsEvent::default();
        event.records = users.iter().map(|u| message(u)).collect();
        event
    }

    fn failed(response: &SqsBatchResponse) -> Vec<String> {
        let mut ids: Vec<String> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        ids.sort();
        ids
    }

    fn jobs(stage: &Stage) -> Vec<EmailJob> {
        let mut jobs: Vec<EmailJob> = stage
            .emails
            .bodies()
            .iter()
            .map(|b| serde_json::from_str(b).unwrap())
            .collect();
        jobs.sort_by(|a, b| a.user_id.cmp(&b.user_id));
        jobs
    }

    #[tokio::test]
    async fn every_user_gets_one_email_or_a_counted_reason_and_bad_records_fail_alone() {
        let stage = stage(directory());
        let mut event = event(&[
            "alice", OID, "quit", "bounced", "mute", "odd", "lonely", "gone",
        ]);
        event.records.push(record("garbage", "not json"));
        event.records.push(record(
            "bad-id",
            &message("alice")
                .body
                .unwrap()
                .replace("alice", "oid:not-hex"),
        ));
        let (response, summary) = stage.handle(event).await;

        assert_eq!(failed(&response), ["m-bad-id", "m-garbage"]);
        assert_eq!(
            (summary.rendered, summary.enqueued, summary.failed),
            (2, 2, 2)
        );
        let skipped: Vec<_> = summary.skipped.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(
            skipped,
            [
                ("invalid_document", 1),
                ("no_address", 1),
                ("no_new_followers", 1),
                ("suppressed", 1),
                ("unsubscribed", 1),
                ("vanished", 1),
            ]
        );
        let jobs = jobs(&stage);
        assert_eq!(jobs.len(), 2);
        let alice = &jobs[0];
        assert_eq!(
            (alice.user_id.as_str(), alice.to.as_str()),
            ("alice", "alice@example.com")
        );
        // Two distinct followers in the window; only the nameable one is named.
        assert_eq!(alice.subject, "You have 2 new followers this week");
        assert!(alice.text.contains("Hi Alice,") && alice.text.contains("  - Bob"));
        assert!(!alice.text.contains("Lonely"), "{}", alice.text);
        let link = alice.unsubscribe_url.as_deref().unwrap();
        assert!(link.starts_with("https://example.com/unsubscribe?token="));
        assert!(alice.text.contains(link) && alice.html.contains("Bob"));
        let olga = &jobs[1];
        assert_eq!(
            (olga.user_id.as_str(), olga.to.as_str()),
            (OID, "olga@example.com")
        );
        assert_eq!(olga.subject, "You have a new follower this week");
    }

    #[tokio::test]
    async fn a_user_the_directory_cannot_read_comes_back_alone() {
        let directory = directory();
        directory.unreachable("alice");
        let stage = stage(directory);
        let (response, summary) = stage.handle(event(&["alice", OID])).await;
        assert_eq!(failed(&response), ["m-alice"]);
        assert_eq!((summary.enqueued, summary.failed), (1, 1));
        assert_eq!(jobs(&stage)[0].user_id, OID);
    }

    #[tokio::test]
    async fn jobs_the_queue_refuses_come_back_and_only_enqueued_ones_count() {
        let stage = stage(directory());
        stage.emails.refuse("olga@example.com");
        let (response, summary) = stage.handle(event(&["alice", OID, "quit"])).await;
        assert_eq!(failed(&response), [format!("m-{OID}")]);
        assert_eq!(
            (summary.rendered, summary.enqueued, summary.failed),
            (2, 1, 1)
        );
        assert_eq!(summary.skipped.get("unsubscribed"), Some(&1));

        // The queue down: every rendered record comes back, skipped ones are acknowledged.
        let stage = self::stage(directory());
        stage
            .emails
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let (response, summary) = stage.handle(event(&["alice", OID, "quit"])).await;
        assert_eq!(
            failed(&response),
            ["m-alice".to_owned(), format!("m-{OID}")]
        );
        assert_eq!((summary.enqueued, summary.failed), (0, 2));
    }

    #[tokio::test]
    async fn a_cancelled_campaign_makes_no_more_emails() {
        let stage = stage(directory());
        stage.campaigns.states.cancel(campaign().id.as_str());
        let (response, summary) = stage.handle(event(&["alice", OID])).await;
        assert!(response.batch_item_failures.is_empty(), "acknowledged");
        assert_eq!(summary.skipped.get("campaign_cancelled"), Some(&2));
        assert!(jobs(&stage).is_empty());
    }

    #[tokio::test]
    async fn a_paused_campaign_hands_its_records_back_unrendered() {
        let stage = stage(directory());
        stage.campaigns.states.pause(campaign().id.as_str());
        let (response, summary) = stage.handle(event(&["alice", OID])).await;
        assert_eq!(
            failed(&response),
            ["m-alice".to_owned(), format!("m-{OID}")]
        );
        assert_eq!((summary.failed, summary.held), (0, 2));
        assert!(jobs(&stage).is_empty());
    }
}

//! SesEvents: what SES reports after a send. A permanent bounce or a complaint suppresses
//! the address in MongoDB (never emailed again), where the email's campaign keeps its
//! recipients (a suppression that can never be written there is logged and counted at once,
//! not retried); a transient bounce is counted only. Every event that says SES took the
//! email (delivery, bounce, complaint, reject: one of them follows every accepted email, so
//! SES's SEND events are not published) turns a record still IN_PROGRESS (its attempt died
//! between SES and the ledger: this closes the exactly-once crash window whenever the event
//! arrives before the lease ends) or DEAD_LETTERED (SES took it, its answer was lost) into
//! SENT. Every event also notes its
//! engagement on the send record for the campaign analytics. All of it is idempotent and
//! order-free: events may arrive twice and in any order. A bad record fails alone (partial
//! batch response) and reaches the DLQ.

use super::summary::summary;
use crate::config::SesEventsConfig;
use crate::domain::ledger::{epoch_ms, Engagement, SendKey, SendStatus};
use crate::domain::ses_event::{self, EventKind, SesEvent};
#[cfg(test)]
use crate::ports::SubscriberError;
use crate::ports::{Change, SendRecordNotes, SubscriberStore, SuppressionReason};
use crate::runtime::batch::{batch_response, each_record};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use std::time::SystemTime;
use tracing::Instrument;

summary! {
    /// Per-batch counts, logged and returned to callers such as the local runner.
    pub struct Summary {
        /// Events that found their record IN_PROGRESS and made it SENT.
        pub reconciled: usize,
        pub delivered: usize,
        pub bounced: usize,
        pub soft_bounced: usize,
        pub complained: usize,
        pub opened: usize,
        pub clicked: usize,
        /// Addresses newly suppressed (not counting repeats of an earlier suppression).
        pub suppressed: usize,
        /// Suppressions that can never be written (the campaign's pinned definition version
        /// cannot be read or is refused, or the person's document cannot take it): each
        /// logged as an error with why, the event noted on the send record all the same.
        pub unsuppressible: usize,
        /// Events about emails without mailflow tags, or of types mailflow has no use for.
        pub ignored: usize,
        /// Records returned for retry (bad body, or MongoDB / DynamoDB unavailable).
        pub failed: usize,
    }
}

/// What handling one event did.
#[derive(Default)]
struct Effect {
    counted: Option<Engagement>,
    reconciled: bool,
    suppressed: Suppressed,
    ignored: bool,
}

/// What a permanent bounce or a complaint did to the person.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Suppressed {
    /// Nothing (another event, a repeat, a user no longer there).
    #[default]
    No,
    Newly,
    /// Never can be: decided at the first attempt, not left to redelivery.
    Never,
}

/// Generic over its ports: on Lambda the DynamoDB send records and MongoDB's users; in unit
/// tests their in-memory stand-ins.
pub struct SesEvents<R, S> {
    records: R,
    subscribers: S,
    config: SesEventsConfig,
}

impl<R: SendRecordNotes, S: SubscriberStore> SesEvents<R, S> {
    pub fn new(records: R, subscribers: S, config: SesEventsConfig) -> Self {
        Self {
            records,
            subscribers,
            config,
        }
    }

    pub async fn handle(&self, event: SqsEvent) -> (SqsBatchResponse, Summary) {
        let started = std::time::Instant::now();
        let results = each_record(
            event.records,
            self.config.record_concurrency,
            |record| async move {
                let body = record.body.as_deref().unwrap_or_default();
                match ses_event::parse(body, epoch_ms(SystemTime::now())) {
                    Ok(event) => self.apply(&event).await,
                    Err(reason) => Err(reason.to_string()),
                }
            },
        )
        .await;
        let mut summary = Summary::default();
        let mut failed = Vec::new();
        for (id, result) in results {
            match result {
                Ok(effect) => {
                    summary.reconciled += usize::from(effect.reconciled);
                    summary.suppressed += usize::from(effect.suppressed == Suppressed::Newly);
                    summary.unsuppressible += usize::from(effect.suppressed == Suppressed::Never);
                    summary.ignored += usize::from(effect.ignored);
                    match effect.counted {
                        Some(Engagement::Delivered) => summary.delivered += 1,
                        Some(Engagement::Bounced) => summary.bounced += 1,
                        Some(Engagement::SoftBounced) => summary.soft_bounced += 1,
                        Some(Engagement::Complained) => summary.complained += 1,
                        Some(Engagement::Opened | Engagement::HumanOpened) => summary.opened += 1,
                        Some(Engagement::Clicked | Engagement::HumanClicked) => {
                            summary.clicked += 1
                        }
                        Some(Engagement::Unsubscribed) | None => {}
                    }
                }
                Err(reason) => {
                    tracing::warn!(message_id = %id, %reason, "SES event failed; it will be retried, then kept in the DLQ");
                    failed.push(id);
                }
            }
        }
        summary.failed = failed.len();
        tracing::info!(
            reconciled = summary.reconciled,
            delivered = summary.delivered,
            bounced = summary.bounced,
            soft_bounced = summary.soft_bounced,
            complained = summary.complained,
            opened = summary.opened,
            clicked = summary.clicked,
            suppressed = summary.suppressed,
            unsuppressible = summary.unsuppressible,
            ignored = summary.ignored,
            failed = summary.failed,
            duration_ms = started.elapsed().as_millis() as u64,
            "SesEvents batch done"
        );
        (batch_response(failed), summary)
    }

    async fn apply(&self, event: &SesEvent) -> Result<Effect, String> {
        let Some(key) = &event.key else {
            tracing::debug!(ses_message_id = %event.ses_message_id, "event without mailflow tags");
            return Ok(Effect {
                ignored: true,
                ..Default::default()
            });
        };
        let span =
            tracing::info_span!("ses_event", campaign = %key.campaign_id(), user = %key.user_id);
        self.act(key, event).instrument(span).await
    }

    async fn act(&self, key: &SendKey, event: &SesEvent) -> Result<Effect, String> {
        let ledger = |e: crate::domain::ledger::LedgerError| e.to_string();
        let mut effect = Effect::default();
        match &event.kind {
            EventKind::Delivery => {
                let status = self.note(key, Engagement::Delivered, event).await?;
                effect.counted = Some(Engagement::Delivered);
                effect.reconciled = self.reconcile(key, event, status).await?;
            }
            EventKind::Bounce { permanent, detail } => {
                // Transient bounces are counted, never suppressed: the address may work later.
                let what = if *permanent {
                    effect.suppressed = self
                        .suppress(key, SuppressionReason::Bounce, detail, event)
                        .await?;
                    Engagement::Bounced
                } else {
                    Engagement::SoftBounced
                };
                let status = self.note(key, what, event).await?;
                effect.counted = Some(what);
                effect.reconciled = self.reconcile(key, event, status).await?;
            }
            EventKind::Complaint { detail } => {
                effect.suppressed = self
                    .suppress(key, SuppressionReason::Complaint, detail, event)
                    .await?;
                effect.counted = Some(Engagement::Complained);
                let status = self.note(key, Engagement::Complained, event).await?;
                effect.reconciled = self.reconcile(key, event, status).await?;
            }
            EventKind::Reject => {
                // Nothing to note; a read first, as a write would cost five times as much
                // and the write that follows is conditional anyway.
                let status = self.records.status_of(key).await.map_err(ledger)?;
                effect.reconciled = self.reconcile(key, event, status).await?;
            }
            // A person's open or click is noted as such too (experiments decide on it).
            EventKind::Open => {
                let what = match event.by_person {
                    true => Engagement::HumanOpened,
                    false => Engagement::Opened,
                };
                self.note(key, what, event).await?;
                effect.counted = Some(what);
            }
            EventKind::Click => {
                let what = match event.by_person {
                    true => Engagement::HumanClicked,
                    false => Engagement::Clicked,
                };
                self.note(key, what, event).await?;
                effect.counted = Some(what);
            }
            EventKind::Other(kind) => {
                tracing::debug!(kind, "SES event mailflow does not act on");
                effect.ignored = true;
            }
        }
        Ok(effect)
    }

    async fn note(
        &self,
        key: &SendKey,
        what: Engagement,
        event: &SesEvent,
    ) -> Result<Option<SendStatus>, String> {
        let status = self
            .records
            .note(key, what, event.at_ms)
            .await
            .map_err(|e| e.to_string())?;
        if status.is_none() {
            tracing::info!(
                what = what.as_str(),
                "no send record for this event (expired, or sent outside mailflow's ledger)"
            );
        }
        Ok(status)
    }

    /// SES took the email (it delivered, bounced, drew a complaint or was rejected): a record
    /// its attempt left unfinished becomes SENT, so no retry sends it again.
    async fn reconcile(
        &self,
        key: &SendKey,
        event: &SesEvent,
        status: Option<SendStatus>,
    ) -> Result<bool, String> {
        if !matches!(
            status,
            Some(SendStatus::InProgress | SendStatus::DeadLettered | SendStatus::Skipped)
        ) {
            return Ok(false);
        }
        let done = self
            .records
            .reconcile_sent(key, &event.ses_message_id, event.at_ms)
            .await
            .map_err(|e| e.to_string())?;
        if done {
            tracing::warn!(
                ses_message_id = %event.ses_message_id,
                "record was IN_PROGRESS after SES sent the email: marked SENT from the SES event"
            );
        }
        Ok(done)
    }

    async fn suppress(
        &self,
        key: &SendKey,
        reason: SuppressionReason,
        detail: &str,
        event: &SesEvent,
    ) -> Result<Suppressed, String> {
        let change = self
            .subscribers
            .suppress(
                key,
                reason,
                detail,
                i64::try_from(event.at_ms).unwrap_or(i64::MAX),
            )
            .await;
        let change = match change {
            Ok(change) => change,
            // The same event would fail the same way: decided now, loudly.
            Err(err) if err.is_lasting() => {
                tracing::error!(reason = reason.as_str(), why = %err, "the address cannot be suppressed; the event is noted on the send record only");
                return Ok(Suppressed::Never);
            }
            Err(err) => return Err(err.to_string()),
        };
        Ok(match change {
            Change::Made => {
                tracing::info!(reason = reason.as_str(), detail, "address suppressed");
                Suppressed::Newly
            }
            Change::AlreadyDone => Suppressed::No,
            Change::NoSuchUser => {
                tracing::info!("event for a user who no longer exists");
                Suppressed::No
            }
        })
    }
}

crate::runtime::serve::stage! {
    impl<R: SendRecordNotes, S: SubscriberStore> for SesEvents<R, S> {
        SqsEvent => Result<(SqsBatchResponse, Summary), std::convert::Infallible>,
        |stage, event, _invocation| Ok(stage.handle(event).await)
    }
}

/// What each SES event does to the send record and the subscriber, over in-memory ports.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::memory::{MemoryRecords, MemorySubscribers};
    use aws_lambda_events::event::sqs::SqsMessage;
    use serde_json::json;

    const USER: &str = "oid:65a1f0c2e4b0a1b2c3d4e5f6";
    const CAMPAIGN: &str = "weekly-2026-W47";

    fn config() -> SesEventsConfig {
        SesEventsConfig::from_source(&|k: &str| match k {
            "MONGODB_URI" => Some("mongodb://127.0.0.1:1/".to_owned()),
            "SENDS_TABLE_NAME" => Some("sends".to_owned()),
            "CAMPAIGNS_TABLE_NAME" => Some("campaigns".to_owned()),
            _ => None,
        })
        .unwrap()
    }

    /// An SES event as the EventBridge rule delivers it, tagged as SendEmail tags emails.
    fn body(kind: &str, detail_type: &str, extra: serde_json::Value) -> String {
        let tag = |v: &str| json!([crate::domain::ses_tags::encode(v).unwrap()]);
        let mut detail = json!({
            "eventType": kind,
            "mail": {"messageId": "ses-1", "timestamp": "2026-11-23T09:00:00Z",
                     "tags": {"campaignId": tag(CAMPAIGN), "userId": tag(USER)}},
        });
        detail
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"version": "0", "source": "aws.ses", "detail-type": detail_type,
               "time": "2026-11-23T09:00:01Z", "detail": detail})
        .to_string()
    }

    async fn handle(
        stage: &SesEvents<MemoryRecords, MemorySubscribers>,
        bodies: &[String],
    ) -> (Vec<String>, Summary) {
        let mut event = SqsEvent::default();
        event.records = bodies
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut r = SqsMessage::default();
                r.message_id = Some(format!("m{i}"));
                r.body = Some(b.clone());
                r
            })
            .collect();
        let (response, summary) = stage.handle(event).await;
        let failed = response
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        (failed, summary)
    }

    fn stage(status: SendStatus) -> SesEvents<MemoryRecords, MemorySubscribers> {
        SesEvents::new(
            MemoryRecords::with(USER, CAMPAIGN, status),
            MemorySubscribers::with(&[USER]),
            config(),
        )
    }

    /// SEND is not published: each event that follows an accepted email reconciles instead.
    #[tokio::test]
    async fn every_event_after_ses_took_the_email_reconciles_a_record_left_unfinished() {
        let took = [
            body("Delivery", "Email Delivered", json!({"delivery": {}})),
            body(
                "Bounce",
                "Email Bounced",
                json!({"bounce": {"bounceType": "Transient", "bounceSubType": "General"}}),
            ),
            body(
                "Complaint",
                "Email Complaint Received",
                json!({"complaint": {}}),
            ),
            body("Reject", "Email Rejected", json!({"reject": {}})),
        ];
        for event in &took {
            for before in [SendStatus::InProgress, SendStatus::DeadLettered] {
                let stage = stage(before);
                let (failed, summary) = handle(&stage, &[event.clone(), event.clone()]).await;
                assert!(failed.is_empty());
                assert_eq!(
                    summary.reconciled, 1,
                    "{before:?} {event}: once, however often SES says it"
                );
                assert_eq!(
                    stage.records.get(USER, CAMPAIGN).unwrap().0,
                    SendStatus::Sent
                );
            }
            for before in [SendStatus::Sent, SendStatus::Failed] {
                let stage = stage(before);
                let (_, summary) = handle(&stage, std::slice::from_ref(event)).await;
                assert_eq!(summary.reconciled, 0);
                assert_eq!(stage.records.get(USER, CAMPAIGN).unwrap().0, before);
            }
        }
        // A SEND event still on the queue from before is acknowledged and changes nothing.
        let stage = stage(SendStatus::InProgress);
        let send = body("Send", "Email Sent", json!({"send": {}}));
        let (failed, summary) = handle(&stage, &[send]).await;
        assert!(failed.is_empty());
        assert_eq!((summary.reconciled, summary.ignored), (0, 1));
    }

    #[tokio::test]
    async fn bounces_and_complaints_suppress_once_soft_bounces_only_count() {
        let hard = body(
            "Bounce",
            "Email Bounced",
            json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General"}}),
        );
        let soft = body(
            "Bounce",
            "Email Bounced",
            json!({"bounce": {"bounceType": "Transient", "bounceSubType": "MailboxFull"}}),
        );
        let complaint = body(
            "Complaint",
            "Email Complaint Received",
            json!({"complaint": {"complaintFeedbackType": "abuse"}}),
        );

        let stage = stage(SendStatus::Sent);
        let (_, summary) = handle(&stage, &[soft]).await;
        assert_eq!((summary.soft_bounced, summary.suppressed), (1, 0));
        assert_eq!(stage.subscribers.get(USER), Some((true, None)));

        let (_, summary) = handle(&stage, &[hard.clone(), hard, complaint]).await;
        assert_eq!(
            summary.suppressed, 1,
            "the first reason is kept: {summary:?}"
        );
        assert_eq!((summary.bounced, summary.complained), (2, 1));
        assert_eq!(
            stage.subscribers.get(USER),
            Some((true, Some(SuppressionReason::Bounce)))
        );
        let noted = stage.records.get(USER, CAMPAIGN).unwrap().1;
        assert!(noted.contains(&Engagement::Bounced) && noted.contains(&Engagement::SoftBounced));
    }

    #[tokio::test]
    async fn a_suppression_that_can_never_be_written_is_decided_at_once_and_noted() {
        let hard = body(
            "Bounce",
            "Email Bounced",
            json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General"}}),
        );
        let stage = stage(SendStatus::Sent);
        *crate::runtime::lock(&stage.subscribers.failing) = Some(SubscriberError::Lasting(
            "campaign weekly-2026-W47: its recipients cannot be found: definition orders version 3 cannot be read".into(),
        ));
        let (failed, summary) = handle(&stage, std::slice::from_ref(&hard)).await;
        assert!(failed.is_empty(), "not left to redelivery: {failed:?}");
        assert_eq!(
            (summary.unsuppressible, summary.suppressed, summary.bounced),
            (1, 0, 1)
        );
        let noted = stage.records.get(USER, CAMPAIGN).unwrap().1;
        assert!(noted.contains(&Engagement::Bounced));
        // A store that does not answer is tried again.
        *crate::runtime::lock(&stage.subscribers.failing) = Some(SubscriberError::Store(
            crate::ports::StoreError::mongo("no primary"),
        ));
        let (failed, summary) = handle(&stage, &[hard]).await;
        assert_eq!(failed, ["m0"]);
        assert_eq!((summary.failed, summary.unsuppressible), (1, 0));
    }

    #[tokio::test]
    async fn untagged_events_are_ignored_and_a_malformed_one_fails_alone() {
        let stage = stage(SendStatus::Sent);
        let untagged = json!({"version": "0", "source": "aws.ses", "detail-type": "Email Sent",
            "time": "2026-11-23T09:00:01Z",
            "detail": {"eventType": "Send", "mail": {"messageId": "x", "tags": {}}, "send": {}}})
        .to_string();
        let open = body("Open", "Email Opened", json!({"open": {}}));
        let (failed, summary) = handle(&stage, &["{\"detail\":".to_owned(), untagged, open]).await;
        assert_eq!(failed, ["m0"]);
        assert_eq!((summary.ignored, summary.opened, summary.failed), (1, 1, 1));
    }
}

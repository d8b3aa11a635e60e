//! SesEvents: what SES reports after a send. A permanent bounce or a complaint suppresses
//! the address in MongoDB (never emailed again); a transient bounce is counted only. Send and
//! delivery events turn a record still IN_PROGRESS into SENT (its attempt died between SES
//! and the ledger: this closes the exactly-once crash window whenever the event arrives
//! before the lease ends). Every event also notes its engagement on the send record for the
//! campaign analytics. All of it is idempotent and order-free: events may arrive twice and
//! in any order. A bad record fails alone (partial batch response) and reaches the DLQ.

use super::{batch_response, each_record};
use crate::adapters::dynamo::SendRecords;
use crate::adapters::subscribers::{Change, Subscribers, SuppressionReason};
use crate::config::SesEventsConfig;
use crate::ledger::{epoch_ms, Engagement, SendStatus};
use crate::ses_events::{self, EventKind, Recipient, SesEvent};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use std::time::SystemTime;
use tracing::Instrument;

/// Per-batch counts, logged and returned to callers such as the local runner.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Send and delivery events that found their record IN_PROGRESS and made it SENT.
    pub reconciled: usize,
    pub delivered: usize,
    pub bounced: usize,
    pub soft_bounced: usize,
    pub complained: usize,
    pub opened: usize,
    pub clicked: usize,
    /// Addresses newly suppressed (not counting repeats of an earlier suppression).
    pub suppressed: usize,
    /// Events about emails without mailflow tags, or of types mailflow has no use for.
    pub ignored: usize,
    /// Records returned for retry (bad body, or MongoDB / DynamoDB unavailable).
    pub failed: usize,
}

impl Summary {
    pub fn absorb(&mut self, o: &Summary) {
        self.reconciled += o.reconciled;
        self.delivered += o.delivered;
        self.bounced += o.bounced;
        self.soft_bounced += o.soft_bounced;
        self.complained += o.complained;
        self.opened += o.opened;
        self.clicked += o.clicked;
        self.suppressed += o.suppressed;
        self.ignored += o.ignored;
        self.failed += o.failed;
    }
}

/// What handling one event did.
#[derive(Default)]
struct Effect {
    counted: Option<Engagement>,
    reconciled: bool,
    suppressed: bool,
    ignored: bool,
}

pub struct SesEvents {
    records: SendRecords,
    subscribers: Subscribers,
    config: SesEventsConfig,
}

impl SesEvents {
    pub fn new(records: SendRecords, subscribers: Subscribers, config: SesEventsConfig) -> Self {
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
                match ses_events::parse(body, epoch_ms(SystemTime::now())) {
                    Ok(event) => self.apply(&event).await,
                    Err(reason) => Err(reason),
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
                    summary.suppressed += usize::from(effect.suppressed);
                    summary.ignored += usize::from(effect.ignored);
                    match effect.counted {
                        Some(Engagement::Delivered) => summary.delivered += 1,
                        Some(Engagement::Bounced) => summary.bounced += 1,
                        Some(Engagement::SoftBounced) => summary.soft_bounced += 1,
                        Some(Engagement::Complained) => summary.complained += 1,
                        Some(Engagement::Opened) => summary.opened += 1,
                        Some(Engagement::Clicked) => summary.clicked += 1,
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
            ignored = summary.ignored,
            failed = summary.failed,
            duration_ms = started.elapsed().as_millis() as u64,
            "SesEvents batch done"
        );
        (batch_response(failed), summary)
    }

    async fn apply(&self, event: &SesEvent) -> Result<Effect, String> {
        let Some(recipient) = &event.recipient else {
            tracing::debug!(ses_message_id = %event.ses_message_id, "event without mailflow tags");
            return Ok(Effect {
                ignored: true,
                ..Default::default()
            });
        };
        let span = tracing::info_span!("ses_event", campaign = %recipient.campaign_id, user = %recipient.user_id);
        self.act(recipient, event).instrument(span).await
    }

    async fn act(&self, recipient: &Recipient, event: &SesEvent) -> Result<Effect, String> {
        let ledger = |e: crate::adapters::dynamo::LedgerError| e.to_string();
        let mut effect = Effect::default();
        match &event.kind {
            EventKind::Send => {
                // A read first: SEND comes for every email, and a write would cost 5 times
                // a read; the write that follows is conditional anyway.
                let status = self
                    .records
                    .status_of(&recipient.user_id, recipient.campaign_id.as_str())
                    .await
                    .map_err(ledger)?;
                if status == Some(SendStatus::InProgress) {
                    effect.reconciled = self.reconcile(recipient, event).await?;
                }
            }
            EventKind::Delivery => {
                let status = self.note(recipient, Engagement::Delivered, event).await?;
                effect.counted = Some(Engagement::Delivered);
                if status == Some(SendStatus::InProgress) {
                    effect.reconciled = self.reconcile(recipient, event).await?;
                }
            }
            EventKind::Bounce { permanent, detail } => {
                // Transient bounces are counted, never suppressed: the address may work later.
                let what = if *permanent {
                    effect.suppressed = self
                        .suppress(recipient, SuppressionReason::Bounce, detail, event)
                        .await?;
                    Engagement::Bounced
                } else {
                    Engagement::SoftBounced
                };
                self.note(recipient, what, event).await?;
                effect.counted = Some(what);
            }
            EventKind::Complaint { detail } => {
                effect.suppressed = self
                    .suppress(recipient, SuppressionReason::Complaint, detail, event)
                    .await?;
                effect.counted = Some(Engagement::Complained);
                self.note(recipient, Engagement::Complained, event).await?;
            }
            EventKind::Open => {
                self.note(recipient, Engagement::Opened, event).await?;
                effect.counted = Some(Engagement::Opened);
            }
            EventKind::Click => {
                self.note(recipient, Engagement::Clicked, event).await?;
                effect.counted = Some(Engagement::Clicked);
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
        recipient: &Recipient,
        what: Engagement,
        event: &SesEvent,
    ) -> Result<Option<SendStatus>, String> {
        let status = self
            .records
            .note(
                &recipient.user_id,
                recipient.campaign_id.as_str(),
                what,
                event.at_ms,
            )
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

    async fn reconcile(&self, recipient: &Recipient, event: &SesEvent) -> Result<bool, String> {
        let done = self
            .records
            .reconcile_sent(
                &recipient.user_id,
                recipient.campaign_id.as_str(),
                &event.ses_message_id,
                event.at_ms,
            )
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
        recipient: &Recipient,
        reason: SuppressionReason,
        detail: &str,
        event: &SesEvent,
    ) -> Result<bool, String> {
        let change = self
            .subscribers
            .suppress(
                &recipient.user_id,
                reason,
                detail,
                recipient.campaign_id.as_str(),
                i64::try_from(event.at_ms).unwrap_or(i64::MAX),
            )
            .await
            .map_err(|e| format!("MongoDB: {e}"))?;
        match change {
            Change::Made => tracing::info!(reason = reason.as_str(), detail, "address suppressed"),
            Change::AlreadyDone => {}
            Change::NoSuchUser => tracing::info!("event for a user who no longer exists"),
        }
        Ok(change == Change::Made)
    }
}

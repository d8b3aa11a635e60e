//! CreateEmails: for each user message, enrich from MongoDB, render, and put the email job on
//! the emails queue. Records are processed concurrently (bounded); jobs go out in
//! SendMessageBatch calls; every record that did not make it is reported for retry.

use super::{batch_response, each_record};
use crate::adapters::sqs::{batches, SqsQueue};
use crate::config::CreateEmailsConfig;
use crate::digest::{self, Enrichment, Renderer, SkipReason};
use crate::messages::{parse_body, EmailJob, UserMessage};
use crate::ports::{OutgoingQueue, QueueError};
use crate::unsubscribe::{self, Signer};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use futures::stream::{self, StreamExt};
use mongodb::Database;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub rendered: usize,
    pub enqueued: usize,
    pub skipped: BTreeMap<&'static str, usize>,
    pub failed: usize,
}

impl Summary {
    /// Adds another batch's counts (for runners that total a campaign).
    pub fn absorb(&mut self, other: &Summary) {
        self.rendered += other.rendered;
        self.enqueued += other.enqueued;
        self.failed += other.failed;
        for (reason, n) in &other.skipped {
            *self.skipped.entry(reason).or_default() += n;
        }
    }
}

enum Outcome {
    Job(String),
    Skipped(SkipReason),
}

/// Generic over the emails queue (SQS on Lambda); users are read from MongoDB by `digest`.
pub struct CreateEmails<Q = SqsQueue> {
    db: Database,
    emails: Q,
    renderer: Renderer,
    signer: Signer,
    config: CreateEmailsConfig,
}

impl<Q: OutgoingQueue> CreateEmails<Q> {
    /// `emails` is the queue `config.emails_queue_url` names.
    pub fn new(
        db: Database,
        emails: Q,
        renderer: Renderer,
        signer: Signer,
        config: CreateEmailsConfig,
    ) -> Self {
        Self {
            db,
            emails,
            renderer,
            signer,
            config,
        }
    }

    pub async fn prepare(&self) -> mongodb::error::Result<()> {
        digest::ensure_indexes(&self.db).await
    }

    /// The email one user gets in one campaign (or why they get none): read afresh from
    /// MongoDB, rendered in their locale, with their unsubscribe link. `mailctl preview`
    /// calls this too, so it shows exactly what is sent.
    pub async fn compose(
        &self,
        message: UserMessage,
    ) -> Result<Result<EmailJob, SkipReason>, String> {
        let user_id = crate::user_id::UserId::parse(&message.user_id)?;
        let enrichment = digest::enrich(
            &self.db,
            &user_id,
            &message.window,
            self.config.recent_followers_shown,
        )
        .await
        .map_err(|e| format!("MongoDB: {e}"))?;
        let digest = match enrichment {
            Enrichment::Ready(d) => d,
            Enrichment::Skip(reason) => return Ok(Err(reason)),
        };
        let unsubscribe_url = unsubscribe::link(
            &self.config.unsubscribe_base_url,
            &self.signer.token(&message.campaign_id, &digest.user_id),
        );
        let rendered = self
            .renderer
            .render(&digest, &message.window, &unsubscribe_url)
            .map_err(|e| e.to_string())?;
        Ok(Ok(EmailJob {
            campaign_id: message.campaign_id,
            user_id: digest.user_id,
            to: digest.email,
            subject: rendered.subject,
            html: rendered.html,
            text: rendered.text,
            unsubscribe_url: Some(unsubscribe_url),
            include_failed: message.include_failed,
        }))
    }

    async fn process(&self, body: Option<&str>) -> Result<Outcome, String> {
        let message: UserMessage = parse_body(body)?;
        match self.compose(message).await? {
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
        let outcomes = each_record(
            event.records,
            self.config.record_concurrency,
            |record| async move { self.process(record.body.as_deref()).await },
        )
        .await;

        let mut jobs: Vec<(String, String)> = Vec::new();
        for (id, outcome) in outcomes {
            match outcome {
                Ok(Outcome::Job(body)) => jobs.push((id, body)),
                Ok(Outcome::Skipped(reason)) => {
                    *summary.skipped.entry(reason.as_str()).or_default() += 1
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
        summary.failed = failed.len();
        tracing::info!(
            rendered = summary.rendered,
            enqueued = summary.enqueued,
            skipped = ?summary.skipped,
            failed = summary.failed,
            duration_ms = started.elapsed().as_millis() as u64,
            "CreateEmails batch done"
        );
        (batch_response(failed), summary)
    }
}

//! The script of disruptions one chaos run plays while the campaign drains, each at a point of
//! its progress: MongoDB stopped and restarted, the AWS endpoint unreachable, the operator's
//! pause and resume, then a manual resend.

use super::faults::ChaosMailer;
use super::mongo::MongoServer;
use super::proxy::FaultProxy;
use super::runs::{invoke_async, RunOutcome};
use anyhow::Result;
use mailflow::adapters::event_sources::StackSending;
use mailflow::domain::campaign_state::StateChange;
use mailflow_local::pipeline::{lock, LocalPipeline};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long the chaos run's pause holds the campaign: longer than its stack's visibility
/// timeouts, so that a message received while paused would come back and be counted.
pub(super) const PAUSE_HELD: Duration = Duration::from_secs(15);

/// What the script did, read by the report when the run is over.
#[derive(Default)]
pub(super) struct Played {
    pub mongo_restarts: AtomicUsize,
    pub aws_outages: AtomicUsize,
    /// Open connections the AWS outage cut (0 would mean it reached no client).
    pub aws_connections_cut: AtomicUsize,
    /// Emails recorded SENT between the pause taking hold and the resume: must be 0.
    pub sent_while_paused: AtomicUsize,
    /// What the script is doing or waiting for: a run that stalls says where.
    pub step: std::sync::Mutex<&'static str>,
}

impl Played {
    fn at(&self, step: &'static str) {
        *lock(&self.step) = step;
    }
}

/// What the script acts on.
pub(super) struct Script {
    pub pipeline: Arc<LocalPipeline<ChaosMailer>>,
    pub mongo: Arc<tokio::sync::Mutex<MongoServer>>,
    pub proxy: Arc<FaultProxy>,
    /// The operator's own calls reach AWS directly, not through the functions' faults.
    pub operator: StackSending,
    pub campaign: String,
    pub audience: usize,
    pub deliverable: usize,
    pub outage: Duration,
    /// A local-time campaign's local time: the resend asks for it too.
    pub local_time: Option<&'static str>,
}

/// Waits until `reached()` holds.
async fn until(reached: impl Fn() -> bool) {
    while !reached() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn change(reason: &str) -> StateChange {
    StateChange {
        at_ms: mailflow::domain::ledger::epoch_ms(std::time::SystemTime::now()),
        by: "chaos".into(),
        reason: reason.into(),
    }
}

impl Script {
    /// Plays the script; ends with the manual resend's outcome.
    pub(super) async fn play(self, played: Arc<Played>) -> Result<RunOutcome> {
        let totals = self.pipeline.totals.clone();
        let enqueued = || lock(&totals).create_emails.enqueued;
        let sent = || lock(&totals).send_email.sent;
        let (audience, wanted) = (self.audience, self.deliverable);
        played.at("waiting for 40% of the audience enqueued, to stop MongoDB");
        until(|| enqueued() * 10 >= audience * 4).await;
        played.at("restarting MongoDB");
        tracing::warn!("chaos: stopping MongoDB");
        self.mongo.lock().await.restart(self.outage).await?;
        played.mongo_restarts.fetch_add(1, Ordering::SeqCst);
        tracing::warn!("chaos: MongoDB restarted");
        played.at("waiting for 20% sent, to cut the AWS endpoint");
        until(|| sent() * 10 >= wanted * 2).await;
        played.at("cutting the AWS endpoint");
        tracing::warn!("chaos: AWS endpoint unreachable");
        self.proxy.outage(self.outage).await?;
        played.aws_outages.fetch_add(1, Ordering::SeqCst);
        played
            .aws_connections_cut
            .store(self.proxy.connections_cut(), Ordering::SeqCst);
        tracing::warn!("chaos: AWS endpoint reachable again");
        played.at("waiting for 30% sent, to pause the campaign");
        until(|| sent() * 100 >= wanted * 30).await;
        played.at("pausing the campaign");
        tracing::warn!("chaos: pausing the campaign");
        self.operator
            .pause_campaign(&self.campaign, &change("chaos pause"))
            .await?
            .map_err(|r| anyhow::anyhow!("pause refused: {r:?}"))?;
        // The batches in hand finish within the state cache's lifetime; then nothing.
        tokio::time::sleep(mailflow::stages::CAMPAIGN_STATE_TTL + Duration::from_secs(2)).await;
        let at_pause = sent();
        tokio::time::sleep(PAUSE_HELD).await;
        played
            .sent_while_paused
            .store(sent() - at_pause, Ordering::SeqCst);
        tracing::warn!("chaos: resuming the campaign");
        self.operator
            .resume_campaign(&self.campaign, &change("chaos resume"))
            .await?
            .map_err(|r| anyhow::anyhow!("resume refused: {r:?}"))?;
        played.at("waiting for 35% sent, to start the manual resend");
        until(|| sent() * 100 >= wanted * 35).await;
        played.at("running the manual resend");
        let mut resend = json!({ "campaignId": self.campaign });
        if let Some(at) = self.local_time {
            resend["localTime"] = at.into();
        }
        Ok(invoke_async(self.pipeline, "manual resend", resend, None).await)
    }
}

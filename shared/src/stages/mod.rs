//! One stage per function: the three pipeline stages (GetUsers, CreateEmails, SendEmail),
//! the two that handle what comes back (SES events, unsubscribes) and the reputation guard.
//! Each is a struct built once at init (by `assemble`) and generic over its ports, with a
//! `handle` method that `runtime::serve` (or the local simulator) calls; stages import no
//! adapter.

pub mod create_emails;
pub mod get_users;
pub mod open_content;
pub mod rate_control;
pub mod reputation_guard;
pub mod send_email;
pub mod ses_events;
pub mod summary;
pub mod unsubscribe;

use crate::domain::campaign::{CampaignState, Hold};
use crate::domain::ledger::LedgerError;
use crate::ports::CampaignStates;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a function keeps a campaign's state before it reads it again: a pause or a
/// cancellation reaches the batches a function already holds within this (the event source
/// mappings, disabled by a pause, stop new batches reaching it at all).
pub const CAMPAIGN_STATE_TTL: Duration = Duration::from_secs(5);

type SeenStates = HashMap<String, (Instant, CampaignState)>;

/// The campaigns table as the pipeline's functions read it: at most once per campaign per
/// `CAMPAIGN_STATE_TTL` in one execution environment, however many records ask at once (the
/// first one reads, the others wait for its answer). A read that fails is logged and taken
/// as "running": a pause or a cancellation stops what has not started, and the ledger, not
/// this read, is what keeps every send exactly once.
pub struct CampaignStateCache<S> {
    states: S,
    // Held across the read, so that concurrent records share one read.
    seen: tokio::sync::Mutex<SeenStates>,
}

impl<S: CampaignStates> CampaignStateCache<S> {
    pub fn new(states: S) -> Self {
        Self {
            states,
            seen: tokio::sync::Mutex::default(),
        }
    }

    /// The table itself, for writes.
    pub fn states(&self) -> &S {
        &self.states
    }

    pub async fn hold(&self, campaign_id: &str) -> Option<Hold> {
        match self.state(campaign_id).await {
            Ok(state) => state.hold,
            Err(err) => {
                tracing::warn!(reason = %err, "campaign state not read; going on as running");
                None
            }
        }
    }

    /// The campaign's state and guardrails. SendEmail needs them read (a holdout or a
    /// deadline not known is not applied): when the table does not answer, the last state
    /// read goes on (guardrails are fixed when a campaign starts), and without one the
    /// read's error is the caller's to retry.
    pub async fn state(&self, campaign_id: &str) -> Result<CampaignState, LedgerError> {
        let mut seen = self.seen.lock().await;
        if let Some((at, state)) = seen.get(campaign_id) {
            if at.elapsed() < CAMPAIGN_STATE_TTL {
                return Ok(state.clone());
            }
        }
        match self.states.state(campaign_id).await {
            Ok(state) => {
                seen.insert(campaign_id.to_owned(), (Instant::now(), state.clone()));
                Ok(state)
            }
            Err(err) => match seen.get(campaign_id) {
                Some((_, last)) => {
                    tracing::warn!(reason = %err, "campaign state not read; going on with the last one read");
                    Ok(last.clone())
                }
                None => Err(err),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its reads; answers "running" after a while, as a real read takes time.
    #[derive(Default)]
    struct CountingStates(AtomicUsize);

    impl CampaignStates for CountingStates {
        async fn state(&self, _: &str) -> Result<CampaignState, LedgerError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(CampaignState::default())
        }

        async fn register(
            &self,
            _: &crate::domain::campaign::Campaign,
            _: &crate::domain::guardrails::CampaignGuardrails,
            _: Option<&crate::domain::experiment::Experiment>,
            _: u64,
        ) -> Result<crate::domain::campaign::CampaignRecord, LedgerError> {
            Ok(Default::default())
        }

        async fn record_decision(
            &self,
            _: &crate::domain::campaign::CampaignId,
            decision: &crate::domain::experiment::Decision,
        ) -> Result<crate::domain::experiment::Decision, LedgerError> {
            Ok(decision.clone())
        }

        async fn move_deadline(
            &self,
            _: &crate::domain::campaign::CampaignId,
            _: &crate::domain::guardrails::CampaignGuardrails,
            _: Option<i64>,
            _: u64,
        ) -> Result<(), LedgerError> {
            Ok(())
        }

        async fn record_exclusions(
            &self,
            _: &crate::domain::campaign::CampaignId,
            _: u32,
            _: &crate::domain::topics::ExclusionCounts,
        ) -> Result<(), LedgerError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn records_asking_at_once_share_one_read_per_campaign() {
        let cache = CampaignStateCache::new(CountingStates::default());
        let asks = (0..10).map(|i| {
            let campaign = if i % 2 == 0 { "a" } else { "b" };
            cache.hold(campaign)
        });
        let answers = futures::future::join_all(asks).await;
        assert!(answers.iter().all(Option::is_none));
        assert_eq!(
            cache.states.0.load(Ordering::SeqCst),
            2,
            "one read per campaign"
        );
    }
}

//! One stage per function: the three pipeline stages (GetUsers, CreateEmails, SendEmail),
//! the two that handle what comes back (SES events; unsubscribes and the preference centre,
//! `preferences`), the open-time content (OpenContent), the reputation guard and the send
//! rate's control (RateControl).
//! Each is a struct built once at init (by `assemble`) and generic over its ports, with a
//! `handle` method that `runtime::serve` (or the local simulator) calls; stages import no
//! adapter.

pub mod create_emails;
pub mod get_users;
pub mod open_content;
pub mod preferences;
pub mod rate_control;
pub mod reputation_guard;
pub mod send_email;
pub mod ses_events;
pub mod summary;

use crate::domain::campaign_state::{CampaignState, Hold};
use crate::domain::ledger::LedgerError;
use crate::ports::CampaignStates;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a function keeps a campaign's state before it reads it again: a pause or a
/// cancellation reaches the batches a function already holds within this (the event source
/// mappings, disabled by a pause, stop new batches reaching it at all).
pub const CAMPAIGN_STATE_TTL: Duration = Duration::from_secs(5);

/// The longest a function goes on with the last state it read while the table does not
/// answer: a pause, a cancellation or a moved deadline made since is not known, so past this
/// the state is unknown and the caller's to retry (SendEmail sends nothing on it).
pub const CAMPAIGN_STATE_STALE_AFTER: Duration = Duration::from_secs(5 * 60);

type SeenStates = HashMap<String, (Instant, CampaignState)>;

/// The campaigns table as the pipeline's functions read it: at most once per campaign per
/// `CAMPAIGN_STATE_TTL` in one execution environment, however many records ask at once (the
/// first one reads, the others wait for its answer). A read that fails goes on with the last
/// state read, up to `CAMPAIGN_STATE_STALE_AFTER` old; without one (or past that), `hold`
/// takes the campaign as "running": a pause or a cancellation stops what has not started, and
/// the ledger, not this read, is what keeps every send exactly once.
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
    /// read goes on (guardrails are fixed when a campaign starts) while it is younger than
    /// `CAMPAIGN_STATE_STALE_AFTER`; without one, or past that, the read's error is the
    /// caller's to retry.
    pub async fn state(&self, campaign_id: &str) -> Result<CampaignState, LedgerError> {
        self.state_as_of(campaign_id, Instant::now()).await
    }

    /// `state` with the instant it is asked at (the tests' clock).
    async fn state_as_of(
        &self,
        campaign_id: &str,
        now: Instant,
    ) -> Result<CampaignState, LedgerError> {
        let mut seen = self.seen.lock().await;
        if let Some((at, state)) = seen.get(campaign_id) {
            if now.saturating_duration_since(*at) < CAMPAIGN_STATE_TTL {
                return Ok(state.clone());
            }
        }
        match self.states.state(campaign_id).await {
            Ok(state) => {
                seen.insert(campaign_id.to_owned(), (now, state.clone()));
                Ok(state)
            }
            Err(err) => match seen.get(campaign_id) {
                Some((at, last))
                    if now.saturating_duration_since(*at) < CAMPAIGN_STATE_STALE_AFTER =>
                {
                    tracing::warn!(reason = %err, "campaign state not read; going on with the last one read");
                    Ok(last.clone())
                }
                Some((at, _)) => {
                    let age_s = now.saturating_duration_since(*at).as_secs();
                    tracing::error!(reason = %err, age_s, "campaign state not read, and the last one read is too old to go on with: the campaign's state is unknown");
                    Err(err)
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

    /// Counts its reads; answers "paused" after a while, as a real read takes time, until
    /// it is told to fail.
    #[derive(Default)]
    struct CountingStates(AtomicUsize, std::sync::atomic::AtomicBool);

    impl CampaignStates for CountingStates {
        async fn state(&self, _: &str) -> Result<CampaignState, LedgerError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.1.load(Ordering::SeqCst) {
                return Err(LedgerError {
                    table: "campaigns".into(),
                    operation: "GetItem",
                    detail: "unreachable".into(),
                });
            }
            Ok(CampaignState {
                hold: Some(Hold::Paused(crate::domain::campaign_state::StateChange {
                    at_ms: 1,
                    by: "ops".into(),
                    reason: "test".into(),
                })),
                ..Default::default()
            })
        }

        async fn register(
            &self,
            _: &crate::domain::campaign::Campaign,
            _: &crate::domain::guardrails::CampaignGuardrails,
            _: Option<&crate::domain::experiment::Experiment>,
            _: Option<&crate::domain::definition::pin::PinnedDefinition>,
            _: u64,
        ) -> Result<crate::domain::campaign_state::CampaignRecord, LedgerError> {
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
            _: i64,
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
        assert!(answers.iter().all(Option::is_some));
        assert_eq!(
            cache.states.0.load(Ordering::SeqCst),
            2,
            "one read per campaign"
        );
    }

    #[tokio::test]
    async fn an_unreadable_table_keeps_the_last_state_only_while_it_is_recent() {
        let cache = CampaignStateCache::new(CountingStates::default());
        let read_at = Instant::now();
        let paused = cache.state_as_of("a", read_at).await.unwrap();
        assert!(paused.hold.is_some());
        cache.states.1.store(true, Ordering::SeqCst);
        let soon = read_at + CAMPAIGN_STATE_TTL + Duration::from_secs(1);
        assert_eq!(
            cache.state_as_of("a", soon).await.unwrap().hold,
            paused.hold,
            "a short outage goes on with the last state"
        );
        let late = read_at + CAMPAIGN_STATE_STALE_AFTER;
        assert!(
            cache.state_as_of("a", late).await.is_err(),
            "past the bound the state is unknown: the caller retries"
        );
    }
}

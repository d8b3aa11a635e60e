//! The switch the reputation guard pauses sending with, and why switching can fail.

use crate::domain::campaign_state::StateChange;
use crate::domain::ledger::LedgerError;
use std::future::Future;

/// What the reputation guard pauses: every running campaign, and the consumers of the
/// campaign queues (Lambda's event source mappings).
pub trait SendingSwitch: Send + Sync {
    /// Stops every consumer of the campaign queues; messages stay where they are.
    fn stop_consumers(&self) -> impl Future<Output = Result<usize, ControlError>> + Send;
    /// The campaigns in state RUNNING.
    fn running_campaigns(&self) -> impl Future<Output = Result<Vec<String>, ControlError>> + Send;
    /// Pauses one campaign unless it is no longer running; whether it paused it.
    fn pause(
        &self,
        campaign_id: &str,
        change: &StateChange,
    ) -> impl Future<Output = Result<bool, ControlError>> + Send;
}

/// Switching a campaign's sending failed: the campaigns table or Lambda's event source
/// mappings did not answer, or answered with an error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ControlError(pub String);

impl From<LedgerError> for ControlError {
    fn from(err: LedgerError) -> Self {
        ControlError(err.to_string())
    }
}

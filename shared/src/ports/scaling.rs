//! The SendEmail consumer's concurrency, sized to the send rate.

use super::ControlError;
use futures::future::BoxFuture;

/// The emails queue's event source mapping, whose MaximumConcurrency follows the send rate.
pub trait ConsumerScaling: Send + Sync {
    /// Sets MaximumConcurrency to `environments`; the value it had when it was different.
    fn set_max_concurrency(
        &self,
        environments: u32,
    ) -> BoxFuture<'_, Result<Option<u32>, ControlError>>;
}

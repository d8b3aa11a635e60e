//! The error of the MongoDB-backed ports (subscribers, directory) and the waiting room.

/// A store did not answer, or answered with an error. The text names the store (MongoDB, the
/// waiting table, EventBridge Scheduler), so an operator reading it knows where to look.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

impl StoreError {
    /// An error of MongoDB (the users, follows and subscribers collections).
    pub fn mongo(detail: impl std::fmt::Display) -> Self {
        Self(format!("MongoDB: {detail}"))
    }
}

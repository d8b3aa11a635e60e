//! The error of the MongoDB-backed ports (subscribers, directory) and the waiting room.

/// The subscriber store or the user directory did not answer, or answered with an error.
#[derive(Clone, Debug, thiserror::Error)]
#[error("MongoDB: {0}")]
pub struct StoreError(pub String);

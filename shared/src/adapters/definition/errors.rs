//! A definition's query failed: its own fault, or the store's.

use crate::ports::StoreError;
use mongodb::error::{Error, ErrorKind};

#[derive(Clone, Debug, thiserror::Error)]
pub enum RunError {
    /// MongoDB refused a query of the definition (an unknown stage, an undefined variable,
    /// a type error, `maxTimeMS` exceeded): the same query fails the same way every time, so
    /// the run fails once with this reason.
    #[error("campaign definition {name}: {reason}")]
    Definition { name: String, reason: String },
    /// A query ran over its time limit (`maxTimeMS`): a missing index repeats it, an
    /// overloaded server may not; the caller decides when it has tried enough.
    #[error("campaign definition {name}: {reason}")]
    Slow { name: String, reason: String },
    /// The store did not answer (network, no primary, shutting down): retried.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RunError {
    pub(super) fn definition(name: &str, reason: impl Into<String>) -> Self {
        Self::Definition {
            name: name.to_owned(),
            reason: reason.into(),
        }
    }

    pub fn is_definition(&self) -> bool {
        matches!(self, Self::Definition { .. })
    }
}

/// Server codes that say the store, not the query, failed: a retry may succeed, or the
/// stack's own set-up is at fault (its user's rights), which the query's author cannot fix
/// and a redrive after the fix sends. (MongoDB's retryable-read codes, lock, overload,
/// interruption, sharding and authorisation codes.)
const TRANSIENT_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    13,    // Unauthorized (the functions' MongoDB user lacks a right)
    18,    // AuthenticationFailed
    24,    // LockTimeout
    43,    // CursorNotFound (the cursor was reaped: read again)
    46,    // LockBusy
    63,    // StaleShardVersion
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    112,   // WriteConflict
    133,   // FailedToSatisfyReadPreference
    134,   // ReadConcernMajorityNotAvailableYet
    150,   // StaleEpoch
    175,   // QueryPlanKilled
    189,   // PrimarySteppedDown
    202,   // NetworkInterfaceExceededTimeLimit
    237,   // CursorKilled
    262,   // ExceededTimeLimit (a server's own limit, not maxTimeMS)
    279,   // ClientDisconnect
    9001,  // SocketException
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11601, // Interrupted (killOp, a failover)
    11602, // InterruptedDueToReplStateChange
    13388, // StaleConfig
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
    16500, // request rate too large (Cosmos DB's MongoDB API)
];

const TRANSIENT_LABELS: &[&str] = &[
    "TransientTransactionError",
    "RetryableError",
    "SystemOverloadedError",
    "RetryableWriteError",
];

/// Which of the two a driver error of `query` (`audience`, `data.followers`) is.
pub(super) fn classify(definition: &str, query: &str, err: Error) -> RunError {
    let transient = TRANSIENT_LABELS.iter().any(|l| err.contains_label(l));
    match err.kind.as_ref() {
        ErrorKind::Command(c) if !transient && !TRANSIENT_CODES.contains(&c.code) => {
            let what = match c.code {
                50 => "took longer than its time limit (maxTimeMS): narrow it, or give it an index",
                17276 => "uses a variable that is not defined",
                40324 => "has a stage MongoDB does not know",
                _ => "was refused by MongoDB",
            };
            let message = unquoted(c.message.lines().next().unwrap_or_default());
            let reason = format!(
                "{query} {what} (code {} {}: {message}); fix campaign.toml and push it again",
                c.code, c.code_name
            );
            match c.code {
                50 => RunError::Slow {
                    name: definition.to_owned(),
                    reason,
                },
                _ => RunError::definition(definition, reason),
            }
        }
        // Our own refusals of what the pipeline asked (a value BSON cannot hold).
        ErrorKind::InvalidArgument { message, .. } => {
            RunError::definition(definition, format!("{query}: {message}"))
        }
        ErrorKind::BsonSerialization(e) => {
            RunError::definition(definition, format!("{query}: {e}"))
        }
        _ => RunError::Store(err.into()),
    }
}

/// MongoDB's message with the values it quotes left out: it quotes what it could not read
/// (`Failed to parse objectId 'ada@example.com'`), and the reason is logged and kept. What
/// the pipeline itself names (`'$noSuchOperator'`, a `$field` path) stays.
fn unquoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find(['\'', '"']) {
        let q = rest[open..].chars().next().unwrap_or('\'');
        out.push_str(&rest[..=open]);
        let inner = &rest[open + 1..];
        let (quoted, after) = match inner.find(q) {
            Some(close) => (&inner[..close], &inner[close..]),
            None => (inner, ""),
        };
        out.push_str(if quoted.starts_with('$') {
            quoted
        } else {
            "…"
        });
        // The closing quote, then on.
        match after.chars().next() {
            Some(c) => {
                out.push(c);
                rest = &after[c.len_utf8()..];
            }
            None => rest = "",
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoted_values_are_left_out() {
        assert_eq!(
            super::unquoted("Failed to parse objectId 'ada@example.com' in $toObjectId"),
            "Failed to parse objectId '…' in $toObjectId"
        );
        assert_eq!(super::unquoted("can't \"x"), "can'…");
        assert_eq!(
            super::unquoted("Unrecognized expression '$noSuchOperator'"),
            "Unrecognized expression '$noSuchOperator'"
        );
        assert_eq!(super::unquoted("no quotes"), "no quotes");
    }

    use super::*;

    fn server(code: i32, name: &str) -> Error {
        let command: mongodb::error::CommandError = mongodb::bson::deserialize_from_document(
            mongodb::bson::doc! {"code": code, "codeName": name, "errmsg": "x"},
        )
        .unwrap();
        ErrorKind::Command(command).into()
    }

    #[test]
    fn refusals_are_the_definitions_and_the_network_is_the_stores() {
        let io: Error = std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert!(!classify("d", "audience", io).is_definition());
        // A query MongoDB cannot run fails the same way again: the definition's.
        for (code, name) in [(40324, "Location40324"), (17276, "Location17276")] {
            assert!(classify("d", "audience", server(code, name)).is_definition());
        }
        // A server interrupted, failing over, resharding or refusing the stack's user: the
        // store's, retried (or redriven once fixed), never users skipped for it.
        for (code, name) in [
            (11601, "Interrupted"),
            (237, "CursorKilled"),
            (13388, "StaleConfig"),
            (279, "ClientDisconnect"),
            (13, "Unauthorized"),
        ] {
            let err = classify("d", "data.followers", server(code, name));
            assert!(matches!(err, RunError::Store(_)), "{code}: {err:?}");
        }
    }
}

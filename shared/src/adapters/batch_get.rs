//! BatchGetItem, written once: the keys asked 100 a call (DynamoDB's limit), and the keys
//! DynamoDB leaves unprocessed (throttling, a response over 16 MB) handled by a named
//! policy, never read as "absent".

use super::describe;
use super::item::Item;
use aws_sdk_dynamodb::types::KeysAndAttributes;
use aws_sdk_dynamodb::Client;
use std::time::Duration;

/// BatchGetItem's most keys in one call.
const MAX_KEYS: usize = 100;

/// How a batch read is made: what it does with unprocessed keys, and whether it reads
/// consistently.
#[derive(Clone, Copy, Debug)]
pub struct BatchGetPolicy {
    pub unprocessed: Unprocessed,
    /// A strongly consistent read (twice the read units).
    pub consistent: bool,
}

/// What a batch read does with the keys DynamoDB left unprocessed.
#[derive(Clone, Copy, Debug)]
pub enum Unprocessed {
    /// Asks for them again after 50, 100, 200, ... ms, in `calls` calls at most; keys still
    /// unprocessed then are an error.
    Retry { calls: u32 },
    /// An error at once: the caller answers "try again" rather than wait (a hot item every
    /// request reads is throttled, and waiting would only add to it).
    Fail,
}

/// Why a batch read gave no answer.
#[derive(Debug)]
pub enum BatchGetError {
    /// The request could not be built.
    Request(String),
    /// The call failed (the service's code and message when it answered).
    Call(String),
    /// Keys the policy gave up on.
    Unprocessed(usize),
}

/// The items of `table` found under `keys` (in no particular order), each with the
/// `projection`'s attributes (None: all), read as `policy` says.
pub async fn batch_get(
    client: &Client,
    table: &str,
    keys: Vec<Item>,
    projection: Option<&str>,
    policy: BatchGetPolicy,
) -> Result<Vec<Item>, BatchGetError> {
    let mut found = Vec::new();
    for chunk in keys.chunks(MAX_KEYS) {
        let mut keys = chunk.to_vec();
        let mut calls = 0;
        while !keys.is_empty() {
            let again = match policy.unprocessed {
                _ if calls == 0 => true,
                Unprocessed::Retry { calls: most } => calls < most,
                Unprocessed::Fail => false,
            };
            if !again {
                return Err(BatchGetError::Unprocessed(keys.len()));
            }
            if calls > 0 {
                tokio::time::sleep(Duration::from_millis(25 << calls)).await;
            }
            calls += 1;
            let wanted = KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .set_projection_expression(projection.map(str::to_owned))
                .consistent_read(policy.consistent)
                .build()
                .map_err(|e| BatchGetError::Request(e.to_string()))?;
            let out = client
                .batch_get_item()
                .request_items(table, wanted)
                .send()
                .await
                .map_err(|e| BatchGetError::Call(describe(&e)))?;
            found.extend(
                out.responses()
                    .and_then(|r| r.get(table))
                    .cloned()
                    .unwrap_or_default(),
            );
            keys = out
                .unprocessed_keys()
                .and_then(|u| u.get(table))
                .map(|k| k.keys().to_vec())
                .unwrap_or_default();
        }
    }
    Ok(found)
}

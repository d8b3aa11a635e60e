//! DynamoDB items as every adapter reads and writes them: the item type, its attribute
//! values made and read back with their types, and the TTL of an item kept for a while.
//! One reading of each: an attribute of the wrong type reads as absent everywhere.

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// One DynamoDB item (or key): attribute names and their values.
pub type Item = HashMap<String, AttributeValue>;

/// A string attribute.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute.
pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A string attribute's value (None: absent, or not a string).
pub fn text(item: &Item, key: &str) -> Option<String> {
    match item.get(key) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    }
}

/// A number attribute's value (None: absent, not a number, or not a `T`).
pub fn number<T: std::str::FromStr>(item: &Item, key: &str) -> Option<T> {
    match item.get(key) {
        Some(AttributeValue::N(v)) => v.parse().ok(),
        _ => None,
    }
}

/// The `expiresAt` (TTL, epoch seconds) of an item kept `keep` from now.
pub fn expires_after(keep: Duration) -> u64 {
    (SystemTime::now() + keep)
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

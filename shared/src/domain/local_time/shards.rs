//! How a slot's holds spread over the waiting table's partitions, and how fast its release
//! may take them out of one: the table serves one partition key at most
//! `DYNAMODB_PARTITION_WRITE_UNITS` a second, and a hold and a delete are a write unit each.

use crate::domain::aws_limits::DYNAMODB_PARTITION_WRITE_UNITS;
use crate::domain::fan_out::GET_USERS_CPU_US_PER_USER;

/// The shards of a slot held before its shard count was recorded with it.
pub const LEGACY_SHARDS: u8 = 8;

/// The share of a partition's write units one key is planned to take: room for an uneven
/// hash and for another writer (a quiet-hours hand-back, a resend) in the same slot.
const KEY_SHARE: f64 = 0.7;

/// Users a second one release lane takes out of its shard (a delete each).
pub const RELEASE_LANE_PER_SECOND: f64 = DYNAMODB_PARTITION_WRITE_UNITS * KEY_SHARE;

/// The fastest one slot fills: GetUsers' audience loop runs on one thread, so one vCPU
/// bounds it whatever its memory (25,000 users a second), a one-zone campaign putting every
/// user in one slot.
pub const HOLDS_PEAK_PER_SECOND: f64 = 1e6 / GET_USERS_CPU_US_PER_USER;

/// Shards of a slot filled at `peak` users a second: each key within its share of a
/// partition's write units (36 for GetUsers' peak), never fewer than the legacy eight.
pub fn shards_for(peak: f64) -> u8 {
    let needed = (peak / RELEASE_LANE_PER_SECOND).ceil();
    needed.clamp(f64::from(LEGACY_SHARDS), f64::from(u8::MAX)) as u8
}

/// The shards of a slot held from now on.
pub fn new_slot_shards() -> u8 {
    shards_for(HOLDS_PEAK_PER_SECOND)
}

/// A user's shard among `shards` (FNV-1a of the id: the same on every run and in every
/// holder).
pub fn shard_of(user_id: &str, shards: u8) -> u8 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in user_id.bytes() {
        hash = (hash ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (hash % u32::from(shards.max(1))) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_filled_at_getusers_peak_keeps_each_key_within_its_share() {
        let shards = new_slot_shards();
        assert_eq!(shards, 36);
        assert!(HOLDS_PEAK_PER_SECOND / f64::from(shards) <= RELEASE_LANE_PER_SECOND);
        assert_eq!(shards_for(1_000.0), LEGACY_SHARDS);
    }

    #[test]
    fn users_spread_over_every_shard_evenly() {
        let shards = new_slot_shards();
        let mut per_shard = vec![0u32; usize::from(shards)];
        for i in 0..36_000 {
            per_shard[usize::from(shard_of(&format!("u{i:08}"), shards))] += 1;
        }
        let (low, high) = (per_shard.iter().min(), per_shard.iter().max());
        assert!(
            *low.unwrap() > 900 && *high.unwrap() < 1_100,
            "{per_shard:?}"
        );
    }
}

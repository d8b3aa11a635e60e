//! The ports of open-time content (the OpenContent function): the store of frozen picks and
//! click activity (`adapters::open_content::OpenContentTable`, DynamoDB) and the directory
//! the picks are chosen from (`adapters::picks::MongoPicks`, MongoDB).

use super::StoreError;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::picks::Follower;
use crate::domain::open_content::{FreezeClaim, OpenCount, OpenCounters, Picks};
use crate::domain::user_id::UserId;
use std::collections::HashSet;
use std::future::Future;

/// The content store did not answer, or answered with an error.
#[derive(Clone, Debug, thiserror::Error)]
#[error("open-content store: {0}")]
pub struct ContentStoreError(pub String);

/// One item's recent activity, as the badge rule reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// Minutes (since the epoch) in the asked range with at least one counted click.
    pub minutes: Vec<u64>,
    /// The item's counted clicks in the campaign.
    pub item_clicks: u64,
    /// The most counted clicks any item of the campaign has.
    pub top_clicks: u64,
}

/// Frozen picks and click activity, keyed by email (the send record's key) and item.
pub trait OpenContentStore: Send + Sync {
    /// The email's frozen picks, if any (a cheap, possibly stale read: `claim` decides).
    fn frozen(
        &self,
        email: &SendKey,
    ) -> impl Future<Output = Result<Option<Picks>, ContentStoreError>> + Send;
    /// One conditional write: the lease to compute the email's picks (until
    /// `lease_until_ms`) when none is frozen and no live lease is held; else what is there.
    fn claim(
        &self,
        email: &SendKey,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
    ) -> impl Future<Output = Result<FreezeClaim, ContentStoreError>> + Send;
    /// Freezes `picks` unless some are frozen already (first writer wins, whoever holds the
    /// lease); the picks that are frozen afterwards.
    fn freeze(
        &self,
        email: &SendKey,
        picks: &Picks,
    ) -> impl Future<Output = Result<Picks, ContentStoreError>> + Send;
    /// Records a counted click of `email` on `item` in `minute`; whether it is this email's
    /// first click on the item.
    fn click(
        &self,
        email: &SendKey,
        item: &str,
        minute: u64,
    ) -> impl Future<Output = Result<bool, ContentStoreError>> + Send;
    /// `item`'s activity in the minutes `[first, last]`.
    fn activity(
        &self,
        campaign: &CampaignId,
        item: &str,
        first: u64,
        last: u64,
    ) -> impl Future<Output = Result<Activity, ContentStoreError>> + Send;
    /// Adds one to each of `what` for the campaign; `email` spreads the writes.
    fn count(
        &self,
        email: &SendKey,
        what: &[OpenCount],
    ) -> impl Future<Output = Result<(), ContentStoreError>> + Send;
    /// The campaign's counts.
    fn counters(
        &self,
        campaign: &CampaignId,
    ) -> impl Future<Output = Result<OpenCounters, ContentStoreError>> + Send;
}

/// Where the picks come from: the recipient's followers and whom they follow.
pub trait PickDirectory: Send + Sync {
    /// The recipient's followers, newest follow first (at most `limit` follows read, so one
    /// choice costs the same for everyone), each with whether the user exists and their
    /// name; and which of them the recipient follows now.
    fn followers(
        &self,
        recipient: &UserId,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<Follower>, HashSet<String>), StoreError>> + Send;
    /// Whether the recipient's opens and clicks may still be counted: subscribed and not
    /// suppressed (an unsubscribed person's old email still works, and counts nothing).
    fn may_count(
        &self,
        recipient: &UserId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Cold-start check that the queries' indexes exist.
    fn check_indexes(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

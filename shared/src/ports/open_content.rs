//! The ports of open-time content (the OpenContent function): the store of frozen picks and
//! the people who clicked them (`adapters::open_content::OpenContentTable`, DynamoDB) and the directory
//! the picks are chosen from (`adapters::picks::MongoPicks`, MongoDB).

use super::StoreError;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::picks::Follower;
use crate::domain::open_content::{FreezeClaim, Mark, OpenCount, OpenCounters, Picks};
use crate::domain::user_id::UserId;
use std::collections::HashSet;
use std::future::Future;

/// The content store did not answer, or answered with an error.
#[derive(Clone, Debug, thiserror::Error)]
#[error("open-content store: {0}")]
pub struct ContentStoreError(pub String);

/// One pick's recent activity, as the badge rule reads it: people, not requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// Minutes (since the epoch) in the asked range in which someone clicked it.
    pub minutes: Vec<u64>,
    /// The people who clicked it in those minutes (each once).
    pub window_people: u64,
    /// The people who clicked it in the campaign.
    pub item_people: u64,
    /// The most people any pick of the campaign has.
    pub top_people: u64,
}

/// A pick's people before and after a mark raised its sketch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rise {
    pub before: u64,
    pub after: u64,
}

/// Frozen picks and the people who clicked them, keyed by email (the send record's key) and
/// pick. Every method is one request to the store; the writes are what a request costs, so
/// the stage decides which to make (`stages::open_content` bounds them per request).
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
    /// lease), and drops the lease; the picks that are frozen afterwards. The email's item
    /// holds nothing else.
    fn freeze(
        &self,
        email: &SendKey,
        picks: &Picks,
    ) -> impl Future<Output = Result<Picks, ContentStoreError>> + Send;
    /// One conditional write: raises `item`'s sketch of `minute` with `mark`; whether it
    /// rose (it does not for a person already marked there).
    fn mark_minute(
        &self,
        campaign: &CampaignId,
        item: &str,
        minute: u64,
        mark: Mark,
    ) -> impl Future<Output = Result<bool, ContentStoreError>> + Send;
    /// One conditional write: raises `item`'s sketch of the whole campaign with `mark`; its
    /// people before and after when it rose.
    fn mark_total(
        &self,
        campaign: &CampaignId,
        item: &str,
        mark: Mark,
    ) -> impl Future<Output = Result<Option<Rise>, ContentStoreError>> + Send;
    /// One conditional write: the campaign's top becomes `people` if that is more.
    fn raise_top(
        &self,
        campaign: &CampaignId,
        people: u64,
    ) -> impl Future<Output = Result<(), ContentStoreError>> + Send;
    /// `item`'s activity in the minutes `[first, last]`.
    fn activity(
        &self,
        campaign: &CampaignId,
        item: &str,
        first: u64,
        last: u64,
    ) -> impl Future<Output = Result<Activity, ContentStoreError>> + Send;
    /// One write: adds each amount of `what` to the campaign's counts; `email` spreads the
    /// writes (the counts item it adds to), and is not stored.
    fn count(
        &self,
        email: &SendKey,
        what: &[(OpenCount, u64)],
    ) -> impl Future<Output = Result<(), ContentStoreError>> + Send;
    /// The campaign's counts.
    fn counters(
        &self,
        campaign: &CampaignId,
    ) -> impl Future<Output = Result<OpenCounters, ContentStoreError>> + Send;
}

/// What the cold-start index check found, when MongoDB answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexCheck {
    Present,
    /// What is missing and how to create it.
    Missing(String),
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
    /// Cold-start check that the queries' indexes exist (an error: MongoDB did not answer).
    fn check_indexes(&self) -> impl Future<Output = Result<IndexCheck, StoreError>> + Send;
}

//! The open-content store and the pick directory in memory, with the same conditions as
//! `adapters::open_content` (claim, first-writer-wins freeze, unique clicks).

use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::picks::Follower;
use crate::domain::open_content::{FreezeClaim, OpenCount, OpenCounters, Picks};
use crate::domain::user_id::UserId;
use crate::ports::{Activity, ContentStoreError, OpenContentStore, PickDirectory, StoreError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug, Default)]
struct Email {
    lease: Option<(String, u64)>,
    picks: Option<Picks>,
    clicked: HashSet<String>,
}

#[derive(Default)]
struct State {
    emails: HashMap<SendKey, Email>,
    /// (campaign, item) -> minute -> clicks
    minutes: HashMap<(String, String), BTreeMap<u64, u64>>,
    totals: HashMap<(String, String), u64>,
    counters: HashMap<String, OpenCounters>,
}

#[derive(Clone, Default)]
pub struct MemoryOpenContent {
    state: Arc<Mutex<State>>,
    /// Calls of `freeze` that froze (the computations that won).
    pub freezes: Arc<AtomicU64>,
}

impl MemoryOpenContent {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().expect("memory store lock"))
    }

    /// The lease on an email, as a dead winner left it.
    pub fn lease(&self, email: &SendKey) -> Option<(String, u64)> {
        self.with(|s| s.emails.get(email).and_then(|e| e.lease.clone()))
    }
}

impl OpenContentStore for MemoryOpenContent {
    async fn frozen(&self, email: &SendKey) -> Result<Option<Picks>, ContentStoreError> {
        Ok(self.with(|s| s.emails.get(email).and_then(|e| e.picks.clone())))
    }

    async fn claim(
        &self,
        email: &SendKey,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
    ) -> Result<FreezeClaim, ContentStoreError> {
        Ok(self.with(|s| {
            let e = s.emails.entry(email.clone()).or_default();
            if let Some(picks) = &e.picks {
                return FreezeClaim::Frozen(picks.clone());
            }
            match &e.lease {
                Some((_, until)) if *until > now_ms => FreezeClaim::Busy {
                    lease_until_ms: *until,
                },
                _ => {
                    e.lease = Some((owner.to_owned(), lease_until_ms));
                    FreezeClaim::Won
                }
            }
        }))
    }

    async fn freeze(&self, email: &SendKey, picks: &Picks) -> Result<Picks, ContentStoreError> {
        Ok(self.with(|s| {
            let e = s.emails.entry(email.clone()).or_default();
            if e.picks.is_none() {
                e.picks = Some(picks.clone());
                self.freezes.fetch_add(1, Ordering::SeqCst);
            }
            e.picks.clone().expect("just set")
        }))
    }

    async fn click(
        &self,
        email: &SendKey,
        item: &str,
        minute: u64,
    ) -> Result<bool, ContentStoreError> {
        Ok(self.with(|s| {
            let key = (email.campaign_id().to_owned(), item.to_owned());
            *s.minutes
                .entry(key.clone())
                .or_default()
                .entry(minute)
                .or_default() += 1;
            *s.totals.entry(key).or_default() += 1;
            s.emails
                .entry(email.clone())
                .or_default()
                .clicked
                .insert(item.to_owned())
        }))
    }

    async fn activity(
        &self,
        campaign: &CampaignId,
        item: &str,
        first: u64,
        last: u64,
    ) -> Result<Activity, ContentStoreError> {
        Ok(self.with(|s| {
            let key = (campaign.to_string(), item.to_owned());
            Activity {
                minutes: s
                    .minutes
                    .get(&key)
                    .map(|m| m.range(first..=last).map(|(m, _)| *m).collect())
                    .unwrap_or_default(),
                item_clicks: s.totals.get(&key).copied().unwrap_or(0),
                top_clicks: s
                    .totals
                    .iter()
                    .filter(|((c, _), _)| c == campaign.as_str())
                    .map(|(_, n)| *n)
                    .max()
                    .unwrap_or(0),
            }
        }))
    }

    async fn count(&self, email: &SendKey, what: &[OpenCount]) -> Result<(), ContentStoreError> {
        self.with(|s| {
            let counters = s
                .counters
                .entry(email.campaign_id().to_owned())
                .or_default();
            for w in what {
                counters.add(*w, 1);
            }
        });
        Ok(())
    }

    async fn counters(&self, campaign: &CampaignId) -> Result<OpenCounters, ContentStoreError> {
        Ok(self.with(|s| {
            s.counters
                .get(campaign.as_str())
                .cloned()
                .unwrap_or_default()
        }))
    }
}

/// A pick directory from a fixed table, answering after `delay` (to make a choice slow).
#[derive(Clone, Default)]
pub struct MemoryPicks {
    pub followers: HashMap<String, Vec<Follower>>,
    pub followed_back: HashMap<String, HashSet<String>>,
    /// Recipients who may not be counted (unsubscribed or suppressed).
    pub quiet: HashSet<String>,
    pub delay: Duration,
    /// Calls of `followers` (the computations made).
    pub reads: Arc<AtomicU64>,
}

impl PickDirectory for MemoryPicks {
    async fn followers(
        &self,
        recipient: &UserId,
        limit: usize,
    ) -> Result<(Vec<Follower>, HashSet<String>), StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let id = recipient.to_string();
        let mut followers = self.followers.get(&id).cloned().unwrap_or_default();
        followers.truncate(limit);
        Ok((
            followers,
            self.followed_back.get(&id).cloned().unwrap_or_default(),
        ))
    }

    async fn may_count(&self, recipient: &UserId) -> Result<bool, StoreError> {
        Ok(!self.quiet.contains(&recipient.to_string()))
    }

    async fn check_indexes(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

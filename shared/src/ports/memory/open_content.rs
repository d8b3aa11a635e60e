//! The open-content store and the pick directory in memory, with the same conditions as
//! `adapters::open_content` (claim, first-writer-wins freeze, sketches raised only upward,
//! the top only raised), one write counted per write request the table would get.

use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::picks::Follower;
use crate::domain::open_content::{FreezeClaim, Mark, OpenCount, OpenCounters, Picks, Sketch};
use crate::domain::user_id::UserId;
use crate::ports::{
    Activity, ContentStoreError, IndexCheck, OpenContentStore, PickDirectory, Rise, StoreError,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An email's item: a lease while its picks are chosen, then the frozen picks alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmailItem {
    pub lease: Option<(String, u64)>,
    pub picks: Option<Picks>,
}

#[derive(Default)]
struct State {
    emails: HashMap<SendKey, EmailItem>,
    /// (campaign, item) -> minute -> the sketch of that minute
    minutes: HashMap<(String, String), BTreeMap<u64, Sketch>>,
    totals: HashMap<(String, String), Sketch>,
    tops: HashMap<String, u64>,
    counters: HashMap<String, OpenCounters>,
}

#[derive(Clone, Default)]
pub struct MemoryOpenContent {
    state: Arc<Mutex<State>>,
    /// Calls of `freeze` that froze (the computations that won).
    pub freezes: Arc<AtomicU64>,
    /// Write requests (refused conditional writes included: DynamoDB bills them too).
    pub writes: Arc<AtomicU64>,
    /// While set, every call waits for ever (a store that hangs).
    pub hung: Arc<AtomicBool>,
    /// How long every call takes, in ms (a slow table).
    pub delay_ms: Arc<AtomicU64>,
    /// Every call, read or write (each a request to the table on AWS).
    pub calls: Arc<AtomicU64>,
}

impl MemoryOpenContent {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().expect("memory store lock"))
    }

    async fn call<T>(&self, write: bool, f: impl FnOnce(&mut State) -> T) -> T {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.hung.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        if write {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        self.with(f)
    }

    /// The lease on an email, as a dead winner left it.
    pub fn lease(&self, email: &SendKey) -> Option<(String, u64)> {
        self.with(|s| s.emails.get(email).and_then(|e| e.lease.clone()))
    }

    /// Everything the store keeps per email: the items keyed by an email (one per email).
    pub fn email_items(&self) -> HashMap<SendKey, EmailItem> {
        self.with(|s| s.emails.clone())
    }
}

impl OpenContentStore for MemoryOpenContent {
    async fn frozen(&self, email: &SendKey) -> Result<Option<Picks>, ContentStoreError> {
        Ok(self
            .call(false, |s| s.emails.get(email).and_then(|e| e.picks.clone()))
            .await)
    }

    async fn claim(
        &self,
        email: &SendKey,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
    ) -> Result<FreezeClaim, ContentStoreError> {
        Ok(self
            .call(true, |s| {
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
            })
            .await)
    }

    async fn freeze(&self, email: &SendKey, picks: &Picks) -> Result<Picks, ContentStoreError> {
        Ok(self
            .call(true, |s| {
                let e = s.emails.entry(email.clone()).or_default();
                if e.picks.is_none() {
                    e.picks = Some(picks.clone());
                    e.lease = None;
                    self.freezes.fetch_add(1, Ordering::SeqCst);
                }
                e.picks.clone().expect("just set")
            })
            .await)
    }

    async fn mark_minute(
        &self,
        campaign: &CampaignId,
        item: &str,
        minute: u64,
        mark: Mark,
    ) -> Result<bool, ContentStoreError> {
        Ok(self
            .call(true, |s| {
                s.minutes
                    .entry((campaign.to_string(), item.to_owned()))
                    .or_default()
                    .entry(minute)
                    .or_default()
                    .raise(mark)
            })
            .await)
    }

    async fn mark_total(
        &self,
        campaign: &CampaignId,
        item: &str,
        mark: Mark,
    ) -> Result<Option<Rise>, ContentStoreError> {
        Ok(self
            .call(true, |s| {
                let sketch = s
                    .totals
                    .entry((campaign.to_string(), item.to_owned()))
                    .or_default();
                let before = sketch.people();
                sketch.raise(mark).then(|| Rise {
                    before,
                    after: sketch.people(),
                })
            })
            .await)
    }

    async fn raise_top(&self, campaign: &CampaignId, people: u64) -> Result<(), ContentStoreError> {
        self.call(true, |s| {
            let top = s.tops.entry(campaign.to_string()).or_default();
            *top = (*top).max(people);
        })
        .await;
        Ok(())
    }

    async fn activity(
        &self,
        campaign: &CampaignId,
        item: &str,
        first: u64,
        last: u64,
    ) -> Result<Activity, ContentStoreError> {
        Ok(self
            .call(false, |s| {
                let key = (campaign.to_string(), item.to_owned());
                let mut window = Sketch::default();
                let mut minutes = Vec::new();
                if let Some(m) = s.minutes.get(&key) {
                    for (minute, sketch) in m.range(first..=last) {
                        if !sketch.is_empty() {
                            minutes.push(*minute);
                            window.merge(sketch);
                        }
                    }
                }
                Activity {
                    minutes,
                    window_people: window.people(),
                    item_people: s.totals.get(&key).map(Sketch::people).unwrap_or(0),
                    top_people: s.tops.get(campaign.as_str()).copied().unwrap_or(0),
                }
            })
            .await)
    }

    async fn count(
        &self,
        email: &SendKey,
        what: &[(OpenCount, u64)],
    ) -> Result<(), ContentStoreError> {
        if what.is_empty() {
            return Ok(());
        }
        self.call(true, |s| {
            let counters = s
                .counters
                .entry(email.campaign_id().to_owned())
                .or_default();
            for (w, n) in what {
                counters.add(*w, *n);
            }
        })
        .await;
        Ok(())
    }

    async fn counters(&self, campaign: &CampaignId) -> Result<OpenCounters, ContentStoreError> {
        Ok(self
            .call(false, |s| {
                s.counters
                    .get(campaign.as_str())
                    .cloned()
                    .unwrap_or_default()
            })
            .await)
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
    /// What the index check finds missing, if anything.
    pub missing_index: Option<String>,
    /// Every call (each a MongoDB round trip on AWS).
    pub calls: Arc<AtomicU64>,
}

impl PickDirectory for MemoryPicks {
    async fn followers(
        &self,
        recipient: &UserId,
        limit: usize,
    ) -> Result<(Vec<Follower>, HashSet<String>), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
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
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(!self.quiet.contains(&recipient.to_string()))
    }

    async fn check_indexes(&self) -> Result<IndexCheck, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(match &self.missing_index {
            Some(what) => IndexCheck::Missing(what.clone()),
            None => IndexCheck::Present,
        })
    }
}

//! Subscribers: suppressions and subscriptions.

use crate::domain::ledger::SendKey;
use crate::domain::topics::{Choice, Overall, Preferences, Save, Standing, TopicId, Topics};
use crate::ports::{
    Change, ChangedVia, SubscriberError, SubscriberStore, SuppressionReason, UserStandings,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A topic choice: in or out, how it was made, from which campaign's email.
pub type TopicChoice = (bool, ChangedVia, String);

/// Users with their suppression (the first reason kept) and subscription.
#[derive(Default)]
pub struct MemorySubscribers {
    /// user id -> (subscribed, suppression reason)
    pub users: Mutex<HashMap<String, (bool, Option<SuppressionReason>)>>,
    /// user id -> topic -> their choice
    pub topics: Mutex<HashMap<String, BTreeMap<TopicId, TopicChoice>>>,
    /// Every call of the port (each a MongoDB round trip on AWS).
    pub calls: AtomicU64,
    /// What every call answers instead, when set.
    pub failing: Mutex<Option<SubscriberError>>,
}

impl MemorySubscribers {
    pub fn with(users: &[&str]) -> Self {
        let store = Self::default();
        crate::runtime::lock(&store.users)
            .extend(users.iter().map(|u| (u.to_string(), (true, None))));
        store
    }

    /// The user's explicit choice of `topic`: in or out, and how it was made.
    pub fn topic(&self, user: &str, topic: &str) -> Option<TopicChoice> {
        crate::runtime::lock(&self.topics)
            .get(user)
            .and_then(|t| t.get(&TopicId::parse(topic).ok()?).cloned())
    }

    /// Counts a call of the port; Err: the failure set for every call.
    fn called(&self) -> Result<(), SubscriberError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        crate::runtime::lock(&self.failing)
            .clone()
            .map_or(Ok(()), Err)
    }

    pub fn get(&self, user: &str) -> Option<(bool, Option<SuppressionReason>)> {
        crate::runtime::lock(&self.users).get(user).copied()
    }
}

impl UserStandings for MemorySubscribers {
    async fn standing(
        &self,
        key: &SendKey,
        topic: &TopicId,
    ) -> Result<Option<Standing>, SubscriberError> {
        self.called()?;
        let user_id = key.user_id();
        let Some((subscribed, suppression)) = self.get(user_id) else {
            return Ok(None);
        };
        let choice = match self.topic(user_id, topic.as_str()) {
            Some((true, _, _)) => Choice::In,
            Some((false, _, _)) => Choice::Out,
            None => Choice::Unset,
        };
        Ok(Some(Standing {
            overall: if subscribed {
                Overall::Subscribed
            } else {
                Overall::Unsubscribed
            },
            suppressed: suppression.is_some(),
            choice,
        }))
    }
}

impl SubscriberStore for MemorySubscribers {
    async fn unsubscribe(
        &self,
        key: &SendKey,
        _list: &str,
        _at_ms: i64,
    ) -> Result<Change, SubscriberError> {
        self.called()?;
        let mut users = crate::runtime::lock(&self.users);
        Ok(match users.get_mut(key.user_id()) {
            None => Change::NoSuchUser,
            Some((subscribed, _)) if !*subscribed => Change::AlreadyDone,
            Some((subscribed, _)) => {
                *subscribed = false;
                Change::Made
            }
        })
    }

    async fn leave_topic(
        &self,
        key: &SendKey,
        topic: &TopicId,
        via: ChangedVia,
        _at_ms: i64,
    ) -> Result<Change, SubscriberError> {
        self.called()?;
        if self.get(key.user_id()).is_none() {
            return Ok(Change::NoSuchUser);
        }
        let mut topics = crate::runtime::lock(&self.topics);
        let choices = topics.entry(key.user_id().to_owned()).or_default();
        Ok(match choices.get(topic) {
            Some((false, _, _)) => Change::AlreadyDone,
            _ => {
                choices.insert(topic.clone(), (false, via, key.campaign_id().to_owned()));
                Change::Made
            }
        })
    }

    async fn preferences(
        &self,
        key: &SendKey,
        _topics: &Topics,
    ) -> Result<Option<(Preferences, Option<String>)>, SubscriberError> {
        self.called()?;
        let user_id = key.user_id();
        let Some((subscribed, _)) = self.get(user_id) else {
            return Ok(None);
        };
        let choices = crate::runtime::lock(&self.topics)
            .get(user_id)
            .map(|t| {
                t.iter()
                    .map(|(id, (on, _, _))| {
                        (id.clone(), if *on { Choice::In } else { Choice::Out })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let overall = if subscribed {
            Overall::Subscribed
        } else {
            Overall::Unsubscribed
        };
        Ok(Some((Preferences { overall, choices }, None)))
    }

    async fn save_preferences(
        &self,
        key: &SendKey,
        save: &Save,
        _at_ms: i64,
    ) -> Result<Change, SubscriberError> {
        self.called()?;
        let mut users = crate::runtime::lock(&self.users);
        let Some((subscribed, _)) = users.get_mut(key.user_id()) else {
            return Ok(Change::NoSuchUser);
        };
        if save.changes.is_empty() && !save.resubscribe {
            return Ok(Change::AlreadyDone);
        }
        *subscribed |= save.resubscribe;
        let mut topics = crate::runtime::lock(&self.topics);
        let choices = topics.entry(key.user_id().to_owned()).or_default();
        for (topic, wanted) in &save.changes {
            choices.insert(
                topic.clone(),
                (*wanted, ChangedVia::Page, key.campaign_id().to_owned()),
            );
        }
        Ok(Change::Made)
    }

    async fn suppress(
        &self,
        key: &SendKey,
        reason: SuppressionReason,
        _detail: &str,
        _at_ms: i64,
    ) -> Result<Change, SubscriberError> {
        self.called()?;
        let mut users = crate::runtime::lock(&self.users);
        Ok(match users.get_mut(key.user_id()) {
            None => Change::NoSuchUser,
            Some((_, Some(_))) => Change::AlreadyDone,
            Some((_, suppression)) => {
                *suppression = Some(reason);
                Change::Made
            }
        })
    }
}

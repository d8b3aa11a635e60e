//! Subscribers: suppressions and subscriptions.

use crate::domain::ledger::SendKey;
use crate::ports::{Change, StoreError, SubscriberStore, SuppressionReason};
use std::collections::HashMap;
use std::sync::Mutex;

/// Users with their suppression (the first reason kept) and subscription.
#[derive(Default)]
pub struct MemorySubscribers {
    /// user id -> (subscribed, suppression reason)
    pub users: Mutex<HashMap<String, (bool, Option<SuppressionReason>)>>,
}

impl MemorySubscribers {
    pub fn with(users: &[&str]) -> Self {
        let store = Self::default();
        store
            .users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(users.iter().map(|u| (u.to_string(), (true, None))));
        store
    }

    pub fn get(&self, user: &str) -> Option<(bool, Option<SuppressionReason>)> {
        self.users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(user)
            .copied()
    }
}

impl SubscriberStore for MemorySubscribers {
    async fn unsubscribe(
        &self,
        key: &SendKey,
        _list: &str,
        _at_ms: i64,
    ) -> Result<Change, StoreError> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        Ok(match users.get_mut(key.user_id()) {
            None => Change::NoSuchUser,
            Some((subscribed, _)) if !*subscribed => Change::AlreadyDone,
            Some((subscribed, _)) => {
                *subscribed = false;
                Change::Made
            }
        })
    }

    async fn suppress(
        &self,
        key: &SendKey,
        reason: SuppressionReason,
        _detail: &str,
        _at_ms: i64,
    ) -> Result<Change, StoreError> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
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

//! Who may be emailed, in MongoDB's `users` collection: one-click unsubscribes set
//! `subscribed: false`, permanent bounces and complaints set `suppression`. GetUsers and
//! CreateEmails leave out both from then on. Every change is idempotent: a repeated request
//! or event finds it done and keeps the first time and reason.

use super::directory::USERS;
use crate::domain::ledger::SendKey;
use crate::domain::user_id::UserId;
use mongodb::bson::{doc, DateTime, Document};
use mongodb::{Collection, Database};

use crate::ports::SubscriberStore;
pub use crate::ports::{Change, StoreError, SuppressionReason};

#[derive(Clone)]
pub struct Subscribers {
    users: Collection<Document>,
}

impl Subscribers {
    pub fn new(db: &Database) -> Self {
        Self {
            users: db.collection(USERS),
        }
    }

    async fn change(
        &self,
        user_id: &str,
        not_yet: Document,
        set: Document,
    ) -> mongodb::error::Result<Change> {
        // The text form of the id, as tokens and SES tags carry it (`crate::domain::user_id`).
        let id = match UserId::parse(user_id) {
            Ok(id) => super::bson_ids::to_bson(&id),
            Err(_) => return Ok(Change::NoSuchUser),
        };
        let mut filter = doc! { "_id": id.clone() };
        filter.extend(not_yet);
        let result = self.users.update_one(filter, doc! { "$set": set }).await?;
        if result.matched_count > 0 {
            return Ok(Change::Made);
        }
        let exists = self
            .users
            .count_documents(doc! { "_id": id })
            .limit(1)
            .await?
            > 0;
        Ok(if exists {
            Change::AlreadyDone
        } else {
            Change::NoSuchUser
        })
    }
}

impl SubscriberStore for Subscribers {
    /// The user asked to receive no more of `list` (from the email of `key`).
    async fn unsubscribe(
        &self,
        key: &SendKey,
        list: &str,
        at_ms: i64,
    ) -> Result<Change, StoreError> {
        self.change(
            key.user_id(),
            doc! { "subscribed": { "$ne": false } },
            doc! {
                "subscribed": false,
                "unsubscribedAt": DateTime::from_millis(at_ms),
                "unsubscribedFrom": { "list": list, "campaignId": key.campaign_id() },
            },
        )
        .await
        .map_err(StoreError::from)
    }

    /// The address must never be emailed again, for `reason`; `detail` says more (the
    /// bounce type, the complaint's feedback type).
    async fn suppress(
        &self,
        key: &SendKey,
        reason: SuppressionReason,
        detail: &str,
        at_ms: i64,
    ) -> Result<Change, StoreError> {
        self.change(
            key.user_id(),
            doc! { "suppression": { "$exists": false } },
            doc! {
                "suppression": {
                    "reason": reason.as_str(),
                    "detail": detail,
                    "campaignId": key.campaign_id(),
                    "at": DateTime::from_millis(at_ms),
                },
            },
        )
        .await
        .map_err(StoreError::from)
    }
}

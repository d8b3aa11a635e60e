//! Who may be emailed, in MongoDB's `users` collection: "unsubscribe from all" sets
//! `subscribed: false`; a one-click unsubscribe, or the preference centre, sets a topic's
//! choice (`topics.<id>`, `crate::adapters::preferences`); permanent bounces and complaints
//! set `suppression`. GetUsers and CreateEmails apply them from then on. Every change is
//! idempotent: a repeated request or event finds it done and keeps the first time and
//! reason.

use super::mongo::{
    LOCALE, SUBSCRIBED, SUPPRESSION, TOPICS, TOPICS_UNREADABLE, UNSUBSCRIBED_AT, USERS,
};
use crate::domain::ledger::SendKey;
use crate::domain::user_id::UserId;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::{Collection, Database};

use super::preferences;
use crate::domain::topics::{Preferences, Save, Standing, TopicId, Topics};
pub use crate::ports::{Change, StoreError, SuppressionReason};
use crate::ports::{ChangedVia, SubscriberStore, UserStandings};

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

    /// The user's `_id` as stored, from its text form (None: no user can have it).
    fn id(user_id: &str) -> Option<mongodb::bson::Bson> {
        UserId::parse(user_id)
            .ok()
            .map(|id| super::bson_ids::to_bson(&id))
    }

    /// `$set` on the user matched by `filter`, which writes `topics.<id>` choices. Where the
    /// user's `topics` is not a document MongoDB refuses the dotted path (PathNotViable),
    /// and a one-click, which mail clients never retry, would fail: the field is then made
    /// writable (`make_topics_writable`) and the write tried once more. The common case costs
    /// nothing extra.
    async fn set_topics(&self, filter: Document, set: Document) -> mongodb::error::Result<u64> {
        match self
            .users
            .update_one(filter.clone(), doc! { "$set": set.clone() })
            .await
        {
            Err(err) if path_not_viable(&err) => {
                self.make_topics_writable(filter.get("_id")).await?;
                let result = self.users.update_one(filter, doc! { "$set": set }).await?;
                Ok(result.matched_count)
            }
            other => Ok(other?.matched_count),
        }
    }

    /// The user's `topics` as read, made writable: null (no choices) is removed; any other
    /// value that is not a document (a string, an array, a number, written by hand or by
    /// another tool) is moved aside, as it was, to `topicsUnreadable`, which keeps the topics
    /// without a choice of their own unreadable (`preferences::choice`). Each change is
    /// conditional on the value read, so a concurrent write is never moved aside.
    async fn make_topics_writable(&self, id: Option<&Bson>) -> mongodb::error::Result<()> {
        let Some(id) = id else {
            return Ok(());
        };
        let user = self
            .users
            .find_one(doc! { "_id": id.clone() })
            .projection(doc! { TOPICS: 1 })
            .await?;
        let update = match user.as_ref().and_then(|u| u.get(TOPICS)) {
            None | Some(Bson::Document(_)) => return Ok(()),
            Some(Bson::Null) => doc! { "$unset": { TOPICS: "" } },
            Some(_) => doc! { "$rename": { TOPICS: TOPICS_UNREADABLE } },
        };
        let odd = user
            .and_then(|mut u| u.remove(TOPICS))
            .unwrap_or(Bson::Null);
        self.users
            .update_one(doc! { "_id": id.clone(), TOPICS: odd }, update)
            .await?;
        Ok(())
    }

    async fn change(
        &self,
        user_id: &str,
        not_yet: Document,
        set: Document,
    ) -> mongodb::error::Result<Change> {
        // The text form of the id, as tokens and SES tags carry it (`crate::domain::user_id`).
        let Some(id) = Self::id(user_id) else {
            return Ok(Change::NoSuchUser);
        };
        let mut filter = doc! { "_id": id.clone() };
        filter.extend(not_yet);
        if self.set_topics(filter, set).await? > 0 {
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

impl UserStandings for Subscribers {
    /// One `find` by `_id`, of the four fields the standing is read from.
    async fn standing(
        &self,
        user_id: &str,
        topic: &TopicId,
    ) -> Result<Option<Standing>, StoreError> {
        let Some(id) = Self::id(user_id) else {
            return Ok(None);
        };
        let user = self
            .users
            .find_one(doc! { "_id": id })
            .projection(preferences::standing_projection(topic))
            .await?;
        Ok(user.map(|user| preferences::standing(&user, topic)))
    }
}

/// `Subscribers`, connected at its first read rather than at cold start: SendEmail reads a
/// standing only for an email that waited, and its sending neither waits for MongoDB's
/// secret nor stops when it cannot be read (a read that fails retries that email alone).
pub struct LazySubscribers {
    config: crate::config::MongoConfig,
    sdk: aws_config::SdkConfig,
    app_name: &'static str,
    connected: tokio::sync::OnceCell<Subscribers>,
}

impl LazySubscribers {
    pub fn new(
        config: crate::config::MongoConfig,
        sdk: &aws_config::SdkConfig,
        app_name: &'static str,
    ) -> Self {
        Self {
            config,
            sdk: sdk.clone(),
            app_name,
            connected: tokio::sync::OnceCell::new(),
        }
    }
}

impl UserStandings for LazySubscribers {
    async fn standing(
        &self,
        user_id: &str,
        topic: &TopicId,
    ) -> Result<Option<Standing>, StoreError> {
        let subscribers = self
            .connected
            .get_or_try_init(|| async {
                super::mongo::connect(&self.config, &self.sdk, self.app_name)
                    .await
                    .map(|db| Subscribers::new(&db))
                    .map_err(StoreError::mongo)
            })
            .await?;
        subscribers.standing(user_id, topic).await
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
            doc! { SUBSCRIBED: { "$ne": false } },
            doc! {
                SUBSCRIBED: false,
                UNSUBSCRIBED_AT: DateTime::from_millis(at_ms),
                "unsubscribedFrom": { "list": list, "campaignId": key.campaign_id() },
            },
        )
        .await
        .map_err(StoreError::from)
    }

    async fn leave_topic(
        &self,
        key: &SendKey,
        topic: &TopicId,
        via: ChangedVia,
        at_ms: i64,
    ) -> Result<Change, StoreError> {
        self.change(
            key.user_id(),
            doc! { preferences::choice_field(topic): { "$ne": false } },
            doc! { format!("{TOPICS}.{topic}"): choice(false, key, via, at_ms) },
        )
        .await
        .map_err(StoreError::from)
    }

    async fn preferences(
        &self,
        user_id: &str,
        topics: &Topics,
    ) -> Result<Option<(Preferences, Option<String>)>, StoreError> {
        let Some(id) = Self::id(user_id) else {
            return Ok(None);
        };
        let user = self
            .users
            .find_one(doc! { "_id": id })
            .projection(doc! { SUBSCRIBED: 1, TOPICS: 1, TOPICS_UNREADABLE: 1, LOCALE: 1 })
            .await?;
        Ok(user.map(|user| {
            let locale = user.get_str(LOCALE).ok().map(str::to_owned);
            (preferences::preferences(&user, topics), locale)
        }))
    }

    async fn save_preferences(
        &self,
        key: &SendKey,
        save: &Save,
        at_ms: i64,
    ) -> Result<Change, StoreError> {
        let Some(id) = Self::id(key.user_id()) else {
            return Ok(Change::NoSuchUser);
        };
        let mut set = Document::new();
        for (topic, wanted) in &save.changes {
            set.insert(
                format!("{TOPICS}.{topic}"),
                choice(*wanted, key, ChangedVia::Page, at_ms),
            );
        }
        if save.resubscribe {
            set.insert(SUBSCRIBED, true);
            set.insert("resubscribedAt", DateTime::from_millis(at_ms));
            set.insert("resubscribedFrom", doc! { "campaignId": key.campaign_id() });
        }
        if set.is_empty() {
            return Ok(Change::AlreadyDone);
        }
        Ok(if self.set_topics(doc! { "_id": id }, set).await? > 0 {
            Change::Made
        } else {
            Change::NoSuchUser
        })
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
            doc! { SUPPRESSION: { "$exists": false } },
            doc! {
                SUPPRESSION: {
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

/// A topic choice as stored: in or out, when, how, from which campaign's email.
/// MongoDB refused a dotted path through a value that is not a document (code 28,
/// PathNotViable; the local emulator says so in its message).
fn path_not_viable(err: &mongodb::error::Error) -> bool {
    match err.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(e)) => {
            e.code == 28 || e.message.contains("Cannot create field")
        }
        _ => err.to_string().contains("Cannot create field"),
    }
}

fn choice(subscribed: bool, key: &SendKey, via: ChangedVia, at_ms: i64) -> Document {
    doc! {
        SUBSCRIBED: subscribed,
        "at": DateTime::from_millis(at_ms),
        "via": via.as_str(),
        "campaignId": key.campaign_id(),
    }
}

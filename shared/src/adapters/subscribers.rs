//! Who may be emailed, in MongoDB: "unsubscribe from all" sets `subscribed: false`; a
//! one-click unsubscribe, or the preference centre, sets a topic's choice (`topics.<id>`,
//! `crate::adapters::preferences`); permanent bounces and complaints set `suppression`.
//! GetUsers and CreateEmails apply them from then on. Every change is idempotent: a repeated
//! request or event finds it done and keeps the first time and reason.
//!
//! Each call is about one campaign's email and works where that campaign's recipients are
//! (`recipients`): our `users` collection and its fields, or the collection and the field
//! paths its definition names (`prefs.subscribed`, `prefs.topics`, `flags.suppression`),
//! with the same writes at those paths. What records a change sits beside the field it
//! changes: `unsubscribedAt` and `resubscribedAt` beside `subscribed`, `topicsUnreadable`
//! beside `topics`.

use super::bson_ids;
use super::field_path::{self, Field};
use super::mongo::SUBSCRIBED;
use super::profile::ProfileFields;
use super::recipients::{self, CampaignRecipients};
use crate::domain::ledger::SendKey;
use crate::domain::user_id::UserId;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::{Collection, Database};
use std::sync::Arc;

use crate::domain::topics::{Preferences, Save, Standing, TopicId, Topics};
pub use crate::ports::{Change, StoreError, SubscriberError, SuppressionReason};
use crate::ports::{ChangedVia, SubscriberStore, UserStandings};

#[derive(Clone)]
pub struct Subscribers {
    db: Database,
    /// None: every campaign's recipients are ours.
    recipients: Option<Arc<CampaignRecipients>>,
}

impl Subscribers {
    /// Every campaign's recipients in our `users` collection (no campaign is looked up).
    pub fn new(db: &Database) -> Self {
        Self {
            db: db.clone(),
            recipients: None,
        }
    }

    /// Each campaign's recipients where its pinned definition says (ours without one).
    pub fn with_recipients(db: &Database, recipients: Arc<CampaignRecipients>) -> Self {
        Self {
            db: db.clone(),
            recipients: Some(recipients),
        }
    }

    /// The users of `campaign_id`'s emails.
    async fn users(&self, campaign_id: &str) -> Result<Users, SubscriberError> {
        let fields = match &self.recipients {
            Some(recipients) => recipients.of(campaign_id).await?,
            None => recipients::ours(),
        };
        Ok(Users {
            collection: self.db.collection(&fields.collection),
            fields,
        })
    }
}

/// The user's `_id` as stored, from its text form (None: no user can have it).
fn id(user_id: &str) -> Option<Bson> {
    UserId::parse(user_id).ok().map(|id| bson_ids::to_bson(&id))
}

/// One campaign's users: their collection and where their fields are.
struct Users {
    collection: Collection<Document>,
    fields: Arc<ProfileFields>,
}

impl Users {
    /// `$set` on the user matched by `filter`. Where a value on the way to a field written
    /// is not a document (a `topics` that is a string, a null parent) MongoDB refuses the
    /// dotted path (PathNotViable), and a one-click, which mail clients never retry, would
    /// fail: the paths are then made writable (`make_writable`) and the write tried once
    /// more. What still refuses it is `Lasting`, naming the field. The common case costs
    /// nothing extra.
    async fn set(&self, filter: Document, set: Document) -> Result<u64, SubscriberError> {
        match self
            .collection
            .update_one(filter.clone(), doc! { "$set": set.clone() })
            .await
        {
            Err(err) if path_not_viable(&err) => {
                let id = filter.get("_id").cloned().unwrap_or(Bson::Null);
                let written: Vec<String> = set.keys().cloned().collect();
                self.make_writable(&id, &written).await?;
                match self
                    .collection
                    .update_one(filter, doc! { "$set": set })
                    .await
                {
                    Err(err) if path_not_viable(&err) => Err(self.blocked(&id, &written).await),
                    other => Ok(other.map_err(StoreError::from)?.matched_count),
                }
            }
            other => Ok(other.map_err(StoreError::from)?.matched_count),
        }
    }

    /// The values on the way to the fields `written`, as read, made writable: a null (no
    /// value) is removed; a `topics` that is another value (a string, an array, a number,
    /// written by hand or by another tool) is moved aside, as it was, to `topicsUnreadable`,
    /// which keeps the topics without a choice of their own unreadable
    /// (`StandingFields::standing`). Each change is conditional on the value read, so a
    /// concurrent write is never moved aside. Any other value is left as it is.
    async fn make_writable(&self, id: &Bson, written: &[String]) -> Result<(), SubscriberError> {
        let user = self
            .collection
            .find_one(doc! { "_id": id.clone() })
            .projection(top_fields(written))
            .await
            .map_err(StoreError::from)?;
        let Some(user) = user else {
            return Ok(());
        };
        let standing = &self.fields.standing;
        let mut updates: Vec<(String, Bson, Document)> = Vec::new();
        for path in written {
            for (end, _) in path.match_indices('.') {
                let parent = &path[..end];
                let update = match field_path::get(&user, parent) {
                    Field::Value(Bson::Document(_)) => continue,
                    Field::Value(Bson::Null) => doc! { "$unset": { parent: "" } },
                    Field::Value(_) if parent == standing.topics => {
                        doc! { "$rename": { parent: standing.topics_unreadable.as_str() } }
                    }
                    _ => break,
                };
                let odd = field_path::get(&user, parent).value().cloned();
                let change = (parent.to_owned(), odd.unwrap_or(Bson::Null), update);
                if !updates.iter().any(|(p, _, _)| *p == change.0) {
                    updates.push(change);
                }
                break;
            }
        }
        for (parent, odd, update) in updates {
            self.collection
                .update_one(doc! { "_id": id.clone(), parent: odd }, update)
                .await
                .map_err(StoreError::from)?;
        }
        Ok(())
    }

    /// Why the fields `written` cannot be written on the user `id`: the value in the way,
    /// named with the document and the field (never the value itself).
    async fn blocked(&self, id: &Bson, written: &[String]) -> SubscriberError {
        let collection = self.fields.collection.as_str();
        let user = self
            .collection
            .find_one(doc! { "_id": id.clone() })
            .projection(top_fields(written))
            .await;
        let user = match user {
            Ok(Some(user)) => user,
            Ok(None) => return StoreError::mongo("the user vanished during the write").into(),
            Err(err) => return StoreError::from(err).into(),
        };
        let why = written
            .iter()
            .find(|path| matches!(field_path::get(&user, path), Field::Blocked { .. }))
            .map(|path| super::profile::describe(collection, &user, path, "a document"))
            .unwrap_or_else(|| {
                format!(
                    "{collection} {}: MongoDB refuses to write {}",
                    bson_ids::describe_id(&user),
                    written.join(", ")
                )
            });
        SubscriberError::Lasting(why)
    }

    async fn change(
        &self,
        user_id: &str,
        not_yet: Document,
        set: Document,
    ) -> Result<Change, SubscriberError> {
        // The text form of the id, as tokens and SES tags carry it (`crate::domain::user_id`).
        let Some(id) = id(user_id) else {
            return Ok(Change::NoSuchUser);
        };
        let mut filter = doc! { "_id": id.clone() };
        filter.extend(not_yet);
        if self.set(filter, set).await? > 0 {
            return Ok(Change::Made);
        }
        let exists = self
            .collection
            .count_documents(doc! { "_id": id })
            .limit(1)
            .await
            .map_err(StoreError::from)?
            > 0;
        Ok(if exists {
            Change::AlreadyDone
        } else {
            Change::NoSuchUser
        })
    }

    /// `topics.<id>`: where a topic's choice is written.
    fn topic_field(&self, topic: &TopicId) -> String {
        format!("{}.{topic}", self.fields.standing.topics)
    }
}

/// A projection of the top fields of `paths`: a projection of `prefs.topics` would drop a
/// `prefs` of another type, read then as missing where it is in the way.
fn top_fields(paths: &[impl AsRef<str>]) -> Document {
    field_path::projection(
        paths
            .iter()
            .map(|p| p.as_ref().split('.').next().unwrap_or_default()),
    )
}

impl UserStandings for Subscribers {
    /// One `find` by `_id`, of the fields the standing is read from.
    async fn standing(
        &self,
        key: &SendKey,
        topic: &TopicId,
    ) -> Result<Option<Standing>, SubscriberError> {
        let Some(id) = id(key.user_id()) else {
            return Ok(None);
        };
        let users = self.users(key.campaign_id()).await?;
        let standing = &users.fields.standing;
        let user = users
            .collection
            .find_one(doc! { "_id": id })
            .projection(top_fields(&standing.paths(topic)))
            .await
            .map_err(StoreError::from)?;
        Ok(user.map(|user| standing.standing(&user, topic)))
    }
}

/// `Subscribers`, connected at its first read rather than at cold start: SendEmail reads a
/// standing only for an email that waited, and its sending neither waits for MongoDB's
/// secret nor stops when it cannot be read (a read that fails retries that email alone).
pub struct LazySubscribers {
    config: crate::config::MongoConfig,
    sdk: aws_config::SdkConfig,
    app_name: &'static str,
    recipients: Arc<CampaignRecipients>,
    connected: tokio::sync::OnceCell<Subscribers>,
}

impl LazySubscribers {
    pub fn new(
        config: crate::config::MongoConfig,
        sdk: &aws_config::SdkConfig,
        app_name: &'static str,
        recipients: Arc<CampaignRecipients>,
    ) -> Self {
        Self {
            config,
            sdk: sdk.clone(),
            app_name,
            recipients,
            connected: tokio::sync::OnceCell::new(),
        }
    }
}

impl UserStandings for LazySubscribers {
    async fn standing(
        &self,
        key: &SendKey,
        topic: &TopicId,
    ) -> Result<Option<Standing>, SubscriberError> {
        let subscribers = self
            .connected
            .get_or_try_init(|| async {
                super::mongo::connect(&self.config, &self.sdk, self.app_name)
                    .await
                    .map(|db| Subscribers::with_recipients(&db, self.recipients.clone()))
                    .map_err(StoreError::mongo)
            })
            .await?;
        subscribers.standing(key, topic).await
    }
}

impl SubscriberStore for Subscribers {
    /// The user asked to receive no more of `list` (from the email of `key`).
    async fn unsubscribe(
        &self,
        key: &SendKey,
        list: &str,
        at_ms: i64,
    ) -> Result<Change, SubscriberError> {
        let users = self.users(key.campaign_id()).await?;
        let standing = &users.fields.standing;
        users
            .change(
                key.user_id(),
                doc! { standing.subscribed.as_str(): { "$ne": false } },
                doc! {
                    standing.subscribed.as_str(): false,
                    standing.beside_subscribed("unsubscribedAt"): DateTime::from_millis(at_ms),
                    standing.beside_subscribed("unsubscribedFrom"):
                        { "list": list, "campaignId": key.campaign_id() },
                },
            )
            .await
    }

    async fn leave_topic(
        &self,
        key: &SendKey,
        topic: &TopicId,
        via: ChangedVia,
        at_ms: i64,
    ) -> Result<Change, SubscriberError> {
        let users = self.users(key.campaign_id()).await?;
        users
            .change(
                key.user_id(),
                doc! { users.fields.standing.choice_field(topic): { "$ne": false } },
                doc! { users.topic_field(topic): choice(false, key, via, at_ms) },
            )
            .await
    }

    async fn preferences(
        &self,
        key: &SendKey,
        topics: &Topics,
    ) -> Result<Option<(Preferences, Option<String>)>, SubscriberError> {
        let Some(id) = id(key.user_id()) else {
            return Ok(None);
        };
        let users = self.users(key.campaign_id()).await?;
        let fields = &users.fields;
        let standing = &fields.standing;
        let mut read = vec![
            standing.subscribed.as_str(),
            standing.topics.as_str(),
            standing.topics_unreadable.as_str(),
        ];
        read.extend(fields.language.as_deref());
        let user = users
            .collection
            .find_one(doc! { "_id": id })
            .projection(top_fields(&read))
            .await
            .map_err(StoreError::from)?;
        Ok(user.map(|user| {
            let language =
                fields
                    .language
                    .as_deref()
                    .and_then(|path| match field_path::get(&user, path) {
                        Field::Value(Bson::String(language)) => Some(language.clone()),
                        _ => None,
                    });
            (standing.preferences(&user, topics), language)
        }))
    }

    async fn save_preferences(
        &self,
        key: &SendKey,
        save: &Save,
        at_ms: i64,
    ) -> Result<Change, SubscriberError> {
        let Some(id) = id(key.user_id()) else {
            return Ok(Change::NoSuchUser);
        };
        let users = self.users(key.campaign_id()).await?;
        let standing = &users.fields.standing;
        let mut set = Document::new();
        for (topic, wanted) in &save.changes {
            set.insert(
                users.topic_field(topic),
                choice(*wanted, key, ChangedVia::Page, at_ms),
            );
        }
        if save.resubscribe {
            set.insert(standing.subscribed.as_str(), true);
            set.insert(
                standing.beside_subscribed("resubscribedAt"),
                DateTime::from_millis(at_ms),
            );
            set.insert(
                standing.beside_subscribed("resubscribedFrom"),
                doc! { "campaignId": key.campaign_id() },
            );
        }
        if set.is_empty() {
            return Ok(Change::AlreadyDone);
        }
        Ok(if users.set(doc! { "_id": id }, set).await? > 0 {
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
    ) -> Result<Change, SubscriberError> {
        let users = self.users(key.campaign_id()).await?;
        let suppression = users.fields.standing.suppression.as_str();
        users
            .change(
                key.user_id(),
                doc! { suppression: { "$exists": false } },
                doc! {
                    suppression: {
                        "reason": reason.as_str(),
                        "detail": detail,
                        "campaignId": key.campaign_id(),
                        "at": DateTime::from_millis(at_ms),
                    },
                },
            )
            .await
    }
}

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

/// A topic choice as stored: in or out, when, how, from which campaign's email.
fn choice(subscribed: bool, key: &SendKey, via: ChangedVia, at_ms: i64) -> Document {
    doc! {
        SUBSCRIBED: subscribed,
        "at": DateTime::from_millis(at_ms),
        "via": via.as_str(),
        "campaignId": key.campaign_id(),
    }
}

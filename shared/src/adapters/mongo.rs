//! MongoDB: the names the adapters read and write it by (collections, fields, indexes,
//! named once here), the follows indexes' creation, and the client, built once per
//! execution environment with its pool bounded by config.
//!
//! Data model: `users {_id, email, name, subscribed: bool, locale?, timezone?, suppression?,
//! topics?}` (`topics`: `preferences`) and `follows {followerId, followeeId, createdAt:
//! date}`, where every id is a string or an ObjectId (`crate::domain::user_id` says how they
//! travel outside MongoDB, `bson_ids` converts).

use crate::config::{MongoConfig, SecretRef};
use mongodb::bson::{doc, Document};
use mongodb::options::ClientOptions;
use mongodb::{Client, Database, IndexModel};

/// The users collection: one document per person.
pub const USERS: &str = "users";
/// The follows collection: one document per follow.
pub const FOLLOWS: &str = "follows";

/// A user's email address.
pub const EMAIL: &str = "email";
/// A user's name (shown in the digests and picks of their followers).
pub const NAME: &str = "name";
/// A user's language (a BCP 47 tag), for the digest and the preference centre.
pub const LOCALE: &str = "locale";
/// The user document's IANA time zone (local-time delivery); read by the audience scan.
pub const TIMEZONE: &str = "timezone";
/// Whether the user takes email at all.
pub const SUBSCRIBED: &str = "subscribed";
/// Why an address is never emailed again (a bounce, a complaint), when it is not.
pub const SUPPRESSION: &str = "suppression";
/// When the user last unsubscribed.
pub const UNSUBSCRIBED_AT: &str = "unsubscribedAt";
/// Each topic's choice (`preferences`).
pub const TOPICS: &str = "topics";
/// Where a `topics` value that is not a document (a string, an array, a number) is moved,
/// as it was, when a choice is first written (`Subscribers`: MongoDB cannot write
/// `topics.<id>` through it). Its presence keeps every topic without a choice of its own
/// unreadable, as it was before the move: writing one choice consents to nothing else.
pub const TOPICS_UNREADABLE: &str = "topicsUnreadable";

/// A follow's follower (who follows).
pub const FOLLOWER_ID: &str = "followerId";
/// A follow's followee (who is followed: the user the digest is for).
pub const FOLLOWEE_ID: &str = "followeeId";
/// When the follow was made.
pub const CREATED_AT: &str = "createdAt";

/// Serves both the audience scan (followees in id order, window on createdAt) and the
/// per-user enrichment and picks (one followee's newest follows in the window).
pub const FOLLOWS_INDEX: &str = "followeeId_1_createdAt_1";
/// Whom a user follows among some users: the follow-back check of the picks.
pub const FOLLOW_BACK_INDEX: &str = "followerId_1_followeeId_1";

/// `FOLLOWS_INDEX`'s keys.
pub fn follows_index_keys() -> Document {
    doc! { FOLLOWEE_ID: 1, CREATED_AT: 1 }
}

/// `FOLLOW_BACK_INDEX`'s keys.
pub fn follow_back_keys() -> Document {
    doc! { FOLLOWER_ID: 1, FOLLOWEE_ID: 1 }
}

/// Creates the indexes the queries rely on (idempotent; cheap when they exist): the follows
/// index, and the follow-back index of the open-time picks (`adapters::picks`); at
/// provisioning and deploy time (`mailctl provision`, `mailctl create-indexes`), never at a
/// function's cold start.
pub async fn create_indexes(db: &Database) -> mongodb::error::Result<()> {
    let started = std::time::Instant::now();
    for (keys, name) in [
        (follows_index_keys(), FOLLOWS_INDEX),
        (follow_back_keys(), FOLLOW_BACK_INDEX),
    ] {
        let index = IndexModel::builder()
            .keys(keys)
            .options(
                mongodb::options::IndexOptions::builder()
                    .name(name.to_string())
                    .build(),
            )
            .build();
        db.collection::<Document>(FOLLOWS)
            .create_index(index)
            .await?;
    }
    tracing::info!(
        duration_ms = started.elapsed().as_millis() as u64,
        "follows indexes created (or there already)"
    );
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum MongoConnectError {
    #[error(transparent)]
    Secret(#[from] super::secrets::SecretError),
    #[error("MONGODB_URI_SECRET_ID ({secret}): {detail}")]
    SecretValue { secret: String, detail: String },
    #[error("MongoDB URI ({uri}): {detail}")]
    Uri { uri: String, detail: String },
}

/// The URI itself: read from Secrets Manager once at init, or given directly.
async fn resolve_uri(
    uri: &SecretRef,
    sdk: &aws_config::SdkConfig,
) -> Result<String, MongoConnectError> {
    let value = super::secrets::resolve(uri, "MONGODB_URI_SECRET_ID", sdk).await?;
    let SecretRef::Secret(secret) = uri else {
        return Ok(value);
    };
    // Either the URI itself, or JSON with a "uri" field.
    if value.trim_start().starts_with('{') {
        let error = |detail: &str| MongoConnectError::SecretValue {
            secret: secret.clone(),
            detail: detail.to_owned(),
        };
        let json: serde_json::Value = serde_json::from_str(&value)
            .map_err(|_| error("the secret is neither a URI nor valid JSON"))?;
        return json
            .get("uri")
            .and_then(|u| u.as_str())
            .map(str::to_owned)
            .ok_or_else(|| error("the secret's JSON has no \"uri\" string"));
    }
    Ok(value.trim().to_owned())
}

/// The URI with any password replaced and its options hidden (they can carry credentials:
/// `authMechanismProperties=AWS_SESSION_TOKEN:...`, `tlsCertificateKeyFilePassword=...`),
/// safe for logs and errors, which Lambda also returns to the caller of a failed init.
pub fn redact_uri(uri: &str) -> String {
    let (uri, options) = match uri.split_once('?') {
        Some((base, _)) => (base, "?***"),
        None => (uri, ""),
    };
    let base = match (uri.find("://"), uri.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &uri[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &uri[..scheme + 3], &uri[at..])
        }
        _ => uri.to_owned(),
    };
    format!("{base}{options}")
}

pub async fn connect(
    config: &MongoConfig,
    sdk: &aws_config::SdkConfig,
    app_name: &str,
) -> Result<Database, MongoConnectError> {
    let uri = resolve_uri(&config.uri, sdk).await?;
    let invalid = |detail: String| MongoConnectError::Uri {
        uri: redact_uri(&uri),
        detail,
    };
    let mut options = ClientOptions::parse(&uri).await.map_err(|e| {
        invalid(format!(
            "cannot be parsed ({}); expected mongodb://host:port/...",
            e.kind
        ))
    })?;
    options.max_pool_size = Some(config.max_pool_size);
    options.app_name = Some(app_name.to_owned());
    options.command_event_handler = Some(crate::runtime::metering::mongo_command_monitor());
    let client = Client::with_options(options).map_err(|e| invalid(e.to_string()))?;
    Ok(client.database(&config.database))
}

impl From<mongodb::error::Error> for crate::ports::StoreError {
    fn from(err: mongodb::error::Error) -> Self {
        Self::mongo(err)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact_uri("mongodb+srv://app:s3cret@cluster.example.net/db"),
            "mongodb+srv://app:***@cluster.example.net/db"
        );
        assert_eq!(
            super::redact_uri("mongodb://127.0.0.1:1/"),
            "mongodb://127.0.0.1:1/"
        );
        // Options can carry credentials too, and an '@' of theirs is not the host's.
        assert_eq!(
            super::redact_uri(
                "mongodb://app:s3cret@h:27017/db?authMechanism=MONGODB-AWS\
                 &authMechanismProperties=AWS_SESSION_TOKEN:t0ken@x"
            ),
            "mongodb://app:***@h:27017/db?***"
        );
    }
}

//! Enrichment: everything one user's email needs, read afresh from MongoDB (the queue message
//! is trusted for nothing but the user id and the window).

use super::{window_filter, FOLLOWS, USERS};
use crate::adapters::bson_ids as ids;
use crate::campaign::Window;
use crate::digest::{Digest, Enrichment, SkipReason};
use crate::user_id::UserId;
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::Database;
use std::collections::{HashMap, HashSet};

/// How many follower ids are looked up per names query: most users have a handful of new
/// followers, so the first page usually settles both the names and the count.
const NAMES_PAGE: usize = 10;

/// Reads the user, counts the window's distinct new followers and names the newest `shown`
/// of them who can be named (a follower whose user document is gone, or has no name, is
/// counted but not named, and the next one is named in their place).
pub(super) async fn enrich(
    db: &Database,
    user_id: &UserId,
    window: &Window,
    shown: u32,
) -> mongodb::error::Result<Enrichment> {
    let users = db.collection::<Document>(USERS);
    let Some(user) = users
        .find_one(doc! { "_id": ids::to_bson(user_id) })
        .await?
    else {
        return Ok(Enrichment::Skip(SkipReason::Vanished));
    };
    let profile = match Profile::read(&user) {
        Ok(Ok(profile)) => profile,
        Ok(Err(reason)) => return Ok(Enrichment::Skip(reason)),
        Err(detail) => {
            // Names the collection, the document and the field; never the address itself.
            tracing::warn!(%detail, "user skipped: a field of the wrong type");
            return Ok(Enrichment::Skip(SkipReason::InvalidDocument));
        }
    };

    let window_follows =
        doc! { "followeeId": ids::to_bson(user_id), "createdAt": window_filter(window) };
    // No hint: equality on followeeId leads the planner to the index on its own, and a
    // hint makes some servers (SecantusDB) scan the whole index instead of a range.
    let mut follows = db
        .collection::<Document>(FOLLOWS)
        .find(window_follows.clone())
        .sort(doc! { "createdAt": -1 })
        .projection(doc! { "_id": 1, "followerId": 1 })
        .await?;
    let mut seen: HashSet<UserId> = HashSet::new();
    let mut recent: Vec<String> = Vec::new();
    let mut exhausted = false;
    while recent.len() < shown as usize && !exhausted {
        // The next page of distinct followers, newest first (a duplicate follow is the same
        // follower: counted and named once, at their newest follow).
        let mut page: Vec<UserId> = Vec::with_capacity(NAMES_PAGE);
        while page.len() < NAMES_PAGE {
            let Some(follow) = follows.try_next().await? else {
                exhausted = true;
                break;
            };
            match follow.get("followerId").and_then(ids::from_bson) {
                Some(id) if seen.insert(id.clone()) => page.push(id),
                Some(_) => {}
                None => tracing::warn!(
                    detail = %ids::bad_field(FOLLOWS, &follow, "followerId", "a string or an ObjectId"),
                    "follow skipped: not counted"
                ),
            }
        }
        if page.is_empty() {
            break;
        }
        let names = names(db, &page).await?;
        recent.extend(
            page.iter()
                .filter_map(|id| names.get(id).cloned())
                .take(shown as usize - recent.len()),
        );
    }
    // The follows read so far are all there are, or the rest are counted by the server.
    let new_followers = if exhausted {
        seen.len() as u64
    } else {
        distinct_followers(db, window_follows).await?
    };
    if new_followers == 0 {
        return Ok(Enrichment::Skip(SkipReason::NoNewFollowers));
    }
    Ok(Enrichment::Ready(Digest {
        user_id: user_id.to_string(),
        email: profile.email,
        name: profile.name.unwrap_or_else(|| "there".into()),
        locale: profile.locale,
        new_followers,
        recent,
    }))
}

/// The names of those of `ids` whose user document exists and has one.
async fn names(db: &Database, ids: &[UserId]) -> mongodb::error::Result<HashMap<UserId, String>> {
    let wanted: Vec<Bson> = ids.iter().map(ids::to_bson).collect();
    db.collection::<Document>(USERS)
        .find(doc! { "_id": { "$in": wanted } })
        .projection(doc! { "name": 1 })
        .await?
        .try_filter_map(|d| async move {
            let id = d.get("_id").and_then(ids::from_bson);
            let name = match d.get("name") {
                Some(Bson::String(n)) if !n.trim().is_empty() => Some(n.clone()),
                _ => None,
            };
            Ok(id.zip(name))
        })
        .try_collect()
        .await
}

/// How many distinct followers with a usable id follow in the window.
async fn distinct_followers(
    db: &Database,
    mut window_follows: Document,
) -> mongodb::error::Result<u64> {
    window_follows.insert(
        "followerId",
        doc! { "$type": ["string", "objectId"], "$ne": "" },
    );
    let pipeline = [
        doc! { "$match": window_follows },
        doc! { "$group": { "_id": "$followerId" } },
        doc! { "$count": "n" },
    ];
    let mut counted = db
        .collection::<Document>(FOLLOWS)
        .aggregate(pipeline)
        .await?;
    Ok(match counted.try_next().await? {
        Some(d) => match d.get("n") {
            Some(Bson::Int32(n)) => *n as u64,
            Some(Bson::Int64(n)) => *n as u64,
            _ => 0,
        },
        None => 0,
    })
}

/// What the email needs from the user's own document.
struct Profile {
    email: String,
    name: Option<String>,
    locale: Option<String>,
}

impl Profile {
    /// The profile, a reason to send nothing, or (Err) a one-line description of the field
    /// that holds the wrong type.
    fn read(user: &Document) -> Result<Result<Self, SkipReason>, String> {
        let bad = |field: &str, expected: &str| ids::bad_field(USERS, user, field, expected);
        match user.get("subscribed") {
            Some(Bson::Boolean(true)) => {}
            None | Some(Bson::Null | Bson::Boolean(false)) => {
                return Ok(Err(SkipReason::Unsubscribed))
            }
            Some(_) => return Err(bad("subscribed", "true or false")),
        }
        // Any suppression (permanent bounce, complaint) means never again, as in GetUsers.
        if user.contains_key("suppression") {
            return Ok(Err(SkipReason::Suppressed));
        }
        let email = match optional_text(user, "email") {
            Ok(Some(email)) => email,
            Ok(None) => return Ok(Err(SkipReason::NoAddress)),
            Err(()) => return Err(bad("email", "a string")),
        };
        let name = optional_text(user, "name").map_err(|()| bad("name", "a string"))?;
        let locale = optional_text(user, "locale").map_err(|()| bad("locale", "a string"))?;
        Ok(Ok(Self {
            email,
            name,
            locale,
        }))
    }
}

/// A string field as stored; None when missing, null or blank; Err for any other type.
fn optional_text(doc: &Document, field: &str) -> Result<Option<String>, ()> {
    match doc.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

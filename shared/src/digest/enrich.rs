//! Enrichment: everything one user's email needs, read afresh from MongoDB (the queue message
//! is trusted for nothing but the user id and the window).

use super::{window_filter, FOLLOWS, USERS};
use crate::campaign::Window;
use futures::TryStreamExt;
use mongodb::bson::doc;
use mongodb::Database;
use serde::Deserialize;
use std::collections::HashMap;

#[derive(Deserialize)]
struct UserDoc {
    #[serde(rename = "_id")]
    id: String,
    email: Option<String>,
    name: Option<String>,
    subscribed: Option<bool>,
    locale: Option<String>,
    /// Set when a permanent bounce or a complaint means this address must not be emailed.
    suppression: Option<mongodb::bson::Bson>,
}

#[derive(Deserialize)]
struct FollowDoc {
    #[serde(rename = "followerId")]
    follower_id: String,
}

#[derive(Deserialize)]
struct NameDoc {
    #[serde(rename = "_id")]
    id: String,
    name: Option<String>,
}

/// What one user's email is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct Digest {
    pub user_id: String,
    pub email: String,
    pub name: String,
    /// The user's locale as stored (the renderer picks the closest it has templates for).
    pub locale: Option<String>,
    pub new_followers: u64,
    /// Names of the newest followers in the window, newest first.
    pub recent: Vec<String>,
}

/// Why a user of the audience gets no email after all (acknowledged and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SkipReason {
    Vanished,
    Unsubscribed,
    Suppressed,
    NoAddress,
    NoNewFollowers,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vanished => "vanished",
            Self::Unsubscribed => "unsubscribed",
            Self::Suppressed => "suppressed",
            Self::NoAddress => "no_address",
            Self::NoNewFollowers => "no_new_followers",
        }
    }
}

#[derive(Debug, PartialEq)]
pub enum Enrichment {
    Ready(Digest),
    Skip(SkipReason),
}

/// Reads the user, counts the window's new followers and names the newest `shown` of them.
pub async fn enrich(
    db: &Database,
    user_id: &str,
    window: &Window,
    shown: u32,
) -> mongodb::error::Result<Enrichment> {
    let users = db.collection::<UserDoc>(USERS);
    let Some(user) = users.find_one(doc! { "_id": user_id }).await? else {
        return Ok(Enrichment::Skip(SkipReason::Vanished));
    };
    if user.subscribed != Some(true) {
        return Ok(Enrichment::Skip(SkipReason::Unsubscribed));
    }
    if user.suppression.is_some() {
        return Ok(Enrichment::Skip(SkipReason::Suppressed));
    }
    let Some(email) = user.email.filter(|e| !e.trim().is_empty()) else {
        return Ok(Enrichment::Skip(SkipReason::NoAddress));
    };

    let follows = db.collection::<FollowDoc>(FOLLOWS);
    let filter = doc! { "followeeId": user_id, "createdAt": window_filter(window) };
    // No hint: equality on followeeId leads the planner to the index on its own, and a
    // hint makes some servers (SecantusDB) scan the whole index instead of a range.
    let newest: Vec<FollowDoc> = follows
        .find(filter.clone())
        .sort(doc! { "createdAt": -1 })
        .limit(i64::from(shown))
        .projection(doc! { "_id": 0, "followerId": 1 })
        .await?
        .try_collect()
        .await?;
    // Only count when the newest page was full: most users have a handful of followers.
    let new_followers = if newest.len() < shown as usize {
        newest.len() as u64
    } else {
        follows.count_documents(filter).await?
    };
    if new_followers == 0 {
        return Ok(Enrichment::Skip(SkipReason::NoNewFollowers));
    }

    let ids: Vec<&str> = newest.iter().map(|f| f.follower_id.as_str()).collect();
    let names: HashMap<String, String> = db
        .collection::<NameDoc>(USERS)
        .find(doc! { "_id": { "$in": ids.clone() } })
        .projection(doc! { "name": 1 })
        .await?
        .try_filter_map(|d| async move { Ok(d.name.map(|n| (d.id, n))) })
        .try_collect()
        .await?;
    // Followers who deleted their account since still count, but are not named.
    let recent = ids
        .iter()
        .filter_map(|id| names.get(*id).cloned())
        .collect();

    Ok(Enrichment::Ready(Digest {
        user_id: user.id,
        email,
        name: user.name.unwrap_or_else(|| "there".into()),
        locale: user.locale,
        new_followers,
        recent,
    }))
}

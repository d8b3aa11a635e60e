//! Enrichment: everything one user's email needs, read afresh from MongoDB (the queue message
//! is trusted for nothing but the user id and the window).

use super::window_filter;
use crate::adapters::bson_ids as ids;
use crate::adapters::mongo::{CREATED_AT, FOLLOWEE_ID, FOLLOWER_ID, FOLLOWS, NAME, USERS};
use crate::adapters::profile::{Profile, ProfileFields};
use crate::domain::campaign::Window;
use crate::domain::digest::{Digest, Enrichment, SkipReason};
use crate::domain::text::printable_name;
use crate::domain::topics::Topic;
use crate::domain::user_id::UserId;
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::Database;
use std::collections::HashMap;

/// How many of a user's newest distinct followers the batch query returns: most users have
/// a handful of new followers, so these settle both the names and the count; a user whose
/// first ten cannot all be named reads further pages on their own.
const NAMES_PAGE: usize = 10;

/// The enrichment of several users of one window in three round trips whatever their number
/// (one SQS batch): their documents (`$in`), their new followers counted and the newest ten
/// of each (one aggregation over the follows index), and those followers' names (`$in`).
/// The follower count is of distinct followers with a usable id; the newest `shown` who can
/// be named are named (a follower whose user document is gone, or has no name, is counted
/// but not named, and the next one is named in their place). Ties in time are broken by
/// follower id, so a user's email is the same whichever batch they are read in.
pub(crate) async fn enrich_many(
    db: &Database,
    user_ids: &[UserId],
    window: &Window,
    topic: &Topic,
    shown: u32,
) -> mongodb::error::Result<Vec<Enrichment>> {
    let profiles = profiles(db, user_ids, topic).await?;
    let sendable: Vec<UserId> = user_ids
        .iter()
        .zip(&profiles)
        .filter(|(_, p)| p.is_ok())
        .map(|(id, _)| id.clone())
        .collect();
    let followers = newest_followers(db, &sendable, window, 0).await?;
    let candidates: Vec<UserId> = followers
        .values()
        .flat_map(|(_, newest)| newest.iter().cloned())
        .collect();
    let named = names(db, &candidates).await?;

    let mut enrichments = Vec::with_capacity(user_ids.len());
    for (user_id, profile) in user_ids.iter().zip(profiles) {
        let profile = match profile {
            Ok(profile) => profile,
            Err(reason) => {
                enrichments.push(Enrichment::Skip(reason));
                continue;
            }
        };
        let (count, newest) = followers.get(user_id).cloned().unwrap_or_default();
        if count == 0 {
            enrichments.push(Enrichment::Skip(SkipReason::NoNewFollowers));
            continue;
        }
        let followers = Followers {
            count,
            newest: &newest,
            named: &named,
        };
        let recent = recent_names(db, user_id, window, followers, shown).await?;
        enrichments.push(Enrichment::Ready(Digest {
            user_id: user_id.to_string(),
            email: profile.email,
            name: profile.name.unwrap_or_else(|| "there".into()),
            locale: profile.language,
            new_followers: count,
            recent,
        }));
    }
    Ok(enrichments)
}

/// Each user's profile, in their order, or why they get nothing: one `$in` over their
/// documents.
async fn profiles(
    db: &Database,
    user_ids: &[UserId],
    topic: &Topic,
) -> mongodb::error::Result<Vec<Result<Profile, SkipReason>>> {
    let wanted: Vec<Bson> = user_ids.iter().map(ids::to_bson).collect();
    let documents: HashMap<UserId, Document> = db
        .collection::<Document>(USERS)
        .find(doc! { "_id": { "$in": wanted } })
        .await?
        .try_filter_map(
            |d| async move { Ok(d.get("_id").and_then(ids::from_bson).map(|id| (id, d))) },
        )
        .try_collect()
        .await?;
    Ok(user_ids
        .iter()
        .map(|id| {
            let Some(user) = documents.get(id) else {
                return Err(SkipReason::Vanished);
            };
            Profile::read(user, ProfileFields::users(), topic)
        })
        .collect())
}

/// One user's new followers as the batch read them: how many, the first page of the
/// newest, and the names found among the batch's.
struct Followers<'a> {
    count: u64,
    newest: &'a [UserId],
    named: &'a HashMap<UserId, String>,
}

/// The newest `shown` followers who can be named: from the batch's first page, then, when
/// fewer were named than wanted and the user has more followers, from further pages of
/// their own.
async fn recent_names(
    db: &Database,
    user_id: &UserId,
    window: &Window,
    followers: Followers<'_>,
    shown: u32,
) -> mongodb::error::Result<Vec<String>> {
    let mut recent: Vec<String> = followers
        .newest
        .iter()
        .filter_map(|id| followers.named.get(id).cloned())
        .take(shown as usize)
        .collect();
    // Fewer named than wanted among the first page, and more followers than it held.
    let mut skip = followers.newest.len();
    while recent.len() < shown as usize && (skip as u64) < followers.count {
        let page = newest_followers(db, std::slice::from_ref(user_id), window, skip).await?;
        let page = page
            .get(user_id)
            .map(|(_, p)| p.clone())
            .unwrap_or_default();
        if page.is_empty() {
            break;
        }
        skip += page.len();
        let page_names = names(db, &page).await?;
        recent.extend(
            page.iter()
                .filter_map(|id| page_names.get(id).cloned())
                .take(shown as usize - recent.len()),
        );
    }
    Ok(recent)
}

/// For each of `followees`: how many distinct followers (with a usable id, themselves
/// excepted) follow them in the window, and up to `NAMES_PAGE` of those followers, newest follow first, after the first
/// `skip`. One aggregation for all of them.
async fn newest_followers(
    db: &Database,
    followees: &[UserId],
    window: &Window,
    skip: usize,
) -> mongodb::error::Result<HashMap<UserId, (u64, Vec<UserId>)>> {
    if followees.is_empty() {
        return Ok(HashMap::new());
    }
    let wanted: Vec<Bson> = followees.iter().map(ids::to_bson).collect();
    let pipeline = [
        doc! { "$match": {
            FOLLOWEE_ID: { "$in": wanted },
            CREATED_AT: window_filter(window),
            FOLLOWER_ID: { "$type": ["string", "objectId"], "$ne": "" },
        } },
        // `$type` and `$in` above also match an array holding such a value: only a follow
        // whose ids are themselves a string or an ObjectId counts, and following oneself
        // is not a new follower.
        doc! { "$match": { "$expr": { "$and": [
            { "$in": [{ "$type": "$followerId" }, ["string", "objectId"]] },
            { "$in": [{ "$type": "$followeeId" }, ["string", "objectId"]] },
            { "$ne": ["$followerId", "$followeeId"] },
        ] } } },
        // One entry per (followee, follower), at the follower's newest follow.
        doc! { "$group": {
            "_id": { "followee": "$followeeId", "follower": "$followerId" },
            "newest": { "$max": "$createdAt" },
        } },
        doc! { "$sort": { "newest": -1, "_id.follower": 1 } },
        doc! { "$group": {
            "_id": "$_id.followee",
            "count": { "$sum": 1 },
            "followers": { "$push": "$_id.follower" },
        } },
        doc! { "$project": {
            "count": 1,
            "followers": { "$slice": ["$followers", skip as i64, NAMES_PAGE as i64] },
        } },
    ];
    db.collection::<Document>(FOLLOWS)
        .aggregate(pipeline)
        .await?
        .try_filter_map(|d| async move {
            let Some(followee) = d.get("_id").and_then(ids::from_bson) else {
                return Ok(None);
            };
            let count = match d.get("count") {
                Some(Bson::Int32(n)) => *n as u64,
                Some(Bson::Int64(n)) => *n as u64,
                _ => 0,
            };
            let followers = match d.get("followers") {
                Some(Bson::Array(a)) => a.iter().filter_map(ids::from_bson).collect(),
                _ => Vec::new(),
            };
            Ok(Some((followee, (count, followers))))
        })
        .try_collect()
        .await
}

/// The names of those of `wanted` whose user document exists and has one.
async fn names(
    db: &Database,
    wanted: &[UserId],
) -> mongodb::error::Result<HashMap<UserId, String>> {
    if wanted.is_empty() {
        return Ok(HashMap::new());
    }
    let wanted: Vec<Bson> = wanted.iter().map(ids::to_bson).collect();
    db.collection::<Document>(USERS)
        .find(doc! { "_id": { "$in": wanted } })
        .projection(doc! { NAME: 1 })
        .await?
        .try_filter_map(|d| async move {
            let id = d.get("_id").and_then(ids::from_bson);
            let name = match d.get(NAME) {
                Some(Bson::String(n)) => printable_name(n),
                _ => None,
            };
            Ok(id.zip(name))
        })
        .try_collect()
        .await
}

//! An in-memory user directory with the MongoDB adapter's rules, for the digest's
//! definition: the audience is the users followed in the window whom the topic's rule lets
//! in, in id order (those left out counted by reason); their data counts distinct followers
//! and names the newest nameable ones.

use crate::domain::campaign::Window;
use crate::domain::definition::{EmailData, Prepared};
use crate::domain::digest::{OddFollow, OddFollows, SkipReason};
use crate::domain::local_time::ZoneField;
use crate::domain::text::{printable, printable_name};
use crate::domain::topics::{
    Choice, Exclusion, ExclusionCounts, Overall, Standing, Topic, TopicId,
};
use crate::domain::user_id::UserId;
use crate::ports::{
    AudienceMember, AudienceScan, DefinitionCampaign, PrepareError, StoreError, UserDirectory,
};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Mutex;
use time::OffsetDateTime;

/// A user document as the directory reads it.
#[derive(Clone, Debug)]
pub struct User {
    pub email: Option<String>,
    pub name: Option<String>,
    pub locale: Option<String>,
    pub subscribed: bool,
    pub suppressed: bool,
    /// A field holds the wrong type.
    pub invalid: bool,
    /// The IANA time zone field.
    pub timezone: Option<String>,
    /// Topics chosen explicitly: in (true) or out.
    pub topics: BTreeMap<TopicId, bool>,
}

impl User {
    fn standing(&self, topic: &Topic) -> Option<Exclusion> {
        Standing {
            overall: if self.subscribed {
                Overall::Subscribed
            } else {
                Overall::Unsubscribed
            },
            suppressed: self.suppressed,
            choice: match self.topics.get(&topic.id) {
                Some(true) => Choice::In,
                Some(false) => Choice::Out,
                None => Choice::Unset,
            },
        }
        .exclusion(topic)
    }
}

impl User {
    pub fn named(name: &str, email: &str) -> Self {
        Self {
            email: Some(email.to_owned()),
            name: Some(name.to_owned()),
            locale: None,
            subscribed: true,
            suppressed: false,
            invalid: false,
            timezone: None,
            topics: BTreeMap::new(),
        }
    }
}

#[derive(Default)]
pub struct MemoryDirectory {
    users: BTreeMap<UserId, User>,
    /// (follower, followee, when)
    follows: Vec<(UserId, UserId, OffsetDateTime)>,
    odd_follows: u64,
    /// Users whose reads fail as if the store did not answer.
    unreachable: Mutex<HashSet<UserId>>,
}

impl MemoryDirectory {
    pub fn user(mut self, id: &str, user: User) -> Self {
        self.users.insert(UserId::parse(id).unwrap(), user);
        self
    }

    pub fn follow(mut self, follower: &str, followee: &str, at: OffsetDateTime) -> Self {
        let id = |s: &str| UserId::parse(s).unwrap();
        self.follows.push((id(follower), id(followee), at));
        self
    }

    /// A user whose id is not given in its text form (one a store may hold, though it cannot
    /// travel in a message), followed once at `at` by `follower`.
    pub fn followed_user(
        mut self,
        id: UserId,
        user: User,
        follower: &str,
        at: OffsetDateTime,
    ) -> Self {
        self.follows
            .push((UserId::parse(follower).unwrap(), id.clone(), at));
        self.users.insert(id, user);
        self
    }

    pub fn odd_follows(mut self, n: u64) -> Self {
        self.odd_follows = n;
        self
    }

    /// Reads of this user fail until further notice.
    pub fn unreachable(&self, id: &str) {
        crate::runtime::lock(&self.unreachable).insert(UserId::parse(id).unwrap());
    }

    /// Followers of `followee` in the window, newest follow first, each once; following
    /// oneself is not a new follower.
    fn followers(&self, followee: &UserId, window: &Window) -> Vec<UserId> {
        let mut follows: Vec<_> = self
            .follows
            .iter()
            .filter(|(_, to, at)| to == followee && window.since <= *at && *at < window.until)
            .collect();
        // Newest first, ties by follower id, as the digest's query sorts them.
        follows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        let mut seen = HashSet::new();
        follows
            .into_iter()
            .filter(|(from, _, _)| from != followee && seen.insert(from.clone()))
            .map(|(from, _, _)| from.clone())
            .collect()
    }
}

/// The audience a definition's query gives, or the fault of a definition the in-memory
/// directory cannot answer.
pub struct MemoryAudience {
    members: VecDeque<AudienceMember>,
    excluded: ExclusionCounts,
    fault: Option<String>,
}

impl AudienceScan for MemoryAudience {
    async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
        match &self.fault {
            Some(fault) => Err(StoreError(fault.clone())),
            None => Ok(self.members.pop_front()),
        }
    }

    fn excluded(&self) -> &ExclusionCounts {
        &self.excluded
    }

    fn definition_fault(&self) -> Option<&str> {
        self.fault.as_deref()
    }
}

/// The in-memory directory holds users and follows, and answers the digest's queries
/// (`campaigns/digest`: an audience over `follows` by `followeeId`, a `followers` data
/// query) by their meaning, not by running them: MongoDB runs them on the local stack.
fn digest_shaped(campaign: &DefinitionCampaign) -> Result<u32, String> {
    let definition = &campaign.loaded.definition;
    let shaped = definition.audience.collection == "follows"
        && definition.audience_by == "followeeId"
        && definition.data.keys().eq(["followers"]);
    if !shaped {
        return Err(format!(
            "definition {}: the in-memory directory answers only the digest's queries (users and follows); run it against MongoDB",
            definition.name
        ));
    }
    Ok(definition
        .params
        .get("shown")
        .and_then(serde_json::Value::as_u64)
        .map_or(3, |n| n.min(u64::from(u32::MAX)) as u32))
}

impl UserDirectory for MemoryDirectory {
    type DefinitionAudience = MemoryAudience;

    /// The users followed in the window (by anyone: the data query counts who is left), in
    /// id order, the topic's rule applied, as the digest's audience query and the users'
    /// merge join give them.
    fn definition_audience(
        &self,
        campaign: &DefinitionCampaign,
        after: Option<UserId>,
    ) -> MemoryAudience {
        let mut excluded = ExclusionCounts::default();
        if let Err(fault) = digest_shaped(campaign) {
            return MemoryAudience {
                members: VecDeque::new(),
                excluded,
                fault: Some(fault),
            };
        }
        let window = &campaign.window;
        let followed: HashSet<&UserId> = self
            .follows
            .iter()
            .filter(|(_, _, at)| window.since <= *at && *at < window.until)
            .map(|(_, followee, _)| followee)
            .collect();
        let members = self
            .users
            .iter()
            .filter(|(id, _)| after.as_ref().is_none_or(|after| *id > after))
            .filter(|(id, _)| followed.contains(id))
            .filter(|(_, user)| match user.standing(&campaign.topic) {
                Some(exclusion) => {
                    excluded.add(exclusion);
                    false
                }
                None => true,
            })
            .map(|(id, user)| AudienceMember {
                id: id.clone(),
                zone: match &user.timezone {
                    Some(zone) => ZoneField::Text(zone.clone()),
                    None => ZoneField::Missing,
                },
            })
            .collect();
        MemoryAudience {
            members,
            excluded,
            fault: None,
        }
    }

    /// Each user's document and the digest's `followers` data (distinct followers in the
    /// window but themselves, the newest `shown` nameable ones named), skipped as MongoDB's
    /// adapter skips them.
    async fn prepare(
        &self,
        campaign: &DefinitionCampaign,
        user_ids: &[UserId],
    ) -> Result<Vec<Prepared>, PrepareError> {
        let shown = digest_shaped(campaign).map_err(PrepareError::Definition)?;
        let unreachable = crate::runtime::lock(&self.unreachable).clone();
        if user_ids.iter().any(|id| unreachable.contains(id)) {
            return Err(StoreError("connection refused".into()).into());
        }
        Ok(user_ids
            .iter()
            .map(|id| self.prepared(id, campaign, shown))
            .collect())
    }

    async fn odd_follows(&self, _window: &Window, limit: i64) -> Result<OddFollows, StoreError> {
        let described = (0..self.odd_follows.min(limit as u64))
            .map(|i| OddFollow {
                reason: format!("follows f{i}: followeeId is int"),
            })
            .collect();
        Ok(OddFollows {
            followees: self.odd_follows,
            followers: 0,
            described,
        })
    }

    async fn check_indexes(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl MemoryDirectory {
    fn prepared(&self, user_id: &UserId, campaign: &DefinitionCampaign, shown: u32) -> Prepared {
        let skip = |reason: SkipReason| Prepared::Skip(reason.as_str().to_owned());
        let Some(user) = self.users.get(user_id) else {
            return skip(SkipReason::Vanished);
        };
        // In `Profile::read`'s order: the standing, then the fields' types, then the address.
        match user.standing(&campaign.topic) {
            None => {}
            Some(Exclusion::Suppressed) => return skip(SkipReason::Suppressed),
            Some(Exclusion::LeftTopic) => return skip(SkipReason::LeftTopic),
            Some(Exclusion::Unsubscribed) => return skip(SkipReason::Unsubscribed),
            Some(Exclusion::Unreadable) => return skip(SkipReason::InvalidDocument),
        }
        if user.invalid {
            return skip(SkipReason::InvalidDocument);
        }
        let Some(email) = user.email.clone().filter(|e| !e.trim().is_empty()) else {
            return skip(SkipReason::NoAddress);
        };
        let followers = self.followers(user_id, &campaign.window);
        let followers_data = if followers.is_empty() {
            serde_json::Value::Null
        } else {
            let names: Vec<String> = followers
                .iter()
                .filter_map(|id| {
                    (self.users.get(id)?.name.as_deref())
                        .filter(|name| printable_name(name).is_some())
                        .map(printable)
                })
                .take(shown as usize)
                .collect();
            serde_json::json!({
                "_id": user_id.to_string(),
                "count": followers.len(),
                "names": names,
            })
        };
        let data: BTreeMap<String, serde_json::Value> =
            [("followers".to_owned(), followers_data)].into();
        for rule in &campaign.loaded.definition.skip {
            let empty = data.get(&rule.data).is_none_or(serde_json::Value::is_null);
            if empty {
                return Prepared::Skip(rule.reason.clone());
            }
        }
        Prepared::Ready(EmailData {
            user_id: user_id.clone(),
            email,
            name: user.name.as_deref().and_then(printable_name),
            language: user.locale.clone(),
            zone: user.timezone.clone(),
            data,
        })
    }
}

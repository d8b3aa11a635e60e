//! An in-memory user directory with the MongoDB adapter's rules (`adapters::directory`):
//! the audience is the users with a follow in the window whom the topic's rule lets in, in
//! id order (those left out counted by reason); a digest counts distinct followers and names the newest nameable ones.

use crate::domain::campaign::Window;
use crate::domain::digest::{Digest, Enrichment, OddFollow, OddFollows, SkipReason};
use crate::domain::local_time::ZoneField;
use crate::domain::text::printable_name;
use crate::domain::topics::{
    Choice, Exclusion, ExclusionCounts, Overall, Standing, Topic, TopicId,
};
use crate::domain::user_id::UserId;
use crate::ports::{AudienceMember, AudienceScan, StoreError, UserDirectory};
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
        follows.sort_by_key(|f| std::cmp::Reverse(f.2));
        let mut seen = HashSet::new();
        follows
            .into_iter()
            .filter(|(from, _, _)| from != followee && seen.insert(from.clone()))
            .map(|(from, _, _)| from.clone())
            .collect()
    }
}

pub struct MemoryAudience(VecDeque<AudienceMember>, ExclusionCounts);

impl AudienceScan for MemoryAudience {
    async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
        Ok(self.0.pop_front())
    }

    fn excluded(&self) -> &ExclusionCounts {
        &self.1
    }
}

impl UserDirectory for MemoryDirectory {
    type Audience = MemoryAudience;
    type DefinitionAudience = crate::ports::NoDefinitions;

    fn definition_audience(
        &self,
        _campaign: &crate::ports::DefinitionCampaign,
        _after: Option<UserId>,
    ) -> crate::ports::NoDefinitions {
        crate::ports::NoDefinitions
    }

    async fn prepare(
        &self,
        _campaign: &crate::ports::DefinitionCampaign,
        _user_ids: &[UserId],
    ) -> Result<Vec<crate::domain::definition::Prepared>, crate::ports::PrepareError> {
        Err(crate::ports::PrepareError::Definition(
            crate::ports::NO_DEFINITIONS.into(),
        ))
    }

    fn audience(&self, window: &Window, topic: &Topic, after: Option<UserId>) -> MemoryAudience {
        let mut excluded = ExclusionCounts::default();
        let members = self
            .users
            .iter()
            .filter(|(id, _)| after.as_ref().is_none_or(|after| *id > after))
            .filter(|(id, _)| !self.followers(id, window).is_empty())
            .filter(|(_, user)| match user.standing(topic) {
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
        MemoryAudience(members, excluded)
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

    async fn enrich(
        &self,
        user_id: &UserId,
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> Result<Enrichment, StoreError> {
        if crate::runtime::lock(&self.unreachable).contains(user_id) {
            return Err(StoreError("connection refused".into()));
        }
        let skip = |reason| Ok(Enrichment::Skip(reason));
        let Some(user) = self.users.get(user_id) else {
            return skip(SkipReason::Vanished);
        };
        if user.invalid {
            return skip(SkipReason::InvalidDocument);
        }
        match user.standing(topic) {
            None => {}
            Some(Exclusion::Suppressed) => return skip(SkipReason::Suppressed),
            Some(Exclusion::LeftTopic) => return skip(SkipReason::LeftTopic),
            Some(Exclusion::Unsubscribed | Exclusion::Unreadable) => {
                return skip(SkipReason::Unsubscribed)
            }
        }
        let Some(email) = user.email.clone() else {
            return skip(SkipReason::NoAddress);
        };
        let followers = self.followers(user_id, window);
        if followers.is_empty() {
            return skip(SkipReason::NoNewFollowers);
        }
        let recent = followers
            .iter()
            .filter_map(|id| {
                self.users
                    .get(id)
                    .and_then(|u| u.name.as_deref().and_then(printable_name))
            })
            .take(shown as usize)
            .collect();
        Ok(Enrichment::Ready(Digest {
            user_id: user_id.to_string(),
            email,
            name: user
                .name
                .as_deref()
                .and_then(printable_name)
                .unwrap_or_else(|| "there".into()),
            locale: user.locale.clone(),
            new_followers: followers.len() as u64,
            recent,
        }))
    }

    async fn enrich_many(
        &self,
        user_ids: &[UserId],
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> Result<Vec<Enrichment>, StoreError> {
        let mut all = Vec::with_capacity(user_ids.len());
        for id in user_ids {
            all.push(self.enrich(id, window, topic, shown).await?);
        }
        Ok(all)
    }

    async fn check_indexes(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

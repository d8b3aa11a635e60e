//! A user directory of `users` synthetic people, generated from their index instead of held
//! (a million users cost nothing to keep), behind MongoDB's round trips: the audience is
//! read in cursor batches of 1,000 (a users getMore and the follows' getMores of a merge
//! join), a CreateEmails batch is enriched in three round trips, as the real adapter does.
//! Names, locales and follower counts vary from user to user so that rendering varies too;
//! for a local-time run, their zones (`Zones`).

use mailflow::domain::campaign::Window;
use mailflow::domain::digest::{Digest, Enrichment, OddFollows};
use mailflow::domain::ledger::SendKey;
use mailflow::domain::local_time::ZoneField;
use mailflow::domain::topics::{Choice, ExclusionCounts, Overall, Standing, Topic, TopicId};
use mailflow::domain::user_id::UserId;
use mailflow::ports::{
    AudienceMember, AudienceScan, StoreError, SubscriberError, UserDirectory, UserStandings,
};
use std::sync::Arc;
use std::time::Duration;

/// Documents per cursor batch, and the round trips a batch of the audience's merge join
/// takes (the users' getMore and, at about three follows a user, three of the follows').
const CURSOR_BATCH: usize = 1_000;
const ROUND_TRIPS_PER_CURSOR_BATCH: u32 = 4;
/// `enrich_many`: the users, their follows, the followers' names.
const ROUND_TRIPS_PER_ENRICHMENT: u32 = 3;

const NAMES: &[&str] = &[
    "Ada",
    "Grace Hopper",
    "Linus",
    "<b>Bold</b> & Co",
    "Zoë O'Brien",
    "{{ name }}",
    "محمد",
    "李小龍",
    "Émilie \"Mimi\" Dupont",
    "🙂 Smiley",
];
const LOCALES: &[Option<&str>] = &[
    None,
    Some("fr-CA"),
    Some("de_DE"),
    Some("en-GB"),
    Some("pt-BR"),
];

/// The people's `timezone` fields: none, one zone for everyone, or a realistic mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zones {
    None,
    One(&'static str),
    Mix,
}

/// Most users in a few zones, some without a usable one (they get the fallback zone, UTC):
/// percentages. Every zone's 09:00 on the next day is at least three hours after any time of
/// the day before (UTC+05:30 to UTC-08:00).
pub const ZONE_MIX: &[(Option<&str>, usize)] = &[
    (Some("America/New_York"), 30),
    (Some("Europe/London"), 20),
    (Some("America/Los_Angeles"), 15),
    (Some("Europe/Berlin"), 12),
    (Some("Asia/Kolkata"), 8),
    (Some("America/Sao_Paulo"), 5),
    (None, 7),
    (Some("Pacific Standard Time"), 3),
];

impl Zones {
    fn of(self, index: usize) -> ZoneField {
        let name = match self {
            Self::None => None,
            Self::One(zone) => Some(zone),
            Self::Mix => {
                let mut draw = (index * 7919) % 100;
                (ZONE_MIX.iter())
                    .find(|(_, share)| {
                        let here = draw < *share;
                        draw = draw.saturating_sub(*share);
                        here
                    })
                    .and_then(|(zone, _)| *zone)
            }
        };
        name.map_or(ZoneField::Missing, |zone| ZoneField::Text(zone.into()))
    }
}

#[derive(Clone)]
pub struct LabDirectory(Arc<Inner>);

struct Inner {
    users: usize,
    latency: (Duration, Duration),
    zones: Zones,
}

impl LabDirectory {
    pub fn new(users: usize, latency: (Duration, Duration)) -> Self {
        Self::zoned(users, latency, Zones::None)
    }

    pub fn zoned(users: usize, latency: (Duration, Duration), zones: Zones) -> Self {
        Self(Arc::new(Inner {
            users,
            latency,
            zones,
        }))
    }

    pub fn id(index: usize) -> String {
        format!("u{index:08}")
    }

    fn index(id: &UserId) -> Option<usize> {
        id.to_string().strip_prefix('u')?.parse().ok()
    }

    async fn round_trips(&self, n: u32) {
        let (low, high) = self.0.latency;
        for _ in 0..n {
            let spread = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos()) as f64
                / 1e9;
            tokio::time::sleep(low + (high - low).mul_f64(spread)).await;
        }
    }

    fn digest(index: usize) -> Digest {
        let followers = 1 + (index * 7919) % 40;
        let recent = (0..followers.min(3))
            .map(|k| NAMES[(index + k + 1) % NAMES.len()].to_string())
            .collect();
        Digest {
            user_id: Self::id(index),
            email: format!("user.{index}+weekly@example.com"),
            name: NAMES[index % NAMES.len()].to_string(),
            locale: LOCALES[index % LOCALES.len()].map(str::to_string),
            new_followers: followers as u64,
            recent,
        }
    }
}

pub struct LabAudience {
    directory: LabDirectory,
    next: usize,
    excluded: ExclusionCounts,
}

impl AudienceScan for LabAudience {
    async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
        if self.next >= self.directory.0.users {
            return Ok(None);
        }
        if self.next % CURSOR_BATCH == 0 {
            self.directory
                .round_trips(ROUND_TRIPS_PER_CURSOR_BATCH)
                .await;
        }
        let id = UserId::parse(&LabDirectory::id(self.next)).expect("a valid id");
        let zone = self.directory.0.zones.of(self.next);
        self.next += 1;
        Ok(Some(AudienceMember { id, zone }))
    }

    fn excluded(&self) -> &ExclusionCounts {
        &self.excluded
    }
}

impl UserDirectory for LabDirectory {
    type Audience = LabAudience;
    type DefinitionAudience = mailflow::ports::NoDefinitions;

    fn definition_audience(
        &self,
        _campaign: &mailflow::ports::DefinitionCampaign,
        _after: Option<UserId>,
    ) -> mailflow::ports::NoDefinitions {
        mailflow::ports::NoDefinitions
    }

    async fn prepare(
        &self,
        _campaign: &mailflow::ports::DefinitionCampaign,
        _user_ids: &[UserId],
    ) -> Result<Vec<mailflow::domain::definition::Prepared>, mailflow::ports::PrepareError> {
        Err(mailflow::ports::PrepareError::Definition(
            mailflow::ports::NO_DEFINITIONS.into(),
        ))
    }

    fn audience(&self, _window: &Window, _topic: &Topic, after: Option<UserId>) -> LabAudience {
        LabAudience {
            directory: self.clone(),
            next: after.as_ref().and_then(Self::index).map_or(0, |i| i + 1),
            excluded: ExclusionCounts::default(),
        }
    }

    async fn odd_follows(&self, _window: &Window, _limit: i64) -> Result<OddFollows, StoreError> {
        self.round_trips(1).await;
        Ok(OddFollows::default())
    }

    async fn enrich(
        &self,
        user_id: &UserId,
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> Result<Enrichment, StoreError> {
        let mut one = self
            .enrich_many(std::slice::from_ref(user_id), window, topic, shown)
            .await?;
        Ok(one.remove(0))
    }

    async fn enrich_many(
        &self,
        user_ids: &[UserId],
        _window: &Window,
        _topic: &Topic,
        _shown: u32,
    ) -> Result<Vec<Enrichment>, StoreError> {
        self.round_trips(ROUND_TRIPS_PER_ENRICHMENT).await;
        Ok(user_ids
            .iter()
            .map(|id| match Self::index(id) {
                Some(index) if index < self.0.users => Enrichment::Ready(Self::digest(index)),
                _ => Enrichment::Skip(mailflow::domain::digest::SkipReason::Vanished),
            })
            .collect())
    }

    async fn check_indexes(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Every synthetic person stays subscribed (the audience takes them all): a standing read
/// again at the send costs its one round trip and lets the email go.
impl UserStandings for LabDirectory {
    async fn standing(
        &self,
        key: &SendKey,
        _topic: &TopicId,
    ) -> Result<Option<Standing>, SubscriberError> {
        self.round_trips(1).await;
        let known = UserId::parse(key.user_id())
            .ok()
            .and_then(|id| Self::index(&id))
            .is_some_and(|i| i < self.0.users);
        Ok(known.then_some(Standing {
            overall: Overall::Subscribed,
            suppressed: false,
            choice: Choice::Unset,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_puts_each_share_of_users_in_its_zone() {
        let new_york = (0..10_000)
            .filter(|i| Zones::Mix.of(*i) == ZoneField::Text("America/New_York".into()))
            .count();
        let missing = (0..10_000)
            .filter(|i| Zones::Mix.of(*i) == ZoneField::Missing)
            .count();
        assert_eq!((new_york, missing), (3_000, 700));
    }
}

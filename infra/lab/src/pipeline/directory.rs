//! A user directory of `users` synthetic people, generated from their index instead of held
//! (a million users cost nothing to keep), behind MongoDB's round trips: the audience is
//! read in cursor batches of 1,000 (a users getMore and the follows' getMores of a merge
//! join), a CreateEmails batch is read in two round trips (the users' `find`, then the
//! digest's `followers` aggregation, its names' lookup run by the server), as the real
//! adapter does.
//! Names, locales and follower counts vary from user to user so that rendering varies too;
//! for a local-time run, their zones (`Zones`).

use mailflow::domain::campaign::Window;
use mailflow::domain::definition::{EmailData, Prepared};
use mailflow::domain::digest::{OddFollows, SkipReason};
use mailflow::domain::ledger::SendKey;
use mailflow::domain::local_time::ZoneField;
use mailflow::domain::topics::{Choice, ExclusionCounts, Overall, Standing, TopicId};
use mailflow::domain::user_id::UserId;
use mailflow::ports::{
    AudienceMember, AudienceScan, DefinitionCampaign, PrepareError, StoreError, SubscriberError,
    UserDirectory, UserStandings,
};
use std::sync::Arc;
use std::time::Duration;

/// Documents per cursor batch, and the round trips a batch of the audience's merge join
/// takes (the users' getMore and, at about three follows a user, three of the follows').
const CURSOR_BATCH: usize = 1_000;
const ROUND_TRIPS_PER_CURSOR_BATCH: u32 = 4;
/// `prepare`: the users' `find` and the `followers` aggregation.
const ROUND_TRIPS_PER_BATCH: u32 = 2;

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

    /// The bundled digest's inputs for one person: 1-40 followers, up to three named.
    fn email_data(index: usize) -> EmailData {
        let followers = 1 + (index * 7919) % 40;
        let names: Vec<&str> = (0..followers.min(3))
            .map(|k| NAMES[(index + k + 1) % NAMES.len()])
            .collect();
        let id = Self::id(index);
        EmailData {
            user_id: UserId::parse(&id).expect("a valid id"),
            email: format!("user.{index}+weekly@example.com"),
            name: Some(NAMES[index % NAMES.len()].to_string()),
            language: LOCALES[index % LOCALES.len()].map(str::to_string),
            zone: None,
            data: [(
                "followers".to_owned(),
                serde_json::json!({"_id": id, "count": followers, "names": names}),
            )]
            .into(),
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

/// The synthetic people answer any definition as the bundled digest's queries would: the
/// lab measures the pipeline, not a definition's data.
impl UserDirectory for LabDirectory {
    type DefinitionAudience = LabAudience;

    fn definition_audience(
        &self,
        _campaign: &DefinitionCampaign,
        after: Option<UserId>,
    ) -> LabAudience {
        LabAudience {
            directory: self.clone(),
            next: after.as_ref().and_then(Self::index).map_or(0, |i| i + 1),
            excluded: ExclusionCounts::default(),
        }
    }

    async fn prepare(
        &self,
        _campaign: &DefinitionCampaign,
        user_ids: &[UserId],
    ) -> Result<Vec<Prepared>, PrepareError> {
        self.round_trips(ROUND_TRIPS_PER_BATCH).await;
        Ok(user_ids
            .iter()
            .map(|id| match Self::index(id) {
                Some(index) if index < self.0.users => Prepared::Ready(Self::email_data(index)),
                _ => Prepared::Skip(SkipReason::Vanished.as_str().to_owned()),
            })
            .collect())
    }

    async fn odd_follows(&self, _window: &Window, _limit: i64) -> Result<OddFollows, StoreError> {
        self.round_trips(1).await;
        Ok(OddFollows::default())
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

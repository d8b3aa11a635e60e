//! The picks of one email: people worth following back. Chosen at the email's first open
//! from what is true then (a follower the recipient has followed back since the email was
//! sent is no longer offered, one who followed since is), then frozen: every later request,
//! from any client, sees the same picks in the same order.
//!
//! Why follow-back picks: the data holds who follows whom and when; a new follower the
//! recipient does not follow yet is the one recommendation it fully supports, and it changes
//! between send and open (the recipient follows back from the app, or new followers arrive).

use std::collections::HashSet;

/// One pick: a user (the id in its text form) and the name to show.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pick {
    pub id: String,
    /// None when the user has no printable name (their card says "A new follower").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An email's frozen picks.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Picks {
    /// In slot order; fewer than the slots when fewer people qualify (a slot without a pick
    /// shows the fallback card and links to the fallback page).
    pub items: Vec<Pick>,
    /// The choice could not be made in time (or the directory failed): the fallback, frozen
    /// like any choice so that every open shows the same thing.
    #[serde(default)]
    pub fallback: bool,
    /// When the first request froze them (epoch ms).
    pub frozen_at_ms: u64,
}

impl Picks {
    pub fn fallback(frozen_at_ms: u64) -> Self {
        Self {
            items: Vec::new(),
            fallback: true,
            frozen_at_ms,
        }
    }

    /// The pick shown in `slot`, if any.
    pub fn at(&self, slot: u8) -> Option<&Pick> {
        self.items.get(usize::from(slot))
    }
}

/// What a request finds when it asks to compute an email's picks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FreezeClaim {
    /// This request holds the lease: it computes and freezes.
    Won,
    /// Already frozen.
    Frozen(Picks),
    /// Another request holds a lease until then (epoch ms): wait for its answer, or take
    /// over after it.
    Busy { lease_until_ms: u64 },
}

/// A follower as the directory reads them, newest follow first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Follower {
    pub id: String,
    /// The user document's name; None when the document has none, or is gone.
    pub name: Option<String>,
    /// Whether the user document exists (a dangling follow is no one to follow).
    pub exists: bool,
}

/// The picks from the recipient's followers (newest follow first, duplicates possible) and
/// whom the recipient follows now: the newest distinct followers that exist, are not the
/// recipient, and are not followed back, at most `slots`.
pub fn choose(
    recipient: &str,
    followers: &[Follower],
    followed_back: &HashSet<String>,
    slots: usize,
) -> Vec<Pick> {
    let mut seen = HashSet::new();
    followers
        .iter()
        .filter(|f| f.exists && f.id != recipient && !followed_back.contains(&f.id))
        .filter(|f| seen.insert(f.id.clone()))
        .take(slots)
        .map(|f| Pick {
            id: f.id.clone(),
            name: f
                .name
                .as_deref()
                .and_then(crate::domain::text::printable_name),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(id: &str, name: Option<&str>, exists: bool) -> Follower {
        Follower {
            id: id.into(),
            name: name.map(Into::into),
            exists,
        }
    }

    #[test]
    fn newest_distinct_not_followed_back_existing() {
        let followers = [
            f("a", Some("Ada"), true),
            f("me", Some("Me"), true),
            f("a", Some("Ada"), true),
            f("gone", None, false),
            f("b", Some("Bo"), true),
            f("c", Some("\0"), true),
            f("d", Some("Di"), true),
            f("e", Some("Ed"), true),
        ];
        let back: HashSet<String> = ["b".to_string()].into();
        let picks = choose("me", &followers, &back, 3);
        let ids: Vec<&str> = picks.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["a", "c", "d"]);
        assert_eq!(
            picks[1].name, None,
            "a name with nothing printable is no name"
        );
        assert!(choose("me", &followers, &back, 0).is_empty());
        assert_eq!(choose("me", &[], &back, 3), vec![]);
    }

    #[test]
    fn frozen_picks_round_trip() {
        let picks = Picks {
            items: vec![Pick {
                id: "oid:65a1f0c2e4b0a1b2c3d4e5f6".into(),
                name: Some("Zoë".into()),
            }],
            fallback: false,
            frozen_at_ms: 5,
        };
        let json = serde_json::to_string(&picks).unwrap();
        assert_eq!(serde_json::from_str::<Picks>(&json).unwrap(), picks);
        assert_eq!(picks.at(0).unwrap().name.as_deref(), Some("Zoë"));
        assert_eq!(picks.at(1), None);
        assert!(Picks::fallback(1).fallback);
    }
}

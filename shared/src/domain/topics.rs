//! Topics: what kinds of email a recipient can choose to receive, declared once in
//! `shared/topics.json` (compiled in: a change ships with a deploy). Every campaign belongs to
//! one topic; a user receives it unless they left everything (`subscribed` not true), their
//! address is suppressed, or they left that topic (`topics.<id>.subscribed: false`). A topic
//! they never chose follows its default, so users from before topics existed are in every
//! topic whose default is "in".

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    #[error("topic id {} is invalid: use 1-64 characters from a-z 0-9 -", super::quoted(.0))]
    InvalidId(String),
    #[error("there is no topic {}: the topics are {known} (shared/topics.json)", super::quoted(.id))]
    Unknown { id: String, known: String },
    #[error("the topics file is invalid: {0}")]
    BadFile(String),
}

/// A topic's id: part of field paths in MongoDB, tokens and URLs, so a-z 0-9 - only.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TopicId(String);

impl TopicId {
    pub fn parse(raw: &str) -> Result<Self, TopicError> {
        let ok = !raw.is_empty()
            && raw.len() <= 64
            && raw
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(TopicError::InvalidId(raw.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TopicId {
    type Error = TopicError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<TopicId> for String {
    fn from(t: TopicId) -> String {
        t.0
    }
}

impl std::fmt::Display for TopicId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Default {
    In,
    Out,
}

/// One topic as declared.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topic {
    pub id: TopicId,
    pub default: Default,
    /// Label per language (`en` always present: the fallback).
    pub label: BTreeMap<String, String>,
}

impl Topic {
    /// The label in `language`, or in English.
    pub fn label(&self, language: &str) -> &str {
        self.label
            .get(language)
            .or_else(|| self.label.get(FALLBACK_LANGUAGE))
            .map_or(self.id.as_str(), String::as_str)
    }
}

pub const FALLBACK_LANGUAGE: &str = "en";

/// Every topic, and the one weekly campaigns belong to.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topics {
    weekly: TopicId,
    topics: Vec<Topic>,
}

static BUILTIN: LazyLock<Topics> = LazyLock::new(|| {
    Topics::parse(include_str!("../../topics.json"))
        .expect("shared/topics.json is checked by the unit tests")
});

impl Topics {
    /// The topics this build was made with (`shared/topics.json`).
    pub fn builtin() -> &'static Topics {
        &BUILTIN
    }

    pub fn parse(json: &str) -> Result<Self, TopicError> {
        let topics: Topics =
            serde_json::from_str(json).map_err(|e| TopicError::BadFile(e.to_string()))?;
        let mut seen = BTreeSet::new();
        for topic in &topics.topics {
            if !seen.insert(&topic.id) {
                return Err(TopicError::BadFile(format!("topic {} twice", topic.id)));
            }
            if !topic.label.contains_key(FALLBACK_LANGUAGE) {
                return Err(TopicError::BadFile(format!(
                    "topic {} has no {FALLBACK_LANGUAGE} label",
                    topic.id
                )));
            }
        }
        if !seen.contains(&topics.weekly) {
            return Err(TopicError::BadFile(format!(
                "the weekly topic {} is not declared",
                topics.weekly
            )));
        }
        Ok(topics)
    }

    pub fn all(&self) -> &[Topic] {
        &self.topics
    }

    /// The topic of weekly campaigns (and of a campaign that names none).
    pub fn weekly(&self) -> &Topic {
        self.find(&self.weekly).expect("checked when parsed")
    }

    pub fn find(&self, id: &TopicId) -> Option<&Topic> {
        self.topics.iter().find(|t| &t.id == id)
    }

    /// The topic `raw` names, or an error listing the topics there are.
    pub fn get(&self, raw: &str) -> Result<&Topic, TopicError> {
        TopicId::parse(raw)
            .ok()
            .and_then(|id| self.find(&id))
            .ok_or_else(|| TopicError::Unknown {
                id: raw.to_owned(),
                known: self.ids(),
            })
    }

    /// The topic a campaign belongs to: the one it names, else the weekly one.
    pub fn resolve(&self, requested: Option<&str>) -> Result<&Topic, TopicError> {
        match requested {
            Some(raw) => self.get(raw),
            None => Ok(self.weekly()),
        }
    }

    fn ids(&self) -> String {
        self.topics
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What a user's document says of one topic (`topics.<id>.subscribed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    In,
    Out,
    /// Never chosen: the topic's default.
    Unset,
    /// Some other type: never guessed (the user is left out, counted).
    Unreadable,
}

/// What a user's document says of everything (`subscribed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overall {
    Subscribed,
    /// `false`, null or missing: out of everything.
    Unsubscribed,
    Unreadable,
}

/// A user's standing for one campaign's topic, as read from their document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    pub overall: Overall,
    pub suppressed: bool,
    pub choice: Choice,
}

/// Why a user with new followers is left out of a campaign's audience.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exclusion {
    Unsubscribed,
    Suppressed,
    LeftTopic,
    /// `subscribed` or the topic's choice holds another type.
    Unreadable,
}

impl Exclusion {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unsubscribed => "unsubscribed",
            Self::Suppressed => "suppressed",
            Self::LeftTopic => "left_topic",
            Self::Unreadable => "unreadable_choice",
        }
    }
}

impl Standing {
    /// The audience rule: who receives a campaign of `topic`.
    pub fn exclusion(&self, topic: &Topic) -> Option<Exclusion> {
        // A suppressed address is never emailed, whatever the person chose.
        if self.suppressed {
            return Some(Exclusion::Suppressed);
        }
        match self.overall {
            Overall::Subscribed => {}
            Overall::Unsubscribed => return Some(Exclusion::Unsubscribed),
            Overall::Unreadable => return Some(Exclusion::Unreadable),
        }
        match (self.choice, topic.default) {
            (Choice::In, _) | (Choice::Unset, Default::In) => None,
            (Choice::Out, _) | (Choice::Unset, Default::Out) => Some(Exclusion::LeftTopic),
            (Choice::Unreadable, _) => Some(Exclusion::Unreadable),
        }
    }
}

/// Users left out of a campaign's audience, by reason (each user with new followers in the
/// window counted once).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExclusionCounts {
    #[serde(default)]
    pub unsubscribed: u64,
    #[serde(default)]
    pub suppressed: u64,
    #[serde(default)]
    pub left_topic: u64,
    #[serde(default)]
    pub unreadable_choice: u64,
}

impl ExclusionCounts {
    pub fn add(&mut self, exclusion: Exclusion) {
        *match exclusion {
            Exclusion::Unsubscribed => &mut self.unsubscribed,
            Exclusion::Suppressed => &mut self.suppressed,
            Exclusion::LeftTopic => &mut self.left_topic,
            Exclusion::Unreadable => &mut self.unreadable_choice,
        } += 1;
    }

    pub fn merge(&mut self, other: &Self) {
        self.unsubscribed += other.unsubscribed;
        self.suppressed += other.suppressed;
        self.left_topic += other.left_topic;
        self.unreadable_choice += other.unreadable_choice;
    }

    pub fn total(&self) -> u64 {
        self.unsubscribed + self.suppressed + self.left_topic + self.unreadable_choice
    }

    /// `unsubscribed 3, left_topic 1` (reasons with none left out).
    pub fn describe(&self) -> String {
        [
            (Exclusion::Unsubscribed, self.unsubscribed),
            (Exclusion::Suppressed, self.suppressed),
            (Exclusion::LeftTopic, self.left_topic),
            (Exclusion::Unreadable, self.unreadable_choice),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(e, n)| format!("{} {n}", e.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// What a person's preferences are, as the preference centre shows and saves them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preferences {
    pub overall: Overall,
    /// The topics they chose explicitly (absent: the default).
    pub choices: BTreeMap<TopicId, Choice>,
}

impl Preferences {
    /// Whether they receive `topic` now (out of everything: none).
    pub fn receives(&self, topic: &Topic) -> bool {
        self.overall == Overall::Subscribed
            && match self
                .choices
                .get(&topic.id)
                .copied()
                .unwrap_or(Choice::Unset)
            {
                Choice::In => true,
                Choice::Unset => topic.default == Default::In,
                Choice::Out | Choice::Unreadable => false,
            }
    }

    /// The writes a save of `wanted` (the topics ticked) needs: each topic whose state
    /// changes, and whether they come back after leaving everything (a save with at least
    /// one topic ticked is a resubscribe).
    pub fn save(&self, topics: &Topics, wanted: &BTreeSet<TopicId>) -> Save {
        let resubscribe = self.overall != Overall::Subscribed && !wanted.is_empty();
        let changes = topics
            .all()
            .iter()
            .filter(|topic| {
                // Coming back: every topic is written, so only the ticked ones are in.
                resubscribe || self.receives(topic) != wanted.contains(&topic.id)
            })
            .map(|topic| (topic.id.clone(), wanted.contains(&topic.id)))
            .collect();
        Save {
            changes,
            resubscribe,
        }
    }
}

/// What saving the preference centre writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Save {
    /// (topic, in) for each topic whose choice is written.
    pub changes: Vec<(TopicId, bool)>,
    pub resubscribe: bool,
}

#[cfg(test)]
mod tests;

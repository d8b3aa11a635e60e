//! What every campaign's emails share, whatever their definition: why a user of the
//! audience gets none (`SkipReason`), how MJML becomes HTML once per shape of email
//! (`mjml`, `shape`), what a rendered email is, and the follows no user can be found
//! through. What each email says is its definition's (`domain::definition`).

mod mjml;
mod render;
pub(crate) mod shape;
mod templates;

pub(crate) use mjml::{mjml_options, mjml_to_html};
#[cfg(test)]
pub(crate) use render::tests::hostile_names;
pub use render::Rendered;
pub(crate) use render::{html_url, subject_line};
pub use templates::{RenderError, MAX_SUBJECT_BYTES, MAX_SUBJECT_TEMPLATE};

/// Why a user of the audience gets no email after all (acknowledged and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SkipReason {
    Vanished,
    Unsubscribed,
    /// They left the campaign's topic (or never joined a topic whose default is out).
    LeftTopic,
    /// The campaign's topic is not declared (any more) in `shared/topics.json`.
    UnknownTopic,
    Suppressed,
    NoAddress,
    NoNewFollowers,
    /// A field of the user's document holds the wrong type (logged with the document id
    /// and the field).
    InvalidDocument,
    /// The campaign was cancelled (`mailctl cancel`) before this user's email was made.
    CampaignCancelled,
    /// The templates could not render this user's email (logged with the template and why):
    /// the same data would fail the same way on every retry.
    Unrenderable,
    /// The message names a variant the campaign's experiment does not have.
    UnknownVariant,
    /// The campaign's definition cannot run: this build refuses its version, or MongoDB
    /// refuses or times out its queries past the last tries (alarmed:
    /// `DefinitionFailedAlarm`).
    DefinitionFailed,
    /// A campaign definition's skip rule (`[[skip]]`'s `reason`), interned
    /// (`SkipReason::named`).
    Rule(&'static str),
}

impl SkipReason {
    pub const ALL: [SkipReason; 12] = [
        Self::Vanished,
        Self::Unsubscribed,
        Self::LeftTopic,
        Self::UnknownTopic,
        Self::Suppressed,
        Self::NoAddress,
        Self::NoNewFollowers,
        Self::InvalidDocument,
        Self::CampaignCancelled,
        Self::Unrenderable,
        Self::UnknownVariant,
        Self::DefinitionFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vanished => "vanished",
            Self::Unsubscribed => "unsubscribed",
            Self::LeftTopic => "left_topic",
            Self::UnknownTopic => "unknown_topic",
            Self::Suppressed => "suppressed",
            Self::NoAddress => "no_address",
            Self::NoNewFollowers => "no_new_followers",
            Self::InvalidDocument => "invalid_document",
            Self::CampaignCancelled => "campaign_cancelled",
            Self::Unrenderable => "unrenderable",
            Self::UnknownVariant => "unknown_variant",
            Self::DefinitionFailed => "definition_failed",
            Self::Rule(reason) => reason,
        }
    }

    /// The reason named `name`: one of ours, or a definition's own, kept once for the
    /// process's life (definitions name a handful; past `MAX_RULES` distinct names they
    /// are counted as `skip_rule`, so memory and metric names stay bounded).
    pub fn named(name: &str) -> Self {
        if let Some(ours) = Self::ALL.into_iter().find(|r| r.as_str() == name) {
            return ours;
        }
        static RULES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
        const MAX_RULES: usize = 256;
        let mut rules = RULES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = rules.iter().find(|r| **r == name) {
            return Self::Rule(known);
        }
        if rules.len() >= MAX_RULES {
            return Self::Rule("skip_rule");
        }
        let kept: &'static str = Box::leak(name.to_owned().into_boxed_str());
        rules.push(kept);
        Self::Rule(kept)
    }
}

/// The window's follows whose ids are not a usable user id (a string or an ObjectId, not
/// empty, not an array): none of them makes anyone a new follower of anyone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OddFollows {
    /// With a followeeId no user can have.
    pub followees: u64,
    /// With a followerId no user can have.
    pub followers: u64,
    /// Some of those with an odd followeeId, described.
    pub described: Vec<OddFollow>,
}

/// A follow in the window whose followeeId names no user a campaign can reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OddFollow {
    /// One line naming the collection, the document and the field.
    pub reason: String,
}

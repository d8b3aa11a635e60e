//! The campaign's content: what one user's email is made of (`Digest`), why a user of the
//! audience gets none (`SkipReason`), and how it looks (`Renderer`). Who is in the audience
//! and what each user's digest holds is read through the `ports::UserDirectory` port
//! (`adapters::directory` reads MongoDB). A team that sends its own weekly email replaces
//! these types' contents, the templates and that adapter's queries.

mod mjml;
mod render;
pub(crate) mod shape;
mod templates;
mod values;

pub(crate) use mjml::{mjml_options, mjml_to_html};
#[cfg(test)]
pub(crate) use render::tests::hostile_names;
pub(crate) use render::{html_url, subject_line};
pub use render::{Look, Rendered, Renderer};
pub use templates::{
    check_subject, RenderError, BODY_VARIANTS, LOCALES, MAX_SUBJECT_BYTES, MAX_SUBJECT_TEMPLATE,
};

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

/// One user's digest, or why they get none.
#[derive(Clone, Debug, PartialEq)]
pub enum Enrichment {
    Ready(Digest),
    Skip(SkipReason),
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

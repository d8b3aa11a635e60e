//! A campaign definition: who gets the email, what fills it and what it says, as files a
//! team writes (docs/campaigns.md, "Your own campaign"), not Rust. A definition is a folder:
//!
//! ```text
//! campaign.toml            settings, recipients' field paths, audience and data queries
//! templates/layout.mjml.j2 the shared layout (any file outside a language folder is shared:
//!                          layouts, partials, macros)
//! templates/<lang>/subject.txt.j2, body.mjml.j2, body.txt.j2   one folder per language
//! templates/<lang>/<variant>/body.mjml.j2, body.txt.j2         an experiment's bodies
//! samples/<name>.json      sample recipients and their data, rendered by `check`
//! ```
//!
//! The queries are MongoDB's own language: Extended JSON aggregation pipelines (as Compass
//! exports them) in `campaign.toml`'s multi-line strings. The window's bounds and the
//! campaign's parameters reach them as `let` variables (`$$since`, `$$until`, `$$<param>`),
//! never as text put into the query. Parsing a definition (`load`) is pure: the same code
//! reads a folder on disk (`mailctl campaign check`) and a pushed version (the functions).
//!
//! This module holds the types every part agrees on; `load` parses and checks them.

pub mod bundled;
pub mod campaign_toml;
pub mod files;
mod load;
pub mod pipeline;
pub mod render;
pub mod values;

pub use load::{line_of, parse, CAMPAIGN_TOML, DATA_VARIABLE, DEFAULT_WINDOW_DAYS, VARIABLES};

/// Which version a run uses (its own room: the messages carry a pin, and import no more).
pub use super::definition_pin as pin;
use crate::domain::user_id::UserId;

use std::collections::BTreeMap;

/// A definition's files: path relative to the folder (`/`-separated) → contents.
pub type Files = BTreeMap<String, String>;

/// A parsed, checked definition.
#[derive(Clone, Debug, PartialEq)]
pub struct Definition {
    /// `[a-z0-9-]`, 1-40 characters: the prefix of its campaigns' ids (`digest-2026-W48`).
    pub name: String,
    pub description: String,
    /// The topic its emails belong to (`shared/topics.json`).
    pub topic: String,
    /// Where each recipient's fields live in the users collection.
    pub recipients: Recipients,
    /// Who gets the email: user ids, streamed in id order.
    pub audience: Query,
    /// What fills each email: run once per batch of users, by name.
    pub data: BTreeMap<String, DataQuery>,
    /// Who of the audience gets nothing after all, in order; the first that holds decides.
    pub skip: Vec<SkipRule>,
    /// The campaign's parameters: `$$<name>` in queries, `params.<name>` in templates.
    pub params: BTreeMap<String, serde_json::Value>,
    pub templates: Templates,
    /// The field of the audience's collection that holds the user id (`_id` unless given).
    pub audience_by: String,
    /// When it runs on its own: an EventBridge Scheduler expression.
    pub schedule: Option<String>,
    /// The window is the last full `window_days` days (7 unless given).
    pub window_days: u32,
    /// Where open-time picks come from, if its emails show any.
    pub open_content: Option<PicksSource>,
}

/// A source of open-time picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PicksSource {
    /// The digest's: people who followed the user, to follow back.
    FollowBack,
}

/// Field paths (dotted, MongoDB's) into the users collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipients {
    pub collection: String,
    pub email: String,
    pub name: Option<String>,
    pub language: Option<String>,
    pub zone: Option<String>,
    /// The global subscription flag (false: unsubscribed from everything).
    pub subscribed: String,
    /// The per-topic choices document (`<topics>.<topic id>`: true in, false out).
    pub topics: String,
    /// The suppression flag (a bounce or complaint put the address on it).
    pub suppressed: String,
}

/// An aggregation pipeline over one collection, as Extended JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub collection: String,
    pub pipeline: Vec<serde_json::Value>,
}

/// A query run per batch of users: `{by: {$in: [the batch's ids]}}` is put before
/// `pipeline` (so an index on `by` serves it); each result belongs to the user its `user`
/// field names (`by` unless given; `_id` after a `$group`).
#[derive(Clone, Debug, PartialEq)]
pub struct DataQuery {
    pub query: Query,
    pub by: String,
    pub user: String,
    /// One document (the first, or null) rather than a list.
    pub first: bool,
}

/// "Skip this user when ...": counted under `reason` like every skip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipRule {
    /// A data query's name.
    pub data: String,
    /// The condition on its result.
    pub when: SkipWhen,
    /// `[a-z0-9_]`, at most 40 characters: the reason logged and counted.
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipWhen {
    /// No document (null, or an empty list).
    Empty,
}

/// The templates, by path under `templates/` without the `.j2` (`en/subject.txt`,
/// `layout.mjml`), and the languages they are written in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Templates {
    pub files: BTreeMap<String, String>,
    /// Every folder with `subject.txt`, `body.mjml` and `body.txt` (sorted).
    pub languages: Vec<String>,
    /// Of `languages`: what a user whose language has no folder gets.
    pub default_language: String,
    /// The experiment bodies every language has (`<lang>/<variant>/body.*`).
    pub variants: Vec<String>,
}

/// One user of a batch as the definition's queries found them: their email's inputs, or
/// why they get none (a skip rule's reason, or one of `SkipReason`'s, counted alike).
#[derive(Clone, Debug, PartialEq)]
pub enum Prepared {
    Ready(EmailData),
    Skip(String),
}

/// What one email is made of, read from MongoDB: the recipient's fields and each data
/// query's result.
#[derive(Clone, Debug, PartialEq)]
pub struct EmailData {
    pub user_id: UserId,
    pub email: String,
    /// As stored: the renderer makes it printable (none when nothing printable is left).
    pub name: Option<String>,
    /// The stored locale (`fr-CA`): the renderer picks the closest template language.
    pub language: Option<String>,
    pub zone: Option<String>,
    /// Each data query's result for this user, as relaxed Extended JSON (strings printable).
    pub data: BTreeMap<String, serde_json::Value>,
}

/// A date or time from the data as the templates see it: printed as RFC 3339
/// (`2026-11-23T09:30:00Z`), with `year`, `month`, `day`, `hour`, `minute`, `second` and
/// `iso` to format it otherwise (each language's `dates` partial names the months).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateValue(pub time::OffsetDateTime);

impl DateValue {
    pub fn value(t: time::OffsetDateTime) -> minijinja::Value {
        minijinja::Value::from_object(Self(t))
    }
}

impl std::fmt::Display for DateValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::domain::campaign::rfc3339(self.0))
    }
}

impl minijinja::value::Object for DateValue {
    fn get_value(self: &std::sync::Arc<Self>, key: &minijinja::Value) -> Option<minijinja::Value> {
        let t = self.0;
        Some(match key.as_str()? {
            "year" => t.year().into(),
            "month" => u8::from(t.month()).into(),
            "day" => t.day().into(),
            "hour" => t.hour().into(),
            "minute" => t.minute().into(),
            "second" => t.second().into(),
            "iso" => self.to_string().into(),
            _ => return None,
        })
    }

    fn render(self: &std::sync::Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A definition folder's files (`/`-separated paths), as the loader reads them: the
/// examples under `campaigns/`, for tests.
#[cfg(test)]
pub(crate) fn read_folder(dir: &std::path::Path) -> Files {
    fn walk(root: &std::path::Path, dir: &std::path::Path, files: &mut Files) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, files);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_str().unwrap();
                files.insert(
                    rel.replace('\\', "/"),
                    std::fs::read_to_string(&path).unwrap(),
                );
            }
        }
    }
    let mut files = Files::new();
    walk(dir, dir, &mut files);
    files
}

/// The example `campaigns/<name>`'s files.
#[cfg(test)]
pub(crate) fn example(name: &str) -> Files {
    read_folder(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../campaigns")
            .join(name),
    )
}

//! `campaign.toml` as written: every field optional here (what is required is said by
//! `load`, with the line and what to write) and spanned (for that line). The same types give
//! the published JSON Schema (`docs/campaign.schema.json`, feature `schema`).

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

#[cfg(feature = "schema")]
use schemars::JsonSchema;

/// A campaign definition's settings, queries and skip rules (docs/campaigns.md).
#[derive(Debug, Deserialize)]
#[cfg_attr(
    feature = "schema",
    derive(JsonSchema),
    schemars(title = "campaign.toml")
)]
#[serde(deny_unknown_fields)]
pub struct CampaignToml {
    /// The prefix of its campaigns' ids (`digest` runs `digest-2026-W48`).
    #[cfg_attr(
        feature = "schema",
        schemars(with = "String", required, regex(pattern = r"^[a-z0-9-]{1,40}$"))
    )]
    pub name: Option<Spanned<String>>,
    /// What it sends, for operators.
    #[cfg_attr(
        feature = "schema",
        schemars(with = "String", required, length(min = 1, max = 200))
    )]
    pub description: Option<Spanned<String>>,
    /// A topic id of shared/topics.json.
    #[cfg_attr(feature = "schema", schemars(with = "String", required))]
    pub topic: Option<Spanned<String>>,
    /// The language folder (templates/<lang>/) of users whose language has none.
    #[cfg_attr(feature = "schema", schemars(with = "String", required))]
    pub default_language: Option<Spanned<String>>,
    /// When it runs on its own: an EventBridge Scheduler expression, `cron(0 9 ? * MON *)`.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub schedule: Option<Spanned<String>>,
    /// The window is the last full `window_days` days (UTC).
    #[cfg_attr(feature = "schema", schemars(with = "Option<u32>", range(min = 1, max = 366), extend("default" = 7)))]
    pub window_days: Option<Spanned<i64>>,
    /// `$$<name>` in the queries, `params.<name>` in the templates.
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<BTreeMap<String, serde_json::Value>>")
    )]
    pub params: Option<Spanned<BTreeMap<Spanned<String>, Spanned<toml::Value>>>>,
    /// Where each recipient's fields are in the users collection (dotted paths).
    #[cfg_attr(feature = "schema", schemars(with = "Option<RecipientsToml>"))]
    pub recipients: Option<Spanned<RecipientsToml>>,
    /// Who gets it: the user ids of the documents this query yields.
    #[cfg_attr(feature = "schema", schemars(with = "AudienceToml", required))]
    pub audience: Option<Spanned<AudienceToml>>,
    /// What fills each email, by name: each query is run once per batch of users.
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<BTreeMap<String, DataToml>>")
    )]
    pub data: Option<Spanned<BTreeMap<Spanned<String>, Spanned<DataToml>>>>,
    /// Who of the audience gets nothing after all; the first rule that holds decides.
    #[cfg_attr(feature = "schema", schemars(with = "Option<Vec<SkipToml>>"))]
    pub skip: Option<Spanned<Vec<Spanned<SkipToml>>>>,
    /// Picks shown when the email is opened.
    #[cfg_attr(feature = "schema", schemars(with = "Option<OpenContentToml>"))]
    pub open_content: Option<Spanned<OpenContentToml>>,
}

/// Field paths (dotted) in the users collection; each has a default.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RecipientsToml {
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "users")))]
    pub collection: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "email")))]
    pub email: Option<Spanned<String>>,
    /// "" for none.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "name")))]
    pub name: Option<Spanned<String>>,
    /// "" for none (everyone gets `default_language`).
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "locale")))]
    pub language: Option<Spanned<String>>,
    /// "" for none.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "timezone")))]
    pub zone: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "subscribed")))]
    pub subscribed: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "topics")))]
    pub topics: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "suppression")))]
    pub suppression: Option<Spanned<String>>,
}

/// The audience query: user ids, streamed in id order.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AudienceToml {
    #[cfg_attr(feature = "schema", schemars(with = "String", required))]
    pub collection: Option<Spanned<String>>,
    /// The field of `collection` that holds the user id.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "_id")))]
    pub by: Option<Spanned<String>>,
    /// An Extended JSON array of aggregation stages.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "[]")))]
    pub pipeline: Option<Spanned<String>>,
}

/// A data query: `{<by>: {$in: [the batch's ids]}}` is put before its pipeline.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DataToml {
    #[cfg_attr(feature = "schema", schemars(with = "String", required))]
    pub collection: Option<Spanned<String>>,
    /// The field of `collection` that holds the user id.
    #[cfg_attr(feature = "schema", schemars(with = "String", required))]
    pub by: Option<Spanned<String>>,
    /// The output field that names the user (default: `by`; `_id` after a `$group`).
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub user: Option<Spanned<String>>,
    /// One document (or null) instead of a list.
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>", extend("default" = false)))]
    pub first: Option<Spanned<bool>>,
    /// An Extended JSON array of aggregation stages.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("default" = "[]")))]
    pub pipeline: Option<Spanned<String>>,
}

/// "Skip this user when ...".
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SkipToml {
    /// A data query's name.
    #[cfg_attr(feature = "schema", schemars(with = "String", required))]
    pub data: Option<Spanned<String>>,
    /// "empty": its result is null or [].
    #[cfg_attr(
        feature = "schema",
        schemars(with = "String", required, regex(pattern = "^empty$"))
    )]
    pub when: Option<Spanned<String>>,
    /// Logged and counted.
    #[cfg_attr(
        feature = "schema",
        schemars(with = "String", required, regex(pattern = r"^[a-z0-9_]{1,40}$"))
    )]
    pub reason: Option<Spanned<String>>,
}

/// Where open-time picks come from.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct OpenContentToml {
    /// "follow-back" (the only source today).
    #[cfg_attr(
        feature = "schema",
        schemars(with = "String", required, regex(pattern = "^follow-back$"))
    )]
    pub picks: Option<Spanned<String>>,
}

/// The JSON Schema of campaign.toml, as published in docs/campaign.schema.json.
#[cfg(feature = "schema")]
pub fn schema() -> String {
    let schema = schemars::schema_for!(CampaignToml);
    let mut text = serde_json::to_string_pretty(&schema).expect("a schema serialises");
    text.push('\n');
    text
}

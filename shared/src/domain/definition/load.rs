//! `Definition::load`: a definition's files parsed and checked, every problem one line that
//! names the file, the line and the field, and says what to do. Nothing is guessed: unknown
//! keys, bad names and undefined variables are refused.

use super::campaign_toml::{AudienceToml, CampaignToml, DataToml, RecipientsToml, SkipToml};
use super::{
    files, pipeline, DataQuery, Definition, Files, PicksSource, Query, Recipients, SkipRule,
    SkipWhen,
};
use crate::domain::quoted;
use crate::domain::topics::Topics;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

pub const CAMPAIGN_TOML: &str = "campaign.toml";
/// The window's length when `window_days` is not given.
pub const DEFAULT_WINDOW_DAYS: u32 = 7;
const MAX_WINDOW_DAYS: i64 = 366;

/// The variables the adapter binds for every pipeline (`$$<param>` besides).
pub const VARIABLES: &[&str] = &["since", "until", "campaign", "params"];
/// The variable data queries have besides: the batch's user ids.
pub const DATA_VARIABLE: &str = "userIds";

impl Definition {
    /// Parses and checks a definition's files (`mailctl campaign check`, and the functions
    /// reading a pushed version): every problem found, one line each.
    pub fn load(files: &Files) -> Result<Definition, Vec<String>> {
        let mut errors = files::check(files);
        let Some(text) = files.get(CAMPAIGN_TOML) else {
            errors.push(format!(
                "{CAMPAIGN_TOML}: missing; write the campaign's settings and queries there (docs/campaigns.md, \"Your own campaign\")"
            ));
            return Err(errors);
        };
        let raw = match parse(text) {
            Ok(raw) => raw,
            Err(mut parse_errors) => {
                errors.append(&mut parse_errors);
                return Err(errors);
            }
        };
        let mut l = Loader {
            text,
            errors: Vec::new(),
        };
        let definition = l.definition(raw, files);
        errors.append(&mut l.errors);
        match definition {
            Some(d) if errors.is_empty() => Ok(d),
            _ => Err(errors),
        }
    }
}

/// `text` as `CampaignToml`: every unknown key and wrong type, each on its line.
pub fn parse(text: &str) -> Result<CampaignToml, Vec<String>> {
    let doc = DeTable::parse(text).map_err(|e| vec![toml_error(text, &e, &Vec::new())])?;
    let index = index(&doc);
    match CampaignToml::deserialize(doc.clone().into_deserializer()) {
        Ok(raw) => Ok(raw),
        Err(first) => {
            // serde stops at the first problem: each part again on its own finds the rest.
            let mut errors: Vec<String> = pieces(&doc)
                .into_iter()
                .filter_map(|piece| CampaignToml::deserialize(piece.into_deserializer()).err())
                .map(|e| toml_error(text, &e, &index))
                .collect();
            // In the file's order (the parts came in the keys' order).
            errors.sort_by_key(|e| {
                e.split(':')
                    .nth(1)
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(0)
            });
            errors.dedup();
            if errors.is_empty() {
                errors.push(toml_error(text, &first, &index));
            }
            Err(errors)
        }
    }
}

use serde::de::IntoDeserializer;

/// The document cut in parts that deserialize alone: each top-level key, and each table of
/// a table of tables (`[data.x]`) or of an array of tables (`[[skip]]`).
fn pieces<'i>(doc: &Spanned<DeTable<'i>>) -> Vec<Spanned<DeTable<'i>>> {
    let one = |key: &Spanned<toml::de::DeString<'i>>, value: Spanned<DeValue<'i>>| {
        let mut t = DeTable::new();
        t.insert(key.clone(), value);
        Spanned::new(doc.span(), t)
    };
    let mut out = Vec::new();
    for (key, value) in doc.get_ref().iter() {
        match value.get_ref() {
            DeValue::Table(t) if t.values().all(|v| v.get_ref().is_table()) && !t.is_empty() => {
                for (k, v) in t.iter() {
                    let mut inner = DeTable::new();
                    inner.insert(k.clone(), v.clone());
                    out.push(one(key, Spanned::new(value.span(), DeValue::Table(inner))));
                }
            }
            DeValue::Array(items) if items.iter().all(|v| v.get_ref().is_table()) => {
                for item in items.iter() {
                    let array: toml::de::DeArray<'i> = std::iter::once(item.clone()).collect();
                    out.push(one(key, Spanned::new(value.span(), DeValue::Array(array))));
                }
            }
            _ => out.push(one(key, value.clone())),
        }
    }
    out
}

/// Where each key and value of the document is: (span, path).
type Index = Vec<(Range<usize>, Vec<String>)>;

fn index(doc: &Spanned<DeTable<'_>>) -> Index {
    fn walk(value: &DeValue<'_>, path: &mut Vec<String>, out: &mut Index) {
        match value {
            DeValue::Table(t) => {
                for (k, v) in t.iter() {
                    path.push(k.get_ref().to_string());
                    out.push((k.span(), path.clone()));
                    out.push((v.span(), path.clone()));
                    walk(v.get_ref(), path, out);
                    path.pop();
                }
            }
            DeValue::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    path.push(format!("#{}", i + 1));
                    out.push((v.span(), path.clone()));
                    walk(v.get_ref(), path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(
        &DeValue::Table(doc.get_ref().clone()),
        &mut Vec::new(),
        &mut out,
    );
    out
}

/// A TOML or serde error as one line: the line, the field its span falls in, the message.
fn toml_error(text: &str, e: &toml::de::Error, index: &Index) -> String {
    let Some(span) = e.span() else {
        return format!("{CAMPAIGN_TOML}: {}", e.message().trim());
    };
    let line = line_of(text, span.start);
    // The innermost key or value the error is about.
    let path = index
        .iter()
        .filter(|(s, _)| s.start <= span.start && span.end <= s.end)
        .min_by_key(|(s, _)| s.end - s.start)
        .map(|(_, p)| p.clone());
    let message = e.message().trim().replace('\n', " ");
    let message = match message.strip_prefix("unknown field `") {
        Some(rest) => {
            let (key, expected) = rest.split_once('`').unwrap_or((rest, ""));
            let expected = expected
                .trim_start_matches(", expected one of ")
                .trim_start_matches(", expected ")
                .replace('`', "");
            format!("unknown key {key:?}; the keys here are {expected}")
        }
        None if message.starts_with("invalid type") => {
            let message = message
                .replace("expected i64", "expected a whole number")
                .replace("expected u32", "expected a whole number");
            format!("{message}; fix the value")
        }
        None => message,
    };
    match path {
        Some(path) => format!("{CAMPAIGN_TOML}:{line}: {}: {message}", field(&path)),
        None => format!("{CAMPAIGN_TOML}:{line}: {message}"),
    }
}

/// `name`, `[data.orders] by`, `[[skip]] #2 reason`.
fn field(path: &[String]) -> String {
    match path.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, parents)) => {
            let mut table = String::new();
            for p in parents {
                if p.starts_with('#') {
                    table.push(' ');
                } else if !table.is_empty() {
                    table.push('.');
                }
                table.push_str(p);
            }
            let table = match table.split_once(' ') {
                Some((array, n)) => format!("[[{array}]] {n}"),
                None => format!("[{table}]"),
            };
            format!("{table} {last}")
        }
    }
}

pub fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .unwrap_or(text)
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

struct Loader<'t> {
    text: &'t str,
    errors: Vec<String>,
}

/// `[a-z0-9-]{1,40}` and the like.
fn is_name(raw: &str, max: usize, extra: &[u8]) -> bool {
    !raw.is_empty()
        && raw.len() <= max
        && raw
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || extra.contains(&b))
}

impl Loader<'_> {
    fn line(&self, span: Range<usize>) -> usize {
        line_of(self.text, span.start)
    }

    fn error(&mut self, span: Range<usize>, field: &str, message: impl std::fmt::Display) {
        let line = self.line(span);
        self.errors
            .push(format!("{CAMPAIGN_TOML}:{line}: {field}: {message}"));
    }

    /// A required string: missing → one line at `at` (the table's line) saying what to write.
    fn required(
        &mut self,
        value: Option<Spanned<String>>,
        at: Range<usize>,
        field: &str,
        what: &str,
    ) -> Option<Spanned<String>> {
        if value.is_none() {
            self.error(at, field, format_args!("missing; {what}"));
        }
        value
    }

    fn definition(&mut self, raw: CampaignToml, files: &Files) -> Option<Definition> {
        let top = 0..0;
        let name = self.required(
            raw.name,
            top.clone(),
            "name",
            "name the campaign: 1-40 of a-z, 0-9 and - (the prefix of its campaigns' ids)",
        );
        if let Some(n) = &name {
            if !is_name(n.get_ref(), 40, b"-") {
                self.error(
                    n.span(),
                    "name",
                    format_args!(
                        "{} is not 1-40 of a-z, 0-9 and -; rename it",
                        quoted(n.get_ref())
                    ),
                );
            } else if n.get_ref() == "weekly" {
                // Its ids would be the built-in digest's (`weekly-2026-W47`).
                self.error(
                    n.span(),
                    "name",
                    "\"weekly\" is the built-in digest's (its campaigns are weekly-2026-W47...); rename it",
                );
            }
        }
        let description = self.required(
            raw.description,
            top.clone(),
            "description",
            "say in a line what the campaign sends",
        );
        if let Some(d) = &description {
            let text = d.get_ref();
            if text.trim().is_empty()
                || text.chars().count() > 200
                || text.chars().any(char::is_control)
            {
                self.error(
                    d.span(),
                    "description",
                    "not one line of 1-200 characters; shorten it",
                );
            }
        }
        let topic = self.required(
            raw.topic,
            top.clone(),
            "topic",
            "name a topic id of shared/topics.json",
        );
        if let Some(t) = &topic {
            if let Err(e) = Topics::builtin().get(t.get_ref()) {
                self.error(t.span(), "topic", format_args!("{e}"));
            }
        }
        let default_language = self.required(
            raw.default_language,
            top.clone(),
            "default_language",
            "name the language folder (templates/<lang>/) for users whose language has none, e.g. \"en\"",
        );
        let schedule = raw.schedule.map(|s| {
            if let Err(why) = schedule_ok(s.get_ref()) {
                self.error(s.span(), "schedule", why);
            }
            s.into_inner()
        });
        let window_days = match raw.window_days {
            None => DEFAULT_WINDOW_DAYS,
            Some(w) if (1..=MAX_WINDOW_DAYS).contains(w.get_ref()) => *w.get_ref() as u32,
            Some(w) => {
                self.error(
                    w.span(),
                    "window_days",
                    format_args!(
                        "{} is not 1 to {MAX_WINDOW_DAYS}; give the window's length in days",
                        w.get_ref()
                    ),
                );
                DEFAULT_WINDOW_DAYS
            }
        };
        let params = self.params(raw.params);
        let mut variables: BTreeSet<String> = VARIABLES.iter().map(|v| v.to_string()).collect();
        variables.extend(params.keys().cloned());
        let recipients = self.recipients(raw.recipients);
        let (audience, audience_by) = match raw.audience {
            Some(a) => self.audience(a, &variables),
            None => {
                self.error(
                    top.clone(),
                    "[audience]",
                    "missing; add an [audience] table with its collection and pipeline",
                );
                (None, None)
            }
        };
        let mut data_variables = variables.clone();
        data_variables.insert(DATA_VARIABLE.to_owned());
        let mut data = BTreeMap::new();
        let raw_data = raw.data.map(Spanned::into_inner).unwrap_or_default();
        // A skip rule names a query declared, whether or not it is free of problems.
        let declared: BTreeSet<String> = raw_data.keys().map(|k| k.get_ref().clone()).collect();
        for (name, query) in raw_data {
            let (name_span, name) = (name.span(), name.into_inner());
            let field = format!("[data.{name}]");
            if !is_name(&name, 40, b"_") {
                self.error(
                    name_span,
                    &field,
                    format_args!("{} is not a name of 1-40 of a-z, 0-9 and _ (templates say data.<name>); rename it", quoted(&name)),
                );
            }
            if let Some(q) = self.data(&name, query, &data_variables) {
                data.insert(name, q);
            }
        }
        let skip = self.skip(raw.skip, &declared);
        let open_content = raw.open_content.and_then(|o| {
            let span = o.span();
            match o.into_inner().picks {
                Some(p) if p.get_ref() == "follow-back" => Some(PicksSource::FollowBack),
                Some(p) => {
                    self.error(
                        p.span(),
                        "[open_content] picks",
                        format_args!(
                            "{} is not a source of picks; the only one is \"follow-back\"",
                            quoted(p.get_ref())
                        ),
                    );
                    None
                }
                None => {
                    self.error(
                        span,
                        "[open_content] picks",
                        "missing; write picks = \"follow-back\" (or remove [open_content])",
                    );
                    None
                }
            }
        });
        let templates = files::templates(files);
        let templates = match (templates, &default_language) {
            (Ok(mut templates), Some(lang)) => {
                if templates.languages.contains(lang.get_ref()) {
                    templates.default_language = lang.get_ref().clone();
                } else {
                    self.error(
                        lang.span(),
                        "default_language",
                        format_args!(
                            "{} has no folder templates/{}/; add it (subject.txt.j2, body.mjml.j2, body.txt.j2) or name one of: {}",
                            quoted(lang.get_ref()),
                            lang.get_ref(),
                            if templates.languages.is_empty() { "(none)".to_owned() } else { templates.languages.join(", ") }
                        ),
                    );
                }
                Some(templates)
            }
            (Ok(_), None) => None,
            (Err(mut errors), _) => {
                self.errors.append(&mut errors);
                None
            }
        };
        Some(Definition {
            name: name?.into_inner(),
            description: description?.into_inner(),
            topic: topic?.into_inner(),
            recipients,
            audience: audience?,
            audience_by: audience_by?,
            data,
            skip,
            params,
            templates: templates?,
            schedule,
            window_days,
            open_content,
        })
    }

    fn params(
        &mut self,
        raw: Option<Spanned<BTreeMap<Spanned<String>, Spanned<toml::Value>>>>,
    ) -> BTreeMap<String, serde_json::Value> {
        let mut params = BTreeMap::new();
        for (name, value) in raw.map(Spanned::into_inner).unwrap_or_default() {
            let field = format!("[params] {}", name.get_ref());
            let n = name.get_ref();
            let ok = n.len() <= 40
                && n.starts_with(|c: char| c.is_ascii_lowercase())
                && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok {
                self.error(name.span(), &field, "a param's name is a-z then up to 39 of a-z, A-Z, 0-9 and _ (MongoDB's rule for variables); rename it");
            } else if VARIABLES.contains(&n.as_str()) || n == DATA_VARIABLE {
                self.error(
                    name.span(),
                    &field,
                    format_args!("$${n} is already a variable of every query; rename the param"),
                );
            }
            match json(value.get_ref()) {
                Ok(v) => {
                    params.insert(name.into_inner(), v);
                }
                Err(why) => self.error(value.span(), &field, why),
            }
        }
        params
    }

    fn recipients(&mut self, raw: Option<Spanned<RecipientsToml>>) -> Recipients {
        let r = raw.map(Spanned::into_inner).unwrap_or(RecipientsToml {
            collection: None,
            email: None,
            name: None,
            language: None,
            zone: None,
            subscribed: None,
            topics: None,
            suppression: None,
        });
        let collection = self
            .collection(r.collection, "[recipients] collection")
            .unwrap_or_else(|| "users".into());
        let mut path =
            |value: Option<Spanned<String>>, key: &str, default: &str, optional: bool| {
                let field = format!("[recipients] {key}");
                match value {
                    None => Some(default.to_owned()),
                    Some(v) if optional && v.get_ref().is_empty() => None,
                    Some(v) => {
                        if let Err(why) = field_path(v.get_ref()) {
                            self.error(v.span(), &field, why);
                        }
                        Some(v.into_inner())
                    }
                }
            };
        Recipients {
            collection,
            email: path(r.email, "email", "email", false).unwrap_or_default(),
            name: path(r.name, "name", "name", true),
            language: path(r.language, "language", "locale", true),
            zone: path(r.zone, "zone", "timezone", true),
            subscribed: path(r.subscribed, "subscribed", "subscribed", false).unwrap_or_default(),
            topics: path(r.topics, "topics", "topics", false).unwrap_or_default(),
            suppressed: path(r.suppression, "suppression", "suppression", false)
                .unwrap_or_default(),
        }
    }

    fn collection(&mut self, value: Option<Spanned<String>>, field: &str) -> Option<String> {
        let v = value?;
        let c = v.get_ref();
        let ok = !c.is_empty()
            && c.len() <= 120
            && !c.starts_with("system.")
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !ok {
            self.error(v.span(), field, format_args!("{} is not a collection name (1-120 of A-Z, a-z, 0-9, _, . and -, not system.*); fix it", quoted(c)));
        }
        Some(v.into_inner())
    }

    fn by(&mut self, value: Spanned<String>, field: &str) -> String {
        if let Err(why) = field_path(value.get_ref()) {
            self.error(value.span(), field, why);
        }
        value.into_inner()
    }

    fn pipeline(
        &mut self,
        value: Option<Spanned<String>>,
        field: &str,
        variables: &BTreeSet<String>,
    ) -> Option<Vec<serde_json::Value>> {
        let Some(value) = value else {
            return Some(Vec::new());
        };
        let span = value.span();
        match pipeline::parse(value.get_ref(), variables) {
            Ok(stages) => Some(stages),
            Err(problems) => {
                let raw = self.text.get(span.clone()).unwrap_or_default();
                let first_line = self.line(span.clone());
                // A multi-line string's first newline is not part of the value.
                let skipped = usize::from(
                    raw.starts_with("'''\n")
                        || raw.starts_with("\"\"\"\n")
                        || raw.starts_with("'''\r\n")
                        || raw.starts_with("\"\"\"\r\n"),
                );
                for p in problems {
                    let line = match (&p.line, &p.token) {
                        (Some(l), _) => first_line + skipped + l - 1,
                        (None, Some(token)) => raw
                            .find(token.as_str())
                            .map_or(first_line, |at| line_of(self.text, span.start + at)),
                        (None, None) => first_line,
                    };
                    self.errors
                        .push(format!("{CAMPAIGN_TOML}:{line}: {field}: {}", p.message));
                }
                None
            }
        }
    }

    fn audience(
        &mut self,
        raw: Spanned<AudienceToml>,
        variables: &BTreeSet<String>,
    ) -> (Option<Query>, Option<String>) {
        let span = raw.span();
        let a = raw.into_inner();
        let collection = self.required(
            a.collection,
            span.clone(),
            "[audience] collection",
            "name the collection the audience query runs on",
        );
        let collection = self.collection(collection, "[audience] collection");
        let by = match a.by {
            Some(by) => self.by(by, "[audience] by"),
            None => "_id".to_owned(),
        };
        let pipeline = self.pipeline(a.pipeline, "[audience] pipeline", variables);
        match (collection, pipeline) {
            (Some(collection), Some(pipeline)) => (
                Some(Query {
                    collection,
                    pipeline,
                }),
                Some(by),
            ),
            _ => (None, Some(by)),
        }
    }

    fn data(
        &mut self,
        name: &str,
        raw: Spanned<DataToml>,
        variables: &BTreeSet<String>,
    ) -> Option<DataQuery> {
        let span = raw.span();
        let d = raw.into_inner();
        let table = format!("[data.{name}]");
        let collection = self.required(
            d.collection,
            span.clone(),
            &format!("{table} collection"),
            &format!("name the collection {name:?} is read from"),
        );
        let collection = self.collection(collection, &format!("{table} collection"));
        let by = self
            .required(
                d.by,
                span.clone(),
                &format!("{table} by"),
                &format!("name the field of {name:?} that holds the user id"),
            )
            .map(|by| self.by(by, &format!("{table} by")));
        let user = d.user.map(|u| self.by(u, &format!("{table} user")));
        let pipeline = self.pipeline(d.pipeline, &format!("{table} pipeline"), variables);
        let by = by?;
        Some(DataQuery {
            query: Query {
                collection: collection?,
                pipeline: pipeline?,
            },
            user: user.unwrap_or_else(|| by.clone()),
            by,
            first: d.first.is_some_and(|f| *f.get_ref()),
        })
    }

    fn skip(
        &mut self,
        raw: Option<Spanned<Vec<Spanned<SkipToml>>>>,
        data: &BTreeSet<String>,
    ) -> Vec<SkipRule> {
        let mut rules = Vec::new();
        let mut reasons = BTreeSet::new();
        for (i, rule) in raw
            .map(Spanned::into_inner)
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let span = rule.span();
            let s = rule.into_inner();
            let table = format!("[[skip]] #{}", i + 1);
            let query = self.required(
                s.data,
                span.clone(),
                &format!("{table} data"),
                "name the data query whose result decides",
            );
            if let Some(q) = &query {
                if !data.contains(q.get_ref()) {
                    let known: Vec<&str> = data.iter().map(String::as_str).collect();
                    self.error(
                        q.span(),
                        &format!("{table} data"),
                        format_args!(
                            "{} is not a data query; name one of: {}",
                            quoted(q.get_ref()),
                            if known.is_empty() {
                                "(none: add a [data.<name>] table)".to_owned()
                            } else {
                                known.join(", ")
                            }
                        ),
                    );
                }
            }
            let when = self.required(
                s.when,
                span.clone(),
                &format!("{table} when"),
                "write when = \"empty\"",
            );
            let when = when.and_then(|w| match w.get_ref().as_str() {
                "empty" => Some(SkipWhen::Empty),
                other => {
                    self.error(
                        w.span(),
                        &format!("{table} when"),
                        format_args!(
                            "{} is not a condition; the only one is \"empty\" (null or [])",
                            quoted(other)
                        ),
                    );
                    None
                }
            });
            let reason = self.required(
                s.reason,
                span.clone(),
                &format!("{table} reason"),
                "name the reason it is counted under: 1-40 of a-z, 0-9 and _",
            );
            if let Some(r) = &reason {
                if !is_name(r.get_ref(), 40, b"_") {
                    self.error(
                        r.span(),
                        &format!("{table} reason"),
                        format_args!(
                            "{} is not 1-40 of a-z, 0-9 and _; rename it",
                            quoted(r.get_ref())
                        ),
                    );
                } else if !reasons.insert(r.get_ref().clone()) {
                    self.error(
                        r.span(),
                        &format!("{table} reason"),
                        format_args!(
                            "{} is the reason of an earlier rule too; give each rule its own",
                            quoted(r.get_ref())
                        ),
                    );
                }
            }
            if let (Some(data), Some(when), Some(reason)) = (query, when, reason) {
                rules.push(SkipRule {
                    data: data.into_inner(),
                    when,
                    reason: reason.into_inner(),
                });
            }
        }
        rules
    }
}

/// A dotted field path of MongoDB's: segments of anything but `$` first, `.` or NUL.
fn field_path(raw: &str) -> Result<(), String> {
    let ok = !raw.is_empty()
        && raw.len() <= 200
        && raw
            .split('.')
            .all(|s| !s.is_empty() && !s.starts_with('$') && !s.contains('\0'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a field path (dotted names like profile.email, none starting with $); fix it",
            quoted(raw)
        ))
    }
}

/// An EventBridge Scheduler expression's shape: `cron(<6 fields>)`, `rate(<n> <unit>)` or
/// `at(<yyyy-mm-ddThh:mm:ss>)`.
fn schedule_ok(raw: &str) -> Result<(), String> {
    let inner = |prefix: &str| raw.strip_prefix(prefix).and_then(|r| r.strip_suffix(')'));
    let ok = if let Some(cron) = inner("cron(") {
        cron.split_whitespace().count() == 6
    } else if let Some(rate) = inner("rate(") {
        match rate.split_once(' ') {
            Some((n, unit)) => {
                n.parse::<u32>().is_ok_and(|n| n > 0)
                    && ["minute", "minutes", "hour", "hours", "day", "days"].contains(&unit)
            }
            None => false,
        }
    } else if let Some(at) = inner("at(") {
        time::PrimitiveDateTime::parse(
            at,
            time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]"),
        )
        .is_ok()
    } else {
        false
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not an EventBridge Scheduler expression; write cron(0 9 ? * MON *), rate(7 days) or at(2026-12-01T09:00:00)",
            quoted(raw)
        ))
    }
}

/// A param's TOML value as JSON (what the templates and `$$<param>` get).
fn json(value: &toml::Value) -> Result<serde_json::Value, String> {
    Ok(match value {
        toml::Value::String(s) => s.clone().into(),
        toml::Value::Integer(i) => (*i).into(),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .ok_or("not a finite number; write one")?
            .into(),
        toml::Value::Boolean(b) => (*b).into(),
        toml::Value::Datetime(_) => {
            return Err("a date is not a param's value yet; write it as a string".into())
        }
        toml::Value::Array(items) => items
            .iter()
            .map(json)
            .collect::<Result<Vec<_>, _>>()?
            .into(),
        toml::Value::Table(t) => t
            .iter()
            .map(|(k, v)| Ok((k.clone(), json(v)?)))
            .collect::<Result<serde_json::Map<_, _>, String>>()?
            .into(),
    })
}

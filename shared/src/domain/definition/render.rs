//! A definition's emails: its templates compiled once (`DefinitionTemplates`), then one
//! user's subject, HTML and text from their data (`render`), and the check every sample
//! renders in every language and body (`check_samples`).
//!
//! Templates are MiniJinja, strict (a variable the context does not have is an error, not
//! an empty string); `.mjml` ones are HTML-escaped, then rendered to responsive HTML by
//! mrml with the digest's options, once per shape of email (`shapes`); `.txt` ones stay
//! plain. User data is escaped in HTML and
//! never evaluated as template code. The context (docs: SPEC's "template context"):
//!
//! ```text
//! locale               the language folder chosen (`language::closest`)
//! user                 {id, name}: name printable, or none
//! data                 {<data query name>: its result (values::data_value)}
//! params               the campaign's params (a sample may override some)
//! since, until         DateValue: the window's first and last day
//! topic                the topic's label in that language
//! leave_url, manage_url, picks ([{image, badge, link}], empty when none)
//! subject              in bodies only: the rendered subject
//! ```

use super::values::{data_value, to_value};
use super::{Definition, EmailData, Files};
use crate::domain::campaign::Window;
use crate::domain::digest::{
    html_url, mjml_options, subject_line, RenderError, Rendered, MAX_SUBJECT_BYTES,
    MAX_SUBJECT_TEMPLATE,
};
use crate::domain::open_content::SlotUrls;
use crate::domain::text::{printable, printable_name};
use crate::domain::topics::{Topic, Topics};
use crate::domain::unsubscribe_link;
use crate::domain::user_id::UserId;
use minijinja::{context, Environment, Value};
use serde::Deserialize;
use std::collections::BTreeMap;

/// One email's inputs besides the user and their data.
#[derive(Clone, Copy, Debug)]
pub struct Email<'a> {
    pub window: &'a Window,
    pub topic: &'a Topic,
    /// The user's preference centre link (`unsubscribe_link::link`); the footer's first
    /// link, which leaves the topic, is made from it (`unsubscribe_link::leave_link`).
    pub manage_url: &'a str,
    /// Open-time pick slots (none: the templates show no picks).
    pub picks: &'a [SlotUrls],
    /// An experiment's body (`<lang>/<variant>/body.*`), or the language's own.
    pub variant: Option<&'a str>,
    /// An experiment variant's subject in this language, in place of `subject.txt`'s: a
    /// template with `subject.txt`'s context.
    pub subject: Option<&'a str>,
}

/// A definition's templates, compiled once.
pub struct DefinitionTemplates {
    env: Environment<'static>,
    languages: Vec<String>,
    default_language: String,
    variants: Vec<String>,
    params: Value,
    mjml: mrml::prelude::render::RenderOptions,
    shapes: shapes::Shapes,
}

/// The context's top-level names, for errors about one it does not have.
const CONTEXT: &str =
    "locale, user, data, params, since, until, topic, leave_url, manage_url, picks, subject";

/// The name an experiment variant's subject in a language is rendered under.
const VARIANT_SUBJECT: &str = "experiment subject:";

/// Instructions one template render may run (MiniJinja's fuel): a loop that would spin a
/// Lambda to its timeout stops with an error instead, while an email listing thousands of
/// rows stays well within it.
const TEMPLATE_FUEL: u64 = 500_000;

/// How a variant's subject that does not render is met: `Strict` when it is checked (the
/// start's check on the samples), `Lenient` for a user's email (users are not samples: the
/// language's own subject is sent, as the digest does).
#[derive(Clone, Copy, PartialEq, Eq)]
enum VariantSubject {
    Strict,
    Lenient,
}

/// The template file a template name stands for.
fn file(name: &str) -> String {
    match name.strip_prefix(VARIANT_SUBJECT) {
        Some(language) => format!("the experiment variant's {language} subject"),
        None => format!("templates/{name}.j2"),
    }
}

/// One line: the template file and line where it failed, and what failed. A failure in an
/// imported or extended template names that template (the innermost error).
fn describe(err: &minijinja::Error) -> String {
    let mut inner = err;
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        if let Some(e) = s.downcast_ref::<minijinja::Error>() {
            inner = e;
        }
        source = s.source();
    }
    let place = match (inner.name(), inner.line()) {
        (Some(name), Some(line)) => format!("{}:{line}: ", file(name)),
        (Some(name), None) => format!("{}: ", file(name)),
        _ => String::new(),
    };
    let what = match inner.detail() {
        Some(detail) => format!("{}: {detail}", inner.kind()),
        None => inner.kind().to_string(),
    };
    let hint = match inner.kind() {
        minijinja::ErrorKind::UndefinedError => format!(" (the context has {CONTEXT})"),
        _ => String::new(),
    };
    format!("{place}{what}{hint}")
}

impl DefinitionTemplates {
    /// Compiles every template; the errors, one line each naming the file and line.
    pub fn new(definition: &Definition) -> Result<Self, Vec<String>> {
        let templates = &definition.templates;
        let mut env = Environment::new();
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".mjml") {
                minijinja::AutoEscape::Html
            } else {
                minijinja::AutoEscape::None
            }
        });
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.set_fuel(Some(TEMPLATE_FUEL));
        let mut errors = Vec::new();
        for (name, source) in &templates.files {
            if let Err(e) = env.add_template_owned(name.clone(), source.clone()) {
                errors.push(describe(&e));
            }
        }
        if !templates.languages.contains(&templates.default_language) {
            errors.push(format!(
                "campaign.toml: default_language {:?} has no templates/{}/ folder (have: {})",
                templates.default_language,
                templates.default_language,
                templates.languages.join(", ")
            ));
        }
        let needed = |folder: &str, names: &[&str]| -> Vec<String> {
            names
                .iter()
                .map(|n| format!("{folder}/{n}"))
                .filter(|n| !templates.files.contains_key(n))
                .map(|n| format!("{}: missing (every language has its own)", file(&n)))
                .collect()
        };
        for language in &templates.languages {
            errors.extend(needed(language, &["subject.txt", "body.mjml", "body.txt"]));
            for variant in &templates.variants {
                errors.extend(needed(
                    &format!("{language}/{variant}"),
                    &["body.mjml", "body.txt"],
                ));
            }
        }
        let mut params = BTreeMap::new();
        for (name, json) in &definition.params {
            match to_value(json) {
                Ok(value) => {
                    params.insert(name.clone(), value);
                }
                Err(e) => errors.push(format!("campaign.toml: params.{name}: {e}")),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Self {
            env,
            languages: templates.languages.clone(),
            default_language: templates.default_language.clone(),
            variants: templates.variants.clone(),
            params: Value::from(params),
            mjml: mjml_options(),
            shapes: shapes::Shapes::default(),
        })
    }

    /// The language a user's email is written in (as the digest chooses its locale).
    pub fn language_for(&self, user_language: Option<&str>) -> &str {
        crate::domain::language::closest(
            user_language,
            self.languages.iter().map(String::as_str),
            &self.default_language,
        )
    }

    /// One user's email in their language.
    pub fn render(&self, user: &EmailData, email: &Email<'_>) -> Result<Rendered, RenderError> {
        let data = data_value(&user.data, "data").map_err(|detail| RenderError::Data { detail })?;
        let language = self.language_for(user.language.as_deref());
        self.render_in(
            language,
            &user.user_id,
            user.name.as_deref(),
            data,
            self.params.clone(),
            email,
            VariantSubject::Lenient,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn render_in(
        &self,
        language: &str,
        user_id: &UserId,
        name: Option<&str>,
        data: Value,
        params: Value,
        email: &Email<'_>,
        variant_subject: VariantSubject,
    ) -> Result<Rendered, RenderError> {
        let body = match email.variant {
            Some(variant) => format!("{language}/{variant}/body"),
            None => format!("{language}/body"),
        };
        let leave_url = unsubscribe_link::leave_link(email.manage_url);
        let id = match user_id {
            UserId::Text(s) => printable(s),
            UserId::ObjectId(bytes) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        };
        let base = context! {
            locale => language,
            user => context! { id => id, name => name.and_then(printable_name) },
            data => data,
            params => params,
            since => super::DateValue::value(email.window.since),
            until => super::DateValue::value(email.window.until - time::Duration::seconds(1)),
            topic => email.topic.label(language),
        };
        let text_picks: Vec<Value> = email
            .picks
            .iter()
            .map(|p| context! { image => &p.image, badge => &p.badge, link => &p.link })
            .collect();
        let plain = context! {
            leave_url => &leave_url,
            manage_url => email.manage_url,
            picks => text_picks,
            ..base.clone()
        };
        let own = format!("{language}/subject.txt");
        let subject = match email.subject {
            Some(source) => {
                let name = format!("{VARIANT_SUBJECT}{language}");
                let rendered = self.variant_subject(&name, source, plain.clone(), variant_subject);
                match (rendered, variant_subject) {
                    (Ok(subject), _) => Some(subject),
                    (Err(err), VariantSubject::Strict) => return Err(err),
                    (Err(err), VariantSubject::Lenient) => {
                        tracing::warn!(language, reason = %err, "the variant's subject does not render for this user; the language's own is sent");
                        None
                    }
                }
            }
            None => None,
        };
        let subject = match subject {
            Some(subject) => subject,
            None => subject_line(&self.fill(&own, plain.clone())?),
        };
        let text = self.fill(
            &format!("{body}.txt"),
            context! { subject => &subject, ..plain },
        )?;
        let html_picks: Vec<Value> = email
            .picks
            .iter()
            .map(|p| context! { image => html_url(&p.image), badge => html_url(&p.badge), link => html_url(&p.link) })
            .collect();
        let mjml_name = format!("{body}.mjml");
        let mjml = self.fill(
            &mjml_name,
            context! {
                subject => &subject,
                leave_url => html_url(&leave_url),
                manage_url => html_url(email.manage_url),
                picks => html_picks,
                ..base
            },
        )?;
        let html = self.shapes.html(&self.mjml, &file(&mjml_name), &mjml)?;
        Ok(Rendered {
            subject,
            html,
            text,
            locale: language.to_owned(),
        })
    }

    /// An experiment variant's subject (given with the run, not a file: compiled here; it is
    /// short, and rendered only for the users of its variant), on one line, not empty and
    /// within a header line. Its length as a template is checked when the experiment is
    /// (`Strict`): a campaign started before the bound keeps its subjects.
    fn variant_subject(
        &self,
        name: &str,
        source: &str,
        ctx: Value,
        mode: VariantSubject,
    ) -> Result<String, RenderError> {
        let template_error = |source| RenderError::Template {
            template: file(name),
            source,
        };
        if mode == VariantSubject::Strict && source.len() > MAX_SUBJECT_TEMPLATE {
            return Err(template_error(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!(
                    "{} bytes of template; at most {MAX_SUBJECT_TEMPLATE}",
                    source.len()
                ),
            )));
        }
        let subject = self
            .env
            .render_named_str(name, source, ctx)
            .map_err(template_error)?;
        let subject = checked_subject(name, subject)?;
        if subject.is_empty() {
            return Err(template_error(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "the subject renders empty",
            )));
        }
        Ok(subject)
    }

    fn fill(&self, name: &str, ctx: Value) -> Result<String, RenderError> {
        self.env
            .get_template(name)
            .and_then(|t| t.render(ctx))
            .map_err(|source| RenderError::Template {
                template: file(name),
                source,
            })
    }
}

/// A variant's rendered subject on one line, refused when longer than a header line may be
/// (the language's own is sent instead: a subject written in `subject.txt` is the
/// definition's own, checked on its samples).
fn checked_subject(name: &str, rendered: String) -> Result<String, RenderError> {
    let subject = subject_line(&rendered);
    match subject.len() > MAX_SUBJECT_BYTES {
        true => Err(RenderError::SubjectTooLong {
            template: file(name),
            bytes: subject.len(),
        }),
        false => Ok(subject),
    }
}

mod samples;
mod shapes;
pub use samples::{check_experiment, check_samples, Sample, SampleUser};

#[cfg(test)]
mod tests;

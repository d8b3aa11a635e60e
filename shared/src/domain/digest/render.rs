//! Over 450 lines because the shape cache is only trusted beside the test that holds it to
//! mrml's own output, here at the end.
//! Rendering: subject, HTML and text in the user's locale, from the template files in
//! `shared/templates/digest/` (compiled into the binary). The HTML is MJML filled in by
//! MiniJinja, then rendered to responsive HTML by mrml. Every template of every locale is
//! compiled and rendered with sample data at init, so a broken template stops the function
//! at cold start, never mid-campaign. User data (names) is escaped in HTML and never
//! evaluated as template code.
//!
//! mrml runs once per shape of email, not once per email (about 100 µs of CreateEmails' CPU
//! per email, docs/benchmarks.md). MiniJinja fills the MJML with a sentinel for each of
//! the user's values (name, names listed, counts printed, subject, links); that MJML is the
//! shape's key, so it cannot disagree with the templates' conditionals, and mrml renders it
//! once. Each email's HTML is then the shape's with its values put in, in one pass, as
//! MiniJinja and mrml would have written them (`Shape`). What a condition reads stays real:
//! a count of one (`== 1`), and `others` when it is 0 or 1 (the templates test it as
//! `{% if others %}`, which a sentinel passes as any count above one does). A template that
//! filters or tests any other user value (`|title`, `{% if name %}`) would act on the
//! sentinel, not the value: keep such logic in Rust. The unit test
//! `the_shape_cache_makes_every_email_as_mrml_alone_would` holds the cache to mrml's own
//! output over hostile names, every locale and every count; init checks a sample too.

use super::Digest;
use crate::domain::campaign::Window;
use crate::domain::open_content::SlotUrls;
use crate::domain::topics::{Topic, Topics};
use crate::domain::unsubscribe_link;
use minijinja::{context, Environment, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The locales with templates: a user's `locale` (`fr`, `fr-CA`, `de_DE`...) picks by its
/// language; anything else gets the default (`DEFAULT_LOCALE`).
pub const LOCALES: &[&str] = &["en", "fr", "de"];

macro_rules! template {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../../templates/digest/", $name, ".j2")),
        )
    };
}

const TEMPLATES: &[(&str, &str)] = &[
    template!("layout.mjml"),
    template!("picks.mjml"),
    template!("en/subject.txt"),
    template!("en/body.mjml"),
    template!("en/body.txt"),
    template!("en/dates"),
    template!("fr/subject.txt"),
    template!("fr/body.mjml"),
    template!("fr/body.txt"),
    template!("fr/dates"),
    template!("de/subject.txt"),
    template!("de/body.mjml"),
    template!("de/body.txt"),
    template!("de/dates"),
    template!("en/short/body.mjml"),
    template!("en/short/body.txt"),
    template!("fr/short/body.mjml"),
    template!("fr/short/body.txt"),
    template!("de/short/body.mjml"),
    template!("de/short/body.txt"),
];

/// The bundled alternatives to each locale's body (`{locale}/{name}/body.*`) an
/// experiment's variant may name (docs/experiments.md).
pub const BODY_VARIANTS: &[&str] = &["short"];

/// One email's window, topic, preference-centre URL and pick slots.
pub type Email<'a> = (&'a Window, &'a Topic, &'a str, &'a [SlotUrls]);

/// What a variant of an experiment changes in the email: the subject (a MiniJinja template
/// with the variables of `subject.txt`) and the body (one of `BODY_VARIANTS`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Look<'a> {
    pub subject: Option<&'a str>,
    pub body: Option<&'a str>,
}

/// The variables a subject template is given, with sample values: one follower and no
/// names, several with two names, many with more than are listed.
fn subject_samples() -> [Value; 3] {
    let sample = |new_followers: u64, recent: Vec<&'static str>, others: u64| {
        context! {
            locale => "en",
            name => "Sample",
            new_followers => new_followers,
            recent => recent,
            others => others,
            since => context! { day => 1, month => 1, year => 2026 },
            until => context! { day => 7, month => 1, year => 2026 },
            topic => "Weekly digest",
        }
    };
    [
        sample(1, vec![], 0),
        sample(2, vec!["A", "B"], 0),
        sample(5000, vec!["A", "B", "C"], 4997),
    ]
}

/// The longest subject template an experiment may give (its campaign item holds five
/// variants in every locale).
pub const MAX_SUBJECT_TEMPLATE: usize = 500;

/// Whether an experiment's subject template compiles and renders with the variables
/// `subject.txt` has (any other is an error, as when an email is rendered), for one
/// follower and no names as for many. A user's email whose variant subject still fails or
/// renders empty gets the templates' own subject (`Renderer::render_look`).
pub fn check_subject(template: &str) -> Result<(), String> {
    if template.len() > MAX_SUBJECT_TEMPLATE {
        return Err(format!(
            "{} bytes; at most {MAX_SUBJECT_TEMPLATE}",
            template.len()
        ));
    }
    let mut env = Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    for sample in subject_samples() {
        let subject = env
            .render_str(template, sample)
            .map_err(|e| format!("{e:#}"))?;
        if subject.trim().is_empty() {
            return Err("it renders empty for some users".into());
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template {template}: {source:#}")]
    Template {
        template: String,
        #[source]
        source: minijinja::Error,
    },
    #[error("template {template}: the MJML does not render: {detail}")]
    Mjml { template: String, detail: String },
    #[error("DEFAULT_LOCALE {0:?} has no templates (have: {have})", have = LOCALES.join(", "))]
    UnknownLocale(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub subject: String,
    pub html: String,
    pub text: String,
    pub locale: &'static str,
}

pub struct Renderer {
    env: Environment<'static>,
    default_locale: &'static str,
    mjml: mrml::prelude::render::RenderOptions,
    /// The HTML of each shape of email met so far, keyed by its MJML with sentinels for the
    /// user's values (`Holes`): mrml runs once per shape, not once per email.
    shapes: Mutex<HashMap<String, Option<Arc<Shape>>>>,
}

/// Shapes kept at most. A campaign has about 3 × (`RECENT_FOLLOWERS_SHOWN` + 1) per locale
/// (whether there is one new follower, how many names are listed, whether one or more are
/// left unnamed): 36 at the defaults. This holds a few campaigns at once with many names
/// listed, in about 8 MB of HTML at most (15 KB a shape); over it the cache starts again.
const MAX_SHAPES: usize = 512;

/// Where two HTML texts first differ, and what each has there.
fn first_difference(cached: &str, direct: &str) -> String {
    let at = cached
        .chars()
        .zip(direct.chars())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| cached.chars().count().min(direct.chars().count()));
    let around =
        |html: &str| -> String { html.chars().skip(at.saturating_sub(60)).take(120).collect() };
    format!(
        "at character {at}, cached {:?}, direct {:?}",
        around(cached),
        around(direct)
    )
}

/// How the HTML is made: from the shape cache, or by mrml for this email alone.
#[derive(Clone, Copy)]
enum Path {
    Cached,
    Direct,
}

/// A URL built from a checked base URL and a base64url token, as the HTML carries it: `&`
/// is the only character HTML needs escaped in it (escaping `/` too would garble the link).
fn html_url_text(url: &str) -> String {
    url.replace('&', "&amp;")
}

fn html_url(url: &str) -> Value {
    Value::from_safe_string(html_url_text(url))
}

/// Marks a sentinel's start and end: characters of Unicode's private use area, which no
/// template and no built-in topic's label contains (a shape whose HTML has one the renderer
/// did not place is made directly, `Shape::new`).
const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';
const OPEN_IN_TEXT: &str = "\u{E000}";
const CLOSE_IN_TEXT: &str = "\u{E001}";

/// One email's values, each as MiniJinja prints it in the MJML, and the sentinel that stands
/// for it in the shape's key: `OPEN`, its index, `CLOSE`.
#[derive(Default)]
struct Holes {
    values: Vec<String>,
}

impl Holes {
    /// A value printed as it is (a number; a URL already escaped for HTML).
    fn printed(&mut self, value: String) -> Value {
        let sentinel = format!("{OPEN}{}{CLOSE}", self.values.len());
        self.values.push(value);
        Value::from(sentinel)
    }

    /// Text the template prints HTML-escaped (the MJML templates escape by file name).
    fn escaped(&mut self, text: &str) -> Value {
        self.printed(minijinja::HtmlEscape(text).to_string())
    }
}

/// A sentinel as mrml writes it in an attribute's value: it writes every attribute with
/// Rust's `{:?}`, which escapes the private use area (and quotes, backslashes, control and
/// combining characters) as `\u{...}`. Text it copies as it is.
const OPEN_IN_ATTRIBUTE: &str = "\\u{e000}";
const CLOSE_IN_ATTRIBUTE: &str = "\\u{e001}";

/// The HTML of one shape: literal pieces, and between them the index of a value.
#[derive(Debug)]
struct Shape {
    pieces: Vec<Piece>,
}

#[derive(Debug)]
enum Piece {
    Literal(String),
    /// A value in text, as MiniJinja printed it.
    Text(usize),
    /// A value in an attribute, escaped as mrml escapes attributes (`attribute_value`).
    Attribute(usize),
}

/// A value as mrml writes it inside an attribute's quotes (`{:?}` escapes each character
/// alone, so a value's part of an attribute is escaped the same whatever surrounds it).
fn attribute_value(value: &str) -> Cow<'_, str> {
    if value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        return Cow::Borrowed(value);
    }
    let quoted = format!("{value:?}");
    Cow::Owned(quoted[1..quoted.len() - 1].to_owned())
}

impl Shape {
    /// Splits mrml's HTML at the sentinels, in text or in attributes; None if it holds a
    /// sentinel's character (or its escape) that is not one of the `holes` placed: then the
    /// shape is not cached, and its emails are made directly.
    fn new(html: &str, holes: usize) -> Option<Self> {
        let mut pieces = Vec::new();
        let mut rest = html;
        loop {
            let raw = rest.find([OPEN, CLOSE]);
            let escaped = [OPEN_IN_ATTRIBUTE, CLOSE_IN_ATTRIBUTE]
                .iter()
                .filter_map(|mark| rest.find(mark))
                .min();
            let (start, in_attribute) = match (raw, escaped) {
                (None, None) => break,
                (Some(r), Some(e)) => (r.min(e), e < r),
                (None, Some(e)) => (e, true),
                (Some(r), None) => (r, false),
            };
            let (open, close) = match in_attribute {
                true => (OPEN_IN_ATTRIBUTE, CLOSE_IN_ATTRIBUTE),
                false => (OPEN_IN_TEXT, CLOSE_IN_TEXT),
            };
            let (literal, tail) = rest.split_at(start);
            let tail = tail.strip_prefix(open)?;
            let end = tail.find(close)?;
            let digits = &tail[..end];
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let index: usize = digits.parse().ok().filter(|i| *i < holes)?;
            if !literal.is_empty() {
                pieces.push(Piece::Literal(literal.to_owned()));
            }
            pieces.push(match in_attribute {
                true => Piece::Attribute(index),
                false => Piece::Text(index),
            });
            rest = &tail[end + close.len()..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Literal(rest.to_owned()));
        }
        Some(Self { pieces })
    }

    /// The HTML with this email's values in their places, in one pass: a value is written
    /// once and never read again, so sentinel characters in a user's name stay text. None if
    /// a value is missing (never, for an email of the shape's key).
    fn fill(&self, values: &[String]) -> Option<String> {
        let parts = self
            .pieces
            .iter()
            .map(|piece| {
                Some(match piece {
                    Piece::Literal(text) => Cow::Borrowed(text.as_str()),
                    Piece::Text(i) => Cow::Borrowed(values.get(*i)?.as_str()),
                    Piece::Attribute(i) => attribute_value(values.get(*i)?),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(parts.concat())
    }
}

/// A date as the templates format it (each locale names its months).
fn date(t: time::OffsetDateTime) -> Value {
    context! { day => t.day(), month => u8::from(t.month()), year => t.year() }
}

impl Renderer {
    /// Compiles every template and renders every locale with sample data (names with markup
    /// and template syntax among them), so that errors surface at init.
    pub fn new(default_locale: &str) -> Result<Self, RenderError> {
        let default_locale = LOCALES
            .iter()
            .copied()
            .find(|l| *l == default_locale)
            .ok_or_else(|| RenderError::UnknownLocale(default_locale.to_owned()))?;
        let mut env = Environment::new();
        // Escape by file name: MJML is HTML, text templates stay plain.
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".mjml") {
                minijinja::AutoEscape::Html
            } else {
                minijinja::AutoEscape::None
            }
        });
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        for (name, source) in TEMPLATES {
            env.add_template(name, source)
                .map_err(|source| RenderError::Template {
                    template: name.to_string(),
                    source,
                })?;
        }
        let mjml = mrml::prelude::render::RenderOptions {
            disable_comments: true,
            // No web fonts: the layout names system fonts, and nothing is loaded from
            // elsewhere when the email is opened.
            fonts: Default::default(),
            ..Default::default()
        };
        let renderer = Self {
            env,
            default_locale,
            mjml,
            shapes: Mutex::default(),
        };
        let sample = Digest {
            user_id: "sample".into(),
            email: "sample@example.com".into(),
            name: "<b>Sample</b> {{ name }}".into(),
            locale: None,
            new_followers: 5,
            recent: vec!["A & B".into(), "</mj-text>".into()],
        };
        let window = crate::domain::campaign::Campaign::from_id("weekly-2026-W01", None)
            .map(|c| c.window)
            .expect("weekly-2026-W01 is a valid weekly id");
        for locale in LOCALES {
            let digest = Digest {
                locale: Some(locale.to_string()),
                ..sample.clone()
            };
            let picks = [SlotUrls {
                image: "https://o.example/pick?t=a&b".into(),
                badge: "https://o.example/badge?t=a".into(),
                link: "https://o.example/go?t=a".into(),
            }];
            let args = (
                &digest,
                &window,
                Topics::builtin().weekly(),
                "https://unsubscribe.example/?token=t",
                &picks[..],
            );
            // Each body: the locale's own and every variant's an experiment may name.
            for body in std::iter::once(None).chain(BODY_VARIANTS.iter().copied().map(Some)) {
                let look = Look {
                    subject: None,
                    body,
                };
                let made = |path| {
                    renderer.render_with(args.0, (args.1, args.2, args.3, args.4), look, path)
                };
                let cached = made(Path::Cached)?;
                // The shape cache is held to mrml's own output (the unit tests over many
                // digests): a template that mrml would render differently around a user's
                // value stops the function here, not an email.
                let direct = made(Path::Direct)?;
                if cached.html != direct.html {
                    return Err(RenderError::Mjml {
                        template: format!(
                            "{locale}/{}body.mjml",
                            body.map_or(String::new(), |b| format!("{b}/"))
                        ),
                        detail: format!(
                            "the HTML made from the shape cache differs from mrml's: {}",
                            first_difference(&cached.html, &direct.html)
                        ),
                    });
                }
            }
        }
        renderer
            .shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(renderer)
    }

    /// The locale a user's email is written in.
    pub fn locale_for(&self, user_locale: Option<&str>) -> &'static str {
        let language = user_locale
            .and_then(|l| l.split(['-', '_']).next())
            .map(|l| l.trim().to_ascii_lowercase());
        LOCALES
            .iter()
            .copied()
            .find(|l| Some(*l) == language.as_deref())
            .unwrap_or(self.default_locale)
    }

    fn mjml_to_html(&self, locale: &str, mjml: &str) -> Result<String, RenderError> {
        let mjml_error = |detail: String| RenderError::Mjml {
            template: format!("{locale}/body.mjml"),
            detail,
        };
        mrml::parse(mjml)
            .map_err(|e| mjml_error(e.to_string()))?
            .element
            .render(&self.mjml)
            .map_err(|e| mjml_error(e.to_string()))
    }

    /// The shape whose key is `key` (the MJML filled with sentinels), rendered by mrml the
    /// first time; None if it cannot be cached (`Shape::new`). Every email of a key has the
    /// same sentinels in it, so at least the `holes` of the email that made the shape.
    fn shape(
        &self,
        locale: &str,
        key: String,
        holes: usize,
    ) -> Result<Option<Arc<Shape>>, RenderError> {
        if let Some(shape) = self.cached(&key) {
            return Ok(shape);
        }
        let html = self.mjml_to_html(locale, &key)?;
        let shape = Shape::new(&html, holes).map(Arc::new);
        let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        if shapes.len() >= MAX_SHAPES {
            shapes.clear();
        }
        shapes.insert(key, shape.clone());
        Ok(shape)
    }

    fn cached(&self, key: &str) -> Option<Option<Arc<Shape>>> {
        let shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        shapes.get(key).cloned()
    }

    fn fill(&self, name: String, ctx: Value) -> Result<String, RenderError> {
        self.env
            .get_template(&name)
            .and_then(|t| t.render(ctx))
            .map_err(|source| RenderError::Template {
                template: name,
                source,
            })
    }

    /// One user's email. The HTML comes from the shape cache (`Shape`): byte for byte
    /// what `render_direct` makes, without parsing and rendering the MJML for every email.
    pub fn render(
        &self,
        digest: &Digest,
        window: &Window,
        topic: &Topic,
        unsubscribe_url: &str,
        picks: &[SlotUrls],
    ) -> Result<Rendered, RenderError> {
        let look = Look::default();
        self.render_with(
            digest,
            (window, topic, unsubscribe_url, picks),
            look,
            Path::Cached,
        )
    }

    /// `render` with an experiment's variant: its subject and body where it has them.
    pub fn render_look(
        &self,
        digest: &Digest,
        email: Email<'_>,
        look: Look<'_>,
    ) -> Result<Rendered, RenderError> {
        self.render_with(digest, email, look, Path::Cached)
    }

    /// The email as it was made before the shape cache: MiniJinja fills the MJML with this
    /// user's values, mrml parses and renders it. The reference the cache is held to.
    #[cfg(test)]
    fn render_direct(
        &self,
        digest: &Digest,
        window: &Window,
        topic: &Topic,
        unsubscribe_url: &str,
        picks: &[SlotUrls],
    ) -> Result<Rendered, RenderError> {
        let look = Look::default();
        self.render_with(
            digest,
            (window, topic, unsubscribe_url, picks),
            look,
            Path::Direct,
        )
    }

    fn render_with(
        &self,
        digest: &Digest,
        email: Email<'_>,
        look: Look<'_>,
        path: Path,
    ) -> Result<Rendered, RenderError> {
        let (window, topic, unsubscribe_url, picks) = email;
        let locale = self.locale_for(digest.locale.as_deref());
        // A variant's body is the locale's own file under the variant's name.
        let body = match look.body {
            Some(name) => format!("{locale}/{name}/body"),
            None => format!("{locale}/body"),
        };
        // The footer's two links: leave this email's topic, or the whole preference centre.
        let leave_url = unsubscribe_link::leave_link(unsubscribe_url);
        let last_day = window.until - time::Duration::seconds(1);
        let text_picks: Vec<Value> = picks
            .iter()
            .map(|p| context! { image => &p.image, badge => &p.badge, link => &p.link })
            .collect();
        // Whatever the directory read, no control character reaches a template.
        let name = super::printable(&digest.name);
        let recent: Vec<String> = digest.recent.iter().map(|n| super::printable(n)).collect();
        let others = digest
            .new_followers
            .saturating_sub(digest.recent.len() as u64);
        let since = date(window.since);
        let until = date(last_day);
        let topic_label = topic.label(locale);
        let ctx = context! {
            locale => locale,
            name => &name,
            new_followers => digest.new_followers,
            recent => &recent,
            others => others,
            since => since.clone(),
            until => until.clone(),
            topic => topic_label,
            leave_url => &leave_url,
            manage_url => unsubscribe_url,
            picks => &text_picks,
        };
        // A variant's subject that fails or renders empty for this user (checked on samples
        // when the experiment was given, but users are not samples): the templates' own.
        let variant_subject = look.subject.and_then(|source| {
            match self.env.render_str(source, ctx.clone()) {
                Ok(subject) if !subject.trim().is_empty() => Some(subject),
                Ok(_) => {
                    tracing::warn!(locale, "the variant's subject renders empty for this user; the templates' own is sent");
                    None
                }
                Err(err) => {
                    tracing::warn!(locale, reason = %format!("{err:#}"), "the variant's subject does not render for this user; the templates' own is sent");
                    None
                }
            }
        });
        let subject = match variant_subject {
            Some(subject) => subject,
            None => self.fill(format!("{locale}/subject.txt"), ctx.clone())?,
        }
        .trim()
        .replace(['\r', '\n'], " ");
        // The shape's key holds the topic's label as it is: one with a sentinel character in
        // it is rendered directly (no built-in label has one).
        let path = match path {
            Path::Cached if topic_label.contains([OPEN, CLOSE]) => Path::Direct,
            path => path,
        };
        let html = match path {
            Path::Direct => {
                let html_picks: Vec<Value> = picks
                    .iter()
                    .map(|p| context! { image => html_url(&p.image), badge => html_url(&p.badge), link => html_url(&p.link) })
                    .collect();
                let mjml = self.fill(
                    format!("{body}.mjml"),
                    context! { subject => &subject, leave_url => html_url(&leave_url), manage_url => html_url(unsubscribe_url), picks => &html_picks, ..ctx.clone() },
                )?;
                self.mjml_to_html(locale, &mjml)?
            }
            Path::Cached => {
                // Every value of this user's is a sentinel in the MJML, printed where the
                // template prints it; what a condition reads stays real (`Holes`).
                let mut holes = Holes::default();
                let new_followers = match digest.new_followers {
                    1 => Value::from(1),
                    n => holes.printed(n.to_string()),
                };
                let others = match others {
                    0 | 1 => Value::from(others),
                    n => holes.printed(n.to_string()),
                };
                let key_ctx = context! {
                    locale => locale,
                    name => holes.escaped(&name),
                    new_followers => new_followers,
                    recent => recent.iter().map(|n| holes.escaped(n)).collect::<Vec<_>>(),
                    others => others,
                    since => since,
                    until => until,
                    topic => topic_label,
                    subject => holes.escaped(&subject),
                    leave_url => holes.printed(html_url_text(&leave_url)),
                    manage_url => holes.printed(html_url_text(unsubscribe_url)),
                    picks => picks.iter().map(|p| context! {
                        image => holes.printed(html_url_text(&p.image)),
                        badge => holes.printed(html_url_text(&p.badge)),
                        link => holes.printed(html_url_text(&p.link)),
                    }).collect::<Vec<_>>(),
                };
                let key = self.fill(format!("{body}.mjml"), key_ctx)?;
                match self
                    .shape(locale, key, holes.values.len())?
                    .and_then(|shape| shape.fill(&holes.values))
                {
                    Some(html) => html,
                    // Sentinel characters the renderer did not place: made as before.
                    None => return self.render_with(digest, email, look, Path::Direct),
                }
            }
        };
        let text = self.fill(format!("{body}.txt"), ctx)?;
        Ok(Rendered {
            subject,
            html,
            text,
            locale,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://u.example/?token=abc.def";

    fn digest(recent: &[&str], count: u64) -> Digest {
        Digest {
            user_id: "u1".into(),
            email: "ada@example.com".into(),
            name: "Ada".into(),
            locale: None,
            new_followers: count,
            recent: recent.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn weekly() -> &'static Topic {
        Topics::builtin().weekly()
    }

    fn window() -> Window {
        crate::domain::campaign::Campaign::from_id("weekly-2026-W47", None)
            .unwrap()
            .window
    }

    #[test]
    fn renders_counts_names_dates_and_the_unsubscribe_link() {
        let r = Renderer::new("en").unwrap();
        let out = r
            .render(
                &digest(&["Grace", "Linus"], 5),
                &window(),
                weekly(),
                URL,
                &[],
            )
            .unwrap();
        assert_eq!(out.subject, "You have 5 new followers this week");
        assert!(out.html.contains("<li>Grace</li>") && out.html.contains("…and 3 more."));
        // The footer says what its first link does (leave the digest) and offers the rest.
        assert!(
            out.html.contains(&format!("href=\"{URL}&amp;leave=1\"")),
            "{}",
            out.html
        );
        assert!(out.html.contains(&format!("href=\"{URL}\"")));
        assert!(out
            .html
            .contains("Unsubscribe from “Weekly digest of your new followers”"));
        assert!(out.html.contains("<!doctype html>"));
        assert!(out.text.contains("  - Linus") && out.text.contains("...and 3 more."));
        assert!(out.text.contains("between 16 Nov 2026 and 22 Nov 2026"));
        assert!(out.text.contains(&format!(
            "Unsubscribe from “Weekly digest of your new followers”: {URL}&leave=1\nManage all emails: {URL}"
        )));
        let one = r
            .render(&digest(&["Grace"], 1), &window(), weekly(), URL, &[])
            .unwrap();
        assert_eq!(one.subject, "You have a new follower this week");
        assert!(!one.html.contains("more."));
    }

    #[test]
    fn pick_slots_are_images_linked_through_the_counter_with_alt_text() {
        let r = Renderer::new("en").unwrap();
        let picks: Vec<SlotUrls> = (1..=3)
            .map(|i| SlotUrls {
                image: format!("https://o.example/pick?t=T{i}"),
                badge: format!("https://o.example/badge?t=T{i}"),
                link: format!("https://o.example/go?t=T{i}"),
            })
            .collect();
        let out = r
            .render(&digest(&["Grace"], 1), &window(), weekly(), URL, &picks)
            .unwrap();
        for i in 1..=3 {
            assert!(
                out.html
                    .contains(&format!("src=\"https://o.example/pick?t=T{i}\"")),
                "{}",
                out.html
            );
            assert!(out
                .html
                .contains(&format!("href=\"https://o.example/go?t=T{i}\"")));
            assert!(out
                .html
                .contains(&format!("alt=\"Follow-back suggestion {i}\"")));
            assert!(out
                .text
                .contains(&format!("Suggestion {i}: https://o.example/go?t=T{i}")));
        }
        assert!(out.html.contains("People you may want to follow back"));
        assert_eq!(
            out.html.matches("<img").count(),
            6,
            "a card and a badge per slot"
        );
        assert!(out.html.matches("<img").count() == out.html.matches("alt=\"").count());
        let none = r
            .render(&digest(&["Grace"], 1), &window(), weekly(), URL, &[])
            .unwrap();
        assert!(!none.html.contains("follow back") && !none.text.contains("Suggestion"));
        let mut fr = digest(&["Grace"], 1);
        fr.locale = Some("fr".into());
        let out = r.render(&fr, &window(), weekly(), URL, &picks).unwrap();
        assert!(out.html.contains("Des personnes à suivre en retour"));
    }

    #[test]
    fn user_data_is_escaped_and_never_evaluated() {
        let r = Renderer::new("en").unwrap();
        let mut d = digest(&["<script>alert(1)</script>", "{{ name }}"], 2);
        d.name = "</mj-text><mj-raw>x</mj-raw>".into();
        let out = r.render(&d, &window(), weekly(), URL, &[]).unwrap();
        assert!(out
            .html
            .contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
        assert!(!out.html.contains("<script>"));
        assert!(!out.html.contains("<mj-raw>") && out.html.contains("&lt;mj-raw&gt;"));
        assert!(out.html.contains("<li>{{ name }}</li>"));
        assert!(out.text.contains("  - {{ name }}"));
    }

    /// Names that test the escaping and the sentinels: markup, quotes, entities, template
    /// syntax, emoji, right-to-left and CJK text, sentinel characters, spaces, a long name.
    fn hostile_names() -> Vec<String> {
        let mut names: Vec<String> = [
            "Ada",
            "",
            " ",
            "  Ada  Lovelace ",
            "O'Brien \"Bob\" & <Co> / 1 > 0",
            "&amp; &lt;b&gt; &#x2f; &quot;",
            "</mj-text><mj-raw><script>alert(1)</script></mj-raw>",
            "<!-- comment --> <![CDATA[x]]>",
            "{{ name }} {% if true %}x{% endif %} {# c #}",
            "Zoë 👩‍💻 🇫🇷 李小龍 山田太郎",
            "مرحبا بالعالم",
            "שלום \u{200F}עולם\u{200E}",
            "\u{E000}0\u{E001}",
            "\u{E000}",
            "a\u{E001}b\u{E000}99\u{E001}",
            "tab\tnew\nline\r\0nul\u{7}",
            "\u{FEFF}\u{00A0}nbsp",
            "=3D=\r\n",
            "Bob\u{FFFF}\u{FFFE}",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        names.push("Wolfeschlegelsteinhausenbergerdorff ".repeat(150));
        names.push("é".repeat(997));
        names
    }

    #[test]
    fn the_shape_cache_makes_every_email_as_mrml_alone_would() {
        let r = Renderer::new("en").unwrap();
        let names = hostile_names();
        let picks: Vec<SlotUrls> = (1..=3)
            .map(|i| SlotUrls {
                // What `check_base_url` lets through: a backslash, non-ASCII, a zero-width
                // space and sentinel characters (mrml escapes some of them in attributes).
                image: format!(
                    "https://o.example/\\ü\u{200B}\u{E000}0\u{E001}/pick?t=T{i}&x=\u{301}"
                ),
                badge: format!("https://o.example/badge?t=B{i}"),
                link: format!("https://o.example/go?t=L{i}&a=1"),
            })
            .collect();
        let windows: Vec<Window> = ["weekly-2026-W47", "weekly-2027-W01"]
            .iter()
            .map(|id| {
                crate::domain::campaign::Campaign::from_id(id, None)
                    .unwrap()
                    .window
            })
            .collect();
        let urls = [
            URL.to_owned(),
            "https://u.example/\\é\u{200B}\u{E000}1\u{E001}?token=a&b=c".to_owned(),
        ];
        // Every locale, 0 to 4 names listed and counts around them (none, one, or more left
        // unnamed), each name in turn; two counts of eight per case, turning with the name
        // (every pair of the two renders costs mrml in a debug build).
        const COUNTS: [u64; 8] = [0, 1, 2, 3, 4, 5, 6, 12_345];
        let mut compared = 0;
        for (n, name) in names.iter().enumerate() {
            for (l, locale) in ["en", "fr-CA", "de_DE", "pt", ""].iter().enumerate() {
                for recent in 0..=4usize {
                    for turn in [0, 3] {
                        let count = COUNTS[(n + l + recent + turn) % COUNTS.len()];
                        let picks = &picks[..if (n + recent) % 2 == 0 { 0 } else { 3 }];
                        let window = &windows[(n + count as usize) % windows.len()];
                        let topic =
                            &Topics::builtin().all()[(n + recent) % Topics::builtin().all().len()];
                        let url = &urls[(n + recent + count as usize) % urls.len()];
                        let digest = Digest {
                            user_id: format!("u{n}"),
                            email: "ada@example.com".into(),
                            name: name.clone(),
                            locale: (!locale.is_empty()).then(|| locale.to_string()),
                            new_followers: count,
                            recent: (0..recent)
                                .map(|i| names[(n + i + 1) % names.len()].clone())
                                .collect(),
                        };
                        let direct = r.render_direct(&digest, window, topic, url, picks).unwrap();
                        let cached = r.render(&digest, window, topic, url, picks).unwrap();
                        assert_eq!(cached.subject, direct.subject);
                        assert_eq!(cached.text, direct.text);
                        assert_eq!(cached.locale, direct.locale);
                        assert!(
                            cached.html == direct.html,
                            "{digest:?}: {}",
                            first_difference(&cached.html, &direct.html)
                        );
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, names.len() * 5 * 5 * 2);
        // A campaign has few shapes: names, URLs and counts change no key (but whether a
        // count is one, or leaves one or none unnamed).
        let r = Renderer::new("en").unwrap();
        for name in &names {
            for count in [7, 40, 12_345] {
                let digest = Digest {
                    name: name.clone(),
                    recent: vec![name.clone(), "Grace".into()],
                    ..digest(&[], count)
                };
                r.render(&digest, &window(), weekly(), URL, &picks).unwrap();
            }
        }
        assert_eq!(r.shapes.lock().unwrap().len(), 1);
    }

    #[test]
    fn no_template_holds_a_sentinel_character() {
        let holds = |text: &str| {
            text.contains([OPEN, CLOSE])
                || text.contains(OPEN_IN_ATTRIBUTE)
                || text.contains(CLOSE_IN_ATTRIBUTE)
        };
        for (name, source) in TEMPLATES {
            assert!(!holds(source), "{name}");
        }
        for topic in Topics::builtin().all() {
            for locale in LOCALES {
                assert!(!holds(topic.label(locale)));
            }
        }
    }

    #[test]
    fn a_shape_with_a_sentinel_it_did_not_place_is_not_cached() {
        assert!(Shape::new("a\u{E000}0\u{E001}b", 1).is_some());
        assert!(Shape::new("a\u{E000}1\u{E001}b", 1).is_none());
        assert!(Shape::new("a\u{E000}b", 1).is_none());
        assert!(Shape::new("a\u{E001}b", 1).is_none());
        assert!(Shape::new("a\u{E000}+0\u{E001}b", 1).is_none());
        assert!(Shape::new("a\u{E000}\u{E001}b", 1).is_none());
        assert!(Shape::new("a\\u{e000}0\\u{e001}b", 1).is_some());
        assert!(Shape::new("a\\u{e000}0\u{E001}b", 1).is_none());
        assert!(Shape::new("a\\u{e001}b", 1).is_none());
        assert!(Shape::new("a\\u{e000}3\\u{e001}b", 1).is_none());
        let shape = Shape::new(
            "<p>\u{E000}0\u{E001} and \u{E000}1\u{E001}\u{E000}0\u{E001}</p><a href=\"\\u{e000}1\\u{e001}\">",
            2,
        )
        .unwrap();
        // Values are written once, never scanned for sentinels again.
        let values = ["\u{E000}1\u{E001}".to_owned(), "&lt;\\é\u{E000}".to_owned()];
        assert_eq!(
            shape.fill(&values).unwrap(),
            "<p>\u{E000}1\u{E001} and &lt;\\é\u{E000}\u{E000}1\u{E001}</p><a href=\"&lt;\\\\é\\u{e000}\">"
        );
        assert_eq!(shape.fill(&values[..1]), None);
    }

    #[test]
    fn picks_the_users_language_or_the_default() {
        let r = Renderer::new("en").unwrap();
        assert_eq!(r.locale_for(Some("fr-CA")), "fr");
        assert_eq!(r.locale_for(Some("DE_de")), "de");
        assert_eq!(r.locale_for(Some("pt-BR")), "en");
        assert_eq!(r.locale_for(None), "en");
        assert_eq!(Renderer::new("fr").unwrap().locale_for(Some("")), "fr");
        assert!(matches!(
            Renderer::new("xx"),
            Err(RenderError::UnknownLocale(_))
        ));
        let mut d = digest(&["Grace"], 4);
        d.locale = Some("fr".into());
        let out = r.render(&d, &window(), weekly(), URL, &[]).unwrap();
        assert_eq!(out.subject, "4 nouveaux abonnés cette semaine");
        assert!(out
            .text
            .contains("entre le 16 nov. 2026 et le 22 nov. 2026"));
        assert!(out.html.contains("Se désabonner") && out.html.contains("lang=\"fr\""));
        d.locale = Some("de".into());
        let out = r.render(&d, &window(), weekly(), URL, &[]).unwrap();
        assert_eq!(out.subject, "Diese Woche folgen dir 4 neue Personen");
        assert!(out
            .text
            .contains("zwischen dem 16. Nov. 2026 und dem 22. Nov. 2026"));
    }
}

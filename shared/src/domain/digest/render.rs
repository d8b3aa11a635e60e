//! Rendering: subject, HTML and text in the user's locale, from the template files in
//! `shared/templates/digest/` (compiled into the binary, `templates`). The HTML is MJML filled in by
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
//! MiniJinja and mrml would have written them (`shape::Shape`). What a condition reads stays real:
//! a count of one (`== 1`), and `others` when it is 0 or 1 (the templates test it as
//! `{% if others %}`, which a sentinel passes as any count above one does). A template that
//! filters or tests any other user value (`|title`, `{% if name %}`) would act on the
//! sentinel, not the value: keep such logic in Rust. The unit test
//! `the_shape_cache_makes_every_email_as_mrml_alone_would` holds the cache to mrml's own
//! output over hostile names, every locale and every count; init checks a sample too.

use super::mjml::{mjml_options, mjml_to_html};
use super::shape::{first_difference, Holes, Shape, CLOSE, OPEN};
use super::templates::{environment, RenderError, BODY_VARIANTS, LOCALES};
use super::values::{Email, Values};
use super::Digest;
use crate::domain::campaign::Window;
use crate::domain::open_content::SlotUrls;
use crate::domain::topics::{Topic, Topics};
use minijinja::{context, Environment, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a variant of an experiment changes in the email: the subject (a MiniJinja template
/// with the variables of `subject.txt`) and the body (one of `BODY_VARIANTS`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Look<'a> {
    pub subject: Option<&'a str>,
    pub body: Option<&'a str>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub subject: String,
    pub html: String,
    pub text: String,
    /// The language whose templates wrote it.
    pub locale: String,
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

pub(crate) fn html_url(url: &str) -> Value {
    Value::from_safe_string(html_url_text(url))
}

/// A rendered subject as a header carries it: trimmed, on one line, printable (a line
/// break of any kind, a tab or another control character from a template or a value is a
/// space or gone, never a header line of its own or a byte a mail client shows as junk).
pub(crate) fn subject_line(subject: &str) -> String {
    crate::domain::text::printable(subject.trim()).replace(['\u{2028}', '\u{2029}'], " ")
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
        let renderer = Self {
            env: environment()?,
            default_locale,
            mjml: mjml_options(),
            shapes: Mutex::default(),
        };
        for locale in LOCALES {
            renderer.check_sample(locale)?;
        }
        renderer
            .shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(renderer)
    }

    /// Renders a sample digest in `locale`, with its own body and every variant's an
    /// experiment may name, both from the shape cache and by mrml alone.
    fn check_sample(&self, locale: &str) -> Result<(), RenderError> {
        let digest = Digest {
            user_id: "sample".into(),
            email: "sample@example.com".into(),
            name: "<b>Sample</b> {{ name }}".into(),
            locale: Some(locale.to_string()),
            new_followers: 5,
            recent: vec!["A & B".into(), "</mj-text>".into()],
        };
        let window = crate::domain::campaign::Campaign::from_id("weekly-2026-W01", None)
            .map(|c| c.window)
            .expect("weekly-2026-W01 is a valid weekly id");
        let picks = [SlotUrls {
            image: "https://o.example/pick?t=a&b".into(),
            badge: "https://o.example/badge?t=a".into(),
            link: "https://o.example/go?t=a".into(),
        }];
        let email = (
            &window,
            Topics::builtin().weekly(),
            "https://unsubscribe.example/?token=t",
            &picks[..],
        );
        for body in std::iter::once(None).chain(BODY_VARIANTS.iter().copied().map(Some)) {
            let look = Look {
                subject: None,
                body,
            };
            let cached = self.render_with(&digest, email, look, Path::Cached)?;
            // The shape cache is held to mrml's own output (the unit tests over many
            // digests): a template that mrml would render differently around a user's value
            // stops the function here, not an email.
            let direct = self.render_with(&digest, email, look, Path::Direct)?;
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
        Ok(())
    }

    /// The locale a user's email is written in.
    pub fn locale_for(&self, user_locale: Option<&str>) -> &'static str {
        crate::domain::language::closest(user_locale, LOCALES.iter().copied(), self.default_locale)
    }

    fn mjml_to_html(&self, locale: &str, mjml: &str) -> Result<String, RenderError> {
        mjml_to_html(&self.mjml, &format!("{locale}/body.mjml"), mjml)
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
    pub(crate) fn render_direct(
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
        let locale = self.locale_for(digest.locale.as_deref());
        // A variant's body is the locale's own file under the variant's name.
        let body = match look.body {
            Some(name) => format!("{locale}/{name}/body"),
            None => format!("{locale}/body"),
        };
        let values = Values::of(digest, email, locale);
        let subject = self.subject(look, &values)?;
        // The shape's key holds the topic's label as it is: one with a sentinel character in
        // it is rendered directly (no built-in label has one).
        let path = match path {
            Path::Cached if values.topic.contains([OPEN, CLOSE]) => Path::Direct,
            path => path,
        };
        let html = match path {
            Path::Direct => self.html_direct(&body, email, &values, &subject)?,
            Path::Cached => match self.html_cached(&body, digest, email, &values, &subject)? {
                Some(html) => html,
                // Sentinel characters the renderer did not place: made as before.
                None => return self.render_with(digest, email, look, Path::Direct),
            },
        };
        let text = self.fill(format!("{body}.txt"), values.ctx)?;
        Ok(Rendered {
            subject,
            html,
            text,
            locale: locale.to_owned(),
        })
    }

    /// The subject: a variant's, unless it fails or renders empty for this user (checked on
    /// samples when the experiment was given, but users are not samples), then the
    /// templates' own; on one line.
    fn subject(&self, look: Look<'_>, values: &Values<'_>) -> Result<String, RenderError> {
        let locale = values.locale;
        let variant_subject = look.subject.and_then(|source| {
            match self.env.render_str(source, values.ctx.clone()) {
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
            None => self.fill(format!("{locale}/subject.txt"), values.ctx.clone())?,
        };
        Ok(subject_line(&subject))
    }

    /// The HTML by mrml for this email alone: MiniJinja fills the MJML with its values.
    fn html_direct(
        &self,
        body: &str,
        email: Email<'_>,
        values: &Values<'_>,
        subject: &str,
    ) -> Result<String, RenderError> {
        let (_, _, unsubscribe_url, picks) = email;
        let html_picks: Vec<Value> = picks
            .iter()
            .map(|p| context! { image => html_url(&p.image), badge => html_url(&p.badge), link => html_url(&p.link) })
            .collect();
        let mjml = self.fill(
            format!("{body}.mjml"),
            context! { subject => subject, leave_url => html_url(&values.leave_url), manage_url => html_url(unsubscribe_url), picks => &html_picks, ..values.ctx.clone() },
        )?;
        self.mjml_to_html(values.locale, &mjml)
    }

    /// The HTML from the shape cache: every value of this user's is a sentinel in the MJML,
    /// printed where the template prints it; what a condition reads stays real (`Holes`).
    /// None: the shape cannot be cached (`Shape::new`).
    fn html_cached(
        &self,
        body: &str,
        digest: &Digest,
        email: Email<'_>,
        values: &Values<'_>,
        subject: &str,
    ) -> Result<Option<String>, RenderError> {
        let (_, _, unsubscribe_url, picks) = email;
        let mut holes = Holes::default();
        let new_followers = match digest.new_followers {
            1 => Value::from(1),
            n => holes.printed(n.to_string()),
        };
        let others = match values.others {
            0 | 1 => Value::from(values.others),
            n => holes.printed(n.to_string()),
        };
        let key_ctx = context! {
            locale => values.locale,
            name => holes.escaped(&values.name),
            new_followers => new_followers,
            recent => values.recent.iter().map(|n| holes.escaped(n)).collect::<Vec<_>>(),
            others => others,
            since => values.since.clone(),
            until => values.until.clone(),
            topic => values.topic,
            subject => holes.escaped(subject),
            leave_url => holes.printed(html_url_text(&values.leave_url)),
            manage_url => holes.printed(html_url_text(unsubscribe_url)),
            picks => picks.iter().map(|p| context! {
                image => holes.printed(html_url_text(&p.image)),
                badge => holes.printed(html_url_text(&p.badge)),
                link => holes.printed(html_url_text(&p.link)),
            }).collect::<Vec<_>>(),
        };
        let key = self.fill(format!("{body}.mjml"), key_ctx)?;
        Ok(self
            .shape(values.locale, key, holes.values.len())?
            .and_then(|shape| shape.fill(&holes.values)))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::shape::{CLOSE_IN_ATTRIBUTE, OPEN_IN_ATTRIBUTE};
    use super::super::templates::TEMPLATES;
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
    pub(crate) fn hostile_names() -> Vec<String> {
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
    fn a_subject_is_one_printable_line() {
        assert_eq!(
            subject_line(" \tHi\r\nBcc: x\u{85}y\u{2028}z\u{2029}\u{0}\u{1b}[31m\u{7}end\t\n"),
            "Hi  Bcc: x y z [31mend"
        );
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

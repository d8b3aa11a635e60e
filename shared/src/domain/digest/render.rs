//! Rendering: subject, HTML and text in the user's locale, from the template files in
//! `shared/templates/digest/` (compiled into the binary). The HTML is MJML filled in by
//! MiniJinja, then rendered to responsive HTML by mrml. Every template of every locale is
//! compiled and rendered with sample data at init, so a broken template stops the function
//! at cold start, never mid-campaign. User data (names) is escaped in HTML and never
//! evaluated as template code.

use super::Digest;
use crate::domain::campaign::Window;
use crate::domain::open_content::SlotUrls;
use crate::domain::topics::{Topic, Topics};
use crate::domain::unsubscribe_link;
use minijinja::{context, Environment, Value};

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
];

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
            renderer.render(
                &digest,
                &window,
                Topics::builtin().weekly(),
                "https://unsubscribe.example/?token=t",
                &picks,
            )?;
        }
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

    fn fill(&self, name: String, ctx: Value) -> Result<String, RenderError> {
        self.env
            .get_template(&name)
            .and_then(|t| t.render(ctx))
            .map_err(|source| RenderError::Template {
                template: name,
                source,
            })
    }

    pub fn render(
        &self,
        digest: &Digest,
        window: &Window,
        topic: &Topic,
        unsubscribe_url: &str,
        picks: &[SlotUrls],
    ) -> Result<Rendered, RenderError> {
        let locale = self.locale_for(digest.locale.as_deref());
        // The footer's two links: leave this email's topic, or the whole preference centre.
        let leave_url = unsubscribe_link::leave_link(unsubscribe_url);
        let last_day = window.until - time::Duration::seconds(1);
        // The URL is built from a checked base URL and a base64url token: `&` is the only
        // character HTML needs escaped in it (escaping `/` too would garble the link).
        let html_url = |url: &str| Value::from_safe_string(url.replace('&', "&amp;"));
        // The pick slots' URLs are built the same way (a checked base URL, a base64url token).
        let html_picks: Vec<Value> = picks
            .iter()
            .map(|p| context! { image => html_url(&p.image), badge => html_url(&p.badge), link => html_url(&p.link) })
            .collect();
        let text_picks: Vec<Value> = picks
            .iter()
            .map(|p| context! { image => &p.image, badge => &p.badge, link => &p.link })
            .collect();
        // Whatever the directory read, no control character reaches a template.
        let recent: Vec<String> = digest.recent.iter().map(|n| super::printable(n)).collect();
        let ctx = context! {
            locale => locale,
            name => super::printable(&digest.name),
            new_followers => digest.new_followers,
            recent => &recent,
            others => digest.new_followers.saturating_sub(digest.recent.len() as u64),
            since => date(window.since),
            until => date(last_day),
            topic => topic.label(locale),
            leave_url => &leave_url,
            manage_url => unsubscribe_url,
            picks => &text_picks,
        };
        let subject = self
            .fill(format!("{locale}/subject.txt"), ctx.clone())?
            .trim()
            .replace(['\r', '\n'], " ");
        let template = format!("{locale}/body.mjml");
        let mjml = self.fill(
            template.clone(),
            context! { subject => &subject, leave_url => html_url(&leave_url), manage_url => html_url(unsubscribe_url), picks => &html_picks, ..ctx.clone() },
        )?;
        let mjml_error = |detail: String| RenderError::Mjml {
            template: template.clone(),
            detail,
        };
        let html = mrml::parse(&mjml)
            .map_err(|e| mjml_error(e.to_string()))?
            .element
            .render(&self.mjml)
            .map_err(|e| mjml_error(e.to_string()))?;
        let text = self.fill(format!("{locale}/body.txt"), ctx)?;
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

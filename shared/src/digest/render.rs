//! Rendering: subject, HTML and text from templates compiled into the binary and checked at
//! init, so a broken template stops the function at cold start, never mid-campaign.
//! User-controlled data (names) is escaped in HTML and never evaluated as template code.

use super::Digest;
use crate::campaign::Window;
use minijinja::{context, Environment};

#[derive(Debug, thiserror::Error)]
#[error("template {template}: {source:#}")]
pub struct RenderError {
    template: &'static str,
    #[source]
    source: minijinja::Error,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub subject: String,
    pub html: String,
    pub text: String,
}

const TEMPLATES: [(&str, &str); 3] = [
    (
        "subject.txt",
        include_str!("../../templates/digest/subject.txt.j2"),
    ),
    (
        "body.html",
        include_str!("../../templates/digest/body.html.j2"),
    ),
    (
        "body.txt",
        include_str!("../../templates/digest/body.txt.j2"),
    ),
];

pub struct Renderer {
    env: Environment<'static>,
}

impl Renderer {
    /// Compiles every template and renders a sample, so that errors surface at init.
    pub fn new() -> Result<Self, RenderError> {
        let mut env = Environment::new();
        // Escape by file name: `.html` templates escape HTML, text templates stay plain.
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".html") {
                minijinja::AutoEscape::Html
            } else {
                minijinja::AutoEscape::None
            }
        });
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        for (name, source) in TEMPLATES {
            env.add_template(name, source)
                .map_err(|source| RenderError {
                    template: name,
                    source,
                })?;
        }
        let renderer = Self { env };
        let sample = Digest {
            user_id: "sample".into(),
            email: "sample@example.com".into(),
            name: "Sample".into(),
            new_followers: 2,
            recent: vec!["A".into()],
        };
        let window = crate::campaign::Campaign::from_id("weekly-2026-W01", None)
            .map(|c| c.window)
            .expect("weekly-2026-W01 is a valid weekly id");
        renderer.render(&sample, &window)?;
        Ok(renderer)
    }

    pub fn render(&self, digest: &Digest, window: &Window) -> Result<Rendered, RenderError> {
        let fmt = time::macros::format_description!("[day] [month repr:short] [year]");
        let last_day = window.until - time::Duration::seconds(1);
        let ctx = context! {
            name => &digest.name,
            new_followers => digest.new_followers,
            recent => &digest.recent,
            others => digest.new_followers.saturating_sub(digest.recent.len() as u64),
            since => window.since.format(&fmt).unwrap_or_default(),
            until => last_day.format(&fmt).unwrap_or_default(),
        };
        let render = |name: &'static str, ctx: minijinja::Value| {
            self.env
                .get_template(name)
                .and_then(|t| t.render(ctx))
                .map_err(|source| RenderError {
                    template: name,
                    source,
                })
        };
        let subject = render("subject.txt", ctx.clone())?
            .trim()
            .replace(['\r', '\n'], " ");
        let html = render("body.html", context! { subject => &subject, ..ctx.clone() })?;
        let text = render("body.txt", ctx)?;
        Ok(Rendered {
            subject,
            html,
            text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(recent: &[&str], count: u64) -> Digest {
        Digest {
            user_id: "u1".into(),
            email: "ada@example.com".into(),
            name: "Ada".into(),
            new_followers: count,
            recent: recent.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn window() -> Window {
        crate::campaign::Campaign::from_id("weekly-2026-W47", None)
            .unwrap()
            .window
    }

    #[test]
    fn renders_counts_names_and_dates() {
        let r = Renderer::new().unwrap();
        let out = r
            .render(&digest(&["Grace", "Linus"], 5), &window())
            .unwrap();
        assert_eq!(out.subject, "You have 5 new followers this week");
        assert!(out.html.contains("<li>Grace</li>") && out.html.contains("…and 3 more."));
        assert!(out.text.contains("  - Linus") && out.text.contains("...and 3 more."));
        assert!(out.text.contains("between 16 Nov 2026 and 22 Nov 2026"));
        let one = r.render(&digest(&["Grace"], 1), &window()).unwrap();
        assert_eq!(one.subject, "You have a new follower this week");
        assert!(!one.html.contains("more."));
    }

    #[test]
    fn user_data_is_escaped_and_never_evaluated() {
        let r = Renderer::new().unwrap();
        let out = r
            .render(
                &digest(&["<script>alert(1)</script>", "{{ name }}"], 2),
                &window(),
            )
            .unwrap();
        assert!(out
            .html
            .contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
        assert!(!out.html.contains("<script>"));
        assert!(out.html.contains("<li>{{ name }}</li>"));
        assert!(out.text.contains("  - {{ name }}"));
    }
}

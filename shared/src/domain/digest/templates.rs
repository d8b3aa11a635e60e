//! The bundled templates (`shared/templates/digest/`, compiled into the binary), the
//! locales and body variants they exist in, the MiniJinja environment they are compiled
//! into, what a failure to render says, and the check of an experiment's subject template.

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

pub(super) const TEMPLATES: &[(&str, &str)] = &[
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

/// Every template compiled, HTML-escaped by file name (MJML is HTML, text templates stay
/// plain), and strict: a variable a template does not have is an error.
pub(super) fn environment() -> Result<Environment<'static>, RenderError> {
    let mut env = Environment::new();
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
    Ok(env)
}

/// The bundled alternatives to each locale's body (`{locale}/{name}/body.*`) an
/// experiment's variant may name (docs/experiments.md).
pub const BODY_VARIANTS: &[&str] = &["short"];

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
    /// The user's data does not convert (`definition::values`): the field and why.
    #[error("the data: {detail}")]
    Data { detail: String },
    #[error("DEFAULT_LOCALE {0:?} has no templates (have: {have})", have = LOCALES.join(", "))]
    UnknownLocale(String),
    /// A subject longer than a header line may be (`MAX_SUBJECT_BYTES`).
    #[error("template {template}: the subject renders {bytes} bytes; at most {max}", max = MAX_SUBJECT_BYTES)]
    SubjectTooLong { template: String, bytes: usize },
}

/// The longest subject a definition's templates may render: a header line's 998 characters
/// (RFC 5322), in bytes, before encoding.
pub const MAX_SUBJECT_BYTES: usize = 998;

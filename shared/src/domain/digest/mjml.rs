//! MJML to responsive HTML by mrml, for the digest and for definitions alike: one email
//! fails with its reason where mrml refuses or panics on it, never the batch, and a panic's
//! message (which may quote the email's text) stays out of the logs.

use super::templates::RenderError;

/// How mrml renders every email's MJML.
pub(crate) fn mjml_options() -> mrml::prelude::render::RenderOptions {
    mrml::prelude::render::RenderOptions {
        disable_comments: true,
        // No web fonts: the layout names system fonts, and nothing is loaded from
        // elsewhere when the email is opened.
        fonts: Default::default(),
        ..Default::default()
    }
}

/// MJML filled in by `template`, as responsive HTML.
pub(crate) fn mjml_to_html(
    options: &mrml::prelude::render::RenderOptions,
    template: &str,
    mjml: &str,
) -> Result<String, RenderError> {
    let mjml_error = |detail: String| RenderError::Mjml {
        template: template.to_owned(),
        detail,
    };
    // mrml's parser (htmlparser 0.2) panics on a multibyte character just before a `>` in
    // text: that email fails with its reason, not the batch it is in.
    quiet_panics_while_rendering();
    IN_MRML.with(|inside| inside.set(true));
    let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        mrml::parse(mjml)
            .map_err(|e| mjml_error(e.to_string()))?
            .element
            .render(options)
            .map_err(|e| mjml_error(e.to_string()))
    }));
    IN_MRML.with(|inside| inside.set(false));
    rendered.unwrap_or_else(|_| {
        Err(mjml_error(
            "mrml's parser failed on this email's text (a character of several bytes just before a `>` in text: write `&gt;` for a `>` the template prints)".into(),
        ))
    })
}

thread_local! {
    /// Whether this thread is inside mrml (`mjml_to_html`).
    static IN_MRML: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs, once, a panic hook that logs a panic inside mrml without its message: a
/// string slicing panic quotes the text it sliced, an email's (a user's name), which is not
/// for the logs. Any other panic goes to the hook that was there before.
fn quiet_panics_while_rendering() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // `try_with`: a panic while the thread's locals are torn down is not mrml's.
            if IN_MRML.try_with(|inside| inside.get()).unwrap_or(false) {
                let at = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
                tracing::error!(
                    at = at.as_deref().unwrap_or("unknown"),
                    "mrml panicked rendering an email (its message, which may quote the email's text, is not logged); the email is skipped"
                );
            } else {
                before(info)
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panic's message quotes the email's text: the hook logs where mrml panicked,
    /// not what it said, and a panic elsewhere goes to the hook before it.
    #[test]
    fn mrmls_panic_is_logged_without_the_emails_text() {
        #[derive(Clone, Default)]
        struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Logs {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let mjml = "<mjml><mj-body><mj-section><mj-column><mj-text>Secret Name 李></mj-text></mj-column></mj-section></mj-body></mjml>";
            assert!(mjml_to_html(&mjml_options(), "t", mjml).is_err());
            assert!(std::panic::catch_unwind(|| panic!("not in mrml")).is_err());
        });
        let said = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            said.matches("mrml panicked rendering an email").count(),
            1,
            "{said}"
        );
        assert!(
            !said.contains("Secret Name") && !said.contains("李"),
            "{said}"
        );
    }
}

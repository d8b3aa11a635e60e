//! Logs via tracing: JSON (for CloudWatch) unless LOG_FORMAT=text. Level from RUST_LOG,
//! default info. Never log addresses, tokens or credentials. Text is coloured only for a
//! person at a terminal: never into a file or a pipe, never with NO_COLOR set.

use std::io::IsTerminal;

/// Whether text written to a stream may carry ANSI colour codes.
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colour(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ));
    let text = std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("text"));
    // try_init: a second call (tests, the local runner) keeps the first subscriber.
    let _ = if text {
        builder.try_init()
    } else {
        builder.json().flatten_event(true).without_time().try_init()
    };
}

/// For command-line tools: text on stderr (stdout carries their output), level from
/// RUST_LOG, default warn.
pub fn init_cli() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(std::io::stderr)
        .try_init();
}

/// A function's cold start that cannot go on (configuration, secrets, templates): one log
/// line that names what to fix, the same reason reported to the Runtime API, then exit, as
/// Lambda expects of a failed init (it answers the invocation with the reason and starts a
/// fresh environment on the next event).
pub fn or_exit<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    match result {
        Ok(value) => value,
        Err(err) => {
            tracing::error!(error = %err, "cannot start");
            if let Ok(api) = std::env::var("AWS_LAMBDA_RUNTIME_API") {
                if let Err(why) = super::init_error::report(&api, &err.to_string()) {
                    tracing::warn!(reason = %why, "could not report the failed init to the Runtime API");
                }
            }
            std::process::exit(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn colour_only_for_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(
            !colour(false, None),
            "a file or a pipe gets no escape codes"
        );
        assert!(!colour(true, Some("1".into())), "NO_COLOR is honoured");
        assert!(colour(true, Some("".into())), "an empty NO_COLOR is unset");
    }
}

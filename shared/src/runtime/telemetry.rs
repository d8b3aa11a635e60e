//! Logs via tracing: JSON (for CloudWatch) unless LOG_FORMAT=text. Level from RUST_LOG,
//! default info. Never log addresses, tokens or credentials.

pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
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
        .with_writer(std::io::stderr)
        .try_init();
}

/// A function's cold start that cannot go on (configuration, secrets, templates): one log
/// line that names what to fix, then exit, as Lambda expects of a failed init (it reports
/// `Runtime.ExitError` and starts a fresh environment on the next event).
pub fn or_exit<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    match result {
        Ok(value) => value,
        Err(err) => {
            tracing::error!(error = %err, "cannot start");
            std::process::exit(1)
        }
    }
}

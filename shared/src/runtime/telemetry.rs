//! Logs via tracing, in the format and at the level Lambda's advanced logging controls set
//! (`AWS_LAMBDA_LOG_FORMAT`, `AWS_LAMBDA_LOG_LEVEL`), else LOG_FORMAT (JSON unless `text`)
//! and RUST_LOG (default info). Never log addresses, tokens or credentials. Text is coloured
//! only for a person at a terminal: never into a file or a pipe, never with NO_COLOR set.
//!
//! With the JSON format Lambda filters the lines itself by their `level`, and takes a line
//! without one as INFO: the metrics lines (EMF, `runtime::emf`) carry the level that passes
//! the filter set (`metrics_level`), or an application level of WARN would drop them all.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// Whether text written to a stream may carry ANSI colour codes.
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Lambda's application log levels, least severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LambdaLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
    Fatal,
}

impl LambdaLevel {
    pub const ALL: [LambdaLevel; 6] = [
        Self::Trace,
        Self::Debug,
        Self::Info,
        Self::Warn,
        Self::Error,
        Self::Fatal,
    ];

    /// As Lambda spells it (upper case; any case is read).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trace => "TRACE",
            Self::Debug => "DEBUG",
            Self::Info => "INFO",
            Self::Warn => "WARN",
            Self::Error => "ERROR",
            Self::Fatal => "FATAL",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// The tracing filter that keeps what Lambda would keep (tracing has no FATAL: its
    /// errors are the most severe lines there are).
    /// The tracing filter for this level. Below INFO, the SDK's and the HTTP stack's own
    /// crates stay at INFO: at DEBUG and TRACE they log whole requests and responses, whose
    /// bodies hold recipients' addresses (SES raw messages, queue messages, ledger items).
    fn filter(self) -> &'static str {
        match self {
            Self::Trace => "trace,aws_smithy_runtime=info,aws_smithy_runtime_api=info,aws_smithy_http=info,aws_sdk_sesv2=info,aws_sdk_sqs=info,aws_sdk_dynamodb=info,aws_config=info,hyper=info,hyper_util=info,h2=info,rustls=info,mongodb=info",
            Self::Debug => "debug,aws_smithy_runtime=info,aws_smithy_runtime_api=info,aws_smithy_http=info,aws_sdk_sesv2=info,aws_sdk_sqs=info,aws_sdk_dynamodb=info,aws_config=info,hyper=info,hyper_util=info,h2=info,rustls=info,mongodb=info",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error | Self::Fatal => "error",
        }
    }
}

/// How a function logs, from its environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    pub json: bool,
    /// Lambda's application log level, when set (it wins over RUST_LOG).
    pub level: Option<LambdaLevel>,
    /// A variable set to what it cannot be (logged once the subscriber is up).
    pub ignored: Option<(&'static str, String)>,
}

impl LogSettings {
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        let mut ignored = None;
        let lambda_format = var("AWS_LAMBDA_LOG_FORMAT").filter(|f| !f.trim().is_empty());
        let json = match lambda_format.as_deref().map(str::trim) {
            Some(f) if f.eq_ignore_ascii_case("json") => true,
            Some(f) if f.eq_ignore_ascii_case("text") => false,
            other => {
                if let Some(f) = other {
                    ignored = Some(("AWS_LAMBDA_LOG_FORMAT", f.to_owned()));
                }
                !var("LOG_FORMAT").is_some_and(|f| f.trim().eq_ignore_ascii_case("text"))
            }
        };
        let level = match var("AWS_LAMBDA_LOG_LEVEL").filter(|l| !l.trim().is_empty()) {
            Some(l) => {
                let level = LambdaLevel::parse(&l);
                if level.is_none() {
                    ignored = Some(("AWS_LAMBDA_LOG_LEVEL", l));
                }
                level
            }
            None => None,
        };
        Self {
            json,
            level,
            ignored,
        }
    }

    /// The level the metrics lines carry: the least that Lambda's filter lets through, and
    /// never below INFO (a line without a level is INFO to Lambda).
    pub fn metrics_level(&self) -> LambdaLevel {
        self.level
            .map_or(LambdaLevel::Info, |l| l.max(LambdaLevel::Info))
    }
}

static METRICS_LEVEL: OnceLock<LambdaLevel> = OnceLock::new();

/// The level the metrics lines are written at (INFO until `init`).
pub fn metrics_level() -> LambdaLevel {
    METRICS_LEVEL.get().copied().unwrap_or(LambdaLevel::Info)
}

pub fn init() {
    let settings = LogSettings::from_env(|name| std::env::var(name).ok());
    let _ = METRICS_LEVEL.set(settings.metrics_level());
    let filter = match settings.level {
        Some(level) => tracing_subscriber::EnvFilter::new(level.filter()),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colour(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ));
    // try_init: a second call (tests, the local runner) keeps the first subscriber.
    let _ = if settings.json {
        // With its RFC 3339 `timestamp`: Lambda's level filter takes a JSON line without a
        // valid one for INFO, and drops it under WARN, errors included.
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    if let Some((name, value)) = &settings.ignored {
        tracing::warn!(variable = name, value = %value, "not a log setting Lambda has (JSON or Text; TRACE, DEBUG, INFO, WARN, ERROR or FATAL): ignored");
    }
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
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> LogSettings {
        LogSettings::from_env(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    /// What Lambda keeps of a JSON line under an application log level: its `level` at or
    /// above the one set; a missing or unknown level, or a missing or invalid RFC 3339
    /// `timestamp`, counts as INFO (Lambda's log-level filtering page).
    fn lambda_keeps(line: &serde_json::Value, set: LambdaLevel) -> bool {
        let timestamp = line["timestamp"].as_str().is_some_and(|t| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).is_ok()
        });
        let level = (line["level"].as_str())
            .and_then(LambdaLevel::parse)
            .filter(|_| timestamp)
            .unwrap_or(LambdaLevel::Info);
        level >= set
    }

    #[test]
    fn below_info_the_sdk_and_http_crates_stay_at_info() {
        for level in [LambdaLevel::Trace, LambdaLevel::Debug] {
            let filter = level.filter();
            for quiet in [
                "aws_smithy_runtime=info",
                "hyper=info",
                "aws_sdk_sesv2=info",
            ] {
                assert!(filter.contains(quiet), "{filter}");
            }
            tracing_subscriber::EnvFilter::try_new(filter).expect("a valid filter");
        }
    }

    #[test]
    fn lambdas_log_format_and_level_are_read() {
        let s = settings(&[
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
            ("AWS_LAMBDA_LOG_LEVEL", "WARN"),
        ]);
        assert_eq!((s.json, s.level), (true, Some(LambdaLevel::Warn)));
        // Lambda's format wins over ours; any case is read.
        let s = settings(&[("AWS_LAMBDA_LOG_FORMAT", "Text"), ("LOG_FORMAT", "json")]);
        assert!(!s.json);
        assert!(settings(&[("AWS_LAMBDA_LOG_FORMAT", "json"), ("LOG_FORMAT", "text")]).json);
        // Without Lambda's: ours, JSON by default.
        assert!(!settings(&[("LOG_FORMAT", "text")]).json);
        assert!(settings(&[]).json);
        assert_eq!(settings(&[]).level, None);
        for level in LambdaLevel::ALL {
            let s = settings(&[("AWS_LAMBDA_LOG_LEVEL", &level.as_str().to_lowercase())]);
            assert_eq!(s.level, Some(level));
        }
        assert_eq!(LambdaLevel::Fatal.filter(), "error");
        assert!(LambdaLevel::Trace.filter().starts_with("trace,"));
    }

    #[test]
    fn an_unknown_setting_is_ignored_and_said() {
        let s = settings(&[("AWS_LAMBDA_LOG_LEVEL", "LOUD")]);
        assert_eq!(s.level, None);
        assert_eq!(s.ignored, Some(("AWS_LAMBDA_LOG_LEVEL", "LOUD".into())));
        let s = settings(&[("AWS_LAMBDA_LOG_FORMAT", "yaml"), ("LOG_FORMAT", "text")]);
        assert!(!s.json, "ours then");
        assert_eq!(s.ignored, Some(("AWS_LAMBDA_LOG_FORMAT", "yaml".into())));
    }

    #[test]
    fn the_metrics_lines_pass_every_level_lambda_can_filter_at() {
        let metrics = [crate::runtime::emf::Metric::count("sent", 1.0)];
        for format in ["JSON", "Text"] {
            for set in LambdaLevel::ALL {
                let s = settings(&[
                    ("AWS_LAMBDA_LOG_FORMAT", format),
                    ("AWS_LAMBDA_LOG_LEVEL", set.as_str()),
                ]);
                for line in
                    crate::runtime::emf::lines(s.metrics_level(), "prod", "SendEmail", 7, &metrics)
                {
                    let line: serde_json::Value = serde_json::from_str(&line).unwrap();
                    assert!(lambda_keeps(&line, set), "{format} {set:?}: {line}");
                    assert_eq!(line["sent"], 1.0);
                    assert!(line["_aws"]["CloudWatchMetrics"].is_array());
                }
            }
        }
        // No level set: INFO, which Lambda keeps at its default.
        let level = settings(&[]).metrics_level();
        assert_eq!(level, LambdaLevel::Info);
        // And never more severe than the filter needs.
        let s = settings(&[("AWS_LAMBDA_LOG_LEVEL", "ERROR")]);
        assert_eq!(s.metrics_level(), LambdaLevel::Error);
    }

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

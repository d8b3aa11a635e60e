//! Typed configuration, read from environment variables once at init.
//!
//! Every variable is documented in the README's configuration reference and set in
//! `template.yaml`; `tests/consistency.rs` keeps the three in step. A bad or missing value
//! stops the function at cold start with one line that names the variable and what to do.
//! `var` names every variable, `functions` and `send_email` hold each function's settings,
//! and this file what they share (sources, secrets, MongoDB, the unsubscribe links).

mod functions;
mod open_content;
mod send_email;
pub mod var;

pub use functions::{
    guardrail_defaults, CreateEmailsConfig, GetUsersConfig, LocalTimeConfig, ReputationGuardConfig,
    SesEventsConfig, UnsubscribeFunctionConfig,
};
pub use open_content::{OpenContentFunctionConfig, PickLinks};
pub use send_email::{RateControlConfig, SendEmailConfig};

/// A configuration problem, named after the variable that caused it.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {var}: {problem}")]
pub struct ConfigError {
    pub var: &'static str,
    pub problem: String,
}

/// Where configuration values come from: the process environment on Lambda, a map in tests.
pub trait Source {
    fn get(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Source for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl<F: Fn(&str) -> Option<String>> Source for F {
    fn get(&self, name: &str) -> Option<String> {
        self(name)
    }
}

fn value(src: &dyn Source, var: &'static str) -> Option<String> {
    src.get(var)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn required(src: &dyn Source, var: &'static str) -> Result<String, ConfigError> {
    value(src, var).ok_or_else(|| ConfigError {
        var,
        problem: "is not set; set it in template.yaml (or your shell when running locally)".into(),
    })
}

fn parsed<T: std::str::FromStr>(
    src: &dyn Source,
    var: &'static str,
    default: T,
    expected: &str,
) -> Result<T, ConfigError> {
    match value(src, var) {
        None => Ok(default),
        Some(raw) => raw.parse().map_err(|_| ConfigError {
            var,
            problem: format!("{raw:?} is not {expected}"),
        }),
    }
}

fn positive_u32(src: &dyn Source, var: &'static str, default: u32) -> Result<u32, ConfigError> {
    let v = parsed(src, var, default, "a positive whole number")?;
    if v == 0 {
        return Err(ConfigError {
            var,
            problem: "must be at least 1".into(),
        });
    }
    Ok(v)
}

/// Where a secret value (the MongoDB URI, the unsubscribe signing key) comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// A Secrets Manager secret (name or ARN) holding the value: how it is deployed.
    Secret(String),
    /// The value itself: for development tools and shells, never in template.yaml.
    Plain(String),
}

impl std::fmt::Debug for SecretRef {
    // The value is secret (a URI may carry a password): never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Secret(id) => write!(f, "Secret({id})"),
            Self::Plain(_) => f.write_str("Plain(***)"),
        }
    }
}

/// `secret_var` names a Secrets Manager secret (deployed); else `plain_var` holds the value
/// itself (local tools). `what` says what the secret is, for the error.
fn secret_ref(
    src: &dyn Source,
    secret_var: &'static str,
    plain_var: &'static str,
    what: &str,
) -> Result<SecretRef, ConfigError> {
    match (value(src, secret_var), value(src, plain_var)) {
        (Some(secret), _) => Ok(SecretRef::Secret(secret)),
        (None, Some(plain)) => Ok(SecretRef::Plain(plain)),
        (None, None) => Err(ConfigError {
            var: secret_var,
            problem: format!(
                "is not set; name the Secrets Manager secret that holds {what} \
                 (or set {plain_var} when running outside Lambda)"
            ),
        }),
    }
}

/// The one-click unsubscribe links (CreateEmails signs them, Unsubscribe verifies them).
#[derive(Clone, Debug)]
pub struct UnsubscribeConfig {
    pub secret: SecretRef,
    /// The list a token is valid for (one per kind of email).
    pub list: String,
}

impl UnsubscribeConfig {
    pub const VARS: &'static [&'static str] = &[var::UNSUBSCRIBE_SECRET_ID, var::UNSUBSCRIBE_LIST];
    /// Read instead of UNSUBSCRIBE_SECRET_ID when that is not set (local tools).
    pub const ALTERNATIVE_VARS: &'static [&'static str] = &[var::UNSUBSCRIBE_SECRET];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let list = value(src, var::UNSUBSCRIBE_LIST).unwrap_or_else(|| "weekly-digest".into());
        crate::domain::unsubscribe_link::check_list(&list).map_err(|e| ConfigError {
            var: var::UNSUBSCRIBE_LIST,
            problem: e.to_string(),
        })?;
        Ok(Self {
            secret: secret_ref(
                src,
                var::UNSUBSCRIBE_SECRET_ID,
                var::UNSUBSCRIBE_SECRET,
                "the unsubscribe signing key",
            )?,
            list,
        })
    }
}

/// MongoDB connection settings of the functions that read users (GetUsers, CreateEmails,
/// Unsubscribe, SesEvents).
#[derive(Clone, Debug)]
pub struct MongoConfig {
    pub uri: SecretRef,
    pub database: String,
    pub max_pool_size: u32,
}

impl MongoConfig {
    pub const VARS: &'static [&'static str] = &[
        var::MONGODB_URI_SECRET_ID,
        var::MONGODB_DATABASE,
        var::MONGODB_MAX_POOL_SIZE,
    ];
    /// Read instead of MONGODB_URI_SECRET_ID when that is not set (local tools).
    pub const ALTERNATIVE_VARS: &'static [&'static str] = &[var::MONGODB_URI];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            uri: secret_ref(
                src,
                var::MONGODB_URI_SECRET_ID,
                var::MONGODB_URI,
                "the MongoDB URI",
            )?,
            database: value(src, var::MONGODB_DATABASE).unwrap_or_else(|| "app".into()),
            max_pool_size: positive_u32(src, var::MONGODB_MAX_POOL_SIZE, 10)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn src(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    const SEND: &[(&str, &str)] = &[
        ("SENDS_TABLE_NAME", "sends"),
        ("EMAILS_QUEUE_URL", "http://q"),
        ("SENDER_ADDRESS", "news@example.com"),
        ("VISIBILITY_TIMEOUT_SECONDS", "180"),
        ("FUNCTION_TIMEOUT_SECONDS", "30"),
        ("CAMPAIGNS_TABLE_NAME", "campaigns"),
        ("MONGODB_URI", "mongodb://127.0.0.1:1/"),
        ("WAITING_TABLE_NAME", "waiting"),
        ("RELEASE_SCHEDULE_GROUP", "releases"),
        (
            "RELEASE_SCHEDULER_ROLE_ARN",
            "arn:aws:iam::000000000000:role/releases",
        ),
        (
            "RELEASE_DEAD_LETTER_ARN",
            "arn:aws:sqs:us-east-1:000000000000:schedule-dlq",
        ),
        (
            "RELEASE_FUNCTION_ARN",
            "arn:aws:lambda:us-east-1:000000000000:function:get-users",
        ),
    ];

    #[test]
    fn local_time_settings_default_to_at_once_and_refuse_a_bad_value_by_name() {
        let c = LocalTimeConfig::from_source(&src(&[])).unwrap();
        assert_eq!(c.send_at, None);
        assert_eq!(c.fallback_zone.as_str(), "UTC");
        assert_eq!(c.passed_time.as_str(), "send-now");
        for (var, value, says) in [
            ("LOCAL_SEND_TIME", "9am", "HH:MM"),
            ("FALLBACK_TIME_ZONE", "Europe/Berln", "IANA"),
            ("PASSED_TIME_POLICY", "later", "send-now, next-day or skip"),
        ] {
            let err = LocalTimeConfig::from_source(&src(&[(var, value)])).unwrap_err();
            let line = err.to_string();
            assert!(line.contains(var) && line.contains(says), "{line}");
        }
    }

    #[test]
    fn send_email_defaults() {
        let c = SendEmailConfig::from_source(&src(SEND)).unwrap();
        assert_eq!(c.retry_delays.len(), 4);
        assert_eq!(c.retention_days, 90);
        assert_eq!(c.send_rate_per_second, 14.0);
        assert!(c.configuration_set.is_none());
    }

    #[test]
    fn a_sender_that_cannot_be_a_from_header_is_refused_at_cold_start() {
        for (sender, says) in [
            ("Équipe <équipe@example.com>", "not ASCII"),
            ("Équipe news@example.com>", "Name <address>"),
            ("news", "no @"),
        ] {
            let mut pairs = SEND.to_vec();
            pairs[2] = ("SENDER_ADDRESS", sender);
            let err = SendEmailConfig::from_source(&src(&pairs)).unwrap_err();
            assert_eq!(err.var, "SENDER_ADDRESS");
            let line = err.to_string();
            assert!(line.contains(says) && !line.contains('\n'), "{line}");
        }
        let mut pairs = SEND.to_vec();
        pairs[2] = ("SENDER_ADDRESS", "Équipe <news@bücher.example>");
        let c = SendEmailConfig::from_source(&src(&pairs)).unwrap();
        assert_eq!(c.sender_address, "Équipe <news@bücher.example>");
    }

    #[test]
    fn refuses_visibility_not_above_timeout() {
        let mut pairs = SEND.to_vec();
        pairs[3] = ("VISIBILITY_TIMEOUT_SECONDS", "30");
        let err = SendEmailConfig::from_source(&src(&pairs)).unwrap_err();
        assert_eq!(err.var, "VISIBILITY_TIMEOUT_SECONDS");
        assert!(err
            .to_string()
            .contains("greater than FUNCTION_TIMEOUT_SECONDS"));
    }

    #[test]
    fn missing_and_malformed_values_name_the_variable() {
        let err = SendEmailConfig::from_source(&src(&SEND[1..])).unwrap_err();
        assert_eq!(err.var, "SENDS_TABLE_NAME");
        let mut pairs = SEND.to_vec();
        pairs.push(("RETRY_DELAYS_SECONDS", "2,soon"));
        let err = SendEmailConfig::from_source(&src(&pairs)).unwrap_err();
        assert_eq!(err.var, "RETRY_DELAYS_SECONDS");
        pairs.pop();
        pairs.push(("SEND_RATE_PER_SECOND", "0"));
        assert_eq!(
            SendEmailConfig::from_source(&src(&pairs)).unwrap_err().var,
            "SEND_RATE_PER_SECOND"
        );
        pairs.pop();
        let mut control = vec![("CAMPAIGNS_TABLE_NAME", "campaigns")];
        let err = RateControlConfig::from_source(&src(&control)).unwrap_err();
        assert_eq!(err.var, "SENDS_TABLE_NAME");
        control.extend([
            ("SENDS_TABLE_NAME", "sends"),
            ("EMAILS_EVENT_SOURCE_MAPPING_ID", "uuid"),
            ("USERS_EVENT_SOURCE_MAPPING_ID", "uuid-users"),
            ("SES_EVENTS_EVENT_SOURCE_MAPPING_ID", "uuid-events"),
        ]);
        for bad in ["0", "150", "half"] {
            control.push(("SES_QUOTA_SHARE_PERCENT", bad));
            let err = RateControlConfig::from_source(&src(&control)).unwrap_err();
            assert_eq!(err.var, "SES_QUOTA_SHARE_PERCENT", "{bad}");
            control.pop();
        }
        control.extend([
            ("SES_QUOTA_SHARE_PERCENT", "40"),
            ("SEND_EMAIL_BATCH_SIZE", "100"),
            ("SEND_EMAIL_MEMORY_MB", "1769"),
            ("USERS_BATCH_SIZE", "100"),
            ("CREATE_EMAILS_MEMORY_MB", "1024"),
            ("CREATE_EMAILS_MAX_CONCURRENCY", "40"),
        ]);
        let config = RateControlConfig::from_source(&src(&control)).unwrap();
        assert_eq!(
            config.public_urls,
            crate::domain::public_urls::PublicUrls::DEFAULT
        );
        control.extend([
            ("UNSUBSCRIBE_CONCURRENCY", "30"),
            ("OPEN_CONTENT_CONCURRENCY", "240"),
            ("PICK_SLOTS", "2"),
        ]);
        let config = RateControlConfig::from_source(&src(&control)).unwrap();
        assert_eq!(
            (
                config.public_urls.unsubscribe_concurrency,
                config.public_urls.open_content_concurrency,
                config.public_urls.pick_slots
            ),
            (30, 240, 2)
        );
        assert_eq!(config.ses_quota_share, 0.4);
        assert_eq!(
            (
                config.create_emails.batch,
                config.create_emails.memory_mb,
                config.create_emails_ceiling
            ),
            (100, 1024, 40)
        );
        assert_eq!(
            (
                config.send_email.records_at_once,
                config.send_email.memory_mb
            ),
            (100, 1769)
        );
        let err = MongoConfig::from_source(&src(&[
            ("MONGODB_URI", "x"),
            ("MONGODB_MAX_POOL_SIZE", "many"),
        ]))
        .unwrap_err();
        assert!(err
            .to_string()
            .contains("MONGODB_MAX_POOL_SIZE: \"many\" is not"));
    }
}

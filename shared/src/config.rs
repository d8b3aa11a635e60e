//! Typed configuration, read from environment variables once at init.
//!
//! Every variable is documented in the README's configuration reference and set in
//! `template.yaml`; `tests/consistency.rs` keeps the three in step. A bad or missing value
//! stops the function at cold start with one line that names the variable and what to do.
//! Over 400 lines on purpose: every variable of every function with its validation, and
//! their tests (about a third of the file).

use std::time::Duration;

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
    pub const VARS: &'static [&'static str] = &["UNSUBSCRIBE_SECRET_ID", "UNSUBSCRIBE_LIST"];
    /// Read instead of UNSUBSCRIBE_SECRET_ID when that is not set (local tools).
    pub const ALTERNATIVE_VARS: &'static [&'static str] = &["UNSUBSCRIBE_SECRET"];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let list = value(src, "UNSUBSCRIBE_LIST").unwrap_or_else(|| "weekly-digest".into());
        crate::unsubscribe::check_list(&list).map_err(|e| ConfigError {
            var: "UNSUBSCRIBE_LIST",
            problem: e.to_string(),
        })?;
        Ok(Self {
            secret: secret_ref(
                src,
                "UNSUBSCRIBE_SECRET_ID",
                "UNSUBSCRIBE_SECRET",
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
        "MONGODB_URI_SECRET_ID",
        "MONGODB_DATABASE",
        "MONGODB_MAX_POOL_SIZE",
    ];
    /// Read instead of MONGODB_URI_SECRET_ID when that is not set (local tools).
    pub const ALTERNATIVE_VARS: &'static [&'static str] = &["MONGODB_URI"];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            uri: secret_ref(
                src,
                "MONGODB_URI_SECRET_ID",
                "MONGODB_URI",
                "the MongoDB URI",
            )?,
            database: value(src, "MONGODB_DATABASE").unwrap_or_else(|| "app".into()),
            max_pool_size: positive_u32(src, "MONGODB_MAX_POOL_SIZE", 10)?,
        })
    }
}

/// GetUsers: audience out of MongoDB into the users queue.
#[derive(Clone, Debug)]
pub struct GetUsersConfig {
    pub mongo: MongoConfig,
    pub users_queue_url: String,
    pub continuation_queue_url: String,
    /// SendMessageBatch calls kept in flight at once.
    pub enqueue_concurrency: usize,
    /// Stop reading the audience this long before the invocation's deadline and continue
    /// from a checkpoint in a fresh invocation.
    pub deadline_margin: Duration,
}

impl GetUsersConfig {
    pub const VARS: &'static [&'static str] = &[
        "USERS_QUEUE_URL",
        "CONTINUATION_QUEUE_URL",
        "ENQUEUE_CONCURRENCY",
        "DEADLINE_MARGIN_SECONDS",
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            users_queue_url: required(src, "USERS_QUEUE_URL")?,
            continuation_queue_url: required(src, "CONTINUATION_QUEUE_URL")?,
            enqueue_concurrency: positive_u32(src, "ENQUEUE_CONCURRENCY", 8)? as usize,
            deadline_margin: Duration::from_secs(parsed(
                src,
                "DEADLINE_MARGIN_SECONDS",
                20u64,
                "a number of seconds",
            )?),
        })
    }
}

/// CreateEmails: enrich and render each user, put the email job on the emails queue.
#[derive(Clone, Debug)]
pub struct CreateEmailsConfig {
    pub mongo: MongoConfig,
    pub emails_queue_url: String,
    /// Records of one batch processed at once (bounded so the MongoDB pool is not starved).
    pub record_concurrency: usize,
    /// How many of the newest followers are named in the email.
    pub recent_followers_shown: u32,
    pub unsubscribe: UnsubscribeConfig,
    /// Where the Unsubscribe function answers (its Function URL, or your own domain).
    pub unsubscribe_base_url: String,
    /// The locale of users whose own is missing or has no templates.
    pub default_locale: String,
}

impl CreateEmailsConfig {
    pub const VARS: &'static [&'static str] = &[
        "EMAILS_QUEUE_URL",
        "RECORD_CONCURRENCY",
        "RECENT_FOLLOWERS_SHOWN",
        "UNSUBSCRIBE_BASE_URL",
        "DEFAULT_LOCALE",
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let unsubscribe_base_url = required(src, "UNSUBSCRIBE_BASE_URL")?;
        crate::unsubscribe::check_base_url(&unsubscribe_base_url).map_err(|e| ConfigError {
            var: "UNSUBSCRIBE_BASE_URL",
            problem: e.to_string(),
        })?;
        let default_locale = value(src, "DEFAULT_LOCALE").unwrap_or_else(|| "en".into());
        if !crate::digest::LOCALES.contains(&default_locale.as_str()) {
            return Err(ConfigError {
                var: "DEFAULT_LOCALE",
                problem: format!(
                    "{default_locale:?} has no templates; use one of {}",
                    crate::digest::LOCALES.join(", ")
                ),
            });
        }
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            emails_queue_url: required(src, "EMAILS_QUEUE_URL")?,
            record_concurrency: positive_u32(src, "RECORD_CONCURRENCY", 10)? as usize,
            recent_followers_shown: positive_u32(src, "RECENT_FOLLOWERS_SHOWN", 3)?,
            unsubscribe: UnsubscribeConfig::from_source(src)?,
            unsubscribe_base_url,
            default_locale,
        })
    }
}

/// Unsubscribe: the one-click unsubscribe endpoint (a Function URL).
#[derive(Clone, Debug)]
pub struct UnsubscribeFunctionConfig {
    pub mongo: MongoConfig,
    pub unsubscribe: UnsubscribeConfig,
    /// Where the unsubscribe is noted for the campaign analytics.
    pub sends_table_name: String,
}

impl UnsubscribeFunctionConfig {
    pub const VARS: &'static [&'static str] = &["SENDS_TABLE_NAME"];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            unsubscribe: UnsubscribeConfig::from_source(src)?,
            sends_table_name: required(src, "SENDS_TABLE_NAME")?,
        })
    }
}

/// SesEvents: bounces, complaints, deliveries, opens and clicks from SES.
#[derive(Clone, Debug)]
pub struct SesEventsConfig {
    pub mongo: MongoConfig,
    pub sends_table_name: String,
    /// Records of one batch processed at once.
    pub record_concurrency: usize,
}

impl SesEventsConfig {
    pub const VARS: &'static [&'static str] = &["SENDS_TABLE_NAME", "RECORD_CONCURRENCY"];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            sends_table_name: required(src, "SENDS_TABLE_NAME")?,
            record_concurrency: positive_u32(src, "RECORD_CONCURRENCY", 10)? as usize,
        })
    }
}

/// SendEmail: claim, send through SES v2, mark.
#[derive(Clone, Debug)]
pub struct SendEmailConfig {
    pub sends_table_name: String,
    pub emails_queue_url: String,
    pub sender_address: String,
    pub configuration_set: Option<String>,
    /// Campaign-wide emails per second, split over `max_concurrency` invocations.
    pub send_rate_per_second: f64,
    /// Must equal the event source mapping's ScalingConfig.MaximumConcurrency.
    pub max_concurrency: u32,
    pub visibility_timeout: Duration,
    pub function_timeout: Duration,
    pub lease_clock_skew: Duration,
    /// Backoff for throttled sends, by receive count (the last one repeats).
    pub retry_delays: Vec<Duration>,
    pub retention_days: u32,
    pub record_concurrency: usize,
    /// An email the service refuses with the same kind of error this many times (not
    /// throttling) is recorded FAILED instead of retried until the DLQ.
    pub max_send_errors: u32,
    /// The emails queue's maxReceiveCount: on a message's last receive, a send that cannot
    /// go out marks its record DEAD_LETTERED before the message moves to the DLQ.
    pub max_receive_count: u32,
}

impl SendEmailConfig {
    pub const VARS: &'static [&'static str] = &[
        "SENDS_TABLE_NAME",
        "EMAILS_QUEUE_URL",
        "SENDER_ADDRESS",
        "SES_CONFIGURATION_SET",
        "SEND_RATE_PER_SECOND",
        "SEND_MAX_CONCURRENCY",
        "VISIBILITY_TIMEOUT_SECONDS",
        "FUNCTION_TIMEOUT_SECONDS",
        "LEASE_CLOCK_SKEW_SECONDS",
        "RETRY_DELAYS_SECONDS",
        "RETENTION_DAYS",
        "RECORD_CONCURRENCY",
        "MAX_SEND_ERRORS",
        "EMAILS_MAX_RECEIVE_COUNT",
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let max_receive_count = positive_u32(src, "EMAILS_MAX_RECEIVE_COUNT", 10)?;
        let max_send_errors = positive_u32(src, "MAX_SEND_ERRORS", 3)?;
        if max_send_errors >= max_receive_count {
            return Err(ConfigError {
                var: "MAX_SEND_ERRORS",
                problem: format!(
                    "{max_send_errors} must be below EMAILS_MAX_RECEIVE_COUNT ({max_receive_count}), \
                     or a refused email reaches the DLQ before it is recorded FAILED"
                ),
            });
        }
        let rate: f64 = parsed(
            src,
            "SEND_RATE_PER_SECOND",
            14.0,
            "a number of emails per second",
        )?;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ConfigError {
                var: "SEND_RATE_PER_SECOND",
                problem: "must be greater than 0".into(),
            });
        }
        let visibility = parsed(
            src,
            "VISIBILITY_TIMEOUT_SECONDS",
            0u64,
            "a number of seconds",
        )?;
        let timeout = parsed(src, "FUNCTION_TIMEOUT_SECONDS", 0u64, "a number of seconds")?;
        if value(src, "VISIBILITY_TIMEOUT_SECONDS").is_none() {
            required(src, "VISIBILITY_TIMEOUT_SECONDS")?;
        }
        if value(src, "FUNCTION_TIMEOUT_SECONDS").is_none() {
            required(src, "FUNCTION_TIMEOUT_SECONDS")?;
        }
        // The lease is only safe if SQS cannot hand the message to someone else while the
        // invocation that holds it may still be running.
        if visibility <= timeout {
            return Err(ConfigError {
                var: "VISIBILITY_TIMEOUT_SECONDS",
                problem: format!(
                    "{visibility}s must be greater than FUNCTION_TIMEOUT_SECONDS ({timeout}s); \
                     raise the emails queue's VisibilityTimeout (AWS recommends 6x the timeout)"
                ),
            });
        }
        let delays = value(src, "RETRY_DELAYS_SECONDS").unwrap_or_else(|| "2,10,60,300".into());
        let retry_delays = delays
            .split(',')
            .map(|d| d.trim().parse::<u64>().map(Duration::from_secs))
            .collect::<Result<Vec<_>, _>>()
            .ok()
            .filter(|v| !v.is_empty() && v.iter().all(|d| d.as_secs() <= 43_200))
            .ok_or_else(|| ConfigError {
                var: "RETRY_DELAYS_SECONDS",
                problem: format!(
                    "{delays:?} is not a comma-separated list of seconds (each at most 43200), e.g. 2,10,60,300"
                ),
            })?;
        Ok(Self {
            sends_table_name: required(src, "SENDS_TABLE_NAME")?,
            emails_queue_url: required(src, "EMAILS_QUEUE_URL")?,
            sender_address: required(src, "SENDER_ADDRESS")?,
            configuration_set: value(src, "SES_CONFIGURATION_SET"),
            send_rate_per_second: rate,
            max_concurrency: positive_u32(src, "SEND_MAX_CONCURRENCY", 2)?,
            visibility_timeout: Duration::from_secs(visibility),
            function_timeout: Duration::from_secs(timeout),
            lease_clock_skew: Duration::from_secs(parsed(
                src,
                "LEASE_CLOCK_SKEW_SECONDS",
                5u64,
                "a number of seconds",
            )?),
            retry_delays,
            retention_days: positive_u32(src, "RETENTION_DAYS", 90)?,
            record_concurrency: positive_u32(src, "RECORD_CONCURRENCY", 10)? as usize,
            max_send_errors,
            max_receive_count,
        })
    }

    /// This invocation's share of the campaign-wide send rate.
    pub fn per_invocation_rate(&self) -> f64 {
        self.send_rate_per_second / f64::from(self.max_concurrency)
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
    ];

    #[test]
    fn send_email_defaults() {
        let c = SendEmailConfig::from_source(&src(SEND)).unwrap();
        assert_eq!(c.retry_delays.len(), 4);
        assert_eq!(c.retention_days, 90);
        assert_eq!(c.per_invocation_rate(), 7.0);
        assert!(c.configuration_set.is_none());
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

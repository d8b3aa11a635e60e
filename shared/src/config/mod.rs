//! Typed configuration, read from environment variables once at init.
//!
//! Every variable is documented in the README's configuration reference and set in
//! `template.yaml`; `tests/consistency.rs` keeps the three in step. A bad or missing value
//! stops the function at cold start with one line that names the variable and what to do.
//! Over 400 lines on purpose: every variable of every function with its validation, and
//! their tests (about a third of the file).

use std::time::Duration;

/// Every variable the functions read, named once: the parsers below and the `VARS` lists
/// (which `tests/consistency.rs` checks against template.yaml and the README's table) use
/// these, so a misspelt name is a compile error rather than a silently missing setting.
pub mod var {
    /// Where checkpoints go when an audience needs another invocation
    pub const CONTINUATION_QUEUE_URL: &str = "CONTINUATION_QUEUE_URL";
    /// Stop reading this long before the deadline and continue from a checkpoint
    pub const DEADLINE_MARGIN_SECONDS: &str = "DEADLINE_MARGIN_SECONDS";
    /// Language for users whose `locale` has no templates (`en`, `fr`, `de`); checked at cold
    /// start
    pub const DEFAULT_LOCALE: &str = "DEFAULT_LOCALE";
    /// The emails queue's `maxReceiveCount`: on a message's last receive, a send that cannot go
    /// out records DEAD_LETTERED
    pub const EMAILS_MAX_RECEIVE_COUNT: &str = "EMAILS_MAX_RECEIVE_COUNT";
    /// Campaigns and their state (running, paused, cancelled): GetUsers registers a campaign
    /// there; GetUsers, CreateEmails and SendEmail hold back a paused or cancelled one
    pub const CAMPAIGNS_TABLE_NAME: &str = "CAMPAIGNS_TABLE_NAME";
    /// The event source mappings of the continuation, users and emails queues (comma-separated
    /// UUIDs): the reputation guard disables them to stop sending
    pub const EVENT_SOURCE_MAPPING_IDS: &str = "EVENT_SOURCE_MAPPING_IDS";
    /// Email jobs (SendEmail uses it to set retry delays)
    pub const EMAILS_QUEUE_URL: &str = "EMAILS_QUEUE_URL";
    /// SendMessageBatch calls in flight
    pub const ENQUEUE_CONCURRENCY: &str = "ENQUEUE_CONCURRENCY";
    /// SendEmail's Timeout; must be below the visibility timeout
    pub const FUNCTION_TIMEOUT_SECONDS: &str = "FUNCTION_TIMEOUT_SECONDS";
    /// Margin added to the deadline for the lease
    pub const LEASE_CLOCK_SKEW_SECONDS: &str = "LEASE_CLOCK_SKEW_SECONDS";
    /// An email SES refuses with an error (not throttling) this many times is recorded FAILED
    /// with the error, instead of retried until the DLQ; must be below
    /// `EMAILS_MAX_RECEIVE_COUNT`
    pub const MAX_SEND_ERRORS: &str = "MAX_SEND_ERRORS";
    /// Database with `users` and `follows`
    pub const MONGODB_DATABASE: &str = "MONGODB_DATABASE";
    /// Connections per execution environment
    pub const MONGODB_MAX_POOL_SIZE: &str = "MONGODB_MAX_POOL_SIZE";
    /// The URI itself, used only when `MONGODB_URI_SECRET_ID` is unset (local tools; never set
    /// by template.yaml)
    pub const MONGODB_URI: &str = "MONGODB_URI";
    /// Secrets Manager secret (name or ARN) whose value is the MongoDB URI, or JSON `{"uri":
    /// "..."}`; read once at cold start, never logged
    pub const MONGODB_URI_SECRET_ID: &str = "MONGODB_URI_SECRET_ID";
    /// Newest followers named in the email
    pub const RECENT_FOLLOWERS_SHOWN: &str = "RECENT_FOLLOWERS_SHOWN";
    /// Records of one batch processed at once
    pub const RECORD_CONCURRENCY: &str = "RECORD_CONCURRENCY";
    /// TTL of ledger records
    pub const RETENTION_DAYS: &str = "RETENTION_DAYS";
    /// Backoff for throttled sends by receive count (last repeats)
    pub const RETRY_DELAYS_SECONDS: &str = "RETRY_DELAYS_SECONDS";
    /// Verified SES identity to send from
    pub const SENDER_ADDRESS: &str = "SENDER_ADDRESS";
    /// The exactly-once ledger (and the campaign analytics on its records)
    pub const SENDS_TABLE_NAME: &str = "SENDS_TABLE_NAME";
    /// Must equal the event source's `ScalingConfig.MaximumConcurrency`; each environment sends
    /// at rate / this
    pub const SEND_MAX_CONCURRENCY: &str = "SEND_MAX_CONCURRENCY";
    /// Campaign-wide emails per second
    pub const SEND_RATE_PER_SECOND: &str = "SEND_RATE_PER_SECOND";
    /// Configuration set every email goes through (template.yaml creates it; it publishes the
    /// events SesEvents reads)
    pub const SES_CONFIGURATION_SET: &str = "SES_CONFIGURATION_SET";
    /// Where the unsubscribe links point: the Unsubscribe function's URL (template.yaml), or
    /// your own domain in front of it
    pub const UNSUBSCRIBE_BASE_URL: &str = "UNSUBSCRIBE_BASE_URL";
    /// The list a token unsubscribes from (`a-z 0-9 -`); a token for another list is refused
    pub const UNSUBSCRIBE_LIST: &str = "UNSUBSCRIBE_LIST";
    /// The key itself, used only when `UNSUBSCRIBE_SECRET_ID` is unset (local tools; never set
    /// by template.yaml)
    pub const UNSUBSCRIBE_SECRET: &str = "UNSUBSCRIBE_SECRET";
    /// Secrets Manager secret with the HMAC key(s) of the unsubscribe tokens (template.yaml
    /// generates it); several keys separated by spaces: the first signs, all verify
    pub const UNSUBSCRIBE_SECRET_ID: &str = "UNSUBSCRIBE_SECRET_ID";
    /// Where the audience goes
    pub const USERS_QUEUE_URL: &str = "USERS_QUEUE_URL";
    /// The emails queue's VisibilityTimeout (caps the lease)
    pub const VISIBILITY_TIMEOUT_SECONDS: &str = "VISIBILITY_TIMEOUT_SECONDS";
}

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

/// GetUsers: audience out of MongoDB into the users queue.
#[derive(Clone, Debug)]
pub struct GetUsersConfig {
    pub mongo: MongoConfig,
    pub campaigns_table_name: String,
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
        var::CAMPAIGNS_TABLE_NAME,
        var::USERS_QUEUE_URL,
        var::CONTINUATION_QUEUE_URL,
        var::ENQUEUE_CONCURRENCY,
        var::DEADLINE_MARGIN_SECONDS,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
            users_queue_url: required(src, var::USERS_QUEUE_URL)?,
            continuation_queue_url: required(src, var::CONTINUATION_QUEUE_URL)?,
            enqueue_concurrency: positive_u32(src, var::ENQUEUE_CONCURRENCY, 8)? as usize,
            deadline_margin: Duration::from_secs(parsed(
                src,
                var::DEADLINE_MARGIN_SECONDS,
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
    pub campaigns_table_name: String,
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
        var::CAMPAIGNS_TABLE_NAME,
        var::EMAILS_QUEUE_URL,
        var::RECORD_CONCURRENCY,
        var::RECENT_FOLLOWERS_SHOWN,
        var::UNSUBSCRIBE_BASE_URL,
        var::DEFAULT_LOCALE,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let unsubscribe_base_url = required(src, var::UNSUBSCRIBE_BASE_URL)?;
        crate::domain::unsubscribe_link::check_base_url(&unsubscribe_base_url).map_err(|e| {
            ConfigError {
                var: var::UNSUBSCRIBE_BASE_URL,
                problem: e.to_string(),
            }
        })?;
        let default_locale = value(src, var::DEFAULT_LOCALE).unwrap_or_else(|| "en".into());
        if !crate::domain::digest::LOCALES.contains(&default_locale.as_str()) {
            return Err(ConfigError {
                var: var::DEFAULT_LOCALE,
                problem: format!(
                    "{default_locale:?} has no templates; use one of {}",
                    crate::domain::digest::LOCALES.join(", ")
                ),
            });
        }
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
            emails_queue_url: required(src, var::EMAILS_QUEUE_URL)?,
            record_concurrency: positive_u32(src, var::RECORD_CONCURRENCY, 10)? as usize,
            recent_followers_shown: positive_u32(src, var::RECENT_FOLLOWERS_SHOWN, 3)?,
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
    pub const VARS: &'static [&'static str] = &[var::SENDS_TABLE_NAME];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            unsubscribe: UnsubscribeConfig::from_source(src)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
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
    pub const VARS: &'static [&'static str] = &[var::SENDS_TABLE_NAME, var::RECORD_CONCURRENCY];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            record_concurrency: positive_u32(src, var::RECORD_CONCURRENCY, 10)? as usize,
        })
    }
}

/// ReputationGuard: pauses every running campaign when an SES reputation alarm fires.
#[derive(Clone, Debug)]
pub struct ReputationGuardConfig {
    pub campaigns_table_name: String,
    pub event_source_mapping_ids: Vec<String>,
}

impl ReputationGuardConfig {
    pub const VARS: &'static [&'static str] =
        &[var::CAMPAIGNS_TABLE_NAME, var::EVENT_SOURCE_MAPPING_IDS];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let ids: Vec<String> = required(src, var::EVENT_SOURCE_MAPPING_IDS)?
            .split(',')
            .map(|id| id.trim().to_owned())
            .filter(|id| !id.is_empty())
            .collect();
        if ids.is_empty() {
            return Err(ConfigError {
                var: var::EVENT_SOURCE_MAPPING_IDS,
                problem: "names no event source mapping: give their UUIDs, comma-separated".into(),
            });
        }
        Ok(Self {
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
            event_source_mapping_ids: ids,
        })
    }
}

/// SendEmail: claim, send through SES v2, mark.
#[derive(Clone, Debug)]
pub struct SendEmailConfig {
    pub sends_table_name: String,
    pub campaigns_table_name: String,
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
        var::SENDS_TABLE_NAME,
        var::CAMPAIGNS_TABLE_NAME,
        var::EMAILS_QUEUE_URL,
        var::SENDER_ADDRESS,
        var::SES_CONFIGURATION_SET,
        var::SEND_RATE_PER_SECOND,
        var::SEND_MAX_CONCURRENCY,
        var::VISIBILITY_TIMEOUT_SECONDS,
        var::FUNCTION_TIMEOUT_SECONDS,
        var::LEASE_CLOCK_SKEW_SECONDS,
        var::RETRY_DELAYS_SECONDS,
        var::RETENTION_DAYS,
        var::RECORD_CONCURRENCY,
        var::MAX_SEND_ERRORS,
        var::EMAILS_MAX_RECEIVE_COUNT,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let max_receive_count = positive_u32(src, var::EMAILS_MAX_RECEIVE_COUNT, 10)?;
        let max_send_errors = positive_u32(src, var::MAX_SEND_ERRORS, 3)?;
        if max_send_errors >= max_receive_count {
            return Err(ConfigError {
                var: var::MAX_SEND_ERRORS,
                problem: format!(
                    "{max_send_errors} must be below EMAILS_MAX_RECEIVE_COUNT ({max_receive_count}), \
                     or a refused email reaches the DLQ before it is recorded FAILED"
                ),
            });
        }
        let rate: f64 = parsed(
            src,
            var::SEND_RATE_PER_SECOND,
            14.0,
            "a number of emails per second",
        )?;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ConfigError {
                var: var::SEND_RATE_PER_SECOND,
                problem: "must be greater than 0".into(),
            });
        }
        let visibility = parsed(
            src,
            var::VISIBILITY_TIMEOUT_SECONDS,
            0u64,
            "a number of seconds",
        )?;
        let timeout = parsed(
            src,
            var::FUNCTION_TIMEOUT_SECONDS,
            0u64,
            "a number of seconds",
        )?;
        if value(src, var::VISIBILITY_TIMEOUT_SECONDS).is_none() {
            required(src, var::VISIBILITY_TIMEOUT_SECONDS)?;
        }
        if value(src, var::FUNCTION_TIMEOUT_SECONDS).is_none() {
            required(src, var::FUNCTION_TIMEOUT_SECONDS)?;
        }
        // The lease is only safe if SQS cannot hand the message to someone else while the
        // invocation that holds it may still be running.
        if visibility <= timeout {
            return Err(ConfigError {
                var: var::VISIBILITY_TIMEOUT_SECONDS,
                problem: format!(
                    "{visibility}s must be greater than FUNCTION_TIMEOUT_SECONDS ({timeout}s); \
                     raise the emails queue's VisibilityTimeout (AWS recommends 6x the timeout)"
                ),
            });
        }
        let delays = value(src, var::RETRY_DELAYS_SECONDS).unwrap_or_else(|| "2,10,60,300".into());
        let retry_delays = delays
            .split(',')
            .map(|d| d.trim().parse::<u64>().map(Duration::from_secs))
            .collect::<Result<Vec<_>, _>>()
            .ok()
            .filter(|v| !v.is_empty() && v.iter().all(|d| d.as_secs() <= 43_200))
            .ok_or_else(|| ConfigError {
                var: var::RETRY_DELAYS_SECONDS,
                problem: format!(
                    "{delays:?} is not a comma-separated list of seconds (each at most 43200), e.g. 2,10,60,300"
                ),
            })?;
        Ok(Self {
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
            emails_queue_url: required(src, var::EMAILS_QUEUE_URL)?,
            sender_address: required(src, var::SENDER_ADDRESS)?,
            configuration_set: value(src, var::SES_CONFIGURATION_SET),
            send_rate_per_second: rate,
            max_concurrency: positive_u32(src, var::SEND_MAX_CONCURRENCY, 2)?,
            visibility_timeout: Duration::from_secs(visibility),
            function_timeout: Duration::from_secs(timeout),
            lease_clock_skew: Duration::from_secs(parsed(
                src,
                var::LEASE_CLOCK_SKEW_SECONDS,
                5u64,
                "a number of seconds",
            )?),
            retry_delays,
            retention_days: positive_u32(src, var::RETENTION_DAYS, 90)?,
            record_concurrency: positive_u32(src, var::RECORD_CONCURRENCY, 10)? as usize,
            max_send_errors,
            max_receive_count,
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
    ];

    #[test]
    fn send_email_defaults() {
        let c = SendEmailConfig::from_source(&src(SEND)).unwrap();
        assert_eq!(c.retry_delays.len(), 4);
        assert_eq!(c.retention_days, 90);
        assert_eq!((c.send_rate_per_second, c.max_concurrency), (14.0, 2));
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

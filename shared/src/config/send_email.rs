//! SendEmail's configuration, with the rules that tie its variables together (the lease,
//! the visibility timeout, the function timeout, the send rate).

use super::*;
use crate::domain::events_path::Handler;
use crate::domain::fan_out::Composer;
use crate::domain::public_urls::PublicUrls;
use crate::domain::send_rate::Environment;
use std::time::Duration;

/// SendEmail: claim, send through SES v2, mark.
#[derive(Clone, Debug)]
pub struct SendEmailConfig {
    pub sends_table_name: String,
    pub campaigns_table_name: String,
    pub emails_queue_url: String,
    pub sender_address: String,
    pub configuration_set: Option<String>,
    /// Emails per second for the whole stack, shared by every environment (`pacing`).
    pub send_rate_per_second: f64,
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
    /// Frequency caps across campaigns (none: no rule).
    pub caps: crate::domain::guardrails::FrequencyCaps,
    pub quiet_hours: Option<crate::domain::guardrails::QuietHours>,
    /// The zone of users without one (quiet hours and calendar-day caps).
    pub fallback_zone: crate::domain::local_time::ZoneName,
    /// Where a person's standing is read again for an email that waited since it was
    /// rendered (connected at the first such read).
    pub mongo: MongoConfig,
    /// Where a user met in their quiet hours waits for their end: the waiting room GetUsers
    /// holds local-time users in, and the slot schedules that invoke GetUsers to release them.
    pub waiting_table_name: String,
    pub release_schedule_group: String,
    pub release_scheduler_role_arn: String,
    pub release_dead_letter_arn: String,
    pub release_function_arn: String,
}

impl SendEmailConfig {
    pub const VARS: &'static [&'static str] = &[
        var::SENDS_TABLE_NAME,
        var::CAMPAIGNS_TABLE_NAME,
        var::EMAILS_QUEUE_URL,
        var::SENDER_ADDRESS,
        var::SES_CONFIGURATION_SET,
        var::SEND_RATE_PER_SECOND,
        var::VISIBILITY_TIMEOUT_SECONDS,
        var::FUNCTION_TIMEOUT_SECONDS,
        var::LEASE_CLOCK_SKEW_SECONDS,
        var::RETRY_DELAYS_SECONDS,
        var::RETENTION_DAYS,
        var::RECORD_CONCURRENCY,
        var::MAX_SEND_ERRORS,
        var::EMAILS_MAX_RECEIVE_COUNT,
        var::FREQUENCY_CAPS,
        var::FREQUENCY_CAP_EXEMPT_TOPICS,
        var::QUIET_HOURS,
        var::QUIET_HOURS_POLICY,
        var::FALLBACK_TIME_ZONE,
        var::WAITING_TABLE_NAME,
        var::RELEASE_SCHEDULE_GROUP,
        var::RELEASE_SCHEDULER_ROLE_ARN,
        var::RELEASE_DEAD_LETTER_ARN,
        var::RELEASE_FUNCTION_ARN,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let (max_receive_count, max_send_errors) = receive_limits(src)?;
        let rate = send_rate(src)?;
        let (visibility, timeout) = timeouts(src)?;
        let retry_delays = retry_delays(src)?;
        let record_concurrency = positive_u32(src, var::RECORD_CONCURRENCY, 10)? as usize;
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
            emails_queue_url: required(src, var::EMAILS_QUEUE_URL)?,
            sender_address: sender(src)?,
            configuration_set: value(src, var::SES_CONFIGURATION_SET),
            send_rate_per_second: rate,
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
            record_concurrency,
            max_send_errors,
            max_receive_count,
            caps: frequency_caps(src)?,
            quiet_hours: super::functions::quiet_hours(src)?,
            fallback_zone: fallback_zone(src)?,
            waiting_table_name: required(src, var::WAITING_TABLE_NAME)?,
            release_schedule_group: required(src, var::RELEASE_SCHEDULE_GROUP)?,
            release_scheduler_role_arn: required(src, var::RELEASE_SCHEDULER_ROLE_ARN)?,
            release_dead_letter_arn: required(src, var::RELEASE_DEAD_LETTER_ARN)?,
            release_function_arn: required(src, var::RELEASE_FUNCTION_ARN)?,
        })
    }
}

/// `SENDER_ADDRESS`, refused at cold start when it cannot be written as a From header (a
/// non-ASCII local part, a malformed address), rather than at each email.
fn sender(src: &dyn Source) -> Result<String, ConfigError> {
    let sender = required(src, var::SENDER_ADDRESS)?;
    crate::domain::mime::from_header(&sender).map_err(|why| ConfigError {
        var: var::SENDER_ADDRESS,
        problem: format!("{why} (e.g. `Mailflow News <news@example.com>`)"),
    })?;
    Ok(sender)
}

/// `EMAILS_MAX_RECEIVE_COUNT` and `MAX_SEND_ERRORS`, the second below the first.
fn receive_limits(src: &dyn Source) -> Result<(u32, u32), ConfigError> {
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
    Ok((max_receive_count, max_send_errors))
}

/// The emails queue's visibility timeout and the function's timeout (seconds), the first
/// longer than the second.
fn timeouts(src: &dyn Source) -> Result<(u64, u64), ConfigError> {
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
    Ok((visibility, timeout))
}

/// `RETRY_DELAYS_SECONDS`: the backoff by receive.
fn retry_delays(src: &dyn Source) -> Result<Vec<Duration>, ConfigError> {
    let delays = value(src, var::RETRY_DELAYS_SECONDS).unwrap_or_else(|| "2,10,60,300".into());
    delays
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
        })
}

/// `FREQUENCY_CAPS` and `FREQUENCY_CAP_EXEMPT_TOPICS`.
fn frequency_caps(
    src: &dyn Source,
) -> Result<crate::domain::guardrails::FrequencyCaps, ConfigError> {
    crate::domain::guardrails::FrequencyCaps::parse(
        &value(src, var::FREQUENCY_CAPS).unwrap_or_default(),
        &value(src, var::FREQUENCY_CAP_EXEMPT_TOPICS).unwrap_or_default(),
    )
    .map_err(|e| ConfigError {
        var: var::FREQUENCY_CAPS,
        problem: e.to_string(),
    })
}

/// `FALLBACK_TIME_ZONE`: the zone of a user without one (UTC unless set).
fn fallback_zone(src: &dyn Source) -> Result<crate::domain::local_time::ZoneName, ConfigError> {
    crate::domain::local_time::ZoneName::parse(
        &value(src, var::FALLBACK_TIME_ZONE).unwrap_or_else(|| "UTC".into()),
    )
    .map_err(|e| ConfigError {
        var: var::FALLBACK_TIME_ZONE,
        problem: e.to_string(),
    })
}

/// `SEND_RATE_PER_SECOND`, checked.
pub(super) fn send_rate(src: &dyn Source) -> Result<f64, ConfigError> {
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
    Ok(rate)
}

/// `SES_QUOTA_SHARE_PERCENT`, checked, as a fraction.
fn quota_share(src: &dyn Source) -> Result<f64, ConfigError> {
    let share: f64 = parsed(
        src,
        var::SES_QUOTA_SHARE_PERCENT,
        100.0,
        "a percentage (1 to 100)",
    )?;
    if !(share.is_finite() && share > 0.0 && share <= 100.0) {
        return Err(ConfigError {
            var: var::SES_QUOTA_SHARE_PERCENT,
            problem: format!("{share} must be more than 0 and at most 100"),
        });
    }
    Ok(share / 100.0)
}

/// RateControl: SES's quota read once a minute, the ceiling written to the rate item, and
/// SendEmail's and CreateEmails' event source mappings sized to it.
#[derive(Clone, Debug)]
pub struct RateControlConfig {
    pub campaigns_table_name: String,
    /// Read for its warm write throughput, one of the limits the rate is checked against.
    pub sends_table_name: String,
    pub send_rate_per_second: f64,
    pub ses_quota_share: f64,
    /// SendEmail's environment: its batch (`EmailsBatchSize`) and memory.
    pub send_email: Environment,
    /// The UUID of SendEmail's event source mapping on the emails queue.
    pub emails_event_source_mapping_id: String,
    /// CreateEmails' environment (`UsersBatchSize`, its memory), and the most environments
    /// the operator allows it (`CreateEmailsMaxConcurrency`: MongoDB connections).
    pub create_emails: Composer,
    pub create_emails_ceiling: u32,
    /// The UUID of CreateEmails' event source mapping on the users queue.
    pub users_event_source_mapping_id: String,
    /// SesEvents' environment (`SesEventsBatchSize`, its memory), whether opens and clicks
    /// are tracked (more events per email), and the UUID of its mapping.
    pub ses_events: Handler,
    pub track_opens_and_clicks: bool,
    pub ses_events_event_source_mapping_id: String,
    /// The public URLs' reserved concurrency and the pick slots, checked against what the
    /// ceiling needs.
    pub public_urls: PublicUrls,
}

impl RateControlConfig {
    /// The stack's sizing, as `domain::capacity` adds it up.
    pub fn stack(&self) -> crate::domain::capacity::Stack {
        crate::domain::capacity::Stack {
            send_email: self.send_email,
            create_emails: self.create_emails,
            create_emails_ceiling: self.create_emails_ceiling,
            ses_events: self.ses_events,
            track_opens_and_clicks: self.track_opens_and_clicks,
            public_urls: self.public_urls,
        }
    }

    pub const VARS: &'static [&'static str] = &[
        var::CAMPAIGNS_TABLE_NAME,
        var::SENDS_TABLE_NAME,
        var::SEND_RATE_PER_SECOND,
        var::SES_QUOTA_SHARE_PERCENT,
        var::SEND_EMAIL_BATCH_SIZE,
        var::SEND_EMAIL_MEMORY_MB,
        var::EMAILS_EVENT_SOURCE_MAPPING_ID,
        var::USERS_BATCH_SIZE,
        var::CREATE_EMAILS_MEMORY_MB,
        var::CREATE_EMAILS_MAX_CONCURRENCY,
        var::USERS_EVENT_SOURCE_MAPPING_ID,
        var::SES_EVENTS_BATCH_SIZE,
        var::SES_EVENTS_MEMORY_MB,
        var::TRACK_OPENS_AND_CLICKS,
        var::SES_EVENTS_EVENT_SOURCE_MAPPING_ID,
        var::UNSUBSCRIBE_CONCURRENCY,
        var::OPEN_CONTENT_CONCURRENCY,
        var::PICK_SLOTS,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let (rate, share) = (send_rate(src)?, quota_share(src)?);
        Ok(Self {
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            send_rate_per_second: rate,
            ses_quota_share: share,
            send_email: Environment {
                records_at_once: positive_u32(
                    src,
                    var::SEND_EMAIL_BATCH_SIZE,
                    Environment::DEFAULT.records_at_once as u32,
                )? as usize,
                memory_mb: positive_u32(
                    src,
                    var::SEND_EMAIL_MEMORY_MB,
                    Environment::DEFAULT.memory_mb,
                )?,
            },
            emails_event_source_mapping_id: required(src, var::EMAILS_EVENT_SOURCE_MAPPING_ID)?,
            create_emails: Composer {
                batch: positive_u32(src, var::USERS_BATCH_SIZE, Composer::DEFAULT.batch as u32)?
                    as usize,
                memory_mb: positive_u32(
                    src,
                    var::CREATE_EMAILS_MEMORY_MB,
                    Composer::DEFAULT.memory_mb,
                )?,
            },
            create_emails_ceiling: positive_u32(src, var::CREATE_EMAILS_MAX_CONCURRENCY, 5)?,
            users_event_source_mapping_id: required(src, var::USERS_EVENT_SOURCE_MAPPING_ID)?,
            ses_events: Handler {
                batch: positive_u32(
                    src,
                    var::SES_EVENTS_BATCH_SIZE,
                    Handler::DEFAULT.batch as u32,
                )? as usize,
                memory_mb: positive_u32(
                    src,
                    var::SES_EVENTS_MEMORY_MB,
                    Handler::DEFAULT.memory_mb,
                )?,
            },
            track_opens_and_clicks: parsed(
                src,
                var::TRACK_OPENS_AND_CLICKS,
                false,
                "true or false",
            )?,
            ses_events_event_source_mapping_id: required(
                src,
                var::SES_EVENTS_EVENT_SOURCE_MAPPING_ID,
            )?,
            public_urls: PublicUrls {
                unsubscribe_concurrency: positive_u32(
                    src,
                    var::UNSUBSCRIBE_CONCURRENCY,
                    PublicUrls::DEFAULT.unsubscribe_concurrency,
                )?,
                open_content_concurrency: positive_u32(
                    src,
                    var::OPEN_CONTENT_CONCURRENCY,
                    PublicUrls::DEFAULT.open_content_concurrency,
                )?,
                pick_slots: super::open_content::slots(src)?,
            },
        })
    }
}

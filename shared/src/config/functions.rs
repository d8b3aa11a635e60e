//! The configuration of GetUsers, CreateEmails, Unsubscribe, SesEvents and ReputationGuard.

use super::*;
use crate::domain::guardrails::{holdout_bp, GuardrailError, QuietHours, QuietPolicy};
use crate::domain::local_time::{LocalTime, LocalTimeError, PassedTime, ZoneName};
use std::time::Duration;

/// GetUsers: audience out of MongoDB into the users queue.
#[derive(Clone, Debug)]
pub struct GetUsersConfig {
    pub mongo: MongoConfig,
    pub campaigns_table_name: String,
    /// The send records an experiment is decided on (read by campaign).
    pub sends_table_name: String,
    pub users_queue_url: String,
    pub continuation_queue_url: String,
    /// SendMessageBatch calls kept in flight at once.
    pub enqueue_concurrency: usize,
    /// Stop reading the audience this long before the invocation's deadline and continue
    /// from a checkpoint in a fresh invocation.
    pub deadline_margin: Duration,
    /// The longest content window a campaign may start with.
    pub max_window: Duration,
    pub local_time: LocalTimeConfig,
    pub waiting_table_name: String,
    pub release_schedule_group: String,
    pub release_scheduler_role_arn: String,
    pub release_dead_letter_arn: String,
    /// The holdout and deadline of a start that names none.
    pub guardrails: crate::domain::guardrails::GuardrailDefaults,
    /// Users whose email would go in their quiet hours wait for their end.
    pub quiet_hours: Option<QuietHours>,
    /// Consent to per-recipient tracking (parameter TrackOpensAndClicks): without it no
    /// click or open is noted on a send record, so no experiment can be decided by people
    /// and a start with one is refused.
    pub track_opens_and_clicks: bool,
    /// The stack's send rate (`SEND_RATE_PER_SECOND`): the end of a fan-out warns when its
    /// held users could not all be sent before the campaign's deadline at it.
    pub send_rate_per_second: f64,
}

/// Quiet hours (`QUIET_HOURS`, `QUIET_HOURS_POLICY`): GetUsers holds users until they end,
/// SendEmail checks again as it sends (and holds them in the waiting room too).
pub fn quiet_hours(src: &dyn Source) -> Result<Option<QuietHours>, ConfigError> {
    let policy: QuietPolicy = value(src, var::QUIET_HOURS_POLICY)
        .map(|raw| raw.parse())
        .transpose()
        .map_err(|e: GuardrailError| ConfigError {
            var: var::QUIET_HOURS_POLICY,
            problem: e.to_string(),
        })?
        .unwrap_or_default();
    value(src, var::QUIET_HOURS)
        .map(|raw| QuietHours::parse(&raw, policy))
        .transpose()
        .map_err(|e| ConfigError {
            var: var::QUIET_HOURS,
            problem: e.to_string(),
        })
}

/// The holdout and deadline GetUsers gives a start that names none (`HOLDOUT_PERCENT`,
/// `CAMPAIGN_DEADLINE_HOURS`).
pub fn guardrail_defaults(
    src: &dyn Source,
) -> Result<crate::domain::guardrails::GuardrailDefaults, ConfigError> {
    Ok(crate::domain::guardrails::GuardrailDefaults {
        holdout_bp: value(src, var::HOLDOUT_PERCENT)
            .map(|raw| holdout_bp(&raw))
            .transpose()
            .map_err(|e| ConfigError {
                var: var::HOLDOUT_PERCENT,
                problem: e.to_string(),
            })?
            .unwrap_or(0),
        deadline_hours: parsed(src, var::CAMPAIGN_DEADLINE_HOURS, 0u32, "a number of hours")?,
    })
}

/// Local-time delivery: the schedule's campaigns use `send_at` when it is set; a manual run
/// asks for it in its event and takes the fallback zone and the policy from here unless it
/// names its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalTimeConfig {
    pub send_at: Option<LocalTime>,
    pub fallback_zone: ZoneName,
    pub passed_time: PassedTime,
}

impl LocalTimeConfig {
    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let problem = |var, e: LocalTimeError| ConfigError {
            var,
            problem: e.to_string(),
        };
        Ok(Self {
            send_at: value(src, var::LOCAL_SEND_TIME)
                .map(|raw| raw.parse().map_err(|e| problem(var::LOCAL_SEND_TIME, e)))
                .transpose()?,
            fallback_zone: ZoneName::parse(
                &value(src, var::FALLBACK_TIME_ZONE).unwrap_or_else(|| "UTC".into()),
            )
            .map_err(|e| problem(var::FALLBACK_TIME_ZONE, e))?,
            passed_time: value(src, var::PASSED_TIME_POLICY)
                .map(|raw| raw.parse().map_err(|e| problem(var::PASSED_TIME_POLICY, e)))
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

impl GetUsersConfig {
    pub const VARS: &'static [&'static str] = &[
        var::CAMPAIGNS_TABLE_NAME,
        var::SENDS_TABLE_NAME,
        var::USERS_QUEUE_URL,
        var::CONTINUATION_QUEUE_URL,
        var::ENQUEUE_CONCURRENCY,
        var::DEADLINE_MARGIN_SECONDS,
        var::MAX_WINDOW_DAYS,
        var::LOCAL_SEND_TIME,
        var::FALLBACK_TIME_ZONE,
        var::PASSED_TIME_POLICY,
        var::WAITING_TABLE_NAME,
        var::RELEASE_SCHEDULE_GROUP,
        var::RELEASE_SCHEDULER_ROLE_ARN,
        var::RELEASE_DEAD_LETTER_ARN,
        var::HOLDOUT_PERCENT,
        var::CAMPAIGN_DEADLINE_HOURS,
        var::QUIET_HOURS,
        var::QUIET_HOURS_POLICY,
        var::TRACK_OPENS_AND_CLICKS,
        var::SEND_RATE_PER_SECOND,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            track_opens_and_clicks: parsed(
                src,
                var::TRACK_OPENS_AND_CLICKS,
                false,
                "true or false",
            )?,
            guardrails: guardrail_defaults(src)?,
            send_rate_per_second: super::send_email::send_rate(src)?,
            quiet_hours: quiet_hours(src)?,
            local_time: LocalTimeConfig::from_source(src)?,
            waiting_table_name: required(src, var::WAITING_TABLE_NAME)?,
            release_schedule_group: required(src, var::RELEASE_SCHEDULE_GROUP)?,
            release_scheduler_role_arn: required(src, var::RELEASE_SCHEDULER_ROLE_ARN)?,
            release_dead_letter_arn: required(src, var::RELEASE_DEAD_LETTER_ARN)?,
            mongo: MongoConfig::from_source(src)?,
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            users_queue_url: required(src, var::USERS_QUEUE_URL)?,
            continuation_queue_url: required(src, var::CONTINUATION_QUEUE_URL)?,
            enqueue_concurrency: positive_u32(src, var::ENQUEUE_CONCURRENCY, 64)? as usize,
            deadline_margin: Duration::from_secs(parsed(
                src,
                var::DEADLINE_MARGIN_SECONDS,
                20u64,
                "a number of seconds",
            )?),
            max_window: Duration::from_secs(
                u64::from(positive_u32(src, var::MAX_WINDOW_DAYS, 31)?) * 86_400,
            ),
        })
    }
}

/// CreateEmails: read and render each user's email, put the email job on the emails queue.
#[derive(Clone, Debug)]
pub struct CreateEmailsConfig {
    pub mongo: MongoConfig,
    pub campaigns_table_name: String,
    /// Where pending one-click unsubscribes are read (`PendingLeaves`).
    pub sends_table_name: String,
    pub emails_queue_url: String,
    /// Records of one batch processed at once (bounded so the MongoDB pool is not starved).
    pub record_concurrency: usize,
    pub unsubscribe: UnsubscribeConfig,
    /// Where the Unsubscribe function answers (its Function URL, or your own domain).
    pub unsubscribe_base_url: String,
    /// The open-time pick slots each email carries (None: no picks).
    pub picks: Option<super::PickLinks>,
}

impl CreateEmailsConfig {
    pub const VARS: &'static [&'static str] = &[
        var::CAMPAIGNS_TABLE_NAME,
        var::SENDS_TABLE_NAME,
        var::EMAILS_QUEUE_URL,
        var::RECORD_CONCURRENCY,
        var::UNSUBSCRIBE_BASE_URL,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let unsubscribe_base_url = required(src, var::UNSUBSCRIBE_BASE_URL)?;
        crate::domain::unsubscribe_link::check_base_url(&unsubscribe_base_url).map_err(|e| {
            ConfigError {
                var: var::UNSUBSCRIBE_BASE_URL,
                problem: e.to_string(),
            }
        })?;
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            emails_queue_url: required(src, var::EMAILS_QUEUE_URL)?,
            record_concurrency: positive_u32(src, var::RECORD_CONCURRENCY, 10)? as usize,
            unsubscribe: UnsubscribeConfig::from_source(src)?,
            unsubscribe_base_url,
            picks: super::PickLinks::from_source(src)?,
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
    /// Where a campaign's pinned definition, and so its recipients, are read.
    pub campaigns_table_name: String,
}

impl UnsubscribeFunctionConfig {
    pub const VARS: &'static [&'static str] = &[var::SENDS_TABLE_NAME, var::CAMPAIGNS_TABLE_NAME];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            unsubscribe: UnsubscribeConfig::from_source(src)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
        })
    }
}

/// SesEvents: bounces, complaints, deliveries, opens and clicks from SES.
#[derive(Clone, Debug)]
pub struct SesEventsConfig {
    pub mongo: MongoConfig,
    pub sends_table_name: String,
    /// Where a campaign's pinned definition, and so its recipients, are read.
    pub campaigns_table_name: String,
    /// Records of one batch processed at once.
    pub record_concurrency: usize,
}

impl SesEventsConfig {
    pub const VARS: &'static [&'static str] = &[
        var::SENDS_TABLE_NAME,
        var::CAMPAIGNS_TABLE_NAME,
        var::RECORD_CONCURRENCY,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            campaigns_table_name: required(src, var::CAMPAIGNS_TABLE_NAME)?,
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

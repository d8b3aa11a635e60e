//! The four ways GetUsers is started (the weekly schedule, a manual run, a slot's release,
//! a batch of continuation queue messages) and what travels between its invocations.

use super::{GetUsersError, Release, ReleaseEvent};
use crate::config::LocalTimeConfig;
use crate::domain::campaign::{Campaign, CampaignId, Window};
use crate::domain::definition::pin::{AskedDefinition, PinnedDefinition};
use crate::domain::experiment::Experiment;
use crate::domain::guardrails;
use crate::domain::guardrails::GuardrailRequest;
use crate::domain::local_time::{self, LocalDelivery};
use crate::domain::topics::{TopicId, Topics};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

/// A manual invocation.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ManualRequest {
    campaign_id: String,
    #[serde(default, with = "time::serde::rfc3339::option")]
    since: Option<OffsetDateTime>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    until: Option<OffsetDateTime>,
    #[serde(default)]
    include_failed: bool,
    #[serde(default)]
    include_cancelled: bool,
    /// The campaign's topic (default: the weekly one).
    topic: Option<String>,
    /// Deliver at this local time (`HH:MM`) in each user's zone.
    local_time: Option<String>,
    /// The date of that local time (`YYYY-MM-DD`); default: the UTC date the window ends on.
    send_date: Option<String>,
    fallback_zone: Option<String>,
    passed_time: Option<String>,
    /// Nothing of the campaign is sent after this instant (RFC 3339).
    #[serde(default, with = "time::serde::rfc3339::option")]
    deadline: Option<OffsetDateTime>,
    /// The holdout group's share of the audience, in percent ("10", 2.5).
    holdout_percent: Option<Value>,
    /// Frequency caps neither stop nor count this campaign's emails.
    cap_exempt: Option<bool>,
    /// An A/B experiment (docs/experiments.md), recorded with the first start.
    experiment: Option<Value>,
    /// The pushed definition the campaign runs from (`mailctl campaign push`), and its
    /// version: pinned by the first start, kept by every later one.
    definition: Option<String>,
    definition_version: Option<u32>,
    /// Run with `definitionVersion` although the campaign is pinned to another.
    #[serde(default)]
    repin: bool,
}

/// Where a run continues: the body of a continuation queue message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub campaign_id: CampaignId,
    #[serde(flatten)]
    pub window: Window,
    #[serde(default = "crate::domain::messages::weekly_topic")]
    pub topic: TopicId,
    #[serde(default)]
    pub include_failed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_cancelled: bool,
    /// The last user id already enqueued; the run continues after it.
    pub after: Option<String>,
    /// How many invocations came before this one.
    pub segment: u32,
    /// A local-time campaign's delivery, as it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<LocalDelivery>,
    /// When the run started (ms): its counts of users held (quiet hours, local time) are
    /// recorded under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<i64>,
    /// The pushed definition version the run uses (None: the built-in digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<PinnedDefinition>,
}

/// A continuation queue message: a checkpoint of a run, a release that continues, or an
/// asynchronous invocation (the weekly run, a slot's release) that failed three times, as
/// Lambda's on-failure destination writes it (`EventInvokeConfig` in the template).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Continuation {
    Release(ReleaseEvent),
    Checkpoint(Checkpoint),
    FailedInvocation(FailedInvocation),
}

/// Lambda's invocation record, of which only the event it failed on is needed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FailedInvocation {
    pub(super) request_payload: Value,
}

/// One run (or one segment of a run) of a campaign.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub campaign: Campaign,
    /// The start named the campaign's topic (else a campaign already started keeps its own).
    pub topic_named: bool,
    pub include_failed: bool,
    /// A resend of a reopened campaign: users recorded CANCELLED get their email too.
    pub include_cancelled: bool,
    pub after: Option<String>,
    pub segment: u32,
    pub delivery: Option<LocalDelivery>,
    /// The guardrails the start named (its first segment settles them).
    pub guardrails: GuardrailRequest,
    /// When the run started (ms, the clock's): the waiting table's report keeps each run's
    /// counts under it.
    pub started_at_ms: i64,
    /// The experiment the start named (its first segment records or settles it).
    pub experiment: Option<Box<Experiment>>,
    /// The definition (and version) the start named; its first segment settles it against
    /// the campaign's pin (`domain::definition::pin::settle`) and leaves the version used.
    pub definition: Option<AskedDefinition>,
    /// The start asked for another version than the pinned one, knowingly.
    pub repin: bool,
    /// The definition version this run uses, as its first segment settled it (None: the
    /// built-in digest); every message and checkpoint of the run carries it.
    pub pinned: Option<PinnedDefinition>,
}

pub enum Request {
    Run(Run),
    Release(Release),
    /// SQS records of the continuation queue.
    Continuations(Vec<ContinuationRecord>),
}

/// A record of the continuation queue: what GetUsers reads of it, and what it needs to set
/// when a failed one comes back.
#[derive(Debug)]
pub struct ContinuationRecord {
    pub message_id: String,
    pub body: Option<String>,
    pub receipt_handle: Option<String>,
    /// How often SQS has delivered it (1 on the first receive).
    pub receives: u32,
}

/// Recognises the four ways GetUsers is started. `local` is the configured local-time
/// delivery; `now_ms` the clock's time (a local-time campaign starts then).
pub fn parse_request(
    event: Value,
    local: &LocalTimeConfig,
    now_ms: i64,
) -> Result<Request, GetUsersError> {
    if event.get("releaseWaiting").is_some() {
        let release: ReleaseEvent = serde_json::from_value(event)
            .map_err(|e| GetUsersError::BadRequest(format!("release: {e}")))?;
        return Ok(Request::Release(release.release_waiting));
    }
    if let Some(records) = event.get("Records").and_then(Value::as_array) {
        let records = records
            .iter()
            .map(|r| {
                let text = |field: &str| r.get(field).and_then(Value::as_str).map(str::to_owned);
                ContinuationRecord {
                    message_id: text("messageId").unwrap_or_default(),
                    body: text("body"),
                    receipt_handle: text("receiptHandle"),
                    receives: (r.pointer("/attributes/ApproximateReceiveCount"))
                        .and_then(Value::as_str)
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(1),
                }
            })
            .collect();
        return Ok(Request::Continuations(records));
    }
    if event.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event") {
        let at = event
            .get("time")
            .and_then(Value::as_str)
            .and_then(|t| {
                OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
            })
            .ok_or_else(|| {
                GetUsersError::BadRequest("scheduled event without a valid \"time\"".into())
            })?;
        let campaign = Campaign::for_schedule(at);
        let delivery = local.send_at.map(|local_time| LocalDelivery {
            local_time,
            send_date: local_time::default_send_date(campaign.window.until.unix_timestamp()),
            fallback_zone: local.fallback_zone.clone(),
            passed_time: local.passed_time,
            started_at_ms: now_ms,
            window_until_ms: Some(campaign.window.until.unix_timestamp() * 1000),
        });
        return Ok(Request::Run(Run {
            campaign,
            topic_named: false,
            include_failed: false,
            include_cancelled: false,
            after: None,
            segment: 0,
            delivery,
            guardrails: GuardrailRequest::default(),
            started_at_ms: now_ms,
            experiment: None,
            definition: None,
            repin: false,
            pinned: None,
        }));
    }
    let manual: ManualRequest =
        serde_json::from_value(event).map_err(|e| GetUsersError::BadRequest(e.to_string()))?;
    let window = match (manual.since, manual.until) {
        (Some(since), Some(until)) => Some(Window::new(since, until)?),
        (None, None) => None,
        _ => {
            return Err(GetUsersError::BadRequest(
                "give both since and until, or neither".into(),
            ))
        }
    };
    let topic = Topics::builtin().resolve(manual.topic.as_deref())?;
    let campaign = Campaign::from_id(&manual.campaign_id, window)?.with_topic(topic.id.clone());
    let delivery = manual_delivery(&manual, &campaign, local, now_ms)?;
    let guardrails = GuardrailRequest {
        deadline_ms: manual
            .deadline
            .map(|d| (d.unix_timestamp_nanos() / 1_000_000) as i64),
        holdout_bp: match &manual.holdout_percent {
            None => None,
            Some(Value::String(raw)) => Some(guardrails::holdout_bp(raw)?),
            Some(other) => Some(guardrails::holdout_bp(&other.to_string())?),
        },
        cap_exempt: manual.cap_exempt,
    };
    let experiment = manual
        .experiment
        .as_ref()
        .map(|e| Experiment::parse(&e.to_string()).map(Box::new))
        .transpose()?;
    if manual.definition_version.is_some() && manual.definition.is_none() {
        return Err(GetUsersError::BadRequest(
            "definitionVersion goes with definition (\"definition\": \"digest\")".into(),
        ));
    }
    let definition = manual.definition.map(|name| AskedDefinition {
        name,
        version: manual.definition_version,
    });
    Ok(Request::Run(Run {
        guardrails,
        experiment,
        definition,
        repin: manual.repin,
        pinned: None,
        started_at_ms: now_ms,
        campaign,
        topic_named: manual.topic.is_some(),
        include_failed: manual.include_failed,
        include_cancelled: manual.include_cancelled,
        after: None,
        segment: 0,
        delivery,
    }))
}

/// A manual run's local-time delivery: asked for with `localTime`; the other three settings
/// make sense only with it.
fn manual_delivery(
    manual: &ManualRequest,
    campaign: &Campaign,
    local: &LocalTimeConfig,
    now_ms: i64,
) -> Result<Option<LocalDelivery>, GetUsersError> {
    let Some(at) = &manual.local_time else {
        if manual.send_date.is_some()
            || manual.fallback_zone.is_some()
            || manual.passed_time.is_some()
        {
            return Err(GetUsersError::BadRequest(
                "sendDate, fallbackZone and passedTime go with localTime (\"localTime\": \"09:00\")".into(),
            ));
        }
        return Ok(None);
    };
    Ok(Some(LocalDelivery {
        local_time: at.parse()?,
        send_date: match &manual.send_date {
            Some(date) => local_time::check_send_date(local_time::parse_date(date)?, now_ms)?,
            None => local_time::default_send_date(campaign.window.until.unix_timestamp()),
        },
        fallback_zone: match &manual.fallback_zone {
            Some(zone) => local_time::ZoneName::parse(zone)?,
            None => local.fallback_zone.clone(),
        },
        passed_time: match &manual.passed_time {
            Some(policy) => policy.parse()?,
            None => local.passed_time,
        },
        started_at_ms: now_ms,
        window_until_ms: Some(campaign.window.until.unix_timestamp() * 1000),
    }))
}

impl From<Checkpoint> for Run {
    fn from(cp: Checkpoint) -> Self {
        let delivery_started = cp.delivery.as_ref().map(|d| d.started_at_ms);
        Run {
            campaign: Campaign {
                id: cp.campaign_id,
                window: cp.window,
                topic: cp.topic,
            },
            topic_named: true,
            include_failed: cp.include_failed,
            include_cancelled: cp.include_cancelled,
            after: cp.after,
            segment: cp.segment,
            delivery: cp.delivery,
            // Settled by the first segment; a checkpoint's run names none.
            guardrails: GuardrailRequest::default(),
            started_at_ms: cp.started_at_ms.or(delivery_started).unwrap_or_default(),
            experiment: None,
            // Settled by the first segment, which the checkpoint carries.
            definition: None,
            repin: false,
            pinned: cp.definition,
        }
    }
}

//! Over 450 lines because the four guardrails and what a start settles of them read together;
//! their tables of cases are in `guardrails/tests.rs`.
//! The guardrails beyond exactly once, as Amazon Pinpoint's campaigns had them
//! (docs/pinpoint.md): a campaign's deadline and holdout group, frequency caps across
//! campaigns, and quiet hours in the user's zone. Pure: SendEmail applies them under its
//! claim (`stages::send_email::guard`), GetUsers defers users in their quiet hours.

use super::campaign::{rfc3339, CampaignError, CampaignId};
use super::local_time::{instant_of, LocalTime, LocalTimeError};
use super::topics::TopicId;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

/// Why a guardrail decided that a user gets no email of a campaign: recorded on the user's
/// send record (status SKIPPED, `skipReason`), counted by `mailctl status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    /// In the campaign's holdout group: never sent, the baseline its effect is measured on.
    HeldOut,
    /// Not sent before the campaign's deadline.
    Expired,
    /// A frequency cap was reached by other campaigns' emails.
    FrequencyCap,
    /// Due inside the user's quiet hours, and the policy says skip.
    QuietHours,
    /// The email waited since it was rendered, and read again at the send the person's
    /// standing no longer lets it go (`Standing::exclusion`, or a pending one-click leave):
    /// unsubscribed from everything, ...
    Unsubscribed,
    /// ... suppressed (a bounce or complaint), ...
    Suppressed,
    /// ... out of the campaign's topic, ...
    LeftTopic,
    /// ... a choice that holds another type (never guessed), ...
    UnreadableChoice,
    /// ... or no such user any more.
    Vanished,
}

impl Skip {
    pub const ALL: [Skip; 9] = [
        Self::HeldOut,
        Self::Expired,
        Self::FrequencyCap,
        Self::QuietHours,
        Self::Unsubscribed,
        Self::Suppressed,
        Self::LeftTopic,
        Self::UnreadableChoice,
        Self::Vanished,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::HeldOut => "held_out",
            Self::Expired => "expired",
            Self::FrequencyCap => "frequency_cap",
            Self::QuietHours => "quiet_hours",
            Self::Unsubscribed => "unsubscribed",
            Self::Suppressed => "suppressed",
            Self::LeftTopic => "left_topic",
            Self::UnreadableChoice => "unreadable_choice",
            Self::Vanished => "vanished",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// A resend with --include-failed reconsiders it (the holdout would decide the same).
    pub fn reconsidered(self) -> bool {
        self != Self::HeldOut
    }

    /// Whether an earlier attempt (throttled, paced, deferred) may have counted the email
    /// towards the frequency caps: then a skip takes it out. Never the held out; a cap
    /// reached takes out what it finds itself (`send_email::guard`).
    pub fn may_be_counted(self) -> bool {
        !matches!(self, Self::HeldOut | Self::FrequencyCap)
    }
}

impl From<super::topics::Exclusion> for Skip {
    fn from(exclusion: super::topics::Exclusion) -> Self {
        use super::topics::Exclusion;
        match exclusion {
            Exclusion::Unsubscribed => Self::Unsubscribed,
            Exclusion::Suppressed => Self::Suppressed,
            Exclusion::LeftTopic => Self::LeftTopic,
            Exclusion::Unreadable => Self::UnreadableChoice,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardrailError {
    #[error("holdout {0} is not a percentage from 0 to 50 with at most two decimals (for example 10 or 2.5)")]
    Holdout(String),
    #[error("frequency cap {0} is not a rule such as 1/16h, 3/7d or 2/1cd (calendar days in the user's zone), optionally for topics: 3/7d:digest+product-news")]
    Cap(String),
    #[error("frequency cap {rule} names topic {topic}, which shared/topics.json does not declare")]
    CapTopic { rule: String, topic: String },
    #[error(
        "quiet hours {0} are not HH:MM-HH:MM with two different times (for example 21:00-08:00)"
    )]
    Quiet(String),
    #[error("quiet hours policy {0} does not exist: use defer or skip")]
    QuietPolicy(String),
    #[error(transparent)]
    LocalTime(#[from] LocalTimeError),
}

/// What one campaign carries besides its content, fixed when it first starts (the deadline
/// may be moved by a later start, which is recorded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CampaignGuardrails {
    /// Nothing of it is sent after this instant (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    /// The holdout group's share of the audience, in basis points (1000 = 10 %).
    #[serde(default)]
    pub holdout_bp: u32,
    /// Frequency caps neither stop it nor count its emails (a transactional stream).
    #[serde(default)]
    pub cap_exempt: bool,
}

impl CampaignGuardrails {
    pub fn expired(&self, now_ms: i64) -> bool {
        self.deadline_ms.is_some_and(|d| now_ms >= d)
    }
}

/// The guardrails a start names (the rest come from the stack's defaults on the first start,
/// and from the record on every later one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GuardrailRequest {
    pub deadline_ms: Option<i64>,
    pub holdout_bp: Option<u32>,
    pub cap_exempt: Option<bool>,
}

/// The stack's defaults for a start that names none (`HOLDOUT_PERCENT`,
/// `CAMPAIGN_DEADLINE_HOURS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GuardrailDefaults {
    pub holdout_bp: u32,
    /// Hours after the first start (0: no deadline).
    pub deadline_hours: u32,
}

impl GuardrailRequest {
    /// What a first start records.
    pub fn initial(&self, defaults: GuardrailDefaults, now_ms: i64) -> CampaignGuardrails {
        CampaignGuardrails {
            deadline_ms: self.deadline_ms.or_else(|| {
                (defaults.deadline_hours > 0)
                    .then(|| now_ms + i64::from(defaults.deadline_hours) * 3_600_000)
            }),
            holdout_bp: self.holdout_bp.unwrap_or(defaults.holdout_bp),
            cap_exempt: self.cap_exempt.unwrap_or(false),
        }
    }

    /// Settles this start against what the campaign recorded: the holdout and the
    /// exemption cannot change; a deadline given replaces the recorded one (Some(new):
    /// to be written and recorded as moved); a start after the deadline is refused.
    pub fn settle(
        &self,
        id: &CampaignId,
        recorded: CampaignGuardrails,
        now_ms: i64,
    ) -> Result<Option<CampaignGuardrails>, CampaignError> {
        let percent = |bp: u32| format!("{}.{:02} %", bp / 100, bp % 100);
        if let Some(given) = self.holdout_bp.filter(|bp| *bp != recorded.holdout_bp) {
            return Err(CampaignError::HoldoutChanged {
                id: id.to_string(),
                recorded: percent(recorded.holdout_bp),
                given: percent(given),
            });
        }
        if self.cap_exempt.is_some_and(|e| e != recorded.cap_exempt) {
            return Err(CampaignError::CapExemptChanged {
                id: id.to_string(),
                recorded: if recorded.cap_exempt {
                    "exempt"
                } else {
                    "not exempt"
                }
                .into(),
            });
        }
        let moved = self
            .deadline_ms
            .filter(|d| Some(*d) != recorded.deadline_ms)
            .map(|d| CampaignGuardrails {
                deadline_ms: Some(d),
                ..recorded
            });
        let now = moved.unwrap_or(recorded);
        if now.expired(now_ms) {
            return Err(CampaignError::PastDeadline {
                id: id.to_string(),
                deadline: now
                    .deadline_ms
                    .and_then(|d| OffsetDateTime::from_unix_timestamp(d / 1000).ok())
                    .map(rfc3339)
                    .unwrap_or_default(),
            });
        }
        Ok(moved)
    }
}

/// The holdout's basis points from a percentage as an operator writes it ("10", "2.5").
/// At most 50 %: a holdout larger than the group sent to measures nothing better.
pub fn holdout_bp(raw: &str) -> Result<u32, GuardrailError> {
    let bad = || GuardrailError::Holdout(super::quoted(raw));
    let (whole, frac) = raw.trim().split_once('.').unwrap_or((raw.trim(), ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 2 || frac.len() > 2 || !digits(whole) || !digits(frac) {
        return Err(bad());
    }
    let frac_bp: u32 = format!("{frac:0<2}").parse().map_err(|_| bad())?;
    let bp = whole.parse::<u32>().map_err(|_| bad())? * 100 + frac_bp;
    if bp > 5000 {
        return Err(bad());
    }
    Ok(bp)
}

/// Whether the user is in the campaign's holdout group: the first 8 bytes of SHA-256 of
/// (campaign, user), so the same person stays out on every run and resend, and each
/// campaign draws its own group.
pub fn held_out(campaign_id: &str, user_id: &str, holdout_bp: u32) -> bool {
    if holdout_bp == 0 {
        return false;
    }
    let digest = Sha256::new()
        .chain_update(campaign_id.as_bytes())
        .chain_update([0u8])
        .chain_update(user_id.as_bytes())
        .finalize();
    let draw = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")) % 10_000;
    draw < u64::from(holdout_bp)
}

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The span one rule counts over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapWindow {
    /// The last this many milliseconds.
    Rolling(i64),
    /// Today and the days before, up to this many, in the user's zone.
    CalendarDays(u32),
}

/// "At most `limit` emails per window", over every topic or the named ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapRule {
    pub limit: u32,
    pub window: CapWindow,
    /// Empty: every topic.
    pub topics: Vec<TopicId>,
    /// As declared (what the logs and docs say).
    pub text: String,
}

impl CapRule {
    fn parse(raw: &str) -> Result<Self, GuardrailError> {
        let bad = || GuardrailError::Cap(super::quoted(raw));
        let (rule, topics) = raw.split_once(':').unwrap_or((raw, ""));
        let (limit, span) = rule.split_once('/').ok_or_else(bad)?;
        let limit: u32 = limit.parse().map_err(|_| bad())?;
        let unit_at = span.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (count, unit) = span.split_at(unit_at);
        let count: i64 = count.parse().map_err(|_| bad())?;
        if limit == 0 || count == 0 || count > 90 * 24 {
            return Err(bad());
        }
        let window = match unit {
            "h" => CapWindow::Rolling(count * HOUR_MS),
            "d" if count <= 90 => CapWindow::Rolling(count * DAY_MS),
            "cd" if count <= 90 => CapWindow::CalendarDays(count as u32),
            _ => return Err(bad()),
        };
        let topics = topics
            .split('+')
            .filter(|t| !t.is_empty())
            .map(|t| {
                let id = TopicId::parse(t).map_err(|_| bad())?;
                match super::topics::Topics::builtin().find(&id) {
                    Some(_) => Ok(id),
                    None => Err(GuardrailError::CapTopic {
                        rule: raw.to_owned(),
                        topic: t.to_owned(),
                    }),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            limit,
            window,
            topics,
            text: raw.to_owned(),
        })
    }

    fn covers(&self, topic: &str) -> bool {
        self.topics.is_empty() || self.topics.iter().any(|t| t.as_str() == topic)
    }

    /// How far back its window may reach (what a user's history must keep).
    fn reach_ms(&self) -> i64 {
        match self.window {
            CapWindow::Rolling(ms) => ms,
            // A day can be 25 hours long, and zones are up to 14 hours ahead.
            CapWindow::CalendarDays(days) => i64::from(days + 1) * DAY_MS,
        }
    }
}

/// One email that counts towards the caps: a campaign's, to one user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapEntry {
    #[serde(rename = "c")]
    pub campaign: String,
    #[serde(rename = "t")]
    pub topic: String,
    #[serde(rename = "at")]
    pub at_ms: i64,
}

/// A user's emails that count towards the caps (the sends table's `#caps` item), with the
/// version every write is conditioned on: two campaigns that read the same version cannot
/// both add to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapHistory {
    pub version: u64,
    pub entries: Vec<CapEntry>,
}

/// What the caps say about one more email.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapCheck {
    /// This campaign's email is counted already (an earlier attempt reserved it).
    Counted,
    /// It may go: the history with it added (and what no rule reaches any more dropped).
    Allowed(CapHistory),
    /// This rule is reached.
    Capped(String),
}

/// The stack's frequency caps (`FREQUENCY_CAPS`) and the topics exempt from them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrequencyCaps {
    pub rules: Vec<CapRule>,
    pub exempt_topics: Vec<TopicId>,
}

impl FrequencyCaps {
    /// `rules`: comma-separated, e.g. "1/16h, 3/7d:digest"; `exempt`: topic ids.
    pub fn parse(rules: &str, exempt: &str) -> Result<Self, GuardrailError> {
        let rules = rules
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(CapRule::parse)
            .collect::<Result<_, _>>()?;
        let exempt_topics = exempt
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                TopicId::parse(t).map_err(|_| GuardrailError::CapTopic {
                    rule: "FREQUENCY_CAP_EXEMPT_TOPICS".into(),
                    topic: t.to_owned(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            rules,
            exempt_topics,
        })
    }

    /// Whether an email of this topic is capped and counted at all.
    pub fn apply_to(&self, topic: &str, guardrails: &CampaignGuardrails) -> bool {
        !guardrails.cap_exempt
            && !self.exempt_topics.iter().any(|t| t.as_str() == topic)
            && self.rules.iter().any(|r| r.covers(topic))
    }

    /// Whether one more email of `campaign` (of `topic`) may go to a user at `now_ms`, whose
    /// zone is `tz` (calendar days are theirs).
    pub fn check(
        &self,
        history: &CapHistory,
        campaign: &str,
        topic: &str,
        now_ms: i64,
        tz: &TimeZone,
    ) -> CapCheck {
        if history.entries.iter().any(|e| e.campaign == campaign) {
            return CapCheck::Counted;
        }
        let reach = self.rules.iter().map(CapRule::reach_ms).max().unwrap_or(0);
        let kept: Vec<CapEntry> = history
            .entries
            .iter()
            .filter(|e| e.at_ms > now_ms - reach)
            .cloned()
            .collect();
        let today = local_date(now_ms, tz);
        for rule in self.rules.iter().filter(|r| r.covers(topic)) {
            let counted = kept
                .iter()
                .filter(|e| rule.covers(&e.topic))
                .filter(|e| match rule.window {
                    CapWindow::Rolling(ms) => e.at_ms > now_ms - ms,
                    CapWindow::CalendarDays(days) => {
                        let first = today
                            .checked_sub(jiff::Span::new().days(i64::from(days) - 1))
                            .unwrap_or(today);
                        local_date(e.at_ms, tz) >= first
                    }
                })
                .count();
            if counted >= rule.limit as usize {
                return CapCheck::Capped(rule.text.clone());
            }
        }
        let mut entries = kept;
        entries.push(CapEntry {
            campaign: campaign.to_owned(),
            topic: topic.to_owned(),
            at_ms: now_ms,
        });
        CapCheck::Allowed(CapHistory {
            version: history.version,
            entries,
        })
    }

    /// How long a user's history must be kept (its item's expiry).
    pub fn reach_ms(&self) -> i64 {
        self.rules.iter().map(CapRule::reach_ms).max().unwrap_or(0)
    }
}

fn local_date(ms: i64, tz: &TimeZone) -> jiff::civil::Date {
    let at = Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH);
    tz.to_datetime(at).date()
}

/// What happens to an email due inside the user's quiet hours.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuietPolicy {
    /// Held until the quiet hours end: in the waiting room for that instant, by GetUsers, or
    /// by SendEmail when a backlog carried the email into them.
    #[default]
    Defer,
    /// Not sent: recorded SKIPPED, quiet_hours.
    Skip,
}

impl std::str::FromStr for QuietPolicy {
    type Err = GuardrailError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "defer" => Ok(Self::Defer),
            "skip" => Ok(Self::Skip),
            other => Err(GuardrailError::QuietPolicy(super::quoted(other))),
        }
    }
}

/// Quiet hours in the user's zone, e.g. 21:00-08:00 (`QUIET_HOURS`): no email starts inside
/// them. Users without a usable zone are in the fallback zone (`FALLBACK_TIME_ZONE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuietHours {
    pub start: LocalTime,
    pub end: LocalTime,
    pub policy: QuietPolicy,
}

impl QuietHours {
    /// How long they last (an hour more for a DST change inside them).
    pub fn length_ms(&self) -> i64 {
        let minutes = (self.end.minutes() - self.start.minutes()).rem_euclid(24 * 60);
        i64::from(minutes + 60) * 60_000
    }

    pub fn parse(raw: &str, policy: QuietPolicy) -> Result<Self, GuardrailError> {
        let bad = || GuardrailError::Quiet(super::quoted(raw));
        let (start, end) = raw.trim().split_once('-').ok_or_else(bad)?;
        let (start, end): (LocalTime, LocalTime) = (
            start.trim().parse().map_err(|_| bad())?,
            end.trim().parse().map_err(|_| bad())?,
        );
        if start == end {
            return Err(bad());
        }
        Ok(Self { start, end, policy })
    }

    /// When the quiet hours around `now_ms` end in `tz`, or None when it is not quiet there.
    pub fn quiet_until(&self, now_ms: i64, tz: &TimeZone) -> Option<i64> {
        let at = Timestamp::from_millisecond(now_ms).ok()?;
        let local = tz.to_datetime(at);
        let minute = i32::from(local.hour()) * 60 + i32::from(local.minute());
        let (start, end) = (self.start.minutes(), self.end.minutes());
        let end_day = if start < end {
            // Within one day: 01:00-06:00.
            if minute < start || minute >= end {
                return None;
            }
            local.date()
        } else if minute >= start {
            // Over midnight, before it: ends tomorrow.
            local.date().tomorrow().ok()?
        } else if minute < end {
            local.date()
        } else {
            return None;
        };
        let until = instant_of(tz, end_day, self.end);
        // A DST gap can put the end's instant at or before now: then it has ended.
        (until > now_ms).then_some(until)
    }
}

impl std::fmt::Display for QuietHours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

#[cfg(test)]
mod tests;

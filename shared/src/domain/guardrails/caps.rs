//! Frequency caps across campaigns: the rules (`FREQUENCY_CAPS`), each user's history of
//! emails counted, and whether one more may go.

use super::{CampaignGuardrails, GuardrailError};
use crate::domain::topics::TopicId;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

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
        let bad = || GuardrailError::Cap(crate::domain::quoted(raw));
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
                match crate::domain::topics::Topics::builtin().find(&id) {
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

//! The guardrails beyond exactly once, as Amazon Pinpoint's campaigns had them
//! (docs/pinpoint.md): a campaign's deadline and holdout group, frequency caps across
//! campaigns (`caps`), and quiet hours in the user's zone (`quiet`). Pure: SendEmail applies them under its
//! claim (`stages::send_email::guard`), GetUsers defers users in their quiet hours.

use super::campaign::{rfc3339, CampaignError, CampaignId};
use super::local_time::LocalTimeError;
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

mod caps;
mod quiet;

pub use caps::{CapCheck, CapEntry, CapHistory, CapRule, CapWindow, FrequencyCaps};
pub use quiet::{QuietHours, QuietPolicy};

#[cfg(test)]
mod tests;

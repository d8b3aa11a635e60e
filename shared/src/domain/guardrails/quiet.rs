//! Quiet hours in the user's zone (`QUIET_HOURS`, `QUIET_HOURS_POLICY`): when they end,
//! and what happens to an email due inside them.

use super::GuardrailError;
use crate::domain::local_time::{instant_of, LocalTime};
use jiff::tz::TimeZone;
use jiff::Timestamp;

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
            other => Err(GuardrailError::QuietPolicy(crate::domain::quoted(other))),
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
        let bad = || GuardrailError::Quiet(crate::domain::quoted(raw));
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

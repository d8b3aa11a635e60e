use super::*;
use jiff::tz::TimeZone;
use jiff::Timestamp;

const HOUR_MS: i64 = 3_600_000;

fn ms(rfc3339: &str) -> i64 {
    rfc3339.parse::<Timestamp>().unwrap().as_millisecond()
}

fn tz(name: &str) -> TimeZone {
    jiff::tz::db().get(name).unwrap()
}

#[test]
fn holdout_percentages_parse_to_basis_points_and_refuse_the_rest() {
    assert_eq!(holdout_bp("10"), Ok(1000));
    assert_eq!(holdout_bp("2.5"), Ok(250));
    assert_eq!(holdout_bp("0.01"), Ok(1));
    assert_eq!(holdout_bp("50"), Ok(5000));
    for bad in ["", "50.01", "100", "-1", "1e2", "2.555", "ten", ".5"] {
        let err = holdout_bp(bad).unwrap_err().to_string();
        assert!(err.contains("0 to 50"), "{bad}: {err}");
    }
}

#[test]
fn holdout_is_stable_per_campaign_and_near_its_share() {
    let users: Vec<String> = (0..100_000).map(|i| format!("u{i:07}")).collect();
    let out: Vec<&String> = users
        .iter()
        .filter(|u| held_out("weekly-2026-W47", u, 1000))
        .collect();
    // 10 % of 100,000: three standard deviations are 285.
    assert!((9_715..=10_285).contains(&out.len()), "{}", out.len());
    // The same people on a re-run; another campaign draws another group.
    assert!(out.iter().all(|u| held_out("weekly-2026-W47", u, 1000)));
    let other = users
        .iter()
        .filter(|u| held_out("weekly-2026-W48", u, 1000))
        .filter(|u| held_out("weekly-2026-W47", u, 1000))
        .count();
    assert!((800..=1_200).contains(&other), "overlap {other}");
    assert!(!users.iter().any(|u| held_out("c", u, 0)));
}

#[test]
fn cap_rules_parse_and_refuse_with_the_rule_named() {
    let caps = FrequencyCaps::parse("1/16h, 3/7d, 2/1cd:digest+product-news", "tips").unwrap();
    assert_eq!(caps.rules.len(), 3);
    assert_eq!(caps.rules[0].window, CapWindow::Rolling(16 * HOUR_MS));
    assert_eq!(caps.rules[2].window, CapWindow::CalendarDays(1));
    assert_eq!(caps.rules[2].topics.len(), 2);
    for bad in ["1", "0/1d", "1/0d", "1/7w", "x/1d", "1/91d", "1/d"] {
        let err = FrequencyCaps::parse(bad, "").unwrap_err().to_string();
        assert!(err.contains("1/16h"), "{bad}: {err}");
    }
    let err = FrequencyCaps::parse("1/1d:nope", "")
        .unwrap_err()
        .to_string();
    assert!(err.contains("topic nope"), "{err}");
    assert_eq!(FrequencyCaps::parse(" ", "").unwrap().rules, vec![]);
}

fn entry(campaign: &str, topic: &str, at: &str) -> CapEntry {
    CapEntry {
        campaign: campaign.into(),
        topic: topic.into(),
        at_ms: ms(at),
    }
}

#[test]
fn a_rolling_cap_counts_the_window_and_drops_what_no_rule_reaches() {
    let caps = FrequencyCaps::parse("1/16h", "").unwrap();
    let utc = TimeZone::UTC;
    let history = CapHistory {
        version: 4,
        entries: vec![
            entry("old", "digest", "2026-11-01T00:00:00Z"),
            entry("a", "digest", "2026-11-23T00:00:00Z"),
        ],
    };
    // 15 hours later: capped; 16 hours later: allowed, and "old" and "a" are dropped.
    let at = ms("2026-11-23T15:00:00Z");
    assert_eq!(
        caps.check(&history, "b", "digest", at, &utc),
        CapCheck::Capped("1/16h".into())
    );
    let at = ms("2026-11-23T16:00:00Z");
    let CapCheck::Allowed(next) = caps.check(&history, "b", "digest", at, &utc) else {
        panic!("allowed")
    };
    assert_eq!(next.version, 4);
    assert_eq!(
        next.entries,
        vec![entry("b", "digest", "2026-11-23T16:00:00Z")]
    );
    // The campaign already counted (an earlier attempt of it) is not counted twice.
    assert_eq!(
        caps.check(&history, "a", "digest", at, &utc),
        CapCheck::Counted
    );
}

#[test]
fn calendar_days_are_the_users_own() {
    let caps = FrequencyCaps::parse("1/1cd", "").unwrap();
    // Sent at 23:00 UTC on the 23rd, which is the 24th 08:00 in Tokyo.
    let history = CapHistory {
        version: 1,
        entries: vec![entry("a", "digest", "2026-11-23T23:00:00Z")],
    };
    let next_morning_utc = ms("2026-11-24T01:00:00Z");
    // In UTC it is a new day; in Tokyo (10:00 on the 24th) the same day.
    assert!(matches!(
        caps.check(&history, "b", "digest", next_morning_utc, &TimeZone::UTC),
        CapCheck::Allowed(_)
    ));
    assert_eq!(
        caps.check(&history, "b", "digest", next_morning_utc, &tz("Asia/Tokyo")),
        CapCheck::Capped("1/1cd".into())
    );
}

#[test]
fn topic_rules_and_exemptions() {
    let caps = FrequencyCaps::parse("1/7d:product-news", "tips").unwrap();
    let history = CapHistory {
        version: 1,
        entries: vec![entry("a", "digest", "2026-11-23T00:00:00Z")],
    };
    let at = ms("2026-11-23T01:00:00Z");
    // A digest does not count towards the product-news rule.
    assert!(matches!(
        caps.check(&history, "b", "product-news", at, &TimeZone::UTC),
        CapCheck::Allowed(_)
    ));
    let none = CampaignGuardrails::default();
    assert!(caps.apply_to("product-news", &none));
    assert!(!caps.apply_to("digest", &none), "no rule covers it");
    let exempt = CampaignGuardrails {
        cap_exempt: true,
        ..none
    };
    assert!(!caps.apply_to("product-news", &exempt));
    let all = FrequencyCaps::parse("1/7d", "tips").unwrap();
    assert!(!all.apply_to("tips", &none), "an exempt topic");
}

#[test]
fn quiet_hours_over_midnight_and_within_a_day() {
    let quiet = QuietHours::parse("21:00-08:00", QuietPolicy::Defer).unwrap();
    let berlin = tz("Europe/Berlin");
    // 22:30 in Berlin (UTC+1 in November): quiet until 08:00 the next morning.
    assert_eq!(
        quiet.quiet_until(ms("2026-11-23T21:30:00Z"), &berlin),
        Some(ms("2026-11-24T07:00:00Z"))
    );
    // 03:00: until 08:00 the same day; 08:00 and 20:59 are not quiet.
    assert_eq!(
        quiet.quiet_until(ms("2026-11-24T02:00:00Z"), &berlin),
        Some(ms("2026-11-24T07:00:00Z"))
    );
    assert_eq!(quiet.quiet_until(ms("2026-11-24T07:00:00Z"), &berlin), None);
    assert_eq!(quiet.quiet_until(ms("2026-11-24T19:59:00Z"), &berlin), None);
    let day = QuietHours::parse("01:00-06:00", QuietPolicy::Skip).unwrap();
    assert_eq!(
        day.quiet_until(ms("2026-11-24T02:00:00Z"), &TimeZone::UTC),
        Some(ms("2026-11-24T06:00:00Z"))
    );
    assert_eq!(
        day.quiet_until(ms("2026-11-24T06:00:00Z"), &TimeZone::UTC),
        None
    );
    for bad in ["21:00", "21:00-21:00", "9-8", "21:00-24:00"] {
        assert!(QuietHours::parse(bad, QuietPolicy::Defer).is_err(), "{bad}");
    }
    assert!("later".parse::<QuietPolicy>().is_err());
}

#[test]
fn quiet_hours_end_by_the_dst_rules() {
    // 2027-03-28, Berlin springs forward 02:00 -> 03:00: quiet 22:00-02:30 ends at the
    // first instant after the gap, 03:00 CEST = 01:00 UTC.
    let quiet = QuietHours::parse("22:00-02:30", QuietPolicy::Defer).unwrap();
    assert_eq!(
        quiet.quiet_until(ms("2027-03-27T23:00:00Z"), &tz("Europe/Berlin")),
        Some(ms("2027-03-28T01:00:00Z"))
    );
}

#[test]
fn a_deadline_expires_at_its_instant() {
    let g = CampaignGuardrails {
        deadline_ms: Some(1_000),
        ..Default::default()
    };
    assert!(!g.expired(999));
    assert!(g.expired(1_000));
    assert!(!CampaignGuardrails::default().expired(i64::MAX));
    assert_eq!(Skip::parse("frequency_cap"), Some(Skip::FrequencyCap));
    assert!(!Skip::HeldOut.reconsidered());
}

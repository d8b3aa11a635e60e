use super::*;

#[test]
fn the_rest_is_judged_when_it_gets_the_winner_not_at_the_start() {
    use mailflow::domain::guardrails::QuietHours;
    use mailflow::domain::local_time::{
        parse_date, zone, LocalTime, PassedTime, ZoneField, ZoneName,
    };
    let at = |raw: &str| {
        time::OffsetDateTime::parse(raw, &time::format_description::well_known::Rfc3339)
            .unwrap()
            .unix_timestamp()
            * 1000
    };
    let now = at("2026-12-01T12:00:00Z");
    let experiment = |wait: u32| {
        Experiment::parse(&format!(
            r#"{{"variants": [{{"name": "a"}}, {{"name": "b"}}], "testPercent": 20, "waitHours": {wait}}}"#
        ))
        .unwrap()
    };
    // Without local time: the decision 10 hours after the start, in quiet hours that are
    // not on at the start. The rest is judged then; the test group now.
    let quiet = QuietHours::parse("21:00-08:00", QuietPolicy::Defer).unwrap();
    let utc = zone("UTC").unwrap();
    let decision = decision_time(&experiment(10), None, 0, now);
    assert_eq!(decision, at("2026-12-01T22:00:00Z"));
    assert_eq!(goes_at(now, None, Some(decision)), Some((decision, false)));
    assert_eq!(goes_at(now, None, None), Some((now, false)));
    assert!(quiet.quiet_until(decision, &utc).is_some());
    assert!(quiet.quiet_until(now, &utc).is_none());
    // Quiet hours that defer hold the test group up to their length: the wait starts then.
    assert_eq!(
        decision_time(&experiment(10), None, quiet.length_ms(), now),
        decision + quiet.length_ms()
    );
    // A recorded decision is the one.
    let recorded = experiment(10).starting_at(now - 3_600_000);
    assert_eq!(
        decision_time(&recorded, None, 0, now),
        at("2026-12-01T21:00:00Z")
    );
    // With local time and passedTime skip: Tokyo's 09:00 has passed at noon UTC, so the
    // test group there is skipped, but the rest gets the winner at Tokyo's 09:00 after the
    // decision (3 hours after UTC-12's 09:00, 21:00 UTC).
    let delivery = LocalDelivery {
        local_time: "09:00".parse::<LocalTime>().unwrap(),
        send_date: parse_date("2026-12-01").unwrap(),
        fallback_zone: ZoneName::parse("Asia/Tokyo").unwrap(),
        passed_time: PassedTime::Skip,
        started_at_ms: now,
        window_until_ms: None,
    };
    let tokyo = ZoneField::Text("Asia/Tokyo".into());
    let decided = delivery.delivery(&tokyo).0;
    assert_eq!(decided, Delivery::Skip);
    assert_eq!(goes_at(now, Some(decided), None), None);
    let decision = decision_time(&experiment(3), Some(&delivery), 0, now);
    assert_eq!(decision, at("2026-12-02T00:00:00Z"));
    let tz = delivery.zone_for(&tokyo).0;
    let rest_at = Experiment::rest_goes_at(decision, Some(&delivery), &tz);
    assert_eq!(
        goes_at(now, Some(decided), Some(rest_at)),
        Some((at("2026-12-02T00:00:00Z"), true))
    );
}

use super::*;
use mailflow::domain::guardrails::{CampaignGuardrails, FrequencyCaps, QuietPolicy};
use mailflow::domain::local_time::{parse_date, LocalTime, PassedTime, ZoneField, ZoneName};
use mailflow::domain::user_id::UserId;

mod agreement;

fn at(raw: &str) -> i64 {
    time::OffsetDateTime::parse(raw, &time::format_description::well_known::Rfc3339)
        .unwrap()
        .unix_timestamp()
        * 1000
}

fn experiment(wait: u32) -> Experiment {
    Experiment::parse(&format!(
        r#"{{"variants": [{{"name": "a"}}, {{"name": "b"}}], "testPercent": 20, "waitHours": {wait}}}"#
    ))
    .unwrap()
}

fn guardrails(experiment: Experiment, fallback: &str) -> Guardrails<()> {
    Guardrails {
        campaign: CampaignGuardrails::default(),
        caps: FrequencyCaps::default(),
        quiet: None,
        fallback_zone: ZoneName::parse(fallback).unwrap(),
        history: (),
        experiment: Some(experiment),
    }
}

/// The first user of the campaign in the test group (`rest` false) or the rest.
fn member_of(campaign: &Campaign, e: &Experiment, rest: bool, zone: &str) -> AudienceMember {
    let id = (0..)
        .map(|i| format!("user-{i}"))
        .find(|id| (e.assign(campaign.id.as_str(), id) == Assignment::Rest) == rest)
        .unwrap();
    AudienceMember {
        id: UserId::parse(&id).unwrap(),
        zone: ZoneField::Text(zone.into()),
    }
}

#[test]
fn the_rest_is_judged_when_it_gets_the_winner_not_at_the_start() {
    let now = at("2026-12-01T12:00:00Z");
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    // Without local time: the decision 10 hours after the start, in quiet hours that are
    // not on at the start. The rest is judged then; the test group now.
    let quiet = QuietHours::parse("21:00-08:00", QuietPolicy::Defer).unwrap();
    let utc = mailflow::domain::local_time::zone("UTC").unwrap();
    let decision = decision_time(&experiment(10), None, None, now);
    assert_eq!(decision, at("2026-12-01T22:00:00Z"));
    let g = guardrails(experiment(10), "UTC");
    let predict = Prediction::new(&campaign, None, &g, now);
    let rest = predict.of(&member_of(&campaign, &experiment(10), true, "UTC"), now);
    assert_eq!(
        (rest.place, rest.goes_at(now)),
        (Place::Slot(decision), Some(decision))
    );
    let test = predict.of(&member_of(&campaign, &experiment(10), false, "UTC"), now);
    assert_eq!(test.goes_at(now), Some(now));
    assert!(quiet.quiet_until(decision, &utc).is_some());
    assert!(quiet.quiet_until(now, &utc).is_none());
    // Quiet hours that defer hold the test group up to their length: the wait starts then.
    assert_eq!(
        decision_time(&experiment(10), None, Some(quiet), now),
        decision + quiet.length_ms()
    );
    // A recorded decision is the one.
    let recorded = experiment(10).starting_at(now - 3_600_000);
    assert_eq!(
        decision_time(&recorded, None, None, now),
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
    let decision = decision_time(&experiment(3), Some(&delivery), None, now);
    assert_eq!(decision, at("2026-12-02T00:00:00Z"));
    let g = guardrails(experiment(3), "Asia/Tokyo");
    let predict = Prediction::new(&campaign, Some(&delivery), &g, now);
    let test = predict.of(
        &member_of(&campaign, &experiment(3), false, "Asia/Tokyo"),
        now,
    );
    assert_eq!((test.place, test.goes_at(now)), (Place::Never, None));
    let rest = predict.of(
        &member_of(&campaign, &experiment(3), true, "Asia/Tokyo"),
        now,
    );
    assert_eq!(rest.goes_at(now), Some(at("2026-12-02T00:00:00Z")));
}

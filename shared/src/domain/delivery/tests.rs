use super::*;
use crate::domain::local_time::{instant_of, LocalTime, PassedTime};

const NOW: i64 = 1_796_113_200_000; // 2026-12-01T08:20:00Z

fn local(passed: PassedTime) -> LocalDelivery {
    LocalDelivery {
        local_time: "09:00".parse().unwrap(),
        send_date: "2026-12-01".parse().unwrap(),
        fallback_zone: ZoneName::parse("UTC").unwrap(),
        passed_time: passed,
        started_at_ms: NOW,
        window_until_ms: None,
    }
}

fn zone(name: &str) -> ZoneField {
    ZoneField::Text(name.to_owned())
}

fn nine_in(name: &str) -> i64 {
    let tz = crate::domain::local_time::zone(name).unwrap();
    let nine: LocalTime = "09:00".parse().unwrap();
    instant_of(&tz, "2026-12-01".parse().unwrap(), nine)
}

fn decide_for(rules: &Rules, zone: &ZoneField, rest_until_ms: Option<i64>) -> Decision {
    let user = Recipient {
        campaign_id: "c",
        user_id: "u1",
        zone,
        rest_until_ms,
    };
    decide(rules, &user, NOW)
}

fn rules<'a>(local: Option<&'a LocalDelivery>, fallback: &'a ZoneName) -> Rules<'a> {
    Rules {
        local_time: local,
        quiet_hours: None,
        fallback_zone: fallback,
        holdout_bp: 0,
    }
}

#[test]
fn without_rules_everyone_goes_now_in_their_own_zone() {
    let utc = ZoneName::parse("UTC").unwrap();
    let d = decide_for(&rules(None, &utc), &zone("Asia/Tokyo"), None);
    assert_eq!(d.place, Place::Now { slot_late_ms: None });
    assert_eq!(d.zone_name.as_deref(), Some("Asia/Tokyo"));
    assert!(d.sent());
    let d = decide_for(&rules(None, &utc), &ZoneField::Missing, None);
    assert_eq!(d.zone_name, None, "no zone of their own to carry");
}

#[test]
fn local_time_places_each_zone_at_its_instant_and_counts_it() {
    let utc = ZoneName::parse("UTC").unwrap();
    let l = local(PassedTime::Skip);
    let r = rules(Some(&l), &utc);
    let mut counts = LocalTimeCounts::default();
    // 09:00 in London is 40 minutes away: held for its slot.
    let london = decide_for(&r, &zone("Europe/London"), None);
    assert_eq!(london.place, Place::Slot(nine_in("Europe/London")));
    london.count(&mut counts);
    // 09:00 in Tokyo passed hours ago: skipped by the policy.
    let tokyo = decide_for(&r, &zone("Asia/Tokyo"), None);
    assert_eq!(tokyo.place, Place::Never);
    assert!(!tokyo.sent());
    tokyo.count(&mut counts);
    // No zone: the fallback's (UTC), counted as missing.
    decide_for(&r, &ZoneField::Missing, None).count(&mut counts);
    assert_eq!(counts.passed_skipped, 1);
    assert_eq!(counts.timezone_missing, 1);
    assert_eq!(counts.waiting.values().sum::<u64>(), 2);
}

#[test]
fn an_instant_within_fifteen_minutes_is_delayed_and_one_just_passed_is_on_time() {
    let utc = ZoneName::parse("UTC").unwrap();
    let l = LocalDelivery {
        started_at_ms: nine_in("UTC") - 10 * 60_000,
        ..local(PassedTime::Skip)
    };
    let user = Recipient {
        campaign_id: "c",
        user_id: "u1",
        zone: &ZoneField::Missing,
        rest_until_ms: None,
    };
    let at = nine_in("UTC");
    let d = decide(&rules(Some(&l), &utc), &user, at - 10 * 60_000);
    assert_eq!(d.place, Place::Delayed(at));
    let d = decide(&rules(Some(&l), &utc), &user, at + 3_000);
    assert_eq!(
        d.place,
        Place::Now {
            slot_late_ms: Some(3_000)
        }
    );
}

#[test]
fn quiet_hours_that_defer_move_the_user_to_their_end_and_skip_ones_only_say_so() {
    let utc = ZoneName::parse("UTC").unwrap();
    let mut r = rules(None, &utc);
    // 08:20 UTC is inside 21:00-09:00.
    r.quiet_hours = Some(QuietHours::parse("21:00-09:00", QuietPolicy::Defer).unwrap());
    let d = decide_for(&r, &zone("UTC"), None);
    assert_eq!(d.quiet, Some(Quiet::Deferred(nine_in("UTC"))));
    assert_eq!(d.place, Place::Slot(nine_in("UTC")));
    r.quiet_hours = Some(QuietHours::parse("21:00-09:00", QuietPolicy::Skip).unwrap());
    let d = decide_for(&r, &zone("UTC"), None);
    assert_eq!(d.quiet, Some(Quiet::Skipped));
    assert_eq!(
        d.place,
        Place::Now { slot_late_ms: None },
        "SendEmail records it"
    );
    assert!(!d.sent());
}

#[test]
fn the_rest_of_an_experiment_waits_in_the_waiting_room_for_the_decision() {
    let utc = ZoneName::parse("UTC").unwrap();
    let decide_at = NOW + 60_000;
    let mut counts = LocalTimeCounts::default();
    let d = decide_for(&rules(None, &utc), &zone("UTC"), Some(decide_at));
    assert_eq!(d.place, Place::Slot(decide_at), "held even when near");
    d.count(&mut counts);
    assert_eq!(counts.experiment_held, 1);
    // With local time and a passed zone: their local time after the decision, not skipped
    // and not counted as passed.
    let l = local(PassedTime::Skip);
    let d = decide_for(&rules(Some(&l), &utc), &zone("Asia/Tokyo"), Some(decide_at));
    assert!(matches!(d.place, Place::Slot(at) if at > decide_at));
    assert_eq!(d.passed, None);
}

#[test]
fn the_holdout_is_decided_by_the_same_draw_sendemail_records() {
    let utc = ZoneName::parse("UTC").unwrap();
    let mut r = rules(None, &utc);
    r.holdout_bp = 5_000;
    let held = (0..200)
        .filter(|i| {
            let id = format!("user-{i}");
            let user = Recipient {
                campaign_id: "c",
                user_id: &id,
                zone: &ZoneField::Missing,
                rest_until_ms: None,
            };
            let d = decide(&r, &user, NOW);
            assert_eq!(d.held_out, held_out("c", &id, 5_000));
            d.held_out
        })
        .count();
    assert!((60..140).contains(&held), "{held} of 200 held out at 50 %");
}

#[test]
fn the_test_group_goes_in_its_variant_and_the_rest_with_the_winner_or_waits() {
    let experiment: Experiment = serde_json::from_value(serde_json::json!({
        "variants": [{"name": "a"}, {"name": "b"}],
        "testPercent": 20,
        "waitHours": 4
    }))
    .unwrap();
    let waiting = ExperimentView {
        experiment: &experiment,
        winner: None,
        decide_at_ms: Some(NOW),
    };
    let decided = ExperimentView {
        winner: Some("b"),
        ..waiting.clone()
    };
    for i in 0..100 {
        let id = format!("user-{i}");
        match experiment.assign("c", &id) {
            Assignment::Test(v) => {
                let name = experiment.variants[v].name.clone();
                assert_eq!(waiting.group("c", &id), (Some(name), None));
            }
            Assignment::Rest => {
                assert_eq!(waiting.group("c", &id), (None, Some(NOW)));
                assert_eq!(decided.group("c", &id), (Some("b".into()), None));
            }
        }
    }
    assert!(waiting.awaits_decision(NOW));
    assert!(!decided.awaits_decision(NOW));
}

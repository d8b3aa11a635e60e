//! GetUsers' A/B half over the in-memory ports: the test group in its variants, the rest
//! held for the decision (made at its instant, mid-segment, or by hand), the wait dated from
//! the test group's last email and its local times, and the starts an experiment refuses.

use super::*;

#[tokio::test]
async fn an_experiment_sends_the_test_group_its_variants_and_the_rest_the_winner_after_the_wait() {
    let results = Arc::new(MemoryResults::default());
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let clock = Arc::new(TestClock(now.into()));
    let stage = stage_with_results(crowd(), "20", &[], results.clone()).with_clock(clock.clone());
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50,
                            "waitHours": 2, "minDelivered": 3, "minPeople": 5});
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment});
    stage.handle(start.clone(), &plenty()).await.unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    let decide_at = recorded.decide_at_ms.unwrap();
    assert_eq!(decide_at, (now + 2 * 3_600_000 + 999) / 1000 * 1000);
    // The test group now, each in their variant; the rest held for the decision's slot.
    let test = messages(&stage.users.bodies());
    let held = stage.waiting.held.lock().unwrap()[&("weekly-2026-W47".into(), decide_at)].clone();
    assert_eq!(test.len() + held.len(), 60);
    assert!(
        test.len() > 15 && held.len() > 15,
        "{} {}",
        test.len(),
        held.len()
    );
    for m in &test {
        let Assignment::Test(i) = recorded.assign("weekly-2026-W47", &m.user_id) else {
            panic!("{} is not in the test group", m.user_id);
        };
        assert_eq!(
            m.variant.as_deref(),
            Some(recorded.variants[i].name.as_str())
        );
    }
    for (user, body) in &held {
        assert_eq!(recorded.assign("weekly-2026-W47", user), Assignment::Rest);
        assert_eq!(messages(std::slice::from_ref(body))[0].variant, None);
    }
    // Another experiment on a later start is refused; so is one on a campaign started
    // without.
    let mut other = start.clone();
    other["experiment"]["testPercent"] = json!(30);
    let err = stage
        .handle(other, &plenty())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("started with another experiment"), "{err}");
    stage
        .handle(json!({"campaignId": "weekly-2026-W46"}), &plenty())
        .await
        .unwrap();
    let mut late = start.clone();
    late["campaignId"] = json!("weekly-2026-W46");
    let err = stage.handle(late, &plenty()).await.unwrap_err().to_string();
    assert!(err.contains("started without an experiment"), "{err}");
    // The same start again (a retry) is accepted and sends nobody twice... to the queue
    // (the ledger keeps the sends once).
    stage.handle(start, &plenty()).await.unwrap();
    // At the decision's slot, b clicked far more: the rest gets b.
    let tally = |delivered, human_clicks| crate::domain::experiment::Tally {
        sent: delivered,
        delivered,
        human_clicks,
        human_opens: 0,
        last_sent_ms: None,
    };
    results.0.lock().unwrap().insert(
        "weekly-2026-W47".into(),
        [
            ("a".to_string(), tally(20, 1)),
            ("b".to_string(), tally(20, 15)),
        ]
        .into(),
    );
    let before = stage.users.bodies().len();
    let release = Release {
        campaign_id: CampaignId::parse("weekly-2026-W47").unwrap(),
        slot_ms: decide_at,
        from: Default::default(),
        lanes: Vec::new(),
        released: 0,
        sweep: false,
        decision_waits_until_ms: None,
    };
    // Not before its time...
    let early = stage.release(release.clone(), &plenty()).await.unwrap();
    assert!(early.early && early.users_released == 0);
    clock
        .0
        .store(decide_at, std::sync::atomic::Ordering::SeqCst);
    let summary = stage.release(release, &plenty()).await.unwrap();
    assert_eq!(summary.users_released as usize, held.len());
    let rest = messages(&stage.users.bodies()[before..]);
    assert!(rest.iter().all(|m| m.variant.as_deref() == Some("b")));
    let decision = stage.campaigns.states().decisions.lock().unwrap()["weekly-2026-W47"].clone();
    assert_eq!(decision.winner, "b");
    assert_eq!(decision.by, crate::domain::experiment::DecidedBy::Rule);
    // A resend after the decision sends the rest the winner at once, holding nobody.
    let resend = json!({"campaignId": "weekly-2026-W47", "includeFailed": true});
    let before = stage.users.bodies().len();
    stage.handle(resend, &plenty()).await.unwrap();
    let again = messages(&stage.users.bodies()[before..]);
    assert_eq!(again.len(), 60);
    for m in again {
        let expected = match recorded.assign("weekly-2026-W47", &m.user_id) {
            Assignment::Test(i) => recorded.variants[i].name.clone(),
            Assignment::Rest => "b".into(),
        };
        assert_eq!(m.variant, Some(expected));
    }
}

/// A clock that moves on a millisecond at each reading, as a segment's clock does between
/// users.
struct Ticking(std::sync::atomic::AtomicI64);

impl Clock for Ticking {
    fn now_ms(&self) -> i64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_decision_instant_that_passes_during_a_segment_decides_then_and_holds_no_more() {
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let stage = stage_with(crowd(), "20", &[]).with_clock(Arc::new(TestClock(now.into())));
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 2});
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment});
    stage.handle(start, &plenty()).await.unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    let decide_at = recorded.decide_at_ms.unwrap();
    // A resend that starts just before the decision's instant and passes it after a few
    // users.
    let stage = stage.with_clock(Arc::new(Ticking((decide_at - 5).into())));
    let before = stage.users.bodies().len();
    let resend = json!({"campaignId": "weekly-2026-W47", "includeFailed": true});
    let Response::Run(summary) = stage.handle(resend, &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    assert!(summary.complete);
    let slots: BTreeSet<i64> = (stage.waiting.held.lock().unwrap().keys())
        .map(|(_, slot)| *slot)
        .collect();
    assert_eq!(
        slots,
        BTreeSet::from([decide_at]),
        "one slot, the decision's"
    );
    let decision = stage.campaigns.states().decisions.lock().unwrap()["weekly-2026-W47"].clone();
    let sent_rest: Vec<UserMessage> = messages(&stage.users.bodies()[before..])
        .into_iter()
        .filter(|m| recorded.assign("weekly-2026-W47", &m.user_id) == Assignment::Rest)
        .collect();
    assert!(sent_rest.len() > 30, "{}", sent_rest.len());
    assert!(sent_rest
        .iter()
        .all(|m| m.variant.as_deref() == Some(decision.winner.as_str())));
}

#[tokio::test]
async fn a_variant_picked_by_hand_releases_the_rest_before_the_wait_ends() {
    let results = Arc::new(MemoryResults::default());
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let stage =
        stage_with_results(crowd(), "20", &[], results).with_clock(Arc::new(TestClock(now.into())));
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 4});
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment}),
            &plenty(),
        )
        .await
        .unwrap();
    let id = CampaignId::parse("weekly-2026-W47").unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    let picked = crate::domain::experiment::decide(&recorded, &Default::default(), Some("b"), now);
    stage
        .campaigns
        .states()
        .record_decision(&id, &picked)
        .await
        .unwrap();
    let before = stage.users.bodies().len();
    let release = Release {
        campaign_id: id,
        slot_ms: recorded.decide_at_ms.unwrap(),
        from: Default::default(),
        lanes: Vec::new(),
        released: 0,
        sweep: false,
        decision_waits_until_ms: None,
    };
    let summary = stage.release(release, &plenty()).await.unwrap();
    assert!(!summary.early && summary.users_released > 30, "{summary:?}");
    let rest = messages(&stage.users.bodies()[before..]);
    assert!(rest.iter().all(|m| m.variant.as_deref() == Some("b")));
}

#[tokio::test]
async fn an_experiment_whose_deadline_comes_before_its_decision_is_refused() {
    let stage = stage_with(crowd(), "20", &[]);
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 6});
    let in_hours = |h: i64| rfc3339(time::OffsetDateTime::now_utc() + time::Duration::hours(h));
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                       "deadline": in_hours(3)});
    let err = stage
        .handle(start.clone(), &plenty())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("comes before the rest of its audience can be sent"),
        "{err}"
    );
    assert!(stage.users.bodies().is_empty(), "nothing enqueued");
    // A later deadline moves it, and the campaign starts.
    let mut later = start;
    later["deadline"] = json!(in_hours(30));
    stage.handle(later, &plenty()).await.unwrap();
    assert!(!stage.users.bodies().is_empty());
}

#[tokio::test]
async fn a_rest_that_cannot_be_sent_before_the_deadline_at_the_rate_is_warned_of() {
    // One email every 100 s: the rest (about 48 users) takes over an hour from the decision.
    let now = time::OffsetDateTime::now_utc();
    let clock = || {
        Arc::new(TestClock(
            ((now.unix_timestamp_nanos() / 1_000_000) as i64).into(),
        ))
    };
    let stage = stage_with(crowd(), "20", &[("SEND_RATE_PER_SECOND", "0.01")]).with_clock(clock());
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 2});
    // The decision two hours from now comes before a deadline 30.5 minutes later (the
    // decision rounded up and the deadline down to their seconds take up to 2 s of it): the
    // start is not refused, but the rest would go until well after it.
    let deadline = rfc3339(now + time::Duration::seconds(7200 + 1830));
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                       "deadline": deadline});
    let Response::Run(summary) = stage.handle(start, &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    let held = summary.local_time.unwrap().experiment_held;
    assert!(held > 30, "{held}");
    // About 30.5 minutes at 0.01/s send 18 of them.
    assert_eq!(summary.users_past_deadline, held - 18);
    // With the rate the rest needs, nothing is past it.
    let stage = stage_with(crowd(), "20", &[("SEND_RATE_PER_SECOND", "14")]).with_clock(clock());
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                       "deadline": deadline});
    let Response::Run(summary) = stage.handle(start, &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    assert_eq!(summary.users_past_deadline, 0);
}

#[tokio::test]
async fn with_local_time_the_wait_starts_after_the_last_zone_and_the_rest_goes_at_their_local_time()
{
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let stage = stage_with(crowd(), "20", &[("FALLBACK_TIME_ZONE", "Asia/Tokyo")])
        .with_clock(Arc::new(TestClock(now.into())));
    let tomorrow = (time::OffsetDateTime::now_utc() + time::Duration::days(1)).date();
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50,
                            "waitHours": 3});
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                   "localTime": "09:00", "sendDate": tomorrow.to_string()}),
            &plenty(),
        )
        .await
        .unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    // 09:00 tomorrow at UTC-12 is 21:00 UTC tomorrow; the decision 3 hours later.
    let last_zone = time::OffsetDateTime::new_utc(tomorrow, time::macros::time!(21:00));
    let decide_at = (last_zone.unix_timestamp() + 3 * 3600) * 1000;
    assert_eq!(recorded.decide_at_ms, Some(decide_at));
    // The rest waits for the first 09:00 in Tokyo at or after the decision (00:00 UTC the
    // day after tomorrow: the decision's instant itself); the test group for tomorrow's.
    let held = stage.waiting.held.lock().unwrap().clone();
    let tokyo_nine = |date: time::Date| {
        (time::OffsetDateTime::new_utc(date, time::macros::time!(00:00)).unix_timestamp()) * 1000
    };
    let test_slot = tokyo_nine(tomorrow);
    let rest_slot = tokyo_nine(tomorrow.next_day().unwrap());
    let slots: BTreeSet<i64> = held.keys().map(|(_, slot)| *slot).collect();
    assert_eq!(slots, BTreeSet::from([test_slot, rest_slot]), "{slots:?}");
    for ((_, slot), users) in &held {
        for user in users.keys() {
            let rest = recorded.assign("weekly-2026-W47", user) == Assignment::Rest;
            assert_eq!(rest, *slot == rest_slot, "{user} at {slot}");
        }
    }
}

#[tokio::test]
async fn with_passed_time_skip_the_rest_in_a_passed_zone_still_gets_the_winner_at_its_local_time() {
    // Noon UTC tomorrow: 09:00 in Tokyo (00:00 UTC) has passed, and the policy skips it.
    let tomorrow = (time::OffsetDateTime::now_utc() + time::Duration::days(1)).date();
    let utc = |date: time::Date, hour: u8| {
        time::OffsetDateTime::new_utc(date, time::Time::from_hms(hour, 0, 0).unwrap())
            .unix_timestamp()
            * 1000
    };
    let now = utc(tomorrow, 12);
    let stage = stage_with(crowd(), "20", &[("FALLBACK_TIME_ZONE", "Asia/Tokyo")])
        .with_clock(Arc::new(TestClock(now.into())));
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50,
                            "waitHours": 3});
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                   "localTime": "09:00", "sendDate": tomorrow.to_string(),
                   "passedTime": "skip"}),
            &plenty(),
        )
        .await
        .unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    // The test group in Tokyo is skipped (its 09:00 passed at the start); the decision comes
    // 3 hours after UTC-12's 09:00 (21:00 UTC), and the rest gets the winner at Tokyo's
    // next 09:00 after it, which nothing has passed.
    let decide_at = utc(tomorrow, 21) + 3 * 3_600_000;
    assert_eq!(recorded.decide_at_ms, Some(decide_at));
    let rest_slot = utc(tomorrow.next_day().unwrap(), 0);
    assert!(stage.users.bodies().is_empty(), "the test group is skipped");
    let held = stage.waiting.held.lock().unwrap().clone();
    let slots: BTreeSet<i64> = held.keys().map(|(_, slot)| *slot).collect();
    assert_eq!(slots, BTreeSet::from([rest_slot]), "{slots:?}");
    let rest = (0..60)
        .filter(|i| recorded.assign("weekly-2026-W47", &format!("c{i:02}")) == Assignment::Rest)
        .count();
    assert!(rest > 15, "{rest}");
    assert_eq!(held[&("weekly-2026-W47".into(), rest_slot)].len(), rest);
}

#[tokio::test]
async fn the_wait_counts_from_the_test_groups_last_email_not_the_start() {
    let results = Arc::new(MemoryResults::default());
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let clock = Arc::new(TestClock(now.into()));
    let stage = stage_with_results(crowd(), "20", &[], results.clone()).with_clock(clock.clone());
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50,
                            "waitHours": 2, "minDelivered": 3, "minPeople": 5});
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment}),
            &plenty(),
        )
        .await
        .unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    let decide_at = recorded.decide_at_ms.unwrap();
    let held = stage.waiting.held.lock().unwrap()[&("weekly-2026-W47".into(), decide_at)].len();
    // The test group went at the rate: its last email 90 minutes after the start, so the
    // decision is due 2 hours after that, not 2 hours after the start.
    let last = now + 90 * 60_000;
    let tally = |delivered, human_clicks| crate::domain::experiment::Tally {
        sent: delivered,
        delivered,
        human_clicks,
        human_opens: 0,
        last_sent_ms: Some(last),
    };
    results.0.lock().unwrap().insert(
        "weekly-2026-W47".into(),
        [
            ("a".to_string(), tally(20, 1)),
            ("b".to_string(), tally(20, 15)),
        ]
        .into(),
    );
    let due = (last + 2 * 3_600_000 + 999) / 1000 * 1000;
    let release = Release {
        campaign_id: CampaignId::parse("weekly-2026-W47").unwrap(),
        slot_ms: decide_at,
        from: Default::default(),
        lanes: Vec::new(),
        released: 0,
        sweep: false,
        decision_waits_until_ms: None,
    };
    clock
        .0
        .store(decide_at, std::sync::atomic::Ordering::SeqCst);
    let waits = stage.release(release, &plenty()).await.unwrap();
    assert!(waits.early && waits.users_released == 0, "{waits:?}");
    assert_eq!(
        waits.decision_waits_until,
        Some(crate::domain::local_time::rfc3339_ms(due))
    );
    assert!(stage
        .campaigns
        .states()
        .decisions
        .lock()
        .unwrap()
        .is_empty());
    // The release looks again then (at most 15 minutes a hop), reading nothing before.
    let (delay, body) = stage
        .continuation
        .delayed
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(delay, 900);
    let again: ReleaseEvent = serde_json::from_str(&body).unwrap();
    assert_eq!(again.release_waiting.decision_waits_until_ms, Some(due));
    clock.0.store(due - 1, std::sync::atomic::Ordering::SeqCst);
    let early = stage
        .release(again.release_waiting.clone(), &plenty())
        .await
        .unwrap();
    assert!(
        early.early && early.decision_waits_until.is_none(),
        "{early:?}"
    );
    // A resend meanwhile holds the rest for that instant, not the passed one.
    let before = stage.waiting.held.lock().unwrap().len();
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "includeFailed": true}),
            &plenty(),
        )
        .await
        .unwrap();
    let slots: BTreeSet<i64> = stage
        .waiting
        .held
        .lock()
        .unwrap()
        .keys()
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(
        slots,
        BTreeSet::from([decide_at, due]),
        "{before} {slots:?}"
    );
    clock.0.store(due, std::sync::atomic::Ordering::SeqCst);
    let summary = stage
        .release(again.release_waiting, &plenty())
        .await
        .unwrap();
    assert_eq!(summary.users_released as usize, held);
    let decision = stage.campaigns.states().decisions.lock().unwrap()["weekly-2026-W47"].clone();
    assert_eq!(
        (decision.winner.as_str(), decision.decided_at_ms),
        ("b", due)
    );
}

#[tokio::test]
async fn without_consent_to_tracking_an_experiment_is_refused_before_anything_is_sent() {
    let stage = stage_with(crowd(), "20", &[("TRACK_OPENS_AND_CLICKS", "false")]);
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 4});
    let err = stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment}),
            &plenty(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("deploy with TrackOpensAndClicks=true"),
        "{err}"
    );
    assert!(stage.users.bodies().is_empty(), "nothing enqueued");
    assert!(stage.waiting.held.lock().unwrap().is_empty(), "nobody held");
    assert!(stage
        .campaigns
        .states()
        .experiments
        .lock()
        .unwrap()
        .is_empty());
    // Without an experiment the campaign starts as before.
    stage
        .handle(json!({"campaignId": "weekly-2026-W47"}), &plenty())
        .await
        .unwrap();
    assert_eq!(stage.users.bodies().len(), 60);
}

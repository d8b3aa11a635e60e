//! The Pinpoint guardrails end to end on the local stack: two campaigns racing for the same
//! users under a frequency cap of one send each user one email; a holdout stays out on a
//! re-run; a deadline mid-campaign leaves the rest expired with nothing in the queues, and
//! a resend is refused until the deadline moves; quiet hours defer users and then send.

use mailflow::domain::campaign::Campaign;
use mailflow::domain::guardrails::held_out;
use mailflow::domain::ledger::SendStatus;
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env, TestEnv};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

const WEEK: &str = "weekly-2026-W47";

fn window_fields(campaign: &Campaign) -> (String, String) {
    let rfc = |t| mailflow::domain::campaign::rfc3339(t);
    (rfc(campaign.window.since), rfc(campaign.window.until))
}

fn rfc3339_in(seconds: i64) -> String {
    mailflow::domain::campaign::rfc3339(
        time::OffsetDateTime::now_utc() + time::Duration::seconds(seconds),
    )
}

/// Each user's record status and skip reason in `campaign`.
async fn outcomes(
    env: &TestEnv,
    campaign: &str,
) -> BTreeMap<String, (Option<SendStatus>, Option<String>)> {
    env.records(campaign)
        .await
        .unwrap()
        .into_iter()
        .map(|(user, r)| (user, (r.status, r.skip_reason)))
        .collect()
}

async fn queues_empty(env: &TestEnv) {
    for queue in [names::USERS_QUEUE, names::EMAILS_QUEUE] {
        assert_eq!(env.depth(queue).await.unwrap(), 0, "{queue} is empty");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_campaigns_under_a_cap_of_one_send_one_email_the_holdout_stays_out_and_a_deadline_expires_the_rest(
) {
    let env = test_env("guardrails", |o| {
        o.parameters.insert("FrequencyCaps".into(), "1/16h".into());
    })
    .await
    .unwrap();
    let week = Campaign::from_id(WEEK, None).unwrap();
    let seeded = env.seed(120, &week).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let (since, until) = window_fields(&week);

    // The weekly digest (a quarter held out) and a promotion over the same window start
    // together: their emails to one user race for the one the cap allows.
    pipeline
        .start(serde_json::json!({ "campaignId": WEEK, "holdoutPercent": "25" }))
        .await
        .unwrap();
    pipeline
        .start(serde_json::json!({ "campaignId": "promo-b", "since": since, "until": until }))
        .await
        .unwrap();
    pipeline.drain(Duration::from_secs(600)).await.unwrap();
    queues_empty(&env).await;

    let (weekly, promo) = (outcomes(&env, WEEK).await, outcomes(&env, "promo-b").await);
    let sent = |o: &(Option<SendStatus>, Option<String>)| o.0 == Some(SendStatus::Sent);
    let mut held = 0;
    for (user, w) in &weekly {
        let p = promo.get(user).cloned().unwrap_or((None, None));
        assert!(
            !(sent(w) && sent(&p)),
            "{user} got both emails: {w:?} {p:?}"
        );
        if held_out(WEEK, user, 2500) {
            held += 1;
            assert_eq!(w.1.as_deref(), Some("held_out"), "{user}: {w:?}");
            let failed = p.0 == Some(SendStatus::Failed);
            assert!(
                sent(&p) || (failed && seeded.invalid_addresses.contains(user)),
                "{user} is held out of the digest only: {p:?}"
            );
        } else if sent(w) || sent(&p) {
            let other = if sent(w) { &p } else { w };
            assert_eq!(
                other.1.as_deref(),
                Some("frequency_cap"),
                "{user}: {other:?}"
            );
        }
    }
    assert!(held > 10, "a quarter of {} held out: {held}", weekly.len());
    let emails: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
    let sent_records = weekly
        .values()
        .chain(promo.values())
        .filter(|o| sent(o))
        .count();
    assert_eq!(emails, sent_records, "one email per SENT record");

    // A re-run keeps the same people out and the cap still holds: nothing more is sent.
    // The held-out records are not even claimed again (the others are asked again).
    let skipped_before = pipeline
        .totals
        .lock()
        .unwrap()
        .send_email
        .previously_skipped;
    let rerun = pipeline
        .run(
            serde_json::json!({ "campaignId": WEEK, "includeFailed": true }),
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    assert_eq!(
        rerun.totals.send_email.previously_skipped - skipped_before,
        held,
        "{:?}",
        rerun.totals.send_email
    );
    let again = outcomes(&env, WEEK).await;
    for (user, o) in &again {
        assert_eq!(
            o.1.as_deref() == Some("held_out"),
            held_out(WEEK, user, 2500),
            "{user}: {o:?}"
        );
    }
    let emails_again: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
    assert_eq!(emails_again, emails, "the re-run sent nothing more");

    // A campaign exempt from the caps whose deadline passes once its users are queued:
    // none is sent, each is recorded expired, and nothing of it stays in the queues.
    let late = serde_json::json!({
        "campaignId": "late-c", "since": since, "until": until, "capExempt": true,
        "deadline": rfc3339_in(10),
    });
    pipeline.start(late).await.unwrap();
    tokio::time::sleep(Duration::from_secs(11)).await;
    pipeline.drain(Duration::from_secs(600)).await.unwrap();
    queues_empty(&env).await;
    let late_records = outcomes(&env, "late-c").await;
    let expired = late_records
        .values()
        .filter(|o| o.1.as_deref() == Some("expired"))
        .count();
    assert!(expired > 0, "{late_records:?}");
    assert_eq!(expired, late_records.len(), "{late_records:?}");
    assert!(late_records.values().all(|o| matches!(
        o.0,
        Some(SendStatus::Sent | SendStatus::Skipped | SendStatus::Failed)
    )));
    // After the deadline a resend is refused, until it gives a later one (recorded); then
    // --include-failed sends to the users recorded expired.
    let refused = pipeline
        .start(serde_json::json!({
            "campaignId": "late-c", "since": since, "until": until, "includeFailed": true,
        }))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("deadline") && refused.contains("has passed"),
        "{refused}"
    );
    let resend = serde_json::json!({
        "campaignId": "late-c", "since": since, "until": until, "includeFailed": true,
        "deadline": rfc3339_in(3600),
    });
    pipeline
        .run(resend, Duration::from_secs(600))
        .await
        .unwrap();
    let resent = outcomes(&env, "late-c").await;
    for (user, o) in &late_records {
        if o.1.as_deref() == Some("expired") {
            let now = &resent[user];
            let invalid = seeded.invalid_addresses.contains(user);
            assert!(
                now.0 == Some(SendStatus::Sent) || (invalid && now.0 == Some(SendStatus::Failed)),
                "{user}: {now:?}"
            );
        }
    }
    let target = mailctl::ops::Target::from_prefix(&env.stack.sdk, &env.stack.prefix)
        .await
        .unwrap();
    let status = mailctl::ops::status(&env.stack.sdk, &target, "late-c")
        .await
        .unwrap();
    assert!(
        status.deadline_moved_at_ms.is_some(),
        "the move is recorded"
    );
    let status = mailctl::ops::status(&env.stack.sdk, &target, WEEK)
        .await
        .unwrap();
    assert_eq!(status.skipped.get("held_out").copied(), Some(held));
    assert_eq!(status.guardrails.map(|g| g.holdout_bp), Some(2500));
}

#[tokio::test(flavor = "multi_thread")]
async fn quiet_hours_defer_users_to_their_end_and_then_send() {
    // Quiet hours that the wall clock is not in (SendEmail checks them again as it sends),
    // and the simulator's clock starts inside them on the day after the campaign's week.
    let hour = (SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
        % 24) as i64;
    let (start, end) = ((hour + 3) % 24, (hour + 6) % 24);
    let quiet = format!("{start:02}:00-{end:02}:00");
    let env = test_env("quiet", |o| {
        o.parameters.insert("QuietHours".into(), quiet.clone());
    })
    .await
    .unwrap();
    let week = Campaign::from_id(WEEK, None).unwrap();
    env.seed(40, &week).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    // Seeded users have no zone: the fallback, UTC.
    let day = week.window.until.unix_timestamp() * 1000 + 86_400_000;
    let inside = day + ((start + 1) % 24) * 3_600_000;
    pipeline.clock.set(inside);
    let report = pipeline
        .run(
            serde_json::json!({ "campaignId": WEEK }),
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    let deferred = report.get_users["localTime"]["quietDeferred"]
        .as_u64()
        .unwrap_or(0);
    let records = outcomes(&env, WEEK).await;
    assert!(
        deferred > 0 && deferred as usize >= records.len(),
        "{report:?}"
    );
    let sent = records
        .values()
        .filter(|o| o.0 == Some(SendStatus::Sent))
        .count();
    assert!(sent > 0, "{records:?}");
    assert!(
        records
            .values()
            .all(|o| matches!(o.0, Some(SendStatus::Sent | SendStatus::Failed))),
        "{records:?}"
    );
    // Released at the quiet hours' end, not before.
    let fired = pipeline.releases_fired();
    let end_ms = if end > (start + 1) % 24 {
        day + end * 3_600_000
    } else {
        day + 86_400_000 + end * 3_600_000
    };
    assert!(
        fired.iter().any(|r| r.at_ms == end_ms),
        "{fired:?} vs {end_ms}"
    );
    queues_empty(&env).await;
    // `status` reports the holds of a campaign without local time too: all released.
    let target = mailctl::ops::Target::from_prefix(&env.stack.sdk, &env.stack.prefix)
        .await
        .unwrap();
    let status = mailctl::ops::status(&env.stack.sdk, &target, WEEK)
        .await
        .unwrap();
    let local = status
        .local_time
        .expect("the quiet hours' holds are reported");
    assert_eq!(local.held, deferred, "{local:?}");
    assert_eq!(local.still_waiting, 0, "{local:?}");
    assert_eq!(local.runs.len(), 1, "{local:?}");
}

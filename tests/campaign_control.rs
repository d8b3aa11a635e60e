//! Steering a live campaign against the local stack: a cancellation part-way stops the sends,
//! and every user of the audience ends in a state that can be counted.

use mailflow::domain::campaign::Campaign;
use mailflow::domain::ledger::{epoch_ms, SendStatus};
use mailflow::stages::CAMPAIGN_STATE_TTL;
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env};
use std::time::{Duration, SystemTime};

#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_cancelled_part_way_sends_nothing_more_and_every_user_ends_counted() {
    // Slow enough that the cancellation lands while most emails still wait for their slot.
    let env = test_env("cancel", |o| {
        o.parameters
            .insert(names::SEND_RATE_PER_SECOND.into(), "20".into());
    })
    .await
    .unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let id = campaign.id.as_str();
    let seeded = env.seed(300, &campaign).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let target = mailctl::ops::Target::from_prefix(&env.stack.sdk, &env.stack.prefix)
        .await
        .unwrap();

    let run = pipeline.run(
        serde_json::json!({ "campaignId": id }),
        Duration::from_secs(900),
    );
    let cancel = async {
        // Once some emails are out, the operator cancels.
        let started = std::time::Instant::now();
        loop {
            let records = env.records(id).await.unwrap();
            let sent = records
                .values()
                .filter(|r| r.status == Some(SendStatus::Sent))
                .count();
            if sent >= 10 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(300), "nothing sent");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let at_ms = epoch_ms(SystemTime::now());
        mailctl::control::cancel(&env.stack.sdk, id, "test", "stopped part-way", &target)
            .await
            .unwrap();
        at_ms
    };
    let (report, cancelled_at_ms) = tokio::join!(run, cancel);
    let report = report.unwrap();

    // Every audience user is SENT, FAILED (an invalid address), CANCELLED, or has no record
    // because CreateEmails skipped them; none is left in progress or dead-lettered.
    let records = env.records(id).await.unwrap();
    let count = |s: SendStatus| records.values().filter(|r| r.status == Some(s)).count();
    let (sent, failed, cancelled) = (
        count(SendStatus::Sent),
        count(SendStatus::Failed),
        count(SendStatus::Cancelled),
    );
    assert_eq!(sent + failed + cancelled, records.len(), "{records:?}");
    for user in records.keys() {
        assert!(
            seeded.audience.contains_key(user),
            "{user} is not in the audience"
        );
    }
    let skipped_for_cancel = report
        .totals
        .create_emails
        .skipped
        .get("campaign_cancelled")
        .copied()
        .unwrap_or(0);
    eprintln!(
        "audience {}: sent {sent}, failed {failed}, cancelled {cancelled}, skipped for the cancellation {skipped_for_cancel}",
        seeded.audience.len()
    );
    assert!(
        cancelled + skipped_for_cancel > 0,
        "the cancellation stopped nothing: {report:?}"
    );
    assert!(sent < seeded.deliverable().count(), "everyone was sent to");

    // Nothing more after the cancellation: no email SENT whose claim began later than the
    // state's cache allows (a claim made before it may finish later: the batch already
    // sending, as slow as the local SES is under load).
    let bound = cancelled_at_ms + CAMPAIGN_STATE_TTL.as_millis() as u64 + 5_000;
    let late: Vec<_> = records
        .values()
        .filter(|r| r.status == Some(SendStatus::Sent))
        .filter(|r| r.started_at_ms.unwrap_or(0) > bound)
        .collect();
    assert!(late.is_empty(), "sent after the cancellation: {late:?}");
    // Every email SES took has its SENT record, and only those.
    let emails: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
    assert_eq!(emails, sent);

    // The messages were acknowledged, not left to the DLQs.
    for queue in [
        names::USERS_QUEUE,
        names::EMAILS_QUEUE,
        names::USERS_DLQ,
        names::EMAILS_DLQ,
    ] {
        assert_eq!(env.depth(queue).await.unwrap(), 0, "{queue}");
    }

    // A second cancellation changes nothing and says who cancelled first.
    let again = mailctl::control::cancel(&env.stack.sdk, id, "someone else", "again", &target)
        .await
        .unwrap_err()
        .to_string();
    assert!(again.contains("already cancelled by test"), "{again}");
    for refused in [
        mailctl::control::resume(&env.stack.sdk, id, "test", &target).await,
        mailctl::control::pause(&env.stack.sdk, id, "test", "late", &target).await,
    ] {
        let refused = refused.unwrap_err().to_string();
        assert!(refused.contains("was cancelled by test"), "{refused}");
    }

    // Told explicitly, an operator reopens it and resends: the users it left CANCELLED (and
    // those CreateEmails skipped for the cancellation) get their one email; nobody a second.
    let said = mailctl::control::reopen(&env.stack.sdk, id, "test", &target)
        .await
        .unwrap();
    assert!(said.starts_with(&format!("reopened {id}")), "{said}");
    pipeline
        .run(
            serde_json::json!({ "campaignId": id, "includeCancelled": true }),
            Duration::from_secs(900),
        )
        .await
        .unwrap();
    let sent_to = env.sent().await.unwrap();
    for (user, _) in seeded.deliverable() {
        assert_eq!(
            sent_to.get(&seeded.addresses[user]).map_or(0, Vec::len),
            1,
            "{user}"
        );
    }
    let records = env.records(id).await.unwrap();
    assert!(
        records
            .values()
            .all(|r| matches!(r.status, Some(SendStatus::Sent | SendStatus::Failed))),
        "{records:?}"
    );
    let not_cancelled = mailctl::control::reopen(&env.stack.sdk, id, "test", &target)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        not_cancelled.contains("is not cancelled"),
        "{not_cancelled}"
    );
}

/// Queue visibility timeout for the pause test: short, so that a pause outlasts several.
const PAUSE_TEST_VISIBILITY: u32 = 8;

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_campaign_sends_nothing_until_resumed_then_everyone_exactly_once() {
    let env = test_env("pause", |o| {
        for queue in [names::USERS_QUEUE, names::EMAILS_QUEUE] {
            o.visibility_timeouts
                .insert(queue.into(), PAUSE_TEST_VISIBILITY);
        }
        // Slow enough to pause at about a third, and for the batches in hand when the pause
        // is made (up to the state cache's lifetime) not to finish the campaign.
        o.parameters
            .insert(names::SEND_RATE_PER_SECOND.into(), "15".into());
    })
    .await
    .unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let id = campaign.id.as_str();
    let seeded = env.seed(400, &campaign).await.unwrap();
    let deliverable = seeded.deliverable().count();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let target = mailctl::ops::Target::from_prefix(&env.stack.sdk, &env.stack.prefix)
        .await
        .unwrap();
    assert_eq!(target.event_source_mappings.len(), 3);
    let sdk = &env.stack.sdk;
    let sent_now = || async {
        let records = env.records(id).await.unwrap();
        records
            .values()
            .filter(|r| r.status == Some(SendStatus::Sent))
            .count()
    };

    let run = pipeline.run(
        serde_json::json!({ "campaignId": id }),
        Duration::from_secs(900),
    );
    let operate = async {
        let started = std::time::Instant::now();
        while sent_now().await < deliverable / 3 {
            assert!(started.elapsed() < Duration::from_secs(300), "too slow");
            // Each look scans the sends table: not too often.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let said = mailctl::control::pause(sdk, id, "test", "checking complaints", &target)
            .await
            .unwrap();
        assert!(said.starts_with(&format!("paused {id}")), "{said}");
        // The batches already in hand finish within the state cache's lifetime.
        tokio::time::sleep(CAMPAIGN_STATE_TTL + Duration::from_secs(2)).await;
        let at_pause = sent_now().await;
        let emails_at_pause: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
        assert!(
            at_pause < deliverable,
            "finished before the pause took hold"
        );

        // Paused for several visibility timeouts: nothing is received (a receive would hide
        // messages for the visibility timeout), nothing is sent, nothing reaches a DLQ.
        let status = mailctl::ops::status(sdk, &target, id).await.unwrap();
        assert_eq!(status.state, "paused");
        assert_eq!(status.paused_by.as_deref(), Some("test"));
        assert_eq!(status.consumers.get("Disabled"), Some(&3), "{status:?}");
        assert!(status.resume_before_ms.is_some());
        // A batch received just before the pause took hold hands its unsent messages back
        // invisible: they are on the queue again once their visibility timeout ends.
        tokio::time::sleep(Duration::from_secs(u64::from(PAUSE_TEST_VISIBILITY))).await;
        let paused_for = Duration::from_secs(u64::from(PAUSE_TEST_VISIBILITY) * 4);
        let until = std::time::Instant::now() + paused_for;
        while std::time::Instant::now() < until {
            for queue in [names::USERS_QUEUE, names::EMAILS_QUEUE] {
                let (_, in_flight) =
                    mailflow_local::queues::depth(&env.sqs(), env.stack.queue_url(queue).unwrap())
                        .await
                        .unwrap();
                assert_eq!(in_flight, 0, "{queue}: received while paused");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(sent_now().await, at_pause, "sent while paused");
        let emails: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
        assert_eq!(emails, emails_at_pause, "SES took emails while paused");
        for dlq in names::CAMPAIGN_DLQS {
            assert_eq!(env.depth(dlq).await.unwrap(), 0, "{dlq}");
        }

        // Bad input, one clear error each, nothing changed.
        let again = mailctl::control::pause(sdk, id, "other", "again", &target)
            .await
            .unwrap_err()
            .to_string();
        assert!(again.contains("already paused, by test"), "{again}");
        let unknown = mailctl::control::pause(sdk, "weekly-2020-W01", "x", "y", &target)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("unknown campaign weekly-2020-W01"),
            "{unknown}"
        );
        let refused = mailctl::control::refuse_if_held(sdk, &target, id)
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("is paused"), "{refused}");

        let said = mailctl::control::resume(sdk, id, "test", &target)
            .await
            .unwrap();
        assert!(said.starts_with(&format!("resumed {id}")), "{said}");
        let not_paused = mailctl::control::resume(sdk, id, "test", &target)
            .await
            .unwrap_err()
            .to_string();
        assert!(not_paused.contains("not paused"), "{not_paused}");
        at_pause
    };
    let (report, at_pause) = tokio::join!(run, operate);
    let report = report.unwrap();
    eprintln!("paused after {at_pause} of {deliverable} sent; {report:?}");
    assert!(at_pause >= deliverable / 3 && at_pause < deliverable);
    for (function, stats) in &report.consumers {
        if function != names::SES_EVENTS {
            assert!(
                stats.disabled_polls > 0,
                "{function} never saw its mapping disabled"
            );
        }
    }

    // Resumed: every deliverable user got exactly one email; nothing dead-lettered.
    let sent = env.sent().await.unwrap();
    for (user, _) in seeded.deliverable() {
        assert_eq!(
            sent.get(&seeded.addresses[user]).map_or(0, Vec::len),
            1,
            "{user}"
        );
    }
    assert_eq!(sent.len(), deliverable);
    for queue in names::CAMPAIGN_DLQS {
        assert_eq!(env.depth(queue).await.unwrap(), 0, "{queue}");
    }
    let status = mailctl::ops::status(sdk, &target, id).await.unwrap();
    assert_eq!(status.state, "finished", "{status:?}");
    // A finished campaign cannot be paused.
    let finished = mailctl::control::pause(sdk, id, "test", "late", &target)
        .await
        .unwrap_err()
        .to_string();
    assert!(finished.contains("has finished"), "{finished}");
}

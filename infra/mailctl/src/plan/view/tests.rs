use super::*;
use crate::guardrails::GuardrailsPlan;
use crate::send_rate::over_24_hour_quota;
use mailflow::domain::fan_out::{composers_for, Composer};
use mailflow::domain::public_urls::PublicUrls;
use mailflow::domain::send_rate::{sends_at_rate, Environment, SendRate};

#[test]
fn the_plan_says_when_the_rate_item_would_take_too_many_writes() {
    let plan = |batch| {
        let environment = Environment {
            records_at_once: batch,
            memory_mb: 1_769,
        };
        describe(&Plan {
            send_rate: 20_000.0,
            records_at_once: batch,
            rate_item_takes_per_second: environment.takes_per_second(20_000.0),
            ..Plan::default()
        })
    };
    assert!(plan(10).contains(
        "the send-rate item would take 2000 writes/s (batches of 10; DynamoDB allows one item 1,000, this stack plans for 200): set EmailsBatchSize to 100"
    ), "{}", plan(10));
    assert!(!plan(100).contains("send-rate item"), "{}", plan(100));
    let crowded = describe(&Plan {
        send_rate: 20_000.0,
        environments: SendRate::configured(20_000.0).environments(&Environment::DEFAULT),
        ..Plan::default()
    });
    assert!(
        crowded.contains("SendEmail would run 1000 environments at once"),
        "{crowded}"
    );
    let starved = describe(&Plan {
        send_rate: 20_000.0,
        create_emails: Some(composers_for(20_000.0, &Composer::DEFAULT, 5)),
        ..Plan::default()
    });
    assert!(
        starved.contains("CreateEmails needs 306 environments to keep 20000/s fed but may run 5 (CreateEmailsMaxConcurrency): it, not the rate, would bound the campaign at about 327/s"),
        "{starved}"
    );
    let sized = |rate: f64| {
        describe(&Plan {
            send_rate: rate,
            public_urls: Some(PublicUrls::DEFAULT.check(rate)),
            ..Plan::default()
        })
    };
    let default = sized(14.0);
    assert!(
        default.contains("public URLs at 14/s with 200 junk requests/s each: Unsubscribe needs 26 environments (UnsubscribeConcurrency 26), OpenContent 69 (OpenContentConcurrency 69)"),
        "{default}"
    );
    assert!(!default.contains("raise it"), "{default}");
    let busy = sized(100.0);
    assert!(
        busy.contains("OpenContentConcurrency is 69 but the model needs 235 at 100/s"),
        "{busy}"
    );
    assert!(
        busy.contains("UnsubscribeConcurrency is 26 but the model needs 29 at 100/s"),
        "{busy}"
    );
    assert!(!busy.contains("ask AWS"), "{busy}");
    assert!(sized(1000.0).contains("the public URLs need 1665 reserved environments at 1000/s"));
    let fed = describe(&Plan {
        send_rate: 20.0,
        create_emails: Some(composers_for(20.0, &Composer::DEFAULT, 5)),
        ..Plan::default()
    });
    assert!(!fed.contains("CreateEmails needs"), "{fed}");
}

#[test]
fn held_users_count_against_the_deadline_from_when_they_go_not_from_now() {
    let hour = 3_600_000;
    let now = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
    // 200,000 now, the rest of an experiment (800,000) an hour before the deadline, at
    // 50/s: all of it would take 5.6 h from now, well within the 20 h, but the rest
    // takes 4.4 h from its release.
    let starts = BTreeMap::from([(now, 200_000), (now + 19 * hour, 800_000)]);
    let sends = sends_at_rate(&starts, 50.0, Some(now + 20 * hour));
    assert_eq!(sends.past_deadline, 800_000 - 3600 * 50);
    assert_eq!(sends.last_ms, Some(now + 19 * hour + 16_000 * 1000));
    let plan = Plan {
        send_rate: 50.0,
        would_send: 1_000_000,
        hours: 1_000_000.0 / 50.0 / 3600.0,
        guardrails: GuardrailsPlan {
            deadline_ms: Some(now + 20 * hour),
            last_send_ms: sends.last_ms,
            past_deadline: sends.past_deadline,
            ..Default::default()
        },
        ..Plan::default()
    };
    let text = describe(&plan);
    assert!(
        text.contains("the last email would go in 23.4 h")
            && text.contains("about 620000 users would be recorded expired"),
        "{text}"
    );
    // A local-time slot after the deadline is counted whole; one before it is not.
    let slots = BTreeMap::from([(now + hour, 100), (now + 3 * hour, 100)]);
    let sends = sends_at_rate(&slots, 50.0, Some(now + 2 * hour));
    assert_eq!(sends.past_deadline, 100);
    assert_eq!(sends_at_rate(&slots, 50.0, None).past_deadline, 0);
    // Sends that end before the deadline warn of nothing.
    let fits = sends_at_rate(&starts, 50.0, Some(now + 30 * hour));
    assert_eq!(fits.past_deadline, 0);
}

#[test]
fn an_unlimited_24_hour_quota_fits_every_campaign() {
    let quota = |max: f64| SendQuota {
        max_send_rate: 14.0,
        max_24_hour_send: max,
        sent_last_24_hours: 49_500.0,
    };
    // SES says -1 for no limit.
    let unlimited = quota(-1.0);
    assert_eq!(over_24_hour_quota(1_000_000, &unlimited), 0);
    assert_eq!(over_24_hour_quota(1_000, &quota(50_000.0)), 500);
    let described = |q: SendQuota, would_send| {
        describe(&Plan {
            would_send,
            over_24_hour_quota: over_24_hour_quota(would_send, &q),
            ses_quota: Some(q),
            ..Plan::default()
        })
    };
    let fits = described(unlimited, 1_000_000);
    assert!(
        fits.contains("SES 24-hour quota: unlimited (49500 sent); the campaign fits"),
        "{fits}"
    );
    let over = described(quota(50_000.0), 1_000);
    assert!(
        over.contains(
            "SES 24-hour quota: 49500 of 50000 used; this campaign needs 500 more than is left"
        ),
        "{over}"
    );
}

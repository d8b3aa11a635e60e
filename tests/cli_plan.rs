//! `mailctl plan` against the local stack: what a campaign would send and fail, counted from
//! the same reads the functions make, with the AWS limits it meets, local time, bad settings
//! and experiments refused as a start would refuse them; nothing enqueued, claimed or sent.

use crate::cli::{a_week_ahead, last_json, mailctl, ok, rt_block, status_json, CliStack};
use mailflow_tests::endpoints;

/// `plan`: what the campaign would send and fail, read and counted, nothing enqueued,
/// claimed or sent.
pub(crate) fn plan_counts_and_changes_nothing(t: &CliStack) -> (u64, u64) {
    let plan = last_json(&ok(mailctl(
        &[
            "plan",
            "--prefix",
            &t.prefix,
            "--campaign",
            &t.campaign,
            "--json",
        ],
        &t.env(),
    )));
    assert_eq!(plan["audience"], t.audience);
    let skipped: u64 = mailflow_tests::total(&plan["skipped"]);
    let (would_send, would_fail) = (
        plan["wouldSend"].as_u64().unwrap(),
        plan["wouldFail"].as_u64().unwrap(),
    );
    assert_eq!(
        would_send + would_fail + skipped,
        t.audience as u64,
        "{plan}"
    );
    // What the rate needs of each AWS limit, against the account as the stack's credentials
    // read it (Lambda's concurrency and what is left unreserved, DynamoDB's quota, the sends
    // table) or AWS's defaults; the text names the limit that binds, or that none does, and
    // which limits were read.
    let limits: Vec<&str> = (plan["limits"].as_array().unwrap().iter())
        .map(|l| l["limit"].as_str().unwrap())
        .collect();
    for limit in [
        "Lambda unreserved concurrent executions",
        "sends table write units/s",
        "campaign index partition write units/s",
        "EventBridge invocations/s",
        "SQS messages in flight",
    ] {
        assert!(limits.contains(&limit), "{limit}: {plan}");
    }
    // The three mappings' environments, GetUsers' and ReputationGuard's one each.
    let lambda = &plan["limits"][0];
    assert!(lambda["needed"].as_f64().unwrap() >= 5.0, "{lambda}");
    assert_eq!(
        plan["account"]["read"],
        serde_json::json!([
            "lambda concurrency",
            "dynamodb per-table write quota",
            "sends table throughput"
        ]),
        "{plan}"
    );
    let text = ok(mailctl(
        &["plan", "--prefix", &t.prefix, "--campaign", &t.campaign],
        &t.env(),
    ));
    assert!(
        text.contains("AWS limits at the rate (needed / available):")
            && (text.contains("binding limit: ") || text.contains("no AWS limit binds"))
            && text.contains("account limits read: lambda concurrency, dynamodb per-table write quota, sends table throughput;"),
        "{text}"
    );
    // A holdout a first start would give: its group is counted apart, never in wouldSend.
    let held = last_json(&ok(mailctl(
        &[
            "plan",
            "--prefix",
            &t.prefix,
            "--campaign",
            &t.campaign,
            "--holdout",
            "25",
            "--json",
        ],
        &t.env(),
    )));
    let held_out = held["guardrails"]["heldOut"].as_u64().unwrap();
    assert!(held_out > 0, "{held}");
    assert_eq!(held["guardrails"]["holdoutBp"], 2500, "{held}");
    assert_eq!(
        held["wouldSend"].as_u64().unwrap() + held["wouldFail"].as_u64().unwrap() + held_out,
        would_send + would_fail,
        "{held}"
    );
    let by_locale: u64 = mailflow_tests::total(&plan["byLocale"]);
    assert_eq!(by_locale, would_send);
    let untouched = status_json(&t.prefix, &t.campaign, &t.env());
    assert_eq!(untouched["state"], "not started");
    for count in [
        "usersPending",
        "emailsPending",
        "sent",
        "failed",
        "inProgress",
    ] {
        assert_eq!(untouched[count], 0, "after plan, {count}: {untouched}");
    }
    assert!(rt_block(mailflow_local::ses_record::sent_to_domain(
        &endpoints().0,
        &t.domain
    ))
    .is_empty());

    let (date, _, slot) = a_week_ahead();
    // At 09:00 local time on a date still ahead: the seeded users have no `timezone`, so
    // all of them are counted as such and wait for the fallback zone's slot.
    let local = last_json(&ok(mailctl(
        &[
            "plan",
            "--prefix",
            &t.prefix,
            "--campaign",
            &t.campaign,
            "--local-time",
            "09:00",
            "--send-date",
            &date,
            "--fallback-zone",
            "Asia/Kathmandu",
            "--json",
        ],
        &t.env(),
    )))["localTime"]
        .clone();
    assert_eq!(local["timezoneMissing"], would_send, "{local}");
    assert_eq!(local["slots"].as_array().unwrap().len(), 1, "{local}");
    assert_eq!(local["slots"][0]["slot"], slot, "{local}");
    assert_eq!(local["slots"][0]["emails"], would_send, "{local}");
    assert_eq!(local["busiest"]["zones"][0], "Asia/Kathmandu", "{local}");
    // Bad settings: one line each, naming what to write.
    for (flag, value, says) in [
        ("--local-time", "9am", "HH:MM"),
        ("--fallback-zone", "Asia/Katmandoo", "IANA"),
        ("--passed-time", "whenever", "send-now, next-day or skip"),
        ("--send-date", "2099-01-05", "days after today"),
    ] {
        let mut args = vec!["plan", "--prefix", &t.prefix, "--campaign", &t.campaign];
        if flag != "--local-time" {
            args.extend(["--local-time", "09:00"]);
        }
        args.extend([flag, value]);
        let out = mailctl(&args, &t.env());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{flag}: {err}");
        // Said once (the cause's text was repeated after the message that holds it).
        assert_eq!(err.matches(says).count(), 1, "{flag}: {err}");
    }
    // An experiment without consent to tracking (the stack's default): no click would ever
    // be noted, so it is refused as its start would be.
    let ab = std::env::temp_dir().join(format!("{}-ab.json", t.prefix));
    std::fs::write(
        &ab,
        r#"{"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20, "waitHours": 4}"#,
    )
    .unwrap();
    let ab = ab.to_str().unwrap();
    let args = ["plan", "--prefix", &t.prefix, "--campaign", &t.campaign];
    let out = mailctl(&[&args[..], &["--experiment", ab]].concat(), &t.env());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("deploy with TrackOpensAndClicks=true"),
        "{err}"
    );

    (would_send, would_fail)
}

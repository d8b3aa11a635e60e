//! `mailctl demo` and `mailctl bench` against the local stack: the demo's counts match the
//! SES record and it writes its report, for the digest and the orders example; the bench
//! runs the binaries, counts every request and logs nothing sensitive.

use crate::cli::{last_json, mailctl, ok};
use mailflow_tests::endpoints;
use serde_json::Value;

#[test]
fn demo_prints_counts_that_match_the_ses_record_and_writes_its_report() {
    endpoints();
    let report = std::env::temp_dir()
        .join(format!("mailctl-demo-{}", std::process::id()))
        .join("report.html");
    let path = report.to_str().unwrap();
    let args = ["demo", "--users", "40", "--json", "--report", path];
    let summary = last_json(&ok(mailctl(&args, &[])));
    let page = std::fs::read_to_string(&report).expect("the demo writes its report page");
    assert!(
        page.contains(summary["campaignId"].as_str().unwrap()),
        "{page}"
    );
    assert!(page.contains("<svg"), "the report draws its charts: {page}");
    std::fs::remove_dir_all(report.parent().unwrap()).ok();
    assert!(summary["eligibleUsers"].as_u64().unwrap() > 0);
    assert_eq!(summary["sent"], summary["sesRecorded"]);
    assert_eq!(
        summary["sent"].as_u64().unwrap() + summary["failed"].as_u64().unwrap(),
        summary["eligibleUsers"].as_u64().unwrap()
    );
    assert_eq!(summary["dlq"], 0);
    // SQS may deliver a message twice; the ledger absorbs it (counted, never sent twice).
    assert!(summary["suppressedDuplicates"].is_u64());
}

/// `demo --example orders`: the orders example definition seeded, pushed and run like the
/// digest's demo, its summary and report naming the definition version it ran.
#[test]
fn demo_runs_the_orders_example_and_writes_its_report() {
    endpoints();
    let report = std::env::temp_dir()
        .join(format!("mailctl-demo-orders-{}", std::process::id()))
        .join("report.html");
    let path = report.to_str().unwrap();
    let args = [
        "demo",
        "--example",
        "orders",
        "--users",
        "40",
        "--json",
        "--report",
        path,
    ];
    let summary = last_json(&ok(mailctl(&args, &[])));
    let campaign = summary["campaignId"].as_str().unwrap();
    assert!(campaign.starts_with("orders-"), "{summary}");
    assert_eq!(summary["definition"], "orders v1", "{summary}");
    let page = std::fs::read_to_string(&report).expect("the demo writes its report page");
    std::fs::remove_dir_all(report.parent().unwrap()).ok();
    assert!(page.contains(campaign), "{page}");
    assert!(page.contains("definition orders v1"), "{page}");
    assert!(summary["sent"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(summary["sent"], summary["sesRecorded"]);
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["dlq"], 0);
    // The customers without paid orders that week are skipped by the definition's rule.
    assert!(
        summary["skipped"]["no_orders"].as_u64().unwrap_or(0) > 0,
        "{summary}"
    );
    let skipped: u64 = mailflow_tests::total(&summary["skipped"]);
    assert_eq!(
        summary["sent"].as_u64().unwrap() + skipped,
        summary["eligibleUsers"].as_u64().unwrap(),
        "{summary}"
    );
}

#[test]
fn bench_runs_the_binaries_counts_every_request_and_logs_nothing_sensitive() {
    endpoints();
    let bin_dir = mailflow_tests::binary("send-email");
    let bin_dir = bin_dir.parent().unwrap().to_str().unwrap();
    let out = ok(mailctl(
        &["bench", "--users", "60", "--json", "--bin-dir", bin_dir],
        &[],
    ));
    let report: Value = serde_json::from_str(&out).unwrap();
    let sent = report["emailsSent"].as_u64().unwrap();
    assert!(sent > 0, "{report}");
    let stages = report["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 3);
    let requests = |i: usize, key: &str| stages[i]["requests"][key].as_u64().unwrap_or(0);
    // Metered in the function processes: one SES call per eligible user (the invalid
    // addresses are rejected by SES, not before), two ledger writes per email sent, and
    // SendMessageBatch in tens.
    let eligible = report["eligibleUsers"].as_u64().unwrap();
    assert_eq!(report["usersEnqueued"].as_u64(), Some(eligible), "{report}");
    assert_eq!(requests(2, "sesv2.SendEmail"), eligible);
    assert!(requests(2, "dynamodb.UpdateItem") >= 2 * sent);
    let batches = report["usersEnqueued"].as_u64().unwrap().div_ceil(10);
    let sent_batches = requests(0, "sqs.SendMessageBatch");
    assert!((batches..=batches + 3).contains(&sent_batches), "{report}");
    assert!(requests(1, "mongodb.find") > 0);
    for stage in stages {
        assert!(stage["cpuSeconds"].as_f64().unwrap() >= 0.0);
        assert!(
            stage["peakRssBytes"].as_u64().unwrap() > 1024 * 1024,
            "{stage}"
        );
        assert!(stage["coldStartMs"].as_f64().unwrap() > 0.0, "{stage}");
        // Every line the real binaries wrote in an end-to-end run (invalid addresses and
        // permanent failures included): no address, connection string or key.
        assert!(stage["logLines"].as_u64().unwrap() > 0, "{stage}");
        assert_eq!(stage["sensitiveLogLines"], serde_json::json!([]), "{stage}");
    }
    assert!(report["perEmail"]["sesEmails"].as_f64().unwrap() >= 1.0);
    assert!(report["costPerMillion"]["total"].as_f64().unwrap() > 100.0);
    assert_eq!(report["binaries"].as_array().unwrap().len(), 3);
}

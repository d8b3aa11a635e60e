//! `demo`: a fresh local stack, synthetic users, this week's campaign run to its end, and a
//! summary checked against the SES record (what infra/demo.sh runs).

use anyhow::{bail, Result};
use mailflow::adapters::ses::SesMailer;
use mailflow_local::names;
use mailflow_local::pipeline::{LocalPipeline, PipelineOptions, SeededStack};
use mailflow_local::{ledger_scan, ses_record};
use std::collections::BTreeMap;
use std::time::Duration;

pub async fn demo(
    template: &std::path::Path,
    users: usize,
    seed_value: u64,
    send_rate: Option<f64>,
    json: bool,
    report_path: Option<&std::path::Path>,
) -> Result<()> {
    let endpoint = super::env("AWS_ENDPOINT_URL")?;
    let mut parameters = BTreeMap::new();
    if let Some(rate) = send_rate {
        parameters.insert(names::SEND_RATE_PER_SECOND.into(), rate.to_string());
    }
    let local = SeededStack::create(template, "demo", users, seed_value, parameters).await?;
    let schedule = local.schedule_event()?;
    let (seeded, campaign, domain) = (local.seeded, local.campaign, local.domain);
    let pipeline = LocalPipeline::build(
        local.stack,
        PipelineOptions::default(),
        SesMailer::from_config,
    )
    .await?;
    let report = pipeline.run(schedule, Duration::from_secs(3600)).await?;

    let dynamo = aws_sdk_dynamodb::Client::new(&pipeline.stack.sdk);
    let records = ledger_scan::records(
        &dynamo,
        pipeline.stack.table_name(names::SENDS_TABLE)?,
        campaign.id.as_str(),
    )
    .await?;
    let by_status = ledger_scan::count_by_status(&records);
    let recorded = ses_record::sent_to_domain(&endpoint, &domain).await?.len();
    let dlq = dlq_messages(&pipeline.stack).await?;
    let send = &report.totals.send_email;
    let secs = report.wall_time.as_secs_f64();
    let summary = serde_json::json!({
        "campaignId": campaign.id.as_str(),
        "users": seeded.users,
        "eligibleUsers": seeded.audience.len(),
        "enqueued": report.get_users.get("usersEnqueued"),
        "skipped": report.totals.create_emails.skipped,
        "sent": by_status.get("SENT").copied().unwrap_or(0),
        "suppressedDuplicates": send.duplicates,
        "failed": by_status.get("FAILED").copied().unwrap_or(0),
        "inProgress": by_status.get("IN_PROGRESS").copied().unwrap_or(0),
        "dlq": dlq,
        "sesRecorded": recorded,
        "wallTimeSeconds": (secs * 10.0).round() / 10.0,
        "sendRatePerSecond": ((send.sent as f64 / secs) * 10.0).round() / 10.0,
        // The rate the sends kept once under way (10th to 90th percentile of completions).
        "steadySendRatePerSecond": ledger_scan::steady_send_rate(&records)
            .map(|r| (r * 100.0).round() / 100.0),
    });
    print_summary(&summary, campaign.id.as_str(), seeded.users, json);
    if let Some(path) = report_path {
        let target = super::TargetArgs {
            prefix: Some(pipeline.stack.prefix.clone()),
            database: (pipeline
                .stack
                .parameters
                .get(names::MONGODB_DATABASE)
                .cloned())
            .unwrap_or_else(|| "app".into()),
        };
        super::status::write_report(&pipeline.stack.sdk, campaign.id.as_str(), path, &target)
            .await?;
        let shown = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        // On stderr with --json, so stdout stays one JSON object.
        match json {
            true => eprintln!("report: {}", shown.display()),
            false => println!("\nreport (open it in a browser): {}", shown.display()),
        }
    }
    let sent = by_status.get("SENT").copied().unwrap_or(0);
    let expected = seeded.deliverable().count();
    if sent != recorded || sent != expected || dlq > 0 {
        bail!("the campaign is inconsistent: {sent} SENT records, {recorded} emails in the SES record, {expected} deliverable users, {dlq} messages in DLQs");
    }
    Ok(())
}

/// Messages left in the campaign DLQs.
async fn dlq_messages(stack: &mailflow_local::stack::Stack) -> Result<u64> {
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let mut dlq = 0;
    for q in names::CAMPAIGN_DLQS {
        let (visible, invisible) = mailflow_local::queues::depth(&sqs, stack.queue_url(q)?).await?;
        dlq += visible + invisible;
    }
    Ok(dlq)
}

/// The summary as one JSON object, or as a table under the campaign and its users seeded.
fn print_summary(summary: &serde_json::Value, campaign: &str, users: usize, json: bool) {
    if json {
        println!("{summary}");
    } else {
        println!("campaign {} ({} users seeded)", campaign, users);
        for key in [
            "eligibleUsers",
            "enqueued",
            "sent",
            "suppressedDuplicates",
            "failed",
            "inProgress",
            "dlq",
            "sesRecorded",
            "wallTimeSeconds",
            "sendRatePerSecond",
            "steadySendRatePerSecond",
        ] {
            println!("  {key:<22} {}", summary[key]);
        }
        // Skips by reason; a run that skipped nobody says 0 rather than `{}`.
        let skipped = match summary["skipped"].as_object() {
            Some(reasons) if reasons.is_empty() => "0".to_owned(),
            _ => summary["skipped"].to_string(),
        };
        println!("  {:<22} {skipped}", "skipped");
    }
}

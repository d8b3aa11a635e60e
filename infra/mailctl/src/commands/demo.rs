//! `demo`: a fresh local stack, synthetic users, this week's campaign run to its end, and a
//! summary checked against the SES record (what infra/demo.sh runs). `--example orders` runs
//! the orders example definition instead: its customers and orders seeded, campaigns/orders
//! pushed, its campaign run the same way.

use anyhow::{bail, Result};
use mailflow::adapters::ses::SesMailer;
use mailflow_local::names;
use mailflow_local::pipeline::{LocalPipeline, PipelineOptions, SeededStack};
use mailflow_local::{ledger_scan, ses_record};
use std::collections::BTreeMap;
use std::time::Duration;

/// The example campaign a demo runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Example {
    /// The built-in weekly digest: synthetic users and follows.
    #[default]
    Digest,
    /// The orders example definition (campaigns/orders): customers and their orders seeded
    /// as `mailctl seed --orders` seeds them, the folder pushed, its campaign run.
    Orders,
}

/// A stack made and seeded for one example, and how its campaign starts.
struct Prepared {
    stack: mailflow_local::stack::Stack,
    campaign: String,
    domain: String,
    /// GetUsers' event.
    start: serde_json::Value,
    /// Users (digest) or customers (orders) seeded.
    users: usize,
    /// The campaign's audience, and those of it who must get an email.
    eligible: usize,
    deliverable: usize,
    /// The definition version pushed and run (None: the digest).
    definition: Option<String>,
}

#[allow(clippy::too_many_arguments)]
pub async fn demo(
    template: &std::path::Path,
    example: Example,
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
    let prepared = match example {
        Example::Digest => {
            let local =
                SeededStack::create(template, "demo", users, seed_value, parameters).await?;
            Prepared {
                start: local.schedule_event()?,
                campaign: local.campaign.id.to_string(),
                users: local.seeded.users,
                eligible: local.seeded.audience.len(),
                deliverable: local.seeded.deliverable().count(),
                domain: local.domain,
                stack: local.stack,
                definition: None,
            }
        }
        Example::Orders => orders(template, users, seed_value, parameters).await?,
    };
    let Prepared {
        stack,
        campaign,
        domain,
        start,
        users,
        eligible,
        deliverable,
        definition,
    } = prepared;
    let pipeline =
        LocalPipeline::build(stack, PipelineOptions::default(), SesMailer::from_config).await?;
    let report = pipeline.run(start, Duration::from_secs(3600)).await?;

    let dynamo = aws_sdk_dynamodb::Client::new(&pipeline.stack.sdk);
    let records = ledger_scan::records(
        &dynamo,
        pipeline.stack.table_name(names::SENDS_TABLE)?,
        &campaign,
    )
    .await?;
    let by_status = ledger_scan::count_by_status(&records);
    let recorded = ses_record::sent_to_domain(&endpoint, &domain).await?.len();
    let dlq = dlq_messages(&pipeline.stack).await?;
    let send = &report.totals.send_email;
    let secs = report.wall_time.as_secs_f64();
    let mut summary = serde_json::json!({
        "campaignId": campaign,
        "users": users,
        "eligibleUsers": eligible,
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
    if let Some(definition) = &definition {
        summary["definition"] = definition.as_str().into();
    }
    print_summary(&summary, &campaign, users, json);
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
        super::status::write_report(&pipeline.stack.sdk, &campaign, path, &target).await?;
        let shown = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        // On stderr with --json, so stdout stays one JSON object.
        match json {
            true => eprintln!("report: {}", shown.display()),
            false => println!("\nreport (open it in a browser): {}", shown.display()),
        }
    }
    let sent = by_status.get("SENT").copied().unwrap_or(0);
    if sent != recorded || sent != deliverable || dlq > 0 {
        bail!("the campaign is inconsistent: {sent} SENT records, {recorded} emails in the SES record, {deliverable} deliverable users, {dlq} messages in DLQs");
    }
    Ok(())
}

/// A fresh stack for the orders example: `customers` customers and their orders seeded for
/// the campaign its window rule makes now (as `mailctl seed --orders` seeds them),
/// campaigns/orders pushed (as `mailctl campaign push` does), and the start that names it.
async fn orders(
    template: &std::path::Path,
    customers: usize,
    seed_value: u64,
    parameters: BTreeMap<String, String>,
) -> Result<Prepared> {
    let local = SeededStack::create(template, "demoorders", 0, seed_value, parameters).await?;
    let dir = mailflow_local::repo_root().join("campaigns/orders");
    let loaded = mailctl::definition_store::read_folder(&dir)
        .map_err(|errors| anyhow::anyhow!("{}: {}", dir.display(), errors.join("; ")))?;
    let definition = mailctl::definition::checked(&loaded.files)
        .map_err(|errors| anyhow::anyhow!("{}", errors.join("; ")))?;
    let topic = mailflow::domain::topics::Topics::builtin()
        .get(&definition.topic)?
        .id
        .clone();
    let campaign = mailflow::domain::campaign::Campaign::for_definition(
        &definition.name,
        definition.window_days,
        topic,
        local.now,
    );
    let options = mailflow_local::seed::OrdersOptions {
        customers,
        seed: seed_value,
        domain: local.domain.clone(),
        window: campaign.window,
    };
    let seeded = mailflow_local::seed::seed_orders(&local.db, &options).await?;
    let store =
        mailctl::definition_store::Stack::connect(&local.stack.sdk, Some(&local.stack.prefix))
            .await?;
    let now_ms = mailflow::domain::ledger::epoch_ms(std::time::SystemTime::now());
    let pushed = mailctl::definition_store::push(&store, &loaded, Some("demo"), now_ms).await?;
    let version = pushed.pushed.info().version;
    Ok(Prepared {
        start: serde_json::json!({
            "definition": definition.name,
            "campaignId": campaign.id.as_str(),
        }),
        campaign: campaign.id.to_string(),
        users: seeded.customers,
        eligible: seeded.audience.len(),
        deliverable: seeded.audience.values().filter(|e| e.is_ok()).count(),
        domain: local.domain,
        stack: local.stack,
        definition: Some(format!("{} v{version}", definition.name)),
    })
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
        match summary["definition"].as_str() {
            Some(definition) => {
                println!("campaign {campaign} (definition {definition}, {users} customers seeded)")
            }
            None => println!("campaign {} ({} users seeded)", campaign, users),
        }
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

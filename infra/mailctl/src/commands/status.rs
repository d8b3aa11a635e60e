//! `status`, `report` and `redrive`: a campaign's state from its records and the queues (as
//! text, JSON or an HTML page with plots), and DLQs moved back to their queues.

use super::campaign::fail_on_problems;
use super::{target, QueueChoice, TargetArgs};
use anyhow::Result;
use mailctl::ops;
use std::time::Duration;

pub async fn status(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    watch: bool,
    json: bool,
    t: &TargetArgs,
) -> Result<()> {
    mailflow::domain::campaign::CampaignId::parse(campaign)?;
    let target = target(sdk, t).await?;
    // The account's quota, read once: it bounds the rate SendEmail sends at.
    let quota = mailflow::adapters::ses::send_quota(sdk).await;
    loop {
        let mut s = ops::status(sdk, &target, campaign).await?;
        match &quota {
            Ok(q) => s.ses_quota = Some(*q),
            Err(reason) => s.ses_quota_unknown = Some(reason.to_string()),
        }
        if json {
            println!("{}", serde_json::to_string(&s)?);
        } else {
            print!("{}", mailctl::status::view::describe(&s));
        }
        if !watch {
            return Ok(());
        }
        if s.users_pending + s.emails_pending == 0 {
            // Watched to the end: the exit status says how it ended.
            return fail_on_problems(&s);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// `report`: the campaign's status and records, as one HTML file (`mailctl::report`).
pub async fn report(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    out: Option<std::path::PathBuf>,
    t: &TargetArgs,
) -> Result<()> {
    let path = out.unwrap_or_else(|| format!("{campaign}-report.html").into());
    write_report(sdk, campaign, &path, t).await?;
    println!("{}", path.display());
    Ok(())
}

/// Writes the campaign's report page to `path` (its folder made if need be).
pub async fn write_report(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    path: &std::path::Path,
    t: &TargetArgs,
) -> Result<()> {
    let target = super::target(sdk, t).await?;
    let status = ops::status(sdk, &target, campaign).await?;
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let records =
        mailflow::adapters::sends::campaign_records(&dynamo, &target.sends_table, campaign).await?;
    if let Some(folder) = path.parent().filter(|f| !f.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)?;
    }
    std::fs::write(path, mailctl::report::render(&status, &records))?;
    Ok(())
}

pub async fn redrive(
    sdk: &aws_config::SdkConfig,
    queue: QueueChoice,
    t: &TargetArgs,
) -> Result<()> {
    let target = target(sdk, t).await?;
    let (dlq, source) = match queue {
        QueueChoice::Users => (&target.users_dlq, &target.users_queue),
        QueueChoice::Emails => (&target.emails_dlq, &target.emails_queue),
        QueueChoice::Continuation => match (&target.continuation_dlq, &target.continuation_queue) {
            (Some(dlq), Some(queue)) => (dlq, queue),
            _ => anyhow::bail!(
                "set {} and {} (the stack's outputs {} and {}; redeploy a stack that lacks them)",
                mailctl::stack_outputs::CONTINUATION_DLQ.var,
                mailctl::stack_outputs::CONTINUATION_QUEUE.var,
                mailctl::stack_outputs::CONTINUATION_DLQ.output,
                mailctl::stack_outputs::CONTINUATION_QUEUE.output
            ),
        },
        QueueChoice::SesEvents => (&target.ses_events_dlq, &target.ses_events_queue),
    };
    let moved =
        mailflow_local::queues::redrive(&aws_sdk_sqs::Client::new(sdk), dlq, source).await?;
    println!("moved {moved} messages from {dlq} to {source}");
    Ok(())
}

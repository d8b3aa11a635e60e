//! `experiment pick`: a campaign's A/B experiment decided now, by its rule on the results so
//! far or for the variant named, and the rest of its audience released with the winner.

use super::campaign::{fail_on_problems, invoke_get_users};
use super::{provision_local, TargetArgs};
use anyhow::{bail, Result};
use mailctl::ops::{self, Target};
use mailflow::adapters::campaigns::CampaignsTable;
use mailflow::adapters::ses::SesMailer;
use mailflow::domain::campaign::CampaignId;
use mailflow::domain::experiment::{Decision, Experiment};
use mailflow_local::pipeline::{LocalPipeline, PipelineOptions};
use mailflow_local::stack::Stack;
use std::time::Duration;

/// Decides a campaign's A/B experiment now, by its rule on the results so far or for the
/// variant named, records the decision (a decision is final: the first one recorded stands)
/// and releases the rest of the audience with the winner at once. On AWS it invokes
/// GetUsers with the decision slot's release; with --prefix it runs the pipeline to the end.
pub async fn pick(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    campaign: &str,
    variant: Option<&str>,
    t: &TargetArgs,
) -> Result<()> {
    let id = CampaignId::parse(campaign)?;
    let stack = match &t.prefix {
        Some(prefix) => Some(provision_local(sdk, template, prefix, &t.database).await?),
        None => None,
    };
    let target = super::target(sdk, t).await?;
    // Paused: its release would wait for the resume; cancelled: nobody is left to send to.
    mailctl::control::refuse_if_held(sdk, &target, campaign).await?;
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let table = ops::campaigns_table(&dynamo, &target);
    let record = table.record(campaign).await?;
    let Some(experiment) = record.as_ref().and_then(|r| r.experiment.clone()) else {
        bail!("{campaign} has no experiment: it is given with the campaign's first start (`mailctl run --experiment FILE`)");
    };
    if let Some(name) = variant {
        if experiment.index_of(name).is_none() {
            let names: Vec<&str> = experiment
                .variants
                .iter()
                .map(|v| v.name.as_str())
                .collect();
            bail!(
                "{campaign}'s experiment has no variant {name:?} (it has {})",
                names.join(", ")
            );
        }
    }
    let recorded = match record.and_then(|r| r.decision) {
        Some(decision) => decision,
        None => decide(&dynamo, &table, &target, &id, &experiment, variant).await?,
    };
    if variant.is_some_and(|name| name != recorded.winner) {
        bail!(
            "{campaign} was already decided: winner {} ({}); a decision is final",
            recorded.winner,
            recorded.reason
        );
    }
    eprintln!(
        "{campaign}: winner {} ({:?}): {}",
        recorded.winner, recorded.by, recorded.reason
    );
    release_rest(sdk, stack, &target, id, &experiment, &recorded).await
}

/// Decides by the rule on the campaign's records so far (or for `variant`) and records the
/// decision; the one recorded first stands.
async fn decide(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &CampaignsTable,
    target: &Target,
    id: &CampaignId,
    experiment: &Experiment,
    variant: Option<&str>,
) -> Result<Decision> {
    use mailflow::ports::CampaignStates;
    let records =
        mailflow::adapters::sends::campaign_records(dynamo, &target.sends_table, id.as_str())
            .await?;
    let tallies = mailflow::adapters::sends::experiment_tallies(&records, experiment);
    let now_ms = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
    let decided = mailflow::domain::experiment::decide(experiment, &tallies, variant, now_ms);
    Ok(table.record_decision(id, &decided).await?)
}

/// Releases the rest of the audience with the winner: at once through the decision slot's
/// release (GetUsers on AWS; the pipeline to the end with a local `stack`), or, for a
/// local-time campaign, at each user's local time as scheduled.
async fn release_rest(
    sdk: &aws_config::SdkConfig,
    stack: Option<Stack>,
    target: &Target,
    id: CampaignId,
    experiment: &Experiment,
    recorded: &Decision,
) -> Result<()> {
    let campaign = id.to_string();
    let Some(slot_ms) = experiment.decide_at_ms else {
        bail!("{campaign}'s experiment has no decision time recorded: nobody waits for it");
    };
    if experiment.local_time {
        eprintln!(
            "{campaign} delivers at local time: the rest gets {} at each user's local time from {} on, as scheduled",
            recorded.winner,
            mailctl::format::format_ms(slot_ms.max(0) as u64)
        );
        return Ok(());
    }
    let event = serde_json::to_value(mailflow::stages::get_users::ReleaseEvent {
        release_waiting: mailflow::stages::get_users::Release {
            campaign_id: id,
            slot_ms,
            from: Default::default(),
            lanes: Vec::new(),
            released: 0,
            sweep: false,
            decision_waits_until_ms: None,
        },
    })?;
    let Some(stack) = stack else {
        println!("{}", invoke_get_users(sdk, target, &event).await?);
        return Ok(());
    };
    let pipeline =
        LocalPipeline::build(stack, PipelineOptions::default(), SesMailer::from_config).await?;
    println!("{}", pipeline.start(event).await?);
    pipeline.drain_queues(Duration::from_secs(3600)).await?;
    let status = ops::status(sdk, target, &campaign).await?;
    if let Some(experiment) = &status.experiment {
        eprint!("{}", experiment.describe());
    }
    fail_on_problems(&status)
}

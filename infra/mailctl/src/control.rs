//! `pause`, `resume` and `cancel`: steer a campaign that runs. The campaigns table holds
//! each campaign's state (conditional writes: two operators cannot both pause, a cancelled
//! campaign stays cancelled); the campaign queues' event source mappings are what actually
//! stop and start consumption. The queues are shared, so the mappings stay disabled while any
//! campaign is paused.

use crate::format::format_ms;
use crate::ops::{self, Target};
use anyhow::{bail, Result};
use mailflow::adapters::campaigns::{Refused, CANCELLED, PAUSED, RUNNING};
use mailflow::adapters::event_sources::StackSending;
use mailflow::domain::campaign::CampaignId;
use mailflow::domain::campaign_state::{CampaignRecord, Hold, StateChange};

fn change(by: &str, reason: &str) -> StateChange {
    StateChange {
        at_ms: mailflow::domain::ledger::epoch_ms(std::time::SystemTime::now()),
        by: by.to_owned(),
        reason: reason.to_owned(),
    }
}

fn unknown(campaign: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "unknown campaign {campaign}: GetUsers never started it on this stack (`mailctl run --campaign {campaign}` starts it); nothing changed"
    )
}

/// Why a change was refused, in one line.
fn refusal(campaign: &str, what: &str, Refused(record): Refused) -> anyhow::Error {
    let Some(CampaignRecord { hold, .. }) = record else {
        return unknown(campaign);
    };
    match hold {
        Some(Hold::Cancelled(c)) => anyhow::anyhow!(
            "{campaign} was cancelled by {} at {} ({}): a cancelled campaign cannot be {what}; nothing changed",
            c.by,
            format_ms(c.at_ms),
            c.reason
        ),
        Some(Hold::Paused(c)) => anyhow::anyhow!(
            "{campaign} is already paused, by {} since {} ({}); nothing changed",
            c.by,
            format_ms(c.at_ms),
            c.reason
        ),
        None => anyhow::anyhow!("{campaign} is running, not paused; nothing changed"),
    }
}

fn require_mappings(target: &Target) -> Result<()> {
    if target.event_source_mappings.is_empty() {
        bail!(
            "no event source mappings known: export {} (the stack's {} output); nothing changed",
            crate::stack_outputs::EVENT_SOURCE_MAPPINGS.var,
            crate::stack_outputs::EVENT_SOURCE_MAPPINGS.output
        );
    }
    Ok(())
}

fn sending(sdk: &aws_config::SdkConfig, target: &Target) -> StackSending {
    StackSending {
        mappings: ops::mappings(sdk, target),
        campaigns: ops::campaigns_table(&aws_sdk_dynamodb::Client::new(sdk), target),
    }
}

pub async fn pause(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    by: &str,
    reason: &str,
    target: &Target,
) -> Result<String> {
    CampaignId::parse(campaign)?;
    require_mappings(target)?;
    let status = ops::status(sdk, target, campaign).await?;
    if status.state == "finished" {
        bail!(
            "{campaign} has finished: every user is SENT, FAILED, CANCELLED or skipped and the queues are empty; there is nothing to pause"
        );
    }
    if let Err(refused) = sending(sdk, target)
        .pause_campaign(campaign, &change(by, reason))
        .await?
    {
        return Err(refusal(campaign, "paused", refused));
    }
    Ok(format!(
        "paused {campaign}: the consumers of the campaign queues are stopped (every campaign on this stack waits; the queues are shared); the batches already in a function's hands finish (at most SendEmail's environments x EmailsBatchSize emails, sent within {} s); nothing is lost: `mailctl resume --campaign {campaign}` continues within the queues' 14-day retention",
        mailflow::stages::CAMPAIGN_STATE_TTL.as_secs()
    ))
}

pub async fn resume(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    by: &str,
    target: &Target,
) -> Result<String> {
    CampaignId::parse(campaign)?;
    require_mappings(target)?;
    let still_paused = match sending(sdk, target)
        .resume_campaign(campaign, &change(by, "resumed"))
        .await?
    {
        Ok(still_paused) => still_paused,
        Err(refused) => return Err(refusal(campaign, "resumed", refused)),
    };
    Ok(if still_paused.is_empty() {
        format!("resumed {campaign}: the consumers run again; every user not yet sent to gets exactly one email")
    } else {
        format!(
            "resumed {campaign}, but the consumers stay stopped while {} {} paused (the queues are shared): resume {} too",
            still_paused.join(", "),
            if still_paused.len() == 1 { "is" } else { "are" },
            if still_paused.len() == 1 { "it" } else { "them" },
        )
    })
}

/// `cancel`: no further email of the campaign. GetUsers stops its fan-out, CreateEmails skips
/// its users (`campaign_cancelled`) and SendEmail records CANCELLED every user not yet sent
/// to, acknowledging the messages; the batches past their check finish. A campaign not
/// started yet can be cancelled too: it then never runs. A paused one is cancelled as well;
/// its consumers run again (unless another campaign is paused) so that its messages are
/// acknowledged rather than left to expire.
pub async fn cancel(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    by: &str,
    reason: &str,
    target: &Target,
) -> Result<String> {
    CampaignId::parse(campaign)?;
    let sending = sending(sdk, target);
    let table = &sending.campaigns;
    let was_paused = matches!(
        table.record(campaign).await?.and_then(|r| r.hold),
        Some(Hold::Paused(_))
    );
    let outcome = table
        .change_state(
            campaign,
            &[None, Some(RUNNING), Some(PAUSED)],
            CANCELLED,
            &change(by, reason),
        )
        .await?;
    if let Err(Refused(record)) = outcome {
        if let Some(Hold::Cancelled(earlier)) = record.and_then(|r| r.hold) {
            bail!(
                "{campaign} was already cancelled by {} at {}: nothing changed",
                earlier.by,
                format_ms(earlier.at_ms)
            );
        }
        bail!("{campaign} changed state while it was being cancelled: try again");
    }
    if was_paused && !target.event_source_mappings.is_empty() {
        sending.release_consumers().await?;
    }
    Ok(format!(
        "cancelled {campaign}: no further email of it goes out (within {} s, plus the batches already sending); `mailctl status --campaign {campaign}` counts the users left CANCELLED",
        mailflow::stages::CAMPAIGN_STATE_TTL.as_secs()
    ))
}

/// Reopens a cancelled campaign for `resend --reopen-cancelled`: RUNNING again, recorded with
/// who and when. Refuses a campaign that is not cancelled.
pub async fn reopen(
    sdk: &aws_config::SdkConfig,
    campaign: &str,
    by: &str,
    target: &Target,
) -> Result<String> {
    CampaignId::parse(campaign)?;
    let table = sending(sdk, target).campaigns;
    let reopened = table
        .change_state(
            campaign,
            &[Some(CANCELLED)],
            RUNNING,
            &change(by, "reopened for a resend"),
        )
        .await?;
    match reopened {
        Ok(()) => Ok(format!(
            "reopened {campaign}: it runs again; the resend sends to the users it left CANCELLED"
        )),
        Err(Refused(None)) => Err(unknown(campaign)),
        Err(Refused(Some(_))) => bail!(
            "{campaign} is not cancelled: --reopen-cancelled has nothing to reopen; nothing changed"
        ),
    }
}

/// `run` and `resend` refuse a paused campaign (resume it) and a cancelled one (final).
pub async fn refuse_if_held(
    sdk: &aws_config::SdkConfig,
    target: &Target,
    campaign: &str,
) -> Result<()> {
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    match ops::campaigns_table(&dynamo, target)
        .record(campaign)
        .await?
        .and_then(|r| r.hold)
    {
        Some(Hold::Cancelled(c)) => bail!(
            "{campaign} was cancelled by {} at {} ({}): it stays cancelled; to send it after all, `mailctl resend --campaign {campaign} --reopen-cancelled`",
            c.by,
            format_ms(c.at_ms),
            c.reason
        ),
        Some(Hold::Paused(c)) => bail!(
            "{campaign} is paused, by {} since {} ({}): `mailctl resume --campaign {campaign}` continues it; nothing was started",
            c.by,
            format_ms(c.at_ms),
            c.reason
        ),
        None => Ok(()),
    }
}

//! A plan's counts (`Plan`: what `plan --json` prints) and the text an operator reads of
//! them; each feature writes its own lines.

use crate::guardrails::GuardrailsPlan;
use crate::local_time::LocalTimePlan;
use mailflow::domain::capacity::{Account, Check};
use mailflow::domain::fan_out::ComposerSizing;
use mailflow::domain::public_urls::PublicUrlsCheck;
use mailflow::domain::send_rate::SendQuota;
use mailflow::domain::topics::ExclusionCounts;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub campaign_id: String,
    /// The campaign definition it renders with (`orders v2`; None: the weekly digest).
    pub definition: Option<String>,
    /// The campaign's topic.
    pub topic: String,
    /// Users GetUsers would enqueue.
    pub audience: usize,
    /// Users with new followers the topic's audience rule leaves out, by reason.
    pub excluded: ExclusionCounts,
    /// Emails SendEmail would send, by the locale of their templates.
    pub would_send: usize,
    pub by_locale: BTreeMap<String, usize>,
    /// Users CreateEmails would skip, by reason.
    pub skipped: BTreeMap<&'static str, usize>,
    /// Emails SendEmail would record FAILED before SES: the address is not one mailbox.
    pub would_fail: usize,
    /// A few of the emails, as `preview` shows them.
    pub samples: Vec<String>,
    /// Emails per second for the whole stack (`SendRate::campaign_wide`), where that comes
    /// from (configured, SES quota), and the SendEmail environments that share it.
    pub send_rate: f64,
    pub rate_source: &'static str,
    pub environments: u32,
    /// Records each environment sends at once (its batch), and the rate item's takes per
    /// second at the rate from a deep queue (one item allows 1,000 writes per second).
    pub records_at_once: usize,
    pub rate_item_takes_per_second: f64,
    /// CreateEmails' environments at that rate (RateControl sets them), and whether its
    /// ceiling (`CreateEmailsMaxConcurrency`) holds it below the rate.
    pub create_emails: Option<ComposerSizing>,
    /// Hours the sends take at that rate (the fan-out and rendering run ahead of them).
    pub hours: f64,
    pub ses_quota: Option<SendQuota>,
    pub ses_quota_unknown: Option<String>,
    /// Emails beyond what the 24-hour quota has left now (0 when it fits or is unknown).
    pub over_24_hour_quota: u64,
    /// SES's charge for the emails that would be sent, in dollars.
    pub ses_cost_usd: f64,
    /// A local-time campaign: zones, passed times, and each send slot's load.
    pub local_time: Option<LocalTimePlan>,
    /// What the public URLs need at the rate (first opens at delivery, junk on top) and what
    /// their reserved concurrency is.
    pub public_urls: Option<PublicUrlsCheck>,
    /// What the campaign at the rate needs of each AWS limit against what the account has
    /// (`domain::capacity`).
    pub limits: Vec<Check>,
    /// The sends table's or its index's warm throughput below the campaign's writes: throttled
    /// until DynamoDB scales them (`domain::capacity::warm_up`).
    pub warm_up: Option<String>,
    /// The account the limits were checked against: which were read, which are defaults.
    pub account: Option<Account>,
    /// What the guardrails would hold back (not counted in `wouldSend`).
    pub guardrails: GuardrailsPlan,
}

/// The plan as an operator reads it.
pub fn describe(plan: &Plan) -> String {
    fn list<K: std::fmt::Display>(m: &BTreeMap<K, usize>) -> String {
        m.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
    let mut out = format!(
        "{} (topic {}): audience {}, left out {}; would send {} ({}); would skip {} ({}); would fail {} (address is not one mailbox)\n",
        plan.campaign_id,
        plan.topic,
        plan.audience,
        crate::topics::left_out(&plan.excluded),
        plan.would_send,
        list(&plan.by_locale),
        plan.skipped.values().sum::<usize>(),
        list(&plan.skipped),
        plan.would_fail,
    );
    if let Some(definition) = &plan.definition {
        out.push_str(&format!("definition {definition}\n"));
    }
    out.push_str(&crate::send_rate::plan_takes(
        plan.hours,
        plan.send_rate,
        plan.rate_source,
        plan.environments,
        plan.ses_cost_usd,
    ));
    if let Some(lines) = plan.guardrails.describe(plan.send_rate) {
        out.push_str(&lines);
    }
    out.push_str(&crate::send_rate::plan_sizing(
        plan.send_rate,
        plan.environments,
        plan.create_emails,
        plan.rate_item_takes_per_second,
        plan.records_at_once,
    ));
    if let Some(urls) = &plan.public_urls {
        out.push_str(&crate::public_urls::describe_plan(urls, plan.send_rate));
    }
    out.push_str(&crate::capacity::describe_plan(&plan.limits));
    if let Some(account) = &plan.account {
        out.push_str(&crate::capacity::describe_account(account));
    }
    if let Some(note) = &plan.warm_up {
        out.push_str(&format!("warm-up: {note}\n"));
    }
    out.push_str(&crate::send_rate::plan_quota(
        plan.ses_quota.as_ref(),
        plan.ses_quota_unknown.as_deref(),
        plan.over_24_hour_quota,
    ));
    if let Some(l) = &plan.local_time {
        out.push_str(&l.describe());
    }
    for sample in &plan.samples {
        out.push_str("\n--- sample ---\n");
        out.push_str(sample);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;

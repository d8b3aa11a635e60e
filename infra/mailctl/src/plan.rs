//! `mailctl plan`: what a campaign would send, before it sends anything. The audience is read
//! as GetUsers reads it and every user's email composed as CreateEmails composes it (the same
//! code, through `CreateEmails::compose_in_locale`), then counted: who would get one, in which
//! language, who would be skipped and why, whose address SendEmail would refuse. Nothing is
//! enqueued, claimed or sent: only MongoDB (and SES's GetAccount) is read. A campaign of a
//! definition is read and composed as that definition's (its audience query, its templates). The counts are a
//! `Plan` (`view`, with the text an operator reads); each feature's part of them is in its
//! own module (`local_time`, `guardrails`, `experiment`, `send_rate`, `public_urls`).

pub mod view;

use crate::guardrails::{Guardrails, GuardrailsPlan};
use crate::local_time::LocalTimePlan;
use crate::send_rate::{over_24_hour_quota, Sending, SES_DOLLARS_PER_EMAIL};
use anyhow::{Context, Result};
use mailflow::assemble::LambdaCreateEmails;
use mailflow::domain::campaign::Campaign;
use mailflow::domain::campaign_start::dated_experiment;
use mailflow::domain::capacity::{checks, warm_up};
use mailflow::domain::definition::pin::PinnedDefinition;
use mailflow::domain::delivery::{self, Decision, ExperimentView, Place, Quiet, Recipient, Rules};
use mailflow::domain::experiment::{Assignment, Experiment};
use mailflow::domain::fan_out::composers_for;
use mailflow::domain::guardrails::{CapCheck, QuietHours};
use mailflow::domain::local_time::LocalDelivery;
use mailflow::domain::messages::UserMessage;
use mailflow::domain::send_rate::sends_at_rate;
use mailflow::domain::send_rate::SendQuota;
use mailflow::domain::topics::Topics;
use mailflow::ports::{AudienceMember, AudienceScan, CapLedger, DefinitionCampaign, UserDirectory};
use std::collections::{BTreeMap, BTreeSet};
use view::Plan;

/// The delivery rule (`domain::delivery`) as `plan` asks it for each user: the campaign's
/// rules as a start now would settle them (its local time, the stack's quiet hours and
/// fallback zone, its holdout, and its experiment's rest held for the decision).
pub struct Prediction<'a> {
    pub rules: Rules<'a>,
    pub campaign_id: &'a str,
    pub experiment: Option<ExperimentView<'a>>,
    /// When the experiment's rest gets the winner (None: no experiment).
    pub decide_at_ms: Option<i64>,
}

impl<'a> Prediction<'a> {
    pub fn new<C>(
        campaign: &'a Campaign,
        delivery: Option<&'a LocalDelivery>,
        guardrails: &'a Guardrails<C>,
        now_ms: i64,
    ) -> Self {
        let decide_at_ms = (guardrails.experiment.as_ref())
            .map(|e| decision_time(e, delivery, guardrails.quiet, now_ms));
        // A decision whose time has passed is made by the run's start, which then lets the
        // rest go with the winner at their own time: held for it only while it is ahead.
        let experiment = guardrails.experiment.as_ref().map(|e| ExperimentView {
            experiment: e,
            winner: None,
            decide_at_ms: decide_at_ms.filter(|at| *at > now_ms),
        });
        Self {
            rules: Rules {
                local_time: delivery,
                quiet_hours: guardrails.quiet,
                fallback_zone: &guardrails.fallback_zone,
                holdout_bp: guardrails.campaign.holdout_bp,
            },
            campaign_id: campaign.id.as_str(),
            experiment,
            decide_at_ms,
        }
    }

    /// What the rule decides for `member` at `now_ms`.
    pub fn of(&self, member: &AudienceMember, now_ms: i64) -> Decision {
        let user_id = member.id.to_string();
        let (_, rest_until_ms) = (self.experiment.as_ref())
            .map(|e| e.group(self.campaign_id, &user_id))
            .unwrap_or_default();
        let user = Recipient {
            campaign_id: self.campaign_id,
            user_id: &user_id,
            zone: &member.zone,
            rest_until_ms,
        };
        delivery::decide(&self.rules, &user, now_ms)
    }
}

impl Plan {
    /// A plan of `campaign` with nothing counted yet: its settings and guardrails.
    fn of<C>(
        campaign: &Campaign,
        delivery: Option<&LocalDelivery>,
        guardrails: &Guardrails<C>,
    ) -> Self {
        Plan {
            campaign_id: campaign.id.to_string(),
            topic: campaign.topic.to_string(),
            local_time: delivery.map(LocalTimePlan::of),
            guardrails: GuardrailsPlan::of(guardrails),
            ..Default::default()
        }
    }
}

/// What the audience loop gathers beside the plan's counts: each slot's emails and the
/// zones in it, and the emails by the instant their users may go.
#[derive(Default)]
struct Loads {
    slots: BTreeMap<i64, (u64, BTreeSet<String>)>,
    starts: BTreeMap<i64, u64>,
}

/// Reads the audience of `campaign` from `directory` and composes every user's email with
/// `stage`, keeping `samples` of them: `definition`'s audience, or the bundled digest's
/// (`UserDirectory::definition_audience`, as GetUsers reads it), and its emails (the stage
/// given the definition's loader).
#[allow(clippy::too_many_arguments)]
pub async fn plan<D: UserDirectory, C: CapLedger>(
    stage: &LambdaCreateEmails,
    directory: &D,
    campaign: &Campaign,
    definition: Option<&DefinitionCampaign>,
    samples: usize,
    sending: Sending,
    delivery: Option<&LocalDelivery>,
    guardrails: Guardrails<C>,
) -> Result<Plan> {
    let mut plan = Plan::of(campaign, delivery, &guardrails);
    let now_ms = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
    let predict = Prediction::new(campaign, delivery, &guardrails, now_ms);
    if let (Some(at), Some(e)) = (predict.decide_at_ms, plan.guardrails.experiment.as_mut()) {
        e.decide_at_ms = at;
    }
    let mut loads = Loads::default();
    let reading = Reading {
        stage,
        campaign,
        pinned: definition.map(|d| PinnedDefinition {
            name: d.loaded.info.name.clone(),
            version: d.loaded.info.version,
        }),
        predict: &predict,
        guardrails: &guardrails,
        samples,
        now_ms,
    };
    // A campaign that pins no definition runs the bundled digest.
    let bundled;
    let definition = match definition {
        Some(definition) => {
            plan.definition = Some(format!(
                "{} v{}",
                definition.loaded.info.name, definition.loaded.info.version
            ));
            definition
        }
        None => {
            bundled = DefinitionCampaign {
                loaded: mailflow::ports::LoadedDefinition::bundled()?,
                campaign: campaign.id.to_string(),
                window: campaign.window,
                topic: Topics::builtin().get(campaign.topic.as_str())?.clone(),
            };
            &bundled
        }
    };
    let mut audience = directory.definition_audience(definition, None);
    reading.count(&mut audience, &mut plan, &mut loads).await?;
    plan.excluded = audience.excluded().clone();
    finish(&mut plan, loads, sending, &guardrails);
    Ok(plan)
}

/// What the audience loop reads and decides with.
struct Reading<'a, C> {
    stage: &'a LambdaCreateEmails,
    campaign: &'a Campaign,
    /// The definition version the users' messages name (None: the weekly digest).
    pinned: Option<PinnedDefinition>,
    predict: &'a Prediction<'a>,
    guardrails: &'a Guardrails<C>,
    samples: usize,
    now_ms: i64,
}

impl<C: CapLedger> Reading<'_, C> {
    /// Every member of `audience`, composed and counted into `plan`.
    async fn count<A: AudienceScan>(
        &self,
        audience: &mut A,
        plan: &mut Plan,
        loads: &mut Loads,
    ) -> Result<()> {
        let (campaign, guardrails, now_ms) = (self.campaign, self.guardrails, self.now_ms);
        let progress = crate::progress::Progress::new("plan");
        loop {
            let member = match audience.next().await {
                Ok(Some(member)) => member,
                Ok(None) => break,
                Err(err) => {
                    let err = anyhow::Error::from(err);
                    return Err(match audience.definition_fault() {
                        Some(fault) => {
                            err.context(format!("the definition's audience query failed: {fault}"))
                        }
                        None => err.context("reading the audience"),
                    });
                }
            };
            let user = member.id.to_string();
            plan.audience += 1;
            let detail = format!("{} would be sent", plan.would_send);
            progress.report(plan.audience as u64, None, "users read", &detail);
            // As GetUsers refuses it: its id cannot travel in a queue message.
            if mailflow::domain::user_id::check_travels(&user).is_err() {
                *plan.skipped.entry("unsendable_user_id").or_default() += 1;
                continue;
            }
            let message = UserMessage {
                campaign_id: campaign.id.clone(),
                user_id: user.clone(),
                window: campaign.window,
                topic: campaign.topic.clone(),
                include_failed: false,
                include_cancelled: false,
                due: None,
                zone: None,
                variant: None,
                definition: self.pinned.clone(),
            };
            let composed = self
                .stage
                .compose_in_locale(message)
                .await
                .with_context(|| format!("composing {user}'s email"))?;
            let (job, locale) = match composed {
                Ok(composed) => composed,
                Err(reason) => {
                    *plan.skipped.entry(reason.as_str()).or_default() += 1;
                    continue;
                }
            };
            let decision = self.predict.of(&member, now_ms);
            let Some(go_at) = count_email(plan, loads, &decision, guardrails, &job, now_ms).await?
            else {
                continue;
            };
            plan.would_send += 1;
            *plan.by_locale.entry(locale).or_default() += 1;
            // Of those it would send: the test group's variants, and the rest (dated after
            // the decision, `Experiment::rest_goes_at`).
            if let (Some(e), Some(groups)) =
                (&guardrails.experiment, plan.guardrails.experiment.as_mut())
            {
                match e.assign(campaign.id.as_str(), &user) {
                    Assignment::Test(i) => {
                        *groups.groups.entry(e.variants[i].name.clone()).or_default() += 1
                    }
                    Assignment::Rest => groups.rest += 1,
                }
            }
            *loads.starts.entry(go_at).or_default() += 1;
            if plan.samples.len() < self.samples {
                plan.samples.push(crate::compose::describe(&job));
            }
        }
        progress.finish();
        Ok(())
    }
}

/// Counts one composed email by what the delivery rule decided for its user, as SendEmail
/// would decide it: the holdout before the address, then the local time (its slot), quiet
/// hours and the caps, each judged when the user would go. The instant it would go, or None
/// when it would not be sent.
async fn count_email<C: CapLedger>(
    plan: &mut Plan,
    loads: &mut Loads,
    decision: &Decision,
    guardrails: &Guardrails<C>,
    job: &mailflow::domain::messages::EmailJob,
    now_ms: i64,
) -> Result<Option<i64>> {
    if decision.held_out {
        plan.guardrails.held_out += 1;
        return Ok(None);
    }
    if mailflow::domain::address::parse(&job.to).is_err() {
        plan.would_fail += 1;
        return Ok(None);
    }
    if let Some(l) = plan.local_time.as_mut() {
        decision.count(&mut l.counts);
        let slot = match decision.place {
            Place::Slot(at) | Place::Delayed(at) => Some(at),
            Place::Now {
                slot_late_ms: Some(late),
            } => Some(now_ms - late),
            Place::Now { slot_late_ms: None } | Place::Never => None,
        };
        if let Some(at) = slot {
            let slot = loads.slots.entry(at).or_default();
            slot.0 += 1;
            slot.1
                .insert(decision.tz.iana_name().unwrap_or("?").to_owned());
        }
    }
    let Some(go_at) = decision.goes_at(now_ms) else {
        return Ok(None);
    };
    if decision.quiet.is_some() {
        plan.guardrails.in_quiet_hours += 1;
        if decision.quiet == Some(Quiet::Skipped) {
            return Ok(None);
        }
    }
    if guardrails
        .caps
        .apply_to(job.topic.as_str(), &guardrails.campaign)
    {
        let history = guardrails
            .history
            .cap_history(&job.user_id)
            .await
            .with_context(|| format!("reading {}'s frequency caps", job.user_id))?;
        let check = guardrails.caps.check(
            &history,
            job.campaign_id.as_str(),
            job.topic.as_str(),
            go_at,
            &decision.tz,
        );
        if matches!(check, CapCheck::Capped(_)) {
            plan.guardrails.capped += 1;
            return Ok(None);
        }
    }
    Ok(Some(go_at))
}

/// The plan's figures from its counts: the rate and what it takes, the quota, the cost, and
/// the local-time slots' loads.
fn finish<C>(plan: &mut Plan, loads: Loads, sending: Sending, guardrails: &Guardrails<C>) {
    let Sending {
        rate,
        environment,
        composer,
        composers_ceiling,
        quota,
        public_urls,
        stack,
        mut account,
    } = sending;
    plan.send_rate = rate.campaign_wide();
    plan.rate_source = rate.source().as_str();
    plan.environments = rate.environments(&environment);
    plan.rate_item_takes_per_second = environment.takes_per_second(plan.send_rate);
    plan.records_at_once = environment.records_at_once;
    plan.create_emails = Some(composers_for(plan.send_rate, &composer, composers_ceiling));
    plan.hours = plan.would_send as f64 / plan.send_rate / 3600.0;
    let deadline = guardrails.campaign.deadline_ms;
    let sends = sends_at_rate(&loads.starts, plan.send_rate, deadline);
    plan.guardrails.last_send_ms = sends.last_ms;
    plan.guardrails.past_deadline = sends.past_deadline;
    plan.public_urls = Some(public_urls.check(plan.send_rate));
    account.ses_max_send_rate = quota.as_ref().ok().map(|q| q.max_send_rate);
    account.ses_left_24_hours = quota.as_ref().ok().and_then(SendQuota::left_24_hours);
    let demand = stack.demand(plan.send_rate);
    plan.limits = checks(&demand, &account, Some(plan.would_send as f64));
    plan.warm_up = warm_up(&demand, &account);
    plan.account = Some(account);
    match quota {
        Ok(q) => {
            plan.over_24_hour_quota = over_24_hour_quota(plan.would_send, &q);
            plan.ses_quota = Some(q);
        }
        Err(reason) => plan.ses_quota_unknown = Some(reason.to_string()),
    }
    plan.ses_cost_usd = plan.would_send as f64 * SES_DOLLARS_PER_EMAIL;
    if let Some(l) = plan.local_time.as_mut() {
        let slots = (loads.slots.into_iter())
            .map(|(at, (n, zones))| (at, (n, zones.into_iter().collect())))
            .collect();
        l.set_slots(&slots, plan.send_rate, deadline);
    }
}

/// When an experiment's rest gets the winner, as GetUsers dates it: the recorded decision, or
/// the one a start now would record (`campaign_start::dated_experiment`).
fn decision_time(
    e: &Experiment,
    delivery: Option<&LocalDelivery>,
    quiet_hours: Option<QuietHours>,
    now_ms: i64,
) -> i64 {
    e.decide_at_ms.unwrap_or_else(|| {
        dated_experiment(e, delivery, quiet_hours, now_ms)
            .decide_at_ms
            .unwrap_or(now_ms)
    })
}

#[cfg(test)]
mod tests;

//! `mailctl plan`: what a campaign would send, before it sends anything. The audience is read
//! as GetUsers reads it and every user's email composed as CreateEmails composes it (the same
//! code, through `CreateEmails::compose_in_locale`), then counted: who would get one, in which
//! language, who would be skipped and why, whose address SendEmail would refuse. Nothing is
//! enqueued, claimed or sent: only MongoDB (and SES's GetAccount) is read. The counts are a
//! `Plan` (`view`, with the text an operator reads); each feature's part of them is in its
//! own module (`local_time`, `guardrails`, `experiment`, `send_rate`, `public_urls`).

pub mod view;

use crate::experiment::{ExperimentPlan, OPENS_WARNING};
use crate::guardrails::{Guardrails, GuardrailsPlan};
use crate::local_time::LocalTimePlan;
use crate::send_rate::{over_24_hour_quota, Sending, SES_DOLLARS_PER_EMAIL};
use anyhow::{Context, Result};
use mailflow::assemble::LambdaCreateEmails;
use mailflow::domain::campaign::Campaign;
use mailflow::domain::experiment::{Assignment, Experiment};
use mailflow::domain::fan_out::composers_for;
use mailflow::domain::guardrails::{held_out, CapCheck, QuietPolicy};
use mailflow::domain::local_time::{
    slot_loads, Delivery, LocalDelivery, ZoneSource, LATE_TOLERANCE_MS,
};
use mailflow::domain::messages::UserMessage;
use mailflow::domain::send_rate::sends_at_rate;
use mailflow::domain::topics::Topics;
use mailflow::ports::{AudienceScan, CapLedger, UserDirectory};
use std::collections::BTreeMap;
use view::Plan;

/// Reads the audience of `campaign` from `directory` and composes every user's email with
/// `stage`, keeping `samples` of them.
pub async fn plan<D: UserDirectory, C: CapLedger>(
    stage: &LambdaCreateEmails,
    directory: &D,
    campaign: &Campaign,
    samples: usize,
    sending: Sending,
    delivery: Option<&LocalDelivery>,
    guardrails: Guardrails<C>,
) -> Result<Plan> {
    let Sending {
        rate,
        environment,
        composer,
        composers_ceiling,
        quota,
        public_urls,
    } = sending;
    let mut local = delivery.map(|d| LocalTimePlan {
        local_time: d.local_time.to_string(),
        send_date: d.send_date.to_string(),
        fallback_zone: d.fallback_zone.as_str().to_owned(),
        passed_time: d.passed_time.as_str(),
        ..Default::default()
    });
    // Each slot's emails and the zones in it.
    let mut slots: BTreeMap<i64, (u64, std::collections::BTreeSet<String>)> = BTreeMap::new();
    let mut plan = Plan {
        campaign_id: campaign.id.to_string(),
        topic: campaign.topic.to_string(),
        guardrails: GuardrailsPlan {
            holdout_bp: guardrails.campaign.holdout_bp,
            deadline_ms: guardrails.campaign.deadline_ms,
            quiet_policy: guardrails.quiet.map(|q| match q.policy {
                QuietPolicy::Defer => "defer",
                QuietPolicy::Skip => "skip",
            }),
            cap_exempt: guardrails.campaign.cap_exempt,
            experiment: guardrails.experiment.as_ref().map(|e| ExperimentPlan {
                groups: e.variants.iter().map(|v| (v.name.clone(), 0)).collect(),
                wait_hours: e.wait_hours,
                warning: (e.metric == mailflow::domain::experiment::Metric::Opens)
                    .then(|| OPENS_WARNING.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let now_ms = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
    // Emails by the instant their users may go, for when the last one goes at the rate.
    let mut starts: BTreeMap<i64, u64> = BTreeMap::new();
    let decide_at = guardrails.experiment.as_ref().map(|e| {
        let quiet_ms = (guardrails.quiet)
            .filter(|q| q.policy == QuietPolicy::Defer)
            .map_or(0, |q| q.length_ms());
        decision_time(e, delivery, quiet_ms, now_ms)
    });
    if let (Some(at), Some(e)) = (decide_at, plan.guardrails.experiment.as_mut()) {
        e.decide_at_ms = at;
    }
    let capped = guardrails
        .caps
        .apply_to(campaign.topic.as_str(), &guardrails.campaign);
    let topic = Topics::builtin().get(campaign.topic.as_str())?;
    let mut audience = directory.audience(&campaign.window, topic, None);
    let progress = crate::progress::Progress::new("plan");
    while let Some(member) = audience.next().await.context("reading the audience")? {
        let user = &member.id;
        plan.audience += 1;
        let detail = format!("{} would be sent", plan.would_send);
        progress.report(plan.audience as u64, None, "users read", &detail);
        // As GetUsers refuses it: its id cannot travel in a queue message.
        if mailflow::domain::user_id::check_travels(&user.to_string()).is_err() {
            *plan.skipped.entry("unsendable_user_id").or_default() += 1;
            continue;
        }
        let message = UserMessage {
            campaign_id: campaign.id.clone(),
            user_id: user.to_string(),
            window: campaign.window,
            topic: campaign.topic.clone(),
            include_failed: false,
            include_cancelled: false,
            due: None,
            zone: None,
            variant: None,
        };
        let composed = stage
            .compose_in_locale(message)
            .await
            .with_context(|| format!("composing {user}'s email"))?;
        match composed {
            Ok((job, locale)) => {
                // As SendEmail decides: the holdout before the address.
                if held_out(
                    campaign.id.as_str(),
                    &user.to_string(),
                    guardrails.campaign.holdout_bp,
                ) {
                    plan.guardrails.held_out += 1;
                    continue;
                }
                if mailflow::domain::address::parse(&job.to).is_err() {
                    plan.would_fail += 1;
                    continue;
                }
                // The rest of an experiment goes with the winner after the decision.
                let rest_decision = decide_at.filter(|_| {
                    (guardrails.experiment.as_ref()).is_some_and(|e| {
                        e.assign(campaign.id.as_str(), &user.to_string()) == Assignment::Rest
                    })
                });
                // When it would go (now, its local time, or after the decision) and in which
                // zone: its quiet hours and caps are judged then.
                let mut tz = member
                    .zone
                    .own_zone()
                    .unwrap_or_else(|| guardrails.fallback_zone.zone());
                let decided = delivery.map(|d| d.delivery(&member.zone).0);
                if let (Some(d), Some(l), Some(decided)) = (delivery, local.as_mut(), decided) {
                    let source;
                    (tz, source) = d.zone_for(&member.zone);
                    match source {
                        ZoneSource::Own => {}
                        ZoneSource::FallbackMissing => l.timezone_missing += 1,
                        ZoneSource::FallbackInvalid => l.timezone_invalid += 1,
                    }
                    // Passed time is the test group's: the rest's is after the decision.
                    if rest_decision.is_none() {
                        match decided {
                            Delivery::Skip => l.passed_skipped += 1,
                            Delivery::Now => l.passed_sent_now += 1,
                            Delivery::NextDay(_) => l.passed_next_day += 1,
                            Delivery::AfterWindow(_) => l.next_day_after_window += 1,
                            Delivery::At(_) => {}
                        }
                    }
                }
                let rest_at = rest_decision.map(|at| Experiment::rest_goes_at(at, delivery, &tz));
                let Some((at_ms, on_a_slot)) = goes_at(now_ms, decided, rest_at) else {
                    continue;
                };
                if on_a_slot {
                    let slot = slots.entry(at_ms).or_default();
                    slot.0 += 1;
                    slot.1.insert(tz.iana_name().unwrap_or("?").to_owned());
                }
                let mut go_at = at_ms.max(now_ms);
                if let Some(quiet) = &guardrails.quiet {
                    if let Some(until) = quiet.quiet_until(go_at, &tz) {
                        plan.guardrails.in_quiet_hours += 1;
                        if quiet.policy == QuietPolicy::Skip {
                            continue;
                        }
                        go_at = until;
                    }
                }
                if capped {
                    let history = guardrails
                        .history
                        .cap_history(&user.to_string())
                        .await
                        .with_context(|| format!("reading {user}'s frequency caps"))?;
                    let check = guardrails.caps.check(
                        &history,
                        campaign.id.as_str(),
                        campaign.topic.as_str(),
                        at_ms.max(now_ms),
                        &tz,
                    );
                    if matches!(check, CapCheck::Capped(_)) {
                        plan.guardrails.capped += 1;
                        continue;
                    }
                }
                plan.would_send += 1;
                *plan.by_locale.entry(locale).or_default() += 1;
                // Of those it would send: the test group's variants, and the rest.
                if let (Some(e), Some(groups)) =
                    (&guardrails.experiment, plan.guardrails.experiment.as_mut())
                {
                    match e.assign(campaign.id.as_str(), &user.to_string()) {
                        Assignment::Test(i) => {
                            *groups.groups.entry(e.variants[i].name.clone()).or_default() += 1
                        }
                        // Dated after the decision above (`Experiment::rest_goes_at`).
                        Assignment::Rest => groups.rest += 1,
                    }
                }
                *starts.entry(go_at).or_default() += 1;
                if plan.samples.len() < samples {
                    plan.samples.push(crate::compose::describe(&job));
                }
            }
            Err(reason) => *plan.skipped.entry(reason.as_str()).or_default() += 1,
        }
    }
    progress.finish();
    plan.excluded = audience.excluded().clone();
    plan.send_rate = rate.campaign_wide();
    plan.rate_source = rate.source().as_str();
    plan.environments = rate.environments(&environment);
    plan.rate_item_takes_per_second = environment.takes_per_second(plan.send_rate);
    plan.records_at_once = environment.records_at_once;
    plan.create_emails = Some(composers_for(plan.send_rate, &composer, composers_ceiling));
    plan.hours = plan.would_send as f64 / plan.send_rate / 3600.0;
    let sends = sends_at_rate(&starts, plan.send_rate, guardrails.campaign.deadline_ms);
    plan.guardrails.last_send_ms = sends.last_ms;
    plan.guardrails.past_deadline = sends.past_deadline;
    plan.public_urls = Some(public_urls.check(plan.send_rate));
    match quota {
        Ok(q) => {
            plan.over_24_hour_quota = over_24_hour_quota(plan.would_send, &q);
            plan.ses_quota = Some(q);
        }
        Err(reason) => plan.ses_quota_unknown = Some(reason.to_string()),
    }
    plan.ses_cost_usd = plan.would_send as f64 * SES_DOLLARS_PER_EMAIL;
    if let Some(mut l) = local {
        let slots = slots
            .into_iter()
            .map(|(at, (n, zones))| (at, (n, zones.into_iter().collect())))
            .collect();
        l.slots = slot_loads(&slots, plan.send_rate);
        l.busiest = l.slots.iter().max_by_key(|s| s.emails).cloned();
        l.late = l
            .slots
            .iter()
            .filter(|s| s.finishes_after * 1000.0 > LATE_TOLERANCE_MS as f64)
            .cloned()
            .collect();
        if let Some(deadline) = guardrails.campaign.deadline_ms {
            l.past_deadline = (l.slots.iter())
                .zip(slots.keys())
                .filter(|(s, at)| **at as f64 + s.finishes_after * 1000.0 > deadline as f64)
                .map(|(s, _)| s.clone())
                .collect();
        }
        plan.local_time = Some(l);
    }
    Ok(plan)
}

/// When an experiment's rest gets the winner, as GetUsers dates it: the recorded decision, or
/// the one a start now would record (`waitHours` after the test group is let go).
fn decision_time(
    e: &Experiment,
    delivery: Option<&LocalDelivery>,
    quiet_ms: i64,
    now_ms: i64,
) -> i64 {
    e.decide_at_ms.unwrap_or_else(|| {
        let let_go = Experiment::test_group_let_go_by(
            delivery.and_then(|d| d.latest_slot()),
            quiet_ms,
            now_ms,
        );
        e.clone().starting_at(let_go).decide_at_ms.unwrap_or(let_go)
    })
}

/// When a user's email would go, as GetUsers lets it go, and whether on a local-time slot:
/// now, at their local time (`decided`: None without local time), or for the rest of an
/// experiment when it gets the winner (`rest_at`, `Experiment::rest_goes_at`: whether or not
/// their local time had passed at the start). None: skipped (their local time passed,
/// policy skip).
fn goes_at(now_ms: i64, decided: Option<Delivery>, rest_at: Option<i64>) -> Option<(i64, bool)> {
    if let Some(at) = rest_at {
        return Some((at, decided.is_some()));
    }
    match decided {
        None | Some(Delivery::Now) => Some((now_ms, false)),
        Some(Delivery::Skip) => None,
        Some(Delivery::NextDay(at) | Delivery::AfterWindow(at) | Delivery::At(at)) => {
            Some((at, true))
        }
    }
}

#[cfg(test)]
mod tests;

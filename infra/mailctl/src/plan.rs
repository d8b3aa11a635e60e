//! Over 450 lines because a plan is one pass over the audience that every count reads in
//! (locale, local time, guardrails, rate), then its description and that description's tests.
//! `mailctl plan`: what a campaign would send, before it sends anything. The audience is read
//! as GetUsers reads it and every user's email composed as CreateEmails composes it (the same
//! code, through `CreateEmails::compose_in_locale`), then counted: who would get one, in which
//! language, who would be skipped and why, whose address SendEmail would refuse. Nothing is
//! enqueued, claimed or sent: only MongoDB (and SES's GetAccount) is read.

use anyhow::{Context, Result};
use mailflow::assemble::LambdaCreateEmails;
use mailflow::domain::campaign::Campaign;
use mailflow::domain::experiment::{Assignment, Experiment};
use mailflow::domain::fan_out::{composers_for, Composer, ComposerSizing};
use mailflow::domain::guardrails::{
    held_out, CampaignGuardrails, CapCheck, FrequencyCaps, QuietHours, QuietPolicy,
};
use mailflow::domain::local_time::{
    slot_loads, Delivery, LocalDelivery, SlotLoad, ZoneSource, LATE_TOLERANCE_MS,
};
use mailflow::domain::messages::UserMessage;
use mailflow::domain::public_urls::{PublicUrls, PublicUrlsCheck, JUNK_PER_SECOND};
use mailflow::domain::send_rate::{
    sends_at_rate, Environment, QuotaUnknown, SendQuota, SendRate, RATE_ITEM_TAKES_PER_SECOND,
};
use mailflow::domain::topics::{ExclusionCounts, Topics};
use mailflow::ports::{AudienceScan, CapLedger, UserDirectory};
use serde::Serialize;
use std::collections::BTreeMap;

/// What SES charges per email sent (us-east-1 list price; the rest of the pipeline adds about
/// 6 % to it: docs/deploying.md, "What 1M emails cost").
pub const SES_DOLLARS_PER_EMAIL: f64 = 0.10 / 1000.0;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub campaign_id: String,
    /// The campaign's topic.
    pub topic: String,
    /// Users GetUsers would enqueue.
    pub audience: usize,
    /// Users with new followers the topic's audience rule leaves out, by reason.
    pub excluded: ExclusionCounts,
    /// Emails SendEmail would send, by the locale of their templates.
    pub would_send: usize,
    pub by_locale: BTreeMap<&'static str, usize>,
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
    /// What the guardrails would hold back (not counted in `wouldSend`).
    pub guardrails: GuardrailsPlan,
}

/// What the campaign's guardrails and the stack's caps and quiet hours would decide, as of
/// now (docs/pinpoint.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuardrailsPlan {
    pub holdout_bp: u32,
    /// Users in the holdout group: recorded held_out, never sent.
    pub held_out: usize,
    pub deadline_ms: Option<i64>,
    /// Users whose email would fall in their quiet hours: held until they end (defer), or
    /// recorded quiet_hours (skip: not counted in `wouldSend`).
    pub in_quiet_hours: usize,
    pub quiet_policy: Option<&'static str>,
    /// Users the frequency caps would hold back if sent now (each user's `#caps` item read).
    pub capped: usize,
    pub cap_exempt: bool,
    /// The A/B experiment's groups (docs/experiments.md).
    pub experiment: Option<ExperimentPlan>,
    /// When the last email would go at the rate, each starting when its user may go (now,
    /// their local time, after quiet hours, or the experiment's decision for the rest).
    pub last_send_ms: Option<i64>,
    /// Of those it would send, the emails that would go after the deadline: recorded expired.
    pub past_deadline: u64,
}

/// Who an experiment would send what: each variant's test group now, the rest the winner
/// after the wait.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExperimentPlan {
    pub groups: BTreeMap<String, usize>,
    pub rest: usize,
    pub wait_hours: u32,
    /// The decision's time (ms): as recorded, or as a start now would record it (the
    /// earliest: later while the test group still sends). The rest's quiet hours and caps
    /// are judged then.
    pub decide_at_ms: i64,
    /// Opens decide it (asked for): what that costs in trust.
    pub warning: Option<String>,
}

/// Why opens decide poorly (`plan` warns when an experiment asks for them).
pub const OPENS_WARNING: &str = "opens decide this experiment: Apple Mail Privacy Protection opens every email it delivers and image proxies open on their own schedule, so opens measure mail clients more than people; clicks are the default for that reason";

/// The guardrails `plan` applies: the campaign's (as recorded, or as its start would record
/// them), the stack's caps and quiet hours (SendEmail's), and the users' cap histories.
pub struct Guardrails<C> {
    pub campaign: CampaignGuardrails,
    pub caps: FrequencyCaps,
    pub quiet: Option<QuietHours>,
    pub fallback_zone: mailflow::domain::local_time::ZoneName,
    pub history: C,
    /// The campaign's experiment (as recorded, or as its start would record it).
    pub experiment: Option<mailflow::domain::experiment::Experiment>,
}

/// What local-time delivery would do with the emails that would be sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalTimePlan {
    pub local_time: String,
    pub send_date: String,
    pub fallback_zone: String,
    pub passed_time: &'static str,
    pub timezone_missing: u64,
    pub timezone_invalid: u64,
    /// Local time passed at the start: sent at once, or skipped (then not counted in
    /// `wouldSend`).
    pub passed_sent_now: u64,
    pub passed_skipped: u64,
    /// Local time passed at the start: held for the same time the next day (policy next-day).
    pub passed_next_day: u64,
    /// Local time before the campaign's window closed: the same time the next day.
    pub next_day_after_window: u64,
    /// Emails per send slot (its instant, the zones in it), in time order, with how long
    /// each takes at the effective rate and when its last email goes.
    pub slots: Vec<SlotLoad>,
    /// The slot with the most emails.
    pub busiest: Option<SlotLoad>,
    /// Slots whose last email goes more than 30 minutes after their local time.
    pub late: Vec<SlotLoad>,
    /// Slots whose last email would go after the campaign's deadline.
    pub past_deadline: Vec<SlotLoad>,
}

/// SendEmail environments from which `plan` warns: half of an account's default Lambda
/// concurrency, which every function shares.
const ENVIRONMENTS_WORTH_A_WARNING: u32 = 500;

/// How the stack would send: its rate, the SendEmail environments it runs in, and SES's
/// quota as read.
pub struct Sending {
    pub rate: SendRate,
    pub environment: Environment,
    /// CreateEmails' environment and the most environments it may run.
    pub composer: Composer,
    pub composers_ceiling: u32,
    pub quota: Result<SendQuota, QuotaUnknown>,
    /// The public URLs' reserved concurrency and the pick slots (RateControl's environment).
    pub public_urls: PublicUrls,
}

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

/// Emails of `would_send` beyond what SES's 24-hour quota has left now (0 when it fits or
/// has no limit).
pub fn over_24_hour_quota(would_send: usize, quota: &SendQuota) -> u64 {
    quota
        .left_24_hours()
        .map_or(0, |left| (would_send as f64 - left).max(0.0).ceil() as u64)
}

/// The plan as an operator reads it.
pub fn describe(plan: &Plan) -> String {
    let list = |m: &BTreeMap<&str, usize>| {
        m.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = format!(
        "{} (topic {}): audience {}, left out {} ({}); would send {} ({}); would skip {} ({}); would fail {} (address is not one mailbox)\n",
        plan.campaign_id,
        plan.topic,
        plan.audience,
        plan.excluded.total(),
        plan.excluded.describe(),
        plan.would_send,
        list(&plan.by_locale),
        plan.skipped.values().sum::<usize>(),
        list(&plan.skipped),
        plan.would_fail,
    );
    let seconds = plan.hours * 3600.0;
    let takes = match seconds {
        s if s < 60.0 => format!("{s:.0} s"),
        s if s < 3600.0 => format!("{:.0} min", s / 60.0),
        _ => format!("{:.1} h", plan.hours),
    };
    out.push_str(&format!(
        "at {}/s ({}; shared by {} SendEmail environments) the sends take {takes}; SES charges ${:.4} for them (the pipeline adds about 6 %)\n",
        plan.send_rate, plan.rate_source, plan.environments, plan.ses_cost_usd
    ));
    if let Some(line) = describe_guardrails(plan) {
        out.push_str(&line);
    }
    if plan.environments >= ENVIRONMENTS_WORTH_A_WARNING {
        out.push_str(&format!(
            "SendEmail would run {} environments at once (an account's Lambda concurrency is 1,000 for every function together unless raised): give SendEmail more memory (SendEmailMemorySize) and larger batches (EmailsBatchSize), docs/send-rate.md\n",
            plan.environments
        ));
    }
    if let Some(sizing) = plan.create_emails.filter(|c| c.capped()) {
        out.push_str(&format!(
            "CreateEmails needs {} environments to keep {}/s fed but may run {} (CreateEmailsMaxConcurrency): it, not the rate, would bound the campaign at about {:.0}/s; raise CreateEmailsMaxConcurrency (each environment holds up to MONGODB_MAX_POOL_SIZE MongoDB connections), CreateEmailsMemorySize or UsersBatchSize (docs/send-rate.md)\n",
            sizing.needed,
            plan.send_rate,
            sizing.environments,
            plan.send_rate * f64::from(sizing.environments) / f64::from(sizing.needed),
        ));
    }
    if plan.rate_item_takes_per_second > RATE_ITEM_TAKES_PER_SECOND {
        out.push_str(&format!(
            "the send-rate item would take {:.0} writes/s (batches of {}; DynamoDB allows one item 1,000, this stack plans for {RATE_ITEM_TAKES_PER_SECOND:.0}): set EmailsBatchSize to {} (docs/send-rate.md)\n",
            plan.rate_item_takes_per_second,
            plan.records_at_once,
            Environment::batch_for(plan.send_rate),
        ));
    }
    if let Some(urls) = &plan.public_urls {
        out.push_str(&describe_public_urls(urls, plan.send_rate));
    }
    match (&plan.ses_quota, &plan.ses_quota_unknown) {
        (Some(q), _) if plan.over_24_hour_quota > 0 => out.push_str(&format!(
            "SES 24-hour quota: {}; this campaign needs {} more than is left: SES will refuse them until the window rolls, and SendEmail holds them an hour at a time until it does (docs/send-rate.md)\n",
            q.describe_24_hours(),
            plan.over_24_hour_quota
        )),
        (Some(q), _) => out.push_str(&format!(
            "SES 24-hour quota: {}; the campaign fits\n",
            q.describe_24_hours()
        )),
        (None, Some(reason)) => out.push_str(&format!("SES quota not known ({reason})\n")),
        (None, None) => {}
    }
    if let Some(l) = &plan.local_time {
        out.push_str(&describe_local_time(l));
    }
    for sample in &plan.samples {
        out.push_str("\n--- sample ---\n");
        out.push_str(sample);
        out.push('\n');
    }
    out
}

/// Reserved environments from which `plan` says the account's concurrency must be raised:
/// an account has 1,000 unless raised, and Lambda keeps 100 of them unreserved.
const RESERVABLE_BY_DEFAULT: u32 = 900;

/// The public URLs' line: what each needs at the rate and has, and a warning for each short.
fn describe_public_urls(urls: &PublicUrlsCheck, rate: f64) -> String {
    let mut out = format!(
        "public URLs at {rate}/s with {JUNK_PER_SECOND:.0} junk requests/s each: Unsubscribe needs {} environments (UnsubscribeConcurrency {}), OpenContent {} (OpenContentConcurrency {})\n",
        urls.unsubscribe.needed,
        urls.unsubscribe_concurrency,
        urls.open_content.needed,
        urls.open_content_concurrency,
    );
    for short in urls.short() {
        out.push_str(&format!(
            "{} is {} but the model needs {} at {rate}/s (first opens at delivery, scanners, one-clicks and junk; docs/open-time-content.md, Capacity): beyond it Lambda answers 429, so images and one-click unsubscribes would fail; raise it\n",
            short.parameter, short.configured, short.needed
        ));
    }
    let reserved = urls.unsubscribe.needed + urls.open_content.needed;
    if reserved > RESERVABLE_BY_DEFAULT {
        out.push_str(&format!(
            "the public URLs need {reserved} reserved environments at {rate}/s: more than an account's default concurrency lets you reserve ({RESERVABLE_BY_DEFAULT} of 1,000); ask AWS to raise it first\n"
        ));
    }
    out
}

/// The local-time lines of the plan: the settings, the zones replaced, each slot (its UTC
/// instant, emails, zones), the busiest, and the late ones.
fn describe_local_time(l: &LocalTimePlan) -> String {
    let mut out = format!(
        "local time {} on {} in each user's zone (fallback {} for {} without a zone and {} with an unknown one); {} on the next day because their local time came before the window closed; local time already passed: {} sent at once, {} moved to the next day, {} skipped ({})\n",
        l.local_time, l.send_date, l.fallback_zone, l.timezone_missing, l.timezone_invalid, l.next_day_after_window, l.passed_sent_now, l.passed_next_day, l.passed_skipped, l.passed_time
    );
    for s in &l.slots {
        out.push_str(&format!(
            "  {} {:>7} emails, {:.0} s of sending, last at +{:.0} s  {}\n",
            s.slot,
            s.emails,
            s.seconds,
            s.finishes_after,
            s.zones.join(" ")
        ));
    }
    if let Some(b) = &l.busiest {
        out.push_str(&format!(
            "busiest slot {}: {} emails take {:.1} min at the effective rate\n",
            b.slot,
            b.emails,
            b.seconds / 60.0
        ));
    }
    if !l.past_deadline.is_empty() {
        out.push_str(&format!(
            "{} slots would still be sending after the campaign's deadline ({}): their users after it are recorded expired\n",
            l.past_deadline.len(),
            l.past_deadline.iter().map(|s| s.slot.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    if l.late.is_empty() {
        out.push_str("every slot finishes within 30 minutes of its local time\n");
    } else {
        out.push_str(&format!(
            "{} slots finish more than 30 minutes after their local time ({}): raise the send rate (and the SES quota) or accept the lateness\n",
            l.late.len(),
            l.late.iter().map(|s| s.slot.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    out
}

/// The guardrails' line: who they would hold back, and a deadline the sends would not meet.
fn describe_guardrails(plan: &Plan) -> Option<String> {
    let g = &plan.guardrails;
    let mut parts = Vec::new();
    if g.holdout_bp > 0 {
        parts.push(format!(
            "holdout {}.{:02} %: {} held out",
            g.holdout_bp / 100,
            g.holdout_bp % 100,
            g.held_out
        ));
    }
    if let Some(policy) = g.quiet_policy {
        parts.push(format!(
            "{} due in their quiet hours ({policy})",
            g.in_quiet_hours
        ));
    }
    if g.cap_exempt {
        parts.push("exempt from frequency caps".into());
    } else if g.capped > 0 {
        parts.push(format!(
            "{} held back by frequency caps if sent now",
            g.capped
        ));
    }
    let mut out = String::new();
    if !parts.is_empty() {
        out.push_str(&format!("guardrails: {}\n", parts.join("; ")));
    }
    if let Some(e) = &g.experiment {
        let groups: Vec<String> = e.groups.iter().map(|(v, n)| format!("{v} {n}")).collect();
        out.push_str(&format!(
            "experiment: test group {}; {} get the winner {} h after the test group's last email, from {} on (with local time, at their local time after that); their quiet hours and caps are counted then\n",
            groups.join(", "),
            e.rest,
            e.wait_hours,
            mailflow::domain::local_time::rfc3339_ms(e.decide_at_ms)
        ));
        if let Some(warning) = &e.warning {
            out.push_str(&format!("warning: {warning}\n"));
        }
    }
    if let (Some(deadline), Some(last)) = (g.deadline_ms, g.last_send_ms) {
        if g.past_deadline > 0 {
            let now = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
            let hours = |ms: i64| (ms - now) as f64 / 3_600_000.0;
            out.push_str(&format!(
                "the deadline is {:.1} h away and the last email would go in {:.1} h (each from when its user may go: now, their local time, after quiet hours, or the experiment's decision for the rest; then at {}/s): about {} users would be recorded expired (raise the rate, or give a later --deadline)\n",
                hours(deadline),
                hours(last),
                plan.send_rate,
                g.past_deadline
            ));
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_is_judged_when_it_gets_the_winner_not_at_the_start() {
        use mailflow::domain::guardrails::QuietHours;
        use mailflow::domain::local_time::{
            parse_date, zone, LocalTime, PassedTime, ZoneField, ZoneName,
        };
        let at = |raw: &str| {
            time::OffsetDateTime::parse(raw, &time::format_description::well_known::Rfc3339)
                .unwrap()
                .unix_timestamp()
                * 1000
        };
        let now = at("2026-12-01T12:00:00Z");
        let experiment = |wait: u32| {
            Experiment::parse(&format!(
                r#"{{"variants": [{{"name": "a"}}, {{"name": "b"}}], "testPercent": 20, "waitHours": {wait}}}"#
            ))
            .unwrap()
        };
        // Without local time: the decision 10 hours after the start, in quiet hours that are
        // not on at the start. The rest is judged then; the test group now.
        let quiet = QuietHours::parse("21:00-08:00", QuietPolicy::Defer).unwrap();
        let utc = zone("UTC").unwrap();
        let decision = decision_time(&experiment(10), None, 0, now);
        assert_eq!(decision, at("2026-12-01T22:00:00Z"));
        assert_eq!(goes_at(now, None, Some(decision)), Some((decision, false)));
        assert_eq!(goes_at(now, None, None), Some((now, false)));
        assert!(quiet.quiet_until(decision, &utc).is_some());
        assert!(quiet.quiet_until(now, &utc).is_none());
        // Quiet hours that defer hold the test group up to their length: the wait starts then.
        assert_eq!(
            decision_time(&experiment(10), None, quiet.length_ms(), now),
            decision + quiet.length_ms()
        );
        // A recorded decision is the one.
        let recorded = experiment(10).starting_at(now - 3_600_000);
        assert_eq!(
            decision_time(&recorded, None, 0, now),
            at("2026-12-01T21:00:00Z")
        );
        // With local time and passedTime skip: Tokyo's 09:00 has passed at noon UTC, so the
        // test group there is skipped, but the rest gets the winner at Tokyo's 09:00 after the
        // decision (3 hours after UTC-12's 09:00, 21:00 UTC).
        let delivery = LocalDelivery {
            local_time: "09:00".parse::<LocalTime>().unwrap(),
            send_date: parse_date("2026-12-01").unwrap(),
            fallback_zone: ZoneName::parse("Asia/Tokyo").unwrap(),
            passed_time: PassedTime::Skip,
            started_at_ms: now,
            window_until_ms: None,
        };
        let tokyo = ZoneField::Text("Asia/Tokyo".into());
        let decided = delivery.delivery(&tokyo).0;
        assert_eq!(decided, Delivery::Skip);
        assert_eq!(goes_at(now, Some(decided), None), None);
        let decision = decision_time(&experiment(3), Some(&delivery), 0, now);
        assert_eq!(decision, at("2026-12-02T00:00:00Z"));
        let tz = delivery.zone_for(&tokyo).0;
        let rest_at = Experiment::rest_goes_at(decision, Some(&delivery), &tz);
        assert_eq!(
            goes_at(now, Some(decided), Some(rest_at)),
            Some((at("2026-12-02T00:00:00Z"), true))
        );
    }

    #[test]
    fn the_plan_says_when_the_rate_item_would_take_too_many_writes() {
        let plan = |batch| {
            let environment = Environment {
                records_at_once: batch,
                memory_mb: 1_769,
            };
            describe(&Plan {
                send_rate: 20_000.0,
                records_at_once: batch,
                rate_item_takes_per_second: environment.takes_per_second(20_000.0),
                ..Plan::default()
            })
        };
        assert!(plan(10).contains(
            "the send-rate item would take 2000 writes/s (batches of 10; DynamoDB allows one item 1,000, this stack plans for 200): set EmailsBatchSize to 100"
        ), "{}", plan(10));
        assert!(!plan(100).contains("send-rate item"), "{}", plan(100));
        let crowded = describe(&Plan {
            send_rate: 20_000.0,
            environments: SendRate::configured(20_000.0).environments(&Environment::DEFAULT),
            ..Plan::default()
        });
        assert!(
            crowded.contains("SendEmail would run 998 environments at once"),
            "{crowded}"
        );
        let starved = describe(&Plan {
            send_rate: 20_000.0,
            create_emails: Some(composers_for(20_000.0, &Composer::DEFAULT, 5)),
            ..Plan::default()
        });
        assert!(
            starved.contains("CreateEmails needs 306 environments to keep 20000/s fed but may run 5 (CreateEmailsMaxConcurrency): it, not the rate, would bound the campaign at about 327/s"),
            "{starved}"
        );
        let sized = |rate: f64| {
            describe(&Plan {
                send_rate: rate,
                public_urls: Some(PublicUrls::DEFAULT.check(rate)),
                ..Plan::default()
            })
        };
        let default = sized(14.0);
        assert!(
            default.contains("public URLs at 14/s with 200 junk requests/s each: Unsubscribe needs 26 environments (UnsubscribeConcurrency 26), OpenContent 69 (OpenContentConcurrency 69)"),
            "{default}"
        );
        assert!(!default.contains("raise it"), "{default}");
        let busy = sized(100.0);
        assert!(
            busy.contains("OpenContentConcurrency is 69 but the model needs 235 at 100/s"),
            "{busy}"
        );
        assert!(
            busy.contains("UnsubscribeConcurrency is 26 but the model needs 29 at 100/s"),
            "{busy}"
        );
        assert!(!busy.contains("ask AWS"), "{busy}");
        assert!(sized(1000.0).contains("the public URLs need 1665 reserved environments at 1000/s"));
        let fed = describe(&Plan {
            send_rate: 20.0,
            create_emails: Some(composers_for(20.0, &Composer::DEFAULT, 5)),
            ..Plan::default()
        });
        assert!(!fed.contains("CreateEmails needs"), "{fed}");
    }

    #[test]
    fn held_users_count_against_the_deadline_from_when_they_go_not_from_now() {
        let hour = 3_600_000;
        let now = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
        // 200,000 now, the rest of an experiment (800,000) an hour before the deadline, at
        // 50/s: all of it would take 5.6 h from now, well within the 20 h, but the rest
        // takes 4.4 h from its release.
        let starts = BTreeMap::from([(now, 200_000), (now + 19 * hour, 800_000)]);
        let sends = sends_at_rate(&starts, 50.0, Some(now + 20 * hour));
        assert_eq!(sends.past_deadline, 800_000 - 3600 * 50);
        assert_eq!(sends.last_ms, Some(now + 19 * hour + 16_000 * 1000));
        let plan = Plan {
            send_rate: 50.0,
            would_send: 1_000_000,
            hours: 1_000_000.0 / 50.0 / 3600.0,
            guardrails: GuardrailsPlan {
                deadline_ms: Some(now + 20 * hour),
                last_send_ms: sends.last_ms,
                past_deadline: sends.past_deadline,
                ..Default::default()
            },
            ..Plan::default()
        };
        let text = describe(&plan);
        assert!(
            text.contains("the last email would go in 23.4 h")
                && text.contains("about 620000 users would be recorded expired"),
            "{text}"
        );
        // A local-time slot after the deadline is counted whole; one before it is not.
        let slots = BTreeMap::from([(now + hour, 100), (now + 3 * hour, 100)]);
        let sends = sends_at_rate(&slots, 50.0, Some(now + 2 * hour));
        assert_eq!(sends.past_deadline, 100);
        assert_eq!(sends_at_rate(&slots, 50.0, None).past_deadline, 0);
        // Sends that end before the deadline warn of nothing.
        let fits = sends_at_rate(&starts, 50.0, Some(now + 30 * hour));
        assert_eq!(fits.past_deadline, 0);
    }

    #[test]
    fn an_unlimited_24_hour_quota_fits_every_campaign() {
        let quota = |max: f64| SendQuota {
            max_send_rate: 14.0,
            max_24_hour_send: max,
            sent_last_24_hours: 49_500.0,
        };
        // SES says -1 for no limit.
        let unlimited = quota(-1.0);
        assert_eq!(over_24_hour_quota(1_000_000, &unlimited), 0);
        assert_eq!(over_24_hour_quota(1_000, &quota(50_000.0)), 500);
        let described = |q: SendQuota, would_send| {
            describe(&Plan {
                would_send,
                over_24_hour_quota: over_24_hour_quota(would_send, &q),
                ses_quota: Some(q),
                ..Plan::default()
            })
        };
        let fits = described(unlimited, 1_000_000);
        assert!(
            fits.contains("SES 24-hour quota: unlimited (49500 sent); the campaign fits"),
            "{fits}"
        );
        let over = described(quota(50_000.0), 1_000);
        assert!(
            over.contains(
                "SES 24-hour quota: 49500 of 50000 used; this campaign needs 500 more than is left"
            ),
            "{over}"
        );
    }
}

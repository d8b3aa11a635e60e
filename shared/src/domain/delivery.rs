//! When and whether a user gets a campaign's email: the one rule GetUsers places each user
//! by, SendEmail asks again at the send (quiet hours then, the holdout), and `mailctl plan`
//! predicts a campaign with. From the user's facts (their zone field, whether they are the
//! rest of an A/B experiment waiting for its decision), the campaign's rules (local time and
//! its passed-time policy, quiet hours, the holdout) and now, it says where the user goes
//! (now, with a short SQS delay, held for a slot, or never) and what to count. Caps and the
//! deadline's fresh read are the callers' (they read stores).

use super::experiment::{Assignment, Experiment};
use super::guardrails::{held_out, QuietHours, QuietPolicy};
use super::local_time::{
    Delivery, LocalDelivery, LocalTimeCounts, ZoneField, ZoneName, ZoneSource,
};
use jiff::tz::TimeZone;

/// A user due within this of now is enqueued with an SQS delay instead of being held in the
/// waiting room: SQS's longest delay (15 minutes), so a slot's holds are all stored before
/// its release can fire.
pub const DELAY_WITHIN_MS: i64 = 15 * 60 * 1000;

/// What decides when a campaign's users get their email.
#[derive(Clone, Copy, Debug)]
pub struct Rules<'a> {
    /// Local-time delivery (None: everyone may go now).
    pub local_time: Option<&'a LocalDelivery>,
    /// The stack's quiet hours (`QUIET_HOURS`, `QUIET_HOURS_POLICY`).
    pub quiet_hours: Option<QuietHours>,
    /// The zone of a user without a usable one (`FALLBACK_TIME_ZONE`, or local time's own).
    pub fallback_zone: &'a ZoneName,
    /// The campaign's holdout, in basis points: recorded held_out by SendEmail, never sent.
    pub holdout_bp: u32,
}

/// What is known of one user.
#[derive(Clone, Copy, Debug)]
pub struct Recipient<'a> {
    pub campaign_id: &'a str,
    pub user_id: &'a str,
    pub zone: &'a ZoneField,
    /// The rest of an A/B experiment not decided yet: they go with the winner, not before
    /// this instant (`ExperimentView::group`).
    pub rest_until_ms: Option<i64>,
}

/// Where a user goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// On the users queue now. `slot_late_ms`: a local-time user whose instant is now or
    /// passed within the start grace (on time), by how much.
    Now { slot_late_ms: Option<i64> },
    /// Due within `DELAY_WITHIN_MS`, at this instant: enqueued with an SQS delay.
    Delayed(i64),
    /// Held in the waiting room for this instant's release.
    Slot(i64),
    /// Their local time passed, and the policy says skip.
    Never,
}

/// What local time's passed-time policy did with a user (the rest of an experiment is not
/// counted here: they go after the decision, not by the start's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passed {
    SentNow,
    Skipped,
    NextDay,
    /// Their local time came before the window closed: the next day's.
    AfterWindow,
}

/// Quiet hours at the instant a user would go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiet {
    /// Moved to their end, this instant (policy defer).
    Deferred(i64),
    /// Recorded quiet_hours at the send, never sent (policy skip).
    Skipped,
}

/// The rule's answer for one user.
#[derive(Clone, Debug)]
pub struct Decision {
    pub place: Place,
    /// The zone their quiet hours and calendar-day caps are read in.
    pub tz: TimeZone,
    /// The zone's name as the queue message carries it to SendEmail.
    pub zone_name: Option<String>,
    /// With local time: where their zone came from.
    pub zone_source: Option<ZoneSource>,
    pub passed: Option<Passed>,
    pub quiet: Option<Quiet>,
    /// The rest of an experiment, held for its decision.
    pub rest: bool,
    /// In the campaign's holdout.
    pub held_out: bool,
}

impl Decision {
    /// When the email may go (None: never): now, or its place's instant.
    pub fn goes_at(&self, now_ms: i64) -> Option<i64> {
        match self.place {
            Place::Now { .. } => Some(now_ms),
            Place::Delayed(at) | Place::Slot(at) => Some(at.max(now_ms)),
            Place::Never => None,
        }
    }

    /// Whether it is sent at all, as far as the rule knows (caps and standing aside).
    pub fn sent(&self) -> bool {
        !self.held_out && self.place != Place::Never && self.quiet != Some(Quiet::Skipped)
    }

    /// Adds this user to a segment's counts, as `status` and the summaries show them.
    pub fn count(&self, counts: &mut LocalTimeCounts) {
        if let Some(source) = self.zone_source {
            counts.count_zone(source);
        }
        match self.passed {
            Some(Passed::SentNow) => counts.passed_sent_now += 1,
            Some(Passed::Skipped) => counts.passed_skipped += 1,
            Some(Passed::NextDay) => counts.passed_next_day += 1,
            Some(Passed::AfterWindow) => counts.next_day_after_window += 1,
            None => {}
        }
        if let Some(Quiet::Deferred(_)) = self.quiet {
            counts.quiet_deferred += 1;
        }
        counts.experiment_held += u64::from(self.rest);
        match self.place {
            Place::Now {
                slot_late_ms: Some(_),
            } => counts.due_now += 1,
            Place::Delayed(_) => counts.delayed += 1,
            Place::Slot(at) => *counts.waiting.entry(at).or_default() += 1,
            Place::Now { slot_late_ms: None } | Place::Never => {}
        }
    }
}

/// When and whether `user` gets the campaign's email, decided at `now_ms`. A user whose time
/// falls in their quiet hours waits for their end (policy defer; policy skip is SendEmail's
/// to record, at the send). The rest of an experiment waits for its decision (at their
/// local time after it, with local time), always in the waiting room, whose release gives
/// them the winner.
pub fn decide(rules: &Rules, user: &Recipient, now_ms: i64) -> Decision {
    let held_out =
        rules.holdout_bp > 0 && held_out(user.campaign_id, user.user_id, rules.holdout_bp);
    let rest = user.rest_until_ms.is_some();
    let mut decision = Decision {
        place: Place::Now { slot_late_ms: None },
        tz: TimeZone::UTC,
        zone_name: None,
        zone_source: None,
        passed: None,
        quiet: None,
        rest,
        held_out,
    };
    let Some((mut at_ms, on_a_slot)) = own_time(rules, user, now_ms, &mut decision) else {
        return decision;
    };
    if let Some(until) = user.rest_until_ms.filter(|until| at_ms < *until) {
        at_ms = Experiment::rest_goes_at(until, rules.local_time, &decision.tz);
    }
    decision.quiet = quiet_at(rules.quiet_hours, &decision.tz, at_ms.max(now_ms));
    if let Some(Quiet::Deferred(until)) = decision.quiet {
        at_ms = until;
    }
    let wait_ms = at_ms - now_ms;
    decision.place = if rest {
        // Held even when near: only the release lets them go with the winner (a user held
        // within 15 minutes of it is found by its sweep, if not by the release).
        Place::Slot(at_ms)
    } else if wait_ms <= 0 && !on_a_slot {
        Place::Now { slot_late_ms: None }
    } else if wait_ms <= 0 {
        // Its time is now (or passed within the start grace): on time.
        Place::Now {
            slot_late_ms: Some(-wait_ms),
        }
    } else if wait_ms <= DELAY_WITHIN_MS {
        Place::Delayed(at_ms)
    } else {
        Place::Slot(at_ms)
    };
    decision
}

/// When the user's own time is, before the experiment's wait and quiet hours: now, or their
/// local time's instant (and whether that is a slot); None when that already settles it
/// (no rule to apply, or their local time passed and the policy skips). Sets the zone, its
/// source and the passed-time outcome on `decision`.
fn own_time(
    rules: &Rules,
    user: &Recipient,
    now_ms: i64,
    decision: &mut Decision,
) -> Option<(i64, bool)> {
    let rest = decision.rest;
    match rules.local_time {
        None => {
            let own = user.zone.own_zone();
            decision.zone_name = own
                .as_ref()
                .and_then(|tz| tz.iana_name())
                .map(str::to_owned);
            decision.tz = own.unwrap_or_else(|| rules.fallback_zone.zone());
            if rules.quiet_hours.is_none() && !rest {
                return None;
            }
            decision.zone_name = decision.tz.iana_name().map(str::to_owned);
            Some((now_ms, false))
        }
        Some(local) => {
            let (decided, source) = local.delivery(user.zone);
            decision.zone_source = Some(source);
            decision.tz = local.zone_for(user.zone).0;
            decision.zone_name = decision.tz.iana_name().map(str::to_owned);
            match decided {
                // The rest of an experiment goes at its local time after the decision, which
                // has not passed: a zone passed at the start is no reason to skip it days
                // later.
                Delivery::Skip if !rest => {
                    decision.passed = Some(Passed::Skipped);
                    decision.place = Place::Never;
                    None
                }
                // Not in the lateness figures (`lateMs` is how late the pipeline let a user
                // go, a health signal): counted as passedSentNow instead.
                Delivery::Now | Delivery::Skip => {
                    decision.passed = (!rest).then_some(Passed::SentNow);
                    Some((now_ms, false))
                }
                Delivery::NextDay(at) | Delivery::AfterWindow(at) | Delivery::At(at) => {
                    decision.passed = match decided {
                        _ if rest => None,
                        Delivery::NextDay(_) => Some(Passed::NextDay),
                        Delivery::AfterWindow(_) => Some(Passed::AfterWindow),
                        _ => None,
                    };
                    Some((at, true))
                }
            }
        }
    }
}

/// What quiet hours say of an email going at `at_ms` in `tz` (None: not quiet there, or
/// none set). SendEmail asks again right before each SES call: the wait for a send slot, or
/// a throttled send's retries, may have carried the email into them.
pub fn quiet_at(quiet_hours: Option<QuietHours>, tz: &TimeZone, at_ms: i64) -> Option<Quiet> {
    let quiet = quiet_hours?;
    let until = quiet.quiet_until(at_ms, tz)?;
    Some(match quiet.policy {
        QuietPolicy::Defer => Quiet::Deferred(until),
        QuietPolicy::Skip => Quiet::Skipped,
    })
}

/// A campaign's experiment as a run sees it: who is in the test group, and whether the rest
/// goes with a winner or waits for the decision.
#[derive(Clone, Debug)]
pub struct ExperimentView<'a> {
    pub experiment: &'a Experiment,
    /// The decided winner (None: the rest waits for the decision).
    pub winner: Option<&'a str>,
    /// When the rest is let go without a winner yet: the decision's time, or later while the
    /// test group still sends.
    pub decide_at_ms: Option<i64>,
}

impl ExperimentView<'_> {
    /// A user's variant, or the instant they wait for: the test group goes in its variants
    /// as decided for them (now, or at their local time); the rest with the winner, or held
    /// until the decision (`decide` moves them to it, or to their local time after it, and
    /// applies quiet hours there).
    pub fn group(&self, campaign_id: &str, user_id: &str) -> (Option<String>, Option<i64>) {
        match self.experiment.assign(campaign_id, user_id) {
            Assignment::Test(i) => (Some(self.experiment.variants[i].name.clone()), None),
            Assignment::Rest => match (self.winner, self.decide_at_ms) {
                (Some(winner), _) => (Some(winner.to_owned()), None),
                // Released with the winner, never before it is decided.
                (None, Some(decide_at)) => (None, Some(decide_at)),
                // Recorded without a decision time (never by GetUsers): the default.
                (None, None) => (Some(self.experiment.default_name().to_owned()), None),
            },
        }
    }

    /// The decision's instant has passed and this run knows no winner: the rest must not be
    /// held for it (each would wait for a slot of its own instant).
    pub fn awaits_decision(&self, now_ms: i64) -> bool {
        self.winner.is_none() && self.decide_at_ms.is_some_and(|at| at <= now_ms)
    }
}

#[cfg(test)]
mod tests;

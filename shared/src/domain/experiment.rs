//! A/B experiments (docs/experiments.md): up to five variants of a campaign's subject and/or
//! template, each a share of a test group; after a wait the variant people clicked most
//! goes to the rest of the audience. Pure: who is in which group (`Experiment::assign`), the
//! decision rule (`decide`) and the click rate's interval (`wilson`), with their numerics
//! in `decision`. GetUsers holds the
//! rest until the decision, CreateEmails renders each user's variant, SendEmail records it
//! on the send record, SesEvents and OpenContent note who clicked as a person.

use super::campaign::CampaignId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub const MAX_VARIANTS: usize = 5;
const HOUR_MS: i64 = 3_600_000;
/// The longest wait: a week (held users and their release schedules outlive it easily).
pub const MAX_WAIT_HOURS: u32 = 168;
/// Klaviyo's threshold for a winner (docs/experiments.md).
pub const DEFAULT_WIN_PROBABILITY: u32 = 90;
/// Klaviyo's minimum of recipients per variant before a winner may be named.
pub const DEFAULT_MIN_DELIVERED: u64 = 500;
/// People who clicked (or opened, with `metric: opens`) over the whole test group before a
/// winner may be named. With few or none, the uniform prior decides: at zero clicks the
/// variant with the fewest delivered emails looks best (1:10 shares give it 90.9 %).
pub const DEFAULT_MIN_PEOPLE: u64 = 30;

/// What decides the winner: unique human clicks per delivered email (the default), or
/// unique human opens (Apple Mail Privacy Protection makes them unreliable: `plan` warns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    #[default]
    Clicks,
    Opens,
}

/// One variant: a name, its share of the test group, and what it changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// Relative to the other variants' (1 each by default: an even split).
    #[serde(default = "one")]
    pub share: u32,
    /// The subject per locale (MiniJinja, the variables of `subject.txt`); None: the
    /// templates' own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subject: BTreeMap<String, String>,
    /// One of the definition's bodies (`templates/<lang>/<variant>/`); None: its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

fn one() -> u32 {
    1
}

/// An experiment as the operator writes it (`mailctl run --experiment FILE`) and as the
/// campaigns table keeps it, fixed when the campaign first starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Experiment {
    pub variants: Vec<Variant>,
    /// The share of the audience in the test group (1-100 %); the rest gets the winner.
    pub test_percent: u32,
    /// Hours from the test group's last email to the decision.
    pub wait_hours: u32,
    #[serde(default)]
    pub metric: Metric,
    /// Delivered emails every variant needs before one may win.
    #[serde(default = "default_min_delivered")]
    pub min_delivered: u64,
    /// People who clicked (opened, with `metric: opens`) over the test group before one
    /// may win.
    #[serde(default = "default_min_people")]
    pub min_people: u64,
    /// How sure the rule must be that the winner is the best (percent).
    #[serde(default = "default_win_probability")]
    pub win_probability: u32,
    /// The variant the rest gets when none wins (None: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_variant: Option<String>,
    /// When the decision is due (ms): the test group's last email plus the wait, set by
    /// GetUsers at the first start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide_at_ms: Option<i64>,
    /// The campaign delivers at local time: the rest goes at each user's local time after
    /// the decision (set by GetUsers), never all at once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local_time: bool,
}

fn default_min_delivered() -> u64 {
    DEFAULT_MIN_DELIVERED
}

fn default_min_people() -> u64 {
    DEFAULT_MIN_PEOPLE
}

fn default_win_probability() -> u32 {
    DEFAULT_WIN_PROBABILITY
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExperimentError {
    #[error("experiment: {0}. See docs/experiments.md for the file's fields")]
    Invalid(String),
    #[error("{campaign}'s deadline {deadline} comes before the rest of its audience can be sent (the experiment decides at {decide_at}; the rest may go until {rest_by}): they would expire unsent; give a later --deadline (or, at a first start, a shorter waitHours)")]
    DeadlineFirst {
        campaign: CampaignId,
        deadline: String,
        decide_at: String,
        rest_by: String,
    },
    #[error("{0}: an experiment is decided by the people who click, and without consent to per-recipient tracking (TrackOpensAndClicks false, the default) no click is noted on a send record, so none could be decided; deploy with TrackOpensAndClicks=true, or start the campaign without --experiment")]
    NoConsent(CampaignId),
    #[error("{0} started without an experiment: an experiment is recorded only with a campaign's first start; start it without --experiment, or use another campaign id")]
    Late(CampaignId),
    #[error("{campaign} started with another experiment: an experiment is fixed when the campaign first starts (recorded: {recorded}); start it without --experiment, or use another campaign id")]
    Changed {
        campaign: CampaignId,
        recorded: String,
    },
}

fn invalid(what: impl Into<String>) -> ExperimentError {
    ExperimentError::Invalid(what.into())
}

/// Which group a user is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assignment {
    /// In the test group, sent this variant (its index) at once.
    Test(usize),
    /// The rest of the audience: sent the winner once it is decided.
    Rest,
}

impl Experiment {
    /// The experiment a JSON document describes, checked: 2-5 variants with distinct names,
    /// the limits of each number. What its subjects and bodies need depends on the campaign's
    /// templates (`definition::render::check_experiment`, at GetUsers' first start).
    pub fn parse(json: &str) -> Result<Self, ExperimentError> {
        let experiment: Self =
            serde_json::from_str(json).map_err(|e| invalid(format!("not read: {e}")))?;
        experiment.check()?;
        Ok(experiment)
    }

    pub fn check(&self) -> Result<(), ExperimentError> {
        let n = self.variants.len();
        if !(2..=MAX_VARIANTS).contains(&n) {
            return Err(invalid(format!(
                "{n} variants; an experiment has 2 to {MAX_VARIANTS}"
            )));
        }
        for (i, v) in self.variants.iter().enumerate() {
            let name_ok = !v.name.is_empty()
                && v.name.len() <= 32
                && v.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !name_ok {
                return Err(invalid(format!(
                    "variant name {:?} is not 1-32 of a-z, 0-9 and -",
                    v.name
                )));
            }
            if self.variants[..i].iter().any(|o| o.name == v.name) {
                return Err(invalid(format!("two variants are named {:?}", v.name)));
            }
            if !(1..=100).contains(&v.share) {
                return Err(invalid(format!(
                    "variant {}: share {} is not 1 to 100",
                    v.name, v.share
                )));
            }
        }
        if !(1..=100).contains(&self.test_percent) {
            return Err(invalid(format!(
                "testPercent {} is not 1 to 100",
                self.test_percent
            )));
        }
        if !(1..=MAX_WAIT_HOURS).contains(&self.wait_hours) {
            return Err(invalid(format!(
                "waitHours {} is not 1 to {MAX_WAIT_HOURS}",
                self.wait_hours
            )));
        }
        if !(1..=1_000_000).contains(&self.min_delivered) {
            return Err(invalid(format!(
                "minDelivered {} is not 1 to 1000000",
                self.min_delivered
            )));
        }
        if !(1..=1_000_000).contains(&self.min_people) {
            return Err(invalid(format!(
                "minPeople {} is not 1 to 1000000",
                self.min_people
            )));
        }
        if !(51..=99).contains(&self.win_probability) {
            return Err(invalid(format!(
                "winProbability {} is not 51 to 99 (percent: above an even chance)",
                self.win_probability
            )));
        }
        if let Some(d) = &self.default_variant {
            if self.index_of(d).is_none() {
                return Err(invalid(format!("defaultVariant {d:?} is not a variant")));
            }
        }
        Ok(())
    }

    /// As GetUsers records it at the first start: the decision due `wait_hours` after the
    /// test group's last email is let go (`now_ms`: the start, or the last zone's local time
    /// and quiet hours), on a whole second (a one-time schedule's `at()` has no finer unit).
    /// The earliest it is made: `due_at` moves it later while the test group still sends.
    pub fn starting_at(mut self, now_ms: i64) -> Self {
        self.decide_at_ms = Some(self.after_wait(now_ms));
        self
    }

    /// When the whole test group has been let go, for a start at `now_ms`: at once, or with
    /// local time at the last zone's (`latest_slot`), then after quiet hours that defer
    /// (`quiet_ms`, their length). GetUsers dates the decision from it (`starting_at`);
    /// `plan` judges the rest's quiet hours and caps at that decision.
    pub fn test_group_let_go_by(latest_slot: Option<i64>, quiet_ms: i64, now_ms: i64) -> i64 {
        latest_slot.map_or(now_ms, |last| last.max(now_ms)) + quiet_ms
    }

    /// When a user of the rest gets the winner: at the decision (`decide_at_ms`), or with
    /// local time at their first local time at or after it (passed or not at the start).
    pub fn rest_goes_at(
        decide_at_ms: i64,
        delivery: Option<&super::local_time::LocalDelivery>,
        tz: &jiff::tz::TimeZone,
    ) -> i64 {
        delivery.map_or(decide_at_ms, |d| d.next_at_or_after(tz, decide_at_ms))
    }

    /// `wait_hours` after `at_ms`, on a whole second.
    fn after_wait(&self, at_ms: i64) -> i64 {
        let at = at_ms + i64::from(self.wait_hours) * HOUR_MS;
        (at + 999).div_euclid(1000) * 1000
    }

    /// When the decision may be made on these results: the recorded instant, or
    /// `wait_hours` after the test group's last email if that is later (the test group goes
    /// at the send rate: 200,000 at 14/s take 4 hours, a whole wait). None: no decision
    /// time recorded.
    pub fn due_at(&self, tallies: &BTreeMap<String, Tally>) -> Option<i64> {
        let decide_at = self.decide_at_ms?;
        let last = tallies.values().filter_map(|t| t.last_sent_ms).max();
        Some(last.map_or(decide_at, |last| decide_at.max(self.after_wait(last))))
    }

    /// The experiment as a later start gave it is the one recorded (its decision time
    /// aside), or refused.
    pub fn settle(&self, given: &Self, campaign: &CampaignId) -> Result<(), ExperimentError> {
        let given = Self {
            decide_at_ms: self.decide_at_ms,
            local_time: self.local_time,
            ..given.clone()
        };
        if &given == self {
            Ok(())
        } else {
            Err(ExperimentError::Changed {
                campaign: campaign.clone(),
                recorded: serde_json::to_string(self).unwrap_or_default(),
            })
        }
    }

    /// A deadline the rest could not be sent before is refused: the decision, then (with
    /// local time) up to a day for every zone's local time, then `quiet_ms` of quiet hours.
    pub fn check_deadline(
        &self,
        campaign: &CampaignId,
        deadline_ms: Option<i64>,
        quiet_ms: i64,
    ) -> Result<(), ExperimentError> {
        let (Some(deadline), Some(decide_at)) = (deadline_ms, self.decide_at_ms) else {
            return Ok(());
        };
        let local_ms = if self.local_time { 25 * HOUR_MS } else { 0 };
        let rest_by = decide_at + local_ms + quiet_ms;
        if deadline > rest_by {
            return Ok(());
        }
        let at = |ms| super::local_time::rfc3339_ms(ms);
        Err(ExperimentError::DeadlineFirst {
            campaign: campaign.clone(),
            deadline: at(deadline),
            decide_at: at(decide_at),
            rest_by: at(rest_by),
        })
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.variants.iter().position(|v| v.name == name)
    }

    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// The variant the rest gets when none wins.
    pub fn default_index(&self) -> usize {
        self.default_variant
            .as_deref()
            .and_then(|d| self.index_of(d))
            .unwrap_or(0)
    }

    pub fn default_name(&self) -> &str {
        self.variants
            .get(self.default_index())
            .map_or("", |v| v.name.as_str())
    }

    /// The user's group, from SHA-256 of (campaign, user) under its own label: the same on
    /// every run and resend, and independent of the holdout's draw (another hash), so the
    /// held-out are spread over every group alike.
    pub fn assign(&self, campaign_id: &str, user_id: &str) -> Assignment {
        let digest = Sha256::new()
            .chain_update(b"experiment\0")
            .chain_update(campaign_id.as_bytes())
            .chain_update([0u8])
            .chain_update(user_id.as_bytes())
            .finalize();
        let draw = |at: usize| u64::from_be_bytes(digest[at..at + 8].try_into().expect("8"));
        if draw(0) % 10_000 >= u64::from(self.test_percent) * 100 || self.variants.is_empty() {
            return Assignment::Rest;
        }
        let total: u64 = self.variants.iter().map(|v| u64::from(v.share)).sum();
        let mut point = draw(8) % total.max(1);
        for (i, v) in self.variants.iter().enumerate() {
            if point < u64::from(v.share) {
                return Assignment::Test(i);
            }
            point -= u64::from(v.share);
        }
        Assignment::Test(self.variants.len() - 1)
    }
}

mod decision;

pub use decision::{decide, probability_best, wilson, DecidedBy, Decision, Tally};

#[cfg(test)]
mod tests;

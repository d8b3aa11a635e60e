//! A campaign's A/B experiment (docs/experiments.md), as `plan` and `status` show it. The
//! plan: who would get which variant now and who the winner later. The status: each
//! variant's sent, delivered, people who clicked (and opened), the rate with its 95 %
//! interval and its probability of being the best now; the decision once made, or what the
//! rule would say now.

use crate::format::format_ms;
use mailflow::adapters::sends::{experiment_tallies, SendRecord};
use mailflow::domain::experiment::{self, Decision, Experiment, Metric};
use serde::Serialize;
use std::collections::BTreeMap;

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

impl ExperimentPlan {
    /// The experiment's groups, nobody counted yet.
    pub fn of(e: &Experiment) -> Self {
        ExperimentPlan {
            groups: e.variants.iter().map(|v| (v.name.clone(), 0)).collect(),
            wait_hours: e.wait_hours,
            warning: (e.metric == Metric::Opens).then(|| OPENS_WARNING.to_owned()),
            ..Default::default()
        }
    }
}

/// Why opens decide poorly (`plan` warns when an experiment asks for them).
pub const OPENS_WARNING: &str = "opens decide this experiment: Apple Mail Privacy Protection opens every email it delivers and image proxies open on their own schedule, so opens measure mail clients more than people; clicks are the default for that reason";

impl ExperimentPlan {
    /// The plan's experiment lines: the groups, when the rest gets the winner, the warning.
    pub fn describe(&self) -> String {
        let e = self;
        let groups: Vec<String> = e.groups.iter().map(|(v, n)| format!("{v} {n}")).collect();
        let mut out = format!(
            "experiment: test group {}; {} get the winner {} h after the test group's last email, from {} on (with local time, at their local time after that); their quiet hours and caps are counted then\n",
            groups.join(", "),
            e.rest,
            e.wait_hours,
            mailflow::domain::local_time::rfc3339_ms(e.decide_at_ms)
        );
        if let Some(warning) = &e.warning {
            out.push_str(&format!("warning: {warning}\n"));
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExperimentStatus {
    pub metric: Metric,
    pub test_percent: u32,
    /// When the decision is due (ms): the recorded time, or later while the test group's
    /// last email is more recent than the wait.
    pub decide_at_ms: Option<i64>,
    pub min_delivered: u64,
    pub min_people: u64,
    pub win_probability: u32,
    pub variants: Vec<VariantStatus>,
    /// The recorded decision (None: not decided yet).
    pub decision: Option<Decision>,
    /// While undecided: what the rule would say on the results so far.
    pub would_decide: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VariantStatus {
    pub name: String,
    pub share: u32,
    pub sent: u64,
    pub delivered: u64,
    pub human_clicks: u64,
    pub human_opens: u64,
    /// The metric per delivered email (None: nothing delivered).
    pub rate: Option<f64>,
    /// Its 95 % Wilson interval.
    pub interval: Option<(f64, f64)>,
    /// Its probability of being the best on the results so far (percent).
    pub win_probability: f64,
}

/// The experiment's status from the campaign's records at `now_ms`.
pub fn status(
    experiment: &Experiment,
    decision: Option<&Decision>,
    records: &[SendRecord],
    now_ms: i64,
) -> ExperimentStatus {
    let tallies = experiment_tallies(records, experiment);
    let now = experiment::decide(experiment, &tallies, None, now_ms);
    let variants = experiment
        .variants
        .iter()
        .map(|v| {
            let t = tallies.get(&v.name).copied().unwrap_or_default();
            let successes = t.successes(experiment.metric);
            VariantStatus {
                name: v.name.clone(),
                share: v.share,
                sent: t.sent,
                delivered: t.delivered,
                human_clicks: t.human_clicks,
                human_opens: t.human_opens,
                rate: (t.delivered > 0).then(|| successes as f64 / t.delivered as f64),
                interval: experiment::wilson(successes, t.delivered),
                win_probability: f64::from(now.win_probability_bp[&v.name]) / 100.0,
            }
        })
        .collect();
    ExperimentStatus {
        metric: experiment.metric,
        test_percent: experiment.test_percent,
        decide_at_ms: experiment.due_at(&tallies),
        min_delivered: experiment.min_delivered,
        min_people: experiment.min_people,
        win_probability: experiment.win_probability,
        variants,
        would_decide: decision.is_none().then(|| now.reason.clone()),
        decision: decision.cloned(),
    }
}

impl ExperimentStatus {
    /// The lines `status` prints.
    pub fn describe(&self) -> String {
        let metric = match self.metric {
            Metric::Clicks => "people who clicked",
            Metric::Opens => "people who opened",
        };
        let mut out = format!(
            "  experiment: {} % test group, decided by {metric} per delivered email (a win above {} % with at least {} delivered per variant and {} people in the test group), due {}\n",
            self.test_percent,
            self.win_probability,
            self.min_delivered,
            self.min_people,
            self.decide_at_ms
                .map_or("?".into(), |at| format_ms(at.max(0) as u64)),
        );
        for v in &self.variants {
            let rate = match (v.rate, v.interval) {
                (Some(rate), Some((lo, hi))) => format!(
                    "{:.2} % (95 % interval {:.2}-{:.2} %)",
                    rate * 100.0,
                    lo * 100.0,
                    hi * 100.0
                ),
                _ => "no delivered email yet".into(),
            };
            out.push_str(&format!(
                "    {}: {} sent, {} delivered, {} clicked, {} opened | rate {rate} | best with probability {:.1} %\n",
                v.name, v.sent, v.delivered, v.human_clicks, v.human_opens, v.win_probability
            ));
        }
        match (&self.decision, &self.would_decide) {
            (Some(d), _) => out.push_str(&format!(
                "    winner {} ({:?}), decided {}: {}\n",
                d.winner,
                d.by,
                format_ms(d.decided_at_ms.max(0) as u64),
                d.reason
            )),
            (None, Some(now)) => {
                out.push_str(&format!("    not decided yet; the rule now says: {now}\n"))
            }
            (None, None) => {}
        }
        out
    }
}

//! The decision: each variant's results (`Tally`), the rule that picks the winner on them
//! (`decide`), and its numerics (the probability each variant is the best, the Wilson
//! interval of a rate).

use super::{Experiment, Metric, Variant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One variant's results, from its send records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    pub sent: u64,
    pub delivered: u64,
    /// People who clicked (scanners and clicks at delivery left out), each once.
    pub human_clicks: u64,
    /// People who opened (image proxies and scanners left out), each once.
    pub human_opens: u64,
    /// When the variant's last email was sent or claimed (ms): the wait counts from the
    /// test group's last (None: none yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sent_ms: Option<i64>,
}

impl Tally {
    /// Successes of the metric, capped by the delivered (an event may arrive before its
    /// delivery's).
    pub fn successes(&self, metric: Metric) -> u64 {
        match metric {
            Metric::Clicks => self.human_clicks,
            Metric::Opens => self.human_opens,
        }
        .min(self.delivered)
    }
}

/// How the winner was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecidedBy {
    /// The rule named it.
    Rule,
    /// No variant won: the default goes.
    Default,
    /// An operator picked it (`mailctl experiment pick --variant`).
    Hand,
}

/// The decision, recorded once on the campaign (the first write wins).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub winner: String,
    pub by: DecidedBy,
    /// Why, in words (`status` prints it).
    pub reason: String,
    pub decided_at_ms: i64,
    /// Each variant's probability of being the best, in basis points.
    pub win_probability_bp: BTreeMap<String, u32>,
    /// The results it was decided on.
    pub tallies: BTreeMap<String, Tally>,
}

/// The rule (docs/experiments.md): each variant's rate of the metric per delivered email
/// has the posterior Beta(1 + successes, 1 + failures) (a uniform prior); the probability
/// that a variant is the best of all is computed by numerical integration (Evan Miller's
/// closed form for two variants, generalised). A variant wins when every variant has
/// `min_delivered` delivered emails, the test group has `min_people` people who clicked
/// (opened) and its probability is above `win_probability`;
/// otherwise the default goes. `picked`: an operator's choice, recorded as it is.
pub fn decide(
    experiment: &Experiment,
    tallies: &BTreeMap<String, Tally>,
    picked: Option<&str>,
    now_ms: i64,
) -> Decision {
    let tally = |v: &Variant| tallies.get(&v.name).copied().unwrap_or_default();
    let posteriors: Vec<(f64, f64)> = experiment
        .variants
        .iter()
        .map(|v| {
            let t = tally(v);
            let s = t.successes(experiment.metric);
            (1.0 + s as f64, 1.0 + (t.delivered - s) as f64)
        })
        .collect();
    let p_best = probability_best(&posteriors);
    let win_probability_bp = experiment
        .variants
        .iter()
        .zip(&p_best)
        .map(|(v, p)| (v.name.clone(), (p * 10_000.0).round() as u32))
        .collect();
    let described = || {
        experiment
            .variants
            .iter()
            .zip(&p_best)
            .map(|(v, p)| format!("{} {:.1} %", v.name, p * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let default = experiment.default_name();
    let short: Vec<String> = experiment
        .variants
        .iter()
        .filter(|v| tally(v).delivered < experiment.min_delivered)
        .map(|v| format!("{} {}", v.name, tally(v).delivered))
        .collect();
    let people: u64 = experiment
        .variants
        .iter()
        .map(|v| tally(v).successes(experiment.metric))
        .sum();
    let best = (0..p_best.len())
        .max_by(|a, b| p_best[*a].total_cmp(&p_best[*b]))
        .unwrap_or(0);
    let threshold = f64::from(experiment.win_probability) / 100.0;
    let (winner, by, reason) = if let Some(name) = picked {
        (
            name.to_owned(),
            DecidedBy::Hand,
            format!("picked by hand (the rule's probabilities: {})", described()),
        )
    } else if !short.is_empty() {
        (
            default.to_owned(),
            DecidedBy::Default,
            format!(
                "too few delivered to decide (need {} per variant; have {}): the default {default} goes",
                experiment.min_delivered,
                short.join(", ")
            ),
        )
    } else if people < experiment.min_people {
        let who = match experiment.metric {
            Metric::Clicks => "clicked",
            Metric::Opens => "opened",
        };
        (
            default.to_owned(),
            DecidedBy::Default,
            format!(
                "too few people {who} to decide (need {} in the test group; have {people}): the default {default} goes",
                experiment.min_people
            ),
        )
    } else if p_best[best] > threshold {
        let name = &experiment.variants[best].name;
        (
            name.clone(),
            DecidedBy::Rule,
            format!(
                "{name} is the best with probability {:.1} % (above {} %; {})",
                p_best[best] * 100.0,
                experiment.win_probability,
                described()
            ),
        )
    } else {
        (
            default.to_owned(),
            DecidedBy::Default,
            format!(
                "no variant is the best with probability above {} % ({}): the default {default} goes",
                experiment.win_probability,
                described()
            ),
        )
    };
    Decision {
        winner,
        by,
        reason,
        decided_at_ms: now_ms,
        win_probability_bp,
        tallies: experiment
            .variants
            .iter()
            .map(|v| (v.name.clone(), tally(v)))
            .collect(),
    }
}

/// Points of the grid the posteriors are integrated on.
const GRID: usize = 20_000;

/// For Beta(a, b) posteriors: the probability that each is the largest,
/// ∫ f_i(x) Π_{j≠i} F_j(x) dx, on a grid over where any of them has mass (each density
/// normalised on the grid, so no Beta function is needed; ties split evenly).
pub fn probability_best(posteriors: &[(f64, f64)]) -> Vec<f64> {
    let (lo, hi) = posteriors
        .iter()
        .fold((1.0f64, 0.0f64), |(lo, hi), (a, b)| {
            let mean = a / (a + b);
            let sd = (a * b / ((a + b).powi(2) * (a + b + 1.0))).sqrt();
            (lo.min(mean - 12.0 * sd), hi.max(mean + 12.0 * sd))
        });
    let (lo, hi) = (lo.max(0.0), hi.min(1.0));
    let dx = (hi - lo) / GRID as f64;
    let masses: Vec<Vec<f64>> = posteriors
        .iter()
        .map(|(a, b)| {
            let log: Vec<f64> = (0..GRID)
                .map(|k| {
                    let x = lo + (k as f64 + 0.5) * dx;
                    (a - 1.0) * x.ln() + (b - 1.0) * (1.0 - x).ln()
                })
                .collect();
            let top = log.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mass: Vec<f64> = log.iter().map(|l| (l - top).exp()).collect();
            let total: f64 = mass.iter().sum();
            mass.iter().map(|m| m / total).collect()
        })
        .collect();
    // Each at or below a grid point, that point's own mass halved (ties split).
    let below: Vec<Vec<f64>> = masses
        .iter()
        .map(|mass| {
            let mut run = 0.0;
            mass.iter()
                .map(|m| {
                    let at = run + m / 2.0;
                    run += m;
                    at
                })
                .collect()
        })
        .collect();
    (0..posteriors.len())
        .map(|i| {
            (0..GRID)
                .map(|k| {
                    let others: f64 = (0..posteriors.len())
                        .filter(|j| *j != i)
                        .map(|j| below[j][k])
                        .product();
                    masses[i][k] * others
                })
                .sum::<f64>()
                .clamp(0.0, 1.0)
        })
        .collect()
}

/// The 95 % Wilson score interval of a rate of `successes` in `trials` (as fractions).
pub fn wilson(successes: u64, trials: u64) -> Option<(f64, f64)> {
    if trials == 0 {
        return None;
    }
    let (n, p, z) = (trials as f64, successes as f64 / trials as f64, 1.96f64);
    let centre = p + z * z / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    let denominator = 1.0 + z * z / n;
    Some((
        ((centre - spread) / denominator).max(0.0),
        ((centre + spread) / denominator).min(1.0),
    ))
}

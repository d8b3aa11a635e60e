//! What a GetUsers invocation writes as metrics (`runtime::emf`): a run's users enqueued,
//! held, refused and left out by reason; a release's users let go or dropped, and those a
//! sweep left waiting; a batch of checkpoints' failures. Names are a closed set
//! (`METRIC_NAMES`), never a campaign.

use super::Response;
use crate::runtime::emf::Metric;

/// Every metric a GetUsers invocation may write besides the invocation's own.
pub const METRIC_NAMES: [&str; 16] = [
    "usersEnqueued",
    "usersRefused",
    "usersHeld",
    "excluded.unsubscribed",
    "excluded.suppressed",
    "excluded.leftTopic",
    "excluded.unreadableChoice",
    "passed.sentNow",
    "passed.skipped",
    "passed.nextDay",
    "quietDeferred",
    "experimentHeld",
    "usersReleased",
    "usersDropped",
    "usersStranded",
    "checkpointsFailed",
];

impl Response {
    /// This invocation's counts as metrics (those of 0 left out: `emf::nonzero`).
    pub fn metrics(&self) -> Vec<Metric> {
        crate::runtime::emf::nonzero(self.all_counts())
    }

    fn all_counts(&self) -> Vec<Metric> {
        let count = |name: &str, n: u64| Metric::count(name, n as f64);
        match self {
            Response::Run(run) => {
                let e = &run.excluded;
                let mut out = vec![
                    count("usersEnqueued", run.users_enqueued as u64),
                    count("usersRefused", run.users_refused as u64),
                    count("excluded.unsubscribed", e.unsubscribed),
                    count("excluded.suppressed", e.suppressed),
                    count("excluded.leftTopic", e.left_topic),
                    count("excluded.unreadableChoice", e.unreadable_choice),
                ];
                if let Some(l) = &run.local_time {
                    out.extend([
                        count("usersHeld", l.waiting.values().sum()),
                        count("passed.sentNow", l.passed_sent_now),
                        count("passed.skipped", l.passed_skipped),
                        count("passed.nextDay", l.passed_next_day),
                        count("quietDeferred", l.quiet_deferred),
                        count("experimentHeld", l.experiment_held),
                    ]);
                }
                out
            }
            Response::Release(release) => vec![
                count("usersReleased", release.users_released),
                count("usersDropped", release.users_dropped),
                count("usersStranded", release.users_stranded),
            ],
            // Every segment and release of the batch, added up by name.
            Response::Checkpoints(batch) => {
                let failed = batch.response.batch_item_failures.len() as u64;
                let mut out = vec![count("checkpointsFailed", failed)];
                for m in batch.done.iter().flat_map(Response::all_counts) {
                    match out.iter_mut().find(|o| o.name == m.name) {
                        Some(o) => o.values[0] += m.values[0],
                        None => out.push(m),
                    }
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::local_time::LocalTimeCounts;

    #[test]
    fn every_metric_written_is_a_named_one() {
        let run = super::super::Summary {
            users_enqueued: 7,
            local_time: Some(LocalTimeCounts {
                waiting: [(1, 3), (2, 4)].into(),
                ..LocalTimeCounts::default()
            }),
            ..Default::default()
        };
        let release = super::super::ReleaseSummary {
            users_released: 5,
            users_stranded: 2,
            ..Default::default()
        };
        // A batch of checkpoints counts every segment and release in it.
        let batch = Response::Checkpoints(super::super::Checkpoints {
            response: Default::default(),
            done: vec![Response::Run(run.clone()), Response::Run(run.clone())],
        });
        let twice = batch.metrics();
        let total = |name: &str| twice.iter().find(|m| m.name == name).unwrap().values[0];
        assert_eq!(total("usersEnqueued"), 14.0);
        // A count of 0 is not written.
        assert!(!twice.iter().any(|m| m.name == "checkpointsFailed"));
        let written: Vec<Metric> = [Response::Run(run), Response::Release(release), batch]
            .iter()
            .flat_map(Response::metrics)
            .collect();
        for m in &written {
            assert!(METRIC_NAMES.contains(&m.name.as_str()), "{}", m.name);
        }
        let value = |name: &str| written.iter().find(|m| m.name == name).unwrap().values[0];
        assert_eq!(value("usersEnqueued"), 7.0);
        assert_eq!(value("usersHeld"), 7.0);
        assert_eq!(value("usersReleased"), 5.0);
        assert_eq!(value("usersStranded"), 2.0);
    }
}

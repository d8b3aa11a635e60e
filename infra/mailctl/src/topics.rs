//! A campaign's topic and the audience rule's exclusions (shared/topics.json), as `plan`
//! and `status` show them.

use mailflow::domain::topics::ExclusionCounts;

/// Users the audience rule left out: how many, and by reason.
pub fn left_out(excluded: &ExclusionCounts) -> String {
    format!("{} ({})", excluded.total(), excluded.describe())
}

/// `status`'s topic line: the latest run's exclusions (started at `run_ms`; 0: not known),
/// labelled as that run's, for a user a run left out may have been sent by an earlier one.
pub fn status_line(topic: &str, excluded: &ExclusionCounts, run_ms: i64) -> String {
    let run = match run_ms {
        0 => String::new(),
        at => format!(
            " (started {})",
            mailflow::domain::local_time::rfc3339_ms(at)
        ),
    };
    format!(
        "  topic {topic} | left out of the audience by the latest run{run}: {}",
        left_out(excluded)
    )
}

//! A campaign's topic and the audience rule's exclusions (shared/topics.json), as `plan`
//! and `status` show them.

use mailflow::domain::topics::ExclusionCounts;

/// Users the audience rule left out: how many, and by reason.
pub fn left_out(excluded: &ExclusionCounts) -> String {
    format!("{} ({})", excluded.total(), excluded.describe())
}

/// `status`'s topic line.
pub fn status_line(topic: &str, excluded: &ExclusionCounts) -> String {
    format!(
        "  topic {topic} | left out of the audience: {}",
        left_out(excluded)
    )
}

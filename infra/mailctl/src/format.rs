//! How mailctl writes an instant: RFC 3339 from milliseconds since the epoch. Every command
//! and every feature's lines use it, so it depends on nothing else of the crate.

/// A time in milliseconds since the epoch, as RFC 3339.
pub fn format_ms(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

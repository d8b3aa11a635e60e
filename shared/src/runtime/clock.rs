//! The wall clock. Stages read time through `ports::Clock` (`SystemClock` reads this):
//! `now_ms` for decisions by the time of day (slots, quiet hours, an experiment's wait),
//! `wall_ms` for durations, deadlines, caps and a campaign's start; leases,
//! invocation deadlines and the pacing of sends (in microseconds) read it directly. On
//! Lambda it is the system clock; with the `virtual-clock` feature the lab may make it follow
//! tokio's clock instead, which it pauses, so that a stack sending 20,000 emails/s runs in
//! virtual time on a two-core machine.

use std::time::SystemTime;

/// When set: the wall clock at the moment tokio's clock was at `.1`.
#[cfg(feature = "virtual-clock")]
static FOLLOWED: std::sync::OnceLock<(SystemTime, tokio::time::Instant)> =
    std::sync::OnceLock::new();

/// Now, by the wall clock (or by tokio's, when the lab asked for it).
pub fn now() -> SystemTime {
    #[cfg(feature = "virtual-clock")]
    if let Some((wall, at)) = FOLLOWED.get() {
        return *wall + at.elapsed();
    }
    SystemTime::now()
}

/// From now on, `now()` moves with tokio's clock (paused: only when every task waits). For
/// the lab's runs only; call it inside the runtime whose clock is to be followed. Once set,
/// it stays for the life of the process.
#[cfg(feature = "virtual-clock")]
pub fn follow_tokio_clock() {
    let _ = FOLLOWED.set((SystemTime::now(), tokio::time::Instant::now()));
}

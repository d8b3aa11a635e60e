//! What time it is for decisions that depend on the time of day.

/// What time it is, for decisions that depend on the time of day: the system clock on
/// Lambda, a clock the simulator controls locally (so that a day of local times runs in
/// minutes), never a mode.
pub trait Clock: Send + Sync {
    /// Now, as the campaign's decisions read it (slots, deadlines, quiet hours, starts).
    fn now_ms(&self) -> i64;
    /// Now, as durations are measured (how late an email went): the same instant on AWS.
    /// The simulator's clock jumps from slot to slot, and a jump is no lateness.
    fn wall_ms(&self) -> i64 {
        SystemClock.now_ms()
    }
}

/// The clock on Lambda (`runtime::clock`: the lab may make it follow tokio's paused clock).
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::domain::ledger::epoch_ms(crate::runtime::clock::now()) as i64
    }
}

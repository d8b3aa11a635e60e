//! What time it is for decisions that depend on the time of day.

/// What time it is, for decisions that depend on the time of day: the system clock on
/// Lambda, a clock the simulator controls locally (so that a day of local times runs in
/// minutes), never a mode.
pub trait Clock: Send + Sync {
    /// Now, as decisions by the time of day read it (slots, quiet hours, an experiment's
    /// wait).
    fn now_ms(&self) -> i64;
    /// Now by the wall clock: durations (how late an email went), deadlines, caps and a
    /// campaign's start. The same instant on AWS; the simulator's clock jumps from slot to
    /// slot, and a jump is no lateness and moves no deadline.
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

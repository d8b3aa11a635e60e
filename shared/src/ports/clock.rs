//! What time it is for decisions that depend on the time of day.

/// What time it is, for decisions that depend on the time of day: the system clock on
/// Lambda, a clock the simulator controls locally (so that a day of local times runs in
/// minutes), never a mode.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::domain::ledger::epoch_ms(crate::runtime::clock::now()) as i64
    }
}

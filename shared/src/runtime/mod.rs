//! What every function needs around its stage: logs (`telemetry`), a failed init reported
//! (`init_error`), the clock (`clock`), the requests it made (`metering`), its metrics (`emf`), the invocation it serves, the SQS partial-batch driver, and `serve`, the one
//! way a stage is hosted on Lambda.

pub mod batch;
pub mod clock;
pub mod emf;
pub mod function_url;
pub mod init_error;
pub mod invocation;
pub mod metering;
pub mod serve;
pub mod telemetry;

pub use invocation::Invocation;
pub use serve::{serve, Stage};

/// Locks `m`, the one way every lock of the project is taken. A panic while another holder
/// had it (a failed invocation, a test's deliberate panic) poisons a std `Mutex`; what we keep
/// in one (counters, caches, queues of work) stays usable, and the panic is reported where
/// it happened.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

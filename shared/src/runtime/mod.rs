//! What every function needs around its stage: logs (`telemetry`), the requests it made
//! (`metering`), the invocation it serves, the SQS partial-batch driver, and `serve`, the one
//! way a stage is hosted on Lambda.

pub mod batch;
pub mod function_url;
pub mod invocation;
pub mod metering;
pub mod serve;
pub mod telemetry;

pub use invocation::Invocation;
pub use serve::{serve, Stage};

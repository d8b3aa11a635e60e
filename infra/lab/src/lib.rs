//! The lab: measurements and fault runs over the local simulator. `bench` runs the real
//! function binaries under the simulator's Runtime API and reports CPU, memory, cold starts
//! and billable requests per email; `cost` turns those into a bill; `chaos` runs a campaign
//! through every fault at once and checks that nothing is lost or sent twice beyond the bound;
//! `rate` runs the shared send rate against an SES stand-in that throttles as SES does;
//! `opens` measures the OpenContent endpoints (first opens, reopens, badges, clicks);
//! `pipeline` runs a whole campaign through the three stages in virtual time; `limits` holds
//! AWS's throughput limits as the lab enforces them.

pub mod bench;
pub mod chaos;
pub mod cost;
pub mod limits;
pub mod opens;
pub mod pipeline;
pub mod rate;

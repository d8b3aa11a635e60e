//! mailctl: the operator tool for mailflow, on AWS and on the local stack. `ops` reads a
//! campaign's stores through the AWS SDK and mailflow's adapters (`local_stack`: the same
//! resources on the local stack) and `status` works out its state; `control` pauses,
//! resumes and cancels it; `report` draws it as one HTML page of plots. `compose` composes
//! a user's email with CreateEmails' own code and `plan` every user's, counted. Each
//! feature's part of `plan` and `status` is in its own module: `local_time`, `guardrails`,
//! `experiment`, `send_rate`, `public_urls`, `topics`. `definition_store` pushes, lists and shows
//! the campaign definitions a stack keeps; `definition_source` loads the one a command
//! renders with (pushed, or a folder on disk). `stack_outputs` names the variables a
//! deployed stack is found by. The local simulator is `mailflow-local`, the benchmark and
//! chaos run are `mailflow-lab`; `main.rs` puts the commands of all three in one binary.

pub mod capacity;
pub mod compose;
pub mod control;
pub mod definition;
pub mod definition_source;
pub mod definition_store;
pub mod experiment;
pub mod format;
pub mod guardrails;
pub mod local_stack;
pub mod local_time;
pub mod ops;
pub mod plan;
pub mod progress;
pub mod public_urls;
pub mod report;
pub mod send_rate;
pub mod stack_outputs;
pub mod status;
pub mod topics;

pub use mailflow_local::repo_root;

//! mailctl: the operator tool for mailflow, on AWS and on the local stack. `ops` reads a
//! campaign's state and moves DLQs back (`experiment`: its A/B experiment's part;
//! `report`: the campaign as one HTML page of plots); `compose` composes a user's email
//! with CreateEmails' own code and `plan` every user's, counted; `stack_outputs` names the
//! variables a deployed stack is found by. The local simulator is `mailflow-local`, the
//! benchmark and chaos run are `mailflow-lab`; `main.rs` puts the commands of all three in
//! one binary.

pub mod compose;
pub mod control;
pub mod experiment;
pub mod ops;
pub mod plan;
pub mod progress;
pub mod report;
pub mod stack_outputs;

pub use mailflow_local::repo_root;

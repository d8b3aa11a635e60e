//! Every test against the local stack (moto + SecantusDB on 127.0.0.1, started by
//! infra/test.sh), in one test binary so that the SDKs, the driver and mailctl link once.
//! Each module is one concern; every test makes its own queues, table, database and mail
//! domain, so they run in parallel.

mod bad_records;
mod campaign_check;
mod campaign_control;
mod chaos;
mod checkpoints;
mod cli;
mod cli_definitions;
mod cli_demo;
mod cli_plan;
mod consistency;
mod definition_campaigns;
mod definition_examples;
mod definition_experiments;
mod definition_queries;
mod definition_store;
mod deliverability;
mod exactly_once;
mod experiments;
mod guardrails;
mod layout;
mod local_time;
mod metrics;
mod mongo_indexes;
mod open_content;
mod pipeline;
mod preferences;
mod public_urls;
mod realistic;
mod runtime_api;
mod security;
mod send_rate;
mod simulator;
mod simulator_releases;

//! mailctl: run and inspect mailflow campaigns. Endpoints come from the environment
//! (AWS_ENDPOINT_URL, MONGODB_URI), exactly as for the functions. `cli/` parses the command
//! line; each command lives in `commands/`.

mod cli;
mod commands;

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    mailflow::runtime::telemetry::init_cli();
    match cli::Cli::parse().run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // A definition refused: each error on its own line, and status 2 (bad input).
            if let Some(refused) = err.downcast_ref::<mailctl::definition_store::Refused>() {
                for line in &refused.errors {
                    eprintln!("{line}");
                }
                eprintln!("mailctl: {refused}");
                return std::process::ExitCode::from(2);
            }
            eprintln!("mailctl: {}", one_line(&err));
            match err.downcast_ref::<Exit>() {
                Some(exit) => std::process::ExitCode::from(exit.code),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// An error with an exit status of its own (`campaign check`: 2 for a definition with
/// problems, told apart from a command that could not run).
#[derive(Debug)]
pub struct Exit {
    pub code: u8,
    pub message: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// The error and its causes on one line, no backtrace: this is for operators. A cause whose
/// text ends the line already (an error that says its source in its own message, "...: {0}")
/// is said once.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

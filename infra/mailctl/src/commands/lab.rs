//! `bench` and `chaos`: the lab's runs (`mailflow-lab`), printed as Markdown or JSON.

use anyhow::{bail, Result};

pub async fn bench(
    template: &std::path::Path,
    options: &mailflow_lab::bench::BenchOptions,
    json: bool,
) -> Result<()> {
    let report = mailflow_lab::bench::bench(template, options).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", mailflow_lab::bench::markdown(&report));
    }
    Ok(())
}

/// Exit status 1 when the run lost an email or sent one twice beyond the bound.
pub async fn chaos(
    template: &std::path::Path,
    options: &mailflow_lab::chaos::ChaosOptions,
    json: bool,
) -> Result<()> {
    let report = mailflow_lab::chaos::run(template, options).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", mailflow_lab::chaos::markdown(&report));
    }
    if !report.violations.is_empty() {
        bail!(
            "the chaos run broke a promise: {}",
            report.violations.join("; ")
        );
    }
    Ok(())
}

//! `bench`, `chaos` and `rate`: the lab's runs (`mailflow-lab`), printed as Markdown or JSON.

use anyhow::{bail, Result};

/// The report as one JSON document, or as the lab's Markdown.
fn print<R: serde::Serialize>(
    report: &R,
    json: bool,
    markdown: impl Fn(&R) -> String,
) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", markdown(report));
    }
    Ok(())
}

pub async fn bench(
    template: &std::path::Path,
    options: &mailflow_lab::bench::BenchOptions,
    json: bool,
) -> Result<()> {
    let report = mailflow_lab::bench::bench(template, options).await?;
    print(&report, json, mailflow_lab::bench::markdown)
}

pub async fn opens(
    template: &std::path::Path,
    options: &mailflow_lab::opens::OpensOptions,
    json: bool,
) -> Result<()> {
    let report = mailflow_lab::opens::opens(template, options).await?;
    print(&report, json, |r| r.markdown())
}

/// Exit status 1 when a run lost an email or sent one twice.
pub async fn rate(options: &mailflow_lab::rate::RateOptions, json: bool) -> Result<()> {
    let reports = mailflow_lab::rate::run(options).await?;
    print(&reports, json, |r| mailflow_lab::rate::markdown(r))?;
    if reports.iter().any(|r| r.lost + r.sent_twice > 0) {
        bail!("a rate run lost an email or sent one twice");
    }
    Ok(())
}

/// Exit status 1 when a campaign lost an email or sent one twice.
pub async fn pipeline(options: &mailflow_lab::pipeline::PipelineOptions, json: bool) -> Result<()> {
    let reports = mailflow_lab::pipeline::run(options).await?;
    print(&reports, json, |r| mailflow_lab::pipeline::markdown(r))?;
    if reports.iter().any(|r| r.lost + r.sent_twice > 0) {
        bail!("a pipeline run lost an email or sent one twice");
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
    print(&report, json, mailflow_lab::chaos::markdown)?;
    if !report.violations.is_empty() {
        bail!(
            "the chaos run broke a promise: {}",
            report.violations.join("; ")
        );
    }
    Ok(())
}

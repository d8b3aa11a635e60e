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
    let report = mailflow_lab::bench::bench(template, options, push_definition).await?;
    print(&report, json, mailflow_lab::bench::markdown)
}

/// `bench --definition`: the folder checked and pushed to the bench's stack as `mailctl
/// campaign push` pushes it; the name it was pushed under.
fn push_definition<'a>(
    stack: &'a mailflow_local::stack::Stack,
    dir: &'a std::path::Path,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String>> + 'a>> {
    Box::pin(async move {
        let loaded = mailctl::definition_store::read_folder(dir)
            .map_err(|errors| anyhow::anyhow!("{}: {}", dir.display(), errors.join("; ")))?;
        let store =
            mailctl::definition_store::Stack::connect(&stack.sdk, Some(&stack.prefix)).await?;
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as u64;
        mailctl::definition_store::push(&store, &loaded, Some("bench"), at_ms).await?;
        Ok(loaded.name)
    })
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
    if options.local_time.local_time {
        let reports = mailflow_lab::pipeline::run_local_time(options).await?;
        print(&reports, json, |r| {
            mailflow_lab::pipeline::local_time::markdown(r)
        })?;
        if (reports.iter()).any(|r| r.lost + r.twice > 0 || r.hold_error.is_some()) {
            bail!("a local-time run failed a hold, lost a user or released one twice");
        }
        let sent_badly = |s: &mailflow_lab::pipeline::local_time::SlotSending| {
            s.lost + s.twice + s.dead_lettered > 0
        };
        if (reports.iter()).any(|r| r.sending.as_ref().is_some_and(sent_badly)) {
            bail!("a local-time run lost an email, sent one twice or dead-lettered one");
        }
        return Ok(());
    }
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

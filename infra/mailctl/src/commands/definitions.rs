//! `campaign push`, `list` and `show` (`mailctl::definition_store`).

use super::TargetArgs;
use anyhow::Result;
use mailctl::definition_store::{self, Refused, Stack};
use std::path::Path;

pub async fn push(
    sdk: &aws_config::SdkConfig,
    dir: &Path,
    by: Option<&str>,
    target: &TargetArgs,
) -> Result<()> {
    // Read and checked before the stack is looked at: a bad definition stores nothing.
    let loaded = definition_store::read_folder(dir).map_err(|errors| Refused {
        folder: dir.display().to_string(),
        errors,
    })?;
    let stack = Stack::connect(sdk, target.prefix.as_deref()).await?;
    let now_ms = mailflow::ports::Clock::wall_ms(&mailflow::ports::SystemClock) as u64;
    let report = definition_store::push(&stack, &loaded, by, now_ms).await?;
    for line in report.lines() {
        println!("{line}");
    }
    report.schedule?;
    Ok(())
}

pub async fn list(sdk: &aws_config::SdkConfig, json: bool, target: &TargetArgs) -> Result<()> {
    let stack = Stack::connect(sdk, target.prefix.as_deref()).await?;
    let rows = definition_store::list(&stack).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for line in definition_store::list_lines(&rows) {
            println!("{line}");
        }
    }
    Ok(())
}

pub async fn show(
    sdk: &aws_config::SdkConfig,
    name: &str,
    version: Option<u32>,
    files: bool,
    target: &TargetArgs,
) -> Result<()> {
    let stack = Stack::connect(sdk, target.prefix.as_deref()).await?;
    for line in definition_store::show(&stack, name, version, files).await? {
        println!("{line}");
    }
    Ok(())
}

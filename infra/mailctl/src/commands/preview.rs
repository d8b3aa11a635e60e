//! `preview` and `serve-unsubscribe`: a user's email exactly as CreateEmails composes it, and
//! the local stack's unsubscribe links served.

use super::{provision_local, TargetArgs};
use anyhow::{bail, Context, Result};
use mailflow::campaign::Campaign;

pub async fn preview(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    user: &str,
    campaign: Option<String>,
    out: Option<std::path::PathBuf>,
    t: &TargetArgs,
) -> Result<()> {
    let campaign = match campaign {
        Some(id) => Campaign::from_id(&id, None)?,
        None => Campaign::for_schedule(time::OffsetDateTime::now_utc()),
    };
    let env = match &t.prefix {
        Some(prefix) => {
            let stack = provision_local(sdk, template, prefix, &t.database).await?;
            mailctl::preview::local_env(&stack)?
        }
        None => {
            let function = mailctl::stack_outputs::CREATE_EMAILS_FUNCTION.read()?;
            mailctl::preview::deployed_env(sdk, &function).await?
        }
    };
    let stage = mailctl::preview::create_emails(sdk, &env).await?;
    let job = mailctl::preview::compose(&stage, user, &campaign).await?;
    print!("{}", mailctl::preview::describe(&job));
    if let Some(path) = out {
        std::fs::write(&path, &job.html).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("HTML written to {}", path.display());
    }
    Ok(())
}

pub async fn serve_unsubscribe(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    port: u16,
    t: &TargetArgs,
) -> Result<()> {
    let Some(prefix) = &t.prefix else {
        bail!("serve-unsubscribe serves a local stack: pass --prefix (on AWS, the Unsubscribe function's URL serves it)");
    };
    let stack = provision_local(sdk, template, prefix, &t.database).await?;
    let server = mailflow_local::pipeline::serve_unsubscribe(&stack, port).await?;
    eprintln!(
        "serving one-click unsubscribe for {prefix} at {} (Ctrl-C stops it)",
        server.url()
    );
    server.wait().await;
    Ok(())
}

//! `sam local invoke` of template.yaml's functions against the local stack: the SAM CLI runs
//! each function in a container of the Lambda base image, with AWS's emulator inside, as a
//! user tests with SAM. `infra/sam-local.sh` prepares what it needs (the SAM CLI, a Docker
//! engine, the functions laid out as `sam build` does) and names it in the environment read
//! here; this module writes the event and the `--env-vars` file and reads what SAM prints.

use crate::aws_emulator::outcome_of_answer;
use crate::function_host::Outcome;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The variables `infra/sam-local.sh` sets for what runs inside it.
const SAM_CLI: &str = "MAILFLOW_SAM_CLI";
const SAM_TEMPLATE: &str = "MAILFLOW_SAM_TEMPLATE";
const SAM_SKIP_PULL: &str = "MAILFLOW_SAM_SKIP_PULL";

pub struct SamLocal {
    cli: PathBuf,
    /// The template as `sam build` leaves it (`.aws-sam/build/template.yaml`, or the one
    /// `infra/sam-build.py` lays out).
    template: PathBuf,
    /// No image can be pulled: the base image was made locally (`infra/sam-local.sh`).
    skip_pull: bool,
    work: PathBuf,
}

/// What one `sam local invoke` printed: the answer (stdout) as an outcome, and the logs
/// (stderr: SAM's own lines, the emulator's and the function's).
#[derive(Debug)]
pub struct SamInvocation {
    pub outcome: Outcome,
    pub logs: String,
}

impl SamLocal {
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| {
            std::env::var(name).with_context(|| {
                format!("{name} is not set: run this through infra/sam-local.sh, which prepares sam local invoke")
            })
        };
        let work = crate::repo_root().join(".local/sam/invocations");
        std::fs::create_dir_all(&work)?;
        Ok(Self {
            cli: var(SAM_CLI)?.into(),
            template: var(SAM_TEMPLATE)?.into(),
            skip_pull: std::env::var(SAM_SKIP_PULL).is_ok_and(|v| v == "1"),
            work,
        })
    }

    /// Invokes `function` once with `event`, its variables set to `env` (through
    /// `--env-vars`, which SAM applies to the variables the template declares) and the
    /// template's parameters for this machine: its architecture, and the AWS endpoint of the
    /// local stack as `EndpointUrl`. `sam local invoke` exits 0 whatever the function did, so
    /// the outcome is read from what it prints.
    pub async fn invoke(
        &self,
        function: &str,
        env: &BTreeMap<String, String>,
        event: &Value,
    ) -> Result<SamInvocation> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let event_file = self.work.join(format!("{function}-{stamp}-event.json"));
        let env_file = self.work.join(format!("{function}-{stamp}-env.json"));
        std::fs::write(&event_file, event.to_string())?;
        std::fs::write(&env_file, json!({ function: env }).to_string())?;
        let endpoint = crate::stack_env("AWS_ENDPOINT_URL")?;
        let secret = env.get(mailflow::config::var::MONGODB_URI_SECRET_ID);
        let mut overrides = format!(
            "Architecture={} EndpointUrl={endpoint}",
            lambda_architecture()
        );
        if let Some(secret) = secret {
            overrides.push_str(&format!(" MongoDbUriSecretName={secret}"));
        }
        let mut command = tokio::process::Command::new(&self.cli);
        command
            .args(["local", "invoke", function, "--template"])
            .arg(&self.template)
            .arg("--event")
            .arg(&event_file)
            .arg("--env-vars")
            .arg(&env_file)
            .args(["--parameter-overrides", &overrides])
            .env("SAM_CLI_TELEMETRY", "0")
            .stdin(std::process::Stdio::null());
        if self.skip_pull {
            command.arg("--skip-pull-image");
        }
        let output = command
            .output()
            .await
            .with_context(|| format!("running {}", self.cli.display()))?;
        let _ = std::fs::remove_file(&event_file);
        let _ = std::fs::remove_file(&env_file);
        Ok(SamInvocation {
            outcome: outcome_of_answer(&String::from_utf8_lossy(&output.stdout)),
            logs: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// This machine's processor as Lambda names it (the template's `Architecture` parameter).
pub fn lambda_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "x86_64",
    }
}

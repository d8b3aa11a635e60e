//! AWS's own Lambda Runtime Interface Emulator (`aws-lambda-rie`, the emulator `sam local`
//! runs inside its containers), running a function binary directly on this machine: a Runtime
//! API implementation this project did not write, to prove the binaries against, beside
//! `function_host` (ours, which also measures CPU, memory and cold starts).
//!
//! The emulator ships in the SAM CLI's wheel; `infra/validate-template.sh` and
//! `infra/sam-local.sh` install it into `.venv-tools`. It serves one invocation at a time
//! (two at once crash it), so `invoke` takes `&mut self`.

use crate::function_host::Outcome;
use anyhow::{bail, Context, Result};
use mailflow::runtime::lock;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Where the emulator is: `MAILFLOW_AWS_RIE`, or the one in the SAM CLI's wheel for this
/// machine's architecture.
pub fn emulator_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("MAILFLOW_AWS_RIE") {
        return Ok(PathBuf::from(path));
    }
    let arch = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        other => other,
    };
    let lib = crate::repo_root().join(".venv-tools/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| {
                d.path()
                    .join("site-packages/samcli/local/rapid")
                    .join(format!("aws-lambda-rie-{arch}"))
            })
            .find(|p| p.is_file())
    });
    found.with_context(|| {
        format!(
            "AWS's Lambda emulator (aws-lambda-rie-{arch}) is not in {}: run infra/validate-template.sh once, which installs the SAM CLI that ships it",
            lib.display()
        )
    })
}

/// One execution environment: the emulator and the function it starts.
pub struct EmulatedFunction {
    child: tokio::process::Child,
    url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl EmulatedFunction {
    /// Starts the emulator on two free loopback ports with `bin` as the function's bootstrap,
    /// exactly `env` (plus PATH and this process's AWS_* variables), its timeout and memory.
    /// A port found free can be taken by another process before the emulator binds it (tests
    /// run in parallel): then it starts again on two other ports, up to three times.
    pub async fn spawn(
        name: &str,
        bin: &Path,
        env: &BTreeMap<String, String>,
        timeout: Duration,
        memory_mb: u32,
    ) -> Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::spawn_once(name, bin, env, timeout, memory_mb).await {
                Err(e) if attempt < 3 && format!("{e:#}").contains("address already in use") => {
                    attempt += 1
                }
                started => return started,
            }
        }
    }

    async fn spawn_once(
        name: &str,
        bin: &Path,
        env: &BTreeMap<String, String>,
        timeout: Duration,
        memory_mb: u32,
    ) -> Result<Self> {
        let emulator = emulator_binary()?;
        let (invoke_port, api_port) = (free_port()?, free_port()?);
        let mut child = tokio::process::Command::new(&emulator)
            // Loopback only: the emulator's default is every interface.
            .arg("--runtime-interface-emulator-address")
            .arg(format!("127.0.0.1:{invoke_port}"))
            .arg("--runtime-api-address")
            .arg(format!("127.0.0.1:{api_port}"))
            .arg(bin)
            .env_clear()
            .envs(crate::function_host::inherited_env())
            .envs(env)
            .env("AWS_LAMBDA_FUNCTION_NAME", name)
            .env("AWS_LAMBDA_FUNCTION_TIMEOUT", timeout.as_secs().to_string())
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", emulator.display()))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ]
        .into_iter()
        .flatten()
        {
            let lines = lines.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    lock(&lines).push(line);
                }
            });
        }
        let address = format!("127.0.0.1:{invoke_port}");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                return Ok(Self {
                    child,
                    url: format!("http://{address}/2015-03-31/functions/function/invocations"),
                    lines,
                });
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "the emulator exited at start ({status}): {}",
                    lock(&lines).join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the emulator did not listen on {address} within 5 s");
    }

    /// One invocation, as `aws lambda invoke` sees it: the response, the function's error, a
    /// timeout, or (502) a function that did not start.
    pub async fn invoke(&mut self, event: &Value) -> Result<Outcome> {
        let answer =
            crate::http::request(&self.url, "POST", &[], event.to_string().as_bytes()).await?;
        if answer.status == 502 {
            return Ok(Outcome::Exited);
        }
        Ok(outcome_of_answer(&answer.text()))
    }

    /// Stops the emulator and returns every line it and the function wrote.
    pub async fn finish(mut self) -> Vec<String> {
        let _ = self.child.kill().await;
        // The readers end with the pipes; give them a moment to take the last lines.
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::mem::take(&mut *lock(&self.lines))
    }
}

/// What a Lambda invoke's answer means: an error object (`errorType`, `errorMessage`) is the
/// function's error or, for "Task timed out", its timeout; anything else is its response.
/// `sam local invoke` prints the same answer on stdout.
pub fn outcome_of_answer(body: &str) -> Outcome {
    let body = body.trim();
    if body.is_empty() {
        return Outcome::Exited;
    }
    match serde_json::from_str::<Value>(body) {
        Ok(value) => match (value.get("errorType"), value.get("errorMessage")) {
            (Some(_), message) => {
                let message = message.and_then(Value::as_str).unwrap_or_default();
                if message.contains("Task timed out") {
                    Outcome::TimedOut
                } else {
                    Outcome::Error(message.to_owned())
                }
            }
            _ => Outcome::Response(value),
        },
        Err(_) if body.contains("Task timed out") => Outcome::TimedOut,
        Err(_) => Outcome::Error(body.to_owned()),
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_mean_what_lambda_means() {
        assert_eq!(
            outcome_of_answer(r#"{"batchItemFailures": []}"#),
            Outcome::Response(serde_json::json!({"batchItemFailures": []}))
        );
        assert_eq!(
            outcome_of_answer(r#"{"errorType": "Error", "errorMessage": "bad event"}"#),
            Outcome::Error("bad event".into())
        );
        assert_eq!(
            outcome_of_answer(
                r#"{"errorMessage": "2026-11-24T00:00:00Z 1 Task timed out after 3.00 seconds", "errorType": "Sandbox.Timedout"}"#
            ),
            Outcome::TimedOut
        );
        assert_eq!(outcome_of_answer("\n"), Outcome::Exited);
    }
}

//! A MongoDB-compatible server of the chaos run's own (SecantusDB, the local stack's), on a
//! free 127.0.0.1 port with its data in a directory, so it can be stopped and started again
//! mid-run with its data intact. Started and stopped by pid; stopped when dropped.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

pub struct MongoServer {
    program: PathBuf,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl MongoServer {
    /// Starts `program` (secantusd) with its data and log in a fresh directory under `parent`.
    pub async fn start(program: &Path, parent: &Path) -> Result<Self> {
        if !program.is_file() {
            bail!(
                "{} is not a file: the chaos run starts its own SecantusDB; set MAILFLOW_SECANTUSD (infra/local-stack.sh env prints it)",
                program.display()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = parent.join(format!("chaos-mongo-{port}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut server = Self {
            program: program.to_owned(),
            port,
            dir,
            child: None,
        };
        server.launch().await?;
        Ok(server)
    }

    /// A URI whose clients give up selecting the server after 2 s, so that an outage fails
    /// requests (and their records) instead of hanging them.
    pub fn uri(&self) -> String {
        format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS=2000",
            self.port
        )
    }

    async fn launch(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))?;
        let child = Command::new(&self.program)
            .arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--storage-path")
            .arg(self.dir.join("data"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "SecantusDB exited at start ({status}); see {}",
                        self.dir.join("server.log").display()
                    );
                }
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "SecantusDB did not accept connections on port {} within 60 s",
                    self.port
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the server (SIGTERM to its pid, SIGKILL after 10 s).
    pub async fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Some(pid) = child.id() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_err()
        {
            child.kill().await?;
        }
        Ok(())
    }

    /// Stops the server, waits `down`, and starts it again on the same port and data.
    pub async fn restart(&mut self, down: Duration) -> Result<()> {
        self.stop().await?;
        tokio::time::sleep(down).await;
        self.launch().await
    }
}

impl Drop for MongoServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

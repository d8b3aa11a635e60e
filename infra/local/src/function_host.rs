//! Runs a function binary the way Lambda does: one process per execution environment, whose
//! Lambda Runtime API endpoint (served here, on 127.0.0.1) hands it one event at a time with
//! a deadline and takes its response. The code measured and tested is then the code
//! deployed, `main.rs` wiring and init included, and its process can be measured alone:
//! CPU time, peak RSS, cold start, the backend requests it logged.

use crate::http::{read_request, respond};
use anyhow::{Context, Result};
use mailflow::runtime::lock;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

/// How one invocation ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Response(Value),
    /// The function reported an error (`/invocation/{id}/error`).
    Error(String),
    /// The deadline passed: the process was stopped, as Lambda stops the environment.
    TimedOut,
    /// The process exited (at init, or crashing) before it answered.
    Exited,
}

type Pending = (String, Value);

struct RuntimeApi {
    timeout: Duration,
    next: tokio::sync::Mutex<mpsc::Receiver<Pending>>,
    waiters: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    init_error: Mutex<Option<String>>,
    first_next: Mutex<Option<Instant>>,
    /// The process, and the CPU it had used by its first `next`: its init's.
    pid: u32,
    init_cpu: Mutex<Option<CpuTime>>,
}

/// What the process logged, as CloudWatch would have kept it.
#[derive(Debug, Default)]
pub struct Logs {
    pub lines: Vec<String>,
    /// Every line written, kept or not.
    pub line_count: u64,
    pub bytes: u64,
    /// Lines that must not have been written (see `crate::log_audit`): line number and why.
    pub sensitive: Vec<(u64, &'static str)>,
    /// The sums of the `requests` each invocation logged (see `mailflow::runtime::metering`).
    pub requests: BTreeMap<String, u64>,
    /// Users GetUsers enqueued, from the line each of its invocations ends with.
    pub users_enqueued: u64,
}

/// Logs kept in full up to this many lines (the rest are counted, not kept).
const KEPT_LOG_LINES: usize = 20_000;

impl Logs {
    fn absorb(&mut self, line: String) {
        self.line_count += 1;
        self.bytes += line.len() as u64 + 1;
        if let Some(why) = crate::log_audit::finding(&line) {
            self.sensitive.push((self.line_count, why));
        }
        if let Ok(json) = serde_json::from_str::<Value>(&line) {
            if json["message"] == mailflow::stages::get_users::FINISHED_LOG_MESSAGE {
                self.users_enqueued += json["users_enqueued"].as_u64().unwrap_or(0);
            }
            if json["message"] == mailflow::runtime::metering::REQUESTS_LOG_MESSAGE {
                let counts: BTreeMap<String, u64> = json["requests"]
                    .as_str()
                    .and_then(|s| serde_json::from_str(s).ok())
                    .unwrap_or_default();
                for (k, v) in counts {
                    *self.requests.entry(k).or_default() += v;
                }
            }
        }
        if self.lines.len() < KEPT_LOG_LINES {
            self.lines.push(line);
        }
    }
}

/// A process's CPU time: in its own code (user) and in the kernel on its behalf (system).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    /// What process `pid` has used so far (`std::process::id()` for this one), from /proc.
    pub fn of_process(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces): state is field 3; utime and
        // stime are fields 14 and 15, in clock ticks (100 per second on Linux).
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = |i: usize| -> Option<Duration> {
            Some(Duration::from_millis(
                fields.get(i)?.parse::<u64>().ok()? * 10,
            ))
        };
        Some(Self {
            user: ticks(11)?,
            system: ticks(12)?,
        })
    }

    pub fn total(&self) -> Duration {
        self.user + self.system
    }
}

/// A process being watched: the way to kill it, whether it has ended, and how.
struct Watched {
    kill: oneshot::Sender<()>,
    exited: watch::Receiver<bool>,
    exit_status: Arc<Mutex<Option<ExitStatus>>>,
}

/// Collects `child`'s output into `logs` and waits for it to exit (or kills it when told).
fn watch_process(mut child: tokio::process::Child, logs: &Arc<Mutex<Logs>>) -> Watched {
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(tokio::spawn(collect_lines(out, logs.clone())));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(tokio::spawn(collect_lines(err, logs.clone())));
    }
    let (kill, kill_rx) = oneshot::channel::<()>();
    let (exited_tx, exited) = watch::channel(false);
    let exit_status = Arc::new(Mutex::new(None));
    let status_slot = exit_status.clone();
    tokio::spawn(async move {
        let status = tokio::select! {
            status = child.wait() => status.ok(),
            _ = kill_rx => child.kill().await.ok().and(None),
        };
        *lock(&status_slot) = status;
        // Every line the process wrote is read before anyone hears it has ended.
        for reader in readers {
            let _ = reader.await;
        }
        let _ = exited_tx.send(true);
    });
    Watched {
        kill,
        exited,
        exit_status,
    }
}

/// One function process and its Runtime API.
pub struct FunctionProcess {
    pub name: String,
    api: Arc<RuntimeApi>,
    next: mpsc::Sender<Pending>,
    pid: u32,
    spawned: Instant,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    exited: watch::Receiver<bool>,
    exit_status: Arc<Mutex<Option<ExitStatus>>>,
    logs: Arc<Mutex<Logs>>,
    seq: AtomicU64,
}

impl FunctionProcess {
    /// Starts `bin` with exactly `env` (plus PATH, the AWS_* variables of this process and
    /// the variables Lambda sets), each invocation ending after `timeout`.
    pub async fn spawn(
        name: &str,
        bin: &Path,
        env: &BTreeMap<String, String>,
        timeout: Duration,
        memory_mb: u32,
    ) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let spawned = Instant::now();
        let child = tokio::process::Command::new(bin)
            .env_clear()
            .envs(inherited_env())
            .envs(env)
            .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.to_string())
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "local")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("the process has no pid")?;
        // Served only once the pid is known, so the first `next` can read the init's CPU (the
        // listener is bound: the process's connections wait in its backlog until then).
        let (next, next_rx) = mpsc::channel(1);
        let api = Arc::new(RuntimeApi {
            timeout,
            next: tokio::sync::Mutex::new(next_rx),
            waiters: Mutex::default(),
            init_error: Mutex::default(),
            first_next: Mutex::default(),
            pid,
            init_cpu: Mutex::default(),
        });
        let server = api.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_connection(server.clone(), stream));
            }
        });
        let logs = Arc::new(Mutex::new(Logs::default()));
        let Watched {
            kill,
            exited,
            exit_status,
        } = watch_process(child, &logs);
        Ok(Self {
            name: name.to_owned(),
            api,
            next,
            pid,
            spawned,
            kill: Mutex::new(Some(kill)),
            exited,
            exit_status,
            logs,
            seq: AtomicU64::new(0),
        })
    }

    /// Hands `event` to the function and waits for its answer, at most its timeout.
    pub async fn invoke(&self, event: Value) -> Outcome {
        let id = format!(
            "{}-{}",
            self.name,
            self.seq.fetch_add(1, Ordering::SeqCst) + 1
        );
        let (tx, rx) = oneshot::channel();
        lock(&self.api.waiters).insert(id.clone(), tx);
        let mut exited = self.exited.clone();
        let answered = async {
            if self.next.send((id.clone(), event)).await.is_err() {
                return Outcome::Exited;
            }
            rx.await.unwrap_or(Outcome::Exited)
        };
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(self.api.timeout, answered) => {
                outcome.unwrap_or(Outcome::TimedOut)
            }
            _ = exited.wait_for(|e| *e) => Outcome::Exited,
        };
        lock(&self.api.waiters).remove(&id);
        if outcome == Outcome::TimedOut {
            self.stop().await;
        }
        outcome
    }

    /// From the process start to its first `next` request: init, every client built.
    pub fn cold_start(&self) -> Option<Duration> {
        lock(&self.api.first_next).map(|t| t - self.spawned)
    }

    /// The CPU time the process had used by its first `next` request: its init's.
    pub fn init_cpu_time(&self) -> Option<CpuTime> {
        *lock(&self.api.init_cpu)
    }

    /// What the function posted to `/init/error`, if it failed to start.
    pub fn init_error(&self) -> Option<String> {
        lock(&self.api.init_error).clone()
    }

    /// CPU time the process has used so far, in its own code and in the kernel.
    pub fn cpu_time(&self) -> Option<CpuTime> {
        CpuTime::of_process(self.pid)
    }

    /// The process's peak resident memory so far, in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: u64 = line
            .trim_start_matches("VmHWM:")
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    }

    /// How the process ended by itself (None while it runs, or when it was stopped).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        *lock(&self.exit_status)
    }

    /// Stops the process (if it still runs) and waits until its output has been read.
    pub async fn stop(&self) {
        if let Some(kill) = lock(&self.kill).take() {
            let _ = kill.send(());
        }
        let mut exited = self.exited.clone();
        let _ = exited.wait_for(|e| *e).await;
    }

    /// Stops the process and returns what it logged.
    pub async fn finish(self) -> Logs {
        self.stop().await;
        std::mem::take(&mut *lock(&self.logs))
    }
}

/// What a function process inherits from this one, as on Lambda: PATH and the AWS_*
/// variables (region, credentials, the local stack's endpoint); nothing else.
pub fn inherited_env() -> impl Iterator<Item = (String, String)> {
    std::env::vars().filter(|(k, _)| k.starts_with("AWS_") || k == "PATH")
}

async fn collect_lines(stream: impl tokio::io::AsyncRead + Unpin, logs: Arc<Mutex<Logs>>) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        lock(&logs).absorb(line);
    }
}

async fn serve_connection(api: Arc<RuntimeApi>, stream: TcpStream) {
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader).await {
        let (method, body) = (request.method, request.body);
        let path = request.target.trim_start_matches("/2018-06-01/runtime");
        if method == "GET" && path == "/invocation/next" {
            {
                let mut first_next = lock(&api.first_next);
                if first_next.is_none() {
                    *first_next = Some(Instant::now());
                    *lock(&api.init_cpu) = CpuTime::of_process(api.pid);
                }
            }
            // Held until there is an event, as Lambda holds it between invocations.
            let Some((id, event)) = api.next.lock().await.recv().await else {
                return;
            };
            let deadline = (SystemTime::now() + api.timeout)
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            let headers = [
                ("Content-Type", "application/json".to_owned()),
                ("Lambda-Runtime-Aws-Request-Id", id),
                ("Lambda-Runtime-Deadline-Ms", deadline.to_string()),
                (
                    "Lambda-Runtime-Invoked-Function-Arn",
                    "arn:aws:lambda:us-east-1:123456789012:function:local".to_owned(),
                ),
                (
                    "Lambda-Runtime-Trace-Id",
                    "Root=1-00000000-000000000000000000000000".to_owned(),
                ),
            ];
            respond(
                &mut reader,
                "200 OK",
                &headers,
                event.to_string().as_bytes(),
            )
            .await;
        } else if method == "POST" && path == "/init/error" {
            *lock(&api.init_error) = Some(String::from_utf8_lossy(&body).into_owned());
            respond(&mut reader, "202 Accepted", &[], b"{}").await;
        } else if let Some(rest) = path
            .strip_prefix("/invocation/")
            .filter(|_| method == "POST")
        {
            let (id, kind) = rest.split_once('/').unwrap_or((rest, ""));
            let outcome = match kind {
                "response" => Outcome::Response(serde_json::from_slice(&body).unwrap_or_default()),
                _ => Outcome::Error(String::from_utf8_lossy(&body).into_owned()),
            };
            // An answer after the deadline has no waiter any more: dropped, as on Lambda.
            if let Some(waiter) = lock(&api.waiters).remove(id) {
                let _ = waiter.send(outcome);
            }
            respond(&mut reader, "202 Accepted", &[], b"{}").await;
        } else {
            respond(&mut reader, "404 Not Found", &[], b"{}").await;
        }
    }
}

//! The function binaries (release builds under infra/test.sh), run as Lambda runs them: each talks to a local Lambda
//! Runtime API endpoint (served here), gets a sample event from `infra/events/`, and must post
//! the documented response. This covers `main.rs` wiring, config from template.yaml and init.

use mailctl::local::{CREATE_EMAILS, GET_USERS, SEND_EMAIL};
use mailctl::template::Template;
use mailflow::campaign::Campaign;
use mailflow_tests::test_env;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// What the function posted back for one invocation.
#[derive(Clone, Debug, PartialEq)]
enum Posted {
    Response(Value),
    Error(String),
}

#[derive(Default)]
struct RuntimeApi {
    /// The function's Timeout from template.yaml: each invocation's deadline.
    timeout: Duration,
    events: Mutex<VecDeque<(String, Value)>>,
    posted: Mutex<Vec<(String, Posted)>>,
    init_error: Mutex<Option<String>>,
}

async fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await.ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    Some((method, path, body))
}

async fn respond(
    stream: &mut BufReader<TcpStream>,
    status: &str,
    headers: &[(String, String)],
    body: &[u8],
) {
    let mut out = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let stream = stream.get_mut();
    let _ = stream.write_all(out.as_bytes()).await;
    let _ = stream.write_all(body).await;
}

async fn serve_connection(api: Arc<RuntimeApi>, stream: TcpStream) {
    let mut reader = BufReader::new(stream);
    while let Some((method, path, body)) = read_request(&mut reader).await {
        let path = path.trim_start_matches("/2018-06-01/runtime");
        if method == "GET" && path == "/invocation/next" {
            let next = api.events.lock().unwrap().pop_front();
            let Some((id, event)) = next else {
                // No more events: hold the poll, as Lambda does between invocations.
                std::future::pending::<()>().await;
                return;
            };
            let deadline = (SystemTime::now() + api.timeout)
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis();
            let headers = vec![
                ("Content-Type".to_string(), "application/json".to_string()),
                ("Lambda-Runtime-Aws-Request-Id".to_string(), id),
                (
                    "Lambda-Runtime-Deadline-Ms".to_string(),
                    deadline.to_string(),
                ),
                (
                    "Lambda-Runtime-Invoked-Function-Arn".to_string(),
                    "arn:aws:lambda:us-east-1:123456789012:function:local".to_string(),
                ),
                (
                    "Lambda-Runtime-Trace-Id".to_string(),
                    "Root=1-00000000-000000000000000000000000".to_string(),
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
            *api.init_error.lock().unwrap() = Some(String::from_utf8_lossy(&body).into_owned());
            respond(&mut reader, "202 Accepted", &[], b"{}").await;
        } else if let Some(rest) = path
            .strip_prefix("/invocation/")
            .filter(|_| method == "POST")
        {
            let (id, kind) = rest.split_once('/').unwrap_or((rest, ""));
            let posted = match kind {
                "response" => {
                    Posted::Response(serde_json::from_slice(&body).unwrap_or(Value::Null))
                }
                _ => Posted::Error(String::from_utf8_lossy(&body).into_owned()),
            };
            api.posted.lock().unwrap().push((id.to_owned(), posted));
            respond(&mut reader, "202 Accepted", &[], b"{}").await;
        } else {
            respond(&mut reader, "404 Not Found", &[], b"{}").await;
        }
    }
}

fn sample(name: &str) -> Value {
    let path = mailctl::repo_root().join("infra/events").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

struct Run {
    posted: Vec<(String, Posted)>,
    init_error: Option<String>,
    exit: Option<std::process::ExitStatus>,
    /// Everything the process wrote (logs and errors).
    stderr: String,
}

/// Runs `bin` with `env` against a Runtime API that hands it `events`, until it posted a
/// result for each (or exited), then stops it.
async fn run_function(
    bin: &str,
    function: &str,
    env: BTreeMap<String, String>,
    events: Vec<Value>,
) -> Run {
    let template = Template::load(&mailctl::repo_root().join("template.yaml")).unwrap();
    let timeout = Duration::from_secs(template.function(function).unwrap().timeout.into());
    let api = Arc::new(RuntimeApi {
        timeout,
        ..Default::default()
    });
    let expected = events.len();
    api.events.lock().unwrap().extend(
        events
            .into_iter()
            .enumerate()
            .map(|(i, e)| (format!("req-{i}"), e)),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server_api = api.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(server_api.clone(), stream));
        }
    });
    let mut child = tokio::process::Command::new(mailflow_tests::function_binary(bin))
        .env_clear()
        .envs(std::env::vars().filter(|(k, _)| k.starts_with("AWS_") || k == "PATH"))
        .envs(env)
        .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", bin)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "local")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{bin}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut exit = None;
    for _ in 0..600 {
        if api.posted.lock().unwrap().len() >= expected {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            exit = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if exit.is_none() {
        // Peak memory, for choosing MemorySize (printed, never asserted: machines differ).
        if let Some(pid) = child.id() {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            if let Some(peak) = status.lines().find(|l| l.starts_with("VmHWM")) {
                eprintln!(
                    "{bin}: peak RSS {}",
                    peak.trim_start_matches("VmHWM:").trim()
                );
            }
        }
        child.start_kill().unwrap();
        let _ = child.wait().await;
    }
    // Logs (stdout) and errors (stderr) together, as CloudWatch shows them.
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stderr).await;
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr).await;
    }
    let posted = api.posted.lock().unwrap().clone();
    let init_error = api.init_error.lock().unwrap().clone();
    Run {
        posted,
        init_error,
        exit,
        stderr,
    }
}

fn response(run: &Run) -> &Value {
    match run.posted.first() {
        Some((_, Posted::Response(v))) => v,
        other => panic!("expected a response, got {other:?}; stderr: {}", run.stderr),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binaries_serve_the_sample_events_through_the_runtime_api() {
    let env = test_env("runtime-api", |_| {}).await.unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let seeded = env.seed(30, &campaign).await.unwrap();

    // GetUsers, invoked by hand with infra/events/manual-run.json.
    let run = run_function(
        "get-users",
        GET_USERS,
        env.stack.env(GET_USERS).unwrap(),
        vec![sample("manual-run.json")],
    )
    .await;
    let summary = response(&run);
    assert_eq!(summary["campaignId"], "weekly-2026-W47");
    assert_eq!(
        summary["usersEnqueued"],
        seeded.audience.len(),
        "{}",
        run.stderr
    );
    assert_eq!(
        env.depth("UsersQueue").await.unwrap(),
        seeded.audience.len() as u64
    );

    // GetUsers from the continuation queue: the malformed checkpoint fails alone.
    let run = run_function(
        "get-users",
        GET_USERS,
        env.stack.env(GET_USERS).unwrap(),
        vec![sample("continuation-batch.json")],
    )
    .await;
    assert_eq!(
        response(&run)["batchItemFailures"],
        serde_json::json!([{"itemIdentifier": "c0ffee00-0000-4000-8000-000000000002"}])
    );

    // CreateEmails with a batch whose second record is malformed: only that one fails.
    let run = run_function(
        "create-emails",
        CREATE_EMAILS,
        env.stack.env(CREATE_EMAILS).unwrap(),
        vec![sample("users-batch.json")],
    )
    .await;
    assert_eq!(
        response(&run)["batchItemFailures"],
        serde_json::json!([{"itemIdentifier": "9f1c1d5e-0000-4000-8000-000000000002"}])
    );

    // SendEmail sends the sample job and records it SENT; the malformed job fails alone.
    let run = run_function(
        "send-email",
        SEND_EMAIL,
        env.stack.env(SEND_EMAIL).unwrap(),
        vec![sample("emails-batch.json")],
    )
    .await;
    assert_eq!(
        response(&run)["batchItemFailures"],
        serde_json::json!([{"itemIdentifier": "4b7e0b7a-0000-4000-8000-000000000002"}])
    );
    let records = mailctl::ledger_scan::records(
        &env.dynamo(),
        env.stack.table_name("SendsTable").unwrap(),
        "weekly-2026-W47",
    )
    .await
    .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, Some(mailflow::ledger::SendStatus::Sent));
    assert!(
        !run.stderr.contains("u0000001@example.com"),
        "logs must not carry addresses"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn send_email_refuses_to_start_when_visibility_is_not_above_the_timeout() {
    let env = test_env("refuse-start", |_| {}).await.unwrap();
    let mut vars = env.stack.env(SEND_EMAIL).unwrap();
    vars.insert("VISIBILITY_TIMEOUT_SECONDS".into(), "30".into());
    let run = run_function(
        "send-email",
        SEND_EMAIL,
        vars,
        vec![sample("emails-batch.json")],
    )
    .await;
    assert!(run.posted.is_empty(), "it must not serve any event");
    let exit = run.exit.expect("the process exits at init");
    assert!(!exit.success());
    let reported = format!("{} {}", run.stderr, run.init_error.unwrap_or_default());
    assert!(
        reported.contains("VISIBILITY_TIMEOUT_SECONDS")
            && reported.contains("must be greater than FUNCTION_TIMEOUT_SECONDS"),
        "{reported}"
    );
}

//! A fault switch for tests: an HTTP proxy on 127.0.0.1 in front of the AWS emulator that
//! makes chosen calls fail or hang, by service and operation, while every other call passes
//! through untouched. Point a function's SDK at `url()` (`PipelineOptions::aws_endpoint`)
//! and the function meets the fault exactly where AWS would give it: a 5xx or a throttling
//! error it must classify, or an answer that never comes.
//!
//! The service is read from the request's SigV4 credential scope (`dynamodb`, `sqs`, `ses`,
//! `scheduler`, ...); the operation from `X-Amz-Target` (JSON protocols) or, for the REST
//! services we call, from the method and path (`SendEmail`, `CreateSchedule`, ...).

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// What a matching call meets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// An error answer: `status` with the AWS error `code` (e.g. 500 InternalServerError,
    /// 400 ThrottlingException), in both JSON protocols' shapes.
    Fail { status: u16, code: String },
    /// No answer at all: the request is held until the client gives up.
    Hang,
    /// The call passes, this much later (a slow dependency).
    Delay(std::time::Duration),
}

#[derive(Clone, Debug)]
struct Rule {
    service: String,
    /// `*` for every operation of the service.
    operation: String,
    fault: Fault,
    /// How many more calls it applies to (None: every call until cleared).
    remaining: Option<usize>,
}

/// One call the switch faulted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    pub service: String,
    pub operation: String,
    pub fault: Fault,
}

#[derive(Default)]
struct Rules {
    rules: Vec<Rule>,
    hits: Vec<Hit>,
}

pub struct FaultSwitch {
    addr: SocketAddr,
    rules: Arc<Mutex<Rules>>,
}

fn lock(rules: &Mutex<Rules>) -> std::sync::MutexGuard<'_, Rules> {
    rules.lock().unwrap_or_else(|p| p.into_inner())
}

impl FaultSwitch {
    /// Starts the proxy in front of `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> Result<Self> {
        let (host, _) = crate::http::split_url(upstream)?;
        let upstream: SocketAddr = host
            .parse()
            .with_context(|| format!("the fault switch needs an address, not {host}"))?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fault switch on 127.0.0.1")?;
        let switch = Self {
            addr: listener.local_addr()?,
            rules: Arc::default(),
        };
        let rules = switch.rules.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(proxy(client, upstream, rules.clone()));
            }
        });
        Ok(switch)
    }

    /// The URL to give clients instead of the emulator's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Makes `operation` of `service` (`*`: all of them) meet `fault`, for the next `times`
    /// calls (None: until `clear`).
    pub fn set(&self, service: &str, operation: &str, fault: Fault, times: Option<usize>) {
        lock(&self.rules).rules.push(Rule {
            service: service.to_owned(),
            operation: operation.to_owned(),
            fault,
            remaining: times,
        });
    }

    /// Every call passes again.
    pub fn clear(&self) {
        lock(&self.rules).rules.clear();
    }

    /// `sdk` with every service's calls sent through the switch. The endpoint must be set
    /// as service config too: there AWS_ENDPOINT_URL from the environment would win over
    /// the SdkConfig's own endpoint.
    pub fn sdk_through(&self, sdk: &aws_config::SdkConfig) -> aws_config::SdkConfig {
        through(sdk, &self.url())
    }

    /// The calls faulted so far.
    pub fn hits(&self) -> Vec<Hit> {
        lock(&self.rules).hits.clone()
    }
}

/// `sdk` with every service's endpoint `url`.
pub fn through(sdk: &aws_config::SdkConfig, url: &str) -> aws_config::SdkConfig {
    let mut builder = sdk.to_builder().endpoint_url(url);
    builder.set_service_config(Some(Endpoint(url.to_owned())));
    builder.build()
}

#[derive(Debug)]
struct Endpoint(String);

impl aws_types::service_config::LoadServiceConfig for Endpoint {
    fn load_config(&self, key: aws_types::service_config::ServiceConfigKey<'_>) -> Option<String> {
        (key.env() == "AWS_ENDPOINT_URL").then(|| self.0.clone())
    }
}

/// The fault for this call, if a rule matches (and uses one of its `times`).
fn decide(rules: &Mutex<Rules>, service: &str, operation: &str) -> Option<Fault> {
    let mut rules = lock(rules);
    let rule = rules.rules.iter_mut().find(|r| {
        r.service == service
            && (r.operation == "*" || r.operation == operation)
            && r.remaining != Some(0)
    })?;
    if let Some(n) = &mut rule.remaining {
        *n -= 1;
    }
    let fault = rule.fault.clone();
    rules.hits.push(Hit {
        service: service.to_owned(),
        operation: operation.to_owned(),
        fault: fault.clone(),
    });
    Some(fault)
}

/// One client connection, relayed over one upstream connection. The SDK sends a request and
/// waits for its answer before the next on the same connection, so an answer the switch
/// writes itself never interleaves with one from upstream.
async fn proxy(client: TcpStream, upstream: SocketAddr, rules: Arc<Mutex<Rules>>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    let client_write = Arc::new(tokio::sync::Mutex::new(client_write));
    let answers = {
        let client_write = client_write.clone();
        tokio::spawn(async move {
            let mut server_read = server_read;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match server_read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if client_write
                    .lock()
                    .await
                    .write_all(&buf[..n])
                    .await
                    .is_err()
                {
                    break;
                }
            }
            let _ = client_write.lock().await.shutdown().await;
        })
    };
    let mut reader = BufReader::new(client_read);
    while let Some(request) = read_raw(&mut reader).await {
        match decide(&rules, &request.service, &request.operation) {
            Some(Fault::Delay(by)) => {
                tokio::time::sleep(by).await;
                if server_write.write_all(&request.bytes).await.is_err() {
                    break;
                }
            }
            None => {
                if server_write.write_all(&request.bytes).await.is_err() {
                    break;
                }
            }
            Some(Fault::Hang) => {
                // Hold the connection, answering nothing, until the client closes it.
                let mut sink = [0u8; 1024];
                while matches!(reader.read(&mut sink).await, Ok(n) if n > 0) {}
                break;
            }
            Some(Fault::Fail { status, code }) => {
                let body =
                    format!(r#"{{"__type":"{code}","message":"injected by the fault switch"}}"#);
                let answer = format!(
                    "HTTP/1.1 {status} Injected\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-ErrorType: {code}\r\nx-amzn-query-error: {code};Sender\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if client_write
                    .lock()
                    .await
                    .write_all(answer.as_bytes())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    answers.abort();
}

struct RawRequest {
    service: String,
    operation: String,
    /// The request as the client sent it, head and body.
    bytes: Vec<u8>,
}

/// The next request on the connection, its bytes kept as sent (None: closed, or framing the
/// switch does not follow, such as a chunked body).
async fn read_raw<R: AsyncBufRead + Unpin>(reader: &mut R) -> Option<RawRequest> {
    let mut bytes = Vec::new();
    let mut line = String::new();
    if reader.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    bytes.extend_from_slice(line.as_bytes());
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let (mut length, mut amz_target, mut scope) = (0usize, None, None);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await.ok()? == 0 {
            return None;
        }
        bytes.extend_from_slice(header.as_bytes());
        let trimmed = header.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let Some((name, value)) = trimmed.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().ok()?,
            "transfer-encoding" => return None,
            "x-amz-target" => amz_target = Some(value.to_owned()),
            "authorization" => scope = credential_service(value),
            _ => {}
        }
    }
    let start = bytes.len();
    bytes.resize(start + length, 0);
    reader.read_exact(&mut bytes[start..]).await.ok()?;
    let operation = match amz_target {
        Some(t) => t.rsplit('.').next().unwrap_or_default().to_owned(),
        None => rest_operation(&method, &target),
    };
    Some(RawRequest {
        service: scope.unwrap_or_default(),
        operation,
        bytes,
    })
}

/// The service of a SigV4 `Authorization` header (`Credential=KEY/DATE/REGION/SERVICE/...`).
fn credential_service(authorization: &str) -> Option<String> {
    let credential = authorization.split("Credential=").nth(1)?;
    let scope = credential.split([',', ' ']).next()?;
    scope.split('/').nth(3).map(str::to_owned)
}

/// The operation of a REST call we make (SES v2, Scheduler, Lambda), else `METHOD /path`.
fn rest_operation(method: &str, target: &str) -> String {
    let path = target.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let name = match (method, segments.as_slice()) {
        ("POST", ["v2", "email", "outbound-emails"]) => "SendEmail",
        ("GET", ["v2", "email", "account"]) => "GetAccount",
        ("GET", ["schedules"]) => "ListSchedules",
        ("GET", ["schedules", _]) => "GetSchedule",
        ("POST", ["schedules", _]) => "CreateSchedule",
        ("PUT", ["schedules", _]) => "UpdateSchedule",
        ("DELETE", ["schedules", _]) => "DeleteSchedule",
        ("GET", [_, "event-source-mappings", _]) => "GetEventSourceMapping",
        ("PUT", [_, "event-source-mappings", _]) => "UpdateEventSourceMapping",
        _ => return format!("{method} {path}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_service_and_operation_of_each_protocol() {
        let auth = "AWS4-HMAC-SHA256 Credential=test/20261126/us-east-1/scheduler/aws4_request, SignedHeaders=host, Signature=ab";
        assert_eq!(credential_service(auth).as_deref(), Some("scheduler"));
        assert_eq!(
            rest_operation("POST", "/schedules/slot-1?x=y"),
            "CreateSchedule"
        );
        assert_eq!(
            rest_operation("POST", "/v2/email/outbound-emails"),
            "SendEmail"
        );
        assert_eq!(rest_operation("PATCH", "/odd/path"), "PATCH /odd/path");
    }

    #[test]
    fn a_rule_with_a_count_applies_that_many_times() {
        let rules = Mutex::new(Rules::default());
        lock(&rules).rules.push(Rule {
            service: "dynamodb".into(),
            operation: "Query".into(),
            fault: Fault::Hang,
            remaining: Some(2),
        });
        assert_eq!(decide(&rules, "dynamodb", "PutItem"), None);
        assert_eq!(decide(&rules, "dynamodb", "Query"), Some(Fault::Hang));
        assert_eq!(decide(&rules, "dynamodb", "Query"), Some(Fault::Hang));
        assert_eq!(decide(&rules, "dynamodb", "Query"), None);
        assert_eq!(lock(&rules).hits.len(), 2);
    }
}

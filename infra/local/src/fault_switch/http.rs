//! The fault switch's HTTP side, in front of the AWS emulator. The service is read from the
//! request's SigV4 credential scope (`dynamodb`, `sqs`, `ses`, `scheduler`, ...); the
//! operation from `X-Amz-Target` (the JSON protocols) or, for the REST services we call, from
//! the method and path (`SendEmail`, `CreateSchedule`, ...). The SDK sends a request and
//! waits for its answer before the next on the same connection.

use super::{decide, hang, relay, Fault, Rules};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One client connection, relayed over one upstream connection. The SDK sends a request and
/// waits for its answer before the next on the same connection, so an answer the switch
/// writes itself never interleaves with one from upstream.
pub(super) async fn proxy(client: TcpStream, server: TcpStream, rules: Arc<Mutex<Rules>>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    let client_write = Arc::new(tokio::sync::Mutex::new(client_write));
    let answers = relay(server_read, client_write.clone());
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
                hang(&mut reader).await;
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
}

//! A Lambda Function URL on the local stack: real HTTP requests on 127.0.0.1, each turned
//! into the event a Function URL sends its function (payload format 2.0), and the
//! function's response turned back into HTTP. `mailctl serve-unsubscribe` and the tests
//! serve the Unsubscribe handler through it, so the links in local emails work.

use crate::http::{read_request, respond, Request};
use anyhow::{Context, Result};
use base64::Engine;
use futures::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};

/// A function's handler: the Function URL event in, its response out.
pub type Handler = Arc<dyn Fn(Value) -> BoxFuture<'static, Value> + Send + Sync>;

pub struct FunctionUrl {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl FunctionUrl {
    /// Serves `handler` on `127.0.0.1:port` (0: any free port) until dropped.
    pub async fn serve(port: u16, handler: Handler) -> Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("listening on 127.0.0.1:{port}"))?;
        let url = format!("http://{}/", listener.local_addr()?);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(connection(stream, handler.clone()));
            }
        });
        Ok(Self { url, task })
    }

    /// `http://127.0.0.1:<port>/`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Serves until the process is stopped.
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for FunctionUrl {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connection(stream: TcpStream, handler: Handler) {
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader).await {
        let response = handler(event(&request)).await;
        let status = response["statusCode"].as_u64().unwrap_or(502);
        let mut headers: Vec<(&str, String)> = Vec::new();
        if let Some(map) = response["headers"].as_object() {
            for (k, v) in map {
                headers.push((k.as_str(), v.as_str().unwrap_or_default().to_owned()));
            }
        }
        let body = response["body"].as_str().unwrap_or_default();
        let body = if response["isBase64Encoded"] == Value::Bool(true) {
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .unwrap_or_default()
        } else {
            body.as_bytes().to_vec()
        };
        let head = match request.method.as_str() {
            "HEAD" => Vec::new(),
            _ => body,
        };
        respond(
            &mut reader,
            &format!("{status} {}", reason(status)),
            &headers,
            &head,
        )
        .await;
        let close = request
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        if close {
            return;
        }
    }
}

fn reason(status: u64) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// The event AWS sends a function for this request (payload format 2.0).
fn event(request: &Request) -> Value {
    static REQUESTS: AtomicU64 = AtomicU64::new(0);
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((request.target.as_str(), ""));
    let headers: serde_json::Map<String, Value> = request
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "requestId": format!("local-{}", REQUESTS.fetch_add(1, Ordering::Relaxed)),
            "http": {
                "method": request.method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": request.header("user-agent").unwrap_or_default(),
            },
            "timeEpoch": now.as_millis() as u64,
        },
        "body": base64::engine::general_purpose::STANDARD.encode(&request.body),
        "isBase64Encoded": true,
    })
}

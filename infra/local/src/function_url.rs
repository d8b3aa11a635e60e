//! A Lambda Function URL on the local stack: real HTTP requests on 127.0.0.1, each turned
//! into the event a Function URL sends its function (payload format 2.0), and the
//! function's response turned back into HTTP. `mailctl serve-unsubscribe` and the tests
//! serve the Unsubscribe handler through it, so the links in local emails work.
//!
//! As Lambda does for a function with reserved concurrency (`ReservedConcurrentExecutions`,
//! from template.yaml), a request is answered 429 when that many invocations are already
//! running, or when the function has had ten times that many requests in the last second
//! (Lambda's ten requests per second per environment); `throttled` counts them, as the
//! `Throttles` metric does.

use crate::http::{read_request, respond, Request};
use anyhow::{Context, Result};
use base64::Engine;
use futures::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A function's handler: the Function URL event in, its response out.
pub type Handler = Arc<dyn Fn(Value) -> BoxFuture<'static, Value> + Send + Sync>;

/// Lambda's requests per second per environment of a function's concurrency.
pub const REQUESTS_PER_SECOND_PER_ENVIRONMENT: u32 = 10;

/// A bucket of one second's requests, refilled continuously: how Lambda counts within the
/// second is not published, so a burst of up to a second's worth passes, then the rate.
#[derive(Debug)]
pub struct RequestRate {
    per_second: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl RequestRate {
    pub fn new(per_second: u32) -> Self {
        Self {
            per_second: f64::from(per_second),
            tokens: f64::from(per_second),
            at: None,
        }
    }

    /// Whether a request arriving at `now` is served (and counted).
    pub fn admit(&mut self, now: Instant) -> bool {
        if let Some(at) = self.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * self.per_second;
            self.tokens = (self.tokens + refill).min(self.per_second);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What holds a function's invocations back: its reserved concurrency and request rate.
struct Throttle {
    in_flight: Arc<Semaphore>,
    rate: Mutex<RequestRate>,
}

impl Throttle {
    fn new(reserved: u32) -> Self {
        Self {
            in_flight: Arc::new(Semaphore::new(reserved as usize)),
            rate: Mutex::new(RequestRate::new(
                reserved.saturating_mul(REQUESTS_PER_SECOND_PER_ENVIRONMENT),
            )),
        }
    }

    /// An environment for one invocation, or None: throttled.
    fn admit(&self) -> Option<OwnedSemaphorePermit> {
        let permit = self.in_flight.clone().try_acquire_owned().ok()?;
        let admitted = self
            .rate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit(Instant::now());
        admitted.then_some(permit)
    }
}

/// The function behind the URL: its handler and what Lambda holds it to.
struct Function {
    handler: Handler,
    throttle: Option<Throttle>,
    throttled: Arc<AtomicU64>,
}

pub struct FunctionUrl {
    url: String,
    reserved: Option<u32>,
    throttled: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FunctionUrl {
    /// Serves `handler` on `127.0.0.1:port` (0: any free port) until dropped, without a
    /// concurrency bound (a page the tests serve, not a function).
    pub async fn serve(port: u16, handler: Handler) -> Result<Self> {
        Self::serve_reserved(port, handler, None).await
    }

    /// Serves `handler` as a function whose `ReservedConcurrentExecutions` is `reserved`:
    /// beyond that many at once, or ten times that many per second, a request gets 429.
    pub async fn serve_reserved(
        port: u16,
        handler: Handler,
        reserved: Option<u32>,
    ) -> Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("listening on 127.0.0.1:{port}"))?;
        let url = format!("http://{}/", listener.local_addr()?);
        let throttled = Arc::new(AtomicU64::new(0));
        let function = Arc::new(Function {
            handler,
            throttle: reserved.map(Throttle::new),
            throttled: throttled.clone(),
        });
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(connection(stream, function.clone()));
            }
        });
        Ok(Self {
            url,
            reserved,
            throttled,
            task,
        })
    }

    /// `http://127.0.0.1:<port>/`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The function's reserved concurrency, as served.
    pub fn reserved(&self) -> Option<u32> {
        self.reserved
    }

    /// Requests answered 429 so far (Lambda's `Throttles` metric).
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::SeqCst)
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

/// What a throttled request gets (Lambda's Invoke API words it so; only the status matters).
fn throttled_response() -> Value {
    json!({
        "statusCode": 429,
        "headers": {"content-type": "application/json"},
        "body": "{\"Message\":\"Rate Exceeded.\"}",
        "isBase64Encoded": false,
    })
}

/// The function's answer to `request`, or 429 when Lambda would not invoke it.
async fn invoke(function: &Function, request: &Request) -> Value {
    let permit = match &function.throttle {
        None => None,
        Some(throttle) => match throttle.admit() {
            Some(permit) => Some(permit),
            None => {
                function.throttled.fetch_add(1, Ordering::SeqCst);
                return throttled_response();
            }
        },
    };
    let response = (function.handler)(event(request)).await;
    // The environment is busy until the function has answered.
    drop(permit);
    response
}

async fn connection(stream: TcpStream, function: Arc<Function>) {
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader).await {
        let response = invoke(&function, &request).await;
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
        307 => "Temporary Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        502 => "Bad Gateway",
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_second_of_requests_passes_then_the_rate() {
        let start = Instant::now();
        let mut rate = RequestRate::new(20);
        // A burst: the first second's twenty pass, the next is refused.
        assert!((0..20).all(|_| rate.admit(start)));
        assert!(!rate.admit(start));
        // 100 ms later two more have come back, not three.
        let later = start + Duration::from_millis(100);
        assert!(rate.admit(later) && rate.admit(later));
        assert!(!rate.admit(later));
        // A steady 20 a second passes for ever; 21 a second does not.
        let mut steady = RequestRate::new(20);
        assert!((0..200).all(|i| steady.admit(start + Duration::from_millis(50 * i))));
        // 21 a second for 30 s: 630 requests against 20 + 20 x 30 s.
        let mut faster = RequestRate::new(20);
        let refused = (0..630)
            .filter(|i| !faster.admit(start + Duration::from_micros(47_620 * i)))
            .count();
        assert_eq!(refused, 11);
        // A quiet spell refills a second's worth, no more.
        let quiet = start + Duration::from_secs(60);
        assert_eq!((0..25).filter(|_| steady.admit(quiet)).count(), 20);
    }

    #[tokio::test]
    async fn beyond_its_reserved_concurrency_a_request_gets_429() {
        let gate = Arc::new(Semaphore::new(0));
        let arrived = Arc::new(AtomicU64::new(0));
        let (held, seen) = (gate.clone(), arrived.clone());
        let server = FunctionUrl::serve_reserved(
            0,
            Arc::new(move |_event| {
                let (held, seen) = (held.clone(), seen.clone());
                Box::pin(async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let _pass = held.acquire().await.unwrap();
                    json!({"statusCode": 200, "body": "ok"})
                })
            }),
            Some(2),
        )
        .await
        .unwrap();
        assert_eq!(server.reserved(), Some(2));
        let url = server.url().to_owned();
        let get = |url: String| async move {
            crate::http::request(&url, "GET", &[], b"")
                .await
                .unwrap()
                .status
        };
        // Two invocations hold both environments...
        let first = tokio::spawn(get(url.clone()));
        let second = tokio::spawn(get(url.clone()));
        while arrived.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // ...so a third is throttled at once, without reaching the function.
        assert_eq!(get(url.clone()).await, 429);
        assert_eq!((server.throttled(), arrived.load(Ordering::SeqCst)), (1, 2));
        gate.add_permits(3);
        assert_eq!((first.await.unwrap(), second.await.unwrap()), (200, 200));
        // Both environments free again: served.
        assert_eq!(get(url).await, 200);
        assert_eq!(server.throttled(), 1);
    }
}

//! A fault switch for tests: a proxy on 127.0.0.1 in front of the AWS emulator (`start`,
//! see `http`) or the MongoDB server (`start_mongodb`, see `mongodb`) that makes chosen calls
//! fail, hang or slow down, by service and operation, while every other call passes through
//! untouched. Point a function's SDK at `url()` (`PipelineOptions::aws_endpoint`), or its
//! `MONGODB_URI` at `mongodb_uri()`, and the function meets the fault exactly where the
//! service would give it: an error it must classify, or an answer that never comes.
//!
//! Both protocols ask one question at a time on a connection, so an answer the switch writes
//! itself never interleaves with one relayed from upstream.

mod http;
mod mongodb;

use anyhow::{Context, Result};
use mailflow::runtime::lock;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// What a matching call meets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// An error answer: for AWS, HTTP `status` with the error `code` (e.g. 500
    /// InternalServerError, 400 ThrottlingException) in both JSON protocols' shapes; for
    /// MongoDB, `{ok: 0, code: status, codeName: code}`.
    Fail { status: u16, code: String },
    /// No answer at all: the request is held until the client gives up.
    Hang,
    /// The call passes, this much later (a slow dependency).
    Delay(std::time::Duration),
}

struct Rule {
    service: String,
    /// `*` for every operation of the service.
    operation: String,
    fault: Fault,
    /// How many more calls it applies to (None: every call until cleared).
    remaining: Option<usize>,
    /// Asked at each call the rule matches: it applies only while this says so.
    applies: Option<Condition>,
}

/// When a rule applies (e.g. until Lambda has given up on an invocation), for a fault a count
/// of calls cannot place: calls made at once by many tasks spend a count across them, and
/// each one's own retries then pass.
pub type Condition = Arc<dyn Fn() -> bool + Send + Sync>;

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

/// The service name MongoDB commands are switched under.
pub const MONGODB: &str = "mongodb";

impl FaultSwitch {
    /// Starts the proxy in front of the AWS emulator at `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> Result<Self> {
        let (host, _) = crate::http::split_url(upstream)?;
        let upstream: SocketAddr = host
            .parse()
            .with_context(|| format!("the fault switch needs an address, not {host}"))?;
        Self::listen(upstream, http::proxy).await
    }

    /// Starts the proxy in front of the MongoDB server at `upstream` (`127.0.0.1:PORT`);
    /// its commands are switched as service `MONGODB`.
    pub async fn start_mongodb(upstream: SocketAddr) -> Result<Self> {
        Self::listen(upstream, mongodb::proxy).await
    }

    async fn listen<P, F>(upstream: SocketAddr, proxy: P) -> Result<Self>
    where
        P: Fn(TcpStream, TcpStream, Arc<Mutex<Rules>>) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
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
                if let Ok(server) = TcpStream::connect(upstream).await {
                    tokio::spawn(proxy(client, server, rules.clone()));
                }
            }
        });
        Ok(switch)
    }

    /// The URL to give AWS clients instead of the emulator's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The URI to give MongoDB clients instead of the server's (one server, no discovery).
    pub fn mongodb_uri(&self) -> String {
        format!("mongodb://{}/?directConnection=true", self.addr)
    }

    /// Makes `operation` of `service` (`*`: all of them) meet `fault`, for the next `times`
    /// calls (None: until `clear`). MongoDB: service `MONGODB`, the command as operation.
    /// A count is of calls on the wire: the AWS SDK retries a 5xx or a throttling error up to
    /// three attempts, so `Some(2)` of those is absorbed by its retries.
    pub fn set(&self, service: &str, operation: &str, fault: Fault, times: Option<usize>) {
        lock(&self.rules).rules.push(Rule {
            service: service.to_owned(),
            operation: operation.to_owned(),
            fault,
            remaining: times,
            applies: None,
        });
    }

    /// Makes `operation` of `service` (`*`: all of them) meet `fault` at every call made
    /// while `applies` says so. It is asked with the switch's rules locked: it must be quick
    /// and must not call the switch.
    pub fn set_while(&self, service: &str, operation: &str, fault: Fault, applies: Condition) {
        lock(&self.rules).rules.push(Rule {
            service: service.to_owned(),
            operation: operation.to_owned(),
            fault,
            remaining: None,
            applies: Some(applies),
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
            && r.applies.as_ref().is_none_or(|applies| applies())
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

/// Relays upstream's answers to the client as they come, under the lock the switch's own
/// answers are written with.
fn relay(
    mut server: OwnedReadHalf,
    client: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if client.lock().await.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client.lock().await.shutdown().await;
    })
}

/// Holds a connection whose question is never answered, until the client closes it.
async fn hang(client: &mut (impl tokio::io::AsyncRead + Unpin)) {
    let mut sink = [0u8; 1024];
    while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_with_a_count_applies_that_many_times() {
        let rules = Mutex::new(Rules::default());
        lock(&rules).rules.push(Rule {
            service: "dynamodb".into(),
            operation: "Query".into(),
            fault: Fault::Hang,
            remaining: Some(2),
            applies: None,
        });
        assert_eq!(decide(&rules, "dynamodb", "PutItem"), None);
        assert_eq!(decide(&rules, "dynamodb", "Query"), Some(Fault::Hang));
        assert_eq!(decide(&rules, "dynamodb", "Query"), Some(Fault::Hang));
        assert_eq!(decide(&rules, "dynamodb", "Query"), None);
        assert_eq!(lock(&rules).hits.len(), 2);
    }

    #[test]
    fn a_rule_with_a_condition_applies_while_it_holds() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let rules = Mutex::new(Rules::default());
        let on = Arc::new(AtomicBool::new(true));
        let flag = on.clone();
        lock(&rules).rules.push(Rule {
            service: "dynamodb".into(),
            operation: "Query".into(),
            fault: Fault::Hang,
            remaining: None,
            applies: Some(Arc::new(move || flag.load(Ordering::SeqCst))),
        });
        assert_eq!(decide(&rules, "dynamodb", "Query"), Some(Fault::Hang));
        assert_eq!(decide(&rules, "dynamodb", "Query"), Some(Fault::Hang));
        on.store(false, Ordering::SeqCst);
        assert_eq!(decide(&rules, "dynamodb", "Query"), None);
    }
}

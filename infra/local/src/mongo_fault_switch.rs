//! The fault switch's MongoDB half: a proxy on 127.0.0.1 in front of the MongoDB server that
//! makes chosen commands (`find`, `aggregate`, `update`, ...) fail or hang, and passes every
//! other message through untouched. Point a function's `MONGODB_URI` at `uri()`.
//!
//! The driver speaks OP_MSG: a 16-byte header (length, request id, the id answered, op
//! code 2013), flags, then sections; the first section's document names the command as its
//! first key. Replies are relayed as they come: the driver matches them by request id.

use crate::fault_switch::Fault;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const OP_MSG: i32 = 2013;
/// Messages above this are passed through without a look (the server's own limit is 48 MB).
const MAX_MESSAGE: usize = 48 * 1024 * 1024;

#[derive(Clone, Debug)]
struct Rule {
    command: String,
    fault: Fault,
    remaining: Option<usize>,
}

#[derive(Default)]
struct Rules {
    rules: Vec<Rule>,
    hits: Vec<String>,
}

fn lock(rules: &Mutex<Rules>) -> std::sync::MutexGuard<'_, Rules> {
    rules.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct MongoFaultSwitch {
    addr: SocketAddr,
    rules: Arc<Mutex<Rules>>,
}

impl MongoFaultSwitch {
    /// Starts the proxy in front of the server at `upstream` (`127.0.0.1:PORT`).
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the MongoDB fault switch on 127.0.0.1")?;
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

    /// A URI for the proxy (one server, no discovery of others).
    pub fn uri(&self) -> String {
        format!("mongodb://{}/?directConnection=true", self.addr)
    }

    /// Makes `command` (`*`: every command but the handshake's) meet `fault`, for the next
    /// `times` messages (None: until `clear`).
    pub fn set(&self, command: &str, fault: Fault, times: Option<usize>) {
        lock(&self.rules).rules.push(Rule {
            command: command.to_owned(),
            fault,
            remaining: times,
        });
    }

    pub fn clear(&self) {
        lock(&self.rules).rules.clear();
    }

    /// The commands faulted so far.
    pub fn hits(&self) -> Vec<String> {
        lock(&self.rules).hits.clone()
    }
}

/// The handshake and the monitor's checks are never faulted: a server that cannot be
/// selected is an outage, which the chaos run's restart already shows.
fn exempt(command: &str) -> bool {
    matches!(
        command,
        "hello" | "isMaster" | "ismaster" | "buildInfo" | "buildinfo" | "ping" | "endSessions"
    )
}

fn decide(rules: &Mutex<Rules>, command: &str) -> Option<Fault> {
    if exempt(command) {
        return None;
    }
    let mut rules = lock(rules);
    let rule = rules
        .rules
        .iter_mut()
        .find(|r| (r.command == "*" || r.command == command) && r.remaining != Some(0))?;
    if let Some(n) = &mut rule.remaining {
        *n -= 1;
    }
    let fault = rule.fault.clone();
    rules.hits.push(command.to_owned());
    Some(fault)
}

/// The command an OP_MSG names (the first key of its body section), if it is one.
fn command_of(message: &[u8]) -> Option<String> {
    let op_code = i32::from_le_bytes(message.get(12..16)?.try_into().ok()?);
    if op_code != OP_MSG {
        return None;
    }
    // Header (16), flag bits (4), then a section: kind 0 is the body document.
    if *message.get(20)? != 0 {
        return None;
    }
    // The document: its length (4), then elements: a type byte and the name as a C string.
    let name_start = 21 + 4 + 1;
    let name_len = message.get(name_start..)?.iter().position(|b| *b == 0)?;
    String::from_utf8(message[name_start..name_start + name_len].to_vec()).ok()
}

/// An OP_MSG reply to `request_id` with `{ok: 0, errmsg, code, codeName}`.
fn error_reply(request_id: i32, status: u16, code: &str) -> Vec<u8> {
    let body = mongodb::bson::doc! {
        "ok": 0.0,
        "errmsg": format!("injected by the fault switch ({code})"),
        "code": i32::from(status),
        "codeName": code,
    };
    let mut document = Vec::new();
    body.to_writer(&mut document).unwrap_or_default();
    let length = (16 + 4 + 1 + document.len()) as i32;
    let mut reply = Vec::with_capacity(length as usize);
    reply.extend_from_slice(&length.to_le_bytes());
    reply.extend_from_slice(&0i32.to_le_bytes());
    reply.extend_from_slice(&request_id.to_le_bytes());
    reply.extend_from_slice(&OP_MSG.to_le_bytes());
    reply.extend_from_slice(&0u32.to_le_bytes());
    reply.push(0);
    reply.extend_from_slice(&document);
    reply
}

async fn read_message(stream: &mut tokio::net::tcp::OwnedReadHalf) -> Option<Vec<u8>> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.ok()?;
    let length = usize::try_from(i32::from_le_bytes(header)).ok()?;
    if !(16..=MAX_MESSAGE).contains(&length) {
        return None;
    }
    let mut message = vec![0u8; length];
    message[..4].copy_from_slice(&header);
    stream.read_exact(&mut message[4..]).await.ok()?;
    Some(message)
}

async fn proxy(client: TcpStream, upstream: SocketAddr, rules: Arc<Mutex<Rules>>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let client_write = Arc::new(tokio::sync::Mutex::new(client_write));
    let replies = {
        let client_write = client_write.clone();
        tokio::spawn(async move {
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
        })
    };
    while let Some(message) = read_message(&mut client_read).await {
        let fault = command_of(&message).and_then(|c| decide(&rules, &c));
        match fault {
            None => {
                if server_write.write_all(&message).await.is_err() {
                    break;
                }
            }
            Some(Fault::Delay(by)) => {
                tokio::time::sleep(by).await;
                if server_write.write_all(&message).await.is_err() {
                    break;
                }
            }
            Some(Fault::Hang) => {
                // Nothing more on this connection until the driver closes it.
                let mut sink = [0u8; 1024];
                while matches!(client_read.read(&mut sink).await, Ok(n) if n > 0) {}
                break;
            }
            Some(Fault::Fail { status, code }) => {
                let request_id = i32::from_le_bytes(message[4..8].try_into().unwrap_or_default());
                let reply = error_reply(request_id, status, &code);
                // Whole replies only: the relay writes under the same lock.
                if client_write.lock().await.write_all(&reply).await.is_err() {
                    break;
                }
            }
        }
    }
    replies.abort();
}

//! The fault switch's MongoDB side: chosen commands (`find`, `aggregate`, `update`, ...)
//! fail, hang or slow down; every other message passes untouched. The driver speaks OP_MSG:
//! a 16-byte header (length, request id, the id answered, op code 2013), flags, then
//! sections; the first section's document names the command as its first key. The driver
//! waits for a reply before it sends the next command on the same connection.

use super::{decide, hang, relay, Fault, Rules, MONGODB};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OP_MSG: i32 = 2013;
/// Messages above this are passed through without a look (the server's own limit is 48 MB).
const MAX_MESSAGE: usize = 48 * 1024 * 1024;

/// The handshake and the monitor's checks are never faulted: a server that cannot be
/// selected is an outage, which the chaos run's restart already shows.
fn exempt(command: &str) -> bool {
    matches!(
        command,
        "hello" | "isMaster" | "ismaster" | "buildInfo" | "buildinfo" | "ping" | "endSessions"
    )
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

pub(super) async fn proxy(client: TcpStream, server: TcpStream, rules: Arc<Mutex<Rules>>) {
    let (mut client_read, client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    let client_write = Arc::new(tokio::sync::Mutex::new(client_write));
    let replies = relay(server_read, client_write.clone());
    while let Some(message) = read_message(&mut client_read).await {
        let fault = command_of(&message)
            .filter(|c| !exempt(c))
            .and_then(|c| decide(&rules, MONGODB, &c));
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
                hang(&mut client_read).await;
                break;
            }
            Some(Fault::Fail { status, code }) => {
                let request_id = i32::from_le_bytes(message[4..8].try_into().unwrap_or_default());
                let reply = error_reply(request_id, status, &code);
                if client_write.lock().await.write_all(&reply).await.is_err() {
                    break;
                }
            }
        }
    }
    replies.abort();
}

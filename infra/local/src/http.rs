//! Just enough HTTP/1.1 for the local stack's own servers (the Lambda Runtime API, the local
//! Function URL) and clients (the SES emulator's record, the tests' requests), so that no
//! HTTP framework is compiled for them.

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long a client request may take, response included.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Bodies above this are refused (the local servers take small JSON and forms).
const MAX_BODY: usize = 1 << 20;

pub struct Request {
    pub method: String,
    /// Path and query, as on the request line.
    pub target: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The next request on a connection, or None when it closed (or sent something else).
pub async fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await.ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if length > MAX_BODY {
        return None;
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

/// Writes one response (`status` like `200 OK`), keeping the connection open.
pub async fn respond(
    stream: &mut BufReader<TcpStream>,
    status: &str,
    headers: &[(&str, String)],
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

/// `host:port` and the path of an `http://host:port/path` URL.
pub fn split_url(url: &str) -> Result<(&str, &str)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url:?} is not an http:// URL"))?;
    Ok(match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    })
}

pub struct Response {
    pub status: u16,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request on a fresh connection (closed after the response, read to its end).
/// A `Transfer-Encoding: chunked` body, joined (chunk extensions and trailers ignored).
fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk size line without its end")?;
        let size_text = String::from_utf8_lossy(&raw[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("chunk size {size_text:?} is not hexadecimal"))?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        anyhow::ensure!(raw.len() >= size, "a chunk shorter than its size");
        body.extend_from_slice(&raw[..size]);
        raw = raw.get(size + 2..).unwrap_or_default();
    }
}

pub async fn request(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response> {
    let (host, path) = split_url(url)?;
    let mut stream = TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut raw = Vec::new();
    // The server closes after the response (Connection: close); one that does not fails
    // here rather than hanging the caller.
    tokio::time::timeout(REQUEST_TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .with_context(|| format!("{host} did not answer within {REQUEST_TIMEOUT:?}"))??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .with_context(|| format!("malformed HTTP response from {host}"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status line from {host}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    // The AWS emulator answers a large invocation response in chunks.
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"))
    {
        body = dechunk(&body).with_context(|| format!("malformed chunked body from {host}"))?;
    }
    if let Some(length) = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        if body.len() < length {
            bail!(
                "{host} closed the connection {} bytes into a {length}-byte body",
                body.len()
            );
        }
        body.truncate(length);
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_is_joined() {
        let raw = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n";
        assert_eq!(dechunk(raw).unwrap(), b"hello, world");
        assert!(dechunk(b"zz\r\nhello\r\n").is_err());
        assert!(dechunk(b"10\r\nshort\r\n").is_err());
    }
}

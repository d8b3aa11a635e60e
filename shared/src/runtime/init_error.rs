//! A failed init reported to Lambda's Runtime API (`POST /runtime/init/error`), as the
//! runtime interface clients of AWS's own runtimes do: Lambda then answers the invocation
//! that met the failed init with this reason (`Runtime.ConfigError`), not only
//! "Runtime exited with error", and the reason does not depend on a log collector having
//! attached before the process ended.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The error type Lambda reports for an init that failed on its configuration.
pub const CONFIG_ERROR: &str = "Runtime.ConfigError";

/// Posts `reason` to the Runtime API at `api` (`AWS_LAMBDA_RUNTIME_API`, an IP and port on
/// Lambda). Blocking and bounded (one write, a read of the status line, a second's timeout
/// on each): the process exits right after.
pub fn report(api: &str, reason: &str) -> std::io::Result<()> {
    let body = serde_json::json!({ "errorMessage": reason, "errorType": CONFIG_ERROR }).to_string();
    let addr = std::net::ToSocketAddrs::to_socket_addrs(api)?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{api} resolves to no address")))?;
    let step = Duration::from_secs(1);
    let mut stream = TcpStream::connect_timeout(&addr, step)?;
    stream.set_write_timeout(Some(step))?;
    stream.set_read_timeout(Some(step))?;
    let request = format!(
        "POST /2018-06-01/runtime/init/error HTTP/1.1\r\nHost: {api}\r\n\
         Lambda-Runtime-Function-Error-Type: {CONFIG_ERROR}\r\n\
         Content-Type: application/vnd.aws.lambda.error+json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    // The status line: Lambda answers 202 Accepted.
    let mut answer = [0u8; 12];
    stream.read_exact(&mut answer)?;
    match &answer[9..12] {
        b"202" => Ok(()),
        status => Err(std::io::Error::other(format!(
            "the Runtime API answered {}",
            String::from_utf8_lossy(status)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    #[test]
    fn posts_the_reason_as_lambda_expects() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let api = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = std::io::BufReader::new(stream);
            let mut head = Vec::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                head.push(line.trim_end().to_owned());
            }
            let length: usize = head
                .iter()
                .find_map(|h| h.strip_prefix("Content-Length: "))
                .unwrap()
                .parse()
                .unwrap();
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            reader
                .get_mut()
                .write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}")
                .unwrap();
            (
                head,
                serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            )
        });
        report(
            &api,
            "VISIBILITY_TIMEOUT_SECONDS (30) must be greater than \"x\"",
        )
        .unwrap();
        let (head, body) = server.join().unwrap();
        assert_eq!(head[0], "POST /2018-06-01/runtime/init/error HTTP/1.1");
        assert!(head.contains(&"Lambda-Runtime-Function-Error-Type: Runtime.ConfigError".into()));
        assert_eq!(body["errorType"], "Runtime.ConfigError");
        assert_eq!(
            body["errorMessage"],
            "VISIBILITY_TIMEOUT_SECONDS (30) must be greater than \"x\""
        );
    }

    #[test]
    fn an_api_that_refuses_is_an_error_not_a_hang() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let api = listener.local_addr().unwrap().to_string();
        drop(listener);
        assert!(report(&api, "x").is_err());
    }
}

//! Lambda Function URL requests and responses (payload format 2.0), as the public endpoints
//! (Unsubscribe, OpenContent) read and answer them.

use base64::Engine;
use serde_json::Value;

/// The parts of an HTTP request the endpoints read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    /// The path, `/` at the root.
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    pub user_agent: String,
    /// The `Accept-Language` header (pages for readers not known yet speak it).
    pub accept_language: String,
    /// The `Content-Type` header: how the body's form is encoded.
    pub content_type: String,
    pub body: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// From a Lambda Function URL event, read leniently: whatever is missing is reported,
    /// and answered with a 400.
    pub fn from_function_url_event(event: &Value) -> Result<Self, String> {
        let method = event
            .pointer("/requestContext/http/method")
            .and_then(Value::as_str)
            .ok_or("requestContext.http.method is missing")?
            .to_ascii_uppercase();
        let text = |pointer: &str| {
            event
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let path = match text("/rawPath") {
            p if p.is_empty() => "/".to_owned(),
            p => p,
        };
        let body = match event.get("body").and_then(Value::as_str) {
            None => Vec::new(),
            Some(b) if event.get("isBase64Encoded") == Some(&Value::Bool(true)) => {
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|_| "body is not valid base64".to_owned())?
            }
            Some(b) => b.as_bytes().to_vec(),
        };
        Ok(Self {
            method,
            path,
            query: text("/rawQueryString"),
            user_agent: text("/requestContext/http/userAgent"),
            accept_language: text("/headers/accept-language"),
            content_type: text("/headers/content-type"),
            body,
        })
    }

    /// A query parameter (percent-decoded); None when missing or empty.
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.into_owned())
            .filter(|v| !v.is_empty())
    }
}

impl HttpRequest {
    /// The body's form fields, in order: `multipart/form-data` (what RFC 8058 says a one-click
    /// POST SHOULD be) by its boundary, anything else, or a multipart body in which no field
    /// is found, as `application/x-www-form-urlencoded` (percent-decoded).
    pub fn form(&self) -> Vec<(String, String)> {
        let urlencoded = || {
            form_urlencoded::parse(&self.body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        };
        let mut parts = self.content_type.split(';');
        let kind = parts.next().unwrap_or_default().trim();
        if !kind.eq_ignore_ascii_case("multipart/form-data") {
            return urlencoded();
        }
        let boundary = parameters(&self.content_type)
            .into_iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("boundary"))
            .map(|(_, value)| value)
            .filter(|b| !b.is_empty());
        match multipart_form(&self.body, boundary.as_deref()) {
            fields if fields.is_empty() => urlencoded(),
            fields => fields,
        }
    }
}

/// The `; name=value` parameters after a header's first token, values unquoted (a `;` or an
/// escaped quote inside quotes stays in the value).
fn parameters(header: &str) -> Vec<(String, String)> {
    let mut segments = Vec::new();
    let (mut current, mut quoted, mut escaped) = (String::new(), false, false);
    for c in header.chars() {
        match c {
            _ if escaped => {
                current.push(c);
                escaped = false;
            }
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => segments.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    segments.push(current);
    segments
        .into_iter()
        .skip(1)
        .filter_map(|p| {
            let (name, value) = p.split_once('=')?;
            Some((name.trim().to_owned(), value.trim().to_owned()))
        })
        .collect()
}

/// The fields of a `multipart/form-data` body: each part's `name` (from its
/// Content-Disposition, folded lines unfolded) and its content, up to the closing delimiter.
/// Lines may end in CRLF, LF or CR. Delimiters are `--boundary` as RFC 7578 has them, or, where
/// the body opens that way, the bare boundary as RFC 8058's own example writes them; without a
/// boundary parameter, the body's first `--` line gives it. A part without a name is skipped.
fn multipart_form(body: &[u8], boundary: Option<&str>) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    let lines: Vec<&str> = text
        .split("\r\n")
        .flat_map(|l| l.split(['\n', '\r']))
        .collect();
    let boundary = match boundary {
        Some(b) => b.to_owned(),
        None => match lines.iter().find_map(|l| l.trim_end().strip_prefix("--")) {
            Some(b) if !b.is_empty() => b.to_owned(),
            _ => return Vec::new(),
        },
    };
    let dashed = format!("--{boundary}");
    // The first line that is a delimiter in either style decides the style for the body.
    let delimiter = match lines.iter().map(|l| l.trim_end()).find(|l| {
        *l == dashed
            || *l == boundary
            || l.strip_suffix("--")
                .is_some_and(|l| l == dashed || l == boundary)
    }) {
        Some(l) if l.starts_with(dashed.as_str()) => dashed,
        Some(_) => boundary,
        None => return Vec::new(),
    };
    let closing = format!("{delimiter}--");
    let mut fields = Vec::new();
    // The part being read: its headers (unfolded), then its content once a blank line came.
    let mut part: Option<(Vec<String>, Option<Vec<&str>>)> = None;
    let finish = |part: Option<(Vec<String>, Option<Vec<&str>>)>, fields: &mut Vec<_>| {
        if let Some((headers, Some(content))) = part {
            let name = headers.iter().find_map(|h| {
                let (header, value) = h.split_once(':')?;
                if !header.trim().eq_ignore_ascii_case("content-disposition") {
                    return None;
                }
                parameters(value)
                    .into_iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("name"))
                    .map(|(_, v)| v)
            });
            if let Some(name) = name {
                fields.push((name, content.join("\r\n")));
            }
        }
    };
    for line in lines {
        let bare = line.trim_end();
        if bare == closing {
            break;
        }
        if bare == delimiter {
            finish(part.take(), &mut fields);
            part = Some((Vec::new(), None));
            continue;
        }
        match part.as_mut() {
            None => {} // the preamble
            Some((_, Some(content))) => content.push(line),
            Some((headers, content)) => {
                if line.trim().is_empty() {
                    *content = Some(Vec::new());
                } else if line.starts_with([' ', '\t']) {
                    if let Some(last) = headers.last_mut() {
                        last.push_str(line);
                    }
                } else {
                    headers.push(line.to_owned());
                }
            }
        }
    }
    // A body cut before its closing delimiter still gives its last part.
    finish(part, &mut fields);
    fields
}

impl HttpResponse {
    /// The body as text (for pages and tests).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The Function URL response format; a body that is not text travels base64-encoded.
    pub fn to_function_url_response(&self) -> Value {
        let headers: serde_json::Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String(v.clone())))
            .collect();
        let text = self
            .header("content-type")
            .is_none_or(|t| t.starts_with("text/"));
        let (body, encoded) = match (text, std::str::from_utf8(&self.body)) {
            (true, Ok(body)) => (body.to_owned(), false),
            _ => (
                base64::engine::general_purpose::STANDARD.encode(&self.body),
                true,
            ),
        };
        serde_json::json!({
            "statusCode": self.status,
            "headers": headers,
            "body": body,
            "isBase64Encoded": encoded,
        })
    }
}

/// The metrics one public request writes, by its route (a closed set per function, so the
/// names stay bounded): `served.R` (answered below 400), `refused.R` (4xx: junk, a bad or
/// expired token, a wrong method), `failed.R` (5xx), and the handler's time, `ms.R`.
pub fn request_metrics(route: &str, response: &Value, ms: f64) -> Vec<crate::runtime::emf::Metric> {
    use crate::runtime::emf::Metric;
    let status = response
        .get("statusCode")
        .and_then(Value::as_u64)
        .unwrap_or(500);
    let outcome = match status {
        0..=399 => "served",
        400..=499 => "refused",
        _ => "failed",
    };
    vec![
        Metric::count(format!("{outcome}.{route}"), 1.0),
        Metric::ms(format!("ms.{route}"), ms),
    ]
}

/// `answer` awaited, and the metrics of the request it answers (`request_metrics`).
pub async fn measured(
    route: &str,
    answer: impl std::future::Future<Output = Value>,
) -> (Value, Vec<crate::runtime::emf::Metric>) {
    let started = std::time::Instant::now();
    let response = answer.await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let metrics = request_metrics(route, &response, ms);
    (response, metrics)
}

/// The names `request_metrics` writes, a route as `*`.
pub const REQUEST_METRICS: [&str; 4] = ["served.*", "refused.*", "failed.*", "ms.*"];

/// A Function URL event's method (upper case) and path, for its route; empty when absent.
pub fn method_and_path(event: &Value) -> (String, &str) {
    let text = |pointer| {
        event
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    (
        text("/requestContext/http/method").to_ascii_uppercase(),
        text("/rawPath"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(content_type: &str, body: &str) -> HttpRequest {
        HttpRequest {
            method: "POST".into(),
            content_type: content_type.into(),
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn multipart_bodies_as_mail_libraries_and_strangers_write_them() {
        let field = |name: &str, value: &str| vec![(name.to_owned(), value.to_owned())];
        let mp = |boundary: &str| format!("multipart/form-data; boundary={boundary}");
        // A folded Content-Disposition (MIME libraries fold long header lines).
        let folded = "--b\r\nContent-Disposition: form-data;\r\n name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--b--";
        assert_eq!(
            posted(&mp("b"), folded).form(),
            field("List-Unsubscribe", "One-Click")
        );
        // A boundary that itself ends in "--".
        let ending = "--abc--\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n--abc----";
        assert_eq!(posted(&mp("\"abc--\""), ending).form(), field("x", "1"));
        // No boundary parameter: the body's first "--" line gives it. CR-only line ends.
        let bare = "--q\rContent-Disposition: form-data; name=x\r\r1\r--q--";
        assert_eq!(posted("multipart/form-data", bare).form(), field("x", "1"));
        // Labelled multipart, sent url-encoded: read as what it is.
        assert_eq!(
            posted(&mp("b"), "List-Unsubscribe=One-Click").form(),
            field("List-Unsubscribe", "One-Click")
        );
        // A name inside a quoted filename is not the part's name; a quoted boundary may hold ';'.
        let filename = "--a;b\r\nContent-Disposition: form-data; filename=\"a;name=List-Unsubscribe\"; name=\"x\"\r\n\r\n1\r\n--a;b--";
        assert_eq!(posted(&mp("\"a;b\""), filename).form(), field("x", "1"));
        // In a body delimited the RFC 7578 way, a line that is the bare boundary is content;
        // nothing after the closing delimiter is read.
        let inside = "--b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\nb\r\nContent-Disposition: form-data; name=\"action\"\r\n\r\nsave\r\n--b--\r\n--b\r\nContent-Disposition: form-data; name=y\r\n\r\n2";
        assert_eq!(
            posted(&mp("b"), inside).form(),
            field(
                "x",
                "1\r\nb\r\nContent-Disposition: form-data; name=\"action\"\r\n\r\nsave"
            )
        );
    }

    #[test]
    fn a_one_click_form_is_read_in_every_encoding_rfc_8058_allows() {
        let one_click = vec![("List-Unsubscribe".to_owned(), "One-Click".to_owned())];
        // RFC 8058's own example, as written there (delimiters without the leading "--").
        let rfc = "---FormBoundaryjWmhtjORrn\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n---FormBoundaryjWmhtjORrn--";
        let boundary = "multipart/form-data; boundary=---FormBoundaryjWmhtjORrn";
        assert_eq!(posted(boundary, rfc).form(), one_click);
        assert_eq!(posted(boundary, &format!("{rfc}\r\n")).form(), one_click);
        // As RFC 7578 writes delimiters, with LF line ends, a quoted boundary and a charset.
        let dashed = "--b1\nContent-Disposition: form-data; name=List-Unsubscribe\nContent-Type: text/plain\n\nOne-Click\n--b1--\n";
        let quoted = "multipart/form-data; charset=utf-8; boundary=\"b1\"";
        assert_eq!(posted(quoted, dashed).form(), one_click);
        // Url-encoded, with a charset, with and without a trailing line break.
        let form = "application/x-www-form-urlencoded; charset=utf-8";
        assert_eq!(posted(form, "List-Unsubscribe=One-Click").form(), one_click);
        assert_eq!(
            posted(form, "List-Unsubscribe=One-Click\r\n").form()[0]
                .1
                .trim(),
            "One-Click"
        );
        // No content type at all: read as url-encoded, as before.
        assert_eq!(posted("", "List-Unsubscribe=One-Click").form(), one_click);
        // A part without a name is skipped; two fields stay two.
        let two = "--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b\r\nContent-Disposition: form-data; name=\"action\"\r\n\r\nsave\r\n--b\r\nContent-Disposition: form-data; name=\"topic\"\r\n\r\ntips\r\n--b--\r\n";
        assert_eq!(
            posted("multipart/form-data; boundary=b", two).form(),
            vec![
                ("action".to_owned(), "save".to_owned()),
                ("topic".to_owned(), "tips".to_owned())
            ]
        );
    }

    #[test]
    fn reads_function_url_events() {
        let event = serde_json::json!({
            "version": "2.0", "rawPath": "/go", "rawQueryString": "token=abc.def&t=x%2Ey",
            "requestContext": {"http": {"method": "post", "userAgent": "UA"}, "timeEpoch": 0},
            "body": base64::engine::general_purpose::STANDARD.encode("List-Unsubscribe=One-Click"),
            "isBase64Encoded": true,
        });
        let request = HttpRequest::from_function_url_event(&event).unwrap();
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/go");
        assert_eq!(request.user_agent, "UA");
        assert_eq!(request.param("token").as_deref(), Some("abc.def"));
        assert_eq!(request.param("t").as_deref(), Some("x.y"));
        assert_eq!(request.body, b"List-Unsubscribe=One-Click");
        assert!(HttpRequest::from_function_url_event(&serde_json::json!({})).is_err());
        let bare = HttpRequest {
            query: "token=".into(),
            ..Default::default()
        };
        assert_eq!(bare.param("token"), None);
    }

    #[test]
    fn binary_bodies_travel_base64() {
        let png = HttpResponse {
            status: 200,
            headers: vec![("content-type", "image/png".into())],
            body: vec![0x89, b'P'],
        };
        let out = png.to_function_url_response();
        assert_eq!(out["isBase64Encoded"], true);
        assert_eq!(out["body"], "iVA=");
        let page = HttpResponse {
            status: 200,
            headers: vec![("content-type", "text/html; charset=utf-8".into())],
            body: b"<p>hi</p>".to_vec(),
        };
        assert_eq!(page.to_function_url_response()["body"], "<p>hi</p>");
    }

    #[test]
    fn a_request_is_counted_by_route_and_outcome() {
        let names = |status: u64| {
            request_metrics("pick", &serde_json::json!({"statusCode": status}), 3.0)
                .into_iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(200), ["served.pick", "ms.pick"]);
        assert_eq!(names(302)[0], "served.pick");
        assert_eq!(names(404)[0], "refused.pick");
        assert_eq!(names(503)[0], "failed.pick");
        let event =
            serde_json::json!({"rawPath": "/go", "requestContext": {"http": {"method": "get"}}});
        assert_eq!(method_and_path(&event), ("GET".to_owned(), "/go"));
    }
}

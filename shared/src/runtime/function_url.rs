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
    /// The body's form fields (`application/x-www-form-urlencoded`), percent-decoded, in order.
    pub fn form(&self) -> Vec<(String, String)> {
        form_urlencoded::parse(&self.body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

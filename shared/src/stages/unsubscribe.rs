//! Unsubscribe: the one-click unsubscribe endpoint (RFC 8058), served by a Lambda Function
//! URL. A mail client's one-click POST (`List-Unsubscribe=One-Click`) unsubscribes at once;
//! the link in the body (a GET) shows a confirmation page whose button POSTs, so that link
//! scanners and prefetchers never unsubscribe anyone. Only a token this deployment signed is
//! honoured: a forged, altered or other list's token gets a 4xx and changes nothing.
//! Unsubscribing is idempotent; it is also noted on the campaign's send record.

use crate::domain::ledger::{epoch_ms, Engagement};
use crate::domain::unsubscribe_link::{Signer, Subscription, TokenError};
use crate::ports::{Change, SendRecordNotes, SubscriberStore};
use crate::runtime::function_url::{HttpRequest, HttpResponse};
use serde_json::Value;
use std::time::SystemTime;
use tracing::Instrument;

/// An unsubscribe page: the title, the message and, to confirm, the form that POSTs.
fn page(status: u16, title: &str, message: &str, form: Option<&str>) -> HttpResponse {
    let form = form.map_or(String::new(), |token| {
            format!(
                "<form method=\"post\" action=\"?token={}\"><input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\"><button type=\"submit\">Unsubscribe</button></form>",
                html_escape(token)
            )
        });
    let body = format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{title}</title><style>{STYLE}</style></head><body><main><h1>{title}</h1><p>{message}</p>{form}</main></body></html>",
            title = html_escape(title),
            message = html_escape(message),
        );
    let mut headers = vec![
            ("content-type", "text/html; charset=utf-8".to_owned()),
            // The token is in the URL: keep it out of caches and referrers.
            ("cache-control", "no-store".to_owned()),
            ("referrer-policy", "no-referrer".to_owned()),
            ("x-content-type-options", "nosniff".to_owned()),
            (
                "content-security-policy",
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
                    .to_owned(),
            ),
        ];
    if status == 405 {
        headers.push(("allow", "GET, POST".to_owned()));
    }
    if status == 503 {
        headers.push(("retry-after", "60".to_owned()));
    }
    HttpResponse {
        status,
        headers,
        body: body.into_bytes(),
    }
}

const STYLE: &str = "body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;background:#f4f5f7;color:#1f2933;margin:0}main{max-width:480px;margin:64px auto;background:#fff;border-radius:8px;padding:32px}h1{font-size:22px;margin-top:0}button{font-size:16px;padding:10px 20px;border:0;border-radius:6px;background:#1f2933;color:#fff;cursor:pointer}";

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// Generic over its ports: MongoDB's users and the DynamoDB send records on Lambda.
pub struct Unsubscribe<S, R> {
    signer: Signer,
    subscribers: S,
    records: R,
}

impl<S: SubscriberStore, R: SendRecordNotes> Unsubscribe<S, R> {
    pub fn new(signer: Signer, subscribers: S, records: R) -> Self {
        Self {
            signer,
            subscribers,
            records,
        }
    }

    /// A Function URL event in, its response out (what the Lambda binary serves).
    pub async fn handle_function_url(&self, event: &Value) -> Value {
        let response = match HttpRequest::from_function_url_event(event) {
            Ok(request) => self.handle(&request).await,
            Err(reason) => {
                tracing::warn!(%reason, "not a Function URL request");
                page(
                    400,
                    "Bad request",
                    "This page answers unsubscribe links only.",
                    None,
                )
            }
        };
        response.to_function_url_response()
    }

    pub async fn handle(&self, request: &HttpRequest) -> HttpResponse {
        let Some(token) = request.param("token") else {
            return page(
                400,
                "Incomplete link",
                "This unsubscribe link is incomplete. Use the link in the email exactly as it is.",
                None,
            );
        };
        let subscription = match self.signer.verify(&token) {
            Ok(s) => s,
            Err(err) => {
                // Never the token itself: it is a credential for someone's subscription.
                tracing::warn!(reason = %err, method = %request.method, "unsubscribe refused");
                let status = if matches!(err, TokenError::Malformed(_)) {
                    400
                } else {
                    403
                };
                return page(
                    status,
                    "Invalid link",
                    "This unsubscribe link is not valid. Use the link in the email exactly as it is.",
                    None,
                );
            }
        };
        let list = subscription.list.as_str();
        match request.method.as_str() {
            "GET" | "HEAD" => page(
                200,
                &format!("Unsubscribe from {list}?"),
                &format!("You will no longer receive the {list} emails."),
                Some(&token),
            ),
            "POST" => {
                let span = tracing::info_span!("unsubscribe", campaign = %subscription.campaign_id, user = %subscription.user_id);
                self.unsubscribe(&subscription).instrument(span).await
            }
            _ => page(
                405,
                "Not allowed",
                "Open the unsubscribe link in a browser.",
                None,
            ),
        }
    }

    async fn unsubscribe(&self, subscription: &Subscription) -> HttpResponse {
        let list = subscription.list.as_str();
        let now = SystemTime::now();
        let change = self
            .subscribers
            .unsubscribe(
                &subscription.key(),
                list,
                i64::try_from(epoch_ms(now)).unwrap_or(i64::MAX),
            )
            .await;
        match change {
            Ok(change) => {
                tracing::info!(change = ?change, "unsubscribed");
                if change != Change::NoSuchUser {
                    self.note(subscription, now).await;
                }
                page(
                    200,
                    "You are unsubscribed",
                    &format!("You will no longer receive the {list} emails."),
                    None,
                )
            }
            Err(err) => {
                tracing::error!(reason = %err, "unsubscribe could not be saved; the client will retry");
                page(
                    503,
                    "Please try again",
                    "We could not unsubscribe you just now. Please try again in a minute.",
                    None,
                )
            }
        }
    }

    /// For the campaign analytics; the unsubscribe itself is already saved.
    async fn note(&self, subscription: &Subscription, at: SystemTime) {
        if let Err(err) = self
            .records
            .note(&subscription.key(), Engagement::Unsubscribed, epoch_ms(at))
            .await
        {
            tracing::warn!(reason = %err, "unsubscribe saved, but not counted in the campaign analytics");
        }
    }
}

// A Function URL request in, the page out.
crate::runtime::serve::stage! {
    impl<S: SubscriberStore, R: SendRecordNotes> for Unsubscribe<S, R> {
        Value => Result<(Value, ()), std::convert::Infallible>,
        |stage, event, _invocation| Ok((stage.handle_function_url(&event).await, ()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_escape_and_protect_the_token() {
        let page = page(200, "T<", "M&", Some("a\"b"));
        assert!(page.text().contains("T&lt;") && page.text().contains("M&amp;"));
        assert!(page.text().contains("action=\"?token=a&quot;b\""));
        let response = page.to_function_url_response();
        assert_eq!(response["statusCode"], 200);
        assert_eq!(response["headers"]["cache-control"], "no-store");
        assert_eq!(response["headers"]["referrer-policy"], "no-referrer");
    }
}

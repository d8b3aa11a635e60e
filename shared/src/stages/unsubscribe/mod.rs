//! Unsubscribe: the preference centre and one-click unsubscribe (RFC 8058), served by a
//! Lambda Function URL. Every link carries a token this deployment signed for one user and
//! one campaign of one topic (`unsubscribe_link`); nothing else in a request says whose
//! preferences change.
//!
//! - A mail client's one-click POST (`List-Unsubscribe=One-Click`) leaves the campaign's
//!   topic at once, recorded with when and from which campaign.
//! - GET shows the preference centre in the recipient's language: every topic ticked or not,
//!   a save button, "unsubscribe from all"; with `&leave=1` (the footer's first link) a button
//!   to leave the email's topic comes first. A GET never changes anything, so link scanners
//!   and prefetchers change nothing.
//! - The centre's forms POST `action=save` (the ticked `topic`s), `action=leave` or
//!   `action=unsubscribe-all`; the answer says what changed. A form with anything else is
//!   refused whole, and nothing changes.
//!
//! Each change is also noted on the campaign's send record (its analytics).

mod page;

use crate::domain::ledger::{epoch_ms, Engagement};
use crate::domain::topics::{Overall, Preferences, Save, Topic, TopicId, Topics};
use crate::domain::unsubscribe_link::{Signer, Subscription, TokenError};
use crate::ports::{Change, ChangedVia, SendRecordNotes, SubscriberStore};
use crate::runtime::function_url::{HttpRequest, HttpResponse};
use page::{fill, message, words, Centre};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::SystemTime;
use tracing::Instrument;

/// The largest form a POST may carry: a one-click is under 200 bytes, the page's save under
/// 1 KiB. A bigger body is refused before it is parsed (the function has 128 MB).
const MAX_FORM_BYTES: usize = 8 * 1024;

/// What a POST asks for, once its form is understood whole.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// RFC 8058's one-click, from a mail client.
    OneClick,
    /// The page's "unsubscribe from this topic" button.
    Leave,
    /// The page's save: the topics ticked.
    Save(BTreeSet<TopicId>),
    UnsubscribeAll,
}

/// The form understood, or what in it is not (quoted for the page, never trusted).
fn understand(form: &[(String, String)], topics: &Topics) -> Result<Request, String> {
    let quoted = |s: &str| crate::domain::quoted(s);
    // However the receiver encoded it (a trailing line break, the field repeated), and
    // nothing else in the form.
    let one_click = |(name, value): &(String, String)| {
        name.trim().eq_ignore_ascii_case("List-Unsubscribe")
            && value.trim().eq_ignore_ascii_case("One-Click")
    };
    if !form.is_empty() && form.iter().all(one_click) {
        return Ok(Request::OneClick);
    }
    let mut action = None;
    let mut ticked = BTreeSet::new();
    for (name, value) in form {
        match name.as_str() {
            "action" if action.is_none() => action = Some(value.as_str()),
            "topic" => {
                let topic = topics
                    .get(value)
                    .map_err(|_| format!("topic {}", quoted(value)))?;
                ticked.insert(topic.id.clone());
            }
            other => return Err(format!("field {}", quoted(other))),
        }
    }
    match action {
        Some("save") => Ok(Request::Save(ticked)),
        Some("leave") if ticked.is_empty() => Ok(Request::Leave),
        Some("unsubscribe-all") if ticked.is_empty() => Ok(Request::UnsubscribeAll),
        Some(other @ ("leave" | "unsubscribe-all")) => Err(format!("topic with action {other}")),
        Some(other) => Err(format!("action {}", quoted(other))),
        None => Err("no action".to_owned()),
    }
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
                let w = words("en");
                message(400, "en", w.invalid_title, w.not_allowed_body)
            }
        };
        response.to_function_url_response()
    }

    pub async fn handle(&self, request: &HttpRequest) -> HttpResponse {
        // Until the reader is known, the browser's language.
        let language = page::language(&request.accept_language);
        let w = words(language);
        let subscription = match request
            .param("token")
            .as_deref()
            .map(|t| self.signer.verify(t))
        {
            Some(Ok(s)) => s,
            Some(Err(err)) => {
                // Never the token itself: it is a credential for someone's preferences.
                tracing::warn!(reason = %err, method = %request.method, "token refused");
                let status = if matches!(err, TokenError::Malformed(_)) {
                    400
                } else {
                    403
                };
                return message(status, language, w.invalid_title, w.invalid_body);
            }
            None => return message(400, language, w.invalid_title, w.invalid_body),
        };
        let token = request.param("token").unwrap_or_default();
        let span = tracing::info_span!("preferences", campaign = %subscription.campaign_id, topic = %subscription.topic, user = %subscription.user_id);
        async {
            match request.method.as_str() {
                "GET" | "HEAD" => {
                    let leaving = request.param("leave").is_some();
                    self.centre(&subscription, &token, leaving, language).await
                }
                "POST" => self.post(&subscription, &token, request, language).await,
                _ => message(405, language, w.not_allowed_title, w.not_allowed_body),
            }
        }
        .instrument(span)
        .await
    }

    /// The user's preferences and language (their stored locale, else `fallback`), or the
    /// page that answers instead: no such user, or MongoDB not answering.
    async fn read(
        &self,
        subscription: &Subscription,
        fallback: &'static str,
    ) -> Result<(Preferences, &'static str), HttpResponse> {
        match self
            .subscribers
            .preferences(&subscription.user_id, Topics::builtin())
            .await
        {
            Ok(Some((preferences, locale))) => Ok((
                preferences,
                locale.as_deref().map_or(fallback, page::language),
            )),
            Ok(None) => Err(gone(fallback)),
            Err(err) => Err(busy(fallback, &err)),
        }
    }

    /// The preference centre as the user's document has it now.
    async fn centre(
        &self,
        subscription: &Subscription,
        token: &str,
        leaving: bool,
        fallback: &'static str,
    ) -> HttpResponse {
        let topics = Topics::builtin();
        let (preferences, language) = match self.read(subscription, fallback).await {
            Ok(read) => read,
            Err(page) => return page,
        };
        page::centre(&Centre {
            language,
            token,
            topics,
            receives: topics
                .all()
                .iter()
                .map(|t| preferences.receives(t))
                .collect(),
            out_of_everything: preferences.overall != Overall::Subscribed,
            leaving: topics.find(&subscription.topic).filter(|_| leaving),
        })
    }

    async fn post(
        &self,
        subscription: &Subscription,
        token: &str,
        request: &HttpRequest,
        fallback: &'static str,
    ) -> HttpResponse {
        let topics = Topics::builtin();
        let w = words(fallback);
        if request.body.len() > MAX_FORM_BYTES {
            tracing::warn!(
                bytes = request.body.len(),
                "form too large; nothing changed"
            );
            return message(
                413,
                fallback,
                w.bad_form_title,
                &fill(w.bad_form_body, "size"),
            );
        }
        // A POST with no body at all: some mail clients send their one-click so; the token
        // says whose and which topic, and the page's forms always carry an action.
        let asked = match request.body.iter().all(u8::is_ascii_whitespace) {
            true => Ok(Request::OneClick),
            false => understand(&request.form(), topics),
        };
        let asked = match asked {
            Ok(asked) => asked,
            Err(what) => {
                tracing::warn!(%what, "form refused; nothing changed");
                return message(
                    400,
                    fallback,
                    w.bad_form_title,
                    &fill(w.bad_form_body, &what),
                );
            }
        };
        let key = subscription.key();
        let now = SystemTime::now();
        let at_ms = i64::try_from(epoch_ms(now)).unwrap_or(i64::MAX);
        // The one-click comes from a mail client: one write, no read first.
        if asked == Request::OneClick {
            let change = self
                .subscribers
                .leave_topic(&key, &subscription.topic, ChangedVia::OneClick, at_ms)
                .await;
            return self.left(subscription, token, change, fallback, now).await;
        }
        let (preferences, language) = match self.read(subscription, fallback).await {
            Ok(read) => read,
            Err(page) => return page,
        };
        let w = words(language);
        match asked {
            Request::OneClick | Request::Leave => {
                let change = self
                    .subscribers
                    .leave_topic(&key, &subscription.topic, ChangedVia::Page, at_ms)
                    .await;
                self.left(subscription, token, change, language, now).await
            }
            Request::UnsubscribeAll => {
                match self
                    .subscribers
                    .unsubscribe(&key, self.signer.list(), at_ms)
                    .await
                {
                    Ok(Change::NoSuchUser) => gone(language),
                    Ok(change) => {
                        tracing::info!(?change, "unsubscribed from everything");
                        self.note(subscription, now).await;
                        page::confirmation(language, token, w.all_title, &[w.all_body.to_owned()])
                    }
                    Err(err) => busy(language, &err),
                }
            }
            Request::Save(wanted) => {
                let save = preferences.save(topics, &wanted);
                let lines = what_changed(topics, &preferences, &save, language);
                match self.subscribers.save_preferences(&key, &save, at_ms).await {
                    Ok(Change::NoSuchUser) => gone(language),
                    Ok(change) => {
                        tracing::info!(
                            ?change,
                            topics = save.changes.len(),
                            resubscribed = save.resubscribe,
                            "preferences saved"
                        );
                        let left_this = save
                            .changes
                            .iter()
                            .any(|(t, on)| *t == subscription.topic && !on);
                        if left_this {
                            self.note(subscription, now).await;
                        }
                        page::confirmation(language, token, w.saved_title, &lines)
                    }
                    Err(err) => busy(language, &err),
                }
            }
        }
    }

    /// The answer to leaving the email's topic.
    async fn left(
        &self,
        subscription: &Subscription,
        token: &str,
        change: Result<Change, crate::ports::StoreError>,
        language: &'static str,
        at: SystemTime,
    ) -> HttpResponse {
        match change {
            Ok(Change::NoSuchUser) => gone(language),
            Ok(change) => {
                tracing::info!(?change, "left the topic");
                self.note(subscription, at).await;
                let w = words(language);
                let label = label(&subscription.topic, language);
                page::confirmation(
                    language,
                    token,
                    &fill(w.left_title, &label),
                    &[fill(w.no_longer, &label)],
                )
            }
            Err(err) => busy(language, &err),
        }
    }

    /// For the campaign analytics; the change itself is already saved.
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

/// A topic's label, or its id when this build no longer declares it.
fn label(topic: &TopicId, language: &str) -> String {
    Topics::builtin().find(topic).map_or_else(
        || topic.to_string(),
        |t: &Topic| t.label(language).to_owned(),
    )
}

/// The confirmation's sentences: what they receive now that they did not, and the reverse.
fn what_changed(topics: &Topics, before: &Preferences, save: &Save, language: &str) -> Vec<String> {
    let w = words(language);
    let turned = |on: bool| {
        save.changes
            .iter()
            .filter(|(t, want)| {
                *want == on
                    && topics
                        .find(t)
                        .is_some_and(|topic| before.receives(topic) != on)
            })
            .map(|(t, _)| label(t, language))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut lines = Vec::new();
    if save.resubscribe {
        lines.push(w.welcome_back.to_owned());
    }
    let (added, removed) = (turned(true), turned(false));
    if !added.is_empty() {
        lines.push(fill(w.now_receive, &added));
    }
    if !removed.is_empty() {
        lines.push(fill(w.no_longer, &removed));
    }
    if lines.is_empty() {
        lines.push(w.nothing_changed.to_owned());
    }
    lines
}

fn gone(language: &'static str) -> HttpResponse {
    let w = words(language);
    message(404, language, w.gone_title, w.gone_body)
}

fn busy(language: &'static str, err: &crate::ports::StoreError) -> HttpResponse {
    tracing::error!(reason = %err, "preferences could not be read or saved; the reader may retry");
    let w = words(language);
    message(503, language, w.busy_title, w.busy_body)
}

// A Function URL request in, the page out.
crate::runtime::serve::stage! {
    impl<S: SubscriberStore, R: SendRecordNotes> for Unsubscribe<S, R> {
        Value => Result<(Value, ()), std::convert::Infallible>,
        |stage, event, _invocation| Ok((stage.handle_function_url(&event).await, ()))
    }
}

#[cfg(test)]
mod tests;

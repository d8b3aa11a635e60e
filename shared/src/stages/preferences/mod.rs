//! The preference centre and one-click unsubscribe (RFC 8058): the Unsubscribe function's
//! stage, served by a Lambda Function URL. Every link carries a token this deployment signed
//! for one user and one campaign of one topic (`unsubscribe_link`); nothing else in a
//! request says whose preferences change.
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
//! Each change is also noted on the campaign's send record (its analytics, `records`). The
//! store reads and writes the person where the token's campaign keeps its recipients: our
//! users, or the collection and fields of the definition the campaign runs.
//!
//! Every store call has a bound well under the function's 10 s timeout (`STORE_TIMEOUT`,
//! `RECORD_TIMEOUT`, `NOTE_TIMEOUT`; at most 8 s in all on any path), where the MongoDB
//! driver alone would wait 30 s for a server. A one-click that MongoDB does not take within
//! its bound (hung, down, erring) is recorded in the sends table instead
//! (`PendingLeaves::record_leave`) and answered 202: mail clients never retry a one-click,
//! and CreateEmails leaves the person out of every later campaign of the topic while that
//! leave stands (docs/emails.md). Only when DynamoDB fails too is it 503.
//!
//! A request that can never succeed (a method the page does not use, a form over 8 KiB, no
//! token that verifies) is answered from memory before any I/O: the signing keys were read
//! at cold start, and neither MongoDB nor DynamoDB is asked (`tests.rs`,
//! `junk_is_answered_from_memory`). Junk costs an invocation, never a store's capacity.

mod form;
mod page;
mod records;

use crate::domain::ledger::epoch_ms;
use crate::domain::topics::{Overall, Preferences, Save, Topic, TopicId, Topics};
use crate::domain::unsubscribe_link::{Signer, Subscription, TokenError};
use crate::ports::{Change, ChangedVia, StoreError, SubscriberStore};
use crate::runtime::function_url::{self, HttpRequest, HttpResponse};
use form::{understand, Request, MAX_FORM_BYTES};
use page::{fill, message, words, Centre};
pub use records::Records;
use serde_json::Value;
use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, SystemTime};
use tracing::Instrument;

/// The longest a MongoDB call waits (its driver would wait 30 s to select a server), the
/// campaign's recipients looked up first at their first use.
const STORE_TIMEOUT: Duration = Duration::from_secs(3);
/// A MongoDB call within `STORE_TIMEOUT`, or the store error it is taken for. Every failure
/// is answered as a store's: one that would repeat (the campaign's pinned definition cannot
/// be read) loses no one-click either, which is recorded as a pending leave all the same.
async fn bounded<T, E: Into<StoreError>>(
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(STORE_TIMEOUT, call).await {
        Ok(done) => done.map_err(Into::into),
        Err(_) => Err(StoreError::mongo(format!(
            "no answer within {STORE_TIMEOUT:?}"
        ))),
    }
}

/// Generic over its ports: MongoDB's users and the DynamoDB send records on Lambda. Named
/// after the function: the type's name is its metrics' `function` dimension.
pub struct Unsubscribe<S, R> {
    signer: Signer,
    subscribers: S,
    records: R,
}

impl<S: SubscriberStore, R: Records> Unsubscribe<S, R> {
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
        // What can never succeed is answered first, from memory: no token to check, no
        // store (and never a secret: the keys were read at cold start). A public URL gets
        // junk; each one costs only its invocation.
        if !matches!(request.method.as_str(), "GET" | "HEAD" | "POST") {
            return message(405, language, w.not_allowed_title, w.not_allowed_body);
        }
        if request.method == "POST" && request.body.len() > MAX_FORM_BYTES {
            tracing::warn!(
                bytes = request.body.len(),
                "form too large; nothing changed"
            );
            return message(
                413,
                language,
                w.bad_form_title,
                &fill(w.bad_form_body, "size"),
            );
        }
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
                "POST" => self.post(&subscription, &token, request, language).await,
                _ => {
                    let leaving = request.param("leave").is_some();
                    self.centre(&subscription, &token, leaving, language).await
                }
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
        match bounded(
            self.subscribers
                .preferences(&subscription.key(), Topics::builtin()),
        )
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
        // (A body over MAX_FORM_BYTES was refused before the token was read.)
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
        let at_ms = at_ms(now);
        // The one-click comes from a mail client: one write, no read first. Mail clients
        // never retry it, so a MongoDB that does not take it in time does not lose it.
        if asked == Request::OneClick {
            let change = bounded(self.subscribers.leave_topic(
                &key,
                &subscription.topic,
                ChangedVia::OneClick,
                at_ms,
            ))
            .await;
            return match change {
                Err(err) => self.pending(subscription, token, &err, fallback, now).await,
                change => self.left(subscription, token, change, fallback, now).await,
            };
        }
        let (preferences, language) = match self.read(subscription, fallback).await {
            Ok(read) => read,
            Err(page) => return page,
        };
        match asked {
            Request::OneClick | Request::Leave => {
                let change = bounded(self.subscribers.leave_topic(
                    &key,
                    &subscription.topic,
                    ChangedVia::Page,
                    at_ms,
                ))
                .await;
                self.left(subscription, token, change, language, now).await
            }
            Request::UnsubscribeAll => {
                self.unsubscribe_all(subscription, token, language, now)
                    .await
            }
            Request::Save(wanted) => {
                self.save(subscription, token, &preferences, &wanted, language, now)
                    .await
            }
        }
    }

    /// The page's "unsubscribe from all".
    async fn unsubscribe_all(
        &self,
        subscription: &Subscription,
        token: &str,
        language: &'static str,
        now: SystemTime,
    ) -> HttpResponse {
        let w = words(language);
        let key = subscription.key();
        let unsubscribe = self
            .subscribers
            .unsubscribe(&key, self.signer.list(), at_ms(now));
        match bounded(unsubscribe).await {
            Ok(Change::NoSuchUser) => gone(language),
            Ok(change) => {
                tracing::info!(?change, "unsubscribed from everything");
                self.note(subscription, now).await;
                page::confirmation(language, token, w.all_title, &[w.all_body.to_owned()])
            }
            Err(err) => busy(language, &err),
        }
    }

    /// The page's save: the topics ticked, against the preferences read before.
    async fn save(
        &self,
        subscription: &Subscription,
        token: &str,
        preferences: &Preferences,
        wanted: &BTreeSet<TopicId>,
        language: &'static str,
        now: SystemTime,
    ) -> HttpResponse {
        let topics = Topics::builtin();
        let w = words(language);
        let at_ms = at_ms(now);
        let save = preferences.save(topics, wanted);
        let lines = what_changed(topics, preferences, &save, language);
        let key = subscription.key();
        let saved = self.subscribers.save_preferences(&key, &save, at_ms);
        match bounded(saved).await {
            Ok(Change::NoSuchUser) => gone(language),
            Ok(change) => {
                tracing::info!(
                    ?change,
                    topics = save.changes.len(),
                    resubscribed = save.resubscribe,
                    "preferences saved"
                );
                // A one-click MongoDB did not take stands until the topic is chosen again
                // here.
                for (topic, _) in save.changes.iter().filter(|(_, on)| *on) {
                    self.rejoined(subscription, topic, at_ms).await;
                }
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
}

/// A change's time as the user's document records it.
fn at_ms(at: SystemTime) -> i64 {
    i64::try_from(epoch_ms(at)).unwrap_or(i64::MAX)
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

/// The routes a request's metrics are counted by (`function_url::request_metrics`): the
/// preference centre (GET, HEAD), a form or a mail client's one-click (POST), anything else.
pub const ROUTES: [&str; 3] = ["page", "form", "other"];

fn route_of(method: &str) -> &'static str {
    match method {
        "GET" | "HEAD" => "page",
        "POST" => "form",
        _ => "other",
    }
}

// A Function URL request in, the page out.
crate::runtime::serve::stage! {
    impl<S: SubscriberStore, R: Records> for Unsubscribe<S, R> {
        Value => Result<(Value, Vec<crate::runtime::emf::Metric>), std::convert::Infallible>,
        |stage, event, _invocation| {
            let route = route_of(&function_url::method_and_path(&event).0);
            Ok(function_url::measured(route, stage.handle_function_url(&event)).await)
        }
    }
}

#[cfg(test)]
mod tests;

//! OpenContent: the pick slots of sent emails, served by a Lambda Function URL. Its routes
//! share the token check here; how an email's picks are found is in `picks`, the bounded
//! counting in `counting`, its images and redirects in `answers`; the card, the badge and
//! the picking rules are in `domain::open_content`.
//!
//! - `GET /pick?t=` the slot's card (PNG). The first request of an email chooses its picks
//!   and freezes them (`picks`); the first slot's request is the email's open.
//! - `GET /badge?t=` a 307 to the pick's live badge (`static/hot.png`, `popular`, `none`;
//!   `hot-fr.png` in a French email), decided now from the people who clicked it, never
//!   cached. Cards and badges speak the email's language, which its slot token carries.
//! - `GET /go?t=` counts the click and answers 307 to the pick's page (the profile URL with
//!   its id) or, for a slot without a pick, the fallback page: only destinations the
//!   deployment configured, never one from the request.
//! - `GET /static/*.png` the badges and the fallback card, cached for a year.
//!
//! A token that does not open (tampered, foreign, junk) gets a 404: a transparent image for
//! the image routes, so a mail client shows nothing broken. HEAD is answered like GET and
//! counts nothing. Counting never fails a response, nor holds it past its bounds: MongoDB's
//! subscription check `COUNT_TIMEOUT_MS`, the counting writes as long again, a read of
//! the table `READ_TIMEOUT`, the choice `PICK_COMPUTE_TIMEOUT_MS`, the cold start's index
//! check `INDEX_CHECK_TIMEOUT` (then it serves without MongoDB). Over them all, one
//! `REQUEST_DEADLINE` from the request's entry (7 s, the function's timeout is 10 s): each
//! step is capped by what is left of it, the picks must be found with `after_picks` still
//! left (for the counting and a badge's read), and a request out of time answers with what
//! it has (the fallback card or link, no badge), so no bound adds up to Lambda's 502.
//!
//! People, not requests: a counted click marks the person on the pick's sketch of the
//! minute; only a mark that raised it goes on to the pick's sketch of the campaign, and only
//! a rise there may raise the campaign's top. So a click is at most four writes (minute,
//! pick, top, counts; five with tracking on: the send record's note), a repeat within the
//! minute two (three), an open one (two). Without consent (`TRACK_OPENS_AND_CLICKS` false,
//! the default) no open or click is noted against a recipient, logs included; what remains
//! is pseudonymous (the first fetch of an email's picks; keyed marks in the sketches).

mod answers;
mod counting;
mod picks;
#[cfg(test)]
mod tests;

use crate::config::OpenContentFunctionConfig;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::{Engagement, SendKey};
use crate::domain::open_content::badge::minute_of;
use crate::domain::open_content::card;
use crate::domain::open_content::picks::choose;
use crate::domain::open_content::{
    Badge, ClickVerdict, FreezeClaim, OpenCount, Pick, Picks, SlotRef, SlotSealer, Visitor,
};
use crate::domain::user_id::UserId;
use crate::ports::{
    Clock, ContentStoreError, IndexCheck, OpenContentStore, PickDirectory, SendRecordNotes,
};
use crate::runtime::function_url::{self, HttpRequest, HttpResponse};
use answers::{image, redirect, static_suffix, text, Static, FROZEN, IMMUTABLE, PIXEL};
use counting::Counts;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

/// How long a request waits for one request to the open-content table about the picks or a
/// badge (then the fallback, not frozen, or no badge).
pub const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the cold start waits for MongoDB's index check (then it serves without it).
pub const INDEX_CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// Everything one request does, from its entry (the function's timeout is 10 s; the rest is
/// the runtime's and the network's).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(7);

/// The moment a request must have answered by; every wait is capped by what is left.
#[derive(Clone, Copy, Debug)]
struct Deadline(Instant);

impl Deadline {
    fn left(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// `bound`, or less if the deadline comes first.
    fn cap(self, bound: Duration) -> Duration {
        bound.min(self.left())
    }

    /// An earlier deadline, `reserve` before this one.
    fn before(self, reserve: Duration) -> Self {
        Self(self.0.checked_sub(reserve).unwrap_or(self.0))
    }
}

/// `template` with `{id}` replaced by `id`, percent-encoded (every byte but the unreserved).
pub fn profile_url(template: &str, id: &str) -> String {
    let encoded: String = id
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    template.replace("{id}", &encoded)
}

/// The routes: the last segment of the path, so the function may sit under a base path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Pick,
    Badge,
    Go,
    /// One of the badge images, by its name under `static/`.
    Static(Static),
    Other,
}

impl Route {
    /// A request's route from its path: the last segment, or an image under `static/`.
    fn of(path: &str) -> Self {
        if let Some((dir, name)) = path.rsplit_once('/') {
            if let Some(image) = Static::named(name).filter(|_| dir.ends_with("/static")) {
                return Route::Static(image);
            }
        }
        match path.rsplit('/').next() {
            Some("pick") => Route::Pick,
            Some("badge") => Route::Badge,
            Some("go") => Route::Go,
            _ => Route::Other,
        }
    }

    /// Its name in the metrics (`ROUTES`).
    fn name(&self) -> &'static str {
        match self {
            Route::Pick => "pick",
            Route::Badge => "badge",
            Route::Go => "go",
            Route::Static(_) => "static",
            Route::Other => "other",
        }
    }
}

/// Generic over its ports: the DynamoDB table of frozen picks and activity, MongoDB's users
/// and follows, and the send records (opens and clicks in the campaign analytics).
pub struct OpenContent<S, D, R> {
    sealer: SlotSealer,
    store: S,
    directory: D,
    records: R,
    clock: Arc<dyn Clock>,
    config: OpenContentFunctionConfig,
    frozen: Mutex<HashMap<SendKey, Picks>>,
    /// The most people of any pick per campaign, as last seen (it only grows: a pick below
    /// it need not try to raise it).
    tops: Mutex<HashMap<CampaignId, u64>>,
    requests: AtomicU64,
}

/// `f` within `bound`, or an error saying so.
async fn within<T>(
    bound: Duration,
    f: impl Future<Output = Result<T, ContentStoreError>>,
) -> Result<T, ContentStoreError> {
    tokio::time::timeout(bound, f).await.unwrap_or_else(|_| {
        Err(ContentStoreError(format!(
            "no answer within {} ms",
            bound.as_millis()
        )))
    })
}

impl<S: OpenContentStore, D: PickDirectory, R: SendRecordNotes> OpenContent<S, D, R> {
    pub fn new(
        sealer: SlotSealer,
        store: S,
        directory: D,
        records: R,
        clock: Arc<dyn Clock>,
        config: OpenContentFunctionConfig,
    ) -> Self {
        Self {
            sealer,
            store,
            directory,
            records,
            clock,
            config,
            frozen: Mutex::new(HashMap::new()),
            tops: Mutex::new(HashMap::new()),
            requests: AtomicU64::new(0),
        }
    }

    /// Cold start: the indexes the pick choice reads through. A missing one stops the
    /// function (a deploy to fix); a MongoDB that does not answer within
    /// `INDEX_CHECK_TIMEOUT` does not: the static images, the frozen picks, the badges and
    /// the links need no MongoDB, and a first open freezes the fallback until it is back.
    pub async fn prepare(&self) -> Result<(), crate::ports::StoreError> {
        match tokio::time::timeout(INDEX_CHECK_TIMEOUT, self.directory.check_indexes()).await {
            Ok(Ok(IndexCheck::Present)) => Ok(()),
            Ok(Ok(IndexCheck::Missing(what))) => Err(crate::ports::StoreError::mongo(what)),
            Ok(Err(err)) => {
                tracing::warn!(reason = %err, "MongoDB did not answer the index check; serving what needs no MongoDB");
                Ok(())
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = INDEX_CHECK_TIMEOUT.as_millis() as u64,
                    "MongoDB did not answer the index check in time; serving what needs no MongoDB"
                );
                Ok(())
            }
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.now_ms()).unwrap_or(0)
    }

    /// A Function URL event in, its response out (what the Lambda binary serves).
    pub async fn handle_function_url(&self, event: &Value, request_id: &str) -> Value {
        let response = match HttpRequest::from_function_url_event(event) {
            Ok(request) => self.handle(&request, request_id).await,
            Err(reason) => {
                tracing::warn!(%reason, "not a Function URL request");
                text(400, "Bad request")
            }
        };
        response.to_function_url_response()
    }

    pub async fn handle(&self, request: &HttpRequest, request_id: &str) -> HttpResponse {
        if !matches!(request.method.as_str(), "GET" | "HEAD") {
            return text(405, "Open the email's images and links with GET.");
        }
        let route = match Route::of(&request.path) {
            Route::Static(img) => return image(200, img.image(), IMMUTABLE),
            Route::Other => return text(404, "Not found"),
            route => route,
        };
        let slot = match request.param("t").map(|t| self.sealer.open(&t)) {
            Some(Ok(slot)) => slot,
            refused => {
                // Never the token itself.
                let reason = match refused {
                    Some(Err(e)) => e.to_string(),
                    _ => "no token".to_owned(),
                };
                tracing::warn!(%reason, ?route, "slot refused");
                return match route {
                    Route::Go => text(404, "This link is not valid."),
                    _ => image(404, &PIXEL, "no-store"),
                };
            }
        };
        let owner = format!(
            "{request_id}#{}",
            self.requests.fetch_add(1, Ordering::Relaxed)
        );
        // Whose email it is, only with consent: a log line is a record too.
        let span = tracing::info_span!("open_content", campaign = %slot.campaign_id, user = tracing::field::Empty, slot = slot.slot, ?route);
        if self.config.track_opens_and_clicks {
            span.record("user", tracing::field::display(&slot.user_id));
        }
        let by = Deadline(Instant::now() + REQUEST_DEADLINE);
        async {
            match route {
                Route::Pick => self.pick(request, &slot, &owner, by).await,
                Route::Badge => self.badge(&slot, &owner, by).await,
                _ => self.go(request, &slot, &owner, by).await,
            }
        }
        .instrument(span)
        .await
    }

    async fn pick(
        &self,
        request: &HttpRequest,
        slot: &SlotRef,
        owner: &str,
        by: Deadline,
    ) -> HttpResponse {
        let opens = slot.slot == 0 && request.method == "GET";
        // The subscription check (MongoDB) runs while the picks are looked up.
        let (looked, may) = tokio::join!(self.picks(slot, owner, by), async {
            opens && self.may_count(slot, by).await
        });
        let mut counts = looked.counts;
        let mut note = None;
        if may {
            let what = match Visitor::from_user_agent(&request.user_agent) {
                Visitor::Person => OpenCount::Open,
                Visitor::ImageProxy => OpenCount::ProxyOpen,
                Visitor::Scanner => OpenCount::MachineOpen,
            };
            counts.push((what, 1));
            note = match what {
                OpenCount::Open if Visitor::is_person(&request.user_agent) => {
                    Some(Engagement::HumanOpened)
                }
                OpenCount::Open | OpenCount::ProxyOpen => Some(Engagement::Opened),
                _ => None,
            };
        }
        self.counted(slot, by, async move { (counts, note, None) })
            .await;
        let card = match looked.picks.at(slot.slot) {
            Some(pick) => card::pick_card(&pick.id, pick.name.as_deref(), slot.language),
            None => Static::Fallback(slot.language).image().clone(),
        };
        // Not frozen (the store failed, or the choice outlasted every wait): shown now,
        // never cached, so a reopen shows the frozen picks.
        image(200, &card, if looked.frozen { FROZEN } else { "no-store" })
    }

    async fn badge(&self, slot: &SlotRef, owner: &str, by: Deadline) -> HttpResponse {
        let looked = self.picks(slot, owner, by).await;
        let counts = looked.counts;
        self.counted(slot, by, async move { (counts, None, None) })
            .await;
        let badge = match looked.picks.at(slot.slot) {
            None => Badge::None,
            Some(pick) => self.badge_of(slot, pick, by).await,
        };
        // In the email's language; "none" has no words.
        let suffix = match badge {
            Badge::None => String::new(),
            _ => static_suffix(slot.language),
        };
        redirect(format!("static/{}{suffix}.png", badge.as_str()))
    }

    async fn badge_of(&self, slot: &SlotRef, pick: &Pick, by: Deadline) -> Badge {
        let rule = self.config.badge_rule;
        let now = minute_of(self.now_ms());
        let (first, last) = rule.window(now);
        let read = self
            .store
            .activity(&slot.campaign_id, &pick.id, first, last);
        match within(by.cap(READ_TIMEOUT), read).await {
            Ok(a) => {
                self.saw_top(&slot.campaign_id, a.top_people);
                rule.decide(
                    now,
                    &a.minutes,
                    a.window_people,
                    a.item_people,
                    a.top_people,
                )
            }
            Err(err) => {
                tracing::warn!(reason = %err, "badge activity not read; no badge shown");
                Badge::None
            }
        }
    }

    async fn go(
        &self,
        request: &HttpRequest,
        slot: &SlotRef,
        owner: &str,
        by: Deadline,
    ) -> HttpResponse {
        let visitor = Visitor::from_user_agent(&request.user_agent);
        // A HEAD or a known scanner is never counted as a click, whoever reads the email: no
        // subscription check (a scanner repeating a valid link costs MongoDB nothing).
        let machine = request.method.eq_ignore_ascii_case("HEAD") || visitor == Visitor::Scanner;
        let may = async { machine || self.may_count(slot, by).await };
        let (looked, may) = tokio::join!(self.picks(slot, owner, by), may);
        let pick = looked.picks.at(slot.slot);
        let verdict = ClickVerdict::decide(
            &request.method,
            visitor,
            looked.picks.frozen_at_ms,
            self.now_ms(),
            self.config.click_grace.as_millis() as u64,
        );
        let mut counts = looked.counts;
        self.counted(slot, by, async move {
            if !may {
                return (counts, None, None);
            }
            if verdict != ClickVerdict::Counted {
                tracing::info!(?verdict, "click not counted");
                counts.push((OpenCount::IgnoredClick, 1));
                return (counts, None, None);
            }
            counts.push((OpenCount::Click, 1));
            let mut top = None;
            if let Some(pick) = pick {
                let (people, raised) = self.mark_click(slot, pick).await;
                counts.extend(people);
                top = raised;
            }
            // Counted; a person's as such (experiments decide on these), an image proxy's
            // follow not.
            let noted = match visitor {
                Visitor::Person => Engagement::HumanClicked,
                _ => Engagement::Clicked,
            };
            (counts, Some(noted), top)
        })
        .await;
        redirect(match pick {
            Some(pick) => profile_url(&self.config.profile_url_template, &pick.id),
            None => self.config.fallback_url.clone(),
        })
    }
}

/// The routes a request's metrics are counted by (`function_url::request_metrics`).
pub const ROUTES: [&str; 5] = ["pick", "badge", "go", "static", "other"];

// A Function URL request in, the image, redirect or page out.
crate::runtime::serve::stage! {
    impl<S: OpenContentStore, D: PickDirectory, R: SendRecordNotes> for OpenContent<S, D, R> {
        Value => Result<(Value, Vec<crate::runtime::emf::Metric>), std::convert::Infallible>,
        |stage, event, invocation| {
            let route = Route::of(function_url::method_and_path(&event).1).name();
            let answer = stage.handle_function_url(&event, &invocation.request_id);
            Ok(function_url::measured(route, answer).await)
        }
    }
}

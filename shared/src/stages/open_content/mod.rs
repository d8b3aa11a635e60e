//! Over 450 lines because one Function URL's routes (card, click, badge) share the token
//! check, the frozen picks and the bounded counting; the card, the badge and the picking
//! rules are in `domain::open_content`.
//!
//! OpenContent: the pick slots of sent emails, served by a Lambda Function URL.
//!
//! - `GET /pick?t=` the slot's card (PNG). The first request of an email chooses its picks
//!   and freezes them (`picks`); the first slot's request is the email's open.
//! - `GET /badge?t=` a 307 to the pick's live badge (`static/hot.png`, `popular`, `none`),
//!   decided now from the people who clicked it, never cached.
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

#[cfg(test)]
mod tests;

use crate::config::OpenContentFunctionConfig;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::{Engagement, SendKey};
use crate::domain::open_content::badge::minute_of;
use crate::domain::open_content::card::{self, Image};
use crate::domain::open_content::picks::choose;
use crate::domain::open_content::{
    Badge, ClickVerdict, FreezeClaim, OpenCount, Pick, Picks, SlotRef, SlotSealer, Visitor,
};
use crate::domain::user_id::UserId;
use crate::ports::{
    Clock, ContentStoreError, IndexCheck, OpenContentStore, PickDirectory, SendRecordNotes,
};
use crate::runtime::function_url::{self, HttpRequest, HttpResponse};
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
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

/// What a request counts for the campaign, and how much.
type Counts = Vec<(OpenCount, u64)>;

/// How often a request waiting for another's choice looks again.
const WAIT_STEP: Duration = Duration::from_millis(100);
/// Frozen picks kept per environment (an email's slots and badges come to one environment
/// within moments; a frozen set never changes).
const CACHED_EMAILS: usize = 10_000;
/// A frozen card and the static images: their URL's content never changes.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// A card from a token's URL: the same for ever, but only this email's.
const FROZEN: &str = "private, max-age=31536000, immutable";

struct Images {
    hot: Image,
    popular: Image,
    none: Image,
    fallback: Image,
    pixel: Image,
}

static IMAGES: LazyLock<Images> = LazyLock::new(|| Images {
    hot: card::hot_badge(),
    popular: card::popular_badge(),
    none: card::no_badge(),
    fallback: card::fallback_card(),
    pixel: card::transparent_pixel(),
});

fn image(status: u16, image: &Image, cache: &str) -> HttpResponse {
    HttpResponse {
        status,
        headers: vec![
            ("content-type", Image::CONTENT_TYPE.to_owned()),
            ("cache-control", cache.to_owned()),
            ("x-content-type-options", "nosniff".to_owned()),
        ],
        body: image.bytes.clone(),
    }
}

fn redirect(location: String) -> HttpResponse {
    HttpResponse {
        status: 307,
        headers: vec![
            ("location", location),
            // Decided at each request: no cache may keep the answer.
            ("cache-control", "no-store".to_owned()),
            // The token is in the URL: the destination must not see it.
            ("referrer-policy", "no-referrer".to_owned()),
            ("content-type", "text/plain; charset=utf-8".to_owned()),
        ],
        body: Vec::new(),
    }
}

fn text(status: u16, body: &str) -> HttpResponse {
    let mut headers = vec![
        ("content-type", "text/plain; charset=utf-8".to_owned()),
        ("cache-control", "no-store".to_owned()),
    ];
    if status == 405 {
        headers.push(("allow", "GET, HEAD".to_owned()));
    }
    HttpResponse {
        status,
        headers,
        body: body.as_bytes().to_vec(),
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
    Static(&'static Image),
    Other,
}

impl Route {
    /// A request's route from its path: the last segment, or an image under `static/`.
    fn of(path: &str) -> Self {
        let images = &*IMAGES;
        for (name, img) in [
            ("hot.png", &images.hot),
            ("popular.png", &images.popular),
            ("none.png", &images.none),
            ("fallback.png", &images.fallback),
        ] {
            if path
                .strip_suffix(name)
                .is_some_and(|p| p.ends_with("/static/"))
            {
                return Route::Static(img);
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

/// An email's picks as a request found them.
struct Looked {
    picks: Picks,
    /// Frozen: every open shows them (else the fallback shown now, never cached).
    frozen: bool,
    /// What this request's choice counts (`Frozen`, `Fallback`), if it froze.
    counts: Counts,
}

impl Looked {
    fn unfrozen(picks: Picks) -> Self {
        Self {
            picks,
            frozen: false,
            counts: Vec::new(),
        }
    }

    fn frozen(picks: Picks) -> Self {
        Self {
            picks,
            frozen: true,
            counts: Vec::new(),
        }
    }
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
            Ok(Ok(IndexCheck::Missing(what))) => Err(crate::ports::StoreError(what)),
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
        let images = &*IMAGES;
        let route = match Route::of(&request.path) {
            Route::Static(img) => return image(200, img, IMMUTABLE),
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
                    _ => image(404, &images.pixel, "no-store"),
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
            Some(pick) => card::pick_card(&pick.id, pick.name.as_deref()),
            None => IMAGES.fallback.clone(),
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
        redirect(format!("static/{}.png", badge.as_str()))
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

    /// The clicking person's mark on the pick's sketches: the minute's first (a repeat
    /// within the minute stops there), then the campaign's; what it adds to the unique
    /// clicks (the pick's new people), and the pick's people if they may top the campaign.
    async fn mark_click(&self, slot: &SlotRef, pick: &Pick) -> (Counts, Option<u64>) {
        let campaign = &slot.campaign_id;
        let mark = self.sealer.mark(campaign, &pick.id, &slot.user_id);
        let minute = minute_of(self.now_ms());
        match self
            .store
            .mark_minute(campaign, &pick.id, minute, mark)
            .await
        {
            Ok(true) => {}
            // Counted in this minute already, so in the campaign too.
            Ok(false) => return (Vec::new(), None),
            Err(err) => {
                tracing::warn!(reason = %err, "click minute not recorded");
                return (Vec::new(), None);
            }
        }
        match self.store.mark_total(campaign, &pick.id, mark).await {
            Ok(Some(rise)) if rise.after > rise.before => {
                let top = (rise.after > self.known_top(campaign)).then_some(rise.after);
                (
                    vec![(OpenCount::UniqueClick, rise.after - rise.before)],
                    top,
                )
            }
            Ok(_) => (Vec::new(), None),
            Err(err) => {
                tracing::warn!(reason = %err, "click not added to the pick's people");
                (Vec::new(), None)
            }
        }
    }

    fn known_top(&self, campaign: &CampaignId) -> u64 {
        self.tops
            .lock()
            .ok()
            .and_then(|t| t.get(campaign).copied())
            .unwrap_or(0)
    }

    fn saw_top(&self, campaign: &CampaignId, people: u64) {
        if let Ok(mut tops) = self.tops.lock() {
            let top = tops.entry(campaign.clone()).or_default();
            *top = (*top).max(people);
        }
    }

    /// What must be left of the deadline once the picks are found: the counting writes and a
    /// badge's read (the subscription check runs while the picks are looked up).
    fn after_picks(&self) -> Duration {
        self.config.count_timeout + READ_TIMEOUT
    }

    /// The email's picks, and whether they are frozen. The first request computes and
    /// freezes; a concurrent one waits for that answer, and takes over when the first one's
    /// lease runs out (it died); when everything fails, the fallback, not frozen. Every
    /// request to the table is bounded by `READ_TIMEOUT`, and all of it ends `after_picks`
    /// before the request's deadline (then the fallback, not frozen).
    async fn picks(&self, slot: &SlotRef, owner: &str, by: Deadline) -> Looked {
        let email = slot.email();
        if let Some(picks) = self.cached(&email) {
            return Looked::frozen(picks);
        }
        let by = by.before(self.after_picks());
        let out_of_time = || {
            tracing::warn!(
                "picks not found within the request's deadline; the fallback is shown, not frozen"
            );
            Looked::unfrozen(Picks::fallback(self.now_ms()))
        };
        match within(by.cap(READ_TIMEOUT), self.store.frozen(&email)).await {
            Ok(Some(picks)) => return Looked::frozen(self.keep(&email, picks)),
            Ok(None) => {}
            Err(err) => {
                tracing::error!(reason = %err, "frozen picks not read; the fallback is shown");
                return Looked::unfrozen(Picks::fallback(self.now_ms()));
            }
        }
        let lease = self.config.compute_timeout + Duration::from_secs(1);
        // Long enough to outlast a dead winner's lease and take over, within the deadline.
        let give_up = (Instant::now() + lease * 2).min(by.0);
        loop {
            if by.left().is_zero() {
                return out_of_time();
            }
            let now = self.now_ms();
            let claim = self
                .store
                .claim(&email, owner, now, now + lease.as_millis() as u64);
            match within(by.cap(READ_TIMEOUT), claim).await {
                Ok(FreezeClaim::Frozen(picks)) => return Looked::frozen(self.keep(&email, picks)),
                Ok(FreezeClaim::Won) => return self.choose_and_freeze(slot, now, by).await,
                Ok(FreezeClaim::Busy { lease_until_ms }) => {
                    // Wait for the holder's answer until its lease ends, then claim again.
                    loop {
                        if Instant::now() >= give_up {
                            tracing::warn!("picks still being chosen elsewhere; the fallback is shown, not frozen");
                            return Looked::unfrozen(Picks::fallback(self.now_ms()));
                        }
                        tokio::time::sleep(by.cap(WAIT_STEP)).await;
                        if let Ok(Some(picks)) =
                            within(by.cap(READ_TIMEOUT), self.store.frozen(&email)).await
                        {
                            return Looked::frozen(self.keep(&email, picks));
                        }
                        if self.now_ms() >= lease_until_ms {
                            break;
                        }
                    }
                }
                Err(err) => {
                    tracing::error!(reason = %err, "picks not claimed; the fallback is shown");
                    return Looked::unfrozen(Picks::fallback(now));
                }
            }
        }
    }

    /// The winner's work: choose within the time bound (else the fallback) and freeze. Who
    /// froze first wins, so what comes back is what every open shows. The choice ends a
    /// `READ_TIMEOUT` before `by`, leaving the freeze its time; a choice the deadline cut
    /// short (not its own bound) is shown but not frozen, so a later open chooses again.
    async fn choose_and_freeze(&self, slot: &SlotRef, now: u64, by: Deadline) -> Looked {
        let email = slot.email();
        let bound = by.before(READ_TIMEOUT).cap(self.config.compute_timeout);
        let chosen = self.choose(slot, now, bound).await;
        if chosen.fallback && bound < self.config.compute_timeout {
            tracing::warn!(
                "picks not chosen within the request's deadline; the fallback is shown, not frozen"
            );
            return Looked::unfrozen(chosen);
        }
        match within(by.cap(READ_TIMEOUT), self.store.freeze(&email, &chosen)).await {
            Ok(frozen) => {
                let mut counts = Vec::new();
                if frozen == chosen {
                    counts.push((OpenCount::Frozen, 1));
                    if chosen.fallback {
                        counts.push((OpenCount::Fallback, 1));
                    }
                }
                Looked {
                    picks: self.keep(&email, frozen),
                    frozen: true,
                    counts,
                }
            }
            Err(err) => {
                tracing::error!(reason = %err, "picks chosen but not frozen; shown, not cached");
                Looked::unfrozen(chosen)
            }
        }
    }

    async fn choose(&self, slot: &SlotRef, now: u64, bound: Duration) -> Picks {
        let Ok(recipient) = UserId::parse(&slot.user_id) else {
            return Picks::fallback(now);
        };
        let read = self
            .directory
            .followers(&recipient, self.config.follows_read);
        match tokio::time::timeout(bound, read).await {
            Ok(Ok((followers, followed_back))) => Picks {
                items: choose(
                    &slot.user_id,
                    &followers,
                    &followed_back,
                    usize::from(self.config.slots),
                ),
                fallback: false,
                frozen_at_ms: now,
            },
            Ok(Err(err)) => {
                tracing::warn!(reason = %err, "picks not chosen; the fallback is frozen");
                Picks::fallback(now)
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = bound.as_millis() as u64,
                    "picks not chosen in time; the fallback"
                );
                Picks::fallback(now)
            }
        }
    }

    fn cached(&self, email: &SendKey) -> Option<Picks> {
        self.frozen.lock().ok()?.get(email).cloned()
    }

    fn keep(&self, email: &SendKey, picks: Picks) -> Picks {
        if let Ok(mut cache) = self.frozen.lock() {
            if cache.len() >= CACHED_EMAILS {
                cache.clear();
            }
            cache.insert(email.clone(), picks.clone());
        }
        picks
    }

    /// Whether this email's reader may still be counted (an unsubscribed or suppressed
    /// person's old email still works, and counts nothing new). When MongoDB cannot say
    /// within `COUNT_TIMEOUT_MS`, nothing is counted.
    async fn may_count(&self, slot: &SlotRef, by: Deadline) -> bool {
        let Ok(id) = UserId::parse(&slot.user_id) else {
            return false;
        };
        match tokio::time::timeout(
            by.cap(self.config.count_timeout),
            self.directory.may_count(&id),
        )
        .await
        {
            Ok(Ok(may)) => may,
            Ok(Err(err)) => {
                tracing::warn!(reason = %err, "subscription not read; nothing counted");
                false
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = self.config.count_timeout.as_millis() as u64,
                    "subscription not read in time; nothing counted"
                );
                false
            }
        }
    }

    /// The request's counting, within `COUNT_TIMEOUT_MS`: `work` decides what to count (it may
    /// write the sketches), then one write adds the counts, and at the same time the send
    /// record is noted (with consent only) and the campaign's top raised.
    async fn counted(
        &self,
        slot: &SlotRef,
        by: Deadline,
        work: impl Future<Output = (Counts, Option<Engagement>, Option<u64>)>,
    ) {
        let email = slot.email();
        let all = async {
            let (counts, note, top) = work.await;
            let note = async {
                match note {
                    Some(what) if self.config.track_opens_and_clicks => {
                        if let Err(err) = self.records.note(&email, what, self.now_ms()).await {
                            tracing::warn!(reason = %err, ?what, "not noted on the send record");
                        }
                    }
                    _ => {}
                }
            };
            let top = async {
                if let Some(people) = top {
                    match self.store.raise_top(&slot.campaign_id, people).await {
                        Ok(()) => self.saw_top(&slot.campaign_id, people),
                        Err(err) => tracing::warn!(reason = %err, "campaign's top not raised"),
                    }
                }
            };
            let count = async {
                if !counts.is_empty() {
                    if let Err(err) = self.store.count(&email, &counts).await {
                        tracing::warn!(reason = %err, ?counts, "not counted");
                    }
                }
            };
            tokio::join!(count, note, top);
        };
        if tokio::time::timeout(by.cap(self.config.count_timeout), all)
            .await
            .is_err()
        {
            tracing::warn!(
                timeout_ms = self.config.count_timeout.as_millis() as u64,
                "counting not done in time; the rest is not counted"
            );
        }
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

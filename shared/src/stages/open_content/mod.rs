//! Over 450 lines because one Function URL's routes (card, click, badge) share the token
//! check and the frozen picks; the card, the badge and the picking rules are in
//! `domain::open_content`.
//!
//! OpenContent: the pick slots of sent emails, served by a Lambda Function URL.
//!
//! - `GET /pick?t=` the slot's card (PNG). The first request of an email chooses its picks
//!   and freezes them (`picks`); the first slot's request is the email's open.
//! - `GET /badge?t=` a 307 to the pick's live badge (`static/hot.png`, `popular`, `none`),
//!   decided now from the clicks, never cached.
//! - `GET /go?t=` counts the click and answers 307 to the pick's page (the profile URL with
//!   its id) or, for a slot without a pick, the fallback page: only destinations the
//!   deployment configured, never one from the request.
//! - `GET /static/*.png` the badges and the fallback card, cached for a year.
//!
//! A token that does not open (tampered, foreign, junk) gets a 404: a transparent image for
//! the image routes, so a mail client shows nothing broken. HEAD is answered like GET and
//! counts nothing. Counting never fails a response.

#[cfg(test)]
mod tests;

use crate::config::OpenContentFunctionConfig;
use crate::domain::ledger::{Engagement, SendKey};
use crate::domain::open_content::badge::minute_of;
use crate::domain::open_content::card::{self, Image};
use crate::domain::open_content::picks::choose;
use crate::domain::open_content::{
    Badge, ClickVerdict, FreezeClaim, OpenCount, Pick, Picks, SlotRef, SlotSealer, Visitor,
};
use crate::domain::user_id::UserId;
use crate::ports::{Clock, OpenContentStore, PickDirectory, SendRecordNotes};
use crate::runtime::function_url::{HttpRequest, HttpResponse};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

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
    requests: AtomicU64,
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
            requests: AtomicU64::new(0),
        }
    }

    /// Cold start: the index the pick choice reads through.
    pub async fn prepare(&self) -> Result<(), crate::ports::StoreError> {
        self.directory.check_indexes().await
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
        let path = request.path.as_str();
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
                return image(200, img, IMMUTABLE);
            }
        }
        let route = match path.rsplit('/').next() {
            Some("pick") => Route::Pick,
            Some("badge") => Route::Badge,
            Some("go") => Route::Go,
            _ => return text(404, "Not found"),
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
                    Route::Pick | Route::Badge => image(404, &images.pixel, "no-store"),
                };
            }
        };
        let owner = format!(
            "{request_id}#{}",
            self.requests.fetch_add(1, Ordering::Relaxed)
        );
        let span = tracing::info_span!("open_content", campaign = %slot.campaign_id, user = %slot.user_id, slot = slot.slot, ?route);
        async {
            match route {
                Route::Pick => self.pick(request, &slot, &owner).await,
                Route::Badge => self.badge(&slot, &owner).await,
                Route::Go => self.go(request, &slot, &owner).await,
            }
        }
        .instrument(span)
        .await
    }

    async fn pick(&self, request: &HttpRequest, slot: &SlotRef, owner: &str) -> HttpResponse {
        let (picks, frozen) = self.picks(slot, owner).await;
        if slot.slot == 0 && request.method == "GET" {
            self.count_open(request, slot).await;
        }
        let card = match picks.at(slot.slot) {
            Some(pick) => card::pick_card(&pick.id, pick.name.as_deref()),
            None => IMAGES.fallback.clone(),
        };
        // Not frozen (the store failed, or the choice outlasted every wait): shown now,
        // never cached, so a reopen shows the frozen picks.
        image(200, &card, if frozen { FROZEN } else { "no-store" })
    }

    async fn badge(&self, slot: &SlotRef, owner: &str) -> HttpResponse {
        let (picks, _) = self.picks(slot, owner).await;
        let badge = match picks.at(slot.slot) {
            None => Badge::None,
            Some(pick) => self.badge_of(slot, pick).await,
        };
        redirect(format!("static/{}.png", badge.as_str()))
    }

    async fn badge_of(&self, slot: &SlotRef, pick: &Pick) -> Badge {
        let rule = self.config.badge_rule;
        let now = minute_of(self.now_ms());
        let (first, last) = rule.window(now);
        match self
            .store
            .activity(&slot.campaign_id, &pick.id, first, last)
            .await
        {
            Ok(a) => rule.decide(now, &a.minutes, a.item_clicks, a.top_clicks),
            Err(err) => {
                tracing::warn!(reason = %err, "badge activity not read; no badge shown");
                Badge::None
            }
        }
    }

    async fn go(&self, request: &HttpRequest, slot: &SlotRef, owner: &str) -> HttpResponse {
        let (picks, _) = self.picks(slot, owner).await;
        let pick = picks.at(slot.slot);
        let verdict = ClickVerdict::decide(
            &request.method,
            Visitor::from_user_agent(&request.user_agent),
            picks.frozen_at_ms,
            self.now_ms(),
            self.config.click_grace.as_millis() as u64,
        );
        self.count_click(slot, pick, verdict).await;
        redirect(match pick {
            Some(pick) => profile_url(&self.config.profile_url_template, &pick.id),
            None => self.config.fallback_url.clone(),
        })
    }

    /// The email's picks, and whether they are frozen. The first request computes and
    /// freezes; a concurrent one waits for that answer, and takes over when the first one's
    /// lease runs out (it died); when everything fails, the fallback, not frozen.
    async fn picks(&self, slot: &SlotRef, owner: &str) -> (Picks, bool) {
        let email = slot.email();
        if let Some(picks) = self.cached(&email) {
            return (picks, true);
        }
        match self.store.frozen(&email).await {
            Ok(Some(picks)) => return (self.keep(&email, picks), true),
            Ok(None) => {}
            Err(err) => {
                tracing::error!(reason = %err, "frozen picks not read; the fallback is shown");
                return (Picks::fallback(self.now_ms()), false);
            }
        }
        let lease = self.config.compute_timeout + Duration::from_secs(1);
        // Long enough to outlast a dead winner's lease and take over.
        let give_up = Instant::now() + lease * 2;
        loop {
            let now = self.now_ms();
            let claim = self
                .store
                .claim(&email, owner, now, now + lease.as_millis() as u64)
                .await;
            match claim {
                Ok(FreezeClaim::Frozen(picks)) => return (self.keep(&email, picks), true),
                Ok(FreezeClaim::Won) => return self.choose_and_freeze(slot, now).await,
                Ok(FreezeClaim::Busy { lease_until_ms }) => {
                    // Wait for the holder's answer until its lease ends, then claim again.
                    loop {
                        if Instant::now() >= give_up {
                            tracing::warn!("picks still being chosen elsewhere; the fallback is shown, not frozen");
                            return (Picks::fallback(self.now_ms()), false);
                        }
                        tokio::time::sleep(WAIT_STEP).await;
                        if let Ok(Some(picks)) = self.store.frozen(&email).await {
                            return (self.keep(&email, picks), true);
                        }
                        if self.now_ms() >= lease_until_ms {
                            break;
                        }
                    }
                }
                Err(err) => {
                    tracing::error!(reason = %err, "picks not claimed; the fallback is shown");
                    return (Picks::fallback(now), false);
                }
            }
        }
    }

    /// The winner's work: choose within the time bound (else the fallback) and freeze. Who
    /// froze first wins, so what comes back is what every open shows.
    async fn choose_and_freeze(&self, slot: &SlotRef, now: u64) -> (Picks, bool) {
        let email = slot.email();
        let chosen = self.choose(slot, now).await;
        match self.store.freeze(&email, &chosen).await {
            Ok(frozen) => {
                if frozen == chosen {
                    let mut what = vec![OpenCount::Frozen];
                    if chosen.fallback {
                        what.push(OpenCount::Fallback);
                    }
                    self.count(&email, &what).await;
                }
                (self.keep(&email, frozen), true)
            }
            Err(err) => {
                tracing::error!(reason = %err, "picks chosen but not frozen; shown, not cached");
                (chosen, false)
            }
        }
    }

    async fn choose(&self, slot: &SlotRef, now: u64) -> Picks {
        let Ok(recipient) = UserId::parse(&slot.user_id) else {
            return Picks::fallback(now);
        };
        let read = self
            .directory
            .followers(&recipient, self.config.follows_read);
        match tokio::time::timeout(self.config.compute_timeout, read).await {
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
                    timeout_ms = self.config.compute_timeout.as_millis() as u64,
                    "picks not chosen in time; the fallback is frozen"
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
    /// person's old email still works, and counts nothing new). When MongoDB cannot say,
    /// nothing is counted.
    async fn may_count(&self, slot: &SlotRef) -> bool {
        let Ok(id) = UserId::parse(&slot.user_id) else {
            return false;
        };
        match self.directory.may_count(&id).await {
            Ok(may) => may,
            Err(err) => {
                tracing::warn!(reason = %err, "subscription not read; nothing counted");
                false
            }
        }
    }

    async fn count_open(&self, request: &HttpRequest, slot: &SlotRef) {
        let what = match Visitor::from_user_agent(&request.user_agent) {
            Visitor::Person => OpenCount::Open,
            Visitor::ImageProxy => OpenCount::ProxyOpen,
            Visitor::Scanner => OpenCount::MachineOpen,
        };
        if !self.may_count(slot).await {
            return;
        }
        let email = slot.email();
        // Two items, two writes at once.
        let note = async {
            if what != OpenCount::MachineOpen {
                self.note(&email, Engagement::Opened).await;
            }
        };
        let counted = [what];
        tokio::join!(self.count(&email, &counted), note);
    }

    async fn count_click(&self, slot: &SlotRef, pick: Option<&Pick>, verdict: ClickVerdict) {
        if !self.may_count(slot).await {
            return;
        }
        let email = slot.email();
        if verdict != ClickVerdict::Counted {
            tracing::info!(?verdict, "click not counted");
            self.count(&email, &[OpenCount::IgnoredClick]).await;
            return;
        }
        let mut what = vec![OpenCount::Click];
        if let Some(pick) = pick {
            match self
                .store
                .click(&email, &pick.id, minute_of(self.now_ms()))
                .await
            {
                Ok(true) => what.push(OpenCount::UniqueClick),
                Ok(false) => {}
                Err(err) => tracing::warn!(reason = %err, "click activity not recorded"),
            }
        }
        tokio::join!(
            self.count(&email, &what),
            self.note(&email, Engagement::Clicked)
        );
    }

    async fn count(&self, email: &SendKey, what: &[OpenCount]) {
        if let Err(err) = self.store.count(email, what).await {
            tracing::warn!(reason = %err, ?what, "not counted");
        }
    }

    /// On the send record, where the campaign analytics count it (the first time is kept).
    async fn note(&self, email: &SendKey, what: Engagement) {
        if let Err(err) = self.records.note(email, what, self.now_ms()).await {
            tracing::warn!(reason = %err, ?what, "not noted on the send record");
        }
    }
}

// A Function URL request in, the image, redirect or page out.
crate::runtime::serve::stage! {
    impl<S: OpenContentStore, D: PickDirectory, R: SendRecordNotes> for OpenContent<S, D, R> {
        Value => Result<(Value, ()), std::convert::Infallible>,
        |stage, event, invocation| Ok((stage.handle_function_url(&event, &invocation.request_id).await, ()))
    }
}

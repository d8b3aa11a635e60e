//! The freeze protocol, the badges, the clicks and the refusals, over the in-memory ports.

use super::*;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendStatus;
use crate::domain::open_content::picks::Follower;
use crate::domain::open_content::SlotUrls;
use crate::ports::memory::{MemoryOpenContent, MemoryPicks, MemoryRecords};
use crate::ports::SystemClock;
use std::collections::HashSet;
use std::sync::atomic::AtomicI64;

const KEY: &str = "0123456789abcdef0123456789abcdef";
const CAMPAIGN: &str = "weekly-2026-W47";
const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";

/// A clock the test moves.
#[derive(Default)]
struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn config(extra: &[(&str, &str)]) -> OpenContentFunctionConfig {
    let mut pairs: HashMap<String, String> = [
        ("MONGODB_URI", "mongodb://127.0.0.1:1/"),
        ("MONGODB_DATABASE", "app"),
        ("UNSUBSCRIBE_SECRET", KEY),
        ("SENDS_TABLE_NAME", "sends"),
        ("OPEN_CONTENT_TABLE_NAME", "open"),
        ("PROFILE_URL_TEMPLATE", "https://app.example/u/{id}"),
        ("PICKS_FALLBACK_URL", "https://app.example/followers"),
        ("CLICK_GRACE_SECONDS", "10"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    pairs.retain(|_, v| !v.is_empty());
    OpenContentFunctionConfig::from_source(&move |k: &str| pairs.get(k).cloned()).unwrap()
}

fn follower(id: &str, name: &str) -> Follower {
    Follower {
        id: id.into(),
        name: Some(name.into()),
        exists: true,
    }
}

/// `u1` has five followers and follows one of them back.
fn directory() -> MemoryPicks {
    MemoryPicks {
        followers: [(
            "u1".to_string(),
            vec![
                follower("a", "Ada"),
                follower("b", "Bo"),
                follower("c", "Cy"),
                follower("d", "Di"),
                follower("oid:65a1f0c2e4b0a1b2c3d4e5f6", "Ed"),
            ],
        )]
        .into(),
        followed_back: [("u1".to_string(), HashSet::from(["b".to_string()]))].into(),
        ..Default::default()
    }
}

type Stage = OpenContent<MemoryOpenContent, MemoryPicks, MemoryRecords>;

fn stage(directory: MemoryPicks, clock: Arc<dyn Clock>, extra: &[(&str, &str)]) -> Stage {
    OpenContent::new(
        SlotSealer::new(KEY).unwrap(),
        MemoryOpenContent::default(),
        directory,
        MemoryRecords::with("u1", CAMPAIGN, SendStatus::Sent),
        clock,
        config(extra),
    )
}

fn urls(user: &str) -> Vec<SlotUrls> {
    SlotUrls::for_email(
        &SlotSealer::new(KEY).unwrap(),
        "https://o.example/",
        &CampaignId::parse(CAMPAIGN).unwrap(),
        user,
        3,
    )
}

fn get(url: &str, ua: &str) -> HttpRequest {
    let rest = url.strip_prefix("https://o.example").unwrap();
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    HttpRequest {
        method: "GET".into(),
        path: path.into(),
        query: query.into(),
        user_agent: ua.into(),
        ..Default::default()
    }
}

fn frozen_ids(stage: &Stage) -> Vec<String> {
    let email = SendKey::new("u1", CampaignId::parse(CAMPAIGN).unwrap());
    stage.store.with_frozen(&email)
}

impl MemoryOpenContent {
    fn with_frozen(&self, email: &SendKey) -> Vec<String> {
        futures::executor::block_on(self.frozen(email))
            .unwrap()
            .map(|p| p.items.into_iter().map(|i| i.id).collect())
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn every_slot_at_once_computes_once_and_shows_one_consistent_set() {
    let mut dir = directory();
    dir.delay = Duration::from_millis(150);
    let reads = dir.reads.clone();
    let s = stage(dir, Arc::new(SystemClock), &[]);
    let slots = urls("u1");
    // All images and badges of the email at once, as a mail client fetches them.
    let requests: Vec<HttpRequest> = slots
        .iter()
        .flat_map(|u| [get(&u.image, CHROME), get(&u.badge, CHROME)])
        .collect();
    let answers = futures::future::join_all(
        requests
            .iter()
            .enumerate()
            .map(|(i, r)| s.handle(r, if i % 2 == 0 { "req-a" } else { "req-b" })),
    )
    .await;
    assert_eq!(reads.load(Ordering::SeqCst), 1, "one computation");
    assert_eq!(s.store.freezes.load(Ordering::SeqCst), 1);
    // Newest first, not the followed-back "b", none twice.
    assert_eq!(frozen_ids(&s), ["a", "c", "d"]);
    for (i, a) in answers.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(a.status, 200);
            assert_eq!(a.header("content-type"), Some("image/png"));
            assert_eq!(a.header("cache-control"), Some(FROZEN));
        } else {
            assert_eq!(a.status, 307);
            assert_eq!(a.header("location"), Some("static/none.png"));
            assert_eq!(a.header("cache-control"), Some("no-store"));
        }
    }
    // The cards are the picks', in slot order.
    assert_eq!(answers[0].body, card::pick_card("a", Some("Ada")).bytes);
    assert_eq!(answers[2].body, card::pick_card("c", Some("Cy")).bytes);
    // A reopen from another client, on a new environment with the same store: the same set,
    // no new computation.
    let again = OpenContent::new(
        SlotSealer::new(KEY).unwrap(),
        s.store.clone(),
        directory(),
        MemoryRecords::default(),
        Arc::new(SystemClock),
        config(&[]),
    );
    let reopened = again
        .handle(&get(&slots[0].image, "GoogleImageProxy"), "req-c")
        .await;
    assert_eq!(reopened.body, answers[0].body);
    assert_eq!(again.directory.reads.load(Ordering::SeqCst), 0);
    // Following back "c" since changes nothing for this email.
    assert_eq!(frozen_ids(&again), ["a", "c", "d"]);
    let counts = s
        .store
        .counters(&CampaignId::parse(CAMPAIGN).unwrap())
        .await
        .unwrap();
    assert_eq!(
        (counts.picks_frozen, counts.opens, counts.proxy_opens),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn a_winner_that_dies_is_replaced_after_its_lease() {
    let dir = directory();
    let reads = dir.reads.clone();
    let s = stage(
        dir,
        Arc::new(SystemClock),
        &[("PICK_COMPUTE_TIMEOUT_MS", "200")],
    );
    let email = SendKey::new("u1", CampaignId::parse(CAMPAIGN).unwrap());
    // A request claimed the email and died: its lease runs 300 ms more.
    let now = u64::try_from(SystemClock.now_ms()).unwrap();
    assert_eq!(
        s.store.claim(&email, "dead", now, now + 300).await.unwrap(),
        FreezeClaim::Won
    );
    let started = Instant::now();
    let answer = s.handle(&get(&urls("u1")[0].image, CHROME), "req").await;
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "waited for the lease"
    );
    assert_eq!(answer.header("cache-control"), Some(FROZEN));
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    assert_eq!(frozen_ids(&s), ["a", "c", "d"]);
    assert!(s
        .store
        .lease(&email)
        .is_some_and(|(owner, _)| owner.starts_with("req#")));
}

#[tokio::test]
async fn a_slow_choice_freezes_the_fallback_and_no_image_breaks() {
    let mut dir = directory();
    dir.delay = Duration::from_millis(400);
    let s = stage(
        dir,
        Arc::new(SystemClock),
        &[("PICK_COMPUTE_TIMEOUT_MS", "100")],
    );
    let slots = urls("u1");
    let card_answer = s.handle(&get(&slots[0].image, CHROME), "r").await;
    assert_eq!(card_answer.status, 200);
    assert_eq!(card_answer.body, IMAGES.fallback.bytes);
    let email = SendKey::new("u1", CampaignId::parse(CAMPAIGN).unwrap());
    assert!(
        s.store.frozen(&email).await.unwrap().unwrap().fallback,
        "frozen: every open the same"
    );
    let link = s.handle(&get(&slots[1].link, CHROME), "r").await;
    assert_eq!(
        link.header("location"),
        Some("https://app.example/followers")
    );
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!((counts.picks_frozen, counts.fallbacks), (1, 1));
}

fn email_campaign() -> CampaignId {
    CampaignId::parse(CAMPAIGN).unwrap()
}

#[tokio::test]
async fn clicks_make_hot_and_popular_as_the_rule_says_and_hot_fades() {
    let clock = Arc::new(TestClock::default());
    let minute = 60_000i64;
    clock.0.store(1_000 * minute, Ordering::SeqCst);
    let s = stage(directory(), clock.clone(), &[("CLICK_GRACE_SECONDS", "0")]);
    let slots = urls("u1");
    let badge = |slot: usize| get(&slots[slot].badge, CHROME);
    assert_eq!(
        s.handle(&badge(0), "r").await.header("location"),
        Some("static/none.png")
    );
    // One click on "a" (slot 0): the campaign's most clicked, so popular.
    let click = |slot: usize| get(&slots[slot].link, CHROME);
    let went = s.handle(&click(0), "r").await;
    assert_eq!(went.status, 307);
    assert_eq!(went.header("location"), Some("https://app.example/u/a"));
    assert_eq!(went.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(
        s.handle(&badge(0), "r").await.header("location"),
        Some("static/popular.png")
    );
    // "c" (slot 1) ties at one click: popular too; then clicked in two more minutes: hot.
    s.handle(&click(1), "r").await;
    assert_eq!(
        s.handle(&badge(1), "r").await.header("location"),
        Some("static/popular.png")
    );
    for _ in 0..2 {
        clock.0.fetch_add(minute, Ordering::SeqCst);
        s.handle(&click(1), "r").await;
    }
    assert_eq!(
        s.handle(&badge(1), "r").await.header("location"),
        Some("static/hot.png")
    );
    assert_eq!(
        s.handle(&badge(0), "r").await.header("location"),
        Some("static/none.png"),
        "no longer the top"
    );
    // Activity stops: ten minutes on, "c" is not hot but still the most clicked.
    clock.0.fetch_add(10 * minute, Ordering::SeqCst);
    assert_eq!(
        s.handle(&badge(1), "r").await.header("location"),
        Some("static/popular.png")
    );
    // The slot past the picks (fewer followers than slots would leave one) has no badge.
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!(
        (counts.clicks, counts.unique_clicks, counts.ignored_clicks),
        (4, 2, 0)
    );
    let noted = s.records.get("u1", CAMPAIGN).unwrap().1;
    assert!(noted.contains(&Engagement::Clicked));
}

#[tokio::test]
async fn scanners_head_and_clicks_at_delivery_are_answered_but_not_counted() {
    let clock = Arc::new(TestClock::default());
    clock.0.store(5_000_000, Ordering::SeqCst);
    let s = stage(directory(), clock.clone(), &[]);
    let link = &urls("u1")[0].link;
    // A click that freezes the picks itself (images blocked), within the grace: a scanner.
    assert_eq!(
        s.handle(&get(link, CHROME), "r").await.header("location"),
        Some("https://app.example/u/a")
    );
    let mut head = get(link, CHROME);
    head.method = "HEAD".into();
    clock.0.fetch_add(60_000, Ordering::SeqCst);
    assert_eq!(s.handle(&head, "r").await.status, 307);
    assert_eq!(
        s.handle(&get(link, "Mozilla/5.0 (compatible; Barracuda)"), "r")
            .await
            .status,
        307
    );
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!((counts.clicks, counts.ignored_clicks), (0, 3));
    // After the grace, a person's click counts.
    s.handle(&get(link, CHROME), "r").await;
    assert_eq!(s.store.counters(&email_campaign()).await.unwrap().clicks, 1);
}

#[tokio::test]
async fn an_unsubscribed_readers_email_still_works_and_counts_nothing() {
    let mut dir = directory();
    dir.quiet.insert("u1".into());
    let s = stage(dir, Arc::new(SystemClock), &[("CLICK_GRACE_SECONDS", "0")]);
    let slots = urls("u1");
    assert_eq!(
        s.handle(&get(&slots[0].image, CHROME), "r").await.status,
        200
    );
    assert_eq!(
        s.handle(&get(&slots[0].link, CHROME), "r").await.status,
        307
    );
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!(
        (counts.opens, counts.clicks, counts.picks_frozen),
        (0, 0, 1)
    );
    assert!(s.records.get("u1", CAMPAIGN).unwrap().1.is_empty());
}

#[tokio::test]
async fn tampered_tokens_get_a_transparent_image_or_a_404_and_statics_are_cached() {
    let s = stage(directory(), Arc::new(SystemClock), &[]);
    let slot = &urls("u1")[0];
    let tampered = |url: &str| {
        let mut r = get(url, CHROME);
        let mut q = r.query.into_bytes();
        let last = q.len() - 2;
        q[last] = if q[last] == b'A' { b'B' } else { b'A' };
        r.query = String::from_utf8(q).unwrap();
        r
    };
    for url in [&slot.image, &slot.badge] {
        let a = s.handle(&tampered(url), "r").await;
        assert_eq!(
            (a.status, a.header("content-type")),
            (404, Some("image/png"))
        );
        assert_eq!(a.body, IMAGES.pixel.bytes);
    }
    let a = s.handle(&tampered(&slot.link), "r").await;
    assert_eq!((a.status, a.header("location")), (404, None));
    let mut no_token = get(&slot.image, CHROME);
    no_token.query.clear();
    assert_eq!(s.handle(&no_token, "r").await.status, 404);
    assert_eq!(
        s.directory.reads.load(Ordering::SeqCst),
        0,
        "nothing computed"
    );
    let mut post = get(&slot.link, CHROME);
    post.method = "POST".into();
    assert_eq!(s.handle(&post, "r").await.status, 405);
    for name in ["hot", "popular", "none", "fallback"] {
        let a = s
            .handle(
                &get(&format!("https://o.example/static/{name}.png"), ""),
                "r",
            )
            .await;
        assert_eq!(
            (a.status, a.header("cache-control")),
            (200, Some(IMMUTABLE))
        );
    }
    assert_eq!(
        s.handle(&get("https://o.example/elsewhere", ""), "r")
            .await
            .status,
        404
    );
}

#[test]
fn destinations_are_the_configured_page_with_the_id_encoded() {
    assert_eq!(
        profile_url("https://x/u/{id}", "a b/é?"),
        "https://x/u/a%20b%2F%C3%A9%3F"
    );
    assert_eq!(
        profile_url("https://x/u?id={id}", "oid:65a1"),
        "https://x/u?id=oid%3A65a1"
    );
}

//! The preference centre over in-memory ports: what each request changes, and every refusal
//! (which changes nothing).

use super::*;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::Engagement;
use crate::domain::ledger::{SendKey, SendStatus};
use crate::ports::memory::subscribers::MemorySubscribers;
use crate::ports::memory::MemoryRecords;
use crate::ports::PendingLeaves;

const KEY: &str = "0123456789abcdef0123456789abcdef";
const CAMPAIGN: &str = "weekly-2026-W47";

type Stage = Unsubscribe<MemorySubscribers, MemoryRecords>;

fn stage() -> Stage {
    Unsubscribe::new(
        Signer::new(KEY, "weekly-digest").unwrap(),
        MemorySubscribers::with(&["ada", "bob"]),
        MemoryRecords::with("ada", CAMPAIGN, SendStatus::Sent),
    )
}

fn token(user: &str, topic: &str) -> String {
    Signer::new(KEY, "weekly-digest").unwrap().token(
        &CampaignId::parse(CAMPAIGN).unwrap(),
        &TopicId::parse(topic).unwrap(),
        user,
    )
}

fn request(method: &str, query: &str, body: &str) -> HttpRequest {
    HttpRequest {
        method: method.into(),
        path: "/".into(),
        query: query.into(),
        body: body.as_bytes().to_vec(),
        ..Default::default()
    }
}

fn get(token: &str) -> HttpRequest {
    request("GET", &format!("token={token}"), "")
}

fn post(token: &str, body: &str) -> HttpRequest {
    request("POST", &format!("token={token}"), body)
}

/// ada's explicit topic choices: (topic, in).
fn choices(stage: &Stage, user: &str) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = ["digest", "product-news", "tips"]
        .iter()
        .filter_map(|t| {
            stage
                .subscribers
                .topic(user, t)
                .map(|c| (t.to_string(), c.0))
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_get_shows_every_topic_and_changes_nothing() {
    let stage = stage();
    let page = stage.handle(&get(&token("ada", "digest"))).await;
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(html.contains(
        "<input type=\"checkbox\" id=\"topic-digest\" name=\"topic\" value=\"digest\" checked>"
    ));
    assert!(
        html.contains("id=\"topic-product-news\" name=\"topic\" value=\"product-news\" checked>")
    );
    // Tips is out by default.
    assert!(html.contains("value=\"tips\"><label"));
    assert!(!html.contains("name=\"action\" value=\"leave\""));
    // With `leave=1` the email's topic comes first, still nothing changed.
    let leaving = request(
        "GET",
        &format!("token={}&leave=1", token("ada", "digest")),
        "",
    );
    let html = stage.handle(&leaving).await.text();
    assert!(html.contains("Stop “Weekly digest of your new followers”?"));
    assert!(html.find("value=\"leave\"") < html.find("value=\"save\""));
    assert_eq!(choices(&stage, "ada"), []);
    assert_eq!(stage.subscribers.get("ada"), Some((true, None)));
}

#[tokio::test]
async fn one_click_leaves_only_the_campaigns_topic() {
    let stage = stage();
    let page = stage
        .handle(&post(&token("ada", "digest"), "List-Unsubscribe=One-Click"))
        .await;
    assert_eq!(page.status, 200);
    assert!(page
        .text()
        .contains("You are unsubscribed from “Weekly digest of your new followers”"));
    let (on, via, campaign) = stage.subscribers.topic("ada", "digest").unwrap();
    assert_eq!(
        (on, via, campaign.as_str()),
        (false, ChangedVia::OneClick, CAMPAIGN)
    );
    assert_eq!(choices(&stage, "ada"), [("digest".to_owned(), false)]);
    // Still subscribed to everything else; the send record notes the unsubscribe.
    assert_eq!(stage.subscribers.get("ada"), Some((true, None)));
    let (_, noted) = stage.records.get("ada", CAMPAIGN).unwrap();
    assert_eq!(noted, [Engagement::Unsubscribed]);
    // A second one-click finds it done.
    let again = stage
        .handle(&post(&token("ada", "digest"), "List-Unsubscribe=One-Click"))
        .await;
    assert_eq!(again.status, 200);
}

#[tokio::test]
async fn a_multipart_one_click_as_rfc_8058_writes_it_leaves_the_topic() {
    // RFC 8058: the POST SHOULD be multipart/form-data. Its own example body, as a receiver
    // sends it (with a trailing line break).
    let stage = stage();
    let mut request = post(
        &token("ada", "digest"),
        "---FormBoundaryjWmhtjORrn\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n---FormBoundaryjWmhtjORrn--\r\n",
    );
    request.content_type = "multipart/form-data; boundary=---FormBoundaryjWmhtjORrn".into();
    let page = stage.handle(&request).await;
    assert_eq!(page.status, 200, "{}", page.text());
    let (on, via, _) = stage.subscribers.topic("ada", "digest").unwrap();
    assert_eq!((on, via), (false, ChangedVia::OneClick));
    // Url-encoded with a trailing line break and a charset: the same.
    let mut again = post(&token("bob", "digest"), "List-Unsubscribe=One-Click\r\n");
    again.content_type = "application/x-www-form-urlencoded; charset=UTF-8".into();
    assert_eq!(stage.handle(&again).await.status, 200);
    assert!(!stage.subscribers.topic("bob", "digest").unwrap().0);
}

#[tokio::test]
async fn a_one_click_without_a_body_or_repeated_or_in_lower_case_still_leaves_the_topic() {
    for body in [
        "",
        "\r\n",
        "list-unsubscribe=one-click",
        "List-Unsubscribe=One-Click&List-Unsubscribe=One-Click",
    ] {
        let stage = stage();
        let page = stage.handle(&post(&token("ada", "digest"), body)).await;
        assert_eq!(page.status, 200, "{body:?}: {}", page.text());
        assert!(
            !stage.subscribers.topic("ada", "digest").unwrap().0,
            "{body:?}"
        );
    }
}

#[tokio::test]
async fn a_form_too_large_is_refused_before_it_is_read() {
    let stage = stage();
    let body = format!("List-Unsubscribe=One-Click&{}", "a&".repeat(5_000));
    let page = stage.handle(&post(&token("ada", "digest"), &body)).await;
    assert_eq!(page.status, 413);
    assert!(stage.subscribers.topic("ada", "digest").is_none());
}

#[tokio::test]
async fn saving_writes_the_ticks_and_says_what_changed() {
    let stage = stage();
    let t = token("ada", "digest");
    let saved = stage
        .handle(&post(&t, "action=save&topic=product-news&topic=tips"))
        .await;
    assert_eq!(saved.status, 200);
    let html = saved.text();
    assert!(
        html.contains("You will now receive: Tips and tutorials"),
        "{html}"
    );
    assert!(html.contains("You will no longer receive: Weekly digest of your new followers"));
    assert_eq!(
        choices(&stage, "ada"),
        [("digest".to_owned(), false), ("tips".to_owned(), true)]
    );
    // The same again: nothing changed, and the page says so.
    let same = stage
        .handle(&post(&t, "action=save&topic=product-news&topic=tips"))
        .await;
    assert!(same.text().contains("Nothing changed."));
}

#[tokio::test]
async fn unsubscribe_from_all_then_come_back_with_one_topic() {
    let stage = stage();
    let t = token("ada", "product-news");
    let all = stage.handle(&post(&t, "action=unsubscribe-all")).await;
    assert!(all.text().contains("You are unsubscribed from all emails"));
    assert_eq!(stage.subscribers.get("ada"), Some((false, None)));
    // The centre shows everything unticked, and says why.
    let html = stage.handle(&get(&t)).await.text();
    assert!(!html.contains(" checked"), "{html}");
    assert!(html.contains("You currently receive no emails from us."));
    // Ticking one and saving comes back with only it.
    let back = stage.handle(&post(&t, "action=save&topic=tips")).await;
    assert!(back.text().contains("Welcome back."));
    assert!(back
        .text()
        .contains("You will now receive: Tips and tutorials"));
    assert_eq!(stage.subscribers.get("ada"), Some((true, None)));
    assert_eq!(
        choices(&stage, "ada"),
        [
            ("digest".to_owned(), false),
            ("product-news".to_owned(), false),
            ("tips".to_owned(), true)
        ]
    );
}

#[tokio::test]
async fn every_refusal_answers_once_and_changes_nothing() {
    let stage = stage();
    let t = token("ada", "digest");
    let mut tampered = t.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let other_key = Signer::new(&"f".repeat(40), "weekly-digest")
        .unwrap()
        .token(
            &CampaignId::parse(CAMPAIGN).unwrap(),
            &TopicId::parse("digest").unwrap(),
            "ada",
        );
    let cases: Vec<(&str, HttpRequest, u16, &str)> = vec![
        (
            "no token",
            request("GET", "", ""),
            400,
            "This link does not work",
        ),
        ("tampered", get(&tampered), 403, "This link does not work"),
        (
            "another key (rotated out)",
            get(&other_key),
            403,
            "not valid or has expired",
        ),
        (
            "tampered POST",
            post(&tampered, "List-Unsubscribe=One-Click"),
            403,
            "This link does not work",
        ),
        (
            "a field that is not a topic",
            post(&t, "action=save&topic=digest&user=bob"),
            400,
            "field &quot;user&quot;",
        ),
        (
            "an unknown topic",
            post(&t, "action=save&topic=newsletter"),
            400,
            "topic &quot;newsletter&quot;",
        ),
        (
            "a topic with unsubscribe-all",
            post(&t, "action=unsubscribe-all&topic=tips"),
            400,
            "Nothing was changed",
        ),
        (
            "an unknown action",
            post(&t, "action=delete"),
            400,
            "action &quot;delete&quot;",
        ),
        ("no action", post(&t, "topic=tips"), 400, "no action"),
        (
            "one-click with more",
            post(&t, "List-Unsubscribe=One-Click&topic=tips"),
            400,
            "field &quot;List-Unsubscribe&quot;",
        ),
        (
            "a deleted user",
            get(&token("gone", "digest")),
            404,
            "We could not find your subscription",
        ),
        (
            "a deleted user's one-click",
            post(&token("gone", "digest"), "List-Unsubscribe=One-Click"),
            404,
            "We could not find",
        ),
        (
            "a deleted user's save",
            post(&token("gone", "digest"), "action=save"),
            404,
            "We could not find",
        ),
        (
            "PUT",
            request("PUT", &format!("token={t}"), ""),
            405,
            "Not allowed",
        ),
    ];
    for (case, request, status, says) in cases {
        let page = stage.handle(&request).await;
        assert_eq!(page.status, status, "{case}");
        assert!(page.text().contains(says), "{case}: {}", page.text());
        assert_eq!(page.header("cache-control"), Some("no-store"), "{case}");
    }
    assert_eq!(choices(&stage, "ada"), [], "nothing changed");
    assert_eq!(choices(&stage, "bob"), []);
    assert_eq!(stage.subscribers.get("ada"), Some((true, None)));
    assert_eq!(stage.records.get("ada", CAMPAIGN).unwrap().1, []);
}

/// The calls every port has had so far (each a MongoDB or DynamoDB round trip on AWS).
fn store_calls(stage: &Stage) -> u64 {
    use std::sync::atomic::Ordering::SeqCst;
    stage.subscribers.calls.load(SeqCst) + stage.records.calls.load(SeqCst)
}

/// Junk on a public URL: whatever can never succeed is answered from memory, before any
/// store is asked (the signing keys are the stage's since its cold start: no secret either).
/// A method the page never uses and an oversized form are refused before the token is read.
#[tokio::test]
async fn junk_is_answered_from_memory() {
    let stage = stage();
    let t = token("ada", "digest");
    let mut tampered = t.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let another_list = Signer::new(KEY, "other-list").unwrap().token(
        &CampaignId::parse(CAMPAIGN).unwrap(),
        &TopicId::parse("digest").unwrap(),
        "ada",
    );
    let huge = "x".repeat(MAX_FORM_BYTES + 1);
    let junk: Vec<(&str, HttpRequest, u16)> = vec![
        ("GET without a token", request("GET", "", ""), 400),
        (
            "POST without a token",
            request("POST", "", "List-Unsubscribe=One-Click"),
            400,
        ),
        ("an empty token", get(""), 400),
        ("not a token", get("nonsense"), 400),
        ("a token too long", get(&"a.".repeat(2_000)), 400),
        ("tampered GET", get(&tampered), 403),
        (
            "tampered one-click",
            post(&tampered, "List-Unsubscribe=One-Click"),
            403,
        ),
        (
            "another list's token",
            post(&another_list, "List-Unsubscribe=One-Click"),
            403,
        ),
        (
            "a scanner's path",
            request("GET", "path=/wp-login.php", ""),
            400,
        ),
        ("PUT without a token", request("PUT", "", ""), 405),
        (
            "DELETE with a good token",
            request("DELETE", &format!("token={t}"), ""),
            405,
        ),
        ("OPTIONS", request("OPTIONS", "", ""), 405),
        ("a huge form, no token", request("POST", "", &huge), 413),
        ("a huge form, a good token", post(&t, &huge), 413),
    ];
    for (case, request, status) in junk {
        let page = stage.handle(&request).await;
        assert_eq!(page.status, status, "{case}");
        assert_eq!(store_calls(&stage), 0, "{case}: a store was asked");
    }
    let allow = stage.handle(&request("PATCH", "", "")).await;
    assert_eq!(allow.header("allow"), Some("GET, POST"));
    // Not even a Function URL request.
    let answer = stage
        .handle_function_url(&serde_json::json!({"rawPath": "/"}))
        .await;
    assert_eq!(answer["statusCode"], 400);
    assert_eq!(store_calls(&stage), 0);
    // A real one-click is one write and the send record's note.
    let page = stage.handle(&post(&t, "List-Unsubscribe=One-Click")).await;
    assert_eq!(page.status, 200);
    assert_eq!(store_calls(&stage), 2);
}

#[tokio::test]
async fn a_token_changes_only_its_own_user() {
    let stage = stage();
    // ada's token, whatever the form says, changes ada.
    stage
        .handle(&post(&token("ada", "digest"), "action=save&topic=tips"))
        .await;
    assert_eq!(choices(&stage, "bob"), []);
    assert!(!choices(&stage, "ada").is_empty());
}

#[tokio::test]
async fn the_page_speaks_the_readers_language() {
    let stage = stage();
    let mut request = get("nonsense");
    request.accept_language = "de-DE,de;q=0.9".into();
    let page = stage.handle(&request).await;
    assert!(page.text().contains("Dieser Link funktioniert nicht"));
    assert!(page.text().starts_with("<!doctype html><html lang=\"de\">"));
}

#[test]
fn forms_are_understood_whole() {
    let topics = Topics::builtin();
    let form = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        understand(&form(&[("List-Unsubscribe", "One-Click")]), topics),
        Ok(Request::OneClick)
    );
    assert_eq!(
        understand(&form(&[("action", "save")]), topics),
        Ok(Request::Save(BTreeSet::new()))
    );
    assert!(understand(&form(&[("action", "save"), ("action", "leave")]), topics).is_err());
    assert!(understand(&form(&[("List-Unsubscribe", "Two-Clicks")]), topics).is_err());
}

/// A MongoDB that accepts connections and never answers (the driver would wait 30 s to
/// select it; the function's timeout is 10 s).
async fn hung_mongodb() -> mongodb::Database {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    mongodb::Client::with_uri_str(format!("mongodb://127.0.0.1:{port}/"))
        .await
        .unwrap()
        .database("app")
}

type HungStage = Unsubscribe<crate::adapters::subscribers::Subscribers, MemoryRecords>;

async fn hung_stage() -> HungStage {
    Unsubscribe::new(
        Signer::new(KEY, "weekly-digest").unwrap(),
        crate::adapters::subscribers::Subscribers::new(&hung_mongodb().await),
        MemoryRecords::with("ada", CAMPAIGN, SendStatus::Sent),
    )
}

/// On tokio's paused clock the time a request took is the time it waited on timers, the
/// same on any machine.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = tokio::time::Instant::now();
    let out = f.await;
    (out, started.elapsed())
}

/// The function's timeout in template.yaml: past it Lambda answers 502, and a mail client
/// never retries a one-click.
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test(start_paused = true)]
async fn a_one_click_while_mongodb_hangs_is_recorded_and_answered_within_the_timeout() {
    let stage = hung_stage().await;
    let (page, took) =
        timed(stage.handle(&post(&token("ada", "digest"), "List-Unsubscribe=One-Click"))).await;
    assert_eq!(page.status, 202, "{}", page.text());
    assert!(page
        .text()
        .contains("You are unsubscribed from “Weekly digest of your new followers”"));
    assert!(took < FUNCTION_TIMEOUT, "the one-click took {took:?}");
    // Kept where CreateEmails reads it, and counted in the analytics.
    let topic = TopicId::parse("digest").unwrap();
    let standing = stage
        .records
        .standing_leaves(&["ada".into(), "bob".into()], &topic)
        .await
        .unwrap();
    assert_eq!(standing, ["ada".to_owned()].into());
    let (_, noted) = stage.records.get("ada", CAMPAIGN).unwrap();
    assert_eq!(noted, [Engagement::Unsubscribed]);
}

#[tokio::test(start_paused = true)]
async fn a_one_click_with_mongodb_hung_and_dynamodb_down_is_a_503_in_time() {
    let stage = hung_stage().await;
    stage
        .records
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (page, took) =
        timed(stage.handle(&post(&token("ada", "digest"), "List-Unsubscribe=One-Click"))).await;
    assert_eq!(page.status, 503);
    assert!(took < FUNCTION_TIMEOUT, "the one-click took {took:?}");
}

#[tokio::test(start_paused = true)]
async fn the_page_with_mongodb_hung_answers_503_within_the_timeout() {
    let stage = hung_stage().await;
    let (page, took) = timed(stage.handle(&get(&token("ada", "digest")))).await;
    assert_eq!(page.status, 503);
    assert!(took < FUNCTION_TIMEOUT, "the page took {took:?}");
    let (page, took) = timed(stage.handle(&post(&token("ada", "digest"), "action=leave"))).await;
    assert_eq!(page.status, 503);
    assert!(took < FUNCTION_TIMEOUT, "the leave took {took:?}");
    // A person at the page sees the 503 and can try again: nothing is recorded for them.
    assert!(crate::runtime::lock(&stage.records.leaves).is_empty());
}

#[tokio::test]
async fn choosing_the_topic_again_lifts_a_pending_one_click() {
    let stage = stage();
    let digest = TopicId::parse("digest").unwrap();
    let users = ["ada".to_owned()];
    // A one-click MongoDB did not take, then one it did (the page now shows it off).
    let key = SendKey::new("ada", CampaignId::parse(CAMPAIGN).unwrap());
    stage.records.record_leave(&key, &digest, 1).await.unwrap();
    let page = stage
        .handle(&post(&token("ada", "digest"), "List-Unsubscribe=One-Click"))
        .await;
    assert_eq!(page.status, 200);
    assert_eq!(
        stage
            .records
            .standing_leaves(&users, &digest)
            .await
            .unwrap(),
        ["ada".to_owned()].into()
    );
    // Saving another topic leaves it standing; ticking it again lifts it.
    let saved = stage
        .handle(&post(
            &token("ada", "digest"),
            "action=save&topic=product-news&topic=tips",
        ))
        .await;
    assert_eq!(saved.status, 200);
    assert_eq!(
        stage
            .records
            .standing_leaves(&users, &digest)
            .await
            .unwrap()
            .len(),
        1
    );
    let saved = stage
        .handle(&post(
            &token("ada", "digest"),
            "action=save&topic=digest&topic=product-news&topic=tips",
        ))
        .await;
    assert_eq!(saved.status, 200);
    assert!(stage
        .records
        .standing_leaves(&users, &digest)
        .await
        .unwrap()
        .is_empty());
}

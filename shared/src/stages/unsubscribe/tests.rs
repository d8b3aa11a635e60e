//! The preference centre over in-memory ports: what each request changes, and every refusal
//! (which changes nothing).

use super::*;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendStatus;
use crate::ports::memory::subscribers::MemorySubscribers;
use crate::ports::memory::MemoryRecords;

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

//! Every parser of external input (queue bodies, GetUsers events, SES events, unsubscribe
//! tokens, Function URL requests, SES tag values, configuration), fed arbitrary and
//! near-valid input: none panics, and each either accepts input that is valid or returns an
//! error that says what is wrong; no altered token is ever accepted.
//! Through the handlers a rejected record fails alone: tests/pipeline.rs.

use mailflow::config::{
    CreateEmailsConfig, GetUsersConfig, MongoConfig, SendEmailConfig, SesEventsConfig,
    UnsubscribeConfig, UnsubscribeFunctionConfig,
};
use mailflow::domain::campaign::{CampaignId, Window};
use mailflow::domain::messages::{parse_body, EmailJob, UserMessage};
use mailflow::domain::unsubscribe_link::{Signer, TokenError};
use mailflow::runtime::function_url::HttpRequest;
use mailflow::stages::get_users::parse_request;
use proptest::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// Field names and values the parsers look for, mixed with arbitrary ones, so that generated
/// input gets past the first check often enough to reach the deeper ones.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("campaignId".to_owned()),
        Just("userId".to_owned()),
        Just("since".to_owned()),
        Just("until".to_owned()),
        Just("includeFailed".to_owned()),
        Just("to".to_owned()),
        Just("subject".to_owned()),
        Just("html".to_owned()),
        Just("text".to_owned()),
        Just("Records".to_owned()),
        Just("messageId".to_owned()),
        Just("body".to_owned()),
        Just("detail-type".to_owned()),
        Just("time".to_owned()),
        Just("detail".to_owned()),
        Just("eventType".to_owned()),
        Just("mail".to_owned()),
        Just("tags".to_owned()),
        Just("bounce".to_owned()),
        Just("bounceType".to_owned()),
        Just("requestContext".to_owned()),
        Just("http".to_owned()),
        Just("method".to_owned()),
        Just("rawQueryString".to_owned()),
        Just("isBase64Encoded".to_owned()),
        "[a-zA-Z-]{1,10}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("weekly-2026-W47".to_owned()),
        Just("weekly-1999-W99".to_owned()),
        Just("2026-11-16T00:00:00Z".to_owned()),
        Just("2026-11-23T00:00:00Z".to_owned()),
        Just("Scheduled Event".to_owned()),
        Just("Bounce".to_owned()),
        Just("Permanent".to_owned()),
        Just("Delivery".to_owned()),
        Just("POST".to_owned()),
        Just("token=".to_owned()),
        Just("<script>{{ x }}</script>".to_owned()),
        Just("{\"campaignId\":".to_owned()),
        any::<String>(),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A body: arbitrary bytes read lossily, arbitrary JSON, or a valid message cut short.
fn body() -> impl Strategy<Value = String> {
    let valid = r#"{"campaignId":"weekly-2026-W47","userId":"u1","since":"2026-11-16T00:00:00Z","until":"2026-11-23T00:00:00Z"}"#;
    prop_oneof![
        any::<Vec<u8>>().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        json().prop_map(|v| v.to_string()),
        (0..valid.len()).prop_map(move |n| valid[..n].to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn queue_bodies_never_panic(body in body()) {
        if let Err(reason) = parse_body::<UserMessage>(Some(&body)) {
            prop_assert!(reason.to_string().contains("not a valid message"), "{reason}");
        }
        if let Err(reason) = parse_body::<EmailJob>(Some(&body)) {
            prop_assert!(reason.to_string().contains("not a valid message"), "{reason}");
        }
    }

    #[test]
    fn accepted_user_messages_are_consistent(body in json().prop_map(|v| v.to_string())) {
        if let Ok(message) = parse_body::<UserMessage>(Some(&body)) {
            prop_assert!(CampaignId::parse(message.campaign_id.as_str()).is_ok());
            prop_assert!(message.window.since < message.window.until);
        }
    }

    #[test]
    fn get_users_events_never_panic(event in json()) {
        // Scheduled, manual and continuation events, and anything else: a request or an error.
        let local = mailflow::config::LocalTimeConfig::from_source(&|_: &str| None).unwrap();
        let _ = parse_request(event, &local, 1_795_824_000_000);
    }

    #[test]
    fn campaign_ids_never_panic(raw in any::<String>()) {
        match CampaignId::parse(&raw) {
            Ok(id) => prop_assert_eq!(id.as_str(), raw.as_str()),
            Err(e) => prop_assert!(e.to_string().contains("invalid")),
        }
    }

    #[test]
    fn configuration_never_panics_and_names_the_variable(
        values in prop::collection::btree_map(
            prop::sample::select(all_vars()),
            prop_oneof![any::<String>(), "[0-9]{1,12}", "-?[0-9]{1,4}(\\.[0-9]{1,3})?", "[0-9,]{0,20}"],
            0..24,
        )
    ) {
        let source = |name: &str| values.get(name).cloned();
        let named = |var: &str| all_vars().contains(&var);
        if let Err(e) = MongoConfig::from_source(&source) { prop_assert!(named(e.var), "{e}"); }
        if let Err(e) = GetUsersConfig::from_source(&source) { prop_assert!(named(e.var), "{e}"); }
        if let Err(e) = CreateEmailsConfig::from_source(&source) { prop_assert!(named(e.var), "{e}"); }
        if let Err(e) = SendEmailConfig::from_source(&source) { prop_assert!(named(e.var), "{e}"); }
        if let Err(e) = UnsubscribeFunctionConfig::from_source(&source) { prop_assert!(named(e.var), "{e}"); }
        if let Err(e) = SesEventsConfig::from_source(&source) { prop_assert!(named(e.var), "{e}"); }
    }

    #[test]
    fn ses_events_never_panic(body in prop_oneof![body(), json().prop_map(|v| v.to_string()), ses_event()]) {
        match mailflow::domain::ses_event::parse(&body, 0) {
            Ok(event) => prop_assert!(!event.ses_message_id.is_empty()),
            Err(reason) => prop_assert!(!reason.to_string().is_empty()),
        }
    }

    #[test]
    fn unsubscribe_tokens_are_never_accepted_unless_signed(
        token in prop_oneof![
            any::<String>(),
            "[A-Za-z0-9_-]{0,80}\\.[A-Za-z0-9_-]{0,60}",
            valid_token().prop_flat_map(|t| (Just(t.clone()), 0..t.len(), any::<char>()))
                .prop_map(|(t, at, c)| {
                    let mut chars: Vec<char> = t.chars().collect();
                    chars[at] = c;
                    chars.into_iter().collect()
                }),
        ]
    ) {
        match signer().verify(&token) {
            // Only an unaltered token passes (a change that decodes to the same bytes is
            // the same token).
            Ok(s) => prop_assert_eq!(signer().token(&s.campaign_id, &s.topic, &s.user_id), canonical(&token)),
            Err(e) => prop_assert!(matches!(e, TokenError::Malformed(_) | TokenError::BadSignature | TokenError::OtherList)),
        }
    }

    #[test]
    fn function_url_requests_never_panic(event in json()) {
        if let Ok(request) = HttpRequest::from_function_url_event(&event) {
            prop_assert_eq!(request.method.to_ascii_uppercase(), request.method);
        }
    }

    #[test]
    fn ses_tag_values_round_trip(raw in any::<String>(), junk in any::<String>()) {
        if let Some(tag) = mailflow::domain::ses_tags::encode(&raw) {
            prop_assert!(tag.len() <= mailflow::domain::ses_tags::MAX_TAG_VALUE);
            prop_assert_eq!(mailflow::domain::ses_tags::decode(&tag), Some(raw));
        }
        let _ = mailflow::domain::ses_tags::decode(&junk);
    }

    #[test]
    fn windows_are_never_empty(a in any::<i64>(), b in any::<i64>()) {
        let at = |s: i64| time::OffsetDateTime::from_unix_timestamp(s.rem_euclid(4_000_000_000));
        let (Ok(since), Ok(until)) = (at(a), at(b)) else { return Ok(()) };
        match Window::new(since, until) {
            Ok(w) => prop_assert!(w.since < w.until),
            Err(e) => prop_assert!(since >= until && e.to_string().contains("empty")),
        }
    }
}

fn all_vars() -> Vec<&'static str> {
    [
        MongoConfig::VARS,
        MongoConfig::ALTERNATIVE_VARS,
        GetUsersConfig::VARS,
        CreateEmailsConfig::VARS,
        SendEmailConfig::VARS,
        UnsubscribeConfig::VARS,
        UnsubscribeConfig::ALTERNATIVE_VARS,
        UnsubscribeFunctionConfig::VARS,
        SesEventsConfig::VARS,
    ]
    .concat()
}

fn signer() -> Signer {
    Signer::new("0123456789abcdef0123456789abcdef", "weekly-digest").unwrap()
}

/// A token this signer made, for an arbitrary user of an arbitrary campaign and topic.
fn valid_token() -> impl Strategy<Value = String> {
    (
        "[A-Za-z0-9._-]{1,20}",
        "[a-z0-9-]{1,20}",
        "[^\\p{Cc}]{1,40}",
    )
        .prop_map(|(campaign, topic, user)| {
            signer().token(
                &CampaignId::parse(&campaign).unwrap(),
                &mailflow::domain::topics::TopicId::parse(&topic).unwrap(),
                &user,
            )
        })
}

/// The token as the signer writes it, if `token` decodes to the same bytes.
fn canonical(token: &str) -> String {
    use base64::Engine;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let Some((p, s)) = token.split_once('.') else {
        return String::new();
    };
    match (engine.decode(p), engine.decode(s)) {
        (Ok(p), Ok(s)) => format!("{}.{}", engine.encode(p), engine.encode(s)),
        _ => String::new(),
    }
}

/// An SES event shaped as EventBridge delivers it, with arbitrary values in its fields.
fn ses_event() -> impl Strategy<Value = String> {
    (
        text(),
        text(),
        prop::option::of(text()),
        prop::option::of(text()),
        json(),
    )
        .prop_map(|(kind, message_id, campaign, user, extra)| {
            let mut tags = serde_json::Map::new();
            if let Some(c) = campaign {
                tags.insert("campaignId".into(), Value::from(vec![c]));
            }
            if let Some(u) = user {
                tags.insert("userId".into(), Value::from(vec![u]));
            }
            serde_json::json!({
                "source": "aws.ses",
                "detail": {"eventType": kind, "mail": {"messageId": message_id, "tags": tags},
                           "bounce": extra},
            })
            .to_string()
        })
}

/// Named malformed bodies, each with its documented outcome.
#[test]
fn named_bad_bodies_are_rejected_with_a_reason() {
    let valid: BTreeMap<&str, Value> = BTreeMap::from([
        ("campaignId", "weekly-2026-W47".into()),
        ("userId", "u1".into()),
        ("since", "2026-11-16T00:00:00Z".into()),
        ("until", "2026-11-23T00:00:00Z".into()),
    ]);
    let with = |change: &dyn Fn(&mut BTreeMap<&str, Value>)| {
        let mut m = valid.clone();
        change(&mut m);
        serde_json::to_string(&m).unwrap()
    };
    let megabyte = format!(
        r#"{{"campaignId":"weekly-2026-W47","userId":"{}","since":"2026-11-16T00:00:00Z","until":"2026-11-23T00:00:00Z"}}"#,
        "u".repeat(1 << 20)
    );
    let cases: Vec<(&str, String, &str)> = vec![
        ("malformed JSON", "{\"campaignId\":".into(), "EOF"),
        ("not an object", "[1,2]".into(), "invalid type"),
        (
            "missing userId",
            with(&|m| {
                m.remove("userId");
            }),
            "missing field `userId`",
        ),
        (
            "wrong type",
            with(&|m| {
                m.insert("userId", 7.into());
            }),
            "invalid type",
        ),
        (
            "unknown campaign id syntax",
            with(&|m| {
                m.insert("campaignId", "drop table".into());
            }),
            "campaign id",
        ),
        (
            "empty window",
            with(&|m| {
                m.insert("until", "2026-11-16T00:00:00Z".into());
            }),
            "window is empty",
        ),
        (
            "bad timestamp",
            with(&|m| {
                m.insert("since", "last monday".into());
            }),
            "could not be parsed",
        ),
        ("empty body", String::new(), "EOF"),
        ("1 MiB userId", megabyte, "userId must be 1 to 512 bytes"),
    ];
    for (name, body, expected) in cases {
        let err = parse_body::<UserMessage>(Some(&body)).expect_err(name);
        assert!(err.to_string().contains(expected), "{name}: {err}");
    }
    // Extra fields are tolerated in users-queue messages (older or newer senders).
    assert!(parse_body::<UserMessage>(Some(&with(&|m| {
        m.insert("extra", true.into());
    })))
    .is_ok());
    // Emails-queue messages are ours alone: an unknown field means a mismatched sender.
    let email = r#"{"campaignId":"c","userId":"u","to":"a@b.c","subject":"s","html":"h","text":"t","bcc":"x"}"#;
    assert!(parse_body::<EmailJob>(Some(email))
        .unwrap_err()
        .to_string()
        .contains("unknown field `bcc`"));
    assert!(parse_body::<UserMessage>(None)
        .unwrap_err()
        .to_string()
        .contains("no body"));
}

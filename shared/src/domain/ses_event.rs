//! SES events as EventBridge delivers them (to the SesEvents queue): what happened to which
//! email of which user and campaign. Parsed leniently (only the fields used are read), and
//! every problem is a reason naming the field, so a bad record fails alone.
//!
//! ```json
//! {"source": "aws.ses", "detail-type": "Email Bounced", "time": "...",
//!  "detail": {"eventType": "Bounce", "bounce": {"bounceType": "Permanent", ...},
//!             "mail": {"messageId": "...", "timestamp": "...",
//!                      "tags": {"campaignId": ["..."], "userId": ["..."]}}}}
//! ```
//! The record SES publishes through SNS (no EventBridge envelope) is read the same way.

use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::Visitor;
use crate::domain::ses_tags;
use serde_json::Value;

/// What happened to the email.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    Delivery,
    Bounce {
        /// Permanent: the address is dead. Transient or undetermined: it may work later.
        permanent: bool,
        /// `bounceType/bounceSubType`, e.g. `Permanent/General`.
        detail: String,
    },
    Complaint {
        /// The feedback type the mailbox provider reported, if any (e.g. `abuse`).
        detail: String,
    },
    Open,
    Click,
    /// SES accepted the call, then found a virus and delivered nothing.
    Reject,
    /// Send (not published: delivery, bounce, complaint or reject follows every accepted
    /// email), DeliveryDelay, Rendering Failure, Subscription, or a type SES adds later:
    /// nothing for mailflow to do.
    Other(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SesEvent {
    pub kind: EventKind,
    pub ses_message_id: String,
    /// Whose email it is about: the send record the tags SendEmail put on it name; None when
    /// the email carries no mailflow tags (sent by something else).
    pub key: Option<SendKey>,
    /// When it happened (epoch ms): the event's own timestamp, else the email's.
    pub at_ms: u64,
    /// An open or a click a person made, as far as it can be told (`by_person`).
    pub by_person: bool,
}

/// A click this soon after the email was sent is a scanner at delivery (OpenContent's
/// default grace, `CLICK_GRACE_SECONDS`).
pub const CLICK_GRACE_MS: u64 = 10_000;

/// The rules OpenContent applies to its own links (`open_content::visitor`), on SES's
/// open and click events: a person's user agent (not a scanner's, an image proxy's or
/// Apple's prefetch); for a click, not within `CLICK_GRACE_MS` of the send and not on the
/// preference centre's links.
fn by_person(kind: &EventKind, section: Option<&Value>, at_ms: u64, sent_ms: Option<u64>) -> bool {
    let Some(section) = section else { return false };
    if !Visitor::is_person(text(section, &["userAgent"]).unwrap_or("")) {
        return false;
    }
    match kind {
        EventKind::Open => true,
        EventKind::Click => {
            let link = text(section, &["link"]).unwrap_or("");
            let settled = sent_ms.is_some_and(|sent| at_ms >= sent + CLICK_GRACE_MS);
            settled
                && !link.is_empty()
                && !crate::domain::unsubscribe_link::is_preference_link(link)
        }
        _ => false,
    }
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, key| v.get(key))?.as_str()
}

fn epoch_ms(rfc3339: &str) -> Option<u64> {
    let t = time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .ok()?;
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// The first value of a tag as it stands (tags are lists of strings in SES events).
fn raw_tag<'a>(mail: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    let Some(values) = mail.get("tags").and_then(|t| t.get(name)) else {
        return Ok(None);
    };
    values
        .as_array()
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .map(Some)
        .ok_or_else(|| format!("mail.tags.{name} is not a list of strings"))
}

fn decoded(name: &str, raw: &str) -> Result<String, String> {
    ses_tags::decode(raw).ok_or_else(|| format!("mail.tags.{name} is not a mailflow tag value"))
}

/// The first value of a tag, decoded.
fn tag(mail: &Value, name: &str) -> Result<Option<String>, String> {
    raw_tag(mail, name)?
        .map(|raw| decoded(name, raw))
        .transpose()
}

/// The user id the `userId`, `userId2`... tags carry together (`ses_tags::user_tags`).
fn user_tag(mail: &Value) -> Result<Option<String>, String> {
    let mut joined = String::new();
    for n in 0.. {
        match raw_tag(mail, &ses_tags::user_tag_name(n))? {
            Some(part) => joined.push_str(part),
            None if n == 0 => return Ok(None),
            None => break,
        }
    }
    decoded(ses_tags::USER_TAG, &joined).map(Some)
}

/// Why a queue message is not an SES event we can read: one line naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadEvent(String);

/// Parses one queue message body. `now_ms` is used when the event carries no usable time.
pub fn parse(body: &str, now_ms: u64) -> Result<SesEvent, BadEvent> {
    parse_fields(body, now_ms).map_err(BadEvent)
}

fn parse_fields(body: &str, now_ms: u64) -> Result<SesEvent, String> {
    let envelope: Value =
        serde_json::from_str(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let detail = envelope.get("detail").unwrap_or(&envelope);
    let event_type = text(detail, &["eventType"])
        .or_else(|| text(detail, &["notificationType"]))
        .ok_or("detail.eventType is missing")?;
    let mail = detail.get("mail").ok_or("detail.mail is missing")?;
    let ses_message_id = text(mail, &["messageId"])
        .filter(|id| !id.is_empty())
        .ok_or("detail.mail.messageId is missing")?
        .to_owned();
    let kind = match event_type {
        "Delivery" => EventKind::Delivery,
        "Bounce" => {
            let bounce_type = text(detail, &["bounce", "bounceType"])
                .ok_or("detail.bounce.bounceType is missing")?;
            let sub_type = text(detail, &["bounce", "bounceSubType"]).unwrap_or("");
            EventKind::Bounce {
                permanent: bounce_type == "Permanent",
                detail: format!("{bounce_type}/{sub_type}"),
            }
        }
        "Complaint" => EventKind::Complaint {
            detail: text(detail, &["complaint", "complaintFeedbackType"])
                .unwrap_or("unspecified")
                .to_owned(),
        },
        "Open" => EventKind::Open,
        "Click" => EventKind::Click,
        "Reject" => EventKind::Reject,
        other => EventKind::Other(other.to_owned()),
    };
    let section = match &kind {
        EventKind::Delivery => "delivery",
        EventKind::Bounce { .. } => "bounce",
        EventKind::Complaint { .. } => "complaint",
        EventKind::Open => "open",
        EventKind::Click => "click",
        EventKind::Reject => "reject",
        EventKind::Other(_) => "",
    };
    let at_ms = text(detail, &[section, "timestamp"])
        .or_else(|| text(mail, &["timestamp"]))
        .or_else(|| text(&envelope, &["time"]))
        .and_then(epoch_ms)
        .unwrap_or(now_ms);
    let key = match (tag(mail, ses_tags::CAMPAIGN_TAG)?, user_tag(mail)?) {
        (Some(campaign), Some(user)) => {
            let campaign_id =
                CampaignId::parse(&campaign).map_err(|e| format!("mail.tags.campaignId: {e}"))?;
            crate::domain::messages::check_user_id(&user)
                .map_err(|e| format!("mail.tags.userId: {e}"))?;
            Some(SendKey::new(user, campaign_id))
        }
        _ => None,
    };
    let sent_ms = text(mail, &["timestamp"]).and_then(epoch_ms);
    let by_person = by_person(&kind, detail.get(section), at_ms, sent_ms);
    Ok(SesEvent {
        kind,
        ses_message_id,
        key,
        at_ms,
        by_person,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(detail_type: &str, detail: Value) -> String {
        serde_json::json!({
            "version": "0", "source": "aws.ses", "detail-type": detail_type,
            "time": "2026-11-23T09:00:05Z", "detail": detail,
        })
        .to_string()
    }

    fn mail(user: &str) -> Value {
        serde_json::json!({
            "messageId": "0100-abc", "timestamp": "2026-11-23T09:00:00.000Z",
            "destination": ["ada@example.com"],
            "tags": {"campaignId": ["weekly-2026-W47"], "userId": [ses_tags::encode(user).unwrap()],
                     "ses:configuration-set": ["mailflow"]},
        })
    }

    #[test]
    fn a_long_user_id_comes_back_from_its_tags_in_order() {
        let user = format!("long {}", "é".repeat(200));
        let mut tags = serde_json::Map::new();
        tags.insert("campaignId".into(), json!(["weekly-2026-W47"]));
        for (name, value) in ses_tags::user_tags(&user) {
            tags.insert(name, json!([value]));
        }
        assert!(tags.len() > 2, "several user tags");
        let body = json!({
            "detail-type": "Email Delivered", "source": "aws.ses", "time": "2026-11-24T10:00:00Z",
            "detail": {"eventType": "Delivery", "delivery": {"timestamp": "2026-11-24T10:00:00Z"},
                       "mail": {"messageId": "m-1", "timestamp": "2026-11-24T09:59:00Z",
                                "tags": tags}},
        });
        let event = parse(&body.to_string(), 0).unwrap();
        assert_eq!(event.key.unwrap().user_id, user);
    }

    #[test]
    fn reads_bounces_complaints_and_deliveries() {
        let bounce = event(
            "Email Bounced",
            serde_json::json!({"eventType": "Bounce", "mail": mail("u.1"),
                "bounce": {"bounceType": "Permanent", "bounceSubType": "General",
                           "timestamp": "2026-11-23T09:01:00.000Z"}}),
        );
        let e = parse(&bounce, 0).unwrap();
        assert_eq!(
            e.kind,
            EventKind::Bounce {
                permanent: true,
                detail: "Permanent/General".into()
            }
        );
        let r = e.key.unwrap();
        assert_eq!(
            (r.user_id.as_str(), r.campaign_id.as_str()),
            ("u.1", "weekly-2026-W47")
        );
        assert_eq!(e.at_ms, epoch_ms("2026-11-23T09:01:00Z").unwrap());
        assert_eq!(e.ses_message_id, "0100-abc");

        let soft = bounce.replace("\"Permanent\"", "\"Transient\"");
        assert!(matches!(
            parse(&soft, 0).unwrap().kind,
            EventKind::Bounce {
                permanent: false,
                ..
            }
        ));
        let complaint = event(
            "Email Complaint Received",
            serde_json::json!({"eventType": "Complaint", "mail": mail("u1"),
                "complaint": {"complaintFeedbackType": "abuse"}}),
        );
        assert_eq!(
            parse(&complaint, 0).unwrap().kind,
            EventKind::Complaint {
                detail: "abuse".into()
            }
        );
        // No time of its own: the email's.
        let delivery = event(
            "Email Delivered",
            serde_json::json!({"eventType": "Delivery", "mail": mail("u1"), "delivery": {}}),
        );
        let e = parse(&delivery, 0).unwrap();
        assert_eq!(e.kind, EventKind::Delivery);
        assert_eq!(e.at_ms, epoch_ms("2026-11-23T09:00:00Z").unwrap());
        // The SNS form, without the EventBridge envelope.
        let sns =
            serde_json::json!({"eventType": "Send", "mail": mail("u1"), "send": {}}).to_string();
        assert_eq!(
            parse(&sns, 0).unwrap().kind,
            EventKind::Other("Send".into())
        );
        let reject = serde_json::json!({"eventType": "Reject", "mail": mail("u1"),
            "reject": {"reason": "Bad content"}});
        assert_eq!(
            parse(&reject.to_string(), 0).unwrap().kind,
            EventKind::Reject
        );
    }

    #[test]
    fn untagged_and_unknown_events_are_read_but_marked() {
        let mut m = mail("u1");
        m["tags"] = serde_json::json!({"ses:configuration-set": ["other"]});
        let e = parse(
            &event(
                "Email Sent",
                serde_json::json!({"eventType": "Send", "mail": m}),
            ),
            0,
        )
        .unwrap();
        assert_eq!(e.key, None);
        let e = parse(
            &event(
                "Email Delivery Delayed",
                serde_json::json!({"eventType": "DeliveryDelay", "mail": mail("u1")}),
            ),
            7,
        )
        .unwrap();
        assert_eq!(e.kind, EventKind::Other("DeliveryDelay".into()));
    }

    #[test]
    fn bad_events_name_the_problem() {
        let cases = [
            ("not json", "not JSON"),
            (r#"{"detail": {}}"#, "eventType"),
            (r#"{"detail": {"eventType": "Send"}}"#, "mail is missing"),
            (
                r#"{"detail": {"eventType": "Send", "mail": {}}}"#,
                "messageId",
            ),
            (
                r#"{"detail": {"eventType": "Bounce", "mail": {"messageId": "m"}}}"#,
                "bounceType",
            ),
            (
                r#"{"detail": {"eventType": "Send", "mail": {"messageId": "m", "tags": {"campaignId": ["a b"], "userId": ["u"]}}}}"#,
                "campaignId",
            ),
            (
                r#"{"detail": {"eventType": "Send", "mail": {"messageId": "m", "tags": {"campaignId": "c", "userId": ["u"]}}}}"#,
                "list of strings",
            ),
        ];
        for (body, expected) in cases {
            let err = parse(body, 0).unwrap_err();
            assert!(err.to_string().contains(expected), "{body}: {err}");
        }
    }

    #[test]
    fn a_person_is_told_from_scanners_prefetches_and_the_preference_links() {
        const CHROME: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36";
        let click = |agent: &str, at: &str, link: &str| {
            let detail = json!({"eventType": "Click", "mail": mail("u1"),
                "click": {"userAgent": agent, "timestamp": at, "link": link, "ipAddress": "192.0.2.1"}});
            parse(&event("Email Clicked", detail), 0).unwrap().by_person
        };
        // The email was sent at 09:00:00.
        let later = "2026-11-23T09:05:00Z";
        assert!(click(CHROME, later, "https://o.example/go?t=abc"));
        assert!(
            !click(
                "Mozilla/5.0 (compatible; Barracuda)",
                later,
                "https://o.example/go?t=abc"
            ),
            "a scanner"
        );
        assert!(
            !click(CHROME, "2026-11-23T09:00:04Z", "https://o.example/go?t=abc"),
            "at delivery"
        );
        assert!(
            !click(CHROME, later, "https://u.example/?token=x&leave=1"),
            "the preference centre"
        );
        assert!(
            !click("", later, "https://o.example/go?t=abc"),
            "no user agent"
        );
        let open = |agent: &str| {
            let detail = json!({"eventType": "Open", "mail": mail("u1"),
                "open": {"userAgent": agent, "timestamp": later, "ipAddress": "192.0.2.1"}});
            parse(&event("Email Opened", detail), 0).unwrap().by_person
        };
        assert!(open(CHROME));
        assert!(!open("Mozilla/5.0"), "Apple's prefetch");
        assert!(!open("Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)"));
    }
}

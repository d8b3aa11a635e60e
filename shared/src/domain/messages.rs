//! The messages that travel between the stages. Each stage parses every record itself, so
//! that one bad body fails alone.

use crate::domain::campaign::{CampaignId, Window};
use crate::domain::definition_pin::PinnedDefinition;
use crate::domain::local_time::Due;
use crate::domain::topics::{TopicId, Topics};
use serde::{Deserialize, Deserializer, Serialize};

pub use crate::domain::user_id::{check_user_id, MAX_USER_ID_BYTES};

fn user_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let id = String::deserialize(d)?;
    check_user_id(&id).map_err(serde::de::Error::custom)?;
    Ok(id)
}

/// The topic of a message or checkpoint written before campaigns had topics.
pub fn weekly_topic() -> TopicId {
    Topics::builtin().weekly().id.clone()
}

/// Users queue: one user of one campaign. CreateEmails trusts nothing else in it; it reads
/// the user afresh from MongoDB.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserMessage {
    pub campaign_id: CampaignId,
    #[serde(deserialize_with = "user_id")]
    pub user_id: String,
    #[serde(flatten)]
    pub window: Window,
    /// The campaign's topic (messages from before topics belong to the weekly one).
    #[serde(default = "weekly_topic")]
    pub topic: TopicId,
    /// Operator resend option: also retry users whose send FAILED permanently.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_failed: bool,
    /// Operator resend of a reopened campaign: also send to users recorded CANCELLED.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_cancelled: bool,
    /// A local-time user: when they were let go (their send record gets its lateness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<Due>,
    /// The user's IANA zone (their own, or a local-time campaign's fallback): quiet hours
    /// and calendar-day caps are theirs. None: the stack's `FALLBACK_TIME_ZONE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The experiment's variant this user gets: theirs in the test group, the winner for
    /// the rest (GetUsers sets it; None: the campaign has no experiment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The pushed definition version the run renders with (None: the built-in digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<PinnedDefinition>,
}

/// Emails queue: one rendered email, ready to send. On the queue its HTML and text parts
/// travel deflated (`WireJob`): about 2.6 KiB instead of 7.5, so that a batch of ten is one
/// 64 KiB SQS billing chunk, not two, both when CreateEmails sends it and when SendEmail
/// receives it. A job with plain `html` and `text` is accepted too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireJob", into = "WireJob")]
pub struct EmailJob {
    pub campaign_id: CampaignId,
    pub user_id: String,
    pub to: String,
    pub subject: String,
    pub html: String,
    pub text: String,
    /// The user's one-click unsubscribe URL (sent as List-Unsubscribe headers).
    pub unsubscribe_url: Option<String>,
    /// Operator resend options: FAILED (and, for a reopened campaign, CANCELLED) records
    /// may be claimed again.
    pub include_failed: bool,
    pub include_cancelled: bool,
    /// A local-time user's release (see `UserMessage::due`).
    pub due: Option<Due>,
    /// The campaign's topic (frequency caps may be per topic).
    pub topic: TopicId,
    /// See `UserMessage::zone`.
    pub zone: Option<String>,
    /// See `UserMessage::variant` (SendEmail records it on the claim).
    pub variant: Option<String>,
    /// When CreateEmails rendered it (ms since the epoch): SendEmail reads the person's
    /// standing again before sending one that has waited since (None: a job from before
    /// this field, sent on CreateEmails' reading).
    pub rendered_at_ms: Option<i64>,
    /// The campaign's window, so that SendEmail can hand the user back to the waiting room
    /// (`user_message`) to be rendered again after their quiet hours. None in a job
    /// rendered before jobs carried it.
    pub window: Option<Window>,
    /// See `UserMessage::definition` (an email handed back is rendered again with it).
    pub definition: Option<PinnedDefinition>,
}

/// An email job as the emails queue carries it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WireJob {
    campaign_id: CampaignId,
    #[serde(deserialize_with = "user_id")]
    user_id: String,
    to: String,
    subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    html: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// The text and HTML parts deflated (raw DEFLATE, fastest level), base64: the length
    /// of the text in bytes, `:`, the text, the HTML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parts: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unsubscribe_url: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    include_failed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    include_cancelled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due: Option<Due>,
    #[serde(default = "weekly_topic")]
    topic: TopicId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    variant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rendered_at: Option<i64>,
    window: Option<Window>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    definition: Option<PinnedDefinition>,
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

thread_local! {
    /// One deflate state per thread (about 260 KiB), reset for each job instead of allocated.
    static DEFLATE: std::cell::RefCell<Box<miniz_oxide::deflate::core::CompressorOxide>> =
        std::cell::RefCell::new(Box::new(miniz_oxide::deflate::core::CompressorOxide::new(
            // Raw DEFLATE (no zlib header), the fastest level.
            miniz_oxide::deflate::core::create_comp_flags_from_zip_params(1, 0, 0),
        )));
}

fn pack(text: &str, html: &str) -> String {
    use base64::Engine;
    use miniz_oxide::deflate::core::{compress_to_output, TDEFLFlush};
    let joined = format!("{}:{text}{html}", text.len());
    let mut deflated = Vec::with_capacity(joined.len() / 3);
    DEFLATE.with(|state| {
        let mut state = state.borrow_mut();
        state.reset();
        compress_to_output(&mut state, joined.as_bytes(), TDEFLFlush::Finish, |out| {
            deflated.extend_from_slice(out);
            true
        });
    });
    B64.encode(deflated)
}

/// (text, html), or why the parts cannot be read.
fn unpack(parts: &str) -> Result<(String, String), String> {
    use base64::Engine;
    let deflated = B64
        .decode(parts)
        .map_err(|e| format!("parts: not base64 ({e})"))?;
    // Bounded: a job is an email, not an archive bomb.
    let joined = miniz_oxide::inflate::decompress_to_vec_with_limit(&deflated, 1 << 20)
        .map_err(|e| format!("parts: not DEFLATE data within 1 MiB ({e:?})"))?;
    let joined = String::from_utf8(joined).map_err(|_| "parts: not UTF-8".to_owned())?;
    let (len, rest) = joined
        .split_once(':')
        .ok_or_else(|| "parts: no text length".to_owned())?;
    let len: usize = len
        .parse()
        .map_err(|_| "parts: the text length is not a number".to_owned())?;
    if len > rest.len() || !rest.is_char_boundary(len) {
        return Err("parts: the text length does not fit".into());
    }
    let (text, html) = rest.split_at(len);
    Ok((text.to_owned(), html.to_owned()))
}

impl TryFrom<WireJob> for EmailJob {
    type Error = String;
    fn try_from(w: WireJob) -> Result<Self, String> {
        let (text, html) = match (w.parts, w.html, w.text) {
            (Some(parts), None, None) => unpack(&parts)?,
            (None, Some(html), Some(text)) => (text, html),
            (Some(_), _, _) => return Err("give parts or html and text, not both".into()),
            (None, None, _) => return Err("missing field `html`".into()),
            (None, _, None) => return Err("missing field `text`".into()),
        };
        Ok(Self {
            campaign_id: w.campaign_id,
            user_id: w.user_id,
            to: w.to,
            subject: w.subject,
            html,
            text,
            unsubscribe_url: w.unsubscribe_url,
            include_failed: w.include_failed,
            include_cancelled: w.include_cancelled,
            due: w.due,
            topic: w.topic,
            zone: w.zone,
            variant: w.variant,
            rendered_at_ms: w.rendered_at,
            window: w.window,
            definition: w.definition,
        })
    }
}

impl From<EmailJob> for WireJob {
    fn from(job: EmailJob) -> Self {
        Self {
            parts: Some(pack(&job.text, &job.html)),
            campaign_id: job.campaign_id,
            user_id: job.user_id,
            to: job.to,
            subject: job.subject,
            html: None,
            text: None,
            unsubscribe_url: job.unsubscribe_url,
            include_failed: job.include_failed,
            include_cancelled: job.include_cancelled,
            due: job.due,
            topic: job.topic,
            zone: job.zone,
            variant: job.variant,
            rendered_at: job.rendered_at_ms,
            window: job.window,
            definition: job.definition,
        }
    }
}

impl EmailJob {
    /// The ledger record this job is sent under.
    pub fn key(&self) -> crate::domain::ledger::SendKey {
        crate::domain::ledger::SendKey::new(self.user_id.clone(), self.campaign_id.clone())
    }

    /// The final records this job may claim again.
    pub fn reclaim(&self) -> crate::domain::ledger::Reclaim {
        crate::domain::ledger::Reclaim {
            failed: self.include_failed,
            cancelled: self.include_cancelled,
        }
    }

    /// The users-queue message this email was rendered from (without its `due`: the
    /// release that lets the user go again sets it), or None for a job without a window.
    pub fn user_message(&self) -> Option<UserMessage> {
        Some(UserMessage {
            campaign_id: self.campaign_id.clone(),
            user_id: self.user_id.clone(),
            window: self.window?,
            topic: self.topic.clone(),
            include_failed: self.include_failed,
            include_cancelled: self.include_cancelled,
            due: None,
            zone: self.zone.clone(),
            variant: self.variant.clone(),
            definition: self.definition.clone(),
        })
    }
}

/// Why a record body was rejected; logged, and the record reported as failed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("record has no body")]
    Missing,
    #[error("body is not a valid message: {0}")]
    Invalid(#[from] serde_json::Error),
}

pub fn parse_body<T: serde::de::DeserializeOwned>(body: Option<&str>) -> Result<T, BodyError> {
    Ok(serde_json::from_str(body.ok_or(BodyError::Missing)?)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_email_job_travels_deflated_and_comes_back_the_same() {
        let job = super::EmailJob {
            campaign_id: super::CampaignId::parse("weekly-2026-W47").unwrap(),
            user_id: "u1".into(),
            to: "ada@example.com".into(),
            subject: "s".into(),
            html: "<p>caf\u{e9} 12:34</p>".repeat(200),
            text: "12: caf\u{e9}\u{0}".into(),
            unsubscribe_url: None,
            include_failed: false,
            include_cancelled: true,
            due: Some(crate::domain::local_time::Due {
                slot_late_ms: 1200,
                released_at_ms: 1_796_029_201_200,
            }),
            topic: super::weekly_topic(),
            zone: Some("Asia/Tokyo".into()),
            variant: Some("b".into()),
            rendered_at_ms: Some(1_796_029_201_900),
            window: Some(
                crate::domain::campaign::Window::new(
                    time::macros::datetime!(2026-11-16 0:00 UTC),
                    time::macros::datetime!(2026-11-23 0:00 UTC),
                )
                .unwrap(),
            ),
            definition: None,
        };
        let wire = serde_json::to_string(&job).unwrap();
        assert!(wire.len() < job.html.len() / 4, "{}", wire.len());
        assert!(!wire.contains("<p>"));
        assert_eq!(
            super::parse_body::<super::EmailJob>(Some(&wire)).unwrap(),
            job
        );
        // Broken parts fail the job with a reason, never a panic.
        for parts in ["not base64!", "AAAA", "eJwLSS0u"] {
            let body = serde_json::json!({"campaignId": "c", "userId": "u", "to": "a@b.c", "subject": "s", "parts": parts});
            let err = super::parse_body::<super::EmailJob>(Some(&body.to_string())).unwrap_err();
            assert!(err.to_string().contains("parts"), "{err}");
        }
    }

    use super::*;

    #[test]
    fn user_message_round_trip_and_errors() {
        let body = r#"{"campaignId":"weekly-2026-W47","userId":"u1","since":"2026-11-16T00:00:00Z","until":"2026-11-23T00:00:00Z"}"#;
        let m: UserMessage = parse_body(Some(body)).unwrap();
        assert_eq!(m.user_id, "u1");
        assert!(!m.include_failed);
        // A message from before topics belongs to the weekly topic, and says so from now on.
        assert_eq!(m.topic.as_str(), "digest");
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            body.replace(
                r#""until":"2026-11-23T00:00:00Z""#,
                r#""until":"2026-11-23T00:00:00Z","topic":"digest""#
            )
        );
        let bad_topic = body.replace(r#""userId""#, r#""topic":"Not A Topic","userId""#);
        assert!(parse_body::<UserMessage>(Some(&bad_topic))
            .unwrap_err()
            .to_string()
            .contains("topic id"));
        assert!(parse_body::<UserMessage>(Some("{"))
            .unwrap_err()
            .to_string()
            .contains("not a valid"));
        assert!(parse_body::<UserMessage>(None).is_err());
        for bad_user in [
            String::new(),
            "u\n1".into(),
            "u".repeat(MAX_USER_ID_BYTES + 1),
        ] {
            let bad = body.replace(r#""u1""#, &serde_json::to_string(&bad_user).unwrap());
            assert!(parse_body::<UserMessage>(Some(&bad))
                .unwrap_err()
                .to_string()
                .contains("userId must be"));
        }
        let bad_id = body.replace("weekly-2026-W47", "a b");
        assert!(parse_body::<UserMessage>(Some(&bad_id))
            .unwrap_err()
            .to_string()
            .contains("campaign id"));
    }
}

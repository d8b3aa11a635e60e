//! The messages that travel between the stages. Each stage parses every record itself, so
//! that one bad body fails alone.

use crate::campaign::{CampaignId, Window};
use serde::{Deserialize, Deserializer, Serialize};

pub use crate::user_id::{check_user_id, MAX_USER_ID_BYTES};

fn user_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let id = String::deserialize(d)?;
    check_user_id(&id).map_err(serde::de::Error::custom)?;
    Ok(id)
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
    /// Operator resend option: also retry users whose send FAILED permanently.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_failed: bool,
    /// Operator resend of a reopened campaign: also send to users recorded CANCELLED.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_cancelled: bool,
}

/// Emails queue: one rendered email, ready to send.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmailJob {
    pub campaign_id: CampaignId,
    #[serde(deserialize_with = "user_id")]
    pub user_id: String,
    pub to: String,
    pub subject: String,
    pub html: String,
    pub text: String,
    /// The user's one-click unsubscribe URL (sent as List-Unsubscribe headers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsubscribe_url: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_failed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_cancelled: bool,
}

impl EmailJob {
    /// The final records this job may claim again.
    pub fn reclaim(&self) -> crate::ledger::Reclaim {
        crate::ledger::Reclaim {
            failed: self.include_failed,
            cancelled: self.include_cancelled,
        }
    }
}

/// Why a record body was rejected; logged, and the record reported as failed.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: Option<&str>) -> Result<T, String> {
    let body = body.ok_or("record has no body")?;
    serde_json::from_str(body).map_err(|e| format!("body is not a valid message: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_message_round_trip_and_errors() {
        let body = r#"{"campaignId":"weekly-2026-W47","userId":"u1","since":"2026-11-16T00:00:00Z","until":"2026-11-23T00:00:00Z"}"#;
        let m: UserMessage = parse_body(Some(body)).unwrap();
        assert_eq!(m.user_id, "u1");
        assert!(!m.include_failed);
        assert_eq!(serde_json::to_string(&m).unwrap(), body);
        assert!(parse_body::<UserMessage>(Some("{"))
            .unwrap_err()
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
                .contains("userId must be"));
        }
        let bad_id = body.replace("weekly-2026-W47", "a b");
        assert!(parse_body::<UserMessage>(Some(&bad_id))
            .unwrap_err()
            .contains("campaign id"));
    }
}

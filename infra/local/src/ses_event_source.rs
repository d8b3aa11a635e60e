//! What the local emulator lacks: SES publishing events through the configuration set to
//! EventBridge, and the rule putting them on the SesEvents queue. Here an event is written
//! to that queue directly, in the shape the rule delivers (see `mailflow::domain::ses_event`). The
//! chaos run publishes a DELIVERY event for every email SES accepts, as AWS would; the tests
//! write the events they need.

use anyhow::Result;
use mailflow::adapters::sqs::SqsQueue;
use mailflow::ports::OutgoingQueue;
use serde_json::{json, Value};

/// One SES event as EventBridge delivers it. `recipient` is (campaign id, user id), tagged as
/// SendEmail tags every email; None makes an email sent outside mailflow.
pub fn event(
    kind: &str,
    recipient: Option<(&str, &str)>,
    message_id: &str,
    extra: Value,
) -> String {
    let detail_type = match kind {
        "Send" => "Email Sent",
        "Delivery" => "Email Delivered",
        "Bounce" => "Email Bounced",
        "Complaint" => "Email Complaint Received",
        "Open" => "Email Opened",
        "Click" => "Email Clicked",
        "Reject" => "Email Rejected",
        _ => "Email Delivery Delayed",
    };
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let mut tags = json!({"ses:configuration-set": ["mailflow"]});
    if let Some((campaign, user)) = recipient {
        let encode = |v: &str| mailflow::domain::ses_tags::encode(v).unwrap_or_default();
        tags[mailflow::domain::ses_tags::CAMPAIGN_TAG] = json!([encode(campaign)]);
        for (name, value) in mailflow::domain::ses_tags::user_tags(user) {
            tags[name] = json!([value]);
        }
    }
    let mut detail = json!({
        "eventType": kind,
        "mail": {"messageId": message_id, "timestamp": now, "tags": tags},
    });
    if let (Some(detail), Some(extra)) = (detail.as_object_mut(), extra.as_object()) {
        detail.extend(extra.clone());
    }
    json!({"version": "0", "source": "aws.ses", "detail-type": detail_type, "time": now,
           "detail": detail})
    .to_string()
}

/// Puts SES events on a stack's SesEvents queue.
#[derive(Clone)]
pub struct Publisher {
    queue: SqsQueue,
}

impl Publisher {
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: &str) -> Self {
        Self {
            queue: SqsQueue::new(sqs, queue_url),
        }
    }

    pub async fn publish(&self, events: &[String]) -> Result<()> {
        for chunk in events.chunks(10) {
            self.queue.send_batch(chunk).await?;
        }
        Ok(())
    }

    /// SES accepted this email: its DELIVERY event (the stack publishes no SEND), published
    /// on its own (as SES does, whatever becomes of the caller), so an invocation killed
    /// right after the call cannot stop it.
    pub fn delivered(&self, campaign_id: &str, user_id: &str, ses_message_id: &str) {
        let event = event(
            "Delivery",
            Some((campaign_id, user_id)),
            ses_message_id,
            json!({"delivery": {}}),
        );
        let publisher = self.clone();
        tokio::spawn(async move {
            if let Err(err) = publisher.publish(&[event]).await {
                tracing::warn!(error = %format!("{err:#}"), "SES event not published (SES events are best effort)");
            }
        });
    }
}

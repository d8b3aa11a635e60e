//! SES v2 SendEmail, with the SDK's own retries off: a retried SendEmail after a lost
//! response could send twice, and throttling is retried through SQS with backoff instead.
//! The email goes as raw MIME (`crate::domain::mime`), which carries the one-click unsubscribe
//! headers, tagged with its campaign and user (`crate::domain::ses_tags`) for the SES events.

use crate::domain::mime;
use crate::domain::send_rate::{QuotaUnknown, SendQuota};
use crate::domain::ses_tags;
use crate::ports::{Mailer, OutgoingEmail, SendError};
use aws_sdk_sesv2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sesv2::operation::RequestId;
use aws_sdk_sesv2::primitives::Blob;
use aws_sdk_sesv2::types::{Destination, EmailContent, MessageTag, RawMessage};
use aws_sdk_sesv2::Client;

#[derive(Clone)]
pub struct SesMailer {
    client: Client,
    /// The sender as configured (the MIME writer encodes it).
    from: String,
    /// The same in 7-bit ASCII, as SES takes `FromEmailAddress` (`mime::from_header`).
    from_address: String,
    configuration_set: Option<String>,
}

impl SesMailer {
    /// The mailer SendEmail's configuration describes (sender, configuration set).
    pub fn from_config(
        sdk: &aws_config::SdkConfig,
        config: &crate::config::SendEmailConfig,
    ) -> Self {
        Self::new(
            sdk,
            config.sender_address.clone(),
            config.configuration_set.clone(),
        )
    }

    pub fn new(
        sdk: &aws_config::SdkConfig,
        from: String,
        configuration_set: Option<String>,
    ) -> Self {
        let config = aws_sdk_sesv2::config::Builder::from(sdk)
            .retry_config(aws_sdk_sesv2::config::retry::RetryConfig::disabled())
            .interceptor(crate::runtime::metering::RequestMeter)
            .build();
        Self {
            client: Client::from_conf(config),
            // SendEmail's sender was checked at cold start; RateControl's mailer sends nothing.
            from_address: ses_from_address(&from),
            from,
            configuration_set,
        }
    }
}

/// The sender as SES's `FromEmailAddress` takes it: the From header's value (ASCII, the name
/// in encoded words) on one line, since a folded header's CRLF is no part of an address.
fn ses_from_address(from: &str) -> String {
    mime::from_header(from)
        .unwrap_or_else(|_| from.to_owned())
        .replace("\r\n ", " ")
}

/// How long RateControl (every minute), `mailctl plan` or `mailctl status` waits for
/// GetAccount before going on without the quota.
const QUOTA_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The account's sending quota, or (Err) why it is not known: the local emulator, for one,
/// does not answer GetAccount, and an endpoint that does not answer within `QUOTA_WAIT` is
/// given up on.
pub async fn send_quota(sdk: &aws_config::SdkConfig) -> Result<SendQuota, QuotaUnknown> {
    send_quota_within(sdk, QUOTA_WAIT).await
}

async fn send_quota_within(
    sdk: &aws_config::SdkConfig,
    wait: std::time::Duration,
) -> Result<SendQuota, QuotaUnknown> {
    let config = aws_sdk_sesv2::config::Builder::from(sdk)
        .interceptor(crate::runtime::metering::RequestMeter)
        .build();
    quota_of(&Client::from_conf(config), wait).await
}

async fn quota_of(client: &Client, wait: std::time::Duration) -> Result<SendQuota, QuotaUnknown> {
    let answer = tokio::time::timeout(wait, client.get_account().send())
        .await
        .map_err(|_| QuotaUnknown(format!("GetAccount did not answer within {wait:?}")))?;
    let account = answer.map_err(|e| {
        QuotaUnknown(match &e {
            SdkError::ServiceError(se) => format!(
                "GetAccount answered HTTP {} {}",
                se.raw().status().as_u16(),
                se.err().code().unwrap_or("without an error code")
            ),
            other => aws_sdk_sesv2::error::DisplayErrorContext(other).to_string(),
        })
    })?;
    let quota = account
        .send_quota
        .ok_or_else(|| QuotaUnknown("GetAccount answered without a SendQuota".into()))?;
    Ok(SendQuota {
        max_send_rate: quota.max_send_rate,
        max_24_hour_send: quota.max24_hour_send,
        sent_last_24_hours: quota.sent_last24_hours,
    })
}

/// The tag, or None (logged) when the value is too long to be one: the email still goes.
fn tag(name: &str, value: &str) -> Result<Option<MessageTag>, SendError> {
    let Some(value) = ses_tags::encode(value) else {
        tracing::warn!(
            tag = name,
            "value too long for an SES tag; this email's events cannot be reconciled"
        );
        return Ok(None);
    };
    built_tag(name, value).map(Some)
}

fn built_tag(name: &str, value: String) -> Result<MessageTag, SendError> {
    MessageTag::builder()
        .name(name)
        .value(value)
        .build()
        .map_err(|e| SendError::Permanent(format!("cannot build tag: {e}")))
}

/// The raw MIME SendEmail hands to SES for this email.
pub fn raw_message(from: &str, email: &OutgoingEmail) -> Result<String, SendError> {
    raw_message_with(from, email, &[])
}

/// The header a test send carries (`mailctl test-send`), beside the subject's `[TEST] `.
pub const TEST_HEADER: &str = "X-Mailflow-Test";
/// The SES tag that marks a test send: its events are tied to no send record.
pub const TEST_TAG: &str = "test";

fn raw_message_with(
    from: &str,
    email: &OutgoingEmail,
    extra: &[(&str, &str)],
) -> Result<String, SendError> {
    mime::build(&mime::Message {
        from,
        to: &email.to,
        subject: &email.subject,
        text: &email.text,
        html: &email.html,
        unsubscribe_url: email.unsubscribe_url.as_deref(),
        headers: extra,
    })
    .map_err(|e| SendError::Permanent(format!("cannot build the message: {e}")))
}

/// Classifies an SES error by its code (the emulator and the service use the same codes).
/// SES answers both of its quotas with a throttling code; only the message tells the daily
/// quota ("Daily message quota exceeded") from the rate ("Maximum sending rate exceeded"),
/// and sending slower does nothing for the former.
pub fn classify(code: Option<&str>, message: &str, answered: bool) -> SendError {
    let detail = format!("{}: {message}", code.unwrap_or("Error"));
    let lower = message.to_ascii_lowercase();
    if lower.contains("daily") && lower.contains("quota") {
        return SendError::DailyQuota(detail);
    }
    match code {
        Some(
            "TooManyRequestsException"
            | "LimitExceededException"
            | "Throttling"
            | "ThrottlingException",
        ) => SendError::Throttled(detail),
        _ if message.contains("Maximum sending rate exceeded") => SendError::Throttled(detail),
        Some("SendingPausedException" | "AccountSuspendedException") => SendError::Stopped(detail),
        Some(
            "MessageRejected"
            | "MailFromDomainNotVerifiedException"
            | "BadRequestException"
            | "InvalidParameterValue"
            | "NotFoundException",
        ) => SendError::Permanent(detail),
        _ if answered => SendError::NotAccepted(detail),
        _ => SendError::Unknown(detail),
    }
}

/// An error answer with neither a code nor a message: classified by its HTTP status, and
/// described by it and the request id, so the record and the log still say something.
pub fn classify_bare(status: u16, request_id: Option<&str>) -> SendError {
    let detail = format!(
        "HTTP {status} with no error code or message (request id {})",
        request_id.unwrap_or("none")
    );
    match status {
        429 => SendError::Throttled(detail),
        _ => SendError::NotAccepted(detail),
    }
}

fn translate(err: SdkError<SendEmailError>) -> SendError {
    match &err {
        SdkError::ServiceError(e) => {
            let (code, message) = (e.err().code(), e.err().message().unwrap_or(""));
            if code.is_none() && message.trim().is_empty() {
                return classify_bare(e.raw().status().as_u16(), e.err().request_id());
            }
            classify(code, message, true)
        }
        // Nothing was sent: the request never left.
        SdkError::ConstructionFailure(_) => {
            SendError::Permanent(aws_sdk_sesv2::error::DisplayErrorContext(&err).to_string())
        }
        _ => classify(
            None,
            &aws_sdk_sesv2::error::DisplayErrorContext(&err).to_string(),
            false,
        ),
    }
}

impl SesMailer {
    /// A test of `email` (`mailctl test-send`): the same message with `[TEST] ` before the
    /// subject and the `X-Mailflow-Test` header, tagged with the campaign and `test` but no
    /// user, so that its bounces, complaints and opens touch no send record and no user.
    pub async fn send_test(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        let test = OutgoingEmail {
            subject: format!("[TEST] {}", email.subject),
            ..email.clone()
        };
        let raw = raw_message_with(&self.from, &test, &[(TEST_HEADER, "true")])?;
        let tags = [
            tag(ses_tags::CAMPAIGN_TAG, email.key.campaign_id())?,
            tag(TEST_TAG, "true")?,
        ];
        self.send_raw(&test, raw, tags.into_iter().flatten().collect())
            .await
    }

    async fn send_raw(
        &self,
        email: &OutgoingEmail,
        raw: String,
        tags: Vec<MessageTag>,
    ) -> Result<String, SendError> {
        let content = RawMessage::builder()
            .data(Blob::new(raw))
            .build()
            .map_err(|e| SendError::Permanent(format!("cannot build the message: {e}")))?;
        // The destination is the To header's one address (SendEmail parsed it): SES delivers
        // to the destination, never to whatever else a header might name.
        let out = self
            .client
            .send_email()
            .from_email_address(&self.from_address)
            .destination(Destination::builder().to_addresses(&email.to).build())
            .content(EmailContent::builder().raw(content).build())
            .set_email_tags(Some(tags))
            .set_configuration_set_name(self.configuration_set.clone())
            .send()
            .await
            .map_err(translate)?;
        out.message_id.ok_or_else(|| {
            SendError::Unknown("SES accepted the email but returned no message id".into())
        })
    }
}

impl Mailer for SesMailer {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        let raw = raw_message(&self.from, email)?;
        let mut tags: Vec<MessageTag> = tag(ses_tags::CAMPAIGN_TAG, email.key.campaign_id())?
            .into_iter()
            .collect();
        // However long the id, every part of it: the events find the record.
        for (name, value) in ses_tags::user_tags(email.key.user_id()) {
            tags.push(built_tag(&name, value)?);
        }
        self.send_raw(email, raw, tags).await
    }

    async fn send_quota(&self) -> Result<SendQuota, QuotaUnknown> {
        quota_of(&self.client, QUOTA_WAIT).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sender_given_to_ses_is_one_line() {
        for from in [
            "Équipe Mailflow <newsletter@notifications.example.com>",
            "The Mailflow Weekly Newsletter Team <newsletter@notifications.example.com>",
            "news@example.com",
        ] {
            let address = ses_from_address(from);
            assert!(!address.contains(['\r', '\n']), "{address:?}");
            assert!(address.is_ascii(), "{address:?}");
            assert!(
                address.ends_with("newsletter@notifications.example.com>")
                    || address == "news@example.com",
                "{address:?}"
            );
        }
    }

    #[test]
    fn classifies_errors_by_class() {
        assert!(matches!(
            classify(Some("TooManyRequestsException"), "", true),
            SendError::Throttled(_)
        ));
        assert!(matches!(
            classify(Some("Throttling"), "Maximum sending rate exceeded.", true),
            SendError::Throttled(_)
        ));
        assert!(matches!(
            classify(Some("SendingPausedException"), "", true),
            SendError::Stopped(_)
        ));
        // Both quotas come with a throttling code: the message tells them apart.
        for code in [
            "ThrottlingException",
            "Throttling",
            "LimitExceededException",
            "TooManyRequestsException",
        ] {
            assert!(
                matches!(
                    classify(Some(code), "Daily message quota exceeded.", true),
                    SendError::DailyQuota(_)
                ),
                "{code}"
            );
            assert!(
                matches!(
                    classify(Some(code), "Maximum sending rate exceeded.", true),
                    SendError::Throttled(_)
                ),
                "{code}"
            );
        }
        assert!(matches!(
            classify(
                Some("LimitExceededException"),
                "Daily sending quota exceeded",
                true
            ),
            SendError::DailyQuota(_)
        ));
        assert!(matches!(
            classify(Some("MessageRejected"), "Email address not verified", true),
            SendError::Permanent(_)
        ));
        assert!(matches!(
            classify(Some("InvalidParameterValue"), "Missing domain", true),
            SendError::Permanent(_)
        ));
        assert!(matches!(
            classify(Some("InternalFailure"), "", true),
            SendError::NotAccepted(_)
        ));
        assert!(matches!(
            classify(None, "timed out", false),
            SendError::Unknown(_)
        ));
        match classify_bare(500, Some("req-1")) {
            SendError::NotAccepted(detail) => assert_eq!(
                detail,
                "HTTP 500 with no error code or message (request id req-1)"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(classify_bare(429, None), SendError::Throttled(_)));
    }

    #[tokio::test]
    async fn an_endpoint_that_never_answers_leaves_the_quota_unknown() {
        // Accepts connections and reads nothing back: a stuck endpoint.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sesv2::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .load()
            .await;
        let quota = super::send_quota_within(&sdk, std::time::Duration::from_millis(200)).await;
        assert_eq!(
            quota,
            Err(QuotaUnknown(
                "GetAccount did not answer within 200ms".to_owned()
            ))
        );
        held.abort();
    }
}

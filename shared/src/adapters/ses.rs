//! SES v2 SendEmail, with the SDK's own retries off: a retried SendEmail after a lost
//! response could send twice, and throttling is retried through SQS with backoff instead.

use crate::ports::{Mailer, OutgoingEmail, SendError};
use aws_sdk_sesv2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message, MessageTag};
use aws_sdk_sesv2::Client;

#[derive(Clone)]
pub struct SesMailer {
    client: Client,
    from: String,
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
            .interceptor(crate::metering::RequestMeter)
            .build();
        Self {
            client: Client::from_conf(config),
            from,
            configuration_set,
        }
    }
}

fn content(text: &str) -> Result<Content, SendError> {
    Content::builder()
        .data(text)
        .charset("UTF-8")
        .build()
        .map_err(|e| SendError::Permanent(format!("cannot build content: {e}")))
}

fn tag(name: &str, value: &str) -> Result<MessageTag, SendError> {
    // SES tag values allow [A-Za-z0-9_-]; campaign ids may also hold '.', user ids anything.
    let value: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(256)
        .collect();
    MessageTag::builder()
        .name(name)
        .value(value)
        .build()
        .map_err(|e| SendError::Permanent(format!("cannot build tag: {e}")))
}

/// Classifies an SES error by its code (the emulator and the service use the same codes).
pub fn classify(code: Option<&str>, message: &str, answered: bool) -> SendError {
    let detail = format!("{}: {message}", code.unwrap_or("Error"));
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

fn translate(err: SdkError<SendEmailError>) -> SendError {
    match &err {
        SdkError::ServiceError(e) => {
            classify(e.err().code(), e.err().message().unwrap_or(""), true)
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

impl Mailer for SesMailer {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        let message = Message::builder()
            .subject(content(&email.subject)?)
            .body(
                Body::builder()
                    .html(content(&email.html)?)
                    .text(content(&email.text)?)
                    .build(),
            )
            .build();
        let out = self
            .client
            .send_email()
            .from_email_address(&self.from)
            .destination(Destination::builder().to_addresses(&email.to).build())
            .content(EmailContent::builder().simple(message).build())
            .email_tags(tag("campaignId", &email.campaign_id)?)
            .email_tags(tag("userId", &email.user_id)?)
            .set_configuration_set_name(self.configuration_set.clone())
            .send()
            .await
            .map_err(translate)?;
        out.message_id.ok_or_else(|| {
            SendError::Unknown("SES accepted the email but returned no message id".into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}

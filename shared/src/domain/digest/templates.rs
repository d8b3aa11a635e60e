//! What a failure to render says, and the bounds on a subject.

/// The longest subject template an experiment may give (its campaign item holds five
/// variants in every language).
pub const MAX_SUBJECT_TEMPLATE: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template {template}: {source:#}")]
    Template {
        template: String,
        #[source]
        source: minijinja::Error,
    },
    #[error("template {template}: the MJML does not render: {detail}")]
    Mjml { template: String, detail: String },
    /// The user's data does not convert (`definition::values`): the field and why.
    #[error("the data: {detail}")]
    Data { detail: String },
    /// A subject longer than a header line may be (`MAX_SUBJECT_BYTES`).
    #[error("template {template}: the subject renders {bytes} bytes; at most {max}", max = MAX_SUBJECT_BYTES)]
    SubjectTooLong { template: String, bytes: usize },
}

/// The longest subject a definition's templates may render: a header line's 998 characters
/// (RFC 5322), in bytes, before encoding.
pub const MAX_SUBJECT_BYTES: usize = 998;

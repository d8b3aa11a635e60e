//! The signing secret's keys, shared by the unsubscribe links (`unsubscribe_link`) and the
//! open-time content's slot tokens (`open_content`, under keys derived from the same secret).

/// Shorter keys are refused: a signing key must not be guessable.
pub const MIN_KEY_BYTES: usize = 32;
/// Longer tokens are refused before any work (a user id is at most 512 bytes).
pub const MAX_TOKEN_BYTES: usize = 2048;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the signing secret holds no key")]
    Empty,
    #[error("every signing key must be at least {MIN_KEY_BYTES} bytes (one is {0})")]
    TooShort(usize),
    #[error(
        "the unsubscribe base URL {0:?} must be an http(s) URL without spaces, quotes, <, > or #"
    )]
    BadBaseUrl(String),
    #[error("the list name {0:?} must be 1-64 characters from a-z 0-9 -")]
    BadList(String),
}

/// The keys of a signing secret: whitespace-separated, the first signs, every one verifies.
/// The open-time content's slot tokens are sealed under keys derived from the same secret.
pub fn signing_keys(secret: &str) -> Result<Vec<Vec<u8>>, KeyError> {
    let keys: Vec<Vec<u8>> = secret
        .split_whitespace()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    if keys.is_empty() {
        return Err(KeyError::Empty);
    }
    if let Some(short) = keys.iter().find(|k| k.len() < MIN_KEY_BYTES) {
        return Err(KeyError::TooShort(short.len()));
    }
    Ok(keys)
}

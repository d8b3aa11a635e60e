//! The answers this function gives besides its decisions: the images (cards, badges, the
//! transparent pixel) with how long they may be cached, a redirect that keeps the token to
//! itself, and plain text.

use crate::domain::open_content::card::{self, Image, Language};
use crate::runtime::function_url::HttpResponse;
use std::sync::{LazyLock, OnceLock};

/// A frozen card and the static images: their URL's content never changes.
pub(super) const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// A card from a token's URL: the same for ever, but only this email's.
pub(super) const FROZEN: &str = "private, max-age=31536000, immutable";

/// An image under `static/`, drawn at its first request (a cold start draws none it is
/// not asked for: nine of them with words would cost a first request's CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Static {
    Hot(Language),
    Popular(Language),
    Fallback(Language),
    None,
}

impl Static {
    /// From its name under `static/`: English's without a suffix (the names sent emails'
    /// badges already redirect to), the others' with their language (`hot-fr.png`).
    pub(super) fn named(name: &str) -> Option<Self> {
        let stem = name.strip_suffix(".png")?;
        let (kind, language) = match stem.split_once('-') {
            None => (stem, Language::En),
            Some((kind, code)) => match Language::from_code(code) {
                Some(Language::En) | None => return None,
                Some(language) => (kind, language),
            },
        };
        match kind {
            "hot" => Some(Self::Hot(language)),
            "popular" => Some(Self::Popular(language)),
            "fallback" => Some(Self::Fallback(language)),
            "none" if language == Language::En => Some(Self::None),
            _ => None,
        }
    }

    pub(super) fn image(self) -> &'static Image {
        static WORDED: [[OnceLock<Image>; 3]; 3] = [const { [const { OnceLock::new() }; 3] }; 3];
        static NONE: OnceLock<Image> = OnceLock::new();
        let at = |l: Language| Language::ALL.iter().position(|x| *x == l).unwrap_or(0);
        match self {
            Self::Hot(l) => WORDED[0][at(l)].get_or_init(|| card::hot_badge(l)),
            Self::Popular(l) => WORDED[1][at(l)].get_or_init(|| card::popular_badge(l)),
            Self::Fallback(l) => WORDED[2][at(l)].get_or_init(|| card::fallback_card(l)),
            Self::None => NONE.get_or_init(card::no_badge),
        }
    }
}

/// What a static image's name carries for `language` ("" for English).
pub(super) fn static_suffix(language: Language) -> String {
    match language {
        Language::En => String::new(),
        other => format!("-{}", other.code()),
    }
}

/// The transparent pixel, for refused tokens.
pub(super) static PIXEL: LazyLock<Image> = LazyLock::new(card::transparent_pixel);

pub(super) fn image(status: u16, image: &Image, cache: &str) -> HttpResponse {
    HttpResponse {
        status,
        headers: vec![
            ("content-type", Image::CONTENT_TYPE.to_owned()),
            ("cache-control", cache.to_owned()),
            ("x-content-type-options", "nosniff".to_owned()),
        ],
        body: image.bytes.clone(),
    }
}

pub(super) fn redirect(location: String) -> HttpResponse {
    HttpResponse {
        status: 307,
        headers: vec![
            ("location", location),
            // Decided at each request: no cache may keep the answer.
            ("cache-control", "no-store".to_owned()),
            // The token is in the URL: the destination must not see it.
            ("referrer-policy", "no-referrer".to_owned()),
            ("content-type", "text/plain; charset=utf-8".to_owned()),
        ],
        body: Vec::new(),
    }
}

pub(super) fn text(status: u16, body: &str) -> HttpResponse {
    let mut headers = vec![
        ("content-type", "text/plain; charset=utf-8".to_owned()),
        ("cache-control", "no-store".to_owned()),
    ];
    if status == 405 {
        headers.push(("allow", "GET, HEAD".to_owned()));
    }
    HttpResponse {
        status,
        headers,
        body: body.as_bytes().to_vec(),
    }
}

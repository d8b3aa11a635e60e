//! The answers this function gives besides its decisions: the images (cards, badges, the
//! transparent pixel) with how long they may be cached, a redirect that keeps the token to
//! itself, and plain text.

use crate::domain::open_content::card::{self, Image};
use crate::runtime::function_url::HttpResponse;
use std::sync::LazyLock;

/// A frozen card and the static images: their URL's content never changes.
pub(super) const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// A card from a token's URL: the same for ever, but only this email's.
pub(super) const FROZEN: &str = "private, max-age=31536000, immutable";

pub(super) struct Images {
    pub(super) hot: Image,
    pub(super) popular: Image,
    pub(super) none: Image,
    pub(super) fallback: Image,
    pub(super) pixel: Image,
}

pub(super) static IMAGES: LazyLock<Images> = LazyLock::new(|| Images {
    hot: card::hot_badge(),
    popular: card::popular_badge(),
    none: card::no_badge(),
    fallback: card::fallback_card(),
    pixel: card::transparent_pixel(),
});

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

//! The answers this function gives besides its decisions: the images (cards, badges, the
//! transparent pixel) with how long they may be cached, a redirect that keeps the token to
//! itself, and plain text.

use crate::domain::open_content::card::{self, Image, Language};
use crate::runtime::function_url::HttpResponse;
use std::sync::LazyLock;

/// A frozen card and the static images: their URL's content never changes.
pub(super) const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// A card from a token's URL: the same for ever, but only this email's.
pub(super) const FROZEN: &str = "private, max-age=31536000, immutable";

/// The images of one language.
pub(super) struct Worded {
    pub(super) hot: Image,
    pub(super) popular: Image,
    pub(super) fallback: Image,
}

pub(super) struct Images {
    /// In `Language::ALL`'s order.
    worded: Vec<Worded>,
    pub(super) none: Image,
    pub(super) pixel: Image,
}

impl Images {
    pub(super) fn of(&self, language: Language) -> &Worded {
        let i = Language::ALL.iter().position(|l| *l == language);
        &self.worded[i.unwrap_or(0)]
    }

    /// Each static image by its name under `static/`: English's without a suffix (the names
    /// sent emails' badges already redirect to), the others' with their language
    /// (`hot-fr.png`).
    pub(super) fn named(&self) -> Vec<(String, &Image)> {
        let mut named = vec![("none.png".to_owned(), &self.none)];
        for language in Language::ALL {
            let suffix = static_suffix(language);
            let w = self.of(language);
            named.push((format!("hot{suffix}.png"), &w.hot));
            named.push((format!("popular{suffix}.png"), &w.popular));
            named.push((format!("fallback{suffix}.png"), &w.fallback));
        }
        named
    }
}

/// What a static image's name carries for `language` ("" for English).
pub(super) fn static_suffix(language: Language) -> String {
    match language {
        Language::En => String::new(),
        other => format!("-{}", other.code()),
    }
}

pub(super) static IMAGES: LazyLock<Images> = LazyLock::new(|| Images {
    worded: Language::ALL
        .iter()
        .map(|&l| Worded {
            hot: card::hot_badge(l),
            popular: card::popular_badge(l),
            fallback: card::fallback_card(l),
        })
        .collect(),
    none: card::no_badge(),
    pixel: card::transparent_pixel(),
});

/// The static images by name, for the routes.
pub(super) static NAMED: LazyLock<Vec<(String, &'static Image)>> = LazyLock::new(|| IMAGES.named());

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

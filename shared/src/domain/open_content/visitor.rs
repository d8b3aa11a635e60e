//! Who is asking, and what that counts. Mail clients and the machines around them fetch
//! images and follow links without a person:
//!
//! - Gmail's image proxy (`GoogleImageProxy`) fetches an email's images when it is opened and
//!   caches them: the first open freezes the picks and counts; later opens through the proxy
//!   never reach us (the picks stay the same either way). Yahoo's proxy does the same.
//! - Apple Mail Privacy Protection fetches every image at delivery, through Apple's proxies,
//!   with no user agent of its own: that freezes the picks at delivery (fine: they are then
//!   as true as at a real open) and counts an open nobody made; no sender can tell them apart.
//! - Outlook blocks images by default: nothing is fetched until the person allows it; a click
//!   without any image fetched still chooses and freezes the picks (the link needs them).
//! - Security scanners (Microsoft Defender Safe Links, Proofpoint, Mimecast, Barracuda) follow
//!   links at delivery, often with HEAD or a browser-like GET within seconds.
//!
//! So: a HEAD counts nothing; a known proxy's image fetch is an open (the person opened the
//! email; counted apart, as `proxyOpens`); a scanner's is a machine open; a known scanner's
//! click, or any click within `click_grace` of the picks being frozen, is an ignored click. Every
//! such request is still answered in full (an image, a redirect): only the counting differs.

/// Who fetched or followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visitor {
    Person,
    /// An image proxy that fetches when the person opens the email (counted apart).
    ImageProxy,
    /// A link scanner, crawler or script.
    Scanner,
}

const PROXIES: &[&str] = &["googleimageproxy", "yahoomailproxy", "ymailproxy"];
const SCANNERS: &[&str] = &[
    "bot",
    "crawler",
    "spider",
    "scanner",
    "proofpoint",
    "mimecast",
    "barracuda",
    "safelinks",
    "python-requests",
    "curl/",
    "wget/",
    "go-http-client",
    "headlesschrome",
];

/// Apple Mail Privacy Protection's prefetch at delivery: Apple's proxies, with a user agent
/// of nothing but `Mozilla/5.0`. Counted as an open as before, never as a person's.
pub fn is_apple_prefetch(user_agent: &str) -> bool {
    user_agent.trim() == "Mozilla/5.0"
}

impl Visitor {
    /// A person's mail client, as far as it can be told (not a proxy, a scanner or Apple's
    /// prefetch): what an experiment counts.
    pub fn is_person(user_agent: &str) -> bool {
        Self::from_user_agent(user_agent) == Self::Person && !is_apple_prefetch(user_agent)
    }

    pub fn from_user_agent(user_agent: &str) -> Self {
        let ua = user_agent.to_ascii_lowercase();
        if PROXIES.iter().any(|p| ua.contains(p)) {
            Self::ImageProxy
        } else if ua.trim().is_empty() || SCANNERS.iter().any(|s| ua.contains(s)) {
            Self::Scanner
        } else {
            Self::Person
        }
    }
}

/// What a request on a link counts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClickVerdict {
    Counted,
    /// HEAD: a scanner checking the link.
    Head,
    /// A known scanner's user agent.
    Scanner,
    /// Within the grace after the picks were frozen: a scanner at delivery.
    TooSoon,
}

impl ClickVerdict {
    pub fn decide(
        method: &str,
        visitor: Visitor,
        frozen_at_ms: u64,
        now_ms: u64,
        grace_ms: u64,
    ) -> Self {
        if method.eq_ignore_ascii_case("HEAD") {
            Self::Head
        } else if visitor == Visitor::Scanner {
            Self::Scanner
        } else if now_ms < frozen_at_ms.saturating_add(grace_ms) {
            Self::TooSoon
        } else {
            Self::Counted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_people_proxies_and_scanners_apart() {
        let chrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";
        assert_eq!(Visitor::from_user_agent(chrome), Visitor::Person);
        assert_eq!(
            Visitor::from_user_agent("Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)"),
            Visitor::ImageProxy
        );
        assert_eq!(
            Visitor::from_user_agent("YahooMailProxy; https://help.yahoo.com"),
            Visitor::ImageProxy
        );
        for ua in [
            "",
            "curl/8.5",
            "Mozilla/5.0 (compatible; Barracuda)",
            "python-requests/2.31",
            "Mozilla/5.0 HeadlessChrome/120",
        ] {
            assert_eq!(Visitor::from_user_agent(ua), Visitor::Scanner, "{ua}");
        }
    }

    #[test]
    fn clicks_count_after_the_grace_and_never_for_head_or_scanners() {
        let grace = 10_000;
        assert_eq!(
            ClickVerdict::decide("GET", Visitor::Person, 1_000, 11_000, grace),
            ClickVerdict::Counted
        );
        assert_eq!(
            ClickVerdict::decide("GET", Visitor::Person, 1_000, 10_999, grace),
            ClickVerdict::TooSoon
        );
        assert_eq!(
            ClickVerdict::decide("HEAD", Visitor::Person, 0, 99_999, grace),
            ClickVerdict::Head
        );
        assert_eq!(
            ClickVerdict::decide("GET", Visitor::Scanner, 0, 99_999, grace),
            ClickVerdict::Scanner
        );
        assert_eq!(
            ClickVerdict::decide("GET", Visitor::ImageProxy, 0, 99_999, grace),
            ClickVerdict::Counted
        );
    }
}

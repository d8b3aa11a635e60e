//! One-click unsubscribe links (RFC 8058): each email carries a URL whose token names the
//! list, the campaign and the user, signed with HMAC-SHA256 under a secret key. The
//! Unsubscribe function accepts only tokens it can verify, so a forged, altered or other
//! user's token changes nothing.
//!
//! Token: `base64url(payload) "." base64url(mac)`, payload
//! `v2\n{list}\n{campaign}\n{topic}\n{user}`: the topic is the campaign's, the one a
//! one-click unsubscribe leaves. Tokens from before topics (`v1\n{list}\n{campaign}\n{user}`)
//! still verify, as tokens of the weekly topic (the only kind of email there was).
//! The secret holds one or more keys separated by whitespace: the first signs, every one
//! verifies, so a key can be rotated without breaking the links already sent.

use super::signing::{signing_keys, KeyError, MAX_TOKEN_BYTES};
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::messages::weekly_topic;
use crate::domain::topics::TopicId;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{KeyInit, Mac};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const VERSION: &str = "v2";
const VERSION_BEFORE_TOPICS: &str = "v1";

/// Whose subscription a verified token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    pub list: String,
    pub campaign_id: CampaignId,
    /// The campaign's topic.
    pub topic: TopicId,
    pub user_id: String,
}

impl Subscription {
    /// The send record of the email the link came in.
    pub fn key(&self) -> SendKey {
        SendKey::new(self.user_id.clone(), self.campaign_id.clone())
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is malformed: {0}")]
    Malformed(&'static str),
    #[error("the token's signature does not match")]
    BadSignature,
    #[error("the token is for another list")]
    OtherList,
}

/// Signs and verifies unsubscribe tokens for one list.
#[derive(Clone)]
pub struct Signer {
    keys: Vec<Vec<u8>>,
    list: String,
}

impl std::fmt::Debug for Signer {
    // The keys are secret: never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("keys", &self.keys.len())
            .field("list", &self.list)
            .finish()
    }
}

/// Checks the base URL links are made from (the Unsubscribe function's URL).
pub fn check_base_url(base_url: &str) -> Result<(), KeyError> {
    let ok = (base_url.starts_with("https://") || base_url.starts_with("http://"))
        && base_url.len() > "https://".len()
        && !base_url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "\"'<>#".contains(c));
    if ok {
        Ok(())
    } else {
        Err(KeyError::BadBaseUrl(base_url.to_owned()))
    }
}

/// Checks a list name (it is part of every token).
pub fn check_list(list: &str) -> Result<(), KeyError> {
    let ok = !list.is_empty()
        && list.len() <= 64
        && list
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(KeyError::BadList(list.to_owned()))
    }
}

/// The link for one email: the base URL with `token=` (the token is URL-safe as it is).
pub fn link(base_url: &str, token: &str) -> String {
    let separator = if base_url.contains('?') { '&' } else { '?' };
    format!("{base_url}{separator}token={token}")
}

/// Whether a link is one of `link`'s (the preference centre or a topic's leave): its query
/// carries `token=`. A click on it is no sign of interest in the email's content.
pub fn is_preference_link(url: &str) -> bool {
    url.split_once('?')
        .is_some_and(|(_, query)| query.split('&').any(|pair| pair.starts_with("token=")))
}

/// The email's link that leaves its topic: the page asks to confirm (a GET changes nothing).
pub fn leave_link(link: &str) -> String {
    format!("{link}&leave=1")
}

fn mac(key: &[u8], payload: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(payload);
    mac
}

impl Signer {
    pub fn new(secret: &str, list: &str) -> Result<Self, KeyError> {
        let keys = signing_keys(secret)?;
        check_list(list)?;
        Ok(Self {
            keys,
            list: list.to_owned(),
        })
    }

    /// The sealer of open-time content's slot tokens, under keys derived from these.
    pub fn slot_sealer(&self) -> crate::domain::open_content::SlotSealer {
        crate::domain::open_content::SlotSealer::from_keys(&self.keys)
    }

    pub fn list(&self) -> &str {
        &self.list
    }

    /// The token of `user_id`'s email in `campaign_id`, a campaign of `topic`.
    pub fn token(&self, campaign_id: &CampaignId, topic: &TopicId, user_id: &str) -> String {
        let payload = format!(
            "{VERSION}\n{}\n{campaign_id}\n{topic}\n{user_id}",
            self.list
        );
        let signature = mac(&self.keys[0], payload.as_bytes())
            .finalize()
            .into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(signature)
        )
    }

    /// Whose subscription the token names, if one of the keys signed it for this list.
    pub fn verify(&self, token: &str) -> Result<Subscription, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::Malformed("too long"));
        }
        let (payload, signature) = token
            .split_once('.')
            .ok_or(TokenError::Malformed("no signature"))?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed("payload is not base64url"))?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed("signature is not base64url"))?;
        // Constant-time comparison, against every key (rotation).
        if !self
            .keys
            .iter()
            .any(|key| mac(key, &payload).verify_slice(&signature).is_ok())
        {
            return Err(TokenError::BadSignature);
        }
        let payload = String::from_utf8(payload)
            .map_err(|_| TokenError::Malformed("payload is not UTF-8"))?;
        let (list, campaign, topic, user) = match payload.split_once('\n') {
            Some((VERSION, rest)) => match rest.splitn(4, '\n').collect::<Vec<_>>()[..] {
                [list, campaign, topic, user] => (
                    list,
                    campaign,
                    TopicId::parse(topic).map_err(|_| TokenError::Malformed("bad topic"))?,
                    user,
                ),
                _ => return Err(TokenError::Malformed("unknown payload layout")),
            },
            Some((VERSION_BEFORE_TOPICS, rest)) => {
                match rest.splitn(3, '\n').collect::<Vec<_>>()[..] {
                    [list, campaign, user] => (list, campaign, weekly_topic(), user),
                    _ => return Err(TokenError::Malformed("unknown payload layout")),
                }
            }
            _ => return Err(TokenError::Malformed("unknown payload layout")),
        };
        if list != self.list {
            return Err(TokenError::OtherList);
        }
        let campaign_id =
            CampaignId::parse(campaign).map_err(|_| TokenError::Malformed("bad campaign id"))?;
        crate::domain::messages::check_user_id(user)
            .map_err(|_| TokenError::Malformed("bad user id"))?;
        Ok(Subscription {
            list: list.to_owned(),
            campaign_id,
            topic,
            user_id: user.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";
    const OTHER_KEY: &str = "fedcba9876543210fedcba9876543210";

    fn links(secret: &str) -> Signer {
        Signer::new(secret, "weekly-digest").unwrap()
    }

    fn campaign() -> CampaignId {
        CampaignId::parse("weekly-2026-W47").unwrap()
    }

    fn digest() -> TopicId {
        TopicId::parse("digest").unwrap()
    }

    #[test]
    fn a_token_names_its_user_and_campaign() {
        let l = links(KEY);
        let url = link(
            "https://u.example/",
            &l.token(&campaign(), &digest(), "u0000003"),
        );
        let token = url.strip_prefix("https://u.example/?token=").unwrap();
        assert!(token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
        let s = l.verify(token).unwrap();
        assert_eq!(s.user_id, "u0000003");
        assert_eq!(s.campaign_id, campaign());
        assert_eq!(s.list, "weekly-digest");
        assert_eq!(s.topic, digest());
    }

    #[test]
    fn a_token_scopes_one_topic_and_links_from_before_topics_mean_the_weekly_one() {
        let l = links(KEY);
        let news = TopicId::parse("product-news").unwrap();
        let token = l.token(&campaign(), &news, "u1");
        assert_eq!(l.verify(&token).unwrap().topic, news);
        // The topic is signed: another topic in the payload breaks the signature.
        let (_, signature) = token.split_once('.').unwrap();
        let swapped = URL_SAFE_NO_PAD.encode("v2\nweekly-digest\nweekly-2026-W47\ntips\nu1");
        assert_eq!(
            l.verify(&format!("{swapped}.{signature}")),
            Err(TokenError::BadSignature)
        );
        // A v1 token (emails sent before topics) signed by this deployment.
        let payload = "v1\nweekly-digest\nweekly-2026-W47\nu1";
        let mac = mac(KEY.as_bytes(), payload.as_bytes())
            .finalize()
            .into_bytes();
        let old = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(mac)
        );
        let s = l.verify(&old).unwrap();
        assert_eq!((s.topic, s.user_id.as_str()), (digest(), "u1"));
    }

    #[test]
    fn forged_altered_and_other_users_tokens_are_refused() {
        let l = links(KEY);
        let token = l.token(&campaign(), &digest(), "u1");
        let (payload, signature) = token.split_once('.').unwrap();
        // Another user's payload with this user's signature.
        let other = l.token(&campaign(), &digest(), "u2");
        let other_payload = other.split_once('.').unwrap().0;
        assert_eq!(
            l.verify(&format!("{other_payload}.{signature}")),
            Err(TokenError::BadSignature)
        );
        // Signed with a key the server does not hold.
        let forged = links(OTHER_KEY).token(&campaign(), &digest(), "u1");
        assert_eq!(l.verify(&forged), Err(TokenError::BadSignature));
        // One character of the signature changed.
        let mut altered = signature.to_owned();
        altered.replace_range(0..1, if altered.starts_with('A') { "B" } else { "A" });
        assert_eq!(
            l.verify(&format!("{payload}.{altered}")),
            Err(TokenError::BadSignature)
        );
        for junk in ["", ".", "abc", "a.b.c", &"x".repeat(5000)] {
            assert!(l.verify(junk).is_err(), "{junk}");
        }
        // Same key, another list.
        let weekly = Signer::new(KEY, "product-news").unwrap();
        assert_eq!(
            l.verify(&weekly.token(&campaign(), &digest(), "u1")),
            Err(TokenError::OtherList)
        );
    }

    #[test]
    fn rotation_keeps_old_links_working() {
        let old = links(OTHER_KEY).token(&campaign(), &digest(), "u1");
        let rotated = links(&format!("{KEY}\n{OTHER_KEY}"));
        assert_eq!(rotated.verify(&old).unwrap().user_id, "u1");
        let new = rotated.token(&campaign(), &digest(), "u1");
        assert!(links(KEY).verify(&new).is_ok(), "the first key signs");
    }

    #[test]
    fn refuses_weak_keys_and_bad_urls() {
        assert_eq!(
            Signer::new("short", "l").unwrap_err(),
            KeyError::TooShort(5)
        );
        assert_eq!(Signer::new(" \n", "l").unwrap_err(), KeyError::Empty);
        for url in [
            "ftp://x/",
            "https://",
            "https://u/\"><script>",
            "https://u/ x",
        ] {
            assert!(matches!(
                check_base_url(url).unwrap_err(),
                KeyError::BadBaseUrl(_)
            ));
        }
        assert!(check_base_url("https://abc.lambda-url.us-east-1.on.aws/").is_ok());
        assert!(matches!(
            Signer::new(KEY, "Weekly Digest").unwrap_err(),
            KeyError::BadList(_)
        ));
        assert!(link("https://u/x?lang=en", "t").starts_with("https://u/x?lang=en&token=t"));
        assert!(!format!("{:?}", links(KEY)).contains(KEY));
    }
}

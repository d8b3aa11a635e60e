//! Slot tokens: `base64url(tag || ciphertext)`, a deterministic authenticated encryption
//! (SIV over HMAC-SHA256) of `p2\n{campaign}\n{slot}\n{language}\n{user}` (the language
//! the email was written in, which its cards speak; a `p1` token, sealed before cards had a
//! language, has no such field and opens as English, as those emails' cards were). The tag is the first 16 bytes
//! of an HMAC of the plaintext; the ciphertext is the plaintext XORed with an HMAC keystream
//! seeded by the tag. So the URL names the email without showing whose it is, a changed
//! byte anywhere is refused, and the same slot of the same email always has the same URL.
//! Keys are derived from the unsubscribe signing secret (each of its keys verifies: rotation
//! works as for unsubscribe links), under labels of their own, so neither kind of token can
//! stand for the other. A third derived key makes each recipient's `Mark` on a pick's
//! sketches (`people`): a keyed hash, so that the table alone cannot be tested for anyone.

use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::card::Language;
use crate::domain::open_content::people::Mark;
use crate::domain::signing::{signing_keys, KeyError, MAX_TOKEN_BYTES};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{KeyInit, Mac};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const VERSION: &str = "p2";
/// Tokens in sent emails from before the language: still opened.
const VERSION_1: &str = "p1";
const TAG_BYTES: usize = 16;
/// Slots per email: enough for a row of picks, few enough that one email's requests stay few.
pub const MAX_SLOTS: u8 = 6;

/// The slot of one email a verified token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRef {
    pub campaign_id: CampaignId,
    pub user_id: String,
    /// 0-based.
    pub slot: u8,
    /// The email's language: its cards' captions.
    pub language: Language,
}

impl SlotRef {
    /// The send record of the email the slot is in (its picks are keyed the same way).
    pub fn email(&self) -> SendKey {
        SendKey::new(self.user_id.clone(), self.campaign_id.clone())
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotTokenError {
    #[error("the slot token is malformed: {0}")]
    Malformed(&'static str),
    #[error("the slot token was not sealed by this deployment, or was altered")]
    BadSeal,
}

#[derive(Clone)]
struct Keys {
    mac: Vec<u8>,
    encryption: Vec<u8>,
    people: Vec<u8>,
}

/// Seals and opens slot tokens.
#[derive(Clone)]
pub struct SlotSealer {
    keys: Vec<Keys>,
}

impl std::fmt::Debug for SlotSealer {
    // The keys are secret: never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotSealer")
            .field("keys", &self.keys.len())
            .finish()
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac
}

fn keystream_xor(key: &[u8], tag: &[u8], data: &mut [u8]) {
    for (block, chunk) in data.chunks_mut(32).enumerate() {
        let counter = (block as u32).to_be_bytes();
        let stream = hmac(key, &[tag, &counter]).finalize().into_bytes();
        for (byte, k) in chunk.iter_mut().zip(stream.iter()) {
            *byte ^= k;
        }
    }
}

impl SlotSealer {
    /// From the unsubscribe signing secret (one or more keys, the first seals).
    pub fn new(secret: &str) -> Result<Self, KeyError> {
        Ok(Self::from_keys(&signing_keys(secret)?))
    }

    /// From the signing keys themselves (`unsubscribe_link::Signer::slot_sealer`).
    pub fn from_keys(keys: &[Vec<u8>]) -> Self {
        let keys = keys
            .iter()
            .map(|key| Keys {
                mac: hmac(key, &[b"mailflow open-content mac v1"])
                    .finalize()
                    .into_bytes()
                    .to_vec(),
                encryption: hmac(key, &[b"mailflow open-content encryption v1"])
                    .finalize()
                    .into_bytes()
                    .to_vec(),
                people: hmac(key, &[b"mailflow open-content people v1"])
                    .finalize()
                    .into_bytes()
                    .to_vec(),
            })
            .collect();
        Self { keys }
    }

    pub fn seal(&self, slot: &SlotRef) -> String {
        let keys = &self.keys[0];
        let mut data = format!(
            "{VERSION}\n{}\n{}\n{}\n{}",
            slot.campaign_id,
            slot.slot,
            slot.language.code(),
            slot.user_id
        )
        .into_bytes();
        let tag = hmac(&keys.mac, &[&data]).finalize().into_bytes();
        let tag = &tag[..TAG_BYTES];
        keystream_xor(&keys.encryption, tag, &mut data);
        let mut token = tag.to_vec();
        token.extend_from_slice(&data);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// The mark `user` makes on the sketches of `item` in `campaign` (`people`): the same
    /// for every click of theirs, independent from one pick to another (a keyed hash under
    /// the sealing key: a key rotation during a campaign may count someone twice).
    pub fn mark(&self, campaign: &CampaignId, item: &str, user: &str) -> Mark {
        let digest = hmac(
            &self.keys[0].people,
            &[
                campaign.as_str().as_bytes(),
                b"\n",
                item.as_bytes(),
                b"\n",
                user.as_bytes(),
            ],
        )
        .finalize()
        .into_bytes();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        Mark::from_hash(u64::from_le_bytes(first))
    }

    /// The slot a token names, if one of the keys sealed it.
    pub fn open(&self, token: &str) -> Result<SlotRef, SlotTokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(SlotTokenError::Malformed("too long"));
        }
        let raw = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| SlotTokenError::Malformed("not base64url"))?;
        if raw.len() <= TAG_BYTES {
            return Err(SlotTokenError::Malformed("too short"));
        }
        let (tag, sealed) = raw.split_at(TAG_BYTES);
        let plain = self
            .keys
            .iter()
            .find_map(|keys| {
                let mut data = sealed.to_vec();
                keystream_xor(&keys.encryption, tag, &mut data);
                // Constant-time comparison of the tag.
                hmac(&keys.mac, &[&data])
                    .verify_truncated_left(tag)
                    .is_ok()
                    .then_some(data)
            })
            .ok_or(SlotTokenError::BadSeal)?;
        let plain = String::from_utf8(plain).map_err(|_| SlotTokenError::Malformed("not UTF-8"))?;
        let mut fields = plain.splitn(4, '\n');
        let (Some(version), Some(campaign), Some(slot), Some(rest)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(SlotTokenError::Malformed("unknown layout"));
        };
        let (language, user) = match version {
            VERSION_1 => (Language::En, rest),
            VERSION => {
                let (code, user) = rest
                    .split_once('\n')
                    .ok_or(SlotTokenError::Malformed("unknown layout"))?;
                let language = Language::from_code(code)
                    .ok_or(SlotTokenError::Malformed("unknown language"))?;
                (language, user)
            }
            _ => return Err(SlotTokenError::Malformed("unknown layout")),
        };
        let campaign_id = CampaignId::parse(campaign)
            .map_err(|_| SlotTokenError::Malformed("bad campaign id"))?;
        let slot = slot
            .parse::<u8>()
            .ok()
            .filter(|s| *s < MAX_SLOTS)
            .ok_or(SlotTokenError::Malformed("bad slot"))?;
        crate::domain::messages::check_user_id(user)
            .map_err(|_| SlotTokenError::Malformed("bad user id"))?;
        Ok(SlotRef {
            campaign_id,
            user_id: user.to_owned(),
            slot,
            language,
        })
    }
}

/// The three URLs of one slot, as the email carries them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotUrls {
    /// The pick's card (an image).
    pub image: String,
    /// The pick's live badge (an image, answered with a redirect).
    pub badge: String,
    /// The pick's page, through the click counter.
    pub link: String,
}

impl SlotUrls {
    /// The URLs of every slot of one email in `language`, on the OpenContent function's base
    /// URL.
    pub fn for_email(
        sealer: &SlotSealer,
        base_url: &str,
        campaign_id: &CampaignId,
        user_id: &str,
        language: Language,
        slots: u8,
    ) -> Vec<SlotUrls> {
        let base = base_url.trim_end_matches('/');
        (0..slots.min(MAX_SLOTS))
            .map(|slot| {
                let token = sealer.seal(&SlotRef {
                    campaign_id: campaign_id.clone(),
                    user_id: user_id.to_owned(),
                    slot,
                    language,
                });
                SlotUrls {
                    image: format!("{base}/pick?t={token}"),
                    badge: format!("{base}/badge?t={token}"),
                    link: format!("{base}/go?t={token}"),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";
    const OTHER: &str = "fedcba9876543210fedcba9876543210";

    fn slot(user: &str, slot: u8) -> SlotRef {
        SlotRef {
            campaign_id: CampaignId::parse("weekly-2026-W47").unwrap(),
            user_id: user.into(),
            slot,
            language: Language::Fr,
        }
    }

    #[test]
    fn a_token_opens_to_its_slot_and_shows_nothing_in_clear() {
        let s = SlotSealer::new(KEY).unwrap();
        for user in [
            "u1",
            "oid:65a1f0c2e4b0a1b2c3d4e5f6",
            "Zoë\u{1F600}",
            &"x".repeat(512),
        ] {
            let token = s.seal(&slot(user, 2));
            assert!(token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)));
            assert_eq!(s.open(&token).unwrap(), slot(user, 2));
            let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
            assert!(!String::from_utf8_lossy(&raw).contains("weekly"));
            assert!(user.len() < 3 || !String::from_utf8_lossy(&raw).contains(user));
        }
        // Deterministic: the same slot always has the same URL; another slot another one.
        assert_eq!(s.seal(&slot("u1", 0)), s.seal(&slot("u1", 0)));
        assert_ne!(s.seal(&slot("u1", 0)), s.seal(&slot("u1", 1)));
    }

    #[test]
    fn tampered_foreign_and_junk_tokens_are_refused() {
        let s = SlotSealer::new(KEY).unwrap();
        let token = s.seal(&slot("u1", 0));
        let mut raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        // Every single bit flipped anywhere is refused.
        for i in 0..raw.len() {
            raw[i] ^= 1;
            assert_eq!(
                s.open(&URL_SAFE_NO_PAD.encode(&raw)),
                Err(SlotTokenError::BadSeal),
                "byte {i}"
            );
            raw[i] ^= 1;
        }
        let foreign = SlotSealer::new(OTHER).unwrap().seal(&slot("u1", 0));
        assert_eq!(s.open(&foreign), Err(SlotTokenError::BadSeal));
        for junk in ["", "abc", "!!!!", &"A".repeat(3000)] {
            assert!(s.open(junk).is_err(), "{junk}");
        }
        // An unsubscribe token is no slot token.
        let unsubscribe = crate::domain::unsubscribe_link::Signer::new(KEY, "weekly-digest")
            .unwrap()
            .token(
                &slot("u1", 0).campaign_id,
                &crate::domain::messages::weekly_topic(),
                "u1",
            );
        assert!(s.open(&unsubscribe).is_err());
    }

    /// A `p1` token as sealed before tokens carried a language (the same construction).
    fn seal_v1(secret: &str, slot: &SlotRef) -> String {
        let keys = &SlotSealer::new(secret).unwrap().keys[0];
        let mut data =
            format!("p1\n{}\n{}\n{}", slot.campaign_id, slot.slot, slot.user_id).into_bytes();
        let tag = hmac(&keys.mac, &[&data]).finalize().into_bytes();
        keystream_xor(&keys.encryption, &tag[..TAG_BYTES], &mut data);
        let mut token = tag[..TAG_BYTES].to_vec();
        token.extend_from_slice(&data);
        URL_SAFE_NO_PAD.encode(token)
    }

    #[test]
    fn the_language_is_sealed_and_old_tokens_open_in_english() {
        let s = SlotSealer::new(KEY).unwrap();
        for language in Language::ALL {
            let slot = SlotRef {
                language,
                ..slot("Zoë\u{1F600}", 1)
            };
            assert_eq!(s.open(&s.seal(&slot)).unwrap(), slot);
        }
        // Each language its own URL: a French email's card is not an English one's.
        let fr = s.seal(&slot("u1", 0));
        let en = s.seal(&SlotRef {
            language: Language::En,
            ..slot("u1", 0)
        });
        assert_ne!(fr, en);
        // Sent before the language: the same slot, in English.
        let old = seal_v1(KEY, &slot("oid:65a1f0c2e4b0a1b2c3d4e5f6", 2));
        assert_eq!(
            s.open(&old).unwrap(),
            SlotRef {
                language: Language::En,
                ..slot("oid:65a1f0c2e4b0a1b2c3d4e5f6", 2)
            }
        );
        // A sealed layout with a language we do not have, or none, is refused.
        let keys = &s.keys[0];
        for plain in ["p2\nc1\n0\nxx\nu1", "p2\nc1\n0\nu1", "p3\nc1\n0\nen\nu1"] {
            let mut data = plain.as_bytes().to_vec();
            let tag = hmac(&keys.mac, &[&data]).finalize().into_bytes();
            keystream_xor(&keys.encryption, &tag[..TAG_BYTES], &mut data);
            let mut token = tag[..TAG_BYTES].to_vec();
            token.extend_from_slice(&data);
            assert!(
                matches!(
                    s.open(&URL_SAFE_NO_PAD.encode(token)),
                    Err(SlotTokenError::Malformed(_))
                ),
                "{plain:?}"
            );
        }
    }

    #[test]
    fn rotation_keeps_sent_slots_working() {
        let old = SlotSealer::new(OTHER).unwrap().seal(&slot("u1", 1));
        let rotated = SlotSealer::new(&format!("{KEY} {OTHER}")).unwrap();
        assert_eq!(rotated.open(&old).unwrap(), slot("u1", 1));
        assert!(SlotSealer::new(KEY)
            .unwrap()
            .open(&rotated.seal(&slot("u1", 1)))
            .is_ok());
        assert!(!format!("{rotated:?}").contains(KEY));
    }

    #[test]
    fn a_persons_mark_is_theirs_per_pick_and_keyed() {
        let s = SlotSealer::new(KEY).unwrap();
        let w47 = CampaignId::parse("weekly-2026-W47").unwrap();
        let w48 = CampaignId::parse("weekly-2026-W48").unwrap();
        assert_eq!(s.mark(&w47, "a", "u1"), s.mark(&w47, "a", "u1"));
        // Over many people, picks and campaigns the marks spread over every register.
        let registers: std::collections::HashSet<u8> = (0..2_000)
            .flat_map(|i| {
                let user = format!("u{i}");
                [
                    s.mark(&w47, "a", &user),
                    s.mark(&w47, "b", &user),
                    s.mark(&w48, "a", &user),
                ]
            })
            .map(|m| m.register)
            .collect();
        assert_eq!(registers.len(), 128);
        // Another deployment's key makes other marks.
        let other = SlotSealer::new(OTHER).unwrap();
        let differ = (0..50)
            .filter(|i| {
                let user = format!("u{i}");
                other.mark(&w47, "a", &user) != s.mark(&w47, "a", &user)
            })
            .count();
        assert!(differ > 40, "{differ}");
    }

    #[test]
    fn urls_for_every_slot() {
        let s = SlotSealer::new(KEY).unwrap();
        let id = CampaignId::parse("c1").unwrap();
        let urls = SlotUrls::for_email(&s, "https://x.example/", &id, "u1", Language::De, 3);
        assert_eq!(urls.len(), 3);
        assert!(urls[1].image.starts_with("https://x.example/pick?t="));
        assert!(urls[1].badge.starts_with("https://x.example/badge?t="));
        assert!(urls[1].link.starts_with("https://x.example/go?t="));
        let token = urls[2].link.split_once("t=").unwrap().1;
        assert_eq!(s.open(token).unwrap().slot, 2);
        assert_eq!(s.open(token).unwrap().language, Language::De);
        assert_eq!(
            SlotUrls::for_email(&s, "https://x", &id, "u1", Language::En, 99).len(),
            MAX_SLOTS as usize
        );
    }
}

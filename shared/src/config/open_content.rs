//! The settings of open-time content: the OpenContent function's, and the pick slots
//! CreateEmails puts in each email.

use super::*;
use crate::domain::open_content::slot_token::MAX_SLOTS;
use crate::domain::open_content::BadgeRule;
use std::time::Duration;

/// The pick slots of each email (CreateEmails).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickLinks {
    /// The OpenContent function's URL.
    pub base_url: String,
    pub slots: u8,
}

impl PickLinks {
    pub const VARS: &'static [&'static str] = &[var::OPEN_CONTENT_BASE_URL, var::PICK_SLOTS];

    /// None when OPEN_CONTENT_BASE_URL is empty or PICK_SLOTS is 0: emails carry no picks.
    pub fn from_source(src: &dyn Source) -> Result<Option<Self>, ConfigError> {
        let slots = slots(src)?;
        let Some(base_url) = value(src, var::OPEN_CONTENT_BASE_URL) else {
            return Ok(None);
        };
        crate::domain::unsubscribe_link::check_base_url(&base_url).map_err(|e| ConfigError {
            var: var::OPEN_CONTENT_BASE_URL,
            problem: e.to_string(),
        })?;
        Ok((slots > 0).then_some(Self { base_url, slots }))
    }
}

pub(super) fn slots(src: &dyn Source) -> Result<u8, ConfigError> {
    let slots: u8 = parsed(src, var::PICK_SLOTS, 3, "a whole number from 0 to 6")?;
    if slots > MAX_SLOTS {
        return Err(ConfigError {
            var: var::PICK_SLOTS,
            problem: format!("{slots} slots is more than the {MAX_SLOTS} an email may carry"),
        });
    }
    Ok(slots)
}

fn http_url(src: &dyn Source, var: &'static str) -> Result<String, ConfigError> {
    let url = required(src, var)?;
    crate::domain::unsubscribe_link::check_base_url(&url).map_err(|_| ConfigError {
        var,
        problem: format!("{url:?} must be an http(s) URL without spaces, quotes, <, > or #"),
    })?;
    Ok(url)
}

/// OpenContent: the pick images, badges and links (a Function URL).
#[derive(Clone, Debug)]
pub struct OpenContentFunctionConfig {
    pub mongo: MongoConfig,
    /// The slot tokens are sealed under keys derived from the unsubscribe signing secret.
    pub unsubscribe: UnsubscribeConfig,
    pub sends_table_name: String,
    pub open_content_table_name: String,
    /// Picks chosen per email (the slots CreateEmails puts in it).
    pub slots: u8,
    /// A pick's page, `{id}` replaced by the picked user's id (percent-encoded).
    pub profile_url_template: String,
    /// Where a slot without a pick links to.
    pub fallback_url: String,
    pub badge_rule: BadgeRule,
    pub click_grace: Duration,
    /// The first open's time to choose; then the fallback is frozen.
    pub compute_timeout: Duration,
    /// The subscription check's bound, and again the counting writes' (then not counted).
    pub count_timeout: Duration,
    pub follows_read: usize,
    /// Consent (parameter TrackOpensAndClicks): opens and clicks noted on each recipient's
    /// send record. Off: nothing per recipient about them is written (counts stay).
    pub track_opens_and_clicks: bool,
}

/// The counting's bound at most: twice this (the check, then the writes) and a badge's read
/// must leave the picks time within the request's deadline.
const MAX_COUNT_TIMEOUT_MS: u32 = 2_000;

impl OpenContentFunctionConfig {
    pub const VARS: &'static [&'static str] = &[
        var::SENDS_TABLE_NAME,
        var::OPEN_CONTENT_TABLE_NAME,
        var::PICK_SLOTS,
        var::PROFILE_URL_TEMPLATE,
        var::PICKS_FALLBACK_URL,
        var::HOT_MIN_MINUTES,
        var::HOT_WINDOW_MINUTES,
        var::CLICK_GRACE_SECONDS,
        var::PICK_COMPUTE_TIMEOUT_MS,
        var::COUNT_TIMEOUT_MS,
        var::PICK_FOLLOWS_READ,
        var::TRACK_OPENS_AND_CLICKS,
    ];

    pub fn from_source(src: &dyn Source) -> Result<Self, ConfigError> {
        let profile_url_template = http_url(src, var::PROFILE_URL_TEMPLATE)?;
        if !profile_url_template.contains("{id}") {
            return Err(ConfigError {
                var: var::PROFILE_URL_TEMPLATE,
                problem: format!(
                    "{profile_url_template:?} has no {{id}}: write where the user's id goes, e.g. https://example.com/u/{{id}}"
                ),
            });
        }
        let badge_rule = BadgeRule {
            hot_minutes: positive_u32(src, var::HOT_MIN_MINUTES, 3)?,
            window_minutes: positive_u32(src, var::HOT_WINDOW_MINUTES, 10)?,
        };
        if badge_rule.hot_minutes > badge_rule.window_minutes {
            return Err(ConfigError {
                var: var::HOT_MIN_MINUTES,
                problem: format!(
                    "{} minutes can never happen in a window of {} (HOT_WINDOW_MINUTES): make it at most the window",
                    badge_rule.hot_minutes, badge_rule.window_minutes
                ),
            });
        }
        let count_timeout_ms = positive_u32(src, var::COUNT_TIMEOUT_MS, 300)?;
        if count_timeout_ms > MAX_COUNT_TIMEOUT_MS {
            return Err(ConfigError {
                var: var::COUNT_TIMEOUT_MS,
                problem: format!(
                    "{count_timeout_ms} ms is too long: make it at most {MAX_COUNT_TIMEOUT_MS} (the counting writes and a badge's read must leave the picks time within a request's 7 s)"
                ),
            });
        }
        Ok(Self {
            mongo: MongoConfig::from_source(src)?,
            unsubscribe: UnsubscribeConfig::from_source(src)?,
            sends_table_name: required(src, var::SENDS_TABLE_NAME)?,
            open_content_table_name: required(src, var::OPEN_CONTENT_TABLE_NAME)?,
            slots: slots(src)?,
            profile_url_template,
            fallback_url: http_url(src, var::PICKS_FALLBACK_URL)?,
            badge_rule,
            click_grace: Duration::from_secs(u64::from(parsed(
                src,
                var::CLICK_GRACE_SECONDS,
                10u32,
                "a whole number of seconds",
            )?)),
            compute_timeout: Duration::from_millis(u64::from(positive_u32(
                src,
                var::PICK_COMPUTE_TIMEOUT_MS,
                1_500,
            )?)),
            count_timeout: Duration::from_millis(u64::from(count_timeout_ms)),
            follows_read: positive_u32(src, var::PICK_FOLLOWS_READ, 50)? as usize,
            track_opens_and_clicks: parsed(
                src,
                var::TRACK_OPENS_AND_CLICKS,
                false,
                "true or false",
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn source(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    const BASE: &[(&str, &str)] = &[
        ("MONGODB_URI", "mongodb://127.0.0.1:1/"),
        ("MONGODB_DATABASE", "app"),
        ("UNSUBSCRIBE_SECRET", "0123456789abcdef0123456789abcdef"),
        ("SENDS_TABLE_NAME", "sends"),
        ("OPEN_CONTENT_TABLE_NAME", "open"),
        ("PROFILE_URL_TEMPLATE", "https://example.com/u/{id}"),
        ("PICKS_FALLBACK_URL", "https://example.com/followers"),
    ];

    fn with(extra: &[(&str, &str)]) -> Result<OpenContentFunctionConfig, ConfigError> {
        let mut pairs = BASE.to_vec();
        pairs.extend_from_slice(extra);
        OpenContentFunctionConfig::from_source(&source(&pairs))
    }

    #[test]
    fn defaults_and_refusals_name_the_variable() {
        let c = with(&[]).unwrap();
        assert_eq!(c.slots, 3);
        assert_eq!(c.badge_rule, BadgeRule::default());
        assert_eq!(c.click_grace, Duration::from_secs(10));
        assert_eq!(c.compute_timeout, Duration::from_millis(1_500));
        assert_eq!(c.count_timeout, Duration::from_millis(300));
        assert_eq!(
            with(&[("COUNT_TIMEOUT_MS", "2000")]).unwrap().count_timeout,
            Duration::from_secs(2)
        );
        assert!(!c.track_opens_and_clicks, "no consent unless asked");
        assert!(
            with(&[("TRACK_OPENS_AND_CLICKS", "true")])
                .unwrap()
                .track_opens_and_clicks
        );
        for (var, value) in [
            ("PROFILE_URL_TEMPLATE", "https://example.com/u/"),
            ("PROFILE_URL_TEMPLATE", "javascript:alert(1)/{id}"),
            ("PICKS_FALLBACK_URL", "ftp://x/"),
            ("PICK_SLOTS", "7"),
            ("PICK_SLOTS", "three"),
            ("HOT_MIN_MINUTES", "11"),
            ("HOT_WINDOW_MINUTES", "0"),
            ("CLICK_GRACE_SECONDS", "-1"),
            ("COUNT_TIMEOUT_MS", "0"),
            ("COUNT_TIMEOUT_MS", "2001"),
            ("TRACK_OPENS_AND_CLICKS", "yes"),
        ] {
            let err = with(&[(var, value)]).unwrap_err();
            assert_eq!(err.var, var, "{value}: {err}");
        }
    }

    #[test]
    fn create_emails_carries_picks_only_when_asked() {
        let links = |pairs: &[(&str, &str)]| PickLinks::from_source(&source(pairs));
        assert_eq!(links(&[]).unwrap(), None);
        assert_eq!(
            links(&[("OPEN_CONTENT_BASE_URL", "https://o.example/")]).unwrap(),
            Some(PickLinks {
                base_url: "https://o.example/".into(),
                slots: 3
            })
        );
        assert_eq!(
            links(&[
                ("OPEN_CONTENT_BASE_URL", "https://o.example/"),
                ("PICK_SLOTS", "0")
            ])
            .unwrap(),
            None
        );
        assert!(links(&[("OPEN_CONTENT_BASE_URL", "not a url")]).is_err());
    }
}

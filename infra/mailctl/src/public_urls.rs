//! The public URLs (Unsubscribe, OpenContent) and the open-time content behind them, as
//! `plan` and `status` show them: what the URLs need at the send rate against their reserved
//! concurrency, and what the pick slots counted (opens, clicks, frozen picks).

use mailflow::domain::open_content::OpenCounters;
use mailflow::domain::public_urls::{PublicUrlsCheck, JUNK_PER_SECOND};

/// Reserved environments from which `plan` says the account's concurrency must be raised:
/// an account has 1,000 unless raised, and Lambda keeps 100 of them unreserved.
const RESERVABLE_BY_DEFAULT: u32 = 900;

/// The plan's public URLs line: what each needs at the rate and has, and a warning for each
/// short.
pub fn describe_plan(urls: &PublicUrlsCheck, rate: f64) -> String {
    let mut out = format!(
        "public URLs at {rate}/s with {JUNK_PER_SECOND:.0} junk requests/s each: Unsubscribe needs {} environments (UnsubscribeConcurrency {}), OpenContent {} (OpenContentConcurrency {})\n",
        urls.unsubscribe.needed,
        urls.unsubscribe_concurrency,
        urls.open_content.needed,
        urls.open_content_concurrency,
    );
    for short in urls.short() {
        out.push_str(&format!(
            "{} is {} but the model needs {} at {rate}/s (first opens at delivery, scanners, one-clicks and junk; docs/open-time-content.md, Capacity): beyond it Lambda answers 429, so images and one-click unsubscribes would fail; raise it\n",
            short.parameter, short.configured, short.needed
        ));
    }
    let reserved = urls.unsubscribe.needed + urls.open_content.needed;
    if reserved > RESERVABLE_BY_DEFAULT {
        out.push_str(&format!(
            "the public URLs need {reserved} reserved environments at {rate}/s: more than an account's default concurrency lets you reserve ({RESERVABLE_BY_DEFAULT} of 1,000); ask AWS to raise it first\n"
        ));
    }
    out
}

/// `status`'s pick slots line, None while the slots counted nothing.
pub fn status_line(o: &OpenCounters) -> Option<String> {
    if o.picks_frozen + o.opens + o.proxy_opens + o.machine_opens + o.clicks + o.ignored_clicks == 0
    {
        return None;
    }
    Some(format!(
        "  pick slots: opened {} (+{} through image proxies, {} by machines) | clicks {} ({} unique, {} not counted: HEAD, scanners, at delivery) | picks frozen {} ({} fallback)",
        o.opens,
        o.proxy_opens,
        o.machine_opens,
        o.clicks,
        o.unique_clicks,
        o.ignored_clicks,
        o.picks_frozen,
        o.fallbacks,
    ))
}

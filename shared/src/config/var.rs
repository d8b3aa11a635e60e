//! Every variable the functions read, named once: the parsers of `config` and the `VARS` lists
//! (which `tests/consistency.rs` checks against template.yaml and the README's table) use
//! these, so a misspelt name is a compile error rather than a silently missing setting.

/// RateControl: SendEmail's batch size and memory, which its concurrency is sized by.
pub const SEND_EMAIL_BATCH_SIZE: &str = "SEND_EMAIL_BATCH_SIZE";
pub const SEND_EMAIL_MEMORY_MB: &str = "SEND_EMAIL_MEMORY_MB";
/// RateControl: the UUID of SendEmail's event source mapping on the emails queue.
pub const EMAILS_EVENT_SOURCE_MAPPING_ID: &str = "EMAILS_EVENT_SOURCE_MAPPING_ID";
/// RateControl: CreateEmails' batch size, memory and most environments, which its
/// concurrency is sized by, and the UUID of its event source mapping on the users queue.
pub const USERS_BATCH_SIZE: &str = "USERS_BATCH_SIZE";
pub const CREATE_EMAILS_MEMORY_MB: &str = "CREATE_EMAILS_MEMORY_MB";
pub const CREATE_EMAILS_MAX_CONCURRENCY: &str = "CREATE_EMAILS_MAX_CONCURRENCY";
pub const USERS_EVENT_SOURCE_MAPPING_ID: &str = "USERS_EVENT_SOURCE_MAPPING_ID";
/// RateControl: SesEvents' batch size and memory, which its concurrency is sized by (with
/// `TRACK_OPENS_AND_CLICKS`: the events per email), and the UUID of its event source mapping.
pub const SES_EVENTS_BATCH_SIZE: &str = "SES_EVENTS_BATCH_SIZE";
pub const SES_EVENTS_MEMORY_MB: &str = "SES_EVENTS_MEMORY_MB";
pub const SES_EVENTS_EVENT_SOURCE_MAPPING_ID: &str = "SES_EVENTS_EVENT_SOURCE_MAPPING_ID";
/// RateControl: the public URLs' reserved concurrency (template parameters
/// UnsubscribeConcurrency and OpenContentConcurrency), checked against what the send rate
/// needs (`domain::public_urls`; `mailctl plan` reads them here too).
pub const UNSUBSCRIBE_CONCURRENCY: &str = "UNSUBSCRIBE_CONCURRENCY";
pub const OPEN_CONTENT_CONCURRENCY: &str = "OPEN_CONTENT_CONCURRENCY";
/// Where checkpoints go when an audience needs another invocation
pub const CONTINUATION_QUEUE_URL: &str = "CONTINUATION_QUEUE_URL";
/// Stop reading this long before the deadline and continue from a checkpoint
pub const DEADLINE_MARGIN_SECONDS: &str = "DEADLINE_MARGIN_SECONDS";
/// The emails queue's `maxReceiveCount`: on a message's last receive, a send that cannot go
/// out records DEAD_LETTERED
pub const EMAILS_MAX_RECEIVE_COUNT: &str = "EMAILS_MAX_RECEIVE_COUNT";
/// Campaigns and their state (running, paused, cancelled): GetUsers registers a campaign
/// there; GetUsers, CreateEmails and SendEmail hold back a paused or cancelled one
pub const CAMPAIGNS_TABLE_NAME: &str = "CAMPAIGNS_TABLE_NAME";
/// The event source mappings of the continuation, users and emails queues (comma-separated
/// UUIDs): the reputation guard disables them to stop sending
pub const EVENT_SOURCE_MAPPING_IDS: &str = "EVENT_SOURCE_MAPPING_IDS";
/// The local time a scheduled campaign is delivered at in each user's zone (`HH:MM`);
/// empty: everyone at once
pub const LOCAL_SEND_TIME: &str = "LOCAL_SEND_TIME";
/// The IANA zone of users whose `timezone` is missing or unknown (local-time delivery)
pub const FALLBACK_TIME_ZONE: &str = "FALLBACK_TIME_ZONE";
/// A local time already passed when the campaign starts: `send-now`, `next-day` or `skip`
pub const PASSED_TIME_POLICY: &str = "PASSED_TIME_POLICY";
/// Users of local-time campaigns waiting for their send slot
pub const WAITING_TABLE_NAME: &str = "WAITING_TABLE_NAME";
/// The EventBridge Scheduler group of the one-time schedules that release each send slot
pub const RELEASE_SCHEDULE_GROUP: &str = "RELEASE_SCHEDULE_GROUP";
/// Where EventBridge Scheduler puts a slot's release it could not deliver (the schedule DLQ)
pub const RELEASE_DEAD_LETTER_ARN: &str = "RELEASE_DEAD_LETTER_ARN";
/// The role EventBridge Scheduler assumes to invoke GetUsers at a send slot
pub const RELEASE_SCHEDULER_ROLE_ARN: &str = "RELEASE_SCHEDULER_ROLE_ARN";
/// The function a send slot's schedules invoke (GetUsers), for SendEmail's quiet-hours holds
pub const RELEASE_FUNCTION_ARN: &str = "RELEASE_FUNCTION_ARN";
/// Email jobs (SendEmail uses it to set retry delays)
pub const EMAILS_QUEUE_URL: &str = "EMAILS_QUEUE_URL";
/// SendMessageBatch calls in flight
pub const ENQUEUE_CONCURRENCY: &str = "ENQUEUE_CONCURRENCY";
/// The longest content window a campaign may start with, in days
pub const MAX_WINDOW_DAYS: &str = "MAX_WINDOW_DAYS";
/// SendEmail's Timeout; must be below the visibility timeout
pub const FUNCTION_TIMEOUT_SECONDS: &str = "FUNCTION_TIMEOUT_SECONDS";
/// Margin added to the deadline for the lease
pub const LEASE_CLOCK_SKEW_SECONDS: &str = "LEASE_CLOCK_SKEW_SECONDS";
/// An email SES refuses with an error (not throttling) this many times is recorded FAILED
/// with the error, instead of retried until the DLQ; must be below
/// `EMAILS_MAX_RECEIVE_COUNT`
pub const MAX_SEND_ERRORS: &str = "MAX_SEND_ERRORS";
/// Database with `users` and `follows`
pub const MONGODB_DATABASE: &str = "MONGODB_DATABASE";
/// Connections per execution environment
pub const MONGODB_MAX_POOL_SIZE: &str = "MONGODB_MAX_POOL_SIZE";
/// The URI itself, used only when `MONGODB_URI_SECRET_ID` is unset (local tools; never set
/// by template.yaml)
pub const MONGODB_URI: &str = "MONGODB_URI";
/// Secrets Manager secret (name or ARN) whose value is the MongoDB URI, or JSON `{"uri":
/// "..."}`; read once at cold start, never logged
pub const MONGODB_URI_SECRET_ID: &str = "MONGODB_URI_SECRET_ID";
/// Records of one batch processed at once
pub const RECORD_CONCURRENCY: &str = "RECORD_CONCURRENCY";
/// TTL of ledger records
pub const RETENTION_DAYS: &str = "RETENTION_DAYS";
/// Backoff for throttled sends by receive count (last repeats)
pub const RETRY_DELAYS_SECONDS: &str = "RETRY_DELAYS_SECONDS";
/// Verified SES identity to send from
pub const SENDER_ADDRESS: &str = "SENDER_ADDRESS";
/// The exactly-once ledger (and the campaign analytics on its records)
pub const SENDS_TABLE_NAME: &str = "SENDS_TABLE_NAME";
/// Emails per second for the whole stack, shared by every SendEmail environment (the
/// account's SES maximum when that is lower)
pub const SEND_RATE_PER_SECOND: &str = "SEND_RATE_PER_SECOND";
/// This stack's part of the SES account's maximum send rate, in percent (two stacks on one
/// account: shares that add up to 100 at most)
pub const SES_QUOTA_SHARE_PERCENT: &str = "SES_QUOTA_SHARE_PERCENT";
/// Configuration set every email goes through (template.yaml creates it; it publishes the
/// events SesEvents reads)
pub const SES_CONFIGURATION_SET: &str = "SES_CONFIGURATION_SET";
/// Where the unsubscribe links point: the Unsubscribe function's URL (template.yaml), or
/// your own domain in front of it
pub const UNSUBSCRIBE_BASE_URL: &str = "UNSUBSCRIBE_BASE_URL";
/// The list a token unsubscribes from (`a-z 0-9 -`); a token for another list is refused
pub const UNSUBSCRIBE_LIST: &str = "UNSUBSCRIBE_LIST";
/// The key itself, used only when `UNSUBSCRIBE_SECRET_ID` is unset (local tools; never set
/// by template.yaml)
pub const UNSUBSCRIBE_SECRET: &str = "UNSUBSCRIBE_SECRET";
/// Secrets Manager secret with the HMAC key(s) of the unsubscribe tokens (template.yaml
/// generates it); several keys separated by spaces: the first signs, all verify
pub const UNSUBSCRIBE_SECRET_ID: &str = "UNSUBSCRIBE_SECRET_ID";
/// How many of a user's follows the pick choice reads at most (OpenContent)
pub const PICK_FOLLOWS_READ: &str = "PICK_FOLLOWS_READ";
/// How long the first open may take to choose an email's picks before the fallback is frozen
/// (milliseconds)
pub const PICK_COMPUTE_TIMEOUT_MS: &str = "PICK_COMPUTE_TIMEOUT_MS";
/// How long an OpenContent request waits for MongoDB's subscription check, and again for its
/// counting writes, before it answers without counting (milliseconds, at most 2,000)
pub const COUNT_TIMEOUT_MS: &str = "COUNT_TIMEOUT_MS";
/// Pick slots per email (CreateEmails puts this many in each email; 0: none)
pub const PICK_SLOTS: &str = "PICK_SLOTS";
/// Where a slot without a pick links to (an http(s) URL)
pub const PICKS_FALLBACK_URL: &str = "PICKS_FALLBACK_URL";
/// A pick's page: an http(s) URL with `{id}` where the picked user's id goes
pub const PROFILE_URL_TEMPLATE: &str = "PROFILE_URL_TEMPLATE";
/// Where the pick slots point: the OpenContent function's URL (CreateEmails; empty: no picks)
pub const OPEN_CONTENT_BASE_URL: &str = "OPEN_CONTENT_BASE_URL";
/// The table of frozen picks and click activity
pub const OPEN_CONTENT_TABLE_NAME: &str = "OPEN_CONTENT_TABLE_NAME";
/// K of the "hot" badge: clicked by at least this many people, in at least this many
/// distinct minutes of the window
pub const HOT_MIN_MINUTES: &str = "HOT_MIN_MINUTES";
/// M of the "hot" badge: the window, in minutes
pub const HOT_WINDOW_MINUTES: &str = "HOT_WINDOW_MINUTES";
/// A click this soon after an email's picks were frozen is a scanner's, not counted (seconds)
pub const CLICK_GRACE_SECONDS: &str = "CLICK_GRACE_SECONDS";
/// Consent: whether OpenContent notes opens and clicks on each recipient's send record
/// (`true`), or counts them for the campaign only (`false`, the default)
pub const TRACK_OPENS_AND_CLICKS: &str = "TRACK_OPENS_AND_CLICKS";
/// Where the audience goes
pub const USERS_QUEUE_URL: &str = "USERS_QUEUE_URL";
/// The emails queue's VisibilityTimeout (caps the lease)
pub const VISIBILITY_TIMEOUT_SECONDS: &str = "VISIBILITY_TIMEOUT_SECONDS";
/// The holdout group's default share of a campaign's audience, in percent (0-50; a start's
/// `holdoutPercent` overrides it)
pub const HOLDOUT_PERCENT: &str = "HOLDOUT_PERCENT";
/// A campaign's default deadline, in hours after its first start (0: none; a start's
/// `deadline` overrides it)
pub const CAMPAIGN_DEADLINE_HOURS: &str = "CAMPAIGN_DEADLINE_HOURS";
/// Frequency caps across campaigns, comma-separated: `1/16h`, `3/7d`, `2/1cd` (calendar days
/// in the user's zone), each optionally for topics (`3/7d:digest+product-news`); empty: none
pub const FREQUENCY_CAPS: &str = "FREQUENCY_CAPS";
/// Topics whose emails the frequency caps neither stop nor count (comma-separated ids)
pub const FREQUENCY_CAP_EXEMPT_TOPICS: &str = "FREQUENCY_CAP_EXEMPT_TOPICS";
/// Quiet hours in each user's zone, `HH:MM-HH:MM` (e.g. `21:00-08:00`); empty: none
pub const QUIET_HOURS: &str = "QUIET_HOURS";
/// What happens to an email due in the quiet hours: `defer` (to their end) or `skip`
pub const QUIET_HOURS_POLICY: &str = "QUIET_HOURS_POLICY";

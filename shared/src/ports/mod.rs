// Over 450 lines: every port's trait in one place, with the types that cross it, so that a
// stage's dependencies read together; the in-memory fakes are in `memory`.

//! Ports: the small interfaces the stages depend on, so that their decisions can be tested
//! in memory (`memory`, for unit tests) and faults injected around the real services. The
//! adapters implement them: `adapters::ses::SesMailer` (Mailer), `adapters::dynamo::
//! DynamoLedger` (SendLedger), `adapters::dynamo::SendRecords` (SendRecordNotes),
//! `adapters::sqs::SqsQueue` (OutgoingQueue, RetryQueue), `adapters::subscribers::
//! Subscribers` (SubscriberStore, UserStandings), `adapters::directory::MongoDirectory`
//! (UserDirectory),
//! `adapters::campaigns::CampaignsTable` (CampaignStates), `adapters::rate_item::RateItem`
//! (RateBucket), `adapters::event_sources::ConsumerMapping` (ConsumerScaling),
//! `adapters::waiting::WaitingTable` (WaitingRoom), `adapters::open_content::OpenContentTable`
//! (OpenContentStore), `adapters::picks::MongoPicks` (PickDirectory).

use crate::domain::campaign::{Campaign, CampaignId, Window};
use crate::domain::campaign_state::{CampaignRecord, CampaignState, StateChange};
use crate::domain::digest::{Enrichment, OddFollows};
use crate::domain::experiment::{Decision, Experiment, Tally};
use crate::domain::guardrails::{CampaignGuardrails, CapHistory, Skip};
use crate::domain::ledger::{
    Claim, ClaimOutcome, Engagement, LedgerError, LostClaim, Reclaim, SendKey, SendStatus,
};
use crate::domain::local_time::{
    LocalDelivery, LocalTimeCounts, SlotRelease, WaitingReport, ZoneField,
};
use crate::domain::topics::{ExclusionCounts, Preferences, Save, Standing, Topic, TopicId, Topics};
#[cfg(any(test, feature = "memory"))]
pub mod memory;
mod open_content;
use crate::domain::send_rate::{QuotaUnknown, SendQuota, SharedRate, Slots};
use crate::domain::user_id::UserId;
use futures::future::BoxFuture;
pub use open_content::{
    Activity, ContentStoreError, IndexCheck, OpenContentStore, PickDirectory, Rise,
};
use std::future::Future;
use std::time::Duration;

/// The sends ledger as SendEmail uses it (`crate::domain::ledger` describes the state machine).
/// Every write is conditional; a refused one reports what the record holds instead. The
/// frequency caps' items live in the same table (`CapLedger`).
pub trait SendLedger: CapLedger + Send + Sync {
    /// Claims the claim's key for one attempt: on no record, an IN_PROGRESS record whose
    /// lease has ended, a DEAD_LETTERED one, or a FAILED or CANCELLED one `reclaim` names.
    fn claim(
        &self,
        claim: &Claim,
        reclaim: Reclaim,
    ) -> impl Future<Output = Result<ClaimOutcome, LedgerError>> + Send;
    /// Counts a suppressed duplicate on a SENT record.
    fn note_duplicate(&self, key: &SendKey)
        -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// SENT with the SES message id (and, for a local-time email, how late it went), while
    /// this attempt holds the claim.
    fn mark_sent(
        &self,
        claim: &Claim,
        ses_message_id: &str,
        late_ms: Option<i64>,
    ) -> impl Future<Output = Marked> + Send;
    /// FAILED with the reason, while this attempt holds the claim.
    fn mark_failed(&self, claim: &Claim, reason: &str) -> impl Future<Output = Marked> + Send;
    /// Ends the lease now; `send_error` counts an error the service answered with.
    fn release(
        &self,
        claim: &Claim,
        reason: &str,
        send_error: bool,
    ) -> impl Future<Output = Marked> + Send;
    /// DEAD_LETTERED with the reason: the message's last receive ended without a send.
    fn mark_dead_lettered(
        &self,
        claim: &Claim,
        reason: &str,
    ) -> impl Future<Output = Marked> + Send;
    /// SKIPPED with a guardrail's reason, while this attempt holds the claim.
    fn mark_skipped(&self, claim: &Claim, skip: Skip) -> impl Future<Output = Marked> + Send;
    /// CANCELLED (the campaign was cancelled), unless the record is SENT or held by a live
    /// lease (that attempt's outcome stands). Whether it was written.
    fn cancel_send(
        &self,
        key: &SendKey,
        at_ms: u64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;
}

/// Each user's emails that count towards the frequency caps: one item per user in the sends
/// table, written only if no other campaign wrote it since it was read.
pub trait CapLedger: Send + Sync {
    fn cap_history(
        &self,
        user_id: &str,
    ) -> impl Future<Output = Result<CapHistory, LedgerError>> + Send;
    /// Writes `history` if the user's item is still at `history.version` (and bumps it);
    /// false when another write came first. Kept `keep_ms` after the write.
    fn write_cap_history(
        &self,
        user_id: &str,
        history: &CapHistory,
        keep_ms: i64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;
}

/// An experiment's results so far: each variant's tally from its send records. Boxed (a
/// trait object): GetUsers is given one without another type parameter.
pub trait ExperimentResults: Send + Sync {
    /// The test group's tallies (the rest is sent the winner, not tested).
    fn tallies<'a>(
        &'a self,
        campaign: &'a CampaignId,
        experiment: &'a Experiment,
    ) -> BoxFuture<'a, Result<std::collections::BTreeMap<String, Tally>, LedgerError>>;
}

/// The campaigns table as the pipeline's functions read it.
pub trait CampaignStates: Send + Sync {
    /// Whether the campaign may send now (paused or cancelled: no) and its guardrails.
    fn state(
        &self,
        campaign_id: &str,
    ) -> impl Future<Output = Result<CampaignState, LedgerError>> + Send;
    /// Records that GetUsers started the campaign (RUNNING, unless it has a state already),
    /// so that `mailctl` and the reputation guard know it, with the window, topic and
    /// guardrails it first started with; the record as it is now (a later start settles
    /// against it: `Campaign::settle`, `GuardrailRequest::settle`).
    /// An experiment is recorded only with the first start: a campaign started without one
    /// gets none (its record, without one, says so).
    fn register(
        &self,
        campaign: &Campaign,
        guardrails: &CampaignGuardrails,
        experiment: Option<&Experiment>,
        at_ms: u64,
    ) -> impl Future<Output = Result<CampaignRecord, LedgerError>> + Send;
    /// A later start gave another deadline: written, with when and what it replaced.
    fn move_deadline(
        &self,
        campaign: &CampaignId,
        guardrails: &CampaignGuardrails,
        from: Option<i64>,
        at_ms: u64,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// Records the experiment's decision unless one is recorded; the one recorded (the
    /// first write wins: a scheduled release and `mailctl experiment pick` may race).
    fn record_decision(
        &self,
        campaign: &CampaignId,
        decision: &Decision,
    ) -> impl Future<Output = Result<Decision, LedgerError>> + Send;
    /// Users of a run segment left out of the audience, by reason (written whole: a retried
    /// segment repeats them harmlessly).
    fn record_exclusions(
        &self,
        campaign: &CampaignId,
        segment: u32,
        counts: &ExclusionCounts,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
}

/// What the reputation guard pauses: every running campaign, and the consumers of the
/// campaign queues (Lambda's event source mappings).
pub trait SendingSwitch: Send + Sync {
    /// Stops every consumer of the campaign queues; messages stay where they are.
    fn stop_consumers(&self) -> impl Future<Output = Result<usize, ControlError>> + Send;
    /// The campaigns in state RUNNING.
    fn running_campaigns(&self) -> impl Future<Output = Result<Vec<String>, ControlError>> + Send;
    /// Pauses one campaign unless it is no longer running; whether it paused it.
    fn pause(
        &self,
        campaign_id: &str,
        change: &StateChange,
    ) -> impl Future<Output = Result<bool, ControlError>> + Send;
}

/// What the SES events and the Unsubscribe function note on existing send records; they
/// never create or claim one.
pub trait SendRecordNotes: Send + Sync {
    /// Notes `what` on the record (the first time is kept); the record's status, or None when
    /// there is no record.
    fn note(
        &self,
        key: &SendKey,
        what: Engagement,
        at_ms: u64,
    ) -> impl Future<Output = Result<Option<SendStatus>, LedgerError>> + Send;
    /// The record's status (a hint: the writes that act on it are conditional).
    fn status_of(
        &self,
        key: &SendKey,
    ) -> impl Future<Output = Result<Option<SendStatus>, LedgerError>> + Send;
    /// SES sent this email: an IN_PROGRESS or DEAD_LETTERED record becomes SENT. Whether it did.
    fn reconcile_sent(
        &self,
        key: &SendKey,
        ses_message_id: &str,
        at_ms: u64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;
}

/// One-click unsubscribes that MongoDB did not take in time, kept in the sends table (no
/// MongoDB needed) on an item of their own per user and topic (`userId`, `#left#<topic>`:
/// no campaign id holds a `#`), never expiring. CreateEmails leaves out of every campaign of
/// the topic a user whose leave stands, so the person gets no further email of that topic
/// whatever MongoDB says (docs/emails.md).
pub trait PendingLeaves: Send + Sync {
    /// The user of `key` left `topic` at `at_ms` (from the email of `key`); a later leave
    /// moves the time on.
    fn record_leave(
        &self,
        key: &SendKey,
        topic: &TopicId,
        at_ms: u64,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// The user chose `topic` again at `at_ms` (the preference centre's save, MongoDB
    /// answering): a leave recorded before then no longer stands. Nothing when there is none.
    fn rejoined(
        &self,
        user_id: &str,
        topic: &TopicId,
        at_ms: u64,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// Of `users`, those whose recorded leave of `topic` stands.
    fn standing_leaves(
        &self,
        users: &[String],
        topic: &TopicId,
    ) -> impl Future<Output = Result<std::collections::HashSet<String>, LedgerError>> + Send;
}

/// The sort key of a user's pending leave of `topic` in the sends table.
pub fn pending_leave_key(topic: &TopicId) -> String {
    format!("#left#{topic}")
}

/// Who may be emailed (MongoDB's users): unsubscribes and suppressions, each idempotent.
pub trait SubscriberStore: Send + Sync {
    /// The user of `key` leaves `list`, from the email of `key`.
    fn unsubscribe(
        &self,
        key: &SendKey,
        list: &str,
        at_ms: i64,
    ) -> impl Future<Output = Result<Change, StoreError>> + Send;
    /// The user of `key` leaves `topic` (a one-click unsubscribe, or the page's button),
    /// from the email of `key`; the first time is kept.
    fn leave_topic(
        &self,
        key: &SendKey,
        topic: &TopicId,
        via: ChangedVia,
        at_ms: i64,
    ) -> impl Future<Output = Result<Change, StoreError>> + Send;
    /// What the preference centre shows: the user's choices and stored locale (None: no
    /// such user).
    fn preferences(
        &self,
        user_id: &str,
        topics: &Topics,
    ) -> impl Future<Output = Result<Option<(Preferences, Option<String>)>, StoreError>> + Send;
    /// Writes a save of the preference centre (each changed topic, and a resubscribe),
    /// recording when and from the email of `key`.
    fn save_preferences(
        &self,
        key: &SendKey,
        save: &Save,
        at_ms: i64,
    ) -> impl Future<Output = Result<Change, StoreError>> + Send;
    /// The user of `key` is never emailed again, for what happened to the email of `key`.
    fn suppress(
        &self,
        key: &SendKey,
        reason: SuppressionReason,
        detail: &str,
        at_ms: i64,
    ) -> impl Future<Output = Result<Change, StoreError>> + Send;
}

/// One user's standing as their document says it now: SendEmail reads it again before it
/// sends an email that waited since it was rendered (`stages::send_email::Wanted`).
pub trait UserStandings: Send + Sync {
    /// Their standing for a campaign of `topic` (None: no such user).
    fn standing(
        &self,
        user_id: &str,
        topic: &TopicId,
    ) -> impl Future<Output = Result<Option<Standing>, StoreError>> + Send;
}

/// Who a campaign reaches and what each one's email says (MongoDB's users and follows):
/// what GetUsers and CreateEmails read.
pub trait UserDirectory: Send + Sync {
    type Audience: AudienceScan + 'static;
    /// The audience of a campaign of `topic` over `window` after `after` (a checkpoint): the
    /// users with at least one new follower whom the topic's audience rule lets in
    /// (`Standing::exclusion`), each once, in ascending id order (`UserId`'s order).
    fn audience(&self, window: &Window, topic: &Topic, after: Option<UserId>) -> Self::Audience;
    /// The window's follows whose followeeId or followerId no user can have: how many of
    /// each, and up to `limit` of the first kind described.
    fn odd_follows(
        &self,
        window: &Window,
        limit: i64,
    ) -> impl Future<Output = Result<OddFollows, StoreError>> + Send;
    /// One user's digest for `window`, read afresh, naming up to `shown` recent followers (or
    /// why they get none, the audience rule of `topic` among the reasons).
    fn enrich(
        &self,
        user_id: &UserId,
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> impl Future<Output = Result<Enrichment, StoreError>> + Send;
    /// `enrich` for several users of one window at once (an SQS batch), in their order; a
    /// failure fails them all (the caller then reads them one by one).
    fn enrich_many(
        &self,
        user_ids: &[UserId],
        window: &Window,
        topic: &Topic,
        shown: u32,
    ) -> impl Future<Output = Result<Vec<Enrichment>, StoreError>> + Send;
    /// Cold-start check that the queries' indexes exist (an error says how to create them).
    fn check_indexes(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The audience, one user at a time, never held in memory.
pub trait AudienceScan: Send {
    fn next(&mut self) -> impl Future<Output = Result<Option<AudienceMember>, StoreError>> + Send;
    /// The users with new followers left out so far, by reason.
    fn excluded(&self) -> &ExclusionCounts;
}

/// One user of the audience: their id, and their time zone field as the document holds it
/// (read by the same scan, so local-time delivery costs no extra read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudienceMember {
    pub id: UserId,
    pub zone: ZoneField,
}

/// What time it is, for decisions that depend on the time of day: the system clock on
/// Lambda, a clock the simulator controls locally (so that a day of local times runs in
/// minutes), never a mode.
pub trait Clock: Send + Sync {
    /// Now, as the campaign's decisions read it (slots, deadlines, quiet hours, starts).
    fn now_ms(&self) -> i64;
    /// Now, as durations are measured (how late an email went): the same instant on AWS.
    /// The simulator's clock jumps from slot to slot, and a jump is no lateness.
    fn wall_ms(&self) -> i64 {
        SystemClock.now_ms()
    }
}

/// The clock on Lambda (`runtime::clock`: the lab may make it follow tokio's paused clock).
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::domain::ledger::epoch_ms(crate::runtime::clock::now()) as i64
    }
}

/// Where a release of one send slot has got to: the shard, and the last user id released
/// in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePosition {
    pub shard: u8,
    pub after: Option<String>,
    /// Through the shards last to first (a sweep): a release still at work when its sweep
    /// comes (a big slot, a resume delivering both) goes first to last, so the two meet in
    /// one shard instead of enqueuing the whole slot twice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backwards: bool,
}

/// A page of a slot's waiting users (id, users-queue body), and where the next one starts.
pub type WaitingPage = (Vec<(String, String)>, Option<ReleasePosition>);

/// One of a slot's two one-time schedules: its release at the instant, or its sweep
/// (`SWEEP_AFTER_MS` later) that releases whoever the release did not find.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SlotSchedule {
    pub slot_ms: i64,
    pub sweep: bool,
}

impl SlotSchedule {
    pub fn fires_at_ms(self) -> i64 {
        if self.sweep {
            self.slot_ms + crate::domain::local_time::SWEEP_AFTER_MS
        } else {
            self.slot_ms
        }
    }
}

/// Users of local-time campaigns waiting for their send slot, and the one-time schedules
/// that release each slot (DynamoDB and EventBridge Scheduler on AWS).
pub trait WaitingRoom: Send + Sync {
    /// Keeps `users` (id, users-queue body) of `campaign` until `at_ms`. Idempotent: a user
    /// kept twice is kept once.
    fn hold(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: &[(String, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Makes sure a one-time schedule invokes `target_arn` with `event` at `at_ms`: creating
    /// one that exists already is success.
    fn schedule_release(
        &self,
        campaign: &CampaignId,
        schedule: SlotSchedule,
        target_arn: &str,
        event: &serde_json::Value,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Up to `limit` waiting users of the slot (id, body) from `from`, and where the next
    /// page starts (`None`: the slot is done).
    fn waiting(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        from: &ReleasePosition,
        limit: usize,
    ) -> impl Future<Output = Result<WaitingPage, StoreError>> + Send;
    /// Takes released (or dropped) users out of the slot: the waiting room holds exactly who
    /// is still waiting.
    fn let_go(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        user_ids: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Users still waiting in the slot (what a completed sweep left: `usersStranded`).
    fn count(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// The campaign's local-time delivery as its run started (a later resend reuses it).
    fn record_delivery(
        &self,
        campaign: &CampaignId,
        delivery: &LocalDelivery,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A run segment's counts, under the run (its `started_at_ms`) and the segment: written
    /// again by a retried segment, never added twice, and kept apart from other runs'.
    fn record_segment(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &LocalTimeCounts,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Users SendEmail handed back to the slot at the end of their quiet hours, added to
    /// the slot's count (a record handed back twice, after a retry, counts twice).
    fn record_quiet_holds(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A slot released: how many users, and when (the clock's time).
    fn record_release(
        &self,
        campaign: &CampaignId,
        release: &SlotRelease,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// What is recorded of the campaign's local-time delivery, with who is still waiting in
    /// each slot (`None`: not a local-time campaign).
    fn report(
        &self,
        campaign: &CampaignId,
    ) -> impl Future<Output = Result<Option<WaitingReport>, StoreError>> + Send;
}

/// Switching a campaign's sending failed: the campaigns table or Lambda's event source
/// mappings did not answer, or answered with an error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ControlError(pub String);

impl From<LedgerError> for ControlError {
    fn from(err: LedgerError) -> Self {
        ControlError(err.to_string())
    }
}

/// The subscriber store or the user directory did not answer, or answered with an error.
#[derive(Clone, Debug, thiserror::Error)]
#[error("MongoDB: {0}")]
pub struct StoreError(pub String);

/// What a change to a subscriber found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Made,
    /// Already so (a repeated request, a duplicate event).
    AlreadyDone,
    NoSuchUser,
}

/// Where a topic choice was made (recorded with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangedVia {
    /// A mail client's one-click unsubscribe (RFC 8058).
    OneClick,
    /// The preference centre.
    Page,
}

impl ChangedVia {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OneClick => "one-click",
            Self::Page => "page",
        }
    }
}

/// Why an address is never emailed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuppressionReason {
    /// A permanent (hard) bounce: the address does not exist or refuses mail.
    Bounce,
    /// The recipient marked the email as spam.
    Complaint,
}

impl SuppressionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bounce => "bounce",
            Self::Complaint => "complaint",
        }
    }
}

/// A write under a claim: done, refused because the claim was lost (with what the record
/// holds now), or failed.
pub type Marked = Result<Result<(), LostClaim>, LedgerError>;

/// The outgoing queue's batch contract (SQS SendMessageBatch): at most 10 entries and
/// 256 KiB in total; `batches` cuts a stage's bodies to fit.
pub const MAX_BATCH_ENTRIES: usize = 10;
pub const MAX_BATCH_BYTES: usize = 256 * 1024;

/// Splits bodies into SendMessageBatch-sized groups (by count and by bytes), keeping order.
pub fn batches(bodies: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, body) in bodies.iter().enumerate() {
        let full =
            i - start == MAX_BATCH_ENTRIES || (i > start && bytes + body.len() > MAX_BATCH_BYTES);
        if full {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += body.len();
    }
    if start < bodies.len() {
        out.push(start..bodies.len());
    }
    out
}

/// A queue the stages put messages on: the users queue and the continuation queue
/// (GetUsers), the emails queue (CreateEmails).
pub trait OutgoingQueue: Send + Sync {
    /// Up to `MAX_BATCH_ENTRIES` bodies (`MAX_BATCH_BYTES` in all) in one SendMessageBatch; entries the service reports as failed are
    /// sent again, and those that still fail are named in the error (never dropped silently).
    fn send_batch(
        &self,
        bodies: &[String],
    ) -> impl Future<Output = Result<SendReport, QueueError>> + Send;
    /// `send_batch`, each message invisible for `delay_seconds` first (at most
    /// `MAX_DELAY_SECONDS`, SQS's limit).
    fn send_batch_delayed(
        &self,
        bodies: &[String],
        delay_seconds: u32,
    ) -> impl Future<Output = Result<SendReport, QueueError>> + Send;
}

/// SQS's longest message delay: 15 minutes.
pub const MAX_DELAY_SECONDS: u32 = 900;

/// A queue a stage consumes: when a record it returns comes back (SendEmail's emails queue,
/// GetUsers' continuation queue).
pub trait ConsumedQueue: Send + Sync {
    /// Makes a received message visible again after `delay` (SQS caps it at 12 hours).
    fn change_visibility(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// The queue a record came from, as SendEmail uses it: to set when a returned record comes
/// back, or to put it back as a fresh message.
pub trait RetryQueue: ConsumedQueue {
    /// Puts `body` on the queue again as a new message, invisible for `delay` (at most
    /// SQS's 15 minutes): its receive count starts again, so waiting costs no receive.
    fn requeue(
        &self,
        body: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
    /// Deletes a received message now (its copy is on the queue), rather than with the
    /// batch's response, which an invocation that times out never gives.
    fn delete(&self, receipt_handle: &str) -> impl Future<Output = Result<(), QueueError>> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue {queue}: {operation} failed: {detail}")]
    Call {
        queue: String,
        operation: &'static str,
        detail: String,
    },
    #[error(
        "queue {queue}: {count} entries still failed after {attempts} attempts (first: {first})"
    )]
    EntriesFailed {
        queue: String,
        attempts: u32,
        count: usize,
        first: String,
        /// Indexes (into the bodies given) of the entries that were not sent.
        unsent: Vec<usize>,
    },
}

/// What a batched send did: how many entries had to be sent again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    pub sent: usize,
    pub retried: usize,
}

/// One email as SendEmail hands it to the mail service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingEmail {
    pub to: String,
    pub subject: String,
    pub html: String,
    pub text: String,
    /// The ledger record's key, sent as the SES tags that tie its events back to it.
    pub key: SendKey,
    /// The one-click unsubscribe URL (RFC 8058), sent as List-Unsubscribe headers.
    pub unsubscribe_url: Option<String>,
}

/// Why a send did not go out, classified once by the adapter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Too many requests / sending rate exceeded: retry later with backoff.
    #[error("throttled: {0}")]
    Throttled(String),
    /// The account cannot send (sending paused, account suspended): stop the batch.
    #[error("sending stopped: {0}")]
    Stopped(String),
    /// The account's 24-hour sending quota is used up: no send goes before its rolling
    /// window lets one through, whatever the rate.
    #[error("24-hour quota used up: {0}")]
    DailyQuota(String),
    /// This email can never be sent as it is (rejected, unverified sender, bad address).
    #[error("rejected: {0}")]
    Permanent(String),
    /// The service answered with an error: the email was not accepted, retry later.
    #[error("service error: {0}")]
    NotAccepted(String),
    /// No answer (timeout, connection lost): the email may or may not have been accepted.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

pub trait Mailer: Send + Sync {
    /// Sends one email; returns the service's message id.
    fn send(&self, email: &OutgoingEmail)
        -> impl Future<Output = Result<String, SendError>> + Send;

    /// What the service lets the account send (SES GetAccount), or why that is not known.
    fn send_quota(&self) -> impl Future<Output = Result<SendQuota, QuotaUnknown>> + Send {
        async {
            Err(QuotaUnknown(
                "this mail service has no quota to read".into(),
            ))
        }
    }
}

/// The rate item did not answer, or answered with an error.
#[derive(Clone, Debug, thiserror::Error)]
#[error("send rate item: {0}")]
pub struct RateError(pub String);

/// The rate item as it stands: the shared rate (None: never set).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateView {
    pub rate: Option<SharedRate>,
}

/// What an environment asks the rate item for: `count` consecutive send slots `interval_us`
/// apart, the first at `now_us` or where the slots taken before end, whichever is later, but
/// not after `latest_us` (the last moment a send still fits in the invocation). Nothing about
/// the taker is written: the item, and so each take's write units, stay the same size
/// however many environments send.
#[derive(Clone, Debug)]
pub struct SlotRequest {
    pub count: u32,
    pub interval_us: u64,
    pub now_us: u64,
    pub latest_us: u64,
}

/// What a take gave: the slots (none, starting at the schedule's next free time, when that
/// is after `latest_us`: nothing is taken then), and the item after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Taken {
    pub slots: Slots,
    pub view: RateView,
}

/// The stack's one send-rate item, shared by every SendEmail environment: the next free send
/// time and the shared rate (`domain::send_rate`).
pub trait RateBucket: Send + Sync {
    /// Takes the slots `request` asks for (`SlotRequest`).
    fn take(&self, request: &SlotRequest) -> impl Future<Output = Result<Taken, RateError>> + Send;

    /// Sets the shared rate to `next` if it still is `seen` (None: never set); false when
    /// another environment changed it first.
    fn change_rate(
        &self,
        seen: Option<&SharedRate>,
        next: &SharedRate,
    ) -> impl Future<Output = Result<bool, RateError>> + Send;

    /// The rate as it is (for `mailctl status`).
    fn read(&self) -> impl Future<Output = Result<RateView, RateError>> + Send;
}

/// One rate item shared by several stages (environments of one process: tests, the lab).
impl<T: RateBucket> RateBucket for std::sync::Arc<T> {
    fn take(&self, request: &SlotRequest) -> impl Future<Output = Result<Taken, RateError>> + Send {
        (**self).take(request)
    }

    fn change_rate(
        &self,
        seen: Option<&SharedRate>,
        next: &SharedRate,
    ) -> impl Future<Output = Result<bool, RateError>> + Send {
        (**self).change_rate(seen, next)
    }

    fn read(&self) -> impl Future<Output = Result<RateView, RateError>> + Send {
        (**self).read()
    }
}

/// One waiting room shared by several stages (tests, the lab).
impl<T: WaitingRoom> WaitingRoom for std::sync::Arc<T> {
    fn hold(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: &[(String, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).hold(campaign, at_ms, users)
    }
    fn schedule_release(
        &self,
        campaign: &CampaignId,
        schedule: SlotSchedule,
        target_arn: &str,
        event: &serde_json::Value,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).schedule_release(campaign, schedule, target_arn, event)
    }
    fn waiting(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        from: &ReleasePosition,
        limit: usize,
    ) -> impl Future<Output = Result<WaitingPage, StoreError>> + Send {
        (**self).waiting(campaign, at_ms, from, limit)
    }
    fn let_go(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        user_ids: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).let_go(campaign, at_ms, user_ids)
    }
    fn count(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        (**self).count(campaign, at_ms)
    }
    fn record_delivery(
        &self,
        campaign: &CampaignId,
        delivery: &LocalDelivery,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).record_delivery(campaign, delivery)
    }
    fn record_segment(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &LocalTimeCounts,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).record_segment(campaign, run_started_ms, segment, counts)
    }
    fn record_quiet_holds(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).record_quiet_holds(campaign, at_ms, users)
    }
    fn record_release(
        &self,
        campaign: &CampaignId,
        release: &SlotRelease,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).record_release(campaign, release)
    }
    fn report(
        &self,
        campaign: &CampaignId,
    ) -> impl Future<Output = Result<Option<WaitingReport>, StoreError>> + Send {
        (**self).report(campaign)
    }
}

/// The emails queue's event source mapping, whose MaximumConcurrency follows the send rate.
pub trait ConsumerScaling: Send + Sync {
    /// Sets MaximumConcurrency to `environments`; the value it had when it was different.
    fn set_max_concurrency(
        &self,
        environments: u32,
    ) -> BoxFuture<'_, Result<Option<u32>, ControlError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_by_count_and_bytes() {
        let small: Vec<String> = (0..23).map(|i| i.to_string()).collect();
        assert_eq!(batches(&small), vec![0..10, 10..20, 20..23]);
        let big: Vec<String> = (0..4).map(|_| "x".repeat(100 * 1024)).collect();
        assert_eq!(batches(&big), vec![0..2, 2..4]);
        assert!(batches(&[]).is_empty());
    }
}

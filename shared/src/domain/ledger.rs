//! The sends ledger: the exactly-once state machine (docs/exactly-once.md), as pure types.
//! `adapters::sends` stores it in DynamoDB with conditional writes.
//!
//! ```text
//!   (none) --claim--> IN_PROGRESS --mark_sent--> SENT        (final)
//!                       |   ^  \----mark_failed--> FAILED     (final unless resend --include-failed)
//!                       |   |  \---dead_letter--> DEAD_LETTERED (its message went to the DLQ;
//!                       |   |                       a redrive or resend claims it again)
//!                       +---+ claim again once the lease has ended (or after release)
//!
//!   (none), DEAD_LETTERED, or IN_PROGRESS with an ended lease --cancel_send--> CANCELLED
//!   (the campaign was cancelled before this email went out; final unless an operator
//!   reopens the campaign: resend --reopen-cancelled)
//!
//!   IN_PROGRESS --mark_skipped--> SKIPPED with its reason (a guardrail: held out, expired,
//!   frequency cap, quiet hours; final unless resend --include-failed reconsiders it)
//! ```

use crate::domain::campaign::CampaignId;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendStatus {
    InProgress,
    Sent,
    Failed,
    /// The last receive of its message ended without a send: the message is in the emails
    /// DLQ. A redrive or a resend claims it again.
    DeadLettered,
    /// The campaign was cancelled (`mailctl cancel`) before this email went out: final.
    Cancelled,
    /// A guardrail decided it is not sent (`skipReason`: held out, expired, frequency cap,
    /// quiet hours): final unless a resend with --include-failed reconsiders it.
    Skipped,
}

impl SendStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "IN_PROGRESS",
            Self::Sent => "SENT",
            Self::Failed => "FAILED",
            Self::DeadLettered => "DEAD_LETTERED",
            Self::Cancelled => "CANCELLED",
            Self::Skipped => "SKIPPED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "IN_PROGRESS" => Some(Self::InProgress),
            "SENT" => Some(Self::Sent),
            "FAILED" => Some(Self::Failed),
            "DEAD_LETTERED" => Some(Self::DeadLettered),
            "CANCELLED" => Some(Self::Cancelled),
            "SKIPPED" => Some(Self::Skipped),
            _ => None,
        }
    }
}

/// The ledger's key: one email per user and campaign (partition key `userId`, sort key
/// `campaignId`). It travels from the claim to the SES tags that bring the email's events
/// back to its record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SendKey {
    pub user_id: String,
    pub campaign_id: CampaignId,
}

impl SendKey {
    pub fn new(user_id: impl Into<String>, campaign_id: CampaignId) -> Self {
        Self {
            user_id: user_id.into(),
            campaign_id,
        }
    }

    pub fn user_id(&self) -> &str {
        &self.user_id
    }

    pub fn campaign_id(&self) -> &str {
        self.campaign_id.as_str()
    }

    /// The campaign index key of its record (`campaign_shard`).
    pub fn campaign_shard(&self) -> String {
        campaign_shard(self.campaign_id(), &self.user_id)
    }
}

/// One attempt's claim on a send (its key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub key: SendKey,
    /// Unique per attempt (request id + SQS message id): the fencing token every later write
    /// is conditioned on, so a zombie attempt can never overwrite a newer one.
    pub token: String,
    pub started_at_ms: u64,
    pub lease_until_ms: u64,
    /// A local-time email's release: SENT records its lateness (`lateMs`).
    pub due: Option<crate::domain::local_time::Due>,
    /// The campaign's deadline (ms): no send, nor a resend after a throttle, starts later.
    pub deadline_ms: Option<i64>,
    /// The experiment's variant the email is (recorded on the claim).
    pub variant: Option<String>,
    /// The user's zone (recorded on the claim: `mailctl report` draws lateness by zone).
    pub zone: Option<String>,
}

/// Final records an operator's resend may claim again (a claim always may take no record,
/// an ended lease, or DEAD_LETTERED).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaim {
    /// FAILED and SKIPPED (`resend --include-failed`).
    pub failed: bool,
    /// CANCELLED (`resend --reopen-cancelled`).
    pub cancelled: bool,
}

/// What the ledger held when a claim was refused (read from the same write: ALL_OLD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    AlreadySent,
    /// Another attempt holds a live lease until this time.
    Busy {
        lease_until_ms: u64,
    },
    /// A permanent failure; only an operator resend with include-failed retries it.
    Failed {
        reason: String,
    },
    /// The campaign was cancelled before this email went out (and is not reopened).
    Cancelled,
    /// A guardrail decided it (the reason as recorded).
    Skipped {
        reason: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    Claimed {
        attempt: u64,
        /// How many earlier attempts ended in an error the service answered with (not
        /// throttling): a permanent-looking error stops after a few.
        send_errors: u64,
    },
    Refused(Refusal),
}

/// When a later mark finds the claim gone: what the record holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostClaim {
    pub status: Option<SendStatus>,
    pub token: Option<String>,
    pub ses_message_id: Option<String>,
}

/// A ledger write that failed (not one its condition refused): the store did not answer, or
/// answered with an error.
#[derive(Debug, thiserror::Error)]
#[error("DynamoDB table {table}: {operation} failed: {detail}")]
pub struct LedgerError {
    pub table: String,
    pub operation: &'static str,
    pub detail: String,
}

/// The lease rule: the attempt is surely over at its deadline plus a clock-skew margin, and
/// SQS cannot redeliver before startedAt + visibility timeout, so never later than that.
pub fn lease_until(
    started_at: SystemTime,
    deadline: SystemTime,
    clock_skew: Duration,
    visibility_timeout: Duration,
) -> SystemTime {
    (deadline + clock_skew).min(started_at + visibility_timeout)
}

/// How many partitions one campaign's records are spread over in the campaign index: at
/// 20,000 emails/s its two writes per email (the outcome and the Delivery note) are 40,000
/// write units a second, 313 per key on average. The notes come in bursts when SesEvents
/// catches up with its events (its mapping scales more slowly than the sends:
/// `INDEX_KEY_BURST`), so the index keys hold up to about 42,000 emails/s against the
/// 1,000 one partition serves. Campaigns written when it was 16
/// or 64 have their records under `#00`..`#15` or `#63`, which `campaign_shards` reads too.
pub const CAMPAIGN_SHARDS: u64 = 128;

/// The busiest second on one campaign index key over the average second, as SesEvents
/// catches up with its events: 1.44-1.48 in the lab's million-user campaigns at 20,000/s.
pub const INDEX_KEY_BURST: f64 = 1.5;

/// The campaign index key of a record over `shards` partitions: `campaignId#NN`, NN from a
/// hash of the user id, so a campaign's writes never land on one hot partition.
pub fn shard_of(campaign_id: &str, user_id: &str, shards: u64) -> String {
    // FNV-1a: stable across builds and platforms (std's hasher is neither).
    let hash = user_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{campaign_id}#{:02}", hash % shards)
}

fn campaign_shard(campaign_id: &str, user_id: &str) -> String {
    shard_of(campaign_id, user_id, CAMPAIGN_SHARDS)
}

/// Every shard key of one campaign.
pub fn campaign_shards(campaign_id: &str) -> impl Iterator<Item = String> + '_ {
    (0..CAMPAIGN_SHARDS).map(move |n| format!("{campaign_id}#{n:02}"))
}

/// The write quota the sends table (and so its index) needs at 20,000 emails/s, raised by
/// the operator from DynamoDB's 40,000 (docs/deploying.md): the table takes three writes per
/// email (claim, SENT, the Delivery note), 60,000 units a second, the index two, 40,000.
pub const SENDS_TABLE_WRITE_UNITS: f64 = 80_000.0;

/// The writes to a send record, by what they do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LedgerWrite {
    Claim,
    MarkSent,
    MarkFailed,
    Release,
    MarkDeadLettered,
    MarkSkipped,
    Cancel,
    NoteDuplicate,
    /// An engagement noted by SesEvents, OpenContent or Unsubscribe (Delivery, open...).
    Note,
    /// SesEvents turning a record SENT whose attempt died after SES took it.
    Reconcile,
}

impl LedgerWrite {
    /// Whether the write sets `campaignShard`, putting the record in the campaign index.
    /// The index is sparse: a record enters it with its outcome, so the claim and a release
    /// (an attempt in flight) never write it, and at 20,000 emails/s the index takes two
    /// writes per email, not three. A record once in it stays (a later claim of a
    /// DEAD_LETTERED or FAILED record shows there as IN_PROGRESS), and every later write
    /// of it rewrites its entry (the projection is ALL).
    pub fn indexes(self) -> bool {
        match self {
            Self::MarkSent
            | Self::MarkFailed
            | Self::MarkDeadLettered
            | Self::MarkSkipped
            | Self::Cancel
            | Self::Reconcile => true,
            Self::Claim | Self::Release | Self::NoteDuplicate | Self::Note => false,
        }
    }

    /// Its name in errors and reports.
    pub fn operation(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::MarkSent => "mark sent",
            Self::MarkFailed => "mark failed",
            Self::Release => "release",
            Self::MarkDeadLettered => "mark dead-lettered",
            Self::MarkSkipped => "mark skipped",
            Self::Cancel => "cancel",
            Self::NoteDuplicate => "note duplicate",
            Self::Note => "note",
            Self::Reconcile => "reconcile",
        }
    }
}

/// What the SES events and the Unsubscribe function note on a send record, once each, for
/// the campaign analytics (the attribute holds when it first happened).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engagement {
    Delivered,
    /// A permanent bounce (the address is suppressed).
    Bounced,
    /// A transient bounce: counted, not suppressed.
    SoftBounced,
    Complained,
    Opened,
    Clicked,
    Unsubscribed,
    /// Opened by a person's mail client (not an image proxy, a scanner or Apple's
    /// prefetch as far as it can be told): noted with `Opened`.
    HumanOpened,
    /// Clicked by a person (not a link scanner, nor a click at delivery; never the
    /// preference centre's links): noted with `Clicked`. Experiments decide on it.
    HumanClicked,
}

impl Engagement {
    pub const ALL: [Engagement; 9] = [
        Self::Delivered,
        Self::Bounced,
        Self::SoftBounced,
        Self::Complained,
        Self::Opened,
        Self::Clicked,
        Self::Unsubscribed,
        Self::HumanOpened,
        Self::HumanClicked,
    ];

    /// The engagement a person's is also (noted with it, in the same write).
    pub fn implies(self) -> Option<Self> {
        match self {
            Self::HumanOpened => Some(Self::Opened),
            Self::HumanClicked => Some(Self::Clicked),
            _ => None,
        }
    }

    /// The record attribute that holds when it happened (epoch ms).
    pub fn attribute(self) -> &'static str {
        match self {
            Self::Delivered => "deliveredAt",
            Self::Bounced => "bouncedAt",
            Self::SoftBounced => "softBouncedAt",
            Self::Complained => "complainedAt",
            Self::Opened => "openedAt",
            Self::Clicked => "clickedAt",
            Self::Unsubscribed => "unsubscribedAt",
            Self::HumanOpened => "humanOpenedAt",
            Self::HumanClicked => "humanClickedAt",
        }
    }

    /// The name operators see (status, JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Bounced => "bounced",
            Self::SoftBounced => "softBounced",
            Self::Complained => "complained",
            Self::Opened => "opened",
            Self::Clicked => "clicked",
            Self::Unsubscribed => "unsubscribed",
            Self::HumanOpened => "humanOpened",
            Self::HumanClicked => "humanClicked",
        }
    }
}

pub fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn from_epoch_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ends_at_deadline_plus_skew_capped_by_visibility() {
        let start = from_epoch_ms(1_000_000);
        let deadline = start + Duration::from_secs(30);
        let lease = lease_until(
            start,
            deadline,
            Duration::from_secs(5),
            Duration::from_secs(180),
        );
        assert_eq!(lease, start + Duration::from_secs(35));
        // A deadline that is (wrongly) far away never extends the lease past visibility.
        let far = start + Duration::from_secs(900);
        let lease = lease_until(start, far, Duration::from_secs(5), Duration::from_secs(180));
        assert_eq!(lease, start + Duration::from_secs(180));
    }

    #[test]
    fn shards_spread_users_and_stay_stable() {
        assert_eq!(
            campaign_shard("weekly-2026-W47", "u0000003"),
            campaign_shard("weekly-2026-W47", "u0000003")
        );
        let used: std::collections::BTreeSet<String> = (0..4000)
            .map(|i| campaign_shard("c", &format!("u{i:07}")))
            .collect();
        assert_eq!(used, campaign_shards("c").collect());
        // Fixed by the hash, not by the build: records written today are found tomorrow.
        assert_eq!(campaign_shard("c", ""), "c#37");
        // A record written over 16 or 64 shards is under a key the reads still ask for.
        assert_eq!(shard_of("c", "", 16), "c#05");
        for shards in [16, 64] {
            assert!(campaign_shards("c").any(|k| k == shard_of("c", "u0000003", shards)));
        }
        assert_eq!(campaign_shards("c").last().as_deref(), Some("c#127"));
    }

    #[test]
    fn status_round_trip() {
        for s in [
            SendStatus::InProgress,
            SendStatus::Sent,
            SendStatus::Failed,
            SendStatus::DeadLettered,
            SendStatus::Skipped,
        ] {
            assert_eq!(SendStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(SendStatus::parse("sent"), None);
    }
}

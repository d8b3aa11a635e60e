//! The sends table under DynamoDB's write limits, in front of the lab's ledger. Every write
//! SendEmail makes (`SendLedger`, `CapLedger`) and every note and reconcile the real SesEvents
//! makes as its events arrive (`SendRecordNotes`: a Delivery note per email SES accepted,
//! when EventBridge and the events queue bring it) is charged, through `crate::limits`, to:
//!
//! - the table's write quota (`TableQuota`; DynamoDB's 40,000, a new on-demand table's
//!   4,000 growing as DynamoDB grows it, or the quota docs/deploying.md has the operator
//!   raise it to). The base table's
//!   partitions are not charged apart: the key is (userId, campaignId), and one record
//!   takes a few writes in a campaign, nowhere near its partition's 1,000 a second;
//! - when the write changes the record's entry in `CampaignShardIndex`: the index's own
//!   quota (a global secondary index has the table's) and the index partition of the
//!   record's `campaignShard` (1,000 write units a second each). A record is in the index
//!   from the write that sets its shard (`IndexDesign`); from then on every write to it
//!   rewrites its entry (the projection is ALL).
//!
//! A write costs ceil(item bytes / 1 KB) units, of the larger of the item before and after
//! it; its index entry is the item after it plus DynamoDB's 100 bytes of index overhead.
//! The item's size is estimated from its attributes as the adapter writes them (`Shape`):
//! each attribute's name plus its value (a string's UTF-8 bytes, a number 8 bytes); about
//! 330 bytes claimed and 440 sent and delivered for the lab's ids, so one unit a write. A write
//! its condition refuses is charged as the write it would have been (refusals are rare here:
//! a duplicate, a lost claim), and a throttled write's change is kept in the estimate. A
//! write still refused after the SDK's three attempts fails as
//! the adapter's would (`LedgerError`), so the real SendEmail handles it.

use crate::limits::{Charge, Counts, Limit, Throughput};
use crate::rate::latency::Slow;
use mailflow::domain::aws_limits::{
    DYNAMODB_NEW_ON_DEMAND_WRITE_UNITS, DYNAMODB_PARTITION_WRITE_UNITS, DYNAMODB_TABLE_WRITE_UNITS,
    DYNAMODB_WRITE_UNIT_BYTES,
};
use mailflow::domain::guardrails::{CapHistory, Skip};
use mailflow::domain::ledger::{
    shard_of, Claim, ClaimOutcome, Engagement, LedgerError, LedgerWrite, Reclaim, SendKey,
    SendStatus, CAMPAIGN_SHARDS, SENDS_TABLE_WRITE_UNITS,
};
use mailflow::ports::memory::MemoryLedger;
use mailflow::ports::{CapLedger, Marked, SendLedger, SendRecordNotes};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// DynamoDB's bytes of overhead on each index entry.
const INDEX_ENTRY_OVERHEAD: usize = 100;

/// The sends table's write quota, as the table has it (the index has the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TableQuota {
    /// DynamoDB's default per-table quota: 40,000 write units a second.
    Default,
    /// A new on-demand table: 4,000 a second, then twice its busiest second once that is
    /// 30 minutes old, up to DynamoDB's default 40,000 (`limits::Throughput::grows`).
    New,
    /// The quota docs/deploying.md has the operator raise the table's to and pre-warm.
    Raised,
}

impl TableQuota {
    pub fn write_units(self) -> f64 {
        match self {
            Self::Default => DYNAMODB_TABLE_WRITE_UNITS,
            Self::New => DYNAMODB_NEW_ON_DEMAND_WRITE_UNITS,
            Self::Raised => SENDS_TABLE_WRITE_UNITS,
        }
    }
}

/// Which writes put a record in the campaign index, and over how many shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum IndexDesign {
    /// As the adapter writes it: the writes `LedgerWrite::indexes` names, over
    /// `CAMPAIGN_SHARDS`.
    Sparse,
    /// The design before: the claim set `campaignShard`, so every write of every record
    /// wrote the index, over 16 shards.
    Dense16,
}

impl IndexDesign {
    fn indexes(self, write: LedgerWrite) -> bool {
        match self {
            Self::Sparse => write.indexes(),
            Self::Dense16 => write.indexes() || write == LedgerWrite::Claim,
        }
    }

    fn shard(self, key: &SendKey) -> String {
        let shards = match self {
            Self::Sparse => CAMPAIGN_SHARDS,
            Self::Dense16 => 16,
        };
        shard_of(key.campaign_id(), key.user_id(), shards)
    }
}

/// What a record holds, as far as its size goes.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    /// The claim's attributes (its token's length), once claimed.
    token: Option<usize>,
    variant: usize,
    zone: usize,
    /// sesMessageId, completedAt (and lateMs): an outcome recorded.
    outcome: bool,
    last_error: usize,
    /// Engagement timestamps noted.
    notes: usize,
    indexed: bool,
}

/// An SES message id's length (`0100018f...-...-000000`).
const SES_MESSAGE_ID_BYTES: usize = 60;
/// A number attribute's value: an epoch in ms is 13 digits, DynamoDB keeps two a byte.
const NUMBER_BYTES: usize = 8;

impl Shape {
    fn bytes(&self, key: &SendKey) -> usize {
        let attribute = |name: &str, value: usize| name.len() + value;
        let mut bytes = attribute("userId", key.user_id().len())
            + attribute("campaignId", key.campaign_id().len())
            + attribute("status", "IN_PROGRESS".len())
            + attribute("updatedAt", NUMBER_BYTES)
            + attribute("expiresAt", NUMBER_BYTES);
        if let Some(token) = self.token {
            bytes += attribute("startedAt", NUMBER_BYTES)
                + attribute("leaseUntil", NUMBER_BYTES)
                + attribute("claimToken", token)
                + attribute("attempt", 2);
        }
        if self.variant > 0 {
            bytes += attribute("variant", self.variant);
        }
        if self.zone > 0 {
            bytes += attribute("userZone", self.zone);
        }
        if self.outcome {
            bytes += attribute("sesMessageId", SES_MESSAGE_ID_BYTES)
                + attribute("completedAt", NUMBER_BYTES)
                + attribute("lateMs", NUMBER_BYTES);
        }
        if self.last_error > 0 {
            bytes += attribute("lastError", self.last_error);
        }
        bytes += self.notes * attribute("deliveredAt", NUMBER_BYTES);
        if self.indexed {
            bytes += attribute("campaignShard", key.campaign_id().len() + 4);
        }
        bytes
    }
}

fn units(bytes: usize) -> f64 {
    bytes.div_ceil(DYNAMODB_WRITE_UNIT_BYTES) as f64
}

/// The sends table's limits, their use and what failed, for the pipeline report.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendsTableReport {
    pub quota: TableQuota,
    pub quota_write_units: f64,
    pub design: IndexDesign,
    /// Units, throttled attempts and the busiest key's peak second, per limit.
    pub limits: BTreeMap<String, Counts>,
    /// Writes that failed after the SDK's retries: SendEmail's, and SesEvents' notes and
    /// reconciles (SesEvents returns their events to its queue, to be tried again).
    pub writes_failed: u64,
    pub notes_failed: u64,
    /// Write units per email SES accepted: the table's and the index's.
    pub table_units_per_email: f64,
    pub index_units_per_email: f64,
    /// Emails SES accepted whose record is not SENT at the end, after SesEvents' reconcile.
    pub unrecorded: usize,
}

struct Model {
    ledger: Slow<MemoryLedger>,
    limits: Throughput,
    table: Limit,
    index: Limit,
    partition: Limit,
    design: IndexDesign,
    quota: TableQuota,
    shapes: Mutex<HashMap<(String, String), Shape>>,
    failed: Mutex<(u64, u64)>,
}

/// The ledger behind the sends table's limits; clones share it.
#[derive(Clone)]
pub struct SendsTable(Arc<Model>);

impl SendsTable {
    pub fn new(
        ledger: Arc<MemoryLedger>,
        latency: (Duration, Duration),
        quota: TableQuota,
        design: IndexDesign,
        seed: u64,
    ) -> Self {
        let per_second = quota.write_units();
        let table = Limit {
            name: "sends table writes",
            per_second,
        };
        let index = Limit {
            name: "campaign index writes",
            per_second,
        };
        let limits = Throughput::new(seed);
        if quota == TableQuota::New {
            limits.grows(table, DYNAMODB_TABLE_WRITE_UNITS);
            limits.grows(index, DYNAMODB_TABLE_WRITE_UNITS);
        }
        Self(Arc::new(Model {
            ledger: Slow::new(ledger, latency),
            limits,
            table,
            index,
            partition: Limit {
                name: "campaign index partition writes",
                per_second: DYNAMODB_PARTITION_WRITE_UNITS,
            },
            design,
            quota,
            shapes: Mutex::default(),
            failed: Mutex::default(),
        }))
    }

    /// The table's figures once the events are drained; `accepted`: the (campaign, user) of
    /// every email SES accepted.
    pub fn report<'a>(
        &self,
        accepted: impl ExactSizeIterator<Item = &'a (String, String)>,
    ) -> SendsTableReport {
        let emails = accepted.len().max(1) as f64;
        let unrecorded = accepted
            .filter(|(campaign, user)| {
                self.0
                    .ledger
                    .inner
                    .get(user, campaign)
                    .and_then(|r| r.status)
                    != Some(SendStatus::Sent)
            })
            .count();
        let limits: BTreeMap<String, Counts> = self
            .0
            .limits
            .counts()
            .into_iter()
            .map(|(name, counts)| (name.to_owned(), counts))
            .collect();
        let units = |limit: &Limit| limits.get(limit.name).map_or(0.0, |c| c.units);
        let (writes_failed, notes_failed) = *mailflow::runtime::lock(&self.0.failed);
        SendsTableReport {
            quota: self.0.quota,
            quota_write_units: self.0.table.per_second,
            design: self.0.design,
            table_units_per_email: units(&self.0.table) / emails,
            index_units_per_email: units(&self.0.index) / emails,
            limits,
            writes_failed,
            notes_failed,
            unrecorded,
        }
    }

    /// Charges `write` to `key`'s record (its shape changed by `change`), or fails it.
    async fn charge(
        &self,
        write: LedgerWrite,
        key: &SendKey,
        change: impl FnOnce(&mut Shape),
    ) -> Result<(), LedgerError> {
        let model = &self.0;
        let charges = {
            let mut shapes = mailflow::runtime::lock(&model.shapes);
            let shape = shapes
                .entry((key.user_id().to_owned(), key.campaign_id().to_owned()))
                .or_default();
            let before = shape.bytes(key);
            change(shape);
            shape.indexed |= model.design.indexes(write);
            let after = shape.bytes(key);
            let mut charges = vec![Charge::new(model.table, "", units(before.max(after)))];
            if shape.indexed {
                let entry = units(after + INDEX_ENTRY_OVERHEAD);
                charges.push(Charge::new(model.index, "", entry));
                charges.push(Charge::new(model.partition, model.design.shard(key), entry));
            }
            charges
        };
        model.limits.admit(&charges).await.map_err(|throttled| {
            let mut failed = mailflow::runtime::lock(&model.failed);
            if matches!(write, LedgerWrite::Note | LedgerWrite::Reconcile) {
                failed.1 += 1;
            } else {
                failed.0 += 1;
            }
            LedgerError {
                table: "lab-sends".into(),
                operation: write.operation(),
                detail: throttled.to_string(),
            }
        })
    }
}

impl CapLedger for SendsTable {
    async fn cap_history(&self, user_id: &str) -> Result<CapHistory, LedgerError> {
        self.0.ledger.cap_history(user_id).await
    }

    /// The user's caps item: one unit on the table, never in the index.
    async fn write_cap_history(
        &self,
        user_id: &str,
        history: &CapHistory,
        keep_ms: i64,
    ) -> Result<bool, LedgerError> {
        let charge = [Charge::new(self.0.table, "", 1.0)];
        self.0
            .limits
            .admit(&charge)
            .await
            .map_err(|throttled| LedgerError {
                table: "lab-sends".into(),
                operation: "write frequency caps",
                detail: throttled.to_string(),
            })?;
        self.0
            .ledger
            .write_cap_history(user_id, history, keep_ms)
            .await
    }
}

impl SendLedger for SendsTable {
    async fn claim(&self, claim: &Claim, reclaim: Reclaim) -> Result<ClaimOutcome, LedgerError> {
        self.charge(LedgerWrite::Claim, &claim.key, |shape| {
            shape.token = Some(claim.token.len());
            shape.variant = claim.variant.as_ref().map_or(0, String::len);
            shape.zone = claim.zone.as_ref().map_or(0, String::len);
        })
        .await?;
        self.0.ledger.claim(claim, reclaim).await
    }

    async fn note_duplicate(&self, key: &SendKey) -> Result<(), LedgerError> {
        self.charge(LedgerWrite::NoteDuplicate, key, |_| {}).await?;
        self.0.ledger.note_duplicate(key).await
    }

    async fn mark_sent(&self, claim: &Claim, ses_message_id: &str, late_ms: Option<i64>) -> Marked {
        self.charge(LedgerWrite::MarkSent, &claim.key, |shape| {
            shape.outcome = true;
            shape.last_error = 0;
        })
        .await?;
        self.0
            .ledger
            .mark_sent(claim, ses_message_id, late_ms)
            .await
    }

    async fn mark_failed(&self, claim: &Claim, reason: &str) -> Marked {
        self.charge(LedgerWrite::MarkFailed, &claim.key, |shape| {
            shape.last_error = reason.len();
        })
        .await?;
        self.0.ledger.mark_failed(claim, reason).await
    }

    async fn release(&self, claim: &Claim, reason: &str, send_error: bool) -> Marked {
        self.charge(LedgerWrite::Release, &claim.key, |shape| {
            shape.last_error = reason.len();
        })
        .await?;
        self.0.ledger.release(claim, reason, send_error).await
    }

    async fn mark_dead_lettered(&self, claim: &Claim, reason: &str) -> Marked {
        self.charge(LedgerWrite::MarkDeadLettered, &claim.key, |shape| {
            shape.last_error = reason.len();
        })
        .await?;
        self.0.ledger.mark_dead_lettered(claim, reason).await
    }

    async fn mark_skipped(&self, claim: &Claim, skip: Skip) -> Marked {
        self.charge(LedgerWrite::MarkSkipped, &claim.key, |shape| {
            shape.last_error = skip.as_str().len();
        })
        .await?;
        self.0.ledger.mark_skipped(claim, skip).await
    }

    async fn cancel_send(&self, key: &SendKey, at_ms: u64) -> Result<bool, LedgerError> {
        self.charge(LedgerWrite::Cancel, key, |_| {}).await?;
        self.0.ledger.cancel_send(key, at_ms).await
    }
}

/// SesEvents' writes: a note (Delivery, a bounce...) rewrites the record, and its index
/// entry once it has one; a reconcile puts it in the index as SENT. A status read is not
/// a write.
impl SendRecordNotes for SendsTable {
    async fn note(
        &self,
        key: &SendKey,
        what: Engagement,
        at_ms: u64,
    ) -> Result<Option<SendStatus>, LedgerError> {
        self.charge(LedgerWrite::Note, key, |shape| shape.notes += 1)
            .await?;
        self.0.ledger.inner.note(key, what, at_ms).await
    }

    async fn status_of(&self, key: &SendKey) -> Result<Option<SendStatus>, LedgerError> {
        self.0.ledger.inner.status_of(key).await
    }

    async fn reconcile_sent(
        &self,
        key: &SendKey,
        ses_message_id: &str,
        at_ms: u64,
    ) -> Result<bool, LedgerError> {
        self.charge(LedgerWrite::Reconcile, key, |shape| {
            shape.outcome = true;
            shape.last_error = 0;
        })
        .await?;
        (self.0.ledger.inner)
            .reconcile_sent(key, ses_message_id, at_ms)
            .await
    }
}

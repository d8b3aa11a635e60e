//! In-memory stand-ins for the ports, for unit tests of the stages' decisions: a ledger
//! with the same conditions as the DynamoDB one (`adapters::sends`), a mailer that answers
//! from a script, a queue that records the retry delays it is asked for, an outbox that
//! keeps what is put on it, send records and subscribers for the SES events, and a user
//! directory (`directory`), and the stack's rate item (`rate`). The lab's rate runs use them
//! too (feature `memory`). The same decisions are proven against the real services by the
//! tests on the local stack.

pub mod campaigns;
pub mod definitions;
pub mod directory;
pub mod ledger;
pub mod mailer;
pub mod open_content;
pub mod queues;
pub mod rate;
pub mod records;
pub mod subscribers;
pub mod waiting;

pub use campaigns::{MemoryCampaigns, MemoryResults};
pub use definitions::MemoryDefinitions;
pub use ledger::{MemoryLedger, Record};
pub use mailer::ScriptedMailer;
pub use open_content::{MemoryOpenContent, MemoryPicks};
pub use queues::{MemoryOutbox, MemoryQueue};
pub use rate::MemoryRateBucket;
pub use records::MemoryRecords;
pub use subscribers::MemorySubscribers;
pub use waiting::MemoryWaitingRoom;

/// A clock a test sets.
#[derive(Default)]
pub struct MemoryClock(pub std::sync::atomic::AtomicI64);

impl MemoryClock {
    pub fn at(ms: i64) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self(std::sync::atomic::AtomicI64::new(ms)))
    }

    pub fn set(&self, ms: i64) {
        self.0.store(ms, std::sync::atomic::Ordering::SeqCst)
    }
}

impl crate::ports::Clock for MemoryClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

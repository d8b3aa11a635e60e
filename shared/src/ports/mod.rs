//! Ports: the small interfaces the stages depend on, so that their decisions can be tested
//! in memory (`memory`, for unit tests) and faults injected around the real services. One
//! file per port, with the types that cross it; this index re-exports them, so a stage names
//! `crate::ports::Mailer` whatever file holds it. The adapters implement them:
//! `adapters::ses::SesMailer` (Mailer), `adapters::sends::SendsLedger` (SendLedger,
//! CapLedger), `adapters::sends::SendRecords` (SendRecordNotes, PendingLeaves,
//! ExperimentResults), `adapters::sqs::SqsQueue` (OutgoingQueue, RetryQueue),
//! `adapters::subscribers::Subscribers` (SubscriberStore, UserStandings),
//! `adapters::mongo_directory::MongoDirectory` (UserDirectory), `adapters::campaigns::CampaignsTable`
//! (CampaignStates), `adapters::event_sources::StackSending` (SendingSwitch),
//! `adapters::rate_item::RateItem` (RateBucket), `adapters::event_sources::ConsumerMapping`
//! (ConsumerScaling), `adapters::waiting::WaitingTable` (WaitingRoom),
//! `adapters::open_content::OpenContentTable` (OpenContentStore), `adapters::picks::MongoPicks`
//! (PickDirectory), `adapters::definitions::DefinitionsTable` (DefinitionStore).

#[cfg(any(test, feature = "memory"))]
pub mod memory;

mod account;
mod campaigns;
mod caps;
mod clock;
pub mod definitions;
mod directory;
mod experiment;
mod leaves;
mod ledger;
mod mailer;
mod notes;
mod open_content;
mod queues;
mod rate;
mod scaling;
mod sending;
mod standings;
mod store;
mod subscribers;
mod waiting;

pub use account::{AccountLimits, DefaultLimits};
pub use campaigns::CampaignStates;
pub use caps::CapLedger;
pub use clock::{Clock, SystemClock};
pub use definitions::{
    load_pinned, DefinitionCache, DefinitionError, DefinitionLoader, DefinitionStore,
    LoadedDefinition,
};
pub use directory::{
    AudienceMember, AudienceScan, DefinitionCampaign, PrepareError, UserDirectory,
};
pub use experiment::ExperimentResults;
pub use leaves::{pending_leave_key, PendingLeaves};
pub use ledger::{Marked, SendLedger};
pub use mailer::{Mailer, OutgoingEmail, SendError};
pub use notes::SendRecordNotes;
pub use open_content::{
    Activity, ContentStoreError, IndexCheck, OpenContentStore, PickDirectory, Rise,
};
pub use queues::{
    batches, ConsumedQueue, OutgoingQueue, QueueError, RetryQueue, SendReport, MAX_BATCH_BYTES,
    MAX_BATCH_ENTRIES, MAX_DELAY_SECONDS,
};
pub use rate::{RateBucket, RateError, RateView, SlotRequest, Taken};
pub use scaling::ConsumerScaling;
pub use sending::{ControlError, SendingSwitch};
pub use standings::UserStandings;
pub use store::StoreError;
pub use subscribers::{Change, ChangedVia, SubscriberError, SubscriberStore, SuppressionReason};
pub use waiting::{ReleasePosition, SlotSchedule, WaitingPage, WaitingRoom};

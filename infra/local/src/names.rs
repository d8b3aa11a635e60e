//! The logical ids template.yaml gives the stack's resources and parameters, named once:
//! the local simulator provisions them under these names, and the operator commands and the
//! tests find them by these names.

// Queues and their dead-letter queues.
pub const USERS_QUEUE: &str = "UsersQueue";
pub const USERS_DLQ: &str = "UsersDLQ";
pub const EMAILS_QUEUE: &str = "EmailsQueue";
pub const EMAILS_DLQ: &str = "EmailsDLQ";
pub const CONTINUATION_QUEUE: &str = "ContinuationQueue";
pub const CONTINUATION_DLQ: &str = "ContinuationDLQ";
pub const SES_EVENTS_QUEUE: &str = "SesEventsQueue";
pub const SES_EVENTS_DLQ: &str = "SesEventsDLQ";
pub const SCHEDULE_DLQ: &str = "ScheduleDLQ";
/// The functions that consume a campaign's queues (continuations, users, emails): a pause
/// disables their event source mappings.
pub const CAMPAIGN_CONSUMERS: [&str; 3] = [GET_USERS, CREATE_EMAILS, SEND_EMAIL];
/// Every DLQ a campaign's messages can end in.
pub const CAMPAIGN_DLQS: [&str; 3] = [USERS_DLQ, EMAILS_DLQ, CONTINUATION_DLQ];

pub const SENDS_TABLE: &str = "SendsTable";
pub const CAMPAIGNS_TABLE: &str = "CampaignsTable";
pub const WAITING_TABLE: &str = "WaitingTable";
pub const OPEN_CONTENT_TABLE: &str = "OpenContentTable";
pub const RELEASE_SCHEDULE_GROUP: &str = "ReleaseScheduleGroup";

// Functions.
pub const GET_USERS: &str = "GetUsersFunction";
pub const CREATE_EMAILS: &str = "CreateEmailsFunction";
pub const SEND_EMAIL: &str = "SendEmailFunction";
pub const SES_EVENTS: &str = "SesEventsFunction";
pub const UNSUBSCRIBE: &str = "UnsubscribeFunction";
pub const OPEN_CONTENT: &str = "OpenContentFunction";
pub const REPUTATION_GUARD: &str = "ReputationGuardFunction";
pub const RATE_CONTROL: &str = "RateControlFunction";

// Parameters.
pub const MONGODB_DATABASE: &str = "MongoDbDatabase";
pub const MONGODB_URI_SECRET_NAME: &str = "MongoDbUriSecretName";
pub const SEND_RATE_PER_SECOND: &str = "SendRatePerSecond";
pub const LOCAL_SEND_TIME: &str = "LocalSendTime";

//! What a campaign at a send rate needs of the AWS account, added up against each limit
//! (`aws_limits`), and which one binds: `mailctl plan` prints every line, RateControl logs
//! the binding one each minute. Pure: the caller reads the account (Lambda's
//! GetAccountSettings, DynamoDB's per-table quota and the sends table's own throughput,
//! SES's quota) or takes the defaults.
//!
//! What the stack needs at a rate is here (`Stack::demand`); what the account allows is
//! `account`, each limit checked against it `checks`, and the sends table's warm-up
//! `warm_up` (not a limit: said beside them).

use super::events_path::{events_per_email, handlers_for, Handler};
use super::fan_out::{composers_for, Composer};
use super::ledger::LedgerWrite;
use super::public_urls::PublicUrls;
use super::send_rate::{Environment, SendRate};

mod account;
mod checks;
mod warm_up;

pub use account::Account;
pub use checks::{binding, checks, Check};
pub use warm_up::warm_up;

/// SendEmail's writes to the sends table per email: the claim and the mark. Each SES event
/// noted on the record is one more (`events_per_email`); the campaign index takes the mark
/// and the notes, not the claim (`LedgerWrite::indexes`: the index is sparse).
const SEND_EMAIL_WRITES: [LedgerWrite; 2] = [LedgerWrite::Claim, LedgerWrite::MarkSent];

/// Write units per email on the sends table and on its campaign index at `events_per_email`.
fn writes_per_email(events_per_email: f64) -> (f64, f64) {
    let indexed = SEND_EMAIL_WRITES.iter().filter(|w| w.indexes()).count();
    (
        SEND_EMAIL_WRITES.len() as f64 + events_per_email,
        indexed as f64 + events_per_email,
    )
}

/// What the stack runs at its send rate: the environments each mapping is sized to (as
/// RateControl sizes them), the reserved ones, and the events each email brings.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Demand {
    /// Emails per second.
    pub rate: f64,
    pub send_email: u32,
    pub create_emails: u32,
    pub ses_events: u32,
    /// Reserved concurrency: OpenContent's, Unsubscribe's and RateControl's 1.
    pub reserved: u32,
    pub events_per_email: f64,
    /// The most messages each consuming stage holds received at once (environments times
    /// batch), the largest of the three queues.
    pub in_flight: u32,
}

/// How the stack is sized: what RateControl is given (and `mailctl plan` reads from it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stack {
    pub send_email: Environment,
    pub create_emails: Composer,
    pub create_emails_ceiling: u32,
    pub ses_events: Handler,
    pub track_opens_and_clicks: bool,
    pub public_urls: PublicUrls,
}

impl Stack {
    /// The environments and events at `rate` emails/s, each mapping sized as RateControl
    /// sizes it.
    pub fn demand(&self, rate: f64) -> Demand {
        let per_email = events_per_email(self.track_opens_and_clicks);
        let send_email = SendRate::configured(rate).environments(&self.send_email);
        let create_emails =
            composers_for(rate, &self.create_emails, self.create_emails_ceiling).environments;
        let ses_events = handlers_for(rate * per_email, &self.ses_events);
        let in_flight = [
            send_email * self.send_email.records_at_once as u32,
            create_emails * self.create_emails.batch as u32,
            ses_events * self.ses_events.batch as u32,
        ];
        Demand {
            rate,
            send_email,
            create_emails,
            ses_events,
            reserved: self.public_urls.unsubscribe_concurrency
                + self.public_urls.open_content_concurrency
                + RATE_CONTROL_RESERVED,
            events_per_email: per_email,
            in_flight: in_flight.into_iter().max().unwrap_or(0),
        }
    }
}

impl Demand {
    /// Write units a second on the sends table and on its campaign index at the rate.
    fn writes(&self) -> (f64, f64) {
        let rate = self.rate.max(0.0);
        let (table, index) = writes_per_email(self.events_per_email);
        (rate * table, rate * index)
    }

    /// The environments of the functions without reserved concurrency: the three mappings'
    /// and GetUsers' and ReputationGuard's one invocation each.
    pub fn unreserved(&self) -> u32 {
        self.send_email + self.create_emails + self.ses_events + UNRESERVED_SINGLES
    }
}

/// RateControl's reserved concurrency (template.yaml).
const RATE_CONTROL_RESERVED: u32 = 1;

/// GetUsers and ReputationGuard: one invocation each at a time, unreserved.
const UNRESERVED_SINGLES: u32 = 2;

/// The demand the tests check against: 20,000/s-sized mappings at `rate`.
#[cfg(test)]
fn test_demand(rate: f64, ses_events: u32) -> Demand {
    Demand {
        rate,
        send_email: 92,
        create_emails: 38,
        ses_events,
        reserved: 96,
        events_per_email: 1.01,
        in_flight: 9_200,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stacks_demand_is_what_ratecontrol_sizes() {
        let stack = Stack {
            send_email: Environment {
                records_at_once: 100,
                memory_mb: 1_769,
            },
            create_emails: Composer {
                batch: 100,
                memory_mb: 1_769,
            },
            create_emails_ceiling: 1_000,
            ses_events: Handler::DEFAULT,
            track_opens_and_clicks: false,
            public_urls: PublicUrls::DEFAULT,
        };
        let d = stack.demand(20_000.0);
        assert_eq!(
            (d.send_email, d.create_emails, d.ses_events, d.reserved),
            (92, 38, 266, 96)
        );
        assert_eq!(d.in_flight, 9_200);
    }
}

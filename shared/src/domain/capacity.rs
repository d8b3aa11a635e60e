//! What a campaign at a send rate needs of the AWS account, added up against each limit
//! (`aws_limits`), and which one binds: `mailctl plan` prints every line, RateControl logs
//! the binding one each minute. Pure: the caller reads the account (Lambda's
//! GetAccountSettings, DynamoDB's per-table quota and the sends table's own throughput,
//! SES's quota) or takes the defaults.

use super::aws_limits::{
    eventbridge_invocations_per_second, DYNAMODB_PARTITION_WRITE_UNITS, DYNAMODB_TABLE_WRITE_UNITS,
    LAMBDA_ACCOUNT_CONCURRENCY, SQS_IN_FLIGHT,
};
use super::events_path::{events_per_email, handlers_for, Handler};
use super::fan_out::{composers_for, Composer};
use super::ledger::{LedgerWrite, CAMPAIGN_SHARDS};
use super::public_urls::PublicUrls;
use super::send_rate::{Environment, SendRate};

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

/// What the account allows: read from it where the stack's credentials can, else AWS's
/// defaults (`Account::defaults`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    pub region: String,
    pub lambda_concurrency: u32,
    /// The pool the functions without reserved concurrency share (SendEmail, CreateEmails,
    /// SesEvents, GetUsers, ReputationGuard, and every other unreserved function in the
    /// region): the account's concurrency less every reservation, this stack's and any
    /// other's. When read, the check is against it.
    pub lambda_unreserved: Option<u32>,
    /// The most write units a second the sends table takes: DynamoDB's per-table quota, or
    /// less where the table is provisioned or has an on-demand maximum.
    pub sends_table_write_units: f64,
    /// The same for its campaign index (the per-table quota applies to each index too).
    pub sends_index_write_units: f64,
    /// What the table and its index serve at once, before DynamoDB scales them (their warm
    /// throughput), when read: not a ceiling (on demand, DynamoDB serves up to twice the
    /// previous peak at once and scales beyond it within 30 minutes), but a campaign that
    /// needs more starts throttled (`warm_up`).
    pub sends_table_warm_write_units: Option<f64>,
    pub sends_index_warm_write_units: Option<f64>,
    /// SES's maximum send rate and what is left of its 24-hour quota, when read.
    pub ses_max_send_rate: Option<f64>,
    pub ses_left_24_hours: Option<f64>,
    /// Which of the limits above were read from the account this time (`LAMBDA_CONCURRENCY`,
    /// `TABLE_QUOTA`, `SENDS_TABLE_THROUGHPUT`).
    pub read: Vec<&'static str>,
    /// Which stand at an earlier read, this one not answered (or, for DynamoDB's quota,
    /// not asked: `DescribeLimits` throttles callers of more than one a minute). The others
    /// are AWS's defaults.
    pub earlier: Vec<&'static str>,
}

impl Account {
    pub const LAMBDA_CONCURRENCY: &'static str = "lambda concurrency";
    pub const TABLE_QUOTA: &'static str = "dynamodb per-table write quota";
    pub const SENDS_TABLE_THROUGHPUT: &'static str = "sends table throughput";

    pub fn defaults(region: &str) -> Self {
        Self {
            region: region.to_owned(),
            lambda_concurrency: LAMBDA_ACCOUNT_CONCURRENCY,
            lambda_unreserved: None,
            sends_table_write_units: DYNAMODB_TABLE_WRITE_UNITS,
            sends_index_write_units: DYNAMODB_TABLE_WRITE_UNITS,
            sends_table_warm_write_units: None,
            sends_index_warm_write_units: None,
            ses_max_send_rate: None,
            ses_left_24_hours: None,
            read: Vec::new(),
            earlier: Vec::new(),
        }
    }
}

/// One limit: what the campaign needs of it, what the account has, and what to raise.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub limit: &'static str,
    pub needed: f64,
    pub available: f64,
    pub raise: &'static str,
}

impl Check {
    pub fn binds(&self) -> bool {
        self.needed > self.available
    }

    /// Needed over available.
    pub fn share(&self) -> f64 {
        self.needed / self.available.max(f64::MIN_POSITIVE)
    }
}

/// Every limit the campaign of `emails` (none: its size unknown) at `demand` meets.
pub fn checks(demand: &Demand, account: &Account, emails: Option<f64>) -> Vec<Check> {
    let rate = demand.rate.max(0.0);
    let (writes, index_writes) = demand.writes();
    // The functions without reserved concurrency share what the account leaves unreserved;
    // unread, all of them and the reservations share its concurrency.
    let lambda = match account.lambda_unreserved {
        Some(left) => Check {
            limit: "Lambda unreserved concurrent executions",
            needed: f64::from(demand.unreserved()),
            available: f64::from(left),
            raise: "Lambda's concurrent executions in Service Quotas (or fewer reserved elsewhere in the region), or a lower SendRatePerSecond",
        },
        None => Check {
            limit: "Lambda concurrent executions",
            needed: f64::from(demand.unreserved() + demand.reserved),
            available: f64::from(account.lambda_concurrency),
            raise: "Lambda's concurrent executions in Service Quotas, or a lower SendRatePerSecond",
        },
    };
    let mut out = vec![
        lambda,
        Check {
            limit: "sends table write units/s",
            needed: writes,
            available: account.sends_table_write_units,
            raise: "DynamoDB's table-level write throughput quota (Service Quotas), or the table's provisioned or maximum on-demand writes",
        },
        Check {
            limit: "campaign index write units/s",
            needed: index_writes,
            available: account.sends_index_write_units,
            raise: "the index's write throughput quota (Service Quotas), as the table's",
        },
        Check {
            limit: "campaign index partition write units/s",
            needed: index_writes / CAMPAIGN_SHARDS as f64,
            available: DYNAMODB_PARTITION_WRITE_UNITS,
            raise: "not adjustable: more campaign shards, or a lower SendRatePerSecond",
        },
        Check {
            limit: "EventBridge invocations/s",
            needed: rate * demand.events_per_email,
            available: eventbridge_invocations_per_second(&account.region),
            raise: "EventBridge's invocations quota in Service Quotas (beyond it SES's events are delayed)",
        },
        Check {
            limit: "SQS messages in flight",
            needed: f64::from(demand.in_flight),
            available: f64::from(SQS_IN_FLIGHT),
            raise: "not adjustable: smaller batches or fewer environments",
        },
    ];
    if let Some(max) = account.ses_max_send_rate {
        out.push(Check {
            limit: "SES maximum send rate",
            needed: rate,
            available: max,
            raise: "SES's sending quota (a request to AWS), or a lower SendRatePerSecond",
        });
    }
    if let (Some(left), Some(emails)) = (account.ses_left_24_hours, emails) {
        out.push(Check {
            limit: "SES 24-hour quota left",
            needed: emails,
            available: left,
            raise: "SES's daily sending quota; the rest waits for the window to roll",
        });
    }
    out
}

/// What to say when the sends table's or its index's warm throughput is below the campaign's
/// writes: not a limit (on demand, DynamoDB serves up to twice the previous peak at once and
/// scales beyond it within 30 minutes), but a campaign beyond it is throttled until then, for
/// about half an hour per doubling.
pub fn warm_up(demand: &Demand, account: &Account) -> Option<String> {
    let (table, index) = demand.writes();
    // Scaled up to what it may take at most: beyond that the binding line says it.
    let short = [
        (
            "sends table",
            account.sends_table_warm_write_units,
            table,
            account.sends_table_write_units,
        ),
        (
            "campaign index",
            account.sends_index_warm_write_units,
            index,
            account.sends_index_write_units,
        ),
    ]
    .into_iter()
    .filter_map(|(what, warm, needed, ceiling)| {
        let reached = needed.min(ceiling);
        warm.filter(|w| reached > *w)
            .map(|w| (what, w, needed, reached))
    })
    .map(|(what, warm, needed, reached)| {
        let doublings = (reached / warm).log2().ceil();
        format!(
            "the {what} serves {warm:.0} write units/s at once and the rate needs {needed:.0}: \
             throttled for up to {:.0} minutes ({doublings:.0} doublings) while DynamoDB scales it",
            doublings * 30.0
        )
    })
    .collect::<Vec<_>>();
    (!short.is_empty()).then(|| {
        format!(
            "{}; pre-warm them (docs/deploying.md, \"The sends table's throughput\")",
            short.join("; ")
        )
    })
}

/// The limit that binds hardest (the largest share above 1), if any.
pub fn binding(checks: &[Check]) -> Option<&Check> {
    checks
        .iter()
        .filter(|c| c.binds())
        .max_by(|a, b| a.share().total_cmp(&b.share()))
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

    fn demand(rate: f64, ses_events: u32) -> Demand {
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

    #[test]
    fn the_limit_that_binds_is_named_with_what_to_raise() {
        // 20,000/s in us-east-1 with SesEvents at 128 MB: 494 environments fit the account;
        // the sends table's default 40,000 write units do not (60,200 needed), and its
        // sparse index just over (40,200: the mark and the delivery note), 628 units a
        // second on each of its 64 partitions, within their 1,000.
        let account = Account::defaults("us-east-1");
        let all = checks(&demand(20_000.0, 266), &account, None);
        let lambda = &all[0];
        assert_eq!((lambda.needed, lambda.binds()), (494.0, false));
        assert_eq!(all[1].needed.round(), 60_200.0);
        assert_eq!(all[2].needed.round(), 40_200.0);
        assert_eq!(all[3].needed.round(), 628.0);
        assert!(all[1].binds() && all[2].binds() && !all[3].binds());
        assert_eq!(binding(&all).unwrap().limit, "sends table write units/s");
        // The quota raised to 80,000 (docs/deploying.md): EventBridge binds then.
        let raised = Account {
            sends_table_write_units: 80_000.0,
            ..Account::defaults("us-east-1")
        };
        let after = checks(&demand(20_000.0, 266), &raised, None);
        assert_eq!(binding(&after).unwrap().limit, "EventBridge invocations/s");
        // EventBridge: 20,200 invocations/s against us-east-1's 18,750; 1,100 elsewhere.
        assert!(all[4].binds());
        let elsewhere = checks(
            &demand(2_000.0, 30),
            &Account::defaults("ca-central-1"),
            None,
        );
        assert_eq!(
            binding(&elsewhere).unwrap().limit,
            "EventBridge invocations/s"
        );
        // A small campaign binds nothing; SES's quota and the day's left are checked once read.
        let mut read = Account::defaults("us-east-1");
        read.ses_max_send_rate = Some(14.0);
        read.ses_left_24_hours = Some(50_000.0);
        let small = checks(&demand(14.0, 2), &read, Some(40_000.0));
        assert_eq!(binding(&small), None, "{small:?}");
        let big = checks(&demand(14.0, 2), &read, Some(60_000.0));
        assert_eq!(binding(&big).unwrap().limit, "SES 24-hour quota left");
        // An account of 400 concurrent executions binds at 20,000/s with these mappings.
        read.lambda_concurrency = 400;
        let lambda = &checks(&demand(20_000.0, 266), &read, None)[0];
        assert!(lambda.binds() && lambda.share() > 1.2);
    }

    #[test]
    fn what_is_left_unreserved_is_what_the_unreserved_functions_share() {
        // Read: SendEmail, CreateEmails, SesEvents, GetUsers and ReputationGuard (92 + 38 +
        // 266 + 2) against what the account leaves them; another stack's reservations leave 300.
        let mut account = Account::defaults("us-east-1");
        account.lambda_unreserved = Some(903);
        let lambda = &checks(&demand(20_000.0, 266), &account, None)[0];
        assert_eq!(
            (lambda.limit, lambda.needed, lambda.binds()),
            ("Lambda unreserved concurrent executions", 398.0, false)
        );
        account.lambda_unreserved = Some(300);
        let lambda = &checks(&demand(20_000.0, 266), &account, None)[0];
        assert!(lambda.binds(), "{lambda:?}");
    }

    #[test]
    fn warm_throughput_is_a_warm_up_not_a_ceiling() {
        // A new on-demand table serves 4,000 at once: the quota raised to 80,000 holds the
        // 60,200 units of 20,000/s (no limit binds on the table), and the warm-up is said.
        let mut account = Account::defaults("us-east-1");
        account.sends_table_write_units = 80_000.0;
        account.sends_index_write_units = 80_000.0;
        account.sends_table_warm_write_units = Some(4_000.0);
        let all = checks(&demand(20_000.0, 266), &account, None);
        assert!(!all[1].binds() && !all[2].binds(), "{all:?}");
        let note = warm_up(&demand(20_000.0, 266), &account).unwrap();
        assert!(
            note.contains("the sends table serves 4000 write units/s at once and the rate needs 60200: throttled for up to 120 minutes (4 doublings)"),
            "{note}"
        );
        // Up to the table's quota, not beyond it (the binding line says the rest): from
        // 4,000 to a quota of 16,000 is two doublings.
        let mut capped = account.clone();
        capped.sends_table_write_units = 16_000.0;
        let note = warm_up(&demand(20_000.0, 266), &capped).unwrap();
        assert!(note.contains("up to 60 minutes (2 doublings)"), "{note}");
        // The table pre-warmed and its index not: the index is said (40,200 over 4,000).
        account.sends_table_warm_write_units = Some(60_200.0);
        account.sends_index_warm_write_units = Some(4_000.0);
        let note = warm_up(&demand(20_000.0, 266), &account).unwrap();
        assert!(
            note.starts_with("the campaign index serves 4000")
                && !note.contains("sends table serves"),
            "{note}"
        );
        // Both pre-warmed, or not read: nothing to say.
        account.sends_index_warm_write_units = Some(40_200.0);
        assert_eq!(warm_up(&demand(20_000.0, 266), &account), None);
        account.sends_table_warm_write_units = None;
        account.sends_index_warm_write_units = None;
        assert_eq!(warm_up(&demand(20_000.0, 266), &account), None);
    }
}

//! SES's events on their way to SesEvents, and Lambda's account concurrency. Each email SES
//! accepts yields its events (DELIVERY; SEND too in the design before it); EventBridge
//! delivers each to the SesEvents queue within its invocation quota (`limits::Throughput`,
//! the region's `eventbridge_invocations_per_second`): beyond it a delivery is retried with
//! backoff, delayed, never dropped. SesEvents' environments (the real stage, writing to the
//! lab's sends table, its CPU share by its memory, one DynamoDB round trip a batch) consume
//! the queue, and the lag of each event is taken from its email's acceptance to its batch
//! handled.
//! `Account` is the account's concurrency, shared by every mapping's invocations once the
//! reserved functions took theirs: a mapping cannot scale past it.

use super::polling::{failures, poll, Ramp};
use super::sending::cpu_time;
use crate::limits::{Charge, Limit, Throughput};
use crate::rate::queue::LabQueue;
use aws_lambda_events::event::sqs::SqsEvent;
use futures::future::BoxFuture;
use mailflow::config::SesEventsConfig;
use mailflow::domain::aws_limits::eventbridge_invocations_per_second;
use mailflow::domain::events_path::{Handler, EVENT_CPU_US};
use mailflow::ports::memory::MemorySubscribers;
use mailflow::ports::{Mailer, OutgoingEmail, SendError, SendRecordNotes};
use mailflow::stages::ses_events::SesEvents;
use mailflow_local::seed::Rng;
use serde::Serialize;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// EventBridge retries a throttled delivery with exponential backoff and jitter (for up to
/// 24 hours): the first wait's ceiling, doubling up to the last; each wait is drawn below it,
/// so deliveries throttled together do not come back together.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MOST: Duration = Duration::from_secs(60);

/// Lambda's concurrent executions left to the mappings: the account's, less the reserved
/// functions' and GetUsers' one invocation. An invocation waits for room (Lambda throttles
/// it and the mapping polls again), so the mappings never run more than `available` at once.
pub(crate) struct Account {
    room: tokio::sync::Semaphore,
    pub(crate) available: u32,
    busy: AtomicU32,
    peak: AtomicU32,
    waited: AtomicU64,
}

impl Account {
    pub(crate) fn new(available: u32) -> Arc<Self> {
        Arc::new(Self {
            room: tokio::sync::Semaphore::new(available as usize),
            available,
            busy: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            waited: AtomicU64::new(0),
        })
    }

    /// `invoke`, each call run within the account's concurrency.
    pub(crate) fn around<F, Fut>(
        self: &Arc<Self>,
        invoke: F,
    ) -> impl Fn(SqsEvent) -> BoxFuture<'static, Vec<String>> + Send + 'static
    where
        F: Fn(SqsEvent) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<String>> + Send + 'static,
    {
        let account = self.clone();
        move |event| {
            let (account, invocation) = (account.clone(), invoke(event));
            Box::pin(async move {
                let permit = match account.room.try_acquire() {
                    Ok(permit) => permit,
                    Err(_) => {
                        account.waited.fetch_add(1, Ordering::Relaxed);
                        account.room.acquire().await.expect("never closed")
                    }
                };
                let busy = account.busy.fetch_add(1, Ordering::Relaxed) + 1;
                account.peak.fetch_max(busy, Ordering::Relaxed);
                let failed = invocation.await;
                account.busy.fetch_sub(1, Ordering::Relaxed);
                drop(permit);
                failed
            })
        }
    }

    /// The most invocations at once, and how many waited for room.
    pub(crate) fn seen(&self) -> (u32, u64) {
        (
            self.peak.load(Ordering::Relaxed),
            self.waited.load(Ordering::Relaxed),
        )
    }
}

/// The events path's figures: each event's lag from its email's acceptance to SesEvents'
/// batch handled (none past the 99th percentile's reach: events still unhandled at the end
/// count as endless), EventBridge's throttles, SesEvents' environments.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsReport {
    pub region: String,
    pub kinds: Vec<&'static str>,
    pub environments: u32,
    pub events: usize,
    pub handled: usize,
    pub lag_p50_s: Option<f64>,
    pub lag_p99_s: Option<f64>,
    pub eventbridge_throttles: u64,
    /// Lambda's concurrency left to the mappings, the most invocations at once, and how many
    /// waited for room.
    pub account_available: u32,
    pub account_peak: u32,
    pub account_waits: u64,
}

pub(crate) struct EventsPath {
    limits: Throughput,
    eventbridge: Limit,
    region: String,
    kinds: &'static [&'static str],
    pub(crate) queue: Arc<LabQueue>,
    /// Each email's acceptance, by the message id SES gave it, which its events carry.
    accepted: Mutex<HashMap<String, Instant>>,
    lags: Mutex<Vec<Duration>>,
    retries: AtomicU64,
    /// The retries' jitter.
    rng: Mutex<Rng>,
}

impl EventsPath {
    /// `send_events`: SES's SEND events published too, as before.
    pub(crate) fn new(region: &str, send_events: bool, seed: u64) -> Arc<Self> {
        Arc::new(Self {
            limits: Throughput::new(seed),
            eventbridge: Limit {
                name: "EventBridge invocations",
                per_second: eventbridge_invocations_per_second(region),
            },
            region: region.to_owned(),
            kinds: if send_events {
                &["Send", "Delivery"]
            } else {
                &["Delivery"]
            },
            // As the template's SesEventsQueue: 180 s visibility, 5 receives.
            queue: Arc::new(LabQueue::new(Duration::from_secs(180), 5)),
            accepted: Mutex::default(),
            lags: Mutex::default(),
            retries: AtomicU64::new(0),
            rng: Mutex::new(Rng::new(seed ^ 0x45b)),
        })
    }

    /// SES accepted an email under `ses_message_id`: its events, which carry that id, go to
    /// EventBridge, each on its own. (On AWS a Delivery comes once the receiving server
    /// answers, usually seconds later; here at once, the sooner its note meets the sends.)
    pub(crate) fn accepted(self: &Arc<Self>, campaign: &str, user: &str, ses_message_id: &str) {
        mailflow::runtime::lock(&self.accepted).insert(ses_message_id.to_owned(), Instant::now());
        for kind in self.kinds {
            let section = kind.to_lowercase();
            let body = mailflow_local::ses_event_source::event(
                kind,
                Some((campaign, user)),
                ses_message_id,
                serde_json::json!({ section: {} }),
            );
            tokio::spawn(self.clone().deliver(body));
        }
    }

    /// EventBridge's delivery of one event to the queue: admitted within the quota, else
    /// retried with backoff until it is.
    async fn deliver(self: Arc<Self>, body: String) {
        let mut wait = RETRY_FIRST;
        while (self.limits)
            .admit(&[Charge::new(self.eventbridge, "", 1.0)])
            .await
            .is_err()
        {
            self.retries.fetch_add(1, Ordering::Relaxed);
            let jitter = mailflow::runtime::lock(&self.rng).unit();
            tokio::time::sleep(wait.mul_f64(jitter)).await;
            wait = (wait * 2).min(RETRY_MOST);
        }
        self.queue.send([body]);
    }

    /// SesEvents' environments on the events queue, within the account's concurrency, their
    /// notes and reconciles written to `records` (the sends table, behind its limits).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_handlers<R: SendRecordNotes + Clone + 'static>(
        self: &Arc<Self>,
        records: R,
        environments: u32,
        handler: Handler,
        ramp: Ramp,
        sqs: (Duration, Duration),
        store: (Duration, Duration),
        done: Arc<AtomicBool>,
        account: &Arc<Account>,
    ) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let vars: HashMap<&str, String> = [
            ("MONGODB_URI", "mongodb://127.0.0.1:1".to_owned()),
            ("SENDS_TABLE_NAME", "lab-sends".into()),
            ("CAMPAIGNS_TABLE_NAME", "lab-campaigns".into()),
            ("RECORD_CONCURRENCY", handler.batch.to_string()),
        ]
        .into_iter()
        .collect();
        let config = SesEventsConfig::from_source(&|k: &str| vars.get(k).cloned())?;
        let per_event = cpu_time(EVENT_CPU_US, handler.memory_mb);
        let mut tasks = Vec::new();
        for environment in 0..environments {
            let stage = Arc::new(SesEvents::new(
                records.clone(),
                MemorySubscribers::default(),
                config.clone(),
            ));
            let (path, cpu) = (self.clone(), Arc::new(crate::rate::latency::Cpu::default()));
            tasks.push(poll(
                self.queue.clone(),
                handler.batch,
                environment,
                ramp.clone(),
                sqs,
                done.clone(),
                account.around(move |event: SqsEvent| {
                    let (stage, path, cpu) = (stage.clone(), path.clone(), cpu.clone());
                    async move {
                        // Its CPU one event after another; its writes at once, one round trip.
                        cpu.spend(per_event * event.records.len() as u32).await;
                        tokio::time::sleep(store.0 + (store.1 - store.0) / 2).await;
                        let failed = failures(&stage.handle(event.clone()).await.0);
                        path.handled(&event, &failed);
                        failed
                    }
                }),
            ));
        }
        Ok(tasks)
    }

    /// A batch handled: the lag of each event but the `failed` ones, which SQS brings back.
    fn handled(&self, event: &SqsEvent, failed: &[String]) {
        let now = Instant::now();
        let accepted = mailflow::runtime::lock(&self.accepted);
        let mut lags = mailflow::runtime::lock(&self.lags);
        let records = (event.records.iter())
            .filter(|r| r.message_id.as_ref().is_none_or(|id| !failed.contains(id)));
        for record in records {
            let id = serde_json::from_str::<serde_json::Value>(
                record.body.as_deref().unwrap_or_default(),
            )
            .ok()
            .and_then(|v| v["detail"]["mail"]["messageId"].as_str().map(str::to_owned));
            if let Some(at) = id.and_then(|id| accepted.get(&id).copied()) {
                lags.push(now - at);
            }
        }
    }

    /// Events SES's acceptances so far yield.
    pub(crate) fn expected(&self) -> usize {
        mailflow::runtime::lock(&self.accepted).len() * self.kinds.len()
    }

    pub(crate) fn handled_count(&self) -> usize {
        mailflow::runtime::lock(&self.lags).len()
    }

    /// Every event SES's acceptances so far yield is handled or in the events DLQ.
    pub(crate) fn settled(&self) -> bool {
        self.handled_count() + self.queue.left().1 >= self.expected()
    }

    pub(crate) fn report(&self, environments: u32, account: &Account) -> EventsReport {
        let events = self.expected();
        let mut lags: Vec<f64> = (mailflow::runtime::lock(&self.lags).iter())
            .map(Duration::as_secs_f64)
            .collect();
        let handled = lags.len();
        lags.resize(events.max(handled), f64::INFINITY);
        lags.sort_by(f64::total_cmp);
        let at = |share: f64| {
            let lag = lags.get(((lags.len().max(1) - 1) as f64 * share).round() as usize);
            lag.copied().filter(|l| l.is_finite())
        };
        let (account_peak, account_waits) = account.seen();
        EventsReport {
            region: self.region.clone(),
            kinds: self.kinds.to_vec(),
            environments,
            events,
            handled,
            lag_p50_s: at(0.5),
            lag_p99_s: at(0.99),
            eventbridge_throttles: self.limits.throttles(self.eventbridge.name),
            account_available: account.available,
            account_peak,
            account_waits,
        }
    }
}

/// A mailer whose every acceptance publishes the email's SES events.
pub(crate) struct Publishing<M> {
    pub(crate) inner: M,
    pub(crate) events: Arc<EventsPath>,
}

impl<M: Mailer> Mailer for Publishing<M> {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        let id = self.inner.send(email).await?;
        (self.events).accepted(email.key.campaign_id(), &email.key.user_id, &id);
        Ok(id)
    }

    async fn send_quota(
        &self,
    ) -> Result<mailflow::domain::send_rate::SendQuota, mailflow::domain::send_rate::QuotaUnknown>
    {
        self.inner.send_quota().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::sends_table::{IndexDesign, SendsTable, TableQuota};
    use mailflow::domain::aws_limits::LAMBDA_ACCOUNT_CONCURRENCY;
    use mailflow::domain::capacity::Stack;
    use mailflow::domain::events_path::{events_per_email, handlers_for};
    use mailflow::domain::fan_out::Composer;
    use mailflow::domain::public_urls::PublicUrls;
    use mailflow::domain::send_rate::Environment;

    /// SES accepting `rate` emails a second for `seconds`, their events through EventBridge
    /// in us-east-1 to `environments` SesEvents environments at 128 MB, which share the
    /// account with SendEmail's and CreateEmails' environments sized for the rate (busy
    /// throughout) and the reserved functions; two minutes after the last acceptance to
    /// catch up.
    async fn events_at(
        rate: u32,
        seconds: u32,
        send_events: bool,
        environments: u32,
    ) -> EventsReport {
        mailflow::runtime::clock::follow_tokio_clock();
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
        let demand = stack.demand(f64::from(rate));
        // Every other environment of the stack: SesEvents has what they leave.
        let others = demand.unreserved() - demand.ses_events + demand.reserved;
        let account = Account::new(LAMBDA_ACCOUNT_CONCURRENCY - others);
        let path = EventsPath::new("us-east-1", send_events, 7);
        let done = Arc::new(AtomicBool::new(false));
        let ramp = Ramp::new(Instant::now(), false);
        let ms = Duration::from_millis;
        let tasks = path
            .start_handlers(
                SendsTable::new(
                    Arc::default(),
                    (ms(5), ms(15)),
                    TableQuota::Raised,
                    IndexDesign::Sparse,
                    7,
                ),
                environments,
                Handler::DEFAULT,
                ramp,
                (ms(10), ms(30)),
                (ms(5), ms(15)),
                done.clone(),
                &account,
            )
            .unwrap();
        let per_step = rate / 100;
        for step in 0..seconds * 100 {
            for n in 0..per_step {
                let id = step * per_step + n;
                path.accepted("weekly-2026-W47", &format!("u{id}"), &format!("m{id}"));
            }
            tokio::time::sleep(ms(10)).await;
        }
        let until = Instant::now() + Duration::from_secs(120);
        while !path.settled() && Instant::now() < until {
            tokio::time::sleep(ms(100)).await;
        }
        done.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.unwrap();
        }
        path.report(environments, &account)
    }

    /// At 20,000 emails/s (scaled down to four seconds of it), the design before (SEND and
    /// DELIVERY, two SesEvents environments) leaves most events unhandled two minutes later;
    /// DELIVERY alone on the environments RateControl sizes is handled within a minute, and
    /// the mappings together stay within the account's concurrency without waiting for it.
    #[tokio::test(start_paused = true)]
    async fn the_events_keep_up_with_twenty_thousand_emails_a_second() {
        let before = events_at(20_000, 4, true, 2).await;
        assert_eq!(before.events, 160_000, "{before:?}");
        assert!(before.lag_p99_s.is_none_or(|lag| lag > 60.0), "{before:?}");
        assert!(before.eventbridge_throttles > 0, "{before:?}");

        let sized = handlers_for(20_000.0 * events_per_email(false), &Handler::DEFAULT);
        let now = events_at(20_000, 4, false, sized).await;
        assert_eq!((now.events, now.handled), (80_000, 80_000), "{now:?}");
        assert!(now.lag_p99_s.is_some_and(|lag| lag <= 60.0), "{now:?}");
        assert!(now.account_peak <= now.account_available, "{now:?}");
        assert_eq!(now.account_waits, 0, "{now:?}");
    }
}

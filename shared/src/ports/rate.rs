//! The stack's one send-rate item: send slots taken from it and the shared rate.

use crate::domain::send_rate::{SharedRate, Slots};
use std::future::Future;

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

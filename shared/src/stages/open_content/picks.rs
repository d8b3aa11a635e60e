//! An email's picks as a request finds them: kept in this environment, frozen in the table,
//! or chosen and frozen now by the first request (the others wait for it, or take over
//! when its lease runs out); the fallback, not frozen, when time or the stores run out.

use super::*;

/// How often a request waiting for another's choice looks again.
pub(super) const WAIT_STEP: Duration = Duration::from_millis(100);
/// Frozen picks kept per environment (an email's slots and badges come to one environment
/// within moments; a frozen set never changes).
pub(super) const CACHED_EMAILS: usize = 10_000;
/// An email's picks as a request found them.
pub(super) struct Looked {
    pub(super) picks: Picks,
    /// Frozen: every open shows them (else the fallback shown now, never cached).
    pub(super) frozen: bool,
    /// What this request's choice counts (`Frozen`, `Fallback`), if it froze.
    pub(super) counts: Counts,
}

impl Looked {
    fn unfrozen(picks: Picks) -> Self {
        Self {
            picks,
            frozen: false,
            counts: Vec::new(),
        }
    }

    fn frozen(picks: Picks) -> Self {
        Self {
            picks,
            frozen: true,
            counts: Vec::new(),
        }
    }
}

impl<S: OpenContentStore, D: PickDirectory, R: SendRecordNotes> OpenContent<S, D, R> {
    /// What must be left of the deadline once the picks are found: the counting writes and a
    /// badge's read (the subscription check runs while the picks are looked up).
    pub(super) fn after_picks(&self) -> Duration {
        self.config.count_timeout + READ_TIMEOUT
    }

    /// The email's picks, and whether they are frozen. The first request computes and
    /// freezes; a concurrent one waits for that answer, and takes over when the first one's
    /// lease runs out (it died); when everything fails, the fallback, not frozen. Every
    /// request to the table is bounded by `READ_TIMEOUT`, and all of it ends `after_picks`
    /// before the request's deadline (then the fallback, not frozen).
    pub(super) async fn picks(&self, slot: &SlotRef, owner: &str, by: Deadline) -> Looked {
        let email = slot.email();
        if let Some(picks) = self.cached(&email) {
            return Looked::frozen(picks);
        }
        let by = by.before(self.after_picks());
        let out_of_time = || {
            tracing::warn!(
                "picks not found within the request's deadline; the fallback is shown, not frozen"
            );
            Looked::unfrozen(Picks::fallback(self.now_ms()))
        };
        match within(by.cap(READ_TIMEOUT), self.store.frozen(&email)).await {
            Ok(Some(picks)) => return Looked::frozen(self.keep(&email, picks)),
            Ok(None) => {}
            Err(err) => {
                tracing::error!(reason = %err, "frozen picks not read; the fallback is shown");
                return Looked::unfrozen(Picks::fallback(self.now_ms()));
            }
        }
        let lease = self.config.compute_timeout + Duration::from_secs(1);
        // Long enough to outlast a dead winner's lease and take over, within the deadline.
        let give_up = (Instant::now() + lease * 2).min(by.0);
        loop {
            if by.left().is_zero() {
                return out_of_time();
            }
            let now = self.now_ms();
            let claim = self
                .store
                .claim(&email, owner, now, now + lease.as_millis() as u64);
            match within(by.cap(READ_TIMEOUT), claim).await {
                Ok(FreezeClaim::Frozen(picks)) => return Looked::frozen(self.keep(&email, picks)),
                Ok(FreezeClaim::Won) => return self.choose_and_freeze(slot, now, by).await,
                Ok(FreezeClaim::Busy { lease_until_ms }) => {
                    // Wait for the holder's answer until its lease ends, then claim again.
                    loop {
                        if Instant::now() >= give_up {
                            tracing::warn!("picks still being chosen elsewhere; the fallback is shown, not frozen");
                            return Looked::unfrozen(Picks::fallback(self.now_ms()));
                        }
                        tokio::time::sleep(by.cap(WAIT_STEP)).await;
                        if let Ok(Some(picks)) =
                            within(by.cap(READ_TIMEOUT), self.store.frozen(&email)).await
                        {
                            return Looked::frozen(self.keep(&email, picks));
                        }
                        if self.now_ms() >= lease_until_ms {
                            break;
                        }
                    }
                }
                Err(err) => {
                    tracing::error!(reason = %err, "picks not claimed; the fallback is shown");
                    return Looked::unfrozen(Picks::fallback(now));
                }
            }
        }
    }

    /// The winner's work: choose within the time bound (else the fallback) and freeze. Who
    /// froze first wins, so what comes back is what every open shows. The choice ends a
    /// `READ_TIMEOUT` before `by`, leaving the freeze its time; a choice the deadline cut
    /// short (not its own bound) is shown but not frozen, so a later open chooses again.
    pub(super) async fn choose_and_freeze(&self, slot: &SlotRef, now: u64, by: Deadline) -> Looked {
        let email = slot.email();
        let bound = by.before(READ_TIMEOUT).cap(self.config.compute_timeout);
        let chosen = self.choose(slot, now, bound).await;
        if chosen.fallback && bound < self.config.compute_timeout {
            tracing::warn!(
                "picks not chosen within the request's deadline; the fallback is shown, not frozen"
            );
            return Looked::unfrozen(chosen);
        }
        match within(by.cap(READ_TIMEOUT), self.store.freeze(&email, &chosen)).await {
            Ok(frozen) => {
                let mut counts = Vec::new();
                if frozen == chosen {
                    counts.push((OpenCount::Frozen, 1));
                    if chosen.fallback {
                        counts.push((OpenCount::Fallback, 1));
                    }
                }
                Looked {
                    picks: self.keep(&email, frozen),
                    frozen: true,
                    counts,
                }
            }
            Err(err) => {
                tracing::error!(reason = %err, "picks chosen but not frozen; shown, not cached");
                Looked::unfrozen(chosen)
            }
        }
    }

    pub(super) async fn choose(&self, slot: &SlotRef, now: u64, bound: Duration) -> Picks {
        let Ok(recipient) = UserId::parse(&slot.user_id) else {
            return Picks::fallback(now);
        };
        let read = self
            .directory
            .followers(&recipient, self.config.follows_read);
        match tokio::time::timeout(bound, read).await {
            Ok(Ok((followers, followed_back))) => Picks {
                items: choose(
                    &slot.user_id,
                    &followers,
                    &followed_back,
                    usize::from(self.config.slots),
                ),
                fallback: false,
                frozen_at_ms: now,
            },
            Ok(Err(err)) => {
                tracing::warn!(reason = %err, "picks not chosen; the fallback is frozen");
                Picks::fallback(now)
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = bound.as_millis() as u64,
                    "picks not chosen in time; the fallback"
                );
                Picks::fallback(now)
            }
        }
    }

    pub(super) fn cached(&self, email: &SendKey) -> Option<Picks> {
        self.frozen.lock().ok()?.get(email).cloned()
    }

    pub(super) fn keep(&self, email: &SendKey, picks: Picks) -> Picks {
        if let Ok(mut cache) = self.frozen.lock() {
            if cache.len() >= CACHED_EMAILS {
                cache.clear();
            }
            cache.insert(email.clone(), picks.clone());
        }
        picks
    }
}

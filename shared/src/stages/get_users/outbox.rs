//! A run segment's send buffers: users going now, users delayed to an instant within 15
//! minutes, and users held for a slot, each filled to its batch and handed out as a `Batch`
//! for the segment to start. Pure: what a batch does is GetUsers' (`GetUsers::start`).

use crate::domain::delivery::Place;
use crate::ports::MAX_BATCH_ENTRIES;
use std::collections::BTreeMap;

/// Users held per BatchWriteItem round (four calls of 25).
pub(super) const HOLD_BATCH: usize = 100;

/// A partial batch of users delayed to an instant this near is sent without waiting for
/// the batch to fill.
const DELAYED_FLUSH_LEAD_MS: i64 = 5_000;

/// A batch ready to go.
#[derive(Debug, PartialEq)]
pub(super) enum Batch {
    /// Onto the users queue now.
    Now(Vec<String>),
    /// Onto the users queue, invisible until this instant.
    Delayed(i64, Vec<String>),
    /// Into the waiting room for this slot: (user id, body).
    Held(i64, Vec<(String, String)>),
}

#[derive(Debug, Default)]
pub(super) struct Outbox {
    now: Vec<String>,
    delayed: BTreeMap<i64, Vec<String>>,
    held: BTreeMap<i64, Vec<(String, String)>>,
}

impl Outbox {
    /// No user of this segment has been held for the slot yet (its schedules come first: a
    /// segment that dies part-way leaves no user without a release).
    pub(super) fn first_for_slot(&self, at_ms: i64) -> bool {
        !self.held.contains_key(&at_ms)
    }

    /// Puts a user's message where `place` says; a batch that filled is handed out.
    pub(super) fn put(&mut self, place: Place, user_id: String, body: String) -> Option<Batch> {
        match place {
            Place::Now { .. } => {
                self.now.push(body);
                (self.now.len() == MAX_BATCH_ENTRIES)
                    .then(|| Batch::Now(std::mem::take(&mut self.now)))
            }
            Place::Delayed(at_ms) => {
                let bodies = self.delayed.entry(at_ms).or_default();
                bodies.push(body);
                (bodies.len() == MAX_BATCH_ENTRIES)
                    .then(|| Batch::Delayed(at_ms, std::mem::take(bodies)))
            }
            Place::Slot(at_ms) => {
                let users = self.held.entry(at_ms).or_default();
                users.push((user_id, body));
                (users.len() == HOLD_BATCH).then(|| Batch::Held(at_ms, std::mem::take(users)))
            }
            Place::Never => None,
        }
    }

    /// The delayed users whose instant is near `now_ms`: they go now rather than wait for
    /// company.
    pub(super) fn near(&mut self, now_ms: i64) -> Vec<Batch> {
        let mut near = Vec::new();
        while let Some(entry) = self.delayed.first_entry() {
            if *entry.key() - now_ms > DELAYED_FLUSH_LEAD_MS {
                break;
            }
            let (at_ms, bodies) = entry.remove_entry();
            if !bodies.is_empty() {
                near.push(Batch::Delayed(at_ms, bodies));
            }
        }
        near
    }

    /// Everything still buffered, at the segment's end.
    pub(super) fn rest(self) -> Vec<Batch> {
        let now = (!self.now.is_empty()).then_some(Batch::Now(self.now));
        let delayed = (self.delayed.into_iter())
            .filter(|(_, bodies)| !bodies.is_empty())
            .map(|(at_ms, bodies)| Batch::Delayed(at_ms, bodies));
        let held = (self.held.into_iter())
            .filter(|(_, users)| !users.is_empty())
            .map(|(at_ms, users)| Batch::Held(at_ms, users));
        now.into_iter().chain(delayed).chain(held).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(i: usize) -> String {
        format!("{{\"u\":{i}}}")
    }

    #[test]
    fn each_buffer_hands_out_a_batch_once_full_and_the_rest_at_the_end() {
        let mut outbox = Outbox::default();
        let now = Place::Now { slot_late_ms: None };
        let full: Vec<_> = (0..MAX_BATCH_ENTRIES)
            .filter_map(|i| outbox.put(now, i.to_string(), body(i)))
            .collect();
        assert_eq!(full.len(), 1, "the tenth user fills the batch");
        assert!(outbox.first_for_slot(7_000_000));
        let held: Vec<_> = (0..HOLD_BATCH + 1)
            .filter_map(|i| outbox.put(Place::Slot(7_000_000), i.to_string(), body(i)))
            .collect();
        assert!(matches!(&held[..], [Batch::Held(7_000_000, users)] if users.len() == HOLD_BATCH));
        assert!(!outbox.first_for_slot(7_000_000));
        assert_eq!(outbox.put(Place::Never, "x".into(), body(0)), None);
        outbox.put(Place::Delayed(60_000), "d".into(), body(1));
        outbox.put(now, "n".into(), body(2));
        assert_eq!(
            outbox.rest(),
            vec![
                Batch::Now(vec![body(2)]),
                Batch::Delayed(60_000, vec![body(1)]),
                Batch::Held(7_000_000, vec![(HOLD_BATCH.to_string(), body(HOLD_BATCH))]),
            ]
        );
    }

    #[test]
    fn a_delayed_batch_goes_early_only_when_its_instant_is_near() {
        let mut outbox = Outbox::default();
        outbox.put(Place::Delayed(100_000), "a".into(), body(0));
        outbox.put(Place::Delayed(200_000), "b".into(), body(1));
        assert!(outbox.near(90_000).is_empty());
        assert_eq!(
            outbox.near(96_000),
            vec![Batch::Delayed(100_000, vec![body(0)])]
        );
        assert_eq!(outbox.rest(), vec![Batch::Delayed(200_000, vec![body(1)])]);
    }
}

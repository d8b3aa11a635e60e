//! The audience read ahead of the loop that enqueues it. A task owns the scan and hands its
//! members over a bounded channel, so the cursors' next getMore runs while the loop sends:
//! read in line, every getMore's round trip stopped the enqueueing (at 20,000 users/s with
//! MongoDB 1-5 ms away that made GetUsers the campaign's bound: `mailctl pipeline`). Each
//! member carries the exclusions counted up to it, so a checkpoint records the exclusions
//! of what it took, never of users read ahead (the next segment counts those). The task
//! starts at the first member asked for (a paused or cancelled campaign's segment reads
//! nothing) and ends when this is dropped, which the run does as soon as its loop stops (a
//! getMore then in flight is dropped with it: the server's cursor times out).

use crate::domain::topics::ExclusionCounts;
use crate::ports::{AudienceMember, AudienceScan, StoreError};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Members in the channel at most: two of the MongoDB scan's cursor batches.
const AHEAD: usize = 2_000;

enum Read {
    Member(AudienceMember, ExclusionCounts),
    End(ExclusionCounts),
    /// The error, and the definition's fault when it was one.
    Failed(StoreError, Option<String>),
}

type Reader = Box<dyn FnOnce() -> JoinHandle<()> + Send>;

pub struct ReadAhead {
    members: mpsc::Receiver<Read>,
    /// Starts the reader (taken at the first member asked for).
    start: Option<Reader>,
    reader: Option<JoinHandle<()>>,
    excluded: ExclusionCounts,
    ended: bool,
    fault: Option<String>,
}

impl ReadAhead {
    pub fn new<A: AudienceScan + 'static>(mut scan: A) -> Self {
        let (send, members) = mpsc::channel(AHEAD);
        let reader = async move {
            loop {
                let read = match scan.next().await {
                    Ok(Some(member)) => Read::Member(member, scan.excluded().clone()),
                    Ok(None) => Read::End(scan.excluded().clone()),
                    Err(err) => Read::Failed(err, scan.definition_fault().map(str::to_owned)),
                };
                let last = !matches!(read, Read::Member(..));
                // The loop stopped taking (a checkpoint): nothing more to read.
                if send.send(read).await.is_err() || last {
                    return;
                }
            }
        };
        Self {
            members,
            start: Some(Box::new(move || tokio::spawn(reader))),
            reader: None,
            excluded: ExclusionCounts::default(),
            ended: false,
            fault: None,
        }
    }
}

impl AudienceScan for ReadAhead {
    async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
        if self.ended {
            return Ok(None);
        }
        if let Some(start) = self.start.take() {
            self.reader = Some(start());
        }
        match self.members.recv().await {
            Some(Read::Member(member, excluded)) => {
                self.excluded = excluded;
                Ok(Some(member))
            }
            Some(Read::End(excluded)) => {
                self.excluded = excluded;
                self.ended = true;
                Ok(None)
            }
            Some(Read::Failed(err, fault)) => {
                self.ended = true;
                self.fault = fault;
                Err(err)
            }
            None => {
                self.ended = true;
                Err(StoreError::mongo(
                    "the audience's reader stopped without a word (it panicked)",
                ))
            }
        }
    }

    fn excluded(&self) -> &ExclusionCounts {
        &self.excluded
    }

    fn definition_fault(&self) -> Option<&str> {
        self.fault.as_deref()
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Some(reader) = &self.reader {
            reader.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::local_time::ZoneField;
    use crate::domain::topics::Exclusion;
    use crate::domain::user_id::UserId;

    /// Users 0..n, every third one left out before it (as the MongoDB scan counts them).
    struct Scan {
        next: u32,
        n: u32,
        excluded: ExclusionCounts,
    }

    impl AudienceScan for Scan {
        async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
            if self.next >= self.n {
                return Ok(None);
            }
            if self.next % 3 == 0 {
                self.excluded.add(Exclusion::Unsubscribed);
            }
            self.next += 1;
            Ok(Some(AudienceMember {
                id: UserId::parse(&format!("u{:05}", self.next)).unwrap(),
                zone: ZoneField::Missing,
            }))
        }

        fn excluded(&self) -> &ExclusionCounts {
            &self.excluded
        }
    }

    fn scan(n: u32) -> Scan {
        Scan {
            next: 0,
            n,
            excluded: ExclusionCounts::default(),
        }
    }

    #[tokio::test]
    async fn members_in_order_with_the_exclusions_up_to_the_last_taken() {
        let mut ahead = ReadAhead::new(scan(5_000));
        for taken in 1..=10u32 {
            let member = ahead.next().await.unwrap().unwrap();
            assert_eq!(member.id.to_string(), format!("u{taken:05}"));
        }
        // Let the reader run far ahead: what it read past the tenth is not counted yet.
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(ahead.excluded().unsubscribed, 4, "users 1, 4, 7 and 10");
        let mut rest = 10;
        while ahead.next().await.unwrap().is_some() {
            rest += 1;
        }
        assert_eq!(rest, 5_000);
        assert_eq!(ahead.excluded().unsubscribed, 1_667);
        assert!(ahead.next().await.unwrap().is_none(), "ended stays ended");
    }

    #[tokio::test]
    async fn nothing_is_read_before_the_first_member_is_asked_for() {
        struct Counting(
            std::sync::Arc<std::sync::atomic::AtomicU32>,
            ExclusionCounts,
        );
        impl AudienceScan for Counting {
            async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(None)
            }
            fn excluded(&self) -> &ExclusionCounts {
                &self.1
            }
        }
        let reads = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut ahead = ReadAhead::new(Counting(reads.clone(), ExclusionCounts::default()));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(ahead.next().await.unwrap().is_none());
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failed_read_is_the_scans_error() {
        struct Failing;
        impl AudienceScan for Failing {
            async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
                Err(StoreError("no primary".into()))
            }
            fn excluded(&self) -> &ExclusionCounts {
                const NONE: ExclusionCounts = ExclusionCounts {
                    unsubscribed: 0,
                    suppressed: 0,
                    left_topic: 0,
                    unreadable_choice: 0,
                };
                &NONE
            }
        }
        let mut ahead = ReadAhead::new(Failing);
        let err = ahead.next().await.unwrap_err();
        assert!(err.to_string().contains("no primary"), "{err}");
    }
}

//! The history window: a ring of recent events, each with its object, previous object and revision.
//!
//! Sized like upstream: it starts at `min_events` and, whenever it is full, doubles (up to
//! `max_events`) while its oldest event is younger than the window, or halves (down to `min_events`)
//! once even the newest quarter is older than the window.
//!
//! A byte budget (`HistoryConfig::max_bytes`) caps the window by what its events hold (their
//! objects, and the frames their memos keep for their watchers): past it,
//! the oldest events leave (whatever the capacity), so one resource of large objects cannot take
//! the server's memory. A position they leave behind is answered 410 Expired, as after any
//! eviction. The newest event always stays.
//!
//! Evicted events are not dropped where they leave: they wait in `evicted` until the writer takes
//! them ([`History::take_evicted`], a few hundred at a time) and drops them off its thread, after
//! the lock. Dropping an event frees its objects, memory no one has touched since the event was
//! new: a tenth of the ingest thread's time in a warm catch-up, done under the write lock.
//!
//! ## Invariants
//! - `bytes` is the sum of the ring's events' `bytes`; `evicted_bytes` of `evicted`'s, which stays
//!   under `REAP_BYTES` plus one event after each apply.
//! - Under a byte budget, `memo_bytes` is the sum of what the ring's events' memos hold: each is
//!   charged to it when it enters the ring and released when it leaves (eviction or reset).
//! - Events carry consecutive sequence numbers; `ring[i].seq == start_seq + i`.
//! - Every event with `rv > floor_rv` is in the ring (or not yet received). Watching from any
//!   `rv >= floor_rv` is exact; older positions are gone (410 Expired).
//! - Revisions are non-decreasing along the ring (several events may share one etcd revision).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::Bytes;

use crate::model::{HistoryConfig, Object};
use crate::wire::EventMemo;

/// A position that is no longer in the window: events after it were evicted. Serving from it would
/// skip changes, so it is answered 410 Expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    /// The oldest revision the window can still serve from (its floor).
    pub oldest: u64,
}

/// One change to one object, as applied to the store.
pub(crate) struct Event {
    pub seq: u64,
    pub rv: u64,
    /// The new state; `None` for a deletion.
    pub object: Option<Object>,
    /// The previous state; `None` for a creation.
    pub prev: Option<Object>,
    pub at: Instant,
    /// What this event holds that nothing else may (its new state, or a deletion's last state),
    /// charged against the byte budget; set when the window takes it.
    bytes: usize,
    /// The previous state's JSON at this event's revision, made once for all DELETED deliveries.
    deleted_json: OnceLock<Bytes>,
    /// The event's frames, one per format and variant its watchers asked for, each made by the
    /// first of them (`wire/encoder.rs`); the cache knows no format.
    pub memo: EventMemo,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("seq", &self.seq)
            .field("rv", &self.rv)
            .field("key", &self.key())
            .finish_non_exhaustive()
    }
}

impl Event {
    pub(crate) fn new(
        seq: u64,
        rv: u64,
        object: Option<Object>,
        prev: Option<Object>,
        at: Instant,
    ) -> Event {
        Event {
            seq,
            rv,
            object,
            prev,
            at,
            bytes: 0,
            deleted_json: OnceLock::new(),
            memo: EventMemo::default(),
        }
    }

    pub(crate) fn key(&self) -> &str {
        self.subject().key()
    }

    /// The event's object, or its last state for a deletion.
    pub(crate) fn subject(&self) -> &Object {
        match (&self.object, &self.prev) {
            (Some(o), _) | (None, Some(o)) => o,
            (None, None) => unreachable!("an event has an object or a previous object"),
        }
    }

    /// The JSON a DELETED delivery carries: the last state, at this event's revision.
    pub(crate) fn deleted_json(&self) -> &Bytes {
        self.deleted_json.get_or_init(|| match &self.prev {
            Some(p) => p.json_at(self.rv),
            None => Bytes::new(),
        })
    }
}

pub(crate) struct History {
    /// Events `[start_seq, start_seq + ring.len())`.
    ring: VecDeque<Arc<Event>>,
    start_seq: u64,
    floor_rv: u64,
    capacity: usize,
    /// The ring's events' bytes, summed.
    bytes: usize,
    /// What the ring's events' memos hold (their frames), charged by the memos as they make
    /// them, when there is a byte budget: it counts them too.
    memo_bytes: Arc<AtomicUsize>,
    cfg: HistoryConfig,
    /// Evicted events, until the writer takes them to drop elsewhere, and their bytes.
    evicted: Vec<Arc<Event>>,
    evicted_bytes: usize,
}

/// How many evicted events the writer takes at a time, or how many bytes of them, whichever
/// comes first: the bytes bound what they hold past the byte budget (a window of 1 MB objects
/// hands each one off as it leaves).
const REAP_BATCH: usize = 256;
const REAP_BYTES: usize = 1 << 20;

/// While the window is at its largest, its shrink rule is checked on one push in this many (it
/// reads two old events: cache misses on every push, for a rule about minutes).
const SHRINK_CHECK_EVERY: u64 = 64;
/// A window smaller than this is checked on every push: a delay of 63 pushes would be a large
/// share of it, and its events are few enough to be in cache.
const SHRINK_CHECK_ALWAYS_BELOW: usize = 1024;

impl History {
    pub(crate) fn new(cfg: HistoryConfig) -> History {
        History {
            ring: VecDeque::with_capacity(cfg.min_events),
            start_seq: 0,
            floor_rv: 0,
            capacity: cfg.min_events,
            bytes: 0,
            memo_bytes: Arc::default(),
            cfg,
            evicted: Vec::new(),
            evicted_bytes: 0,
        }
    }

    /// The evicted events, once there are enough of them to be worth handing off.
    pub(crate) fn take_evicted(&mut self) -> Option<Vec<Arc<Event>>> {
        if self.evicted.len() < REAP_BATCH && self.evicted_bytes < REAP_BYTES {
            return None;
        }
        self.evicted_bytes = 0;
        Some(std::mem::take(&mut self.evicted))
    }

    /// The sequence number the next event will get.
    pub(crate) fn end_seq(&self) -> u64 {
        self.start_seq + self.ring.len() as u64
    }

    /// The error for a position before the window.
    pub(crate) fn evicted(&self) -> Evicted {
        Evicted {
            oldest: self.floor_rv,
        }
    }

    /// Checks that the events from sequence number `seq` on are all still in the window.
    ///
    /// # Errors
    /// [`Evicted`] when some of them were evicted.
    pub(crate) fn check_seq(&self, seq: u64) -> Result<(), Evicted> {
        if seq < self.start_seq {
            Err(self.evicted())
        } else {
            Ok(())
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes the window's events hold (see [`Event`]'s `bytes`), their memos' frames included
    /// under a byte budget.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes + self.memo_bytes.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(crate) fn get(&self, seq: u64) -> Option<&Arc<Event>> {
        seq.checked_sub(self.start_seq)
            .and_then(|i| self.ring.get(i as usize))
    }

    /// Events from `seq` on.
    pub(crate) fn since(&self, seq: u64) -> impl Iterator<Item = &Arc<Event>> {
        let skip = seq.saturating_sub(self.start_seq) as usize;
        self.ring.range(skip.min(self.ring.len())..)
    }

    /// The sequence number of the first event with a revision above `rv`.
    ///
    /// # Errors
    /// [`Evicted`] when events after `rv` have already left the window.
    pub(crate) fn seq_after_rv(&self, rv: u64) -> Result<u64, Evicted> {
        if rv < self.floor_rv {
            return Err(self.evicted());
        }
        Ok(self.start_seq + self.ring.partition_point(|e| e.rv <= rv) as u64)
    }

    /// Appends an event built for the next sequence number, evicting or resizing as needed.
    pub(crate) fn push(&mut self, build: impl FnOnce(u64) -> Event) -> &Arc<Event> {
        let mut ev = build(self.end_seq());
        // The new state is what the event adds; a deletion keeps the last state alive.
        ev.bytes = match (&ev.object, &ev.prev) {
            (Some(o), _) | (None, Some(o)) => o.heap_bytes(),
            (None, None) => 0,
        } + std::mem::size_of::<Event>();
        if self.ring.len() >= self.capacity
            && (self.capacity < self.cfg.max_events
                || self.capacity < SHRINK_CHECK_ALWAYS_BELOW
                || self.end_seq().is_multiple_of(SHRINK_CHECK_EVERY))
        {
            self.resize(ev.at);
        }
        while self.ring.len() >= self.capacity {
            self.evict_oldest();
        }
        self.bytes += ev.bytes;
        // Only a budget needs the memos' frames counted (a reference count taken per event).
        if self.cfg.max_bytes.is_some() {
            ev.memo.charge_to(Arc::clone(&self.memo_bytes));
        }
        self.ring.push_back(Arc::new(ev));
        if let Some(max) = self.cfg.max_bytes {
            while self.bytes() > max && self.ring.len() > 1 {
                self.evict_oldest();
            }
        }
        self.ring.back().unwrap_or_else(|| unreachable!())
    }

    /// Forgets every event and declares the window to start at `rv` (after a relist).
    pub(crate) fn reset(&mut self, rv: u64) {
        self.start_seq = self.end_seq();
        if self.cfg.max_bytes.is_some() {
            for e in &self.ring {
                e.memo.release();
            }
        }
        self.ring.clear();
        self.bytes = 0;
        self.floor_rv = rv;
    }

    /// Raises the floor without evicting (nothing may be served from before `rv`).
    pub(crate) fn raise_floor(&mut self, rv: u64) {
        self.floor_rv = self.floor_rv.max(rv);
    }

    fn resize(&mut self, now: Instant) {
        let window = self.cfg.window;
        let age = |e: &Arc<Event>| now.saturating_duration_since(e.at);
        let oldest_fresh = self.ring.front().is_some_and(|e| age(e) < window);
        if oldest_fresh && self.capacity < self.cfg.max_events {
            self.capacity = (self.capacity * 2).min(self.cfg.max_events);
            self.ring.reserve(self.capacity - self.ring.len());
            return;
        }
        let quarter = self.ring.len().saturating_sub(self.capacity / 4);
        let recent_stale = self.ring.get(quarter).is_some_and(|e| age(e) > window);
        if recent_stale && self.capacity > self.cfg.min_events {
            self.capacity = (self.capacity / 2).max(self.cfg.min_events);
            while self.ring.len() >= self.capacity {
                self.evict_oldest();
            }
            self.ring.shrink_to(self.capacity);
        }
    }

    fn evict_oldest(&mut self) {
        if let Some(e) = self.ring.pop_front() {
            self.bytes -= e.bytes;
            if self.cfg.max_bytes.is_some() {
                e.memo.release();
            }
            self.start_seq += 1;
            self.floor_rv = self.floor_rv.max(e.rv);
            self.evicted_bytes += e.bytes;
            self.evicted.push(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn push(h: &mut History, rv: u64, at: Instant) {
        h.push(|seq| Event::new(seq, rv, None, None, at));
    }

    #[test]
    fn grows_while_events_are_fresh_and_shrinks_when_stale() {
        let cfg = HistoryConfig {
            min_events: 4,
            max_events: 16,
            window: Duration::from_secs(75),
            max_bytes: None,
        };
        let mut h = History::new(cfg);
        let t0 = Instant::now();
        for rv in 1..=20 {
            push(&mut h, rv, t0);
        }
        assert_eq!(h.capacity(), 16);
        assert_eq!(h.len(), 16);
        assert_eq!(h.evicted().oldest, 4, "rv 1..=4 were evicted");
        assert_eq!(h.seq_after_rv(3), Err(Evicted { oldest: 4 }));
        assert_eq!(h.seq_after_rv(4), Ok(4));
        assert_eq!(h.get(4).unwrap().rv, 5);
        let later = t0 + Duration::from_secs(200);
        push(&mut h, 21, later);
        assert_eq!(h.capacity(), 8, "halved once the newest quarter is stale");
        assert_eq!(h.evicted().oldest, 13);
        assert_eq!(
            h.since(h.end_seq() - 2).map(|e| e.rv).collect::<Vec<_>>(),
            [20, 21]
        );
    }

    #[test]
    fn a_byte_budget_evicts_the_oldest_events_past_it() {
        let f = crate::cache::testing::Fixture::new();
        let obj = |rv| f.pod_sized("p", 10_000, rv);
        // Revisions of two digits: every state's JSON has the same length.
        let one = obj(10).heap_bytes() + std::mem::size_of::<Event>();
        let cfg = HistoryConfig {
            max_bytes: Some(one * 5 + one / 2),
            ..HistoryConfig::default()
        };
        let mut h = History::new(cfg);
        let t = Instant::now();
        for rv in 10..=29 {
            h.push(|seq| Event::new(seq, rv, Some(obj(rv)), None, t));
            assert!(h.bytes() <= one * 5 + one / 2, "{} at rv {rv}", h.bytes());
        }
        assert_eq!(h.len(), 5, "five events fit");
        assert_eq!(h.bytes(), one * 5);
        assert_eq!(h.capacity(), 100, "the count-sized capacity did not move");
        assert_eq!(h.seq_after_rv(23), Err(Evicted { oldest: 24 }));
        assert_eq!(h.seq_after_rv(24), Ok(15));
        // One event larger than the budget stays alone: the newest is always kept.
        h.push(|seq| Event::new(seq, 30, Some(f.pod_sized("big", 200_000, 30)), None, t));
        assert_eq!(h.len(), 1);
        assert_eq!(h.evicted().oldest, 29);
        h.reset(30);
        assert_eq!(h.bytes(), 0);
        // Without a budget the same events all stay.
        let mut h = History::new(HistoryConfig::default());
        for rv in 10..=29 {
            h.push(|seq| Event::new(seq, rv, Some(obj(rv)), None, t));
        }
        assert_eq!(h.len(), 20);
        assert_eq!(h.bytes(), one * 20);
    }

    #[test]
    fn evicted_events_are_handed_off_by_count_or_by_bytes() {
        let f = crate::cache::testing::Fixture::new();
        let t = Instant::now();
        let cfg = HistoryConfig {
            min_events: 4,
            max_events: 4,
            ..HistoryConfig::default()
        };
        // Small events: held until REAP_BATCH of them left.
        let mut h = History::new(cfg);
        let mut handed = 0;
        for rv in 1..=(4 + 2 * REAP_BATCH as u64) {
            h.push(|seq| Event::new(seq, rv, Some(f.pod("p", "n1", rv)), None, t));
            if let Some(dead) = h.take_evicted() {
                assert_eq!(dead.len(), REAP_BATCH);
                handed += dead.len();
            }
        }
        assert_eq!(handed, 2 * REAP_BATCH);
        // Large ones, 300 KB each: at most four wait (REAP_BYTES is 1 MiB).
        let mut h = History::new(cfg);
        let mut handed = 0;
        for rv in 10..=60 {
            h.push(|seq| Event::new(seq, rv, Some(f.pod_sized("p", 300_000, rv)), None, t));
            handed += h.take_evicted().map_or(0, |dead| dead.len());
            assert!(h.evicted.len() < 4, "{} wait at rv {rv}", h.evicted.len());
        }
        assert_eq!(
            handed + h.evicted.len(),
            51 - 4,
            "every evicted event, once"
        );
    }

    #[test]
    fn shared_revisions_are_found_by_partition() {
        let mut h = History::new(HistoryConfig::default());
        let t = Instant::now();
        for rv in [5, 5, 6, 8, 8, 8] {
            push(&mut h, rv, t);
        }
        assert_eq!(h.seq_after_rv(5), Ok(2));
        assert_eq!(h.seq_after_rv(7), Ok(3));
        assert_eq!(h.seq_after_rv(100), Ok(6));
        h.reset(50);
        assert_eq!(h.seq_after_rv(49), Err(Evicted { oldest: 50 }));
        assert_eq!(h.check_seq(5), Err(Evicted { oldest: 50 }));
        assert_eq!(h.check_seq(6), Ok(()));
        assert_eq!(h.seq_after_rv(50), Ok(6));
    }

    /// What an event's memo keeps for its watchers counts against the byte budget while the event
    /// is in the window, and stops counting when it leaves.
    #[test]
    fn the_byte_budget_counts_what_memos_hold() {
        use crate::wire::{EncoderId, Frame};
        let cfg = HistoryConfig {
            min_events: 8,
            max_events: 8,
            window: Duration::from_secs(75),
            max_bytes: Some(4 * std::mem::size_of::<Event>() + 1000),
        };
        let mut h = History::new(cfg);
        let t0 = Instant::now();
        for rv in 1..=3 {
            push(&mut h, rv, t0);
        }
        assert_eq!(h.len(), 3);
        let held = h.get(0).unwrap().memo.frame(
            &EncoderId::of("test"),
            crate::model::EventType::Modified,
            || Ok(Frame::whole(bytes::Bytes::from(vec![0u8; 2000]))),
        );
        assert_eq!(held.unwrap().len(), 2000);
        assert_eq!(h.bytes(), 3 * std::mem::size_of::<Event>() + 2000);
        // Over the budget with its frame: the next push evicts the oldest events.
        push(&mut h, 4, t0);
        assert_eq!(h.evicted().oldest, 1);
        assert_eq!(h.bytes(), 3 * std::mem::size_of::<Event>(), "released");
        assert_eq!(h.len(), 3);
    }
}

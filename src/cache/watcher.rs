//! The part of a watcher the dispatcher sees: its compiled filter and a small bounded queue.
//!
//! ## Slow watchers
//! The dispatcher never waits for a watcher. When a watcher's queue is full, the watcher is *parked*:
//! it records the sequence number of the first event it did not take and the dispatcher skips it from
//! then on. Its consumer drains the queue, then catches up from the history window at its own pace
//! ([`Watcher::catch_up`]), and rejoins live dispatch when it reaches the head. A parked watcher
//! costs one integer; it ends with 410 Expired only if its position falls out of the window.
//! Upstream instead force-closes a watcher whose buffer stays full for 100 ms (kubernetes#125123).
//!
//! ## Invariants
//! - A watcher's [`Feed`] is `Live` (the dispatcher queues its events), `Parked(seq)` (every event
//!   from `seq` on that is for it is still to be read from history) or `Expired` (the cache ended
//!   it because its upstream's history was replaced; final). Events before the queue's tail are
//!   never read twice.
//! - Only the dispatcher parks (under the state write lock); only `catch_up` unparks (under the
//!   state read lock). So a watcher rejoins live dispatch between two events' fan-outs, never in
//!   the middle of one: nothing is lost or duplicated at the seam (`tests/loom.rs`).
//!
//! ## Lock order
//! The cache state lock, then a watcher's queue lock. The queue lock alone is taken by the consumer
//! to pop.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;

use crate::cache::history::{Event, Evicted, History};
use crate::model::selector::Predicate;
use crate::model::{EventType, Schema};
use crate::sync::Mutex;

/// How many history events a catch-up examines per lock hold, so that ingest is never blocked long.
const CATCH_UP_SCAN: usize = 4096;

/// One event as delivered to one watcher: the shared event and the watcher's own transition.
#[derive(Clone)]
pub(crate) struct Delivery {
    pub event: Arc<Event>,
    pub kind: EventType,
}

/// Where a watcher's next events come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feed {
    /// The dispatcher queues its events.
    Live,
    /// Parked: the next history sequence number to examine.
    Parked(u64),
    /// Ended by the cache: its position no longer means anything (the upstream's history was
    /// replaced). The stream ends with 410 Expired.
    Expired(Evicted),
    /// Ended by the cache ([`Watcher::end`]): the resource is no longer served here (its CRD was
    /// deleted or redefined). The stream delivers what is queued, then ends without an error,
    /// as kube-apiserver ends the watches of a CRD's storage it tears down.
    Ended,
}

/// A watcher's queued deliveries, oldest first, at most `capacity` of them: the oldest inline,
/// the rest in a boxed ring buffer that is freed when it empties. An idle watch (nearly all of a
/// kubelet's) then holds no buffer after its events: a `VecDeque` keeps the room of its first
/// push (four deliveries, 64 B) for the watch's life, and the usual delivery, one event at a
/// time, allocates nothing. 24 B inline against the `VecDeque`'s 32, the bound included: the
/// oldest's transition and the bound fill what a `Delivery` inline left as padding.
///
/// Invariant: `rest` is `None` whenever `first` is, and never holds an empty buffer.
pub(crate) struct Deliveries {
    first: Option<Arc<Event>>,
    // Boxed on purpose: 8 B inline for what only a burst uses, against the `VecDeque`'s 32.
    #[allow(clippy::box_collection)]
    rest: Option<Box<VecDeque<Delivery>>>,
    /// `first`'s transition (meaningless while `first` is `None`).
    first_kind: EventType,
    /// The most deliveries held: past it the watcher is parked (`Watcher::offer`).
    capacity: u32,
}

impl Deliveries {
    /// None yet, at most `capacity`.
    pub(crate) fn bounded(capacity: usize) -> Deliveries {
        Deliveries {
            first: None,
            rest: None,
            first_kind: EventType::Added,
            capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
        }
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.as_ref().map_or(0, |r| r.len())
    }

    /// Whether `capacity` deliveries are queued: the next must wait.
    pub(crate) fn is_full(&self) -> bool {
        self.len() >= self.capacity as usize
    }

    /// Whether nothing is queued (only the tests ask).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Queues `d` (the caller checked [`is_full`](Deliveries::is_full)).
    pub(crate) fn push_back(&mut self, d: Delivery) {
        if self.first.is_none() {
            self.first = Some(d.event);
            self.first_kind = d.kind;
        } else {
            self.rest.get_or_insert_with(Box::default).push_back(d);
        }
    }

    pub(crate) fn pop_front(&mut self) -> Option<Delivery> {
        let d = Delivery {
            event: self.first.take()?,
            kind: self.first_kind,
        };
        if let Some(rest) = &mut self.rest {
            if let Some(next) = rest.pop_front() {
                self.first = Some(next.event);
                self.first_kind = next.kind;
            }
            if rest.is_empty() {
                // A burst is over: its room goes with it.
                self.rest = None;
            }
        }
        Some(d)
    }

    pub(crate) fn clear(&mut self) {
        self.first = None;
        self.rest = None;
    }

    /// The deliveries, oldest first.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = Delivery> + '_ {
        self.first
            .iter()
            .map(|e| Delivery {
                event: Arc::clone(e),
                kind: self.first_kind,
            })
            .chain(self.rest.iter().flat_map(|r| r.iter().cloned()))
    }

    /// Room held besides the inline delivery.
    #[cfg(test)]
    fn spare(&self) -> usize {
        self.rest.as_ref().map_or(0, |r| r.capacity())
    }
}

pub(crate) struct Queue {
    pub items: Deliveries,
    pub feed: Feed,
    pub waker: Option<Waker>,
}

/// A registered watcher, shared by the registry (which offers it events) and its stream (which
/// consumes them).
pub(crate) struct Watcher {
    pub predicate: Predicate,
    /// Events at or below this revision are not for this watcher (it asked to start after them).
    pub start_rv: u64,
    pub queue: Mutex<Queue>,
}

/// What offering an event to a watcher did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Not for this watcher, or the watcher is parked and will read it from history.
    Skipped,
    Queued,
    /// The queue was full: the watcher is now parked at this event.
    Parked,
}

impl Watcher {
    pub(crate) fn new(
        predicate: Predicate,
        start_rv: u64,
        capacity: usize,
        parked_at: Option<u64>,
    ) -> Watcher {
        Watcher {
            predicate,
            start_rv,
            queue: Mutex::new(Queue {
                items: Deliveries::bounded(capacity),
                feed: parked_at.map_or(Feed::Live, Feed::Parked),
                waker: None,
            }),
        }
    }

    /// The transition this event is for this watcher, if any (upstream's `convertToWatchEvent`).
    pub(crate) fn transition(&self, schema: &Schema, ev: &Event) -> Option<EventType> {
        if ev.rv <= self.start_rv {
            return None;
        }
        let cur = ev
            .object
            .as_ref()
            .is_some_and(|o| self.predicate.matches_live(schema, o));
        let old = ev
            .prev
            .as_ref()
            .is_some_and(|o| self.predicate.matches_live(schema, o));
        match (cur, old) {
            (true, false) => Some(EventType::Added),
            (true, true) => Some(EventType::Modified),
            (false, true) => Some(EventType::Deleted),
            (false, false) => None,
        }
    }

    /// Called by the dispatcher, under the state write lock. Never blocks on the consumer. The
    /// consumer's waker, when an event is queued for it, is pushed to `wakes`: the writer wakes
    /// them once the state lock is released.
    pub(crate) fn offer(&self, schema: &Schema, ev: &Arc<Event>, wakes: &mut Vec<Waker>) -> Offer {
        let Some(kind) = self.transition(schema, ev) else {
            return Offer::Skipped;
        };
        let mut q = self.queue.lock();
        if q.feed != Feed::Live {
            return Offer::Skipped;
        }
        if q.items.is_full() {
            q.feed = Feed::Parked(ev.seq);
            return Offer::Parked;
        }
        q.items.push_back(Delivery {
            event: Arc::clone(ev),
            kind,
        });
        if let Some(w) = q.waker.take() {
            wakes.push(w);
        }
        Offer::Queued
    }

    /// Refills the queue from history for a parked watcher, and rejoins live dispatch when the head is
    /// reached. Must be called with the state read lock held (it is `history`).
    ///
    /// # Errors
    /// [`Evicted`] when the watcher's position fell out of the window.
    pub(crate) fn catch_up(&self, schema: &Schema, history: &History) -> Result<(), Evicted> {
        let mut q = self.queue.lock();
        let mut seq = match q.feed {
            Feed::Live | Feed::Ended => return Ok(()),
            Feed::Expired(e) => return Err(e),
            Feed::Parked(seq) => seq,
        };
        history.check_seq(seq)?;
        let end = history.end_seq();
        for ev in history.since(seq).take(CATCH_UP_SCAN) {
            if q.items.is_full() {
                break;
            }
            if let Some(kind) = self.transition(schema, ev) {
                q.items.push_back(Delivery {
                    event: Arc::clone(ev),
                    kind,
                });
            }
            seq += 1;
        }
        q.feed = if seq < end {
            Feed::Parked(seq)
        } else {
            Feed::Live
        };
        Ok(())
    }

    /// Ends the watcher once its queued events are read (see [`Feed::Ended`]). A parked
    /// watcher's events still in history are not read: the end of a stream says nothing about
    /// what followed, and its client resumes from the last event it saw. Called under the state
    /// write lock.
    pub(crate) fn end(&self) {
        let mut q = self.queue.lock();
        if matches!(q.feed, Feed::Expired(_)) {
            return;
        }
        q.feed = Feed::Ended;
        let waker = q.waker.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Ends the watcher: its queued events are dropped and its stream ends with 410 Expired
    /// (`evicted`) as soon as it next reads. Called under the state write lock.
    pub(crate) fn expire(&self, evicted: Evicted) {
        let mut q = self.queue.lock();
        q.items.clear();
        q.feed = Feed::Expired(evicted);
        let waker = q.waker.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::testing::{Fixture, on_node};

    fn kinds(w: &Watcher) -> Vec<(EventType, u64)> {
        w.queue
            .lock()
            .items
            .iter()
            .map(|d| (d.kind, d.event.rv))
            .collect()
    }

    /// Every watch holds one, in an `Arc` (16 B more): at 112 B, a 128-byte block of mimalloc's
    /// (it was 160 at 144 B: the predicate's labels and shard inline, the bound a `usize` of its
    /// own, design/performance.md, "HPACK's table").
    #[test]
    fn a_watcher_is_small() {
        assert_eq!(std::mem::size_of::<Deliveries>(), 24);
        assert!(
            std::mem::size_of::<Watcher>() <= 112,
            "{}",
            std::mem::size_of::<Watcher>()
        );
    }

    #[test]
    fn deliveries_keep_their_order_and_no_room_once_drained() {
        let mut f = Fixture::new();
        let mut q = Deliveries::bounded(8);
        let evs: Vec<_> = (0..5).map(|_| f.put("a", "n1")).collect();
        let d = |e: &Arc<Event>| Delivery {
            event: Arc::clone(e),
            kind: EventType::Modified,
        };
        // One at a time: nothing allocated.
        q.push_back(d(&evs[0]));
        assert_eq!((q.len(), q.spare()), (1, 0));
        assert_eq!(q.pop_front().map(|x| x.event.rv), Some(evs[0].rv));
        assert!(q.is_empty());
        // A burst: in order, interleaved with pops, and its room freed when it is drained.
        for e in &evs[..3] {
            q.push_back(d(e));
        }
        assert_eq!(q.pop_front().map(|x| x.event.rv), Some(evs[0].rv));
        q.push_back(d(&evs[3]));
        q.push_back(d(&evs[4]));
        assert_eq!(q.len(), 4);
        let order: Vec<u64> = q.iter().map(|x| x.event.rv).collect();
        assert_eq!(order, [evs[1].rv, evs[2].rv, evs[3].rv, evs[4].rv]);
        let mut popped = Vec::new();
        while let Some(x) = q.pop_front() {
            popped.push(x.event.rv);
        }
        assert_eq!(popped, order);
        assert_eq!((q.len(), q.spare()), (0, 0));
        q.push_back(d(&evs[0]));
        q.push_back(d(&evs[1]));
        q.clear();
        assert!(q.is_empty());
        assert_eq!(q.spare(), 0);
    }

    #[test]
    fn transitions_follow_the_filter_before_and_after() {
        let mut f = Fixture::new();
        let w = Watcher::new(f.predicate(&on_node("n1")), 0, 8, None);
        let add = f.put("a", "n1");
        let modify = f.put("a", "n1");
        let leave = f.put("a", "n2");
        let elsewhere = f.put("a", "n3");
        let back = f.put("a", "n1");
        let delete = f.delete("a");
        let got: Vec<_> = [add, modify, leave, elsewhere, back, delete]
            .iter()
            .map(|e| w.transition(&f.schema, e))
            .collect();
        use EventType::*;
        assert_eq!(
            got,
            [
                Some(Added),
                Some(Modified),
                Some(Deleted),
                None,
                Some(Added),
                Some(Deleted)
            ]
        );
        let late = Watcher::new(f.predicate(&on_node("n1")), 5, 8, None);
        assert_eq!(late.transition(&f.schema, &f.history_event(4)), None);
    }

    #[test]
    fn a_full_queue_parks_and_catch_up_rejoins_at_the_head() {
        let mut f = Fixture::new();
        let w = Watcher::new(f.predicate(&on_node("n1")), 0, 2, None);
        let mut offers = Vec::new();
        for _ in 0..5 {
            let e = f.put("a", "n1");
            offers.push(w.offer(&f.schema, &e, &mut Vec::new()));
        }
        use Offer::*;
        assert_eq!(offers, [Queued, Queued, Parked, Skipped, Skipped]);
        assert_eq!(w.queue.lock().feed, Feed::Parked(2));
        w.queue.lock().items.clear();
        w.catch_up(&f.schema, &f.history).unwrap();
        assert_eq!(
            kinds(&w),
            [(EventType::Modified, 3), (EventType::Modified, 4)]
        );
        assert_eq!(w.queue.lock().feed, Feed::Parked(4), "queue full again");
        w.queue.lock().items.clear();
        w.catch_up(&f.schema, &f.history).unwrap();
        assert_eq!(kinds(&w), [(EventType::Modified, 5)]);
        assert_eq!(w.queue.lock().feed, Feed::Live, "rejoined at the head");
        let e = f.put("a", "n1");
        assert_eq!(w.offer(&f.schema, &e, &mut Vec::new()), Queued);
    }

    #[test]
    fn catch_up_from_an_evicted_position_is_an_error() {
        let mut f = Fixture::with_history(crate::model::HistoryConfig {
            min_events: 2,
            max_events: 2,
            window: std::time::Duration::ZERO,
            max_bytes: None,
        });
        let w = Watcher::new(f.predicate(&on_node("n1")), 0, 1, None);
        for _ in 0..5 {
            let e = f.put("a", "n1");
            w.offer(&f.schema, &e, &mut Vec::new());
        }
        w.queue.lock().items.clear();
        assert_eq!(
            w.catch_up(&f.schema, &f.history),
            Err(Evicted { oldest: 3 })
        );
    }
}

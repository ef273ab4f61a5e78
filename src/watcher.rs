//! The part of a watcher the dispatcher sees: its compiled filter and a small bounded queue.
//!
//! ## Slow watchers
//! The dispatcher never waits for a watcher. When a watcher's queue is full, the watcher is *parked*:
//! it records the sequence number of the first event it did not take and the dispatcher skips it from
//! then on. Its consumer drains the queue, then catches up from the history window at its own pace
//! ([`WatcherShared::catch_up`]), and rejoins live dispatch when it reaches the head. A parked watcher
//! costs one integer; it ends with 410 Expired only if its position falls out of the window.
//! Upstream instead force-closes a watcher whose buffer stays full for 100 ms (kubernetes#125123).
//!
//! ## Lock order
//! The cache state lock, then a watcher's queue lock. The queue lock alone is taken by the consumer to
//! pop. The dispatcher and `catch_up` both hold the state lock (write and read), so a watcher can never
//! rejoin live dispatch in the middle of an event's fan-out.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;

use parking_lot::Mutex;

use crate::history::{Event, EventType, History};
use crate::schema::Schema;
use crate::selector::Predicate;

/// How many history events a catch-up examines per lock hold, so that ingest is never blocked long.
const CATCH_UP_SCAN: usize = 4096;

/// One event as delivered to one watcher: the shared event and the watcher's own transition.
pub(crate) struct Delivery {
    pub event: Arc<Event>,
    pub kind: EventType,
}

pub(crate) struct Queue {
    pub items: VecDeque<Delivery>,
    /// Set while parked: the next history sequence number to examine.
    pub parked_at: Option<u64>,
    pub waker: Option<Waker>,
}

pub(crate) struct WatcherShared {
    pub predicate: Predicate,
    /// Events at or below this revision are not for this watcher (it asked to start after them).
    pub start_rv: u64,
    pub capacity: usize,
    pub queue: Mutex<Queue>,
}

/// What offering an event to a watcher did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    Skipped,
    Queued,
    Parked,
}

impl WatcherShared {
    pub fn new(
        predicate: Predicate,
        start_rv: u64,
        capacity: usize,
        parked_at: Option<u64>,
    ) -> WatcherShared {
        WatcherShared {
            predicate,
            start_rv,
            capacity,
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                parked_at,
                waker: None,
            }),
        }
    }

    /// The transition this event is for this watcher, if any (upstream's `convertToWatchEvent`).
    pub fn transition(&self, schema: &Schema, ev: &Event) -> Option<EventType> {
        if ev.rv <= self.start_rv {
            return None;
        }
        let cur = ev
            .object
            .as_ref()
            .is_some_and(|o| self.predicate.matches(schema, o));
        let old = ev
            .prev
            .as_ref()
            .is_some_and(|o| self.predicate.matches(schema, o));
        match (cur, old) {
            (true, false) => Some(EventType::Added),
            (true, true) => Some(EventType::Modified),
            (false, true) => Some(EventType::Deleted),
            (false, false) => None,
        }
    }

    /// Called by the dispatcher, under the state write lock. Never blocks on the consumer.
    pub fn offer(&self, schema: &Schema, ev: &Arc<Event>) -> Offer {
        let Some(kind) = self.transition(schema, ev) else {
            return Offer::Skipped;
        };
        let mut q = self.queue.lock();
        if q.parked_at.is_some() {
            return Offer::Skipped;
        }
        if q.items.len() >= self.capacity {
            q.parked_at = Some(ev.seq);
            return Offer::Parked;
        }
        q.items.push_back(Delivery {
            event: Arc::clone(ev),
            kind,
        });
        let waker = q.waker.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
        Offer::Queued
    }

    /// Refills the queue from history for a parked watcher, and rejoins live dispatch when the head is
    /// reached. Must be called with the state read lock held (it is `history`).
    ///
    /// # Errors
    /// `Err(floor_rv)` when the watcher's position fell out of the window.
    pub fn catch_up(&self, schema: &Schema, history: &History) -> Result<(), u64> {
        let mut q = self.queue.lock();
        let Some(mut seq) = q.parked_at else {
            return Ok(());
        };
        if seq < history.start_seq() {
            return Err(history.floor_rv());
        }
        let end = history.end_seq();
        for ev in history.since(seq).take(CATCH_UP_SCAN) {
            if q.items.len() >= self.capacity {
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
        q.parked_at = (seq < end).then_some(seq);
        Ok(())
    }
}

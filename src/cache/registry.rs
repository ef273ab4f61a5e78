//! The registered watchers: a slab of ids, the router over them, and the fan-out of one applied
//! event to the watchers the router selects.
//!
//! Fan-out runs synchronously inside ingest, under the state write lock, and never waits for a
//! consumer: a full queue parks its watcher (see [`crate::cache::watcher`]).
//!
//! ## Invariants
//! - `watchers[id]` is `Some` iff `id` is registered in the router exactly once (by the route of
//!   that watcher's predicate); free ids are listed in `free` and reused.

use std::sync::Arc;
use std::task::Waker;

use crate::cache::history::{Event, Evicted};
use crate::cache::router::Router;
use crate::cache::watcher::{Offer, Watcher};
use crate::model::Schema;

pub(crate) struct Registry {
    watchers: Vec<Option<Arc<Watcher>>>,
    free: Vec<u32>,
    router: Router,
}

/// What fan-outs did, summed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fanout {
    /// Deliveries queued.
    pub queued: u64,
    /// Watchers parked because their queue was full.
    pub parked: u64,
}

impl std::ops::AddAssign for Fanout {
    fn add_assign(&mut self, o: Fanout) {
        self.queued += o.queued;
        self.parked += o.parked;
    }
}

impl Registry {
    pub fn new(schema: &Schema) -> Registry {
        Registry {
            watchers: Vec::new(),
            free: Vec::new(),
            router: Router::new(schema),
        }
    }

    /// Registers a watcher under its route in `schema` (the schema this registry was made for).
    pub fn add(&mut self, schema: &Schema, w: Arc<Watcher>) -> u32 {
        let id = self.free.pop().unwrap_or(self.watchers.len() as u32);
        self.router
            .add(id, w.predicate.route(schema), w.predicate.shard());
        match self.watchers.get_mut(id as usize) {
            Some(slot) => *slot = Some(w),
            None => self.watchers.push(Some(w)),
        }
        id
    }

    /// Unregisters a watcher; returns it.
    pub fn remove(&mut self, schema: &Schema, id: u32) -> Option<Arc<Watcher>> {
        let w = self.watchers.get_mut(id as usize).and_then(Option::take)?;
        self.router
            .remove(id, w.predicate.route(schema), w.predicate.shard());
        self.free.push(id);
        Some(w)
    }

    /// Offers the event to every candidate watcher; the wakers of those it queued for are pushed
    /// to `wakes` (see [`Watcher::offer`]).
    pub fn dispatch(&self, schema: &Schema, ev: &Arc<Event>, wakes: &mut Vec<Waker>) -> Fanout {
        let mut f = Fanout::default();
        self.router.for_each_candidate(schema, ev, |id| {
            let Some(w) = self.watchers.get(id as usize).and_then(Option::as_ref) else {
                return;
            };
            match w.offer(schema, ev, wakes) {
                Offer::Queued => f.queued += 1,
                Offer::Parked => f.parked += 1,
                Offer::Skipped => {}
            }
        });
        f
    }

    /// Ends every registered watcher with 410 Expired (see [`Watcher::expire`]).
    pub fn expire_all(&self, evicted: Evicted) {
        for w in self.watchers.iter().flatten() {
            w.expire(evicted);
        }
    }

    /// Number of routed and unrouted watchers.
    pub fn counts(&self) -> (u64, u64) {
        self.router.counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::testing::{Fixture, on_node};
    use crate::model::Selection;

    #[test]
    fn events_reach_their_routed_watchers_and_every_unrouted_one() {
        let mut f = Fixture::new();
        let mut r = Registry::new(&f.schema);
        let watcher = |f: &Fixture, sel: &Selection, cap| {
            Arc::new(Watcher::new(f.predicate(sel), 0, cap, None))
        };
        let n1 = watcher(&f, &on_node("n1"), 8);
        let n2 = watcher(&f, &on_node("n2"), 1);
        let all = watcher(&f, &Selection::all(), 8);
        let ids = [
            r.add(&f.schema, Arc::clone(&n1)),
            r.add(&f.schema, Arc::clone(&n2)),
            r.add(&f.schema, Arc::clone(&all)),
        ];
        assert_eq!(r.counts(), (2, 1));
        let e = f.put("a", "n1");
        assert_eq!(
            r.dispatch(&f.schema, &e, &mut Vec::new()),
            Fanout {
                queued: 2,
                parked: 0
            }
        );
        // A move from n1 to n2 reaches both routed watchers (DELETED for n1, ADDED for n2).
        let e = f.put("a", "n2");
        assert_eq!(r.dispatch(&f.schema, &e, &mut Vec::new()).queued, 3);
        let e = f.put("a", "n2");
        assert_eq!(
            r.dispatch(&f.schema, &e, &mut Vec::new()),
            Fanout {
                queued: 1,
                parked: 1
            },
            "n2's queue of one was full"
        );
        assert_eq!(n1.queue.lock().items.len(), 2);
        r.remove(&f.schema, ids[1]);
        assert_eq!(r.counts(), (1, 1));
        let reused = r.add(&f.schema, watcher(&f, &on_node("n3"), 8));
        assert_eq!(reused, ids[1], "ids are reused");
        r.remove(&f.schema, ids[1]);
        r.remove(&f.schema, ids[1]);
        assert_eq!(r.counts(), (1, 1), "removing twice is harmless");
    }
}

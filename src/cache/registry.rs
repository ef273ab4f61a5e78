//! The registered watchers: a slab of ids, the router over them, and the fan-out of one applied
//! event to the watchers the router selects.
//!
//! Fan-out runs synchronously inside ingest, under the state write lock, and never waits for a
//! consumer: a full queue parks its watcher (see [`crate::cache::watcher`]).
//!
//! ## Invariants
//! - `watchers[id]` is `Some` iff `id` is registered in the router exactly once (by the route of
//!   that watcher's predicate); free ids are listed in `free` and reused.
//! - An id whose watcher is gone but whose ranges are still in the shard router (its removal
//!   runs outside the lock, `Shared::unregister`) is neither in `watchers` nor in `free`: events
//!   reaching it are dropped, and it is not reused until [`Registry::swap_shards`] releases it.
//!
//! ## Routing
//!
//! Trigger routing ([`Router`]): which watchers an event is offered to.
//!
//! A watcher whose selection pins a trigger attribute to one value (`spec.nodeName=node-7`, a
//! namespace, a declared label, a name) is registered under that (trigger, value). Every other watcher
//! is unrouted. An event is offered to the watchers registered under its new or previous object's
//! values for each trigger, plus the unrouted ones, so its cost does not grow with the number of
//! watchers that cannot match it.
//!
//! A watcher no trigger routes but with a `shardSelector` is routed by its hash ranges instead
//! (`cache/shard_router.rs`). Its ranges are inserted outside the cache's lock, into a second
//! copy of the shard router (see [`Router::swap_shards`]): until that copy is swapped in, the
//! watcher waits in `unrouted`, where its filter checks the hash, so it misses nothing meanwhile.
//!
//! Invariant: each watcher id is in exactly one place: one (trigger, value) set, the shard router, or
//! `unrouted` (a sharded watcher whose ranges are not in the shard router yet is in
//! `unrouted`). Hence an event visits a watcher at most once, with no deduplication pass (the
//! shard router visits each of its watchers at most once per event).

use std::sync::Arc;
use std::task::Waker;

use hashbrown::HashMap;
use roaring::RoaringBitmap;

use crate::cache::history::{Event, Evicted};
use crate::cache::members::Members;
use crate::cache::shard_router::ShardRouter;
use crate::cache::watcher::{Offer, Watcher};
use crate::model::{Attr, Schema, ShardSelector};

/// What the spare copy of the shard router has over the registry's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShardChange {
    /// This watcher's ranges (a watcher waiting in `unrouted`).
    Added(u32),
    /// Not this removed watcher's ranges.
    Removed(u32),
}

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
    pub(super) fn new(schema: &Schema) -> Registry {
        Registry {
            watchers: Vec::new(),
            free: Vec::new(),
            router: Router::new(schema),
        }
    }

    /// Registers a watcher under its route in `schema` (the schema this registry was made for);
    /// returns its id, and whether its ranges are for the caller to add to the shard router
    /// (until then it is offered every event, as an unrouted watcher).
    pub(super) fn add(&mut self, schema: &Schema, w: Arc<Watcher>) -> (u32, bool) {
        let id = self.free.pop().unwrap_or(self.watchers.len() as u32);
        let pending = self
            .router
            .add(id, w.predicate.route(schema), w.predicate.shard());
        match self.watchers.get_mut(id as usize) {
            Some(slot) => *slot = Some(w),
            None => self.watchers.push(Some(w)),
        }
        (id, pending)
    }

    /// Unregisters a watcher; returns it, and whether its ranges are for the caller to remove
    /// from the shard router (its id is held until [`Registry::swap_shards`] releases it).
    pub(super) fn remove(&mut self, schema: &Schema, id: u32) -> Option<(Arc<Watcher>, bool)> {
        let w = self.watchers.get_mut(id as usize).and_then(Option::take)?;
        let in_shards = self
            .router
            .remove(id, w.predicate.route(schema), w.predicate.shard());
        if !in_shards {
            self.free.push(id);
        }
        Some((w, in_shards))
    }

    /// Swaps the shard router for `spare`, which has one watcher's ranges added or removed
    /// (see [`Router::swap_shards`]): an added watcher leaves the unrouted ones, a removed one's
    /// id is free again.
    pub(super) fn swap_shards(&mut self, spare: &mut Box<ShardRouter>, change: ShardChange) {
        match change {
            ShardChange::Added(id) => self.router.swap_shards(spare, Some(id)),
            ShardChange::Removed(id) => {
                self.router.swap_shards(spare, None);
                self.free.push(id);
            }
        }
    }

    /// Offers the event to every candidate watcher; the wakers of those it queued for are pushed
    /// to `wakes` (see [`Watcher::offer`]).
    pub(super) fn dispatch(
        &self,
        schema: &Schema,
        ev: &Arc<Event>,
        wakes: &mut Vec<Waker>,
    ) -> Fanout {
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
    pub(super) fn expire_all(&self, evicted: Evicted) {
        for w in self.watchers.iter().flatten() {
            w.expire(evicted);
        }
    }

    /// Ends every registered watcher without an error (see [`Watcher::end`]).
    pub(super) fn end_all(&self) {
        for w in self.watchers.iter().flatten() {
            w.end();
        }
    }

    /// Number of routed and unrouted watchers.
    pub(super) fn counts(&self) -> (u64, u64) {
        self.router.counts()
    }
}

struct Router {
    /// One map per trigger, aligned with `Schema::triggers`.
    by_trigger: Vec<(Attr, HashMap<Box<str>, Members>)>,
    /// Watchers no trigger routes, routed by their shard selector's ranges (when the schema
    /// routes shards; else they are unrouted and their filter checks the hash). Boxed: the
    /// swap with the spare copy moves a pointer.
    shards: Option<Box<ShardRouter>>,
    unrouted: RoaringBitmap,
}

impl Router {
    fn new(schema: &Schema) -> Router {
        Router {
            by_trigger: schema
                .triggers
                .iter()
                .map(|a| (*a, HashMap::new()))
                .collect(),
            shards: schema.route_shards.then(|| Box::new(ShardRouter::new())),
            unrouted: RoaringBitmap::new(),
        }
    }

    /// Whether a watcher of this route and shard selector is routed by the shard router.
    fn shard_routed(&mut self, route: Option<(Attr, &str)>, shard: Option<&ShardSelector>) -> bool {
        let routed = route.is_some_and(|(a, _)| self.map_for(a).is_some());
        !routed && self.shards.is_some() && shard.is_some()
    }

    /// Registers a watcher. One that the shard router routes is put in `unrouted`, its ranges
    /// left for the caller to add to both copies of the shard router, outside the lock
    /// ([`Router::swap_shards`]); returns whether it is such a watcher.
    fn add(&mut self, id: u32, route: Option<(Attr, &str)>, shard: Option<&ShardSelector>) -> bool {
        if self.shard_routed(route, shard) {
            self.unrouted.insert(id);
            return true;
        }
        match route.and_then(|(a, v)| self.map_for(a).map(|m| (m, v))) {
            Some((map, v)) => match map.get_mut(v) {
                Some(m) => m.insert(id),
                None => {
                    map.insert(v.into(), Members::One(id));
                }
            },
            None => {
                self.unrouted.insert(id);
            }
        }
        false
    }

    /// Unregisters a watcher; whether its ranges are in the shard router, for the caller to
    /// remove from both copies (events are offered to its id until then).
    fn remove(
        &mut self,
        id: u32,
        route: Option<(Attr, &str)>,
        shard: Option<&ShardSelector>,
    ) -> bool {
        if self.shard_routed(route, shard) {
            // Still waiting in `unrouted` (its registration never finished), or in the trees.
            return !self.unrouted.remove(id);
        }
        match route.and_then(|(a, v)| self.map_for(a).map(|m| (m, v))) {
            Some((map, v)) => {
                if map.get_mut(v).is_some_and(|m| m.remove(id)) {
                    map.remove(v);
                }
            }
            None => {
                self.unrouted.remove(id);
            }
        }
        false
    }

    /// Replaces the shard router with `spare`, which holds the same watchers' ranges plus or
    /// minus one watcher's, and leaves the replaced copy in `spare`. Then a sharded watcher that
    /// was just added to the spare leaves `unrouted` (`admit`): at one event boundary, as the
    /// caller holds the cache's lock, so it sees every event once, either way. O(1): a
    /// watcher's O(R log N) tree work is done on the spare outside the lock.
    fn swap_shards(&mut self, spare: &mut Box<ShardRouter>, admit: Option<u32>) {
        if let Some(shards) = &mut self.shards {
            std::mem::swap(shards, spare);
        }
        if let Some(id) = admit {
            let waited = self.unrouted.remove(id);
            debug_assert!(waited, "an admitted watcher waited in unrouted");
        }
    }

    /// Calls `visit` once for every watcher the event must be offered to.
    fn for_each_candidate(&self, schema: &Schema, ev: &Event, mut visit: impl FnMut(u32)) {
        for (attr, map) in &self.by_trigger {
            if map.is_empty() {
                continue;
            }
            let new = ev.object.as_ref().and_then(|o| o.attr_in(schema, *attr));
            let old = ev.prev.as_ref().and_then(|o| o.attr_in(schema, *attr));
            if let Some(m) = new.and_then(|v| map.get(v)) {
                m.for_each(&mut visit);
            }
            if old != new
                && let Some(m) = old.and_then(|v| map.get(v))
            {
                m.for_each(&mut visit);
            }
        }
        if let Some(shards) = &self.shards {
            shards.for_each_candidate(ev, &mut visit);
        }
        if !self.unrouted.is_empty() {
            self.unrouted.iter().for_each(visit);
        }
    }

    /// Number of routed and unrouted watchers.
    fn counts(&self) -> (u64, u64) {
        let routed = self
            .by_trigger
            .iter()
            .flat_map(|(_, m)| m.values())
            .map(Members::len)
            .sum::<u64>()
            + self.shards.as_ref().map_or(0, |s| s.count());
        (routed, self.unrouted.len())
    }

    /// The shard router's watchers and ranges.
    #[cfg(test)]
    fn shard_summary(&self) -> Option<(u64, usize)> {
        self.shards.as_ref().map(|s| s.summary())
    }

    /// Whether the shard router equals `other`, slot for slot.
    #[cfg(test)]
    fn shards_same_as(&self, other: &ShardRouter) -> bool {
        self.shards.as_ref().is_some_and(|s| s.same_as(other))
    }

    fn map_for(&mut self, attr: Attr) -> Option<&mut HashMap<Box<str>, Members>> {
        self.by_trigger
            .iter_mut()
            .find(|(a, _)| *a == attr)
            .map(|(_, m)| m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::shard_router::Patch;
    use crate::cache::testing::{Fixture, on_node};
    use crate::model::{Object, Selection, ShardSelector};
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::time::Instant;

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
            r.add(&f.schema, Arc::clone(&n1)).0,
            r.add(&f.schema, Arc::clone(&n2)).0,
            r.add(&f.schema, Arc::clone(&all)).0,
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
        let (reused, _) = r.add(&f.schema, watcher(&f, &on_node("n3"), 8));
        assert_eq!(reused, ids[1], "ids are reused");
        r.remove(&f.schema, ids[1]);
        r.remove(&f.schema, ids[1]);
        assert_eq!(r.counts(), (1, 1), "removing twice is harmless");
    }

    /// One (un)registration's work on the spare shard router, as `Shared::change_shards` does
    /// it: the spare, the swap under the lock, the patch to the other copy.
    struct SpareWork {
        change: ShardChange,
        shard: ShardSelector,
        /// Taken at the first step.
        patch: Option<Patch>,
        /// Steps done: 0, 1 (spare), 2 (swapped).
        step: u8,
    }

    /// Does the next step of the first queued work.
    fn step(r: &mut Registry, spare: &mut Box<ShardRouter>, work: &mut VecDeque<SpareWork>) {
        let Some(w) = work.front_mut() else { return };
        match w.step {
            0 => {
                match w.change {
                    ShardChange::Added(id) => spare.add(id, &w.shard),
                    ShardChange::Removed(id) => spare.remove(id, &w.shard),
                }
                w.patch = Some(spare.take_patch());
            }
            1 => r.swap_shards(spare, w.change),
            _ => {
                spare.apply(w.patch.take().unwrap());
                work.pop_front();
                return;
            }
        }
        w.step += 1;
    }

    fn shard_watcher(f: &Fixture, ranges: &[(u64, u64)]) -> Arc<Watcher> {
        let text = ranges
            .iter()
            .map(|(s, e)| {
                let end = if *e == 64 {
                    "0x10000000000000000".to_owned()
                } else {
                    format!("0x{:016x}", e << 58)
                };
                format!(
                    "shardRange(object.metadata.uid, '0x{:016x}', '{end}')",
                    s << 58
                )
            })
            .collect::<Vec<_>>()
            .join(" || ");
        let sel = Selection::all().with_shard(&text).unwrap();
        Arc::new(Watcher::new(f.predicate(&sel), 0, 1 << 12, None))
    }

    /// Disjoint ranges on a grid of 64 slices, as (first slice, end slice).
    fn grid_ranges() -> impl Strategy<Value = Vec<(u64, u64)>> {
        proptest::collection::btree_set(0u64..64, 1..8).prop_map(|bounds| {
            let b: Vec<u64> = bounds.into_iter().collect();
            let mut out: Vec<(u64, u64)> = b
                .chunks(2)
                .map(|p| (p[0], *p.get(1).unwrap_or(&64)))
                .collect();
            out.retain(|(s, e)| s < e);
            out
        })
    }

    proptest! {
        /// Sharded watchers registered and removed in two lock holds with their tree work in
        /// between (on the spare copy, one change at a time), interleaved at random with events:
        /// each watcher receives exactly the events a scan of its filter would, over the time
        /// it was registered, each once, in order; and the two copies end equal.
        #[test]
        fn split_registration_delivers_what_a_scan_would(
            shards in proptest::collection::vec(grid_ranges(), 6),
            ops in proptest::collection::vec((0u8..4, 0usize..6, 0u8..16), 1..120),
        ) {
            let f = Fixture::new();
            let mut r = Registry::new(&f.schema);
            let mut spare = Box::new(ShardRouter::new());
            let node = Arc::new(Watcher::new(f.predicate(&on_node("n1")), 0, 1 << 12, None));
            r.add(&f.schema, Arc::clone(&node));
            // Per slot: the watcher, its id, and the event log's length when it registered.
            let mut slots: Vec<Option<(Arc<Watcher>, u32, usize)>> = vec![None; 6];
            // Every watcher that was registered, with its span of the event log.
            let mut spans: Vec<(Arc<Watcher>, usize, usize)> = Vec::new();
            let mut work: VecDeque<SpareWork> = VecDeque::new();
            let mut log: Vec<Arc<Event>> = Vec::new();
            let mut objects: hashbrown::HashMap<String, Object> = Default::default();
            let mut rv = 0;
            for (kind, slot, x) in ops {
                match kind {
                    // An event: pod x % 8 put with uid x, or deleted.
                    0 => {
                        rv += 1;
                        let name = format!("p{}", x % 8);
                        let prev = objects.remove(&name);
                        let object = (x < 12).then(|| {
                            let json = format!(
                                r#"{{"metadata":{{"name":"{name}","namespace":"ns","uid":"u{x}"}},"spec":{{"nodeName":"n1"}}}}"#
                            );
                            Object::decode(&f.schema, &format!("/registry/pods/ns/{name}"), json.as_bytes(), rv).unwrap()
                        });
                        if let Some(o) = &object {
                            objects.insert(name, o.clone());
                        }
                        if object.is_none() && prev.is_none() {
                            continue;
                        }
                        let ev = Arc::new(Event::new(log.len() as u64, rv, object, prev, Instant::now()));
                        r.dispatch(&f.schema, &ev, &mut Vec::new());
                        log.push(ev);
                    }
                    // Registration's first hold; its tree work is queued.
                    1 if slots[slot].is_none() => {
                        let w = shard_watcher(&f, &shards[slot]);
                        let (id, pending) = r.add(&f.schema, Arc::clone(&w));
                        prop_assert!(pending);
                        work.push_back(SpareWork {
                            change: ShardChange::Added(id),
                            shard: w.predicate.shard().unwrap().clone(),
                            patch: None,
                            step: 0,
                        });
                        slots[slot] = Some((w, id, log.len()));
                    }
                    // Removal's first hold, once the registration returned (its work is done).
                    2 => {
                        let Some((_, id, _)) = &slots[slot] else { continue };
                        if work.iter().any(|w| w.change == ShardChange::Added(*id)) {
                            continue;
                        }
                        let (w, id, from) = slots[slot].take().unwrap();
                        let (gone, in_shards) = r.remove(&f.schema, id).unwrap();
                        prop_assert!(Arc::ptr_eq(&gone, &w));
                        prop_assert!(in_shards);
                        work.push_back(SpareWork {
                            change: ShardChange::Removed(id),
                            shard: w.predicate.shard().unwrap().clone(),
                            patch: None,
                            step: 0,
                        });
                        spans.push((w, from, log.len()));
                    }
                    _ => step(&mut r, &mut spare, &mut work),
                }
            }
            while !work.is_empty() {
                step(&mut r, &mut spare, &mut work);
            }
            for (w, id, from) in slots.into_iter().flatten() {
                spans.push((w, from, log.len()));
                r.remove(&f.schema, id);
            }
            spans.push((node, 0, log.len()));
            for (w, from, to) in &spans {
                let want: Vec<(u64, crate::model::EventType)> = log[*from..*to]
                    .iter()
                    .filter_map(|ev| Some((ev.rv, w.transition(&f.schema, ev)?)))
                    .collect();
                let got: Vec<(u64, crate::model::EventType)> =
                    w.queue.lock().items.iter().map(|d| (d.event.rv, d.kind)).collect();
                prop_assert_eq!(got, want);
            }
            prop_assert_eq!(r.router.shard_summary(), Some(spare.summary()));
            prop_assert!(r.router.shards_same_as(&spare), "the copies differ");
        }
    }
}

//! Trigger routing: which watchers an event is offered to.
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
//! ## Invariants
//! - Each watcher id is in exactly one place: one (trigger, value) set, the shard router, or
//!   `unrouted` (a sharded watcher whose ranges are not in the shard router yet is in
//!   `unrouted`). Hence an event visits a watcher at most once, with no deduplication pass (the
//!   shard router visits each of its watchers at most once per event).

use hashbrown::HashMap;
use roaring::RoaringBitmap;

use crate::cache::history::Event;
use crate::cache::members::Members;
use crate::cache::shard_router::ShardRouter;
use crate::model::{Attr, Schema, ShardSelector};

pub(crate) struct Router {
    /// One map per trigger, aligned with `Schema::triggers`.
    by_trigger: Vec<(Attr, HashMap<Box<str>, Members>)>,
    /// Watchers no trigger routes, routed by their shard selector's ranges (when the schema
    /// routes shards; else they are unrouted and their filter checks the hash). Boxed: the
    /// swap with the spare copy moves a pointer.
    shards: Option<Box<ShardRouter>>,
    unrouted: RoaringBitmap,
}

impl Router {
    pub(super) fn new(schema: &Schema) -> Router {
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
    pub(super) fn add(
        &mut self,
        id: u32,
        route: Option<(Attr, &str)>,
        shard: Option<&ShardSelector>,
    ) -> bool {
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
    pub(super) fn remove(
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
    pub(super) fn swap_shards(&mut self, spare: &mut Box<ShardRouter>, admit: Option<u32>) {
        if let Some(shards) = &mut self.shards {
            std::mem::swap(shards, spare);
        }
        if let Some(id) = admit {
            let waited = self.unrouted.remove(id);
            debug_assert!(waited, "an admitted watcher waited in unrouted");
        }
    }

    /// Calls `visit` once for every watcher the event must be offered to.
    pub(super) fn for_each_candidate(
        &self,
        schema: &Schema,
        ev: &Event,
        mut visit: impl FnMut(u32),
    ) {
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
    pub(super) fn counts(&self) -> (u64, u64) {
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
    pub(super) fn shard_summary(&self) -> Option<(u64, usize)> {
        self.shards.as_ref().map(|s| s.summary())
    }

    /// Whether the shard router equals `other`, slot for slot.
    #[cfg(test)]
    pub(super) fn shards_same_as(&self, other: &ShardRouter) -> bool {
        self.shards.as_ref().is_some_and(|s| s.same_as(other))
    }

    fn map_for(&mut self, attr: Attr) -> Option<&mut HashMap<Box<str>, Members>> {
        self.by_trigger
            .iter_mut()
            .find(|(a, _)| *a == attr)
            .map(|(_, m)| m)
    }
}

//! Trigger routing: which watchers an event is offered to.
//!
//! A watcher whose selection pins a trigger attribute to one value (`spec.nodeName=node-7`, a
//! namespace, a declared label, a name) is registered under that (trigger, value). Every other watcher
//! is unrouted. An event is offered to the watchers registered under its new or previous object's
//! values for each trigger, plus the unrouted ones, so its cost does not grow with the number of
//! watchers that cannot match it.
//!
//! A watcher no trigger routes but with a `shardSelector` is routed by its hash ranges instead
//! (`cache/shard_router.rs`).
//!
//! ## Invariants
//! - Each watcher id is in exactly one place: one (trigger, value) set, the shard router, or
//!   `unrouted`. Hence an event visits a watcher at most once, with no deduplication pass (the
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
    /// routes shards; else they are unrouted and their filter checks the hash).
    shards: Option<ShardRouter>,
    unrouted: RoaringBitmap,
}

impl Router {
    pub fn new(schema: &Schema) -> Router {
        Router {
            by_trigger: schema
                .triggers
                .iter()
                .map(|a| (*a, HashMap::new()))
                .collect(),
            shards: schema.route_shards.then(ShardRouter::new),
            unrouted: RoaringBitmap::new(),
        }
    }

    pub fn add(&mut self, id: u32, route: Option<(Attr, &str)>, shard: Option<&ShardSelector>) {
        let routed = route.is_some_and(|(a, _)| self.map_for(a).is_some());
        if let (false, Some(shards), Some(shard)) = (routed, &mut self.shards, shard) {
            shards.add(id, shard);
            return;
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
    }

    pub fn remove(&mut self, id: u32, route: Option<(Attr, &str)>, shard: Option<&ShardSelector>) {
        let routed = route.is_some_and(|(a, _)| self.map_for(a).is_some());
        if let (false, Some(shards), Some(shard)) = (routed, &mut self.shards, shard) {
            shards.remove(id, shard);
            return;
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
    }

    /// Calls `visit` once for every watcher the event must be offered to.
    pub fn for_each_candidate(&self, schema: &Schema, ev: &Event, mut visit: impl FnMut(u32)) {
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
    pub fn counts(&self) -> (u64, u64) {
        let routed = self
            .by_trigger
            .iter()
            .flat_map(|(_, m)| m.values())
            .map(Members::len)
            .sum::<u64>()
            + self.shards.as_ref().map_or(0, ShardRouter::count);
        (routed, self.unrouted.len())
    }

    fn map_for(&mut self, attr: Attr) -> Option<&mut HashMap<Box<str>, Members>> {
        self.by_trigger
            .iter_mut()
            .find(|(a, _)| *a == attr)
            .map(|(_, m)| m)
    }
}

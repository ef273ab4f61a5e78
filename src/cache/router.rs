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
use crate::cache::shard_router::ShardRouter;
use crate::model::{Attr, Schema, ShardSelector};

/// The watchers registered under one (trigger, value), or one shard segment
/// (`cache/shard_router.rs`). Most values have one watcher (a kubelet per node), which is kept
/// inline: no heap bitmap to chase on the hot path.
#[derive(Clone)]
pub(crate) enum Members {
    One(u32),
    Many(RoaringBitmap),
}

impl Members {
    pub(crate) fn insert(&mut self, id: u32) {
        match self {
            Members::One(x) if *x == id => {}
            Members::One(x) => *self = Members::Many(RoaringBitmap::from_iter([*x, id])),
            Members::Many(bm) => {
                bm.insert(id);
            }
        }
    }

    /// Removes `id`; returns whether the set is now empty.
    pub(crate) fn remove(&mut self, id: u32) -> bool {
        match self {
            Members::One(x) => *x == id,
            Members::Many(bm) => {
                bm.remove(id);
                if bm.len() == 1 {
                    let last = bm.min().unwrap_or_else(|| unreachable!("len is 1"));
                    *self = Members::One(last);
                }
                bm_is_empty(self)
            }
        }
    }

    pub(crate) fn for_each(&self, visit: &mut impl FnMut(u32)) {
        match self {
            Members::One(x) => visit(*x),
            Members::Many(bm) => bm.iter().for_each(visit),
        }
    }

    pub(crate) fn contains(&self, id: u32) -> bool {
        match self {
            Members::One(x) => *x == id,
            Members::Many(bm) => bm.contains(id),
        }
    }

    /// Whether two sets (`None`: empty) hold the same watchers.
    pub(crate) fn same(a: Option<&Members>, b: Option<&Members>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(Members::One(x)), Some(Members::One(y))) => x == y,
            (Some(Members::Many(x)), Some(Members::Many(y))) => x == y,
            _ => false,
        }
    }

    fn len(&self) -> u64 {
        match self {
            Members::One(_) => 1,
            Members::Many(bm) => bm.len(),
        }
    }
}

fn bm_is_empty(m: &Members) -> bool {
    matches!(m, Members::Many(bm) if bm.is_empty())
}

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

    pub fn add(&mut self, id: u32, route: Option<&(Attr, String)>, shard: Option<&ShardSelector>) {
        let routed = route.is_some_and(|(a, _)| self.map_for(*a).is_some());
        if let (false, Some(shards), Some(shard)) = (routed, &mut self.shards, shard) {
            shards.add(id, shard);
            return;
        }
        match route.and_then(|(a, v)| self.map_for(*a).map(|m| (m, v))) {
            Some((map, v)) => match map.get_mut(v.as_str()) {
                Some(m) => m.insert(id),
                None => {
                    map.insert(v.as_str().into(), Members::One(id));
                }
            },
            None => {
                self.unrouted.insert(id);
            }
        }
    }

    pub fn remove(
        &mut self,
        id: u32,
        route: Option<&(Attr, String)>,
        shard: Option<&ShardSelector>,
    ) {
        let routed = route.is_some_and(|(a, _)| self.map_for(*a).is_some());
        if let (false, Some(shards), Some(shard)) = (routed, &mut self.shards, shard) {
            shards.remove(id, shard);
            return;
        }
        match route.and_then(|(a, v)| self.map_for(*a).map(|m| (m, v))) {
            Some((map, v)) => {
                if map.get_mut(v.as_str()).is_some_and(|m| m.remove(id)) {
                    map.remove(v.as_str());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_go_from_one_to_many_and_back() {
        let mut m = Members::One(3);
        m.insert(3);
        assert_eq!(m.len(), 1);
        m.insert(9);
        assert_eq!(m.len(), 2);
        assert!(!m.remove(3));
        assert!(matches!(m, Members::One(9)));
        assert!(m.remove(9));
        let mut seen = Vec::new();
        Members::Many(RoaringBitmap::from_iter([1, 2])).for_each(&mut |x| seen.push(x));
        assert_eq!(seen, [1, 2]);
    }
}

//! Trigger routing: which watchers an event is offered to.
//!
//! A watcher whose selection pins a trigger attribute to one value (`spec.nodeName=node-7`, a
//! namespace, a declared label, a name) is registered under that (trigger, value). Every other watcher
//! is unrouted. An event is offered to the watchers registered under its new or previous object's
//! values for each trigger, plus the unrouted ones, so its cost does not grow with the number of
//! watchers that cannot match it.
//!
//! ## Invariants
//! - Each watcher id is in exactly one set: one (trigger, value) bitmap, or `unrouted`. Hence an event
//!   visits a watcher at most once, with no deduplication pass.

use hashbrown::HashMap;
use roaring::RoaringBitmap;

use crate::history::Event;
use crate::schema::{Attr, Schema};
use crate::store::{bitmap_for, remove_from};

pub(crate) struct Router {
    /// One map per trigger, aligned with `Schema::triggers`.
    by_trigger: Vec<(Attr, HashMap<Box<str>, RoaringBitmap>)>,
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
            unrouted: RoaringBitmap::new(),
        }
    }

    pub fn add(&mut self, id: u32, route: Option<&(Attr, String)>) {
        match route.and_then(|(a, v)| self.map_for(*a).map(|m| (m, v))) {
            Some((map, v)) => {
                bitmap_for(map, v).insert(id);
            }
            None => {
                self.unrouted.insert(id);
            }
        }
    }

    pub fn remove(&mut self, id: u32, route: Option<&(Attr, String)>) {
        match route.and_then(|(a, v)| self.map_for(*a).map(|m| (m, v))) {
            Some((map, v)) => {
                remove_from(map, v, id);
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
            if let Some(bm) = new.and_then(|v| map.get(v)) {
                bm.iter().for_each(&mut visit);
            }
            if old != new {
                if let Some(bm) = old.and_then(|v| map.get(v)) {
                    bm.iter().for_each(&mut visit);
                }
            }
        }
        self.unrouted.iter().for_each(visit);
    }

    /// Number of routed and unrouted watchers.
    pub fn counts(&self) -> (u64, u64) {
        let routed = self
            .by_trigger
            .iter()
            .flat_map(|(_, m)| m.values())
            .map(RoaringBitmap::len)
            .sum();
        (routed, self.unrouted.len())
    }

    fn map_for(&mut self, attr: Attr) -> Option<&mut HashMap<Box<str>, RoaringBitmap>> {
        self.by_trigger
            .iter_mut()
            .find(|(a, _)| *a == attr)
            .map(|(_, m)| m)
    }
}

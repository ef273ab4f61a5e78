//! Fan-out of one applied event to the watchers the router selects.
//!
//! Runs synchronously inside ingest, under the state write lock, and never waits for a consumer:
//! a full queue parks its watcher (see [`crate::watcher`]).

use std::sync::Arc;

use crate::history::Event;
use crate::router::Router;
use crate::schema::Schema;
use crate::watcher::{Offer, WatcherShared};

/// The registered watchers: a slab of ids plus the router over them.
pub(crate) struct Registry {
    watchers: Vec<Option<Arc<WatcherShared>>>,
    free: Vec<u32>,
    pub router: Router,
}

/// What one event's fan-out did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Fanout {
    pub offered: u64,
    pub queued: u64,
    pub parked: u64,
}

impl Registry {
    pub fn new(schema: &Schema) -> Registry {
        Registry {
            watchers: Vec::new(),
            free: Vec::new(),
            router: Router::new(schema),
        }
    }

    pub fn add(&mut self, w: Arc<WatcherShared>) -> u32 {
        let route = w.predicate.route().cloned();
        let id = match self.free.pop() {
            Some(id) => {
                self.watchers[id as usize] = Some(w);
                id
            }
            None => {
                self.watchers.push(Some(w));
                (self.watchers.len() - 1) as u32
            }
        };
        self.router.add(id, route.as_ref());
        id
    }

    pub fn remove(&mut self, id: u32) {
        if let Some(w) = self.watchers.get_mut(id as usize).and_then(Option::take) {
            self.router.remove(id, w.predicate.route());
            self.free.push(id);
        }
    }

    /// Offers the event to every candidate watcher.
    pub fn dispatch(&self, schema: &Schema, ev: &Arc<Event>) -> Fanout {
        let mut f = Fanout::default();
        self.router.for_each_candidate(schema, ev, |id| {
            let Some(w) = self.watchers.get(id as usize).and_then(Option::as_ref) else {
                return;
            };
            f.offered += 1;
            match w.offer(schema, ev) {
                Offer::Queued => f.queued += 1,
                Offer::Parked => f.parked += 1,
                Offer::Skipped => {}
            }
        });
        f
    }
}

//! A resync in progress: the initial sync, or a relist after a compaction or an unrecoverable watch
//! break. It keeps only the listed keys and the objects that differ from the cache, never a second
//! copy of the whole data set; [`Resync::finish`] applies the difference through the same commit as
//! live events.

use hashbrown::HashSet;

use crate::cache::state::{ResyncOutcome, Shared};
use crate::model::{Object, ObjectKey};

/// A resync in progress (see [`CacheWriter::resync`](crate::CacheWriter::resync)). It borrows
/// the writer: nothing else is applied until it is finished or dropped (dropped, it changes
/// nothing).
pub struct Resync<'w> {
    shared: &'w Shared,
    rv: u64,
    seen: HashSet<ObjectKey>,
    changed: Vec<Object>,
    listed: u64,
}

impl<'w> Resync<'w> {
    pub(crate) fn new(shared: &'w Shared, rv: u64) -> Resync<'w> {
        Resync {
            shared,
            rv,
            seen: HashSet::new(),
            changed: Vec::new(),
            listed: 0,
        }
    }

    /// Adds one page of the listed state.
    pub fn add_page(&mut self, objects: impl IntoIterator<Item = Object>) {
        let mut page: Vec<Object> = Vec::new();
        for o in objects {
            self.listed += 1;
            if self.seen.insert(o.key_owned()) {
                page.push(o);
            }
        }
        self.shared.retain_changed(&mut page, &mut self.seen);
        self.changed.append(&mut page);
    }

    /// Objects listed so far.
    pub fn listed(&self) -> u64 {
        self.listed
    }

    /// Applies the difference. The first resync loads the state silently and makes the cache ready.
    /// Later ones turn the difference into ordinary ADDED/MODIFIED/DELETED events at the resync
    /// revision, so connected watchers stay connected and converge; watches and continuations from
    /// before it get 410 Expired.
    pub fn finish(self) -> ResyncOutcome {
        self.shared
            .finish_resync(self.rv, self.changed, &self.seen, self.listed)
    }
}

impl std::fmt::Debug for Resync<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resync")
            .field("resource", &self.shared.schema.def.plural)
            .field("rv", &self.rv)
            .field("listed", &self.listed)
            .finish()
    }
}

//! An in-memory event source: a tiny revisioned key-value store that feeds a [`Cache`] the way etcd
//! does (one revision per write, deletions with the previous value). For unit tests, property tests,
//! benches and embedding without etcd. The etcd upstream is the production source.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::cache::{Cache, Change};
use crate::error::Result;
use crate::object::DecodeError;
use crate::upstream::{BoxFuture, Upstream};

/// A revisioned in-memory key-value store feeding one [`Cache`].
#[derive(Clone)]
pub struct MemorySource {
    cache: Cache,
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    rev: u64,
    kv: BTreeMap<String, Bytes>,
}

impl MemorySource {
    /// A source at revision `start_rev` holding `initial` (key, JSON) pairs, synced into `cache`,
    /// which becomes ready. Values that do not decode are skipped and counted.
    pub fn new(
        cache: Cache,
        start_rev: u64,
        initial: impl IntoIterator<Item = (String, Bytes)>,
    ) -> MemorySource {
        let kv: BTreeMap<String, Bytes> = initial.into_iter().collect();
        let mut resync = cache.resync(start_rev);
        let objects: Vec<_> = kv
            .iter()
            .filter_map(|(k, v)| {
                cache
                    .decode(k, v, start_rev)
                    .map_err(|e| cache.record_decode_error(&e))
                    .ok()
            })
            .collect();
        resync.add_page(objects);
        resync.finish();
        let src = MemorySource {
            cache: cache.clone(),
            inner: Arc::new(Mutex::new(Inner { rev: start_rev, kv })),
        };
        cache.set_upstream(Arc::new(src.clone()));
        src
    }

    /// The cache this source feeds.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.inner.lock().rev
    }

    /// Writes one value at a new revision and applies it to the cache.
    ///
    /// # Errors
    /// The [`DecodeError`] when the value is malformed; the source keeps it (as etcd would), the
    /// cache skips it.
    pub fn put(&self, key: &str, value: impl Into<Bytes>) -> Result<u64, DecodeError> {
        self.txn([(key.to_owned(), Some(value.into()))])
    }

    /// Deletes one key at a new revision, if it exists. Returns the revision.
    pub fn delete(&self, key: &str) -> Option<u64> {
        if !self.inner.lock().kv.contains_key(key) {
            return None;
        }
        self.txn([(key.to_owned(), None)]).ok()
    }

    /// Applies several writes atomically at one new revision (`None` deletes).
    ///
    /// # Errors
    /// The first [`DecodeError`]; the other changes are still applied.
    pub fn txn(
        &self,
        writes: impl IntoIterator<Item = (String, Option<Bytes>)>,
    ) -> Result<u64, DecodeError> {
        let mut inner = self.inner.lock();
        inner.rev += 1;
        let rev = inner.rev;
        let mut changes = Vec::new();
        let mut first_err = None;
        for (key, value) in writes {
            match value {
                Some(v) => {
                    match self.cache.decode(&key, &v, rev) {
                        Ok(o) => changes.push(Change::Put(o)),
                        Err(e) => {
                            self.cache.record_decode_error(&e);
                            first_err.get_or_insert(e);
                        }
                    }
                    inner.kv.insert(key, v);
                }
                None => {
                    if inner.kv.remove(&key).is_some() {
                        changes.push(Change::Delete(key));
                    }
                }
            }
        }
        // The lock is held while applying so that revisions reach the cache in order.
        self.cache
            .apply(rev, changes)
            .unwrap_or_else(|e| unreachable!("the source's revisions increase: {e}"));
        drop(inner);
        match first_err {
            Some(e) => Err(e),
            None => Ok(rev),
        }
    }

    /// Advances the revision without touching this resource (a write to another resource), and tells
    /// the cache through a progress notification.
    pub fn bump(&self) -> u64 {
        let mut inner = self.inner.lock();
        inner.rev += 1;
        self.cache.progress(inner.rev);
        inner.rev
    }

    /// The source's current value of a key.
    pub fn value(&self, key: &str) -> Option<Bytes> {
        self.inner.lock().kv.get(key).cloned()
    }
}

impl Upstream for MemorySource {
    fn current_revision(&self) -> BoxFuture<'_, Result<u64>> {
        let rev = self.revision();
        Box::pin(async move { Ok(rev) })
    }
}

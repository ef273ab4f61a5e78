//! An in-memory event source: a tiny revisioned key-value store that feeds a [`Cache`] the way etcd
//! does (one revision per write, deletions with the previous value). For unit tests, property tests,
//! benches and embedding without etcd; it also takes writes ([`Writes`]), so a cache it feeds can be
//! served over HTTP with writes. The etcd upstream is the production source.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::cache::{BoxFuture, Cache, CacheWriter, Change, Upstream};
use crate::error::Result;
use crate::model::DecodeError;
use crate::upstream::{Stored, WriteError, Writes};

/// A revisioned in-memory key-value store feeding one [`Cache`].
#[derive(Clone)]
pub struct MemorySource {
    cache: Cache,
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    /// The cache's one writer: held under the lock, so revisions reach the cache in order.
    writer: CacheWriter,
    rev: u64,
    /// Value and mod revision per key.
    kv: BTreeMap<String, (Bytes, u64)>,
}

impl MemorySource {
    /// A source at revision `start_rev` holding `initial` (key, JSON) pairs, synced through
    /// `writer` into its cache, which becomes ready. Values that do not decode are skipped and
    /// counted. The source keeps the writer: it is the cache's one feeder.
    pub fn new(
        mut writer: CacheWriter,
        start_rev: u64,
        initial: impl IntoIterator<Item = (String, Bytes)>,
    ) -> MemorySource {
        let kv: BTreeMap<String, (Bytes, u64)> = initial
            .into_iter()
            .map(|(k, v)| (k, (v, start_rev)))
            .collect();
        let cache = writer.cache().clone();
        let mut resync = writer.resync(start_rev);
        resync.add_page(
            kv.iter()
                .filter_map(|(k, (v, _))| cache.decode_or_skip(k, v, start_rev)),
        );
        resync.finish();
        let src = MemorySource {
            cache: cache.clone(),
            inner: Arc::new(Mutex::new(Inner {
                writer,
                rev: start_rev,
                kv,
            })),
        };
        cache.set_upstream(Arc::new(src.clone()));
        src
    }

    /// The cache this source feeds.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The cache's writer, for what an upstream does besides writes (a relist, an outage:
    /// [`CacheWriter::resync`], [`CacheWriter::set_not_ready`]). The source's lock is held until
    /// the guard is dropped, so writes wait and revisions still reach the cache in order.
    pub fn writer(&self) -> impl std::ops::DerefMut<Target = CacheWriter> + '_ {
        parking_lot::MutexGuard::map(self.inner.lock(), |i| &mut i.writer)
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
        Self::commit(&self.cache, &mut inner, writes)
    }

    /// Applies writes at the next revision, with the lock held so that revisions reach the cache in
    /// order.
    fn commit(
        cache: &Cache,
        inner: &mut Inner,
        writes: impl IntoIterator<Item = (String, Option<Bytes>)>,
    ) -> Result<u64, DecodeError> {
        inner.rev += 1;
        let rev = inner.rev;
        let mut changes = Vec::new();
        let mut first_err = None;
        for (key, value) in writes {
            match value {
                Some(v) => {
                    // As the etcd follower: an undecodable value deletes the key from the cache.
                    match cache.decode(&key, &v, rev) {
                        Ok(o) => changes.push(Change::Put(o)),
                        Err(e) => {
                            cache.record_decode_error(&e);
                            first_err.get_or_insert(e);
                            changes.push(Change::Delete(key.clone()));
                        }
                    }
                    inner.kv.insert(key, (v, rev));
                }
                None => {
                    if inner.kv.remove(&key).is_some() {
                        changes.push(Change::Delete(key));
                    }
                }
            }
        }
        inner
            .writer
            .apply(rev, changes)
            .unwrap_or_else(|e| unreachable!("the source's revisions increase: {e}"));
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
        let rev = inner.rev;
        inner.writer.progress(rev);
        rev
    }

    /// The source's current value of a key.
    pub fn value(&self, key: &str) -> Option<Bytes> {
        self.inner.lock().kv.get(key).map(|(v, _)| v.clone())
    }

    /// A precondition-checked write: `check` sees the key's current mod revision (if any) and says
    /// whether the write may go ahead.
    fn checked(
        &self,
        key: &str,
        value: Option<Bytes>,
        check: impl FnOnce(Option<u64>) -> Result<(), WriteError>,
    ) -> Result<(u64, Option<Bytes>), WriteError> {
        let mut inner = self.inner.lock();
        let current = inner.kv.get(key).cloned();
        check(current.as_ref().map(|(_, rev)| *rev))?;
        // A malformed value is stored and skipped by the cache, as etcd and the follower would.
        let rev = match Self::commit(&self.cache, &mut inner, [(key.to_owned(), value)]) {
            Ok(rev) => rev,
            Err(_) => inner.rev,
        };
        Ok((rev, current.map(|(v, _)| v)))
    }
}

impl Upstream for MemorySource {
    fn current_revision(&self) -> BoxFuture<'_, Result<u64>> {
        let rev = self.revision();
        Box::pin(async move { Ok(rev) })
    }
}

impl Writes for MemorySource {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Stored>, WriteError>> {
        let found = self.inner.lock().kv.get(key).map(|(v, rev)| Stored {
            value: v.clone(),
            mod_revision: *rev,
        });
        Box::pin(async move { Ok(found) })
    }

    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, Result<u64, WriteError>> {
        let r = self
            .checked(key, Some(value), |cur| match cur {
                Some(_) => Err(WriteError::AlreadyExists),
                None => Ok(()),
            })
            .map(|(rev, _)| rev);
        Box::pin(async move { r })
    }

    fn replace<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64, WriteError>> {
        let r = self
            .checked(key, Some(value), |cur| match cur {
                None => Err(WriteError::NotFound),
                Some(rev) if rev != expected => Err(WriteError::Conflict),
                Some(_) => Ok(()),
            })
            .map(|(rev, _)| rev);
        Box::pin(async move { r })
    }

    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<(u64, Bytes), WriteError>> {
        let r = self
            .checked(key, None, |cur| match (cur, expected) {
                (None, _) => Err(WriteError::NotFound),
                (Some(rev), Some(want)) if rev != want => Err(WriteError::Conflict),
                _ => Ok(()),
            })
            .map(|(rev, prev)| (rev, prev.unwrap_or_default()));
        Box::pin(async move { r })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;
    use crate::model::ResourceDef;

    fn pod(name: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#
        ))
    }

    #[tokio::test]
    async fn writes_check_their_preconditions_and_reach_the_cache() {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = MemorySource::new(writer, 1, []);
        let k = "/registry/pods/ns/a";
        let rev = src.create(k, pod("a")).await.unwrap();
        assert_eq!(rev, 2);
        assert_eq!(
            src.create(k, pod("a")).await,
            Err(WriteError::AlreadyExists)
        );
        assert_eq!(src.replace(k, pod("a"), 1).await, Err(WriteError::Conflict));
        assert_eq!(src.replace(k, pod("a"), 2).await, Ok(3));
        assert_eq!(src.get(k).await.unwrap().map(|s| s.mod_revision), Some(3));
        assert_eq!(cache.resource_version(), 3);
        assert_eq!(
            Writes::delete(&src, k, Some(2)).await,
            Err(WriteError::Conflict)
        );
        assert_eq!(Writes::delete(&src, k, Some(3)).await, Ok((4, pod("a"))));
        assert_eq!(
            Writes::delete(&src, k, None).await,
            Err(WriteError::NotFound)
        );
        assert_eq!(src.replace(k, pod("a"), 3).await, Err(WriteError::NotFound));
        assert_eq!(cache.stats().objects, 0);
    }
}

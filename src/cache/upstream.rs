//! The contract of the source a cache follows ([`Upstream`]): where consistent reads learn the
//! current revision, and, when the upstream's progress notifications cannot be trusted (etcd before
//! 3.4.31 / 3.5.13), where they read instead. [`RangeReader`] pages through its keys at one
//! revision, for resyncs and for reads served by the upstream.
//!
//! The cache only reads through this contract; feeding the cache is the feeder's job
//! ([`Cache::apply`](crate::Cache::apply), [`Cache::resync`](crate::Cache::resync)), and writes are
//! the [`Writes`](crate::Writes) contract's.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use crate::error::{Error, Result};

/// A boxed future, for the object-safe [`Upstream`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One stored key-value pair as read from the upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawKv {
    /// The full key, e.g. `/registry/pods/ns/name`.
    pub key: String,
    /// The stored bytes.
    pub value: Bytes,
    /// The revision the value was written at.
    pub mod_revision: u64,
}

/// One page of a range read.
#[derive(Debug, Clone, Default)]
pub struct RangePage {
    /// The revision the page was read at.
    pub revision: u64,
    /// Key-value pairs in key order.
    pub kvs: Vec<RawKv>,
    /// Whether more keys follow the last one.
    pub more: bool,
}

/// The source of truth a cache follows (etcd, or [`MemorySource`](crate::MemorySource)).
pub trait Upstream: Send + Sync + 'static {
    /// The upstream's current revision, read linearizably.
    fn current_revision(&self) -> BoxFuture<'_, Result<u64>>;

    /// Asks the upstream to report its progress soon (etcd: a watch progress request). Called every
    /// [`CacheConfig::progress_interval`](crate::CacheConfig::progress_interval) while a read waits
    /// for the cache to catch up.
    fn request_progress(&self) {}

    /// Whether a progress notification at revision R proves the cache has every change up to R.
    /// When not (etcd before 3.4.31 / 3.5.13, etcd#15220 and #17507), consistent reads are served by
    /// [`range`](Upstream::range) instead of by waiting for the cache.
    fn progress_is_reliable(&self) -> bool {
        true
    }

    /// A stored value as the cache decodes it: the upstream's storage transformation undone (etcd:
    /// encryption at rest). By default values are stored as they are.
    ///
    /// # Errors
    /// Why the value cannot be read (e.g. no configured key decrypts it), naming the provider.
    fn read_stored<'v>(
        &self,
        key: &str,
        value: &'v [u8],
    ) -> std::result::Result<std::borrow::Cow<'v, [u8]>, String> {
        let _ = key;
        Ok(std::borrow::Cow::Borrowed(value))
    }

    /// Reads the resource's keys from `from` (inclusive; `None`: the start of the resource) at
    /// `revision` (`None`: current, linearizable), at most `limit` of them.
    ///
    /// # Errors
    /// [`Error::Expired`] when the revision was compacted, [`Error::Upstream`] otherwise.
    fn range(
        &self,
        revision: Option<u64>,
        from: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, Result<RangePage>> {
        let _ = (revision, from, limit);
        Box::pin(async {
            Err(Error::Upstream(
                "this upstream does not serve range reads".into(),
            ))
        })
    }
}

/// Pages through an upstream's keys at one revision: the first page fixes the revision (when none
/// was given), and each page starts just after the previous page's last key.
pub struct RangeReader<'a> {
    upstream: &'a dyn Upstream,
    revision: Option<u64>,
    from: Option<String>,
    page_size: usize,
    done: bool,
}

impl<'a> RangeReader<'a> {
    /// Reads from the start of the resource, or after key `after` (exclusive), at `revision`
    /// (`None`: the current one, linearizably), `page_size` keys per request.
    pub fn new(
        upstream: &'a dyn Upstream,
        revision: Option<u64>,
        after: Option<&str>,
        page_size: usize,
    ) -> RangeReader<'a> {
        RangeReader {
            upstream,
            revision,
            from: after.map(key_after),
            page_size: page_size.max(1),
            done: false,
        }
    }

    /// The revision the pages are read at, once the first page fixed it.
    pub fn revision(&self) -> Option<u64> {
        self.revision
    }

    /// The next page; `None` after the last one.
    ///
    /// # Errors
    /// The upstream's error ([`Error::Expired`] when the revision was compacted). The reader is
    /// done after an error.
    pub async fn next_page(&mut self) -> Option<Result<RangePage>> {
        if self.done {
            return None;
        }
        let page = self
            .upstream
            .range(self.revision, self.from.take(), self.page_size)
            .await;
        match &page {
            Ok(p) => {
                self.revision = Some(p.revision);
                match (p.more, p.kvs.last()) {
                    (true, Some(last)) => self.from = Some(key_after(&last.key)),
                    _ => self.done = true,
                }
            }
            Err(_) => self.done = true,
        }
        Some(page)
    }
}

/// The smallest key after `key`: the key with a NUL byte appended.
fn key_after(key: &str) -> String {
    format!("{key}\u{0}")
}

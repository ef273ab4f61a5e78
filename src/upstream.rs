//! The [`Upstream`] a cache follows: where consistent reads learn the current revision, and, when the
//! upstream's progress notifications cannot be trusted (etcd before 3.4.31 / 3.5.13), where they read
//! instead.

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

//! The upstreams layer: sources that feed caches, and the contract for writes that go through to
//! them. [`memory::MemorySource`] is an in-process source; the crates `watchcache-etcd`
//! (`crates/etcd`) and `watchcache-kube` (`crates/kube`) follow etcd and a Kubernetes API server,
//! on the follower driver of `watchcache-follow` (`crates/follow`).
//!
//! A source feeds its cache through the cache's one writer
//! ([`CacheWriter::resync`](crate::CacheWriter::resync),
//! [`CacheWriter::apply`](crate::CacheWriter::apply),
//! [`CacheWriter::progress`](crate::CacheWriter::progress)) and answers the cache's reads
//! through [`Upstream`](crate::Upstream). An embedding program writes in code through [`Writes`]
//! (the HTTP server writes nothing: writes over HTTP are kube-apiserver's), and a write reaches
//! the cache the way every other change does: as an event from the source.
//!
//! ## Dependencies
//! This layer depends on the model and cache layers, never on the server.

pub mod memory;

use bytes::Bytes;

use crate::cache::BoxFuture;
use crate::error::Cause;

/// A stored value and the revision it was last written at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The stored bytes.
    pub value: Bytes,
    /// The revision of its last write (etcd's mod revision).
    pub mod_revision: u64,
}

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A create found the key present.
    #[error("the key already exists")]
    AlreadyExists,
    /// An update or delete found no such key.
    #[error("the key does not exist")]
    NotFound,
    /// An update or delete found the key at another revision than expected.
    #[error("the key was modified since the expected revision")]
    Conflict,
    /// The upstream did not answer in time; the write may or may not have happened.
    #[error("the upstream did not answer in time")]
    Timeout,
    /// The value is larger than the upstream takes in one write (etcd's `--max-request-bytes`,
    /// 1.5 MiB by default); nothing was written.
    #[error("the value is larger than the upstream takes in one write")]
    TooLarge,
    /// The upstream failed.
    #[error("upstream error: {message}")]
    Upstream {
        /// What failed, with the cause's text.
        message: String,
        /// The upstream's own error, when there is one.
        #[source]
        cause: Option<Cause>,
    },
}

impl WriteError {
    /// An upstream failure with no error object behind it.
    pub fn upstream(message: impl Into<String>) -> Self {
        WriteError::Upstream {
            message: message.into(),
            cause: None,
        }
    }

    /// An upstream failure caused by `e`; the message is `context: e`, or `e` alone when the
    /// context is empty.
    pub fn upstream_from(
        context: impl std::fmt::Display,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let (message, cause) = Cause::with_context(context, e);
        WriteError::Upstream {
            message,
            cause: Some(cause),
        }
    }
}

/// Writes through to a source, with the preconditions Kubernetes writes need. Keys are full keys
/// (`/registry/pods/ns/name`); values are stored exactly as given.
pub trait Writes: Send + Sync + 'static {
    /// The current value of `key`, if any, read linearizably.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Stored>, WriteError>>;

    /// Stores `value` at `key` if the key does not exist. Returns the write's revision.
    ///
    /// # Errors
    /// [`WriteError::AlreadyExists`], or the upstream's failure.
    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, Result<u64, WriteError>>;

    /// Replaces the value at `key` if its revision is still `expected`. Returns the write's revision.
    ///
    /// # Errors
    /// [`WriteError::NotFound`] or [`WriteError::Conflict`] when the key is gone or changed.
    fn replace<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64, WriteError>>;

    /// Deletes `key`, if its revision is `expected` when one is given. Returns the deletion's
    /// revision and the last value.
    ///
    /// # Errors
    /// [`WriteError::NotFound`] or [`WriteError::Conflict`].
    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<(u64, Bytes), WriteError>>;

    /// Whether the upstream applies kube-apiserver's deletion rules itself (an API server): a
    /// deletion with `DeleteOptions` (grace period, propagation) is then
    /// [`delete_with`](Writes::delete_with); other upstreams only delete keys.
    fn deletes_itself(&self) -> bool {
        false
    }

    /// Sends a DELETE of `key` with a `DeleteOptions` JSON body, for upstreams that
    /// [`deletes_itself`](Writes::deletes_itself). Returns the revision and the object the
    /// upstream answered (its current state when the deletion is pending), or its last state
    /// when the upstream answered a bare `Status`.
    ///
    /// # Errors
    /// [`WriteError::NotFound`], [`WriteError::Conflict`], or the upstream's failure; upstreams
    /// that do not delete by themselves refuse it.
    fn delete_with<'a>(
        &'a self,
        _key: &'a str,
        _options: Bytes,
    ) -> BoxFuture<'a, Result<(u64, Bytes), WriteError>> {
        Box::pin(async {
            Err(WriteError::upstream(
                "this upstream does not apply deletion rules itself",
            ))
        })
    }
}

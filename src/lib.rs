//! # watchcache
//!
//! An indexed watch cache with trigger-based routing: the Kubernetes kube-apiserver watch cache
//! ("cacher"), usable on its own. It keeps the current state of one resource with secondary indexes
//! (namespace, any declared field, labels), a rolling history window of recent events, and serves
//! LIST and WATCH to many clients. Each event goes only to the watchers whose trigger values match.
//!
//! ## The crates
//! This crate is the core: model, wire and cache, and the in-memory source. On it:
//! - `watchcache-follow` (`crates/follow`): one follower driver for any upstream, whose
//!   `Source` an embedder implements to follow an upstream kind of its own;
//! - `watchcache-etcd` (`crates/etcd`): caches that follow etcd;
//! - `watchcache-kube` (`crates/kube`): caches that follow a Kubernetes API server, and
//!   `KubeCache<K>`, the typed embedded cache for controllers;
//! - `watchcache-server` (`crates/server`): the Kubernetes HTTP API over any caches.
//!
//! ## The core: `Cache`
//! - [`Cache::new`] makes a resource's cache as two handles, as kube-rs's `reflector::store()`
//!   does: the [`Cache`] its readers clone and share, and its one [`CacheWriter`] (not `Clone`).
//! - Readers call [`Cache::list`], [`Cache::get`], [`Cache::lookup`] (by index) and
//!   [`Cache::watch`] (a [`futures_core::Stream`]), and await [`Cache::wait_ready`].
//! - The feeder (the etcd or API server follower, or [`MemorySource`] for tests and in-process
//!   data) holds the writer: [`CacheWriter::resync`], [`CacheWriter::apply`],
//!   [`CacheWriter::progress`] and readiness.
//! - Resources are described by [`ResourceDef`]s: the files in `indexers/`, compiled in, or your own.
//!
//! ## Layers
//! `model` (definitions, objects, selectors) ← [`wire`] (what goes out, in every format) ←
//! `cache` (store, history, routing, watch streams) ← `upstream` (sources and the [`Writes`]
//! contract) and the server crate ← the `watchcache` binary. Dependencies point one way; see
//! `design/architecture.md`.
//!
//! ## Guarantees
//! Every watcher sees each change exactly once, in resourceVersion order, with no gaps. A slow
//! watcher is never closed: it is parked and catches up from the history window, and gets
//! [`Error::Expired`] (410) only once its position has left the window. See `design/semantics.md`.
//!
//! # Examples
//! ```
//! use futures_util::StreamExt;
//! use watchcache::{Cache, CacheConfig, EventType, ListOptions, MemorySource, ResourceDef,
//!                  ResourceVersion, Selection, WatchOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (cache, writer) = Cache::new(ResourceDef::builtin("pods").unwrap(), CacheConfig::default());
//! let pod = |name: &str, node: &str| format!(
//!     r#"{{"metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"nodeName":"{node}"}}}}"#);
//! let source = MemorySource::new(writer, 1, []); // the source is the cache's one feeder
//! cache.wait_ready().await?;
//!
//! // A kubelet-style watcher: routed by the spec.nodeName trigger.
//! let node7 = Selection::all().with_fields("spec.nodeName=node-7")?;
//! let mut events = cache.watch(WatchOptions::new(node7.clone(), ResourceVersion::At(1))).await?;
//!
//! source.put("/registry/pods/default/a", pod("a", "node-7"))?;
//! source.put("/registry/pods/default/b", pod("b", "node-8"))?; // never offered to node-7's watcher
//!
//! let ev = events.next().await.unwrap()?;
//! assert_eq!((ev.kind(), ev.object().unwrap().name()), (EventType::Added, "a"));
//!
//! // LIST by index: only node-7's pods are touched.
//! let list = cache.list(&ListOptions::all().select(node7)).await?;
//! assert_eq!(list.items.len(), 1);
//! assert_eq!(cache.lookup("spec.nodeName", "node-8")?[0].name(), "b");
//! # Ok(())
//! # }
//! ```
// No unwrap or expect outside tests: errors are typed (design/reliability.md).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
// The workspace denies unsafe code; the library forbids it (the benches' counting allocators
// are the only unsafe code, each allowed where it is).
#![forbid(unsafe_code)]

mod cache;
mod error;
pub mod histogram;
mod model;
mod sync;
pub mod upstream;
pub mod wire;

#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use cache::Corruption;
pub use cache::ORIGIN_HEADER;
pub use cache::{
    BoxFuture, Cache, CacheConfig, CacheStats, CacheWriter, Change, CheckStatus, Compared,
    ConsistencyChecks, Difference, Evicted, KeyRange, ListOptions, OutOfOrder, RangeCursor,
    RangePage, RangeReader, RawKv, Resync, ResyncOutcome, Selected, Upstream, WatchEnd, WatchEvent,
    WatchOptions, WatchStream,
};
pub use error::{Cause, Error, Result};

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
pub use cache::consistency;
pub use cache::deadlines;
pub use model::protobuf;
pub use model::{
    Computed, CrdServing, DecodeError, Decoder, DefinitionError, EncodeCounts, EncodeError,
    EventType, FieldLabels, FieldPath, FieldSelector, HistoryConfig, INITIAL_EVENTS_END, IndexDef,
    IndexKey, LabelSelector, Object, PrinterColumn, Quantity, ResourceDef, ResourceVersion,
    RvMatch, Selection, SelectorError, ShardKey, ShardRange, ShardSelector, ShardSelectorError,
    columns, definition, encode_counts, names, selector,
};
pub use upstream::memory::MemorySource;
pub use upstream::{Stored, WriteError, Writes};
pub use wire::{
    Frame, ObjectList, list_parts, list_parts_protobuf, list_parts_protobuf_with, list_parts_with,
    managed_fields,
};

//! The cache layer: [`Cache`], one resource's watch cache, and what it is made of.
//!
//! | file | concept |
//! |---|---|
//! | `mod.rs` | the facade: the public API, carrying out the read plans |
//! | `state.rs` | the one lock; the commit shared by live apply and resync; [`CacheWriter`], the one handle that changes a cache, and its [`Resync`] (a relist, applied as a difference); metrics |
//! | `ready.rs` | readiness: a state the writer moves, waiters woken by a channel |
//! | `consistent.rs` | where each read is served from and what it waits for (pure) |
//! | `fresh.rs` | how a consistent read learns the cache is fresh, one upstream read shared by a burst |
//! | `store.rs`, `history.rs` | the current state with its indexes; the window of recent events |
//! | `registry.rs` | which watchers an event is offered to (its router), and the fan-out (cacher.go's `indexedWatchers` and dispatch) |
//! | `watcher.rs` | a watcher's queue and parking (cache_watcher.go) |
//! | `list.rs`, `continue_token.rs` | LIST pages over a consistent view; continue tokens |
//! | `stream.rs` | the watch stream a consumer reads |
//! | `upstream.rs` | the contract of the source a cache follows |
//!
//! ## Concurrency
//! One read-write lock per cache (in `state.rs`), held only for synchronous work: applying one
//! batch (store, indexes, history, fan-out to queues), reading one LIST page, one history catch-up
//! batch. It is never held across an `.await` or while a consumer is slow: consumers read their own
//! queue.

mod config;
// Used by the followers' check (etcd, apiserver); the core keeps it, tested, for them.
pub mod consistency;
mod consistent;
pub(crate) mod continue_token;
pub mod deadlines;
mod fresh;
mod history;
mod key_order;
mod list;
#[cfg(all(test, watchcache_loom))]
mod loom;
mod members;
mod ready;
mod registry;
mod shard_router;
mod state;
mod store;
mod stream;
#[cfg(test)]
mod testing;
mod upstream;
mod watcher;

use std::borrow::Cow;
use std::sync::Arc;

pub use config::CacheConfig;
#[cfg(all(test, not(feature = "test-hooks")))]
pub(crate) use consistency::Corruption;
#[cfg(feature = "test-hooks")]
pub use consistency::Corruption;
pub use consistency::{Compared, Difference};
pub use history::Evicted;
pub use list::ListOptions;
pub use state::{
    CacheStats, CacheWriter, Change, CheckStatus, ConsistencyChecks, OutOfOrder, Resync,
    ResyncOutcome,
};
pub use stream::WatchEnd;
pub use stream::{WatchEvent, WatchOptions, WatchStream};
pub use upstream::Selected;
pub use upstream::{BoxFuture, KeyRange, RangeCursor, RangePage, RangeReader, RawKv, Upstream};

use crate::error::{Error, Result};
use crate::model::selector::Predicate;
use crate::model::{DecodeError, Decoder, Object, ResourceDef, ResourceVersion, Schema, Selection};
use crate::wire::ObjectList;
use consistent::{ListPlan, Wait, WatchPlan};
use fresh::ReadKey;
use state::{From, Shared};
use stream::InitialEvents;

/// Keys per keys-only range request of a freshness proof (`fresh.rs`): about 100 bytes each.
const KEYS_PAGE: usize = 10_000;

/// The header a watchcache answers a resource's reads with: the [`Cache::origin`] of the
/// resourceVersions in the answer, as 16 hex digits.
pub const ORIGIN_HEADER: &str = "x-watchcache-origin";

/// One resource's watch cache, as its readers hold it. Cheap to clone; every clone is the same
/// cache. `Send + Sync`.
///
/// Readers call [`list`](Cache::list), [`get`](Cache::get), [`lookup`](Cache::lookup) and
/// [`watch`](Cache::watch). Only its one [`CacheWriter`], made with it by [`Cache::new`], changes
/// it (as kube-rs's `reflector::store()` returns a `Store` and its one `Writer`).
#[derive(Clone)]
pub struct Cache {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("resource", &self.shared.schema.def.plural)
            .finish()
    }
}

impl Cache {
    /// An empty cache for one resource, and its one writer. It is not ready until the writer's
    /// first [`resync`](CacheWriter::resync) finishes.
    pub fn new(def: ResourceDef, config: CacheConfig) -> (Cache, CacheWriter) {
        let cache = Cache {
            shared: Arc::new(Shared::new(Schema::new(def), config)),
        };
        let writer = CacheWriter::new(cache.clone());
        (cache, writer)
    }

    /// The resource definition.
    pub fn definition(&self) -> &ResourceDef {
        &self.shared.schema.def
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.shared.config
    }

    /// Sets the upstream consistent reads consult. Without one, the cache's own revision is taken as
    /// current (right for an in-process source that applies synchronously).
    pub fn set_upstream(&self, upstream: Arc<dyn Upstream>) {
        self.shared.set_upstream(upstream);
    }

    /// The upstream set with [`set_upstream`](Cache::set_upstream).
    pub fn upstream(&self) -> Option<Arc<dyn Upstream>> {
        self.shared.upstream()
    }

    /// The cache's revision: every change up to it has been applied.
    pub fn resource_version(&self) -> u64 {
        self.shared.resource_version()
    }

    // ---- decoding (pure: readers and the writer) ----

    /// Decodes a readable value (JSON, or kube-apiserver's protobuf) into an [`Object`] at
    /// revision `rv`. Pure: call it outside any lock, possibly on several threads. A value the
    /// upstream transforms at rest (etcd's encryption) is made readable by its source first: the
    /// cache never calls its source back to read a value.
    ///
    /// # Errors
    /// [`DecodeError`] when the value is not a JSON object or a protobuf built-in, or its
    /// `metadata.name` does not agree with the key.
    pub fn decode(&self, key: &str, value: &[u8], rv: u64) -> Result<Object, DecodeError> {
        self.shared.decode(key, value, rv)
    }

    /// Decodes a stored value, or counts and logs it as malformed and returns `None`: what a feeder
    /// does with each value it reads, so that one bad value never stops a stream. A skipped value
    /// is remembered, by key and revision, as unserved (for the consistency check), until the
    /// key decodes again or is deleted ([`change_for_delete`](Cache::change_for_delete)); so
    /// call it only for values of the upstream's current state, not of an older read.
    pub fn decode_or_skip(&self, key: &str, value: &[u8], rv: u64) -> Option<Object> {
        self.shared.decode_or_skip(key, value, rv)
    }

    /// The resource's decoder, for a source that decodes the values it reads itself (outside
    /// any lock) and hands the cache objects: a [`Change::Put`] applied serves its key again; a
    /// value that does not decode goes to [`skip_unreadable`](Cache::skip_unreadable).
    pub fn decoder(&self) -> Decoder {
        self.shared.decoder.clone()
    }

    /// What a feeder does with a value of the upstream's current state it could not read (no
    /// configured key decrypts it, say) or decode ([`Decoder::decode`]'s error): counted and
    /// logged, and remembered as unserved at `rv`, as [`decode_or_skip`](Cache::decode_or_skip)
    /// does.
    pub fn skip_unreadable(&self, err: &DecodeError, rv: u64) {
        self.shared.skip(err, rv);
    }

    /// The change a stored value makes at revision `rv`: a [`Change::Put`] of its object, or, when
    /// it cannot be decoded, a [`Change::Delete`] of its key (counted and logged). So the cache
    /// holds exactly the decodable objects of its upstream: a key overwritten with garbage leaves
    /// the cache and its watchers see DELETED, instead of keeping a stale state forever.
    pub fn change_for_put(&self, key: &str, value: &[u8], rv: u64) -> Change {
        match self.decode_or_skip(key, value, rv) {
            Some(o) => Change::Put(o),
            None => Change::Delete(key.to_owned()),
        }
    }

    /// The change a deletion of `key` makes: a [`Change::Delete`], and the key's value, if the
    /// follower left it unserved, is no longer the upstream's.
    pub fn change_for_delete(&self, key: &str) -> Change {
        self.shared.forget_unserved(key, u64::MAX);
        Change::Delete(key.to_owned())
    }

    /// The revision of the value at `key` that the follower left unserved (it did not decode),
    /// if it did: what the consistency check skips without reading the value again.
    pub fn unserved_at(&self, key: &str) -> Option<u64> {
        self.shared.unserved_at(key)
    }

    /// After a consistency check at revision `n`: the unserved records at or before `n` whose
    /// key is not in `seen` (the unserved keys the upstream held at `n`) are forgotten.
    pub fn retain_unserved(&self, n: u64, seen: &hashbrown::HashSet<String>) {
        self.shared.retain_unserved(n, seen);
    }

    /// Counts and logs a value that could not be decoded; the stream goes on without it.
    pub fn record_decode_error(&self, err: &DecodeError) {
        self.shared.record_decode_error(err);
    }

    /// Waits until the cache is ready: its initial sync finished, and it is not unavailable.
    /// Woken by the writer's change, never polled; no time limit of its own (wrap it in
    /// [`tokio::time::timeout`] for one).
    ///
    /// # Errors
    /// [`Error::NotReady`] when the cache's [`CacheWriter`] was dropped while it was not ready:
    /// it never will be.
    pub async fn wait_ready(&self) -> Result<()> {
        if self.shared.wait_ready().await {
            return Ok(());
        }
        match self.shared.check_ready() {
            Err(Error::NotReady {
                resource,
                why,
                retry_after,
            }) => Err(Error::NotReady {
                resource,
                why: format!("{why}, and its writer is gone"),
                retry_after,
            }),
            other => other,
        }
    }

    /// Whether the cache serves reads.
    pub fn is_ready(&self) -> bool {
        self.shared.is_ready()
    }

    /// The identity of the revision space this cache's resourceVersions belong to: the id of
    /// the etcd cluster they were read from, directly or through upstream caches that said so.
    /// Revisions of two origins cannot be compared: a server answers with it
    /// (`X-Watchcache-Origin`), and a cache following an upstream whose origin changes starts over
    /// (every watcher 410, a relist), as after etcd's history was replaced. `None` until learned.
    pub fn origin(&self) -> Option<u64> {
        self.shared.origin()
    }

    /// Records the origin an upstream showed (see [`Cache::origin`]); for sources.
    pub fn set_origin(&self, origin: u64) {
        self.shared.set_origin(origin);
    }

    /// Whether `other` is a handle on this same cache.
    pub fn same(&self, other: &Cache) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Ends every watch of this cache, now and from now on, without an error: each stream
    /// delivers what is queued for it and ends, as kube-apiserver ends the watches of a
    /// resource it stops serving (a CRD deleted or redefined). Its client resumes from the last
    /// event it saw, wherever the resource is served next. Reads are unaffected; the server
    /// stops routing requests here first.
    pub fn close(&self) {
        self.shared.close();
    }

    /// Whether the upstream said it does not serve this resource (see
    /// [`CacheWriter::set_absent`]).
    pub fn is_absent(&self) -> bool {
        self.shared.is_absent()
    }

    // ---- reader side ----

    /// Waits until the cache has reached `rv`, asking the upstream for progress meanwhile.
    ///
    /// # Errors
    /// [`Error::TooLargeResourceVersion`] after [`CacheConfig::too_large_wait`].
    pub async fn wait_for(&self, rv: u64) -> Result<u64> {
        let mut rx = self.shared.subscribe();
        let current = *rx.borrow();
        if current >= rv {
            return Ok(current);
        }
        let source = self.upstream();
        let mut tick = tokio::time::interval(self.shared.config.progress_interval);
        let wait = async {
            loop {
                tokio::select! {
                    r = rx.wait_for(|v| *v >= rv) => return r.map(|v| *v).ok(),
                    _ = tick.tick() => if let Some(s) = &source { s.request_progress() },
                }
            }
        };
        match tokio::time::timeout(self.shared.config.too_large_wait, wait).await {
            Ok(Some(v)) => Ok(v),
            _ => Err(Error::TooLargeResourceVersion {
                requested: rv,
                current: self.resource_version(),
            }),
        }
    }

    /// Waits until the cache is as fresh as its upstream is now (one upstream read, shared with
    /// the consistent reads waiting at once), and returns its revision. A server that drains
    /// calls it first, so that each watch's last bookmark is at or past the revision any other
    /// replica started from before the drain began: resumed there, it is never older than that
    /// replica's window (a quiet resource's revision otherwise moves only with the upstream's
    /// progress notifications, seconds behind).
    ///
    /// # Errors
    /// The upstream read's, and [`Error::TooLargeResourceVersion`] when the cache does not get
    /// there within [`CacheConfig::too_large_wait`].
    ///
    /// Only where the upstream's progress notifications prove a revision (etcd, fixed
    /// versions): elsewhere the proof would read every key of the resource, and the cache's own
    /// revision is returned as it is.
    pub async fn catch_up(&self) -> Result<u64> {
        match self.upstream() {
            Some(up) if up.progress_is_reliable() => self.fresh_by_revision(up).await,
            _ => Ok(self.resource_version()),
        }
    }

    /// Waits until the cache reaches the upstream's current revision, read once for every
    /// caller waiting at once (`fresh.rs`): freshness where progress notifications prove it.
    async fn fresh_by_revision(&self, up: Arc<dyn Upstream>) -> Result<u64> {
        let target = self
            .shared
            .fresh_reads
            .join(ReadKey::Revision, move || {
                let up = Arc::clone(&up);
                async move { up.current_revision().await }
            })
            .await?;
        self.wait_for(target).await
    }

    /// Waits until the cache is as fresh as the upstream is now for the keys in `keys` (and the
    /// objects `selection` selects, where the upstream proves freshness by selection): a
    /// consistent read's start. Returns the cache revision the read is served at. One upstream
    /// read, started after this call, is shared by every read waiting at once (`fresh.rs`).
    async fn fresh(&self, keys: &KeyRange, selection: Option<&Selection>) -> Result<u64> {
        let Some(up) = self.upstream() else {
            return Ok(self.resource_version());
        };
        let reads = &self.shared.fresh_reads;
        if let Some(selection) = selection {
            let proof = Selection {
                shard: None,
                ..selection.clone()
            };
            if up.selected(&proof).is_some() {
                let key = ReadKey::Selection(format!(
                    "{}\n{}\n{}",
                    proof.namespace.as_deref().unwrap_or_default(),
                    proof.fields,
                    proof.labels
                ));
                let cache = self.clone();
                let answer = reads
                    .join(key, move || {
                        let (cache, proof) = (cache.clone(), proof.clone());
                        async move { cache.prove_selected(&proof).await }
                    })
                    .await;
                // An upstream that cannot select so (a field label it does not know): the
                // revision decides, as for any other upstream.
                if !matches!(answer, Err(Error::Upstream { .. })) {
                    return answer;
                }
            }
        }
        if up.progress_is_reliable() {
            return self.fresh_by_revision(up).await;
        }
        let cache = self.clone();
        let range = keys.clone();
        reads
            .join(ReadKey::Keys(keys.clone()), move || {
                let (cache, range) = (cache.clone(), range.clone());
                async move { cache.prove_fresh(&range, None).await }
            })
            .await
    }

    /// The freshness proof by selection (see `fresh.rs`): the upstream's objects of `proof` at
    /// its current revision R, then the cache revision at which the cache selects exactly those
    /// objects at their revisions, or any revision from R on. Progress requests go on meanwhile,
    /// so a cache whose selection never matches (selectors read differently) still gets to R.
    async fn prove_selected(&self, proof: &Selection) -> Result<u64> {
        let up = self
            .upstream()
            .ok_or_else(|| Error::upstream("no upstream to prove freshness with"))?;
        let read = up
            .selected(proof)
            .ok_or_else(|| Error::upstream("the upstream reads no selection"))?;
        let Selected { revision, objects } = read.await?;
        let pred = Predicate::compile(&self.shared.schema, proof);
        let mut rx = self.shared.subscribe();
        let mut tick = tokio::time::interval(self.shared.config.progress_interval);
        let deadline = tokio::time::Instant::now() + self.shared.config.too_large_wait;
        loop {
            let c = *rx.borrow_and_update();
            if c >= revision {
                return Ok(c);
            }
            if let Some(c) = self.shared.holds_exactly(&pred, &objects) {
                state::Metrics::add(&self.shared.metrics().fresh_by_selection, 1);
                return Ok(c);
            }
            let moved = async {
                loop {
                    tokio::select! {
                        r = rx.changed() => return r.is_ok(),
                        _ = tick.tick() => up.request_progress(),
                    }
                }
            };
            if !matches!(tokio::time::timeout_at(deadline, moved).await, Ok(true)) {
                return Err(Error::TooLargeResourceVersion {
                    requested: revision,
                    current: self.resource_version(),
                });
            }
        }
    }

    /// Waits until the cache holds the state of `keys` at revision `n`: the cache reaching `n`,
    /// or, on an upstream whose progress notifications cannot be trusted (etcd 3.4.23, where a
    /// resource quiet since before `n` never reaches it), a keys-only read at `n` proving that the
    /// cache's state is the state at `n` for those keys (see [`prove_fresh`](Cache::prove_fresh)).
    async fn reach(&self, n: u64, keys: &KeyRange) -> Result<u64> {
        if self.resource_version() < n
            && let Some(up) = self.upstream()
            && !up.progress_is_reliable()
        {
            return match self.prove_fresh(keys, Some(n)).await {
                // A revision compacted away, or a failed read: the plain wait decides. So does
                // a revision etcd has not reached yet: a write may reach it within the wait.
                Err(Error::Upstream { .. } | Error::TooLargeResourceVersion { .. }) => {
                    self.wait_for(n).await
                }
                other => other,
            };
        }
        self.wait_for(n).await
    }

    /// The freshness proof for an upstream whose progress notifications cannot be trusted (see
    /// `fresh.rs`): a keys-only read of `keys` at the upstream's current revision R (or at `at`),
    /// then the cache revision at which the cache holds exactly those keys at their revisions, or
    /// any revision from R on. At a past revision `at` the proof is the same: every key etcd held
    /// there was written at or before the cache's revision C and the cache holds exactly them, so
    /// the state at `at` is the cache's at C (a key created and deleted in between was absent at
    /// both).
    async fn prove_fresh(&self, keys: &KeyRange, at: Option<u64>) -> Result<u64> {
        let up = self
            .upstream()
            .ok_or_else(|| Error::upstream("no upstream to prove freshness with"))?;
        let mut reader = RangeReader::within(&*up, at, keys.clone(), None, KEYS_PAGE).keys_only();
        let mut held = Vec::new();
        let mut newest = 0;
        while let Some(page) = reader.next_page().await {
            for kv in page?.kvs {
                newest = newest.max(kv.mod_revision);
                held.push(kv.key);
            }
        }
        let r = reader.revision().unwrap_or_default();
        let mut rx = self.shared.subscribe();
        let deadline = tokio::time::Instant::now() + self.shared.config.too_large_wait;
        loop {
            let c = *rx.borrow_and_update();
            if c >= r {
                return Ok(c);
            }
            if c >= newest
                && let Some(c) = self.shared.holds_only(keys, &held)
            {
                return Ok(c);
            }
            if !matches!(
                tokio::time::timeout_at(deadline, rx.changed()).await,
                Ok(Ok(()))
            ) {
                return Err(Error::TooLargeResourceVersion {
                    requested: r,
                    current: self.resource_version(),
                });
            }
        }
    }

    /// Carries out a [`Wait`] for a read of `keys`; returns the cache revision it reached (for
    /// `Nothing`, the current one).
    async fn meet(
        &self,
        wait: Wait,
        keys: &KeyRange,
        selection: Option<&Selection>,
    ) -> Result<u64> {
        let started = tokio::time::Instant::now();
        let r = match wait {
            Wait::Nothing => return Ok(self.resource_version()),
            Wait::Fresh => self.fresh(keys, selection).await,
            Wait::For(n) => self.reach(n, keys).await,
        };
        let m = self.shared.metrics();
        m.read_wait.observe_duration(started.elapsed());
        match &r {
            Err(Error::TooLargeResourceVersion { .. }) => {
                state::Metrics::add(&m.refused_timeout, 1);
            }
            Err(Error::Upstream { .. }) => state::Metrics::add(&m.refused_upstream, 1),
            _ => {}
        }
        r
    }

    /// LIST with the upstream semantics of `resourceVersion`, `resourceVersionMatch`, `limit` and
    /// `continue` (see `design/semantics.md`). Items are sorted by key.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for invalid combinations or tokens, [`Error::Expired`] /
    /// [`Error::ContinueExpired`] when the requested revision left the window,
    /// [`Error::TooLargeResourceVersion`], [`Error::NotReady`].
    pub async fn list(&self, opts: &ListOptions) -> Result<ObjectList> {
        let selection = self.field_labels(&opts.selection)?;
        self.shared.ready_for_read()?;
        let continuing = opts.continue_token.is_some();
        let ListPlan { wait, at, after } = consistent::plan_list(
            opts.resource_version,
            opts.rv_match,
            opts.continue_token.as_deref(),
            &self.shared.schema.def.prefix,
        )?;
        let limit = opts.limit.filter(|l| *l > 0);
        let pred = Predicate::compile(&self.shared.schema, &selection);
        let reached = self
            .meet(wait, &self.key_range(&pred), Some(&selection))
            .await?;
        // A read that waited is served at the revision its wait reached, not at a later one of
        // the cache's: a proof by selection covers that revision only (`fresh.rs`). Were that
        // revision's history gone (it was reached a moment ago), the current state serves.
        let pinned = at.is_none() && wait != Wait::Nothing && reached < self.resource_version();
        let page = match self.shared.page(
            at.or(pinned.then_some(reached)),
            &pred,
            after.as_deref(),
            limit,
        ) {
            Err(_) if pinned => self.shared.page(None, &pred, after.as_deref(), limit),
            page => page,
        };
        // A LIST at an exact revision (`resourceVersionMatch=Exact`, or a continued one) whose
        // revision the upstream compacted away expires with it, however long the window keeps
        // that revision: the upstream could not answer it either. A leaf asks its root, which
        // asks its own upstream, so the answer is the source's at every depth.
        let page = match (at, &page) {
            (Some(r), Ok(_)) if self.compacted_upstream(r).await => {
                Err(crate::cache::history::Evicted { oldest: r + 1 })
            }
            _ => page,
        };
        let (rv, page) = page.map_err(|e| {
            let requested = at.unwrap_or_default();
            let prefix = &self.shared.schema.def.prefix;
            if continuing {
                // The rest of the list after the same key, at the latest revision.
                let last = after
                    .as_deref()
                    .and_then(|a| a.strip_prefix(prefix.as_str()))
                    .unwrap_or_default();
                Error::ContinueExpired {
                    requested,
                    oldest: e.oldest,
                    continue_token: continue_token::encode_latest(last),
                }
            } else {
                Error::Expired {
                    requested,
                    oldest: e.oldest,
                }
            }
        })?;
        let mut list = self.object_list(rv, page.items, page.more, page.remaining);
        list.shard_info = opts
            .selection
            .shard
            .as_ref()
            .map(|s| s.canonical().to_owned());
        Ok(list)
    }

    /// Whether the upstream has compacted `revision` away; false when it cannot tell (the
    /// window decides) or compacts nothing the cache follows.
    async fn compacted_upstream(&self, revision: u64) -> bool {
        if revision >= self.resource_version() {
            return false;
        }
        let Some(up) = self.upstream() else {
            return false;
        };
        match up.compacted(revision) {
            Some(read) => matches!(read.await, Ok(true)),
            None => false,
        }
    }

    fn object_list(
        &self,
        rv: u64,
        items: Vec<Object>,
        more: bool,
        remaining_item_count: Option<u64>,
    ) -> ObjectList {
        let prefix_len = self.shared.schema.def.prefix.len();
        let continue_token = items
            .last()
            .filter(|_| more)
            .map(|o| continue_token::encode(rv, o.key().get(prefix_len..).unwrap_or_default()));
        ObjectList {
            resource_version: rv,
            items,
            continue_token,
            remaining_item_count,
            shard_info: None,
        }
    }

    /// GET one object. `resourceVersion` unset is a consistent read, `0` any, `N` not older than N.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::TooLargeResourceVersion`], [`Error::NotReady`].
    pub async fn get(
        &self,
        namespace: Option<&str>,
        name: &str,
        rv: ResourceVersion,
    ) -> Result<Object> {
        self.shared.ready_for_read()?;
        let def = &self.shared.schema.def;
        let key = def.key_for(namespace, name);
        let not_found = || Error::NotFound {
            kind: def.plural.clone(),
            name: name.to_owned(),
        };
        let wait = consistent::plan_get(rv);
        // A consistent GET's proof by selection: the object's name (a name no field selector
        // can carry is proven by revision instead).
        let one = (wait == Wait::Fresh)
            .then(|| {
                let by_name = format!("metadata.name={name}");
                Selection::parse(namespace, &by_name, "")
                    .ok()
                    .filter(|s| s.fields.to_string() == by_name)
            })
            .flatten();
        let reached = self.meet(wait, &KeyRange::one(&key), one.as_ref()).await?;
        // As a LIST: served at the revision the wait reached (`list`).
        match self.shared.get_at(&key, reached) {
            Ok(o) => o,
            Err(_) => self.shared.get(&key),
        }
        .ok_or_else(not_found)
    }

    /// The object's current state in the cache, without waiting and without reading the upstream:
    /// `None` when it is absent, or when the cache is not ready. For lookups on a path that cannot
    /// wait (authentication).
    pub fn peek(&self, namespace: Option<&str>, name: &str) -> Option<Object> {
        self.shared.check_ready().ok()?;
        self.shared
            .get(&self.shared.schema.def.key_for(namespace, name))
    }

    /// The narrowest range of keys that can hold a match of `pred`: one key when the selection
    /// pins a name (and, for a namespaced resource, a namespace), one namespace's keys when it pins
    /// a namespace, else the whole resource.
    fn key_range(&self, pred: &Predicate) -> KeyRange {
        let def = &self.shared.schema.def;
        match (def.namespaced, pred.pinned_namespace(), pred.pinned_name()) {
            (true, Some(ns), Some(name)) => KeyRange::one(&def.key_for(Some(ns), name)),
            (true, Some(ns), None) => KeyRange::prefixed(&format!("{}{ns}/", def.prefix)),
            (false, _, Some(name)) => KeyRange::one(&def.key_for(None, name)),
            _ => KeyRange::all(),
        }
    }

    /// The current objects whose index `index` has `value`, sorted by key. Index names are field
    /// paths (`spec.nodeName`, `metadata.namespace`) or `label:KEY`.
    ///
    /// # Errors
    /// [`Error::BadRequest`] naming the known indexes when `index` is not one.
    pub fn lookup(&self, index: &str, value: &str) -> Result<Vec<Object>> {
        self.shared.ready_for_read()?;
        let schema = &self.shared.schema;
        let Some((slot, _)) = schema.index_by_name(index) else {
            return Err(Error::bad_request(format!(
                "unknown index \"{index}\" for {}; indexes are: {}",
                schema.def.plural,
                schema.index_names().join(", ")
            )));
        };
        Ok(self.shared.lookup(slot, value))
    }

    /// WATCH: a stream of events, exactly once and in revision order. See [`WatchOptions`] for where
    /// it starts.
    ///
    /// # Errors
    /// [`Error::Expired`] when a start revision is older than the window,
    /// [`Error::TooLargeResourceVersion`], [`Error::NotReady`]. Errors after the start arrive as
    /// the stream's last item.
    pub async fn watch(&self, opts: WatchOptions) -> Result<WatchStream> {
        self.watch_inner(opts, None).await
    }

    /// WATCH for a server: as [`Cache::watch`], but the watch ends at `end` (its
    /// [`WatchStream::poll_end`] is then ready), and its bookmarks (the one 2 s before the end
    /// and the periodic ones) come from the same wheel as its end, in one entry
    /// (`deadlines.rs`).
    ///
    /// # Errors
    /// As [`Cache::watch`].
    pub async fn watch_until(&self, opts: WatchOptions, end: WatchEnd) -> Result<WatchStream> {
        self.watch_inner(opts, Some(end)).await
    }

    async fn watch_inner(&self, opts: WatchOptions, end: Option<WatchEnd>) -> Result<WatchStream> {
        let selection = self.field_labels(&opts.selection)?;
        self.shared.ready_for_read()?;
        let plan = consistent::plan_watch(opts.resource_version, opts.send_initial_events);
        // kube-apiserver 1.35 (its WatchList gate on by default) reads a watch from
        // resourceVersion unset or "0" that names no sendInitialEvents as sendInitialEvents=true
        // (`SetListOptionsDefaults`): with bookmarks allowed, its initial events end with the
        // annotated bookmark too, and a client may wait for it.
        let end_bookmark = match opts.send_initial_events {
            Some(send) => send,
            None => {
                opts.allow_bookmarks
                    && matches!(
                        opts.resource_version,
                        ResourceVersion::Unset | ResourceVersion::Any
                    )
            }
        };
        let pred = Predicate::compile(&self.shared.schema, &selection);
        let keys = self.key_range(&pred);
        let from = match plan {
            // Its initial state is the state its wait reached, as a LIST's (`list`).
            WatchPlan::Snapshot(wait) => {
                From::SnapshotAt(self.meet(wait, &keys, Some(&selection)).await?)
            }
            WatchPlan::AfterCache(wait) => {
                From::After(self.meet(wait, &keys, Some(&selection)).await?)
            }
            WatchPlan::After(n) => From::After(n),
        };
        let requested = match from {
            From::After(n) => n,
            From::SnapshotAt(_) => self.resource_version(),
        };
        let reg = self
            .shared
            .register(pred, from)
            .map_err(|e| Error::Expired {
                requested,
                oldest: e.oldest,
            })?;
        let initial = reg.snapshot_seq.map(|seq| InitialEvents {
            seq,
            rv: reg.start_rv,
            end_bookmark,
        });
        let bookmarks = opts
            .allow_bookmarks
            .then_some(self.shared.config.bookmark_interval);
        Ok(WatchStream::new(
            Arc::clone(&self.shared),
            reg,
            initial,
            bookmarks,
            end,
        ))
    }

    /// Watches waiting in the cache's own wheel of bookmarks: those made by [`Cache::watch`]
    /// with periodic bookmarks (a served watch's are in the server's wheel).
    pub fn waiting_bookmarks(&self) -> usize {
        self.shared.bookmarks.waiting()
    }

    /// A snapshot of sizes and counters.
    pub fn stats(&self) -> CacheStats {
        self.shared.stats()
    }

    /// The cache's objects at revision `at` as (key, revision) pairs in key order: the cache's
    /// side of a consistency check. Read in pages of `consistency::PAGE`, one lock hold each,
    /// yielding to other tasks between them.
    ///
    /// # Errors
    /// [`Evicted`] when `at` left the history window meanwhile.
    pub async fn entries_at(
        &self,
        at: u64,
    ) -> std::result::Result<Vec<consistency::Entry>, Evicted> {
        let all = Predicate::compile(&self.shared.schema, &Selection::all());
        let mut out = Vec::new();
        loop {
            let after = out.last().map(|(k, _): &consistency::Entry| Arc::clone(k));
            let (page, more) =
                self.shared
                    .entries_at(at, &all, after.as_deref(), consistency::PAGE)?;
            out.extend(page);
            if !more {
                return Ok(out);
            }
            tokio::task::yield_now().await;
        }
    }

    /// `Ok` when the cache serves reads, else why not ([`Error::NotReady`]).
    pub fn check_ready(&self) -> Result<()> {
        self.shared.check_ready()
    }

    /// Counts a finished consistency check (`apiserver_storage_consistency_checks_total`).
    pub fn record_check(&self, status: CheckStatus) {
        self.shared.record_check(status);
    }

    /// Test hook (feature `test-hooks`, never in a shipped binary): corrupts the cache as a bug
    /// or a lost event would, without history or fan-out, for tests of the consistency check.
    #[doc(hidden)]
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn corrupt(&self, c: Corruption) {
        self.shared.corrupt(c);
    }

    /// The selection as upstream's field label conversion leaves it: renamed labels (a pod's
    /// `spec.host`) read their field, and a label the resource does not support is refused with
    /// upstream's 400 message, before anything else is checked, as kube-apiserver does.
    fn field_labels<'a>(&self, selection: &'a Selection) -> Result<Cow<'a, Selection>> {
        let Some(labels) = &self.shared.schema.def.field_labels else {
            return Ok(Cow::Borrowed(selection));
        };
        let reqs = selection.fields.requirements();
        if reqs.iter().all(|r| labels.accepts(r.path().as_str())) {
            return Ok(Cow::Borrowed(selection));
        }
        let fields = labels
            .convert(&selection.fields)
            .map_err(Error::bad_request)?;
        Ok(Cow::Owned(Selection {
            fields,
            ..selection.clone()
        }))
    }

    /// Whether `obj` passes `selection`, compiled against this resource.
    pub fn matches(&self, selection: &Selection, obj: &Object) -> bool {
        Predicate::compile(&self.shared.schema, selection).matches(&self.shared.schema, obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::cache::testing::on_node;
    use crate::model::EventType;
    use futures_util::StreamExt;

    fn pod(name: &str, node: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"nodeName":"{node}"}}}}"#
        )
    }

    fn key(name: &str) -> String {
        format!("/registry/pods/ns/{name}")
    }

    fn ready() -> (Cache, crate::MemorySource) {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = crate::MemorySource::new(writer, 1, []);
        (cache, src)
    }

    /// An upstream that proves freshness by selection, with a set answer (`Err`: it refuses the
    /// selection) at revision `revision`.
    struct Selecting {
        revision: u64,
        answer: std::result::Result<Vec<(String, u64)>, String>,
    }

    impl Upstream for Selecting {
        fn current_revision(&self) -> BoxFuture<'_, Result<u64>> {
            Box::pin(async move { Ok(self.revision) })
        }

        fn selected(&self, _: &Selection) -> Option<BoxFuture<'_, Result<Selected>>> {
            Some(Box::pin(async move {
                match &self.answer {
                    Ok(objects) => Ok(Selected {
                        revision: self.revision,
                        objects: objects.clone(),
                    }),
                    Err(e) => Err(Error::upstream(e.clone())),
                }
            }))
        }
    }

    fn consistent(sel: Selection) -> ListOptions {
        ListOptions::all().select(sel)
    }

    /// A quiet resource far behind the upstream's revision is read at once when the cache
    /// selects exactly the upstream's objects; a cache that lacks one waits for it; a selection
    /// the upstream refuses is proven by revision.
    #[tokio::test]
    async fn consistent_reads_are_proven_by_the_upstreams_selected_objects() {
        let (cache, src) = ready();
        let a = src.put(&key("a"), pod("a", "n1")).unwrap();
        src.put(&key("b"), pod("b", "n2")).unwrap();
        cache.set_upstream(Arc::new(Selecting {
            revision: 100,
            answer: Ok(vec![(key("a"), a)]),
        }));
        let list = tokio::time::timeout(
            Duration::from_secs(1),
            cache.list(&consistent(on_node("n1"))),
        )
        .await
        .expect("no wait for revision 100")
        .unwrap();
        let names: Vec<_> = list.items.iter().map(|o| o.name().to_owned()).collect();
        assert_eq!((names, list.resource_version), (vec!["a".to_owned()], 3));
        assert_eq!(cache.stats().fresh_by_selection, 1);

        // The upstream holds c, which the cache's watch has not brought yet: the read waits.
        cache.set_upstream(Arc::new(Selecting {
            revision: 100,
            answer: Ok(vec![(key("a"), a), (key("c"), 4)]),
        }));
        let waiting = tokio::spawn({
            let cache = cache.clone();
            async move { cache.list(&consistent(on_node("n1"))).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        assert_eq!(src.put(&key("c"), pod("c", "n1")).unwrap(), 4);
        let list = waiting.await.unwrap().unwrap();
        assert_eq!(list.items.len(), 2);
        assert_eq!(cache.stats().fresh_by_selection, 2);

        // Refused: the revision decides (here one the cache reached).
        cache.set_upstream(Arc::new(Selecting {
            revision: 4,
            answer: Err("field label not supported".into()),
        }));
        let list = cache.list(&consistent(on_node("n1"))).await.unwrap();
        assert_eq!(list.items.len(), 2);
        assert_eq!(cache.stats().fresh_by_selection, 2);
    }

    /// A read proven at revision C is served at C: an object changed or created since reads as
    /// it was then.
    #[tokio::test]
    async fn an_object_reads_as_it_was_at_the_revision_a_read_was_proven_at() {
        let (cache, src) = ready();
        let first = src.put(&key("a"), pod("a", "n1")).unwrap();
        let second = src.put(&key("a"), pod("a", "n2")).unwrap();
        src.put(&key("b"), pod("b", "n1")).unwrap();
        let at = |key: &str, rv| {
            cache
                .shared
                .get_at(key, rv)
                .unwrap()
                .map(|o| o.resource_version())
        };
        assert_eq!(at(&key("a"), first), Some(first));
        assert_eq!(at(&key("a"), second), Some(second));
        assert_eq!(at(&key("b"), second), None);
        assert_eq!(at(&key("b"), second + 1), Some(second + 1));
    }

    /// A consistent watch proven at revision C starts from the state at C, even when the cache
    /// moved on meanwhile: its initial events are that state, its end bookmark C, and every
    /// change since follows from history.
    #[tokio::test]
    async fn a_watch_proven_at_a_past_revision_starts_from_the_state_then() {
        let (cache, src) = ready();
        let proven = src.put(&key("a"), pod("a", "n1")).unwrap();
        let later = src.put(&key("b"), pod("b", "n1")).unwrap();
        let pred = Predicate::compile(&cache.shared.schema, &Selection::all());
        let reg = cache
            .shared
            .register(pred, From::SnapshotAt(proven))
            .unwrap();
        assert_eq!(reg.start_rv, proven);
        let initial = reg.snapshot_seq.map(|seq| InitialEvents {
            seq,
            rv: reg.start_rv,
            end_bookmark: true,
        });
        let mut w = WatchStream::new(Arc::clone(&cache.shared), reg, initial, None, None);
        let mut seen = Vec::new();
        for _ in 0..3 {
            let ev = w.next().await.unwrap().unwrap();
            seen.push((ev.kind(), ev.resource_version()));
        }
        assert_eq!(
            seen,
            [
                (EventType::Added, proven),
                (EventType::Bookmark, proven),
                (EventType::Added, later)
            ]
        );
    }

    #[tokio::test]
    async fn a_closed_cache_ends_its_watches_after_what_they_were_sent() {
        let (cache, src) = ready();
        let opts = || WatchOptions::new(Selection::all(), ResourceVersion::At(src.revision()));
        let mut w = cache.watch(opts()).await.unwrap();
        src.put(&key("a"), pod("a", "n1")).unwrap();
        cache.close();
        // Queued before the close: delivered; then the end, with no error.
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!(ev.object().unwrap().name(), "a");
        assert!(w.next().await.is_none());
        // Changes after it reach no watch; a watch opened after it ends at once.
        src.put(&key("b"), pod("b", "n1")).unwrap();
        let mut late = cache.watch(opts()).await.unwrap();
        assert!(late.next().await.is_none());
        assert_eq!(
            cache.list(&ListOptions::all()).await.unwrap().items.len(),
            2
        );
    }

    #[tokio::test]
    async fn readiness_moves_through_its_states() {
        let (cache, mut writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let err = cache.list(&ListOptions::all()).await.unwrap_err();
        assert_eq!(err.code(), 429);
        assert!(err.to_string().contains("initial sync"), "{err}");
        assert!(!writer.set_not_ready("ignored before the first sync"));
        assert!(!writer.set_ready());
        assert!(
            !cache.is_ready(),
            "only a finished resync ends the initial sync"
        );
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_ready().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "waits, with no time limit");
        writer.resync(5).finish();
        assert!(cache.is_ready());
        waiter.await.unwrap().expect("woken by the resync");
        assert!(writer.set_not_ready("etcd is gone"));
        let err = cache
            .get(Some("ns"), "a", ResourceVersion::Any)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("etcd is gone"), "{err}");
        assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(1)));
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_ready().await }
        });
        assert!(writer.set_ready());
        waiter.await.unwrap().expect("woken by set_ready");
        assert!(cache.is_ready());
        // A writer dropped while its cache is not ready: waiters are told, not left waiting.
        writer.set_not_ready("etcd is gone again");
        drop(writer);
        let err = cache.wait_ready().await.unwrap_err();
        assert!(
            err.to_string()
                .contains("etcd is gone again, and its writer is gone"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn out_of_order_batches_and_malformed_values_change_nothing() {
        let (cache, mut writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        writer.resync(1).finish();
        let a = cache
            .decode(&key("a"), pod("a", "n1").as_bytes(), 2)
            .unwrap();
        writer.apply(2, [Change::Put(a)]).unwrap();
        assert_eq!(
            writer.apply(2, []).unwrap_err(),
            OutOfOrder { rv: 2, current: 2 }
        );
        assert!(cache.decode_or_skip(&key("b"), b"{", 3).is_none());
        assert_eq!(cache.stats().decode_errors, 1);
        assert_eq!(cache.stats().objects, 1);
        let err = cache.lookup("spec.bogus", "x").unwrap_err();
        assert!(err.to_string().contains("spec.nodeName"), "{err}");
        assert_eq!(cache.lookup("spec.nodeName", "n1").unwrap()[0].name(), "a");
    }

    #[tokio::test]
    async fn a_source_decoding_ahead_keeps_a_later_unserved_value_unserved() {
        let (cache, mut writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        writer.resync(1).finish();
        let decoder = cache.decoder();
        // A source decodes a response's events before applying their batches: b at 2 decodes,
        // b at 3 does not.
        let good = decoder
            .decode(&key("b"), pod("b", "n1").as_bytes(), 2)
            .unwrap();
        let bad = decoder.decode(&key("b"), b"{", 3).unwrap_err();
        cache.skip_unreadable(&bad, 3);
        assert_eq!(cache.unserved_at(&key("b")), Some(3));
        // Applying the earlier put leaves the later value unserved...
        writer.apply(2, [Change::Put(good)]).unwrap();
        assert_eq!(cache.unserved_at(&key("b")), Some(3));
        writer.apply(3, [Change::Delete(key("b"))]).unwrap();
        assert_eq!(cache.unserved_at(&key("b")), Some(3));
        // ... and a later put, applied, serves the key again.
        let again = decoder
            .decode(&key("b"), pod("b", "n2").as_bytes(), 4)
            .unwrap();
        writer.apply(4, [Change::Put(again)]).unwrap();
        assert_eq!(cache.unserved_at(&key("b")), None);
        assert_eq!(cache.stats().decode_errors, 1);
        assert_eq!(cache.lookup("spec.nodeName", "n2").unwrap()[0].name(), "b");
    }

    #[tokio::test]
    async fn exact_lists_and_continuations_read_the_past() {
        let (cache, src) = ready();
        for name in ["a", "b", "c"] {
            src.put(&key(name), pod(name, "n1")).unwrap();
        }
        let at = src.revision();
        src.delete(&key("b"));
        src.put(&key("d"), pod("d", "n1")).unwrap();
        let names = |l: &ObjectList| {
            l.items
                .iter()
                .map(|o| o.name().to_owned())
                .collect::<Vec<_>>()
        };
        let exact = cache
            .list(&ListOptions::all().at(ResourceVersion::At(at), Some(crate::RvMatch::Exact)))
            .await
            .unwrap();
        assert_eq!(
            (exact.resource_version, names(&exact)),
            (at, vec!["a".into(), "b".into(), "c".into()])
        );
        let first = cache
            .list(
                &ListOptions::all()
                    .at(ResourceVersion::At(at), Some(crate::RvMatch::Exact))
                    .limit(2),
            )
            .await
            .unwrap();
        let rest = cache
            .list(&ListOptions::all().continue_from(first.continue_token.unwrap()))
            .await
            .unwrap();
        assert_eq!(
            names(&rest),
            ["c"],
            "continued at the first page's revision"
        );
        let now = cache
            .list(&ListOptions::all().select(on_node("n1")))
            .await
            .unwrap();
        assert_eq!(names(&now), ["a", "c", "d"]);
    }

    #[tokio::test]
    async fn watches_start_where_their_plan_says() {
        let (cache, src) = ready();
        src.put(&key("a"), pod("a", "n1")).unwrap();
        let from_zero = cache.watch(WatchOptions::new(Selection::all(), ResourceVersion::Any));
        let mut from_zero = from_zero.await.unwrap();
        let ev = from_zero.next().await.unwrap().unwrap();
        assert_eq!((ev.kind(), ev.resource_version()), (EventType::Added, 2));
        let mut from_now = cache
            .watch(
                WatchOptions::new(Selection::all(), ResourceVersion::Unset)
                    .send_initial_events(false),
            )
            .await
            .unwrap();
        src.put(&key("a"), pod("a", "n2")).unwrap();
        let ev = from_now.next().await.unwrap().unwrap();
        assert_eq!((ev.kind(), ev.resource_version()), (EventType::Modified, 3));
    }

    #[tokio::test]
    async fn undeclared_field_paths_are_read_once_per_object_outside_the_lock() {
        use crate::model::field_memo::READS;
        let reads = || READS.with(std::cell::Cell::get);
        let (cache, src) = ready();
        let with = |name: &str, node: &str, scheduler: &str| {
            format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"nodeName":"{node}","schedulerName":"{scheduler}"}}}}"#
            )
        };
        src.put(&key("a"), with("a", "n1", "x")).unwrap();
        let sel = Selection::all()
            .with_fields("spec.schedulerName=y")
            .unwrap();
        let mut watchers = Vec::new();
        for _ in 0..100 {
            let opts = WatchOptions::new(sel.clone(), ResourceVersion::At(src.revision()));
            watchers.push(cache.watch(opts).await.unwrap());
        }
        let before = reads();
        src.put(&key("a"), with("a", "n1", "y")).unwrap();
        assert_eq!(
            reads() - before,
            2,
            "the new state at decode, the old one (decoded before the path was used) once"
        );
        let before = reads();
        src.put(&key("a"), with("a", "n2", "y")).unwrap();
        assert_eq!(reads() - before, 1, "only the decode, for 100 watchers");
        for w in &mut watchers {
            let kinds: Vec<EventType> = crate::cache::testing::drain(w);
            assert_eq!(kinds, [EventType::Added, EventType::Modified]);
        }
        drop(watchers);
        let before = reads();
        src.put(&key("a"), with("a", "n3", "y")).unwrap();
        assert_eq!(
            reads() - before,
            0,
            "no path is read once no selector uses it"
        );
    }
}

//! [`Cache`]: one resource's watch cache. It owns the store, the history window and the watcher
//! registry behind one lock, and is fed by a single writer (an etcd upstream, or
//! [`MemorySource`](crate::MemorySource) in tests).
//!
//! ## Concurrency
//! `state` is a read-write lock held only for synchronous work: applying one batch (store, indexes,
//! history, fan-out to queues), reading one LIST page, one history catch-up batch. It is never held
//! across an `.await` or while a consumer is slow: consumers read their own queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hashbrown::HashSet;
use parking_lot::RwLock;
use tracing::{debug, info, warn};

use crate::config::CacheConfig;
use crate::continue_token;
use crate::definition::ResourceDef;
use crate::dispatcher::{Fanout, Registry};
use crate::error::{Error, Result};
use crate::history::{Event, History};
use crate::list::{self, ListOptions, ObjectList, Rollback};
use crate::object::{DecodeError, Object};
use crate::resource_version::{ResourceVersion, RvMatch};
use crate::schema::Schema;
use crate::selector::{Predicate, Selection};
use crate::store::Store;
use crate::upstream::{RawKv, Upstream};
use crate::watch_stream::{InitialEvents, WatchOptions, WatchStream};
use crate::watcher::WatcherShared;

/// One change of an applied batch.
#[derive(Debug, Clone)]
pub enum Change {
    /// The object was created or updated.
    Put(Object),
    /// The object with this key was deleted.
    Delete(String),
}

/// An out-of-order batch: revisions must increase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("revision {rv} is not after the cache's revision {current}")]
pub struct OutOfOrder {
    /// The batch's revision.
    pub rv: u64,
    /// The cache's revision.
    pub current: u64,
}

/// Counters of one cache, for metrics.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub events: AtomicU64,
    pub delivered: AtomicU64,
    pub parked: AtomicU64,
    pub expired: AtomicU64,
    pub decode_errors: AtomicU64,
    pub resyncs: AtomicU64,
}

/// Keys per range request when reading from the upstream (upstream's reflector uses 10 000).
const UPSTREAM_PAGE: usize = 10_000;

/// A point-in-time view of a cache's size and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    /// The cache's revision.
    pub resource_version: u64,
    /// Objects in the store.
    pub objects: usize,
    /// Events in the history window, and its current capacity.
    pub history_len: usize,
    /// The history window's current capacity.
    pub history_capacity: usize,
    /// Watchers routed by a trigger.
    pub routed_watchers: u64,
    /// Watchers offered every event.
    pub unrouted_watchers: u64,
    /// Events applied since start.
    pub events: u64,
    /// Event deliveries queued to watchers since start (live dispatch only).
    pub delivered: u64,
    /// Times a watcher was parked because its queue was full.
    pub parked: u64,
    /// Watchers ended with 410 Expired.
    pub expired: u64,
    /// Stored values skipped because they could not be decoded.
    pub decode_errors: u64,
    /// Resyncs after the initial sync.
    pub resyncs: u64,
    /// Whether the cache serves requests.
    pub ready: bool,
}

pub(crate) struct Readiness {
    ready: bool,
    since: Instant,
    why: String,
}

pub(crate) struct State {
    pub store: Store,
    pub history: History,
    pub registry: Registry,
    /// Every change up to this revision has been applied and dispatched.
    pub rv: u64,
    pub readiness: Readiness,
}

pub(crate) struct Shared {
    pub schema: Schema,
    pub config: CacheConfig,
    pub state: RwLock<State>,
    /// Mirrors `State::rv`, published after a batch's fan-out (see `WatchStream::poll_live`).
    pub dispatched_rv: AtomicU64,
    rv_tx: tokio::sync::watch::Sender<u64>,
    pub metrics: Metrics,
    upstream: RwLock<Option<Arc<dyn Upstream>>>,
}

/// One resource's watch cache. Cheap to clone; every clone is the same cache. `Send + Sync`.
///
/// Readers call [`list`](Cache::list), [`get`](Cache::get), [`lookup`](Cache::lookup) and
/// [`watch`](Cache::watch). One writer feeds it with [`resync`](Cache::resync) (initial list and
/// relists), [`apply`](Cache::apply) (watch events) and [`progress`](Cache::progress).
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
    /// An empty cache for one resource. It is not ready until its first [`resync`](Cache::resync)
    /// finishes.
    pub fn new(def: ResourceDef, config: CacheConfig) -> Cache {
        let schema = Schema::new(def);
        let state = State {
            store: Store::new(&schema),
            history: History::new(schema.def.history),
            registry: Registry::new(&schema),
            rv: 0,
            readiness: Readiness {
                ready: false,
                since: Instant::now(),
                why: "initial sync has not finished".into(),
            },
        };
        Cache {
            shared: Arc::new(Shared {
                schema,
                config,
                state: RwLock::new(state),
                dispatched_rv: AtomicU64::new(0),
                rv_tx: tokio::sync::watch::Sender::new(0),
                metrics: Metrics::default(),
                upstream: RwLock::new(None),
            }),
        }
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
        *self.shared.upstream.write() = Some(upstream);
    }

    fn upstream(&self) -> Option<Arc<dyn Upstream>> {
        self.shared.upstream.read().clone()
    }

    /// The upstream that must serve consistent reads itself because its progress notifications
    /// cannot be trusted, if that is the case.
    fn range_fallback(&self) -> Option<Arc<dyn Upstream>> {
        self.upstream().filter(|u| !u.progress_is_reliable())
    }

    /// The cache's revision: every change up to it has been applied.
    pub fn resource_version(&self) -> u64 {
        self.shared.dispatched_rv.load(Ordering::Acquire)
    }

    // ---- writer side ----

    /// Decodes a stored value into an [`Object`] at revision `rv`. Pure: call it outside any lock,
    /// possibly on several threads.
    ///
    /// # Errors
    /// [`DecodeError`] when the value is not a JSON object with `metadata.name` agreeing with the key.
    pub fn decode(&self, key: &str, value: &[u8], rv: u64) -> Result<Object, DecodeError> {
        Object::decode(&self.shared.schema, key, value, rv)
    }

    /// Counts and logs a value that could not be decoded; the stream goes on without it.
    pub fn record_decode_error(&self, err: &DecodeError) {
        self.shared
            .metrics
            .decode_errors
            .fetch_add(1, Ordering::Relaxed);
        warn!(resource = %self.shared.schema.def.plural, key = %err.key, reason = %err.reason, "skipping malformed object");
    }

    /// Applies the changes of one revision: store, indexes, history, and fan-out to watchers.
    /// A deletion of an unknown key is ignored.
    ///
    /// # Errors
    /// [`OutOfOrder`] when `rv` is not above the cache's revision; nothing is applied.
    pub fn apply(
        &self,
        rv: u64,
        changes: impl IntoIterator<Item = Change>,
    ) -> Result<(), OutOfOrder> {
        let shared = &*self.shared;
        let schema = &shared.schema;
        let now = Instant::now();
        let mut st = shared.state.write();
        if rv <= st.rv {
            return Err(OutOfOrder { rv, current: st.rv });
        }
        let st = &mut *st;
        let mut total = Fanout::default();
        let mut events = 0;
        for change in changes {
            let (object, prev) = match change {
                Change::Put(o) => {
                    let prev = st.store.upsert(schema, o.clone());
                    (Some(o), prev)
                }
                Change::Delete(key) => match st.store.remove(schema, &key) {
                    Some(prev) => (None, Some(prev)),
                    None => {
                        debug!(%key, rv, "delete of an object the cache does not hold");
                        continue;
                    }
                },
            };
            let ev = st
                .history
                .push(|seq| Event::new(seq, rv, object, prev, now));
            let f = st.registry.dispatch(schema, ev);
            total.queued += f.queued;
            total.parked += f.parked;
            events += 1;
        }
        self.publish(st, rv);
        let m = &shared.metrics;
        m.events.fetch_add(events, Ordering::Relaxed);
        m.delivered.fetch_add(total.queued, Ordering::Relaxed);
        m.parked.fetch_add(total.parked, Ordering::Relaxed);
        Ok(())
    }

    /// Records that the upstream has no changes up to `rv` (etcd progress notification): readers
    /// waiting for `rv` proceed and bookmarks may carry it.
    pub fn progress(&self, rv: u64) {
        let mut st = self.shared.state.write();
        if rv > st.rv {
            self.publish(&mut st, rv);
        }
    }

    fn publish(&self, st: &mut State, rv: u64) {
        st.rv = rv;
        self.shared.dispatched_rv.store(rv, Ordering::Release);
        self.shared.rv_tx.send_replace(rv);
    }

    /// Starts a resync to the upstream's full state at revision `rv`: the initial sync, or a relist
    /// after a compaction or an unrecoverable watch break. Feed it page by page, then
    /// [`finish`](Resync::finish) it.
    pub fn resync(&self, rv: u64) -> Resync {
        Resync {
            cache: self.clone(),
            rv,
            seen: HashSet::new(),
            changed: Vec::new(),
            listed: 0,
        }
    }

    /// Marks the cache not ready (reads answer 429 with a Retry-After that grows with the downtime),
    /// e.g. while its upstream is unavailable. A finished [`Resync`] or [`set_ready`](Cache::set_ready)
    /// makes it ready again.
    pub fn set_not_ready(&self, why: impl Into<String>) {
        let mut st = self.shared.state.write();
        if st.readiness.ready {
            st.readiness = Readiness {
                ready: false,
                since: Instant::now(),
                why: why.into(),
            };
        }
    }

    /// Marks the cache ready again, after [`set_not_ready`](Cache::set_not_ready), when the upstream
    /// recovered without a relist.
    pub fn set_ready(&self) {
        self.shared.state.write().readiness.ready = true;
    }

    /// Waits until the cache is ready (its initial sync finished).
    ///
    /// # Errors
    /// The [`Error::NotReady`] still in force after `limit`.
    pub async fn wait_ready(&self, limit: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match self.check_ready() {
                Ok(()) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Whether the cache serves reads.
    pub fn is_ready(&self) -> bool {
        self.shared.state.read().readiness.ready
    }

    // ---- reader side ----

    fn check_ready(&self) -> Result<()> {
        let st = self.shared.state.read();
        let r = &st.readiness;
        if r.ready {
            return Ok(());
        }
        // Upstream's Retry-After for an unready cache: clamp(e^(0.06 * downtime in s), 1, 30).
        let down = r.since.elapsed().as_secs_f64();
        let secs = (0.06 * down).exp().clamp(1.0, 30.0);
        Err(Error::NotReady {
            resource: self.shared.schema.def.plural.clone(),
            why: r.why.clone(),
            retry_after: Duration::from_secs(secs.round() as u64),
        })
    }

    /// Waits until the cache has reached `rv`, asking the upstream for progress meanwhile.
    ///
    /// # Errors
    /// [`Error::TooLargeResourceVersion`] after [`CacheConfig::too_large_wait`].
    pub async fn wait_for(&self, rv: u64) -> Result<u64> {
        let mut rx = self.shared.rv_tx.subscribe();
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

    /// Waits until the cache is as fresh as the upstream is now: a consistent read's start.
    async fn fresh(&self) -> Result<u64> {
        let source = self.upstream();
        let target = match source {
            Some(s) => s.current_revision().await?,
            None => self.resource_version(),
        };
        self.wait_for(target).await
    }

    /// LIST with the upstream semantics of `resourceVersion`, `resourceVersionMatch`, `limit` and
    /// `continue` (see `design/semantics.md`). Items are sorted by key.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for invalid combinations or tokens, [`Error::Expired`] /
    /// [`Error::ContinueExpired`] when the requested revision left the window,
    /// [`Error::TooLargeResourceVersion`], [`Error::NotReady`].
    pub async fn list(&self, opts: &ListOptions) -> Result<ObjectList> {
        self.check_ready()?;
        let def = &self.shared.schema.def;
        let limit = opts.limit.filter(|l| *l > 0);
        // `at`: an exact revision to read at, or `None` for the current state.
        let (at, after, from_token) = match &opts.continue_token {
            Some(token) => {
                if opts.resource_version != ResourceVersion::Unset {
                    return Err(Error::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let (rv, last) = continue_token::decode(token)?;
                let after = format!("{}{last}", def.prefix);
                if let Some(up) = self.range_fallback()
                    && self.resource_version() < rv
                {
                    // The first page came from the upstream at a revision the cache may never
                    // reach through events alone: continue there.
                    let pred = Predicate::compile(&self.shared.schema, &opts.selection);
                    return self
                        .list_from_upstream(&*up, &pred, Some(rv), Some(after), limit)
                        .await
                        .map_err(|e| match e {
                            Error::Expired { requested, oldest } => {
                                Error::ContinueExpired { requested, oldest }
                            }
                            e => e,
                        });
                }
                self.wait_for(rv).await?;
                (Some(rv), Some(after), true)
            }
            None => {
                let at = match (opts.resource_version, opts.rv_match) {
                    (ResourceVersion::Unset, None) => {
                        if let Some(up) = self.range_fallback() {
                            let pred = Predicate::compile(&self.shared.schema, &opts.selection);
                            return self
                                .list_from_upstream(&*up, &pred, None, None, limit)
                                .await;
                        }
                        self.fresh().await?;
                        None
                    }
                    (ResourceVersion::Unset, Some(_)) => {
                        return Err(Error::bad_request(
                            "resourceVersionMatch is forbidden unless resourceVersion is provided",
                        ));
                    }
                    (ResourceVersion::Any, Some(RvMatch::Exact)) => {
                        return Err(Error::bad_request(
                            "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                        ));
                    }
                    (ResourceVersion::Any, _) => None,
                    (ResourceVersion::At(n), Some(RvMatch::Exact)) => {
                        self.wait_for(n).await?;
                        Some(n)
                    }
                    (ResourceVersion::At(n), _) => {
                        self.wait_for(n).await?;
                        None
                    }
                };
                (at, None, false)
            }
        };
        let pred = Predicate::compile(&self.shared.schema, &opts.selection);
        let st = self.shared.state.read();
        let (rv, rollback) = match at {
            None => (st.rv, Rollback::default()),
            Some(n) => {
                let expired = |oldest| {
                    if from_token {
                        Error::ContinueExpired {
                            requested: n,
                            oldest,
                        }
                    } else {
                        Error::Expired {
                            requested: n,
                            oldest,
                        }
                    }
                };
                let seq = st.history.seq_after_rv(n).map_err(expired)?;
                (n, Rollback::since(&st.history, seq).map_err(expired)?)
            }
        };
        let page = list::page(
            &self.shared.schema,
            &st.store,
            &rollback,
            &pred,
            after.as_deref(),
            limit,
        );
        drop(st);
        let continue_token = page
            .more
            .then(|| {
                page.items
                    .last()
                    .map(|o| continue_token::encode(rv, &o.key()[def.prefix.len()..]))
            })
            .flatten();
        Ok(ObjectList {
            resource_version: rv,
            items: page.items,
            continue_token,
            remaining_item_count: page.remaining,
        })
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
        self.check_ready()?;
        let def = &self.shared.schema.def;
        let key = def.key_for(namespace, name);
        let not_found = || Error::NotFound {
            kind: def.plural.clone(),
            name: name.to_owned(),
        };
        match rv {
            ResourceVersion::Unset => {
                if let Some(up) = self.range_fallback() {
                    let page = up.range(None, Some(key.clone()), 1).await?;
                    let kv = page
                        .kvs
                        .into_iter()
                        .find(|kv| kv.key == key)
                        .ok_or_else(not_found)?;
                    return self
                        .decode(&kv.key, &kv.value, kv.mod_revision)
                        .map_err(|e| {
                            self.record_decode_error(&e);
                            Error::Upstream(e.to_string())
                        });
                }
                self.fresh().await?;
            }
            ResourceVersion::Any => {}
            ResourceVersion::At(n) => {
                self.wait_for(n).await?;
            }
        }
        self.shared
            .state
            .read()
            .store
            .get(&key)
            .cloned()
            .ok_or_else(not_found)
    }

    /// Reads a LIST page from the upstream instead of the cache: the consistent read on an upstream
    /// whose progress notifications cannot be trusted, and its continuations. Decodes, filters and
    /// pages exactly as the cache would.
    async fn list_from_upstream(
        &self,
        up: &dyn Upstream,
        pred: &Predicate,
        revision: Option<u64>,
        after: Option<String>,
        limit: Option<usize>,
    ) -> Result<ObjectList> {
        let prefix_len = self.shared.schema.def.prefix.len();
        let mut rev = revision;
        let mut from = after.map(|k| format!("{k}\u{0}"));
        let mut items: Vec<Object> = Vec::new();
        let mut more = false;
        'pages: loop {
            let page = up.range(rev, from.take(), UPSTREAM_PAGE).await?;
            rev = Some(page.revision);
            let last = page.kvs.last().map(|kv| kv.key.clone());
            for RawKv {
                key,
                value,
                mod_revision,
            } in page.kvs
            {
                let obj = match self.decode(&key, &value, mod_revision) {
                    Ok(o) => o,
                    Err(e) => {
                        self.record_decode_error(&e);
                        continue;
                    }
                };
                if !pred.matches(&self.shared.schema, &obj) {
                    continue;
                }
                if limit.is_some_and(|l| items.len() >= l) {
                    more = true;
                    break 'pages;
                }
                items.push(obj);
            }
            match (page.more, last) {
                (true, Some(k)) => from = Some(format!("{k}\u{0}")),
                _ => break,
            }
        }
        let rv = rev.unwrap_or_default();
        let continue_token = if more {
            items
                .last()
                .map(|o| continue_token::encode(rv, &o.key()[prefix_len..]))
        } else {
            None
        };
        Ok(ObjectList {
            resource_version: rv,
            items,
            continue_token,
            remaining_item_count: None,
        })
    }

    /// The current objects whose index `index` has `value`, sorted by key. Index names are field
    /// paths (`spec.nodeName`, `metadata.namespace`) or `label:KEY`.
    ///
    /// # Errors
    /// [`Error::BadRequest`] naming the known indexes when `index` is not one.
    pub fn lookup(&self, index: &str, value: &str) -> Result<Vec<Object>> {
        self.check_ready()?;
        let schema = &self.shared.schema;
        let Some((slot, _)) = schema.index_by_name(index) else {
            return Err(Error::bad_request(format!(
                "unknown index \"{index}\" for {}; indexes are: {}",
                schema.def.plural,
                schema.index_names().join(", ")
            )));
        };
        Ok(self.shared.state.read().store.lookup(slot, value))
    }

    /// WATCH: a stream of events, exactly once and in revision order. See [`WatchOptions`] for where
    /// it starts.
    ///
    /// # Errors
    /// [`Error::Expired`] when a start revision is older than the window,
    /// [`Error::TooLargeResourceVersion`], [`Error::NotReady`]. Errors after the start arrive as
    /// the stream's last item.
    pub async fn watch(&self, opts: WatchOptions) -> Result<WatchStream> {
        self.check_ready()?;
        enum Start {
            Initial,
            After(u64),
            /// Initial state read from the upstream at this revision, then changes after it.
            Preloaded(Vec<Object>, u64),
        }
        let initial = opts.send_initial_events.unwrap_or(matches!(
            opts.resource_version,
            ResourceVersion::Unset | ResourceVersion::Any
        ));
        let fallback = self.range_fallback();
        let start = match (opts.resource_version, initial) {
            (ResourceVersion::Unset, true) if fallback.is_some() => {
                let up = fallback.unwrap_or_else(|| unreachable!("checked"));
                let rv = up.current_revision().await?;
                let pred = Predicate::compile(&self.shared.schema, &opts.selection);
                let state = self
                    .list_from_upstream(&*up, &pred, Some(rv), None, None)
                    .await?;
                Start::Preloaded(state.items, rv)
            }
            (ResourceVersion::Unset, false) if fallback.is_some() => {
                let up = fallback.unwrap_or_else(|| unreachable!("checked"));
                Start::After(up.current_revision().await?)
            }
            (ResourceVersion::Unset, true) => {
                self.fresh().await?;
                Start::Initial
            }
            (ResourceVersion::Unset, false) => Start::After(self.fresh().await?),
            (ResourceVersion::Any, true) => Start::Initial,
            (ResourceVersion::Any, false) => Start::After(self.resource_version()),
            (ResourceVersion::At(n), true) => {
                self.wait_for(n).await?;
                Start::Initial
            }
            (ResourceVersion::At(n), false) => Start::After(n),
        };
        let shared = &self.shared;
        let pred = Predicate::compile(&shared.schema, &opts.selection);
        let mut st = shared.state.write();
        let capacity = match pred.route() {
            Some(_) => shared.config.routed_buffer,
            None => {
                let (lo, hi) = shared.config.unrouted_buffer;
                let per_sec = st.history.capacity() as f64
                    / shared.schema.def.history.window.as_secs_f64().max(1.0);
                (per_sec.ceil() as usize).clamp(lo, hi)
            }
        };
        let end_bookmark = opts.send_initial_events == Some(true);
        // Registration and the start position are taken under one write lock, so no event can fall
        // between them.
        let (start_rv, initial) = match start {
            Start::Initial => {
                let (seq, rv) = (st.history.end_seq(), st.rv);
                (
                    None,
                    Some(InitialEvents::Store {
                        seq,
                        rv,
                        end_bookmark,
                    }),
                )
            }
            Start::After(n) => (Some(n), None),
            Start::Preloaded(objects, rv) => (
                Some(rv),
                Some(InitialEvents::Preloaded {
                    objects,
                    rv,
                    end_bookmark,
                }),
            ),
        };
        let (watcher, start_rv) = match start_rv {
            None => (WatcherShared::new(pred, st.rv, capacity, None), st.rv),
            Some(n) if n <= st.rv => {
                let seq = st
                    .history
                    .seq_after_rv(n)
                    .map_err(|oldest| Error::Expired {
                        requested: n,
                        oldest,
                    })?;
                let parked = (seq < st.history.end_seq()).then_some(seq);
                (WatcherShared::new(pred, n, capacity, parked), n)
            }
            Some(n) => (WatcherShared::new(pred, n, capacity, None), n),
        };
        let watcher = Arc::new(watcher);
        let id = st.registry.add(Arc::clone(&watcher));
        drop(st);
        let bookmarks = opts
            .allow_bookmarks
            .then_some(shared.config.bookmark_interval);
        Ok(WatchStream::new(
            Arc::clone(shared),
            watcher,
            id,
            initial,
            start_rv,
            bookmarks,
        ))
    }

    /// A snapshot of sizes and counters.
    pub fn stats(&self) -> CacheStats {
        let st = self.shared.state.read();
        let (routed, unrouted) = st.registry.router.counts();
        let m = &self.shared.metrics;
        CacheStats {
            resource_version: st.rv,
            objects: st.store.len(),
            history_len: st.history.len(),
            history_capacity: st.history.capacity(),
            routed_watchers: routed,
            unrouted_watchers: unrouted,
            events: m.events.load(Ordering::Relaxed),
            delivered: m.delivered.load(Ordering::Relaxed),
            parked: m.parked.load(Ordering::Relaxed),
            expired: m.expired.load(Ordering::Relaxed),
            decode_errors: m.decode_errors.load(Ordering::Relaxed),
            resyncs: m.resyncs.load(Ordering::Relaxed),
            ready: st.readiness.ready,
        }
    }

    /// Compiles a selection against this resource, for callers that evaluate many objects.
    pub fn matches(&self, selection: &Selection, obj: &Object) -> bool {
        Predicate::compile(&self.shared.schema, selection).matches(&self.shared.schema, obj)
    }
}

/// A resync in progress (see [`Cache::resync`]). It keeps only the listed keys and the objects that
/// differ from the cache, never a second copy of the whole data set.
pub struct Resync {
    cache: Cache,
    rv: u64,
    seen: HashSet<Arc<str>>,
    changed: Vec<Object>,
    listed: u64,
}

/// What a finished resync changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResyncOutcome {
    /// Objects listed.
    pub listed: u64,
    /// Objects that were new to the cache.
    pub added: u64,
    /// Objects that differed from the cache.
    pub modified: u64,
    /// Cached objects the list no longer had.
    pub deleted: u64,
}

impl Resync {
    /// Adds one page of the listed state.
    pub fn add_page(&mut self, objects: impl IntoIterator<Item = Object>) {
        let st = self.cache.shared.state.read();
        for o in objects {
            self.listed += 1;
            if !self.seen.insert(o.key_arc().clone()) {
                continue;
            }
            if st
                .store
                .get(o.key())
                .is_none_or(|cur| cur.resource_version() != o.resource_version())
            {
                self.changed.push(o);
            }
        }
    }

    /// Objects listed so far.
    pub fn listed(&self) -> u64 {
        self.listed
    }

    /// Applies the difference. The first resync loads the state silently and makes the cache ready.
    /// Later ones turn the difference into ordinary ADDED/MODIFIED/DELETED events at the resync
    /// revision, so connected watchers stay connected and converge; watches and continuations from
    /// before it get 410 Expired.
    pub fn finish(mut self) -> ResyncOutcome {
        let shared = &*self.cache.shared;
        let schema = &shared.schema;
        let now = Instant::now();
        let mut st = shared.state.write();
        let st = &mut *st;
        let first = !st.readiness.ready && st.store.len() == 0 && st.rv == 0;
        let mut out = ResyncOutcome {
            listed: self.listed,
            ..Default::default()
        };
        let rv = self.rv.max(st.rv);
        let deleted: Vec<Arc<str>> = st
            .store
            .iter()
            .map(|o| o.key_arc())
            .filter(|k| !self.seen.contains(*k))
            .cloned()
            .collect();
        // Oldest change first, so that object revisions never go backwards in a watcher's stream.
        self.changed.sort_by_key(Object::resource_version);
        if first {
            for o in self.changed {
                st.store.upsert(schema, o);
                out.added += 1;
            }
            st.history.reset(rv);
            info!(resource = %schema.def.plural, objects = out.added, rv, "initial sync finished");
        } else {
            let mut events = 0;
            for o in self.changed {
                match st.store.get(o.key()) {
                    Some(cur) if cur.resource_version() == o.resource_version() => continue,
                    Some(_) => out.modified += 1,
                    None => out.added += 1,
                }
                let prev = st.store.upsert(schema, o.clone());
                let ev = st
                    .history
                    .push(|seq| Event::new(seq, rv, Some(o), prev, now));
                st.registry.dispatch(schema, ev);
                events += 1;
            }
            for key in deleted {
                if let Some(prev) = st.store.remove(schema, &key) {
                    let ev = st
                        .history
                        .push(|seq| Event::new(seq, rv, None, Some(prev), now));
                    st.registry.dispatch(schema, ev);
                    out.deleted += 1;
                    events += 1;
                }
            }
            st.history.raise_floor(rv);
            shared.metrics.events.fetch_add(events, Ordering::Relaxed);
            shared.metrics.resyncs.fetch_add(1, Ordering::Relaxed);
            info!(resource = %schema.def.plural, rv, added = out.added, modified = out.modified, deleted = out.deleted, "resync finished");
        }
        st.readiness.ready = true;
        self.cache.publish(st, rv);
        out
    }
}

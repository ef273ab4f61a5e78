//! The state of one cache behind its one lock, and every operation that takes that lock: the commit
//! step shared by live ingest and resync, readiness, reads of the store, and watcher registration.
//! The rest of the cache (the facade, streams, resyncs) goes through these methods only, and every
//! change through the cache's one [`CacheWriter`], which wakes the watchers an apply reached once
//! the lock is released.
//!
//! ## Invariants
//! - Every change up to `State::rv` has been applied to the store and the history and offered to
//!   every registered watcher.
//! - `dispatched_rv` equals `State::rv` outside a commit, and is written only after a commit's
//!   fan-out: a bookmark read under a watcher's queue lock never overtakes an event.
//! - Registration takes the start position under the same write lock that registers the watcher,
//!   so no event can fall between them.
//! - `shard_spare`, when its lock is free, holds the same watchers' ranges as the registry's
//!   shard router; while it is held, those plus or minus one watcher's.
//!
//! ## Lock order
//! `shard_spare`, then `state`, then a watcher's queue lock ([`crate::cache::watcher`]). `upstream` is never held with
//! either. The decoder's published paths are a leaf, written under `state` and read by decode without it; an object's
//! field memo (`model/field_memo.rs`) and `unserved` are leaves too. No lock here is held across an `.await` or while waiting for a consumer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Waker;
use std::time::{Duration, Instant};

use hashbrown::HashSet;
use tracing::{debug, error, warn};

use crate::cache::Cache;
use crate::cache::config::CacheConfig;
#[cfg(any(test, feature = "test-hooks"))]
use crate::cache::consistency::Corruption;
use crate::cache::consistency::Entry;
use crate::cache::deadlines::{self, Deadlines};
use crate::cache::fresh::{Coalescer, ReadKey};
use crate::cache::history::{Event, Evicted, History};
use crate::cache::list::{self, Page, Rollback};
use crate::cache::ready::{Readiness, Signal};
use crate::cache::registry::{Fanout, Registry, ShardChange};
use crate::cache::shard_router::ShardRouter;
use crate::cache::store::Store;
use crate::cache::upstream::{KeyRange, Upstream};
use crate::cache::watcher::Watcher;
use crate::error::Error;
use crate::histogram::{HOLD_NANOS, Histogram, HistogramSnapshot, LATENCY_NANOS, READ_WAIT_NANOS};
use crate::model::selector::Predicate;
use crate::model::{DecodeError, Decoder, FieldPath, Object, ObjectKey, Schema, ShardSelector};
use crate::sync::{AtomicU64, Mutex, RwLock};

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

/// A point-in-time view of a cache's size and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    /// The cache's revision.
    pub resource_version: u64,
    /// Objects in the store.
    pub objects: usize,
    /// Events in the history window.
    pub history_len: usize,
    /// The history window's current capacity.
    pub history_capacity: usize,
    /// Bytes the history window's events hold (the byte budget's measure).
    pub history_bytes: usize,
    /// Watchers routed by a trigger.
    pub routed_watchers: u64,
    /// Watchers offered every event.
    pub unrouted_watchers: u64,
    /// Events applied since start (live changes and resync differences).
    pub events: u64,
    /// Event deliveries queued to watchers by fan-out since start.
    pub delivered: u64,
    /// Times a watcher was parked because its queue was full.
    pub parked: u64,
    /// Watchers ended with 410 Expired.
    pub expired: u64,
    /// Stored values skipped because they could not be decoded.
    pub decode_errors: u64,
    /// Of `decode_errors`, the values that name another object than their key (k/k#135115):
    /// left unserved under both keys.
    pub misplaced_values: u64,
    /// Resyncs after the initial sync.
    pub resyncs: u64,
    /// Times the upstream failed the follower (a sync, a watch's opening or the watch itself:
    /// a timeout, a lost connection, an error) and was retried. Each one is a window in which the
    /// cache fell behind its upstream, and past the grace period a not-ready cache.
    pub upstream_failures: u64,
    /// Upstream reads made to prove consistent reads fresh (one per burst, not per request).
    pub fresh_reads: u64,
    /// Of `fresh_reads`, the proofs by selection that held: the cache selected exactly the
    /// upstream's objects, and the reads waited for no event (`fresh.rs`).
    pub fresh_by_selection: u64,
    /// Whether the cache serves requests.
    pub ready: bool,
    /// The sum of the cached objects' stored sizes (protobuf or JSON as stored), in bytes.
    pub object_bytes: u64,
    /// From an applied batch's arrival at the cache to its events in every matching watcher's
    /// queue (the lock wait, the commit and the fan-out), in nanoseconds.
    pub queued_latency: HistogramSnapshot,
    /// How long reads waited for the cache to be fresh enough to serve them (consistent reads,
    /// and reads at a revision the cache had not reached), in nanoseconds.
    pub read_wait: HistogramSnapshot,
    /// For each watch registered: its longest hold of the cache's lock, in nanoseconds (a
    /// sharded watch's ranges are added outside it).
    pub registration_holds: HistogramSnapshot,
    /// Reads refused: the cache was not ready (429).
    pub refused_not_ready: u64,
    /// Reads refused: the cache did not become fresh in time (504).
    pub refused_timeout: u64,
    /// Reads refused: the upstream read that proves freshness failed.
    pub refused_upstream: u64,
    /// Consistency checks against the upstream, by outcome.
    pub consistency_checks: ConsistencyChecks,
}

/// Consistency checks of one cache against its upstream, by outcome (upstream's
/// `apiserver_storage_consistency_checks_total` statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsistencyChecks {
    /// The cache equalled the upstream at the checked revision.
    pub success: u64,
    /// It did not: the cache was resynced.
    pub failure: u64,
    /// The check could not be made (the upstream failed, the cache was not ready, or the
    /// revision kept leaving the windows).
    pub error: u64,
}

/// How one consistency check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// The cache equalled the upstream.
    Success,
    /// It did not.
    Failure,
    /// The check could not be made.
    Error,
}

/// Counters of one cache. Relaxed: they are statistics, and order nothing.
#[derive(Debug)]
pub(crate) struct Metrics {
    events: std::sync::atomic::AtomicU64,
    delivered: std::sync::atomic::AtomicU64,
    parked: std::sync::atomic::AtomicU64,
    expired: std::sync::atomic::AtomicU64,
    decode_errors: std::sync::atomic::AtomicU64,
    misplaced: std::sync::atomic::AtomicU64,
    resyncs: std::sync::atomic::AtomicU64,
    pub upstream_failures: std::sync::atomic::AtomicU64,
    queued: Histogram,
    pub read_wait: Histogram,
    registration_holds: Histogram,
    refused_not_ready: std::sync::atomic::AtomicU64,
    pub refused_timeout: std::sync::atomic::AtomicU64,
    pub refused_upstream: std::sync::atomic::AtomicU64,
    pub fresh_by_selection: std::sync::atomic::AtomicU64,
    checks: [std::sync::atomic::AtomicU64; 3],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            events: Default::default(),
            delivered: Default::default(),
            parked: Default::default(),
            expired: Default::default(),
            decode_errors: Default::default(),
            misplaced: Default::default(),
            resyncs: Default::default(),
            upstream_failures: Default::default(),
            queued: Histogram::new(LATENCY_NANOS),
            read_wait: Histogram::new(READ_WAIT_NANOS),
            registration_holds: Histogram::new(HOLD_NANOS),
            refused_not_ready: Default::default(),
            refused_timeout: Default::default(),
            refused_upstream: Default::default(),
            fresh_by_selection: Default::default(),
            checks: Default::default(),
        }
    }
}

impl Metrics {
    pub(crate) fn add(counter: &std::sync::atomic::AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(counter: &std::sync::atomic::AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Where a new watcher starts.
pub(crate) enum From {
    /// At this revision, with the state then sent first as initial events, and every change
    /// since replayed from history: a consistent watch proven fresh at that revision
    /// (`fresh.rs`). At the current revision or later (or with the history since gone): at the
    /// current revision, with the current state.
    SnapshotAt(u64),
    /// After this revision: every change above it, replayed from history when it is older.
    After(u64),
}

/// A registered watcher and where it starts.
pub(crate) struct Registered {
    pub watcher: Arc<Watcher>,
    pub id: u32,
    /// The revision the stream is at when it starts.
    pub start_rv: u64,
    /// For [`From::SnapshotAt`]: the history sequence number the snapshot is taken before.
    pub snapshot_seq: Option<u64>,
}

/// What one commit did.
#[derive(Debug, Default, Clone, Copy)]
struct Committed {
    events: u64,
    added: u64,
    modified: u64,
    deleted: u64,
    fanout: Fanout,
}

struct State {
    store: Store,
    history: History,
    registry: Registry,
    rv: u64,
    readiness: Readiness,
    /// Undeclared field paths that registered watchers' selectors read, with how many use each.
    json_paths: hashbrown::HashMap<FieldPath, u32>,
    /// Closed ([`Shared::close`]): every watcher, and every one registered after, is ended.
    closed: bool,
    /// Keys whose next change the test hook drops ([`Corruption::MissNext`]).
    #[cfg(any(test, feature = "test-hooks"))]
    missed: HashSet<String>,
}

impl State {
    /// Counts a registered watcher's undeclared paths; whether the set of paths changed.
    fn use_paths(&mut self, pred: &Predicate) -> bool {
        let mut changed = false;
        for p in pred.json_paths() {
            let n = self.json_paths.entry(p.clone()).or_insert(0);
            changed |= *n == 0;
            *n += 1;
        }
        changed
    }

    /// Uncounts an unregistered watcher's paths; whether the set of paths changed.
    fn release_paths(&mut self, pred: &Predicate) -> bool {
        let mut changed = false;
        for p in pred.json_paths() {
            if let Some(n) = self.json_paths.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    self.json_paths.remove(p);
                    changed = true;
                }
            }
        }
        changed
    }
}

impl State {
    /// The one ingest step, shared by live apply and resync: store and indexes, history, fan-out.
    /// A deletion of a key the store does not hold is ignored.
    fn commit(
        &mut self,
        schema: &Schema,
        rv: u64,
        changes: impl IntoIterator<Item = Change>,
        now: Instant,
        wakes: &mut Vec<Waker>,
    ) -> Committed {
        let mut c = Committed::default();
        for change in changes {
            #[cfg(any(test, feature = "test-hooks"))]
            if self.missed.remove(match &change {
                Change::Put(o) => o.key(),
                Change::Delete(k) => k.as_str(),
            }) {
                continue;
            }
            let (object, prev) = match change {
                Change::Put(o) => {
                    let prev = self.store.upsert(schema, o.clone());
                    (Some(o), prev)
                }
                Change::Delete(key) => match self.store.remove(schema, &key) {
                    Some(prev) => (None, Some(prev)),
                    None => {
                        debug!(%key, rv, "delete of an object the cache does not hold");
                        continue;
                    }
                },
            };
            match (&object, &prev) {
                (Some(_), None) => c.added += 1,
                (Some(_), Some(_)) => c.modified += 1,
                (None, _) => c.deleted += 1,
            }
            let ev = self
                .history
                .push(|seq| Event::new(seq, rv, object, prev, now));
            c.fanout += self.registry.dispatch(schema, ev, wakes);
            c.events += 1;
        }
        c
    }
}

/// Drops evicted events off the writer's thread (a blocking-pool thread of the runtime it runs
/// on; inline without one): freeing their objects is the writer's largest cost after the store's
/// in a catch-up, and the writer is the one thread a resource's ingest runs on.
fn reap(evicted: Vec<Arc<Event>>) {
    #[cfg(not(watchcache_loom))]
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn_blocking(move || drop(evicted));
        return;
    }
    drop(evicted);
}

/// The shared part of a cache: everything its clones, streams and resyncs point at.
pub(crate) struct Shared {
    pub schema: Arc<Schema>,
    pub config: CacheConfig,
    metrics: Metrics,
    state: RwLock<State>,
    /// Mirrors `State::rv`, published after a commit's fan-out (see `WatchStream::poll_live`).
    dispatched_rv: AtomicU64,
    rv_tx: tokio::sync::watch::Sender<u64>,
    upstream: RwLock<Option<Arc<dyn Upstream>>>,
    /// The upstream reads consistent reads wait for, shared by a burst (`fresh.rs`): keyed by
    /// the keys a proof covers, `None` for a read of the upstream's current revision.
    pub fresh_reads: Arc<Coalescer<ReadKey>>,
    /// The resource's decoder; it reads the keys of `State::json_paths`, published to it.
    pub decoder: Decoder,
    /// Wakes readiness waiters; `State::readiness` is published to it under the state lock.
    ready: Signal,
    /// The watches' bookmark timers: one wheel, not a tokio timer per watch (`deadlines.rs`).
    pub bookmarks: Arc<Deadlines>,
    /// The spare copy of the shard router (`None` when the schema does not route shards): equal
    /// to the registry's whenever this lock is free. Sharded watchers' ranges are added to and
    /// removed from it outside the state lock, then it is swapped with the registry's.
    shard_spare: Mutex<Option<Box<ShardRouter>>>,
    /// The values the follower left unserved (see [`Unserved`]); `unserved_any` says whether
    /// it holds any, so that the decode of a good value takes no lock in the common case.
    unserved: Mutex<Unserved>,
    unserved_any: std::sync::atomic::AtomicBool,
    /// The identity of the revision space the cache's revisions belong to (its etcd cluster's
    /// id, learned by the follower; 0: unknown). Cleared by a reset: the next sync learns it.
    origin: AtomicU64,
}

/// How often a value naming another object than its key is logged, at most: every relist reads
/// it again, and a store with many would flood the log.
const MISPLACED_LOG_EVERY: Duration = Duration::from_secs(10);

/// The stored values the follower skipped (they do not decode), by key, with the revision each
/// was written at: what the consistency check compares an upstream key the cache lacks with, so
/// that the check and the follower agree on what is skipped without reading the value again.
/// A key leaves it when the follower decodes a value of it, sees it deleted, or a check finds it
/// gone upstream; so it holds about the bad values the upstream has (a key and a `u64` each).
#[derive(Debug, Default)]
struct Unserved {
    keys: hashbrown::HashMap<String, u64>,
    /// When a misplaced value was last logged, and how many were not logged since.
    logged: Option<Instant>,
    suppressed: u64,
}

impl Shared {
    pub(crate) fn new(schema: Schema, config: CacheConfig) -> Shared {
        let schema = Arc::new(schema);
        let fresh_reads = Arc::new(Coalescer::new(config.max_upstream_reads));
        let shard_spare = Mutex::new(schema.route_shards.then(|| Box::new(ShardRouter::new())));
        let state = State {
            store: Store::new(&schema),
            history: History::new(schema.def.history),
            registry: Registry::new(&schema),
            rv: 0,
            readiness: Readiness::InitialSync {
                since: Instant::now(),
            },
            json_paths: hashbrown::HashMap::new(),
            closed: false,
            #[cfg(any(test, feature = "test-hooks"))]
            missed: HashSet::new(),
        };
        Shared {
            decoder: Decoder::new(Arc::clone(&schema)),
            schema,
            config,
            metrics: Metrics::default(),
            state: RwLock::new(state),
            dispatched_rv: AtomicU64::new(0),
            origin: AtomicU64::new(0),
            rv_tx: tokio::sync::watch::Sender::new(0),
            upstream: RwLock::new(None),
            fresh_reads,
            ready: Signal::new(),
            bookmarks: Deadlines::new(None, deadlines::TICK),
            shard_spare,
            unserved: Mutex::new(Unserved::default()),
            unserved_any: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn publish(&self, st: &mut State, rv: u64) {
        st.rv = rv;
        self.dispatched_rv.store(rv, Ordering::Release);
        self.rv_tx.send_replace(rv);
    }

    fn count(&self, c: &Committed) {
        let m = &self.metrics;
        Metrics::add(&m.events, c.events);
        Metrics::add(&m.delivered, c.fanout.queued);
        Metrics::add(&m.parked, c.fanout.parked);
    }

    // ---- upstream ----

    pub(crate) fn set_upstream(&self, upstream: Arc<dyn Upstream>) {
        *self.upstream.write() = Some(upstream);
    }

    pub(crate) fn upstream(&self) -> Option<Arc<dyn Upstream>> {
        self.upstream.read().clone()
    }

    // ---- writer side ----

    /// Applies the changes of one revision. The wakers of the watchers it queued events for are
    /// pushed to `wakes`, for the caller to wake once the lock is released.
    pub(crate) fn apply(
        &self,
        rv: u64,
        changes: impl IntoIterator<Item = Change>,
        wakes: &mut Vec<Waker>,
    ) -> Result<(), OutOfOrder> {
        let received = Instant::now();
        // A put serves its key again: a value of it left unserved at or before the put's
        // revision is no longer the upstream's (a later one, which a source may have decoded
        // before applying this batch, still is).
        let changes = changes.into_iter().inspect(|c| {
            if let Change::Put(o) = c {
                self.forget_unserved(o.key(), o.resource_version());
            }
        });
        let mut st = self.state.write();
        if rv <= st.rv {
            return Err(OutOfOrder { rv, current: st.rv });
        }
        let c = st.commit(&self.schema, rv, changes, received, wakes);
        self.publish(&mut st, rv);
        let evicted = st.history.take_evicted();
        drop(st);
        if let Some(evicted) = evicted {
            reap(evicted);
        }
        self.metrics.queued.observe_duration(received.elapsed());
        self.count(&c);
        Ok(())
    }

    /// The upstream has no changes up to `rv`.
    pub(crate) fn progress(&self, rv: u64) {
        let mut st = self.state.write();
        if rv > st.rv {
            self.publish(&mut st, rv);
        }
    }

    /// Keeps the objects whose revision differs from the cached one's (new or changed). For each
    /// other one, `seen`'s entry becomes the cached object: a key is the object it belongs to,
    /// and holding the listed copy would keep a second copy of the data set until the end.
    pub(crate) fn retain_changed(&self, objects: &mut Vec<Object>, seen: &mut HashSet<ObjectKey>) {
        let st = self.state.read();
        objects.retain(|o| match st.store.get(o.key()) {
            Some(cur) if cur.resource_version() == o.resource_version() => {
                seen.replace(cur.key_owned());
                false
            }
            _ => true,
        });
    }

    /// The locked part of a finished resync: `changed` holds every listed object that differed
    /// from the cache when it was listed, `seen` every listed key.
    pub(crate) fn finish_resync(
        &self,
        rv: u64,
        mut changed: Vec<Object>,
        seen: &HashSet<ObjectKey>,
        listed: u64,
    ) -> ResyncOutcome {
        let schema = &self.schema;
        let mut wakes = Vec::new();
        let mut guard = self.state.write();
        let st = &mut *guard;
        let rv = match st.readiness {
            // The only time the revision may go backwards: the upstream's history was replaced.
            Readiness::Diverged { .. } => rv,
            _ => rv.max(st.rv),
        };
        let deleted: Vec<String> = st
            .store
            .iter()
            .map(Object::key)
            .filter(|k| !seen.contains(*k))
            .map(|k| k.to_string())
            .collect();
        // The writer is the resync's own feeder, so little can have changed since listing; what
        // did is re-checked here, under the lock.
        changed.retain(|o| {
            st.store
                .get(o.key())
                .is_none_or(|cur| cur.resource_version() != o.resource_version())
        });
        // Oldest change first, so that object revisions never go backwards in a watcher's stream.
        changed.sort_by_key(Object::resource_version);
        let changes = changed
            .into_iter()
            .map(Change::Put)
            .chain(deleted.into_iter().map(Change::Delete));
        let out = if let Readiness::InitialSync { .. } | Readiness::Diverged { .. } = st.readiness {
            // The first load is silent: no watcher can exist before the cache is ready.
            let mut out = ResyncOutcome::default();
            for change in changes {
                match change {
                    Change::Put(o) => {
                        st.store.upsert(schema, o);
                        out.added += 1;
                    }
                    Change::Delete(key) => {
                        st.store.remove(schema, &key);
                        out.deleted += 1;
                    }
                }
            }
            st.history.reset(rv);
            debug!(resource = %schema.def.plural, objects = out.added, rv, "initial sync finished");
            out
        } else {
            let c = st.commit(schema, rv, changes, Instant::now(), &mut wakes);
            st.history.raise_floor(rv);
            self.count(&c);
            Metrics::add(&self.metrics.resyncs, 1);
            debug!(resource = %schema.def.plural, rv, added = c.added, modified = c.modified, deleted = c.deleted, "resync finished");
            ResyncOutcome {
                listed: 0,
                added: c.added,
                modified: c.modified,
                deleted: c.deleted,
            }
        };
        st.readiness = Readiness::Ready;
        // The revision first: a waiter woken by readiness reads it without the lock.
        self.publish(st, rv);
        self.ready.publish(&st.readiness);
        let evicted = st.history.take_evicted();
        drop(guard);
        wakes.into_iter().for_each(Waker::wake);
        if let Some(evicted) = evicted {
            reap(evicted);
        }
        ResyncOutcome { listed, ..out }
    }

    /// Decodes a stored value into an [`Object`] at revision `rv`: the one decode every feeder
    /// and upstream read goes through.
    /// The undeclared field paths live selectors use are read here, once, outside any lock.
    pub(crate) fn decode(&self, key: &str, value: &[u8], rv: u64) -> Result<Object, DecodeError> {
        self.decoder.decode(key, value, rv)
    }

    /// Publishes the set of undeclared paths after it changed (under the state write lock, so
    /// that publications are ordered).
    fn publish_paths(&self, st: &State) {
        self.decoder
            .publish_paths(st.json_paths.keys().cloned().collect());
    }

    /// Decodes a stored value the follower read at its current state (a list page or a watch
    /// event), or counts and logs it, records it as unserved at `rv`, and returns `None`.
    pub(crate) fn decode_or_skip(&self, key: &str, value: &[u8], rv: u64) -> Option<Object> {
        match self.decode(key, value, rv) {
            Ok(o) => {
                self.forget_unserved(key, u64::MAX);
                Some(o)
            }
            Err(e) => {
                self.skip(&e, rv);
                None
            }
        }
    }

    /// Counts and logs a value of the upstream's current state that the follower could not
    /// read or decode, and records its key as unserved at `rv`.
    pub(crate) fn skip(&self, err: &DecodeError, rv: u64) {
        self.record_decode_error(err);
        let mut u = self.unserved.lock();
        u.keys.insert(err.key.clone(), rv);
        self.unserved_any.store(true, Ordering::Relaxed);
    }

    /// The follower saw `key` decoded or deleted: its unserved record, if written at or before
    /// `through`, goes (a put applied passes its revision: a value a source decoded after it
    /// stays unserved).
    pub(crate) fn forget_unserved(&self, key: &str, through: u64) {
        // Only the follower inserts, and it set the flag after its own insert: a false read
        // here means this key holds no record. (The checker reading a stale false only reads the
        // value again.) `unserved` is a leaf lock, taken only when it holds a key.
        if self.unserved_any.load(Ordering::Relaxed) {
            let mut u = self.unserved.lock();
            if u.keys.get(key).is_some_and(|at| *at <= through) {
                u.keys.remove(key);
            }
            self.unserved_any
                .store(!u.keys.is_empty(), Ordering::Relaxed);
        }
    }

    /// The revision of the value of `key` the follower left unserved, if it did.
    pub(crate) fn unserved_at(&self, key: &str) -> Option<u64> {
        if !self.unserved_any.load(Ordering::Relaxed) {
            return None;
        }
        self.unserved.lock().keys.get(key).copied()
    }

    /// After a check at revision `n` (which the cache had reached): records written at or before
    /// `n` whose key the upstream did not hold at that revision (`seen`: the keys it did) are
    /// gone upstream.
    pub(crate) fn retain_unserved(&self, n: u64, seen: &HashSet<String>) {
        let mut u = self.unserved.lock();
        u.keys.retain(|k, rv| *rv > n || seen.contains(k));
        self.unserved_any
            .store(!u.keys.is_empty(), Ordering::Relaxed);
    }

    pub(crate) fn record_decode_error(&self, err: &DecodeError) {
        Metrics::add(&self.metrics.decode_errors, 1);
        let Some(names) = &err.names else {
            warn!(resource = %self.schema.def.plural, key = %err.key, reason = %err.reason, "skipping malformed object");
            return;
        };
        Metrics::add(&self.metrics.misplaced, 1);
        let now = Instant::now();
        let suppressed = {
            let mut u = self.unserved.lock();
            if u.logged
                .is_some_and(|t| now.duration_since(t) < MISPLACED_LOG_EVERY)
            {
                u.suppressed += 1;
                return;
            }
            u.logged = Some(now);
            std::mem::take(&mut u.suppressed)
        };
        warn!(resource = %self.schema.def.plural, key = %err.key, names = %names, suppressed, "leaving unserved a stored value that names another object than its key (k/k#135115)");
    }

    /// The upstream's history was replaced: ends every watcher with 410 Expired, empties the store
    /// and the history, and marks the cache not ready until the next resync finishes.
    pub(crate) fn reset(&self, why: String) {
        let mut st = self.state.write();
        let st = &mut *st;
        error!(resource = %self.schema.def.plural, rv = st.rv, reason = %why, "the upstream's history was replaced; every watcher gets 410 Expired and the cache resyncs");
        st.store = Store::new(&self.schema);
        st.history.reset(st.rv);
        self.origin.store(0, Ordering::Release);
        // Revisions of the replaced history name other values.
        self.unserved.lock().keys.clear();
        self.unserved_any.store(false, Ordering::Relaxed);
        st.registry.expire_all(st.history.evicted());
        st.readiness = Readiness::Diverged {
            since: Instant::now(),
            why,
        };
        self.ready.publish(&st.readiness);
    }

    /// The resource is no longer served from this cache: every watcher ends once it has read
    /// what is queued for it, and so does every watcher registered from now on.
    pub(crate) fn close(&self) {
        let mut st = self.state.write();
        st.closed = true;
        st.registry.end_all();
    }

    /// See [`Shared::origin`]'s field.
    pub(crate) fn origin(&self) -> Option<u64> {
        Some(self.origin.load(Ordering::Acquire)).filter(|o| *o != 0)
    }

    pub(crate) fn set_origin(&self, origin: u64) {
        self.origin.store(origin, Ordering::Release);
    }

    pub(crate) fn record_expired(&self) {
        Metrics::add(&self.metrics.expired, 1);
    }

    // ---- readiness ----

    /// Marks a ready cache not ready; whether it was ready.
    pub(crate) fn set_not_ready(&self, why: String) -> bool {
        let mut st = self.state.write();
        if let Readiness::Ready = st.readiness {
            st.readiness = Readiness::Unavailable {
                since: Instant::now(),
                why,
            };
            self.ready.publish(&st.readiness);
            return true;
        }
        false
    }

    /// Marks an unavailable cache ready again; whether it was unavailable.
    pub(crate) fn set_ready(&self) -> bool {
        let mut st = self.state.write();
        if let Readiness::Unavailable { .. } = st.readiness {
            st.readiness = Readiness::Ready;
            self.ready.publish(&st.readiness);
            return true;
        }
        false
    }

    /// The writer is gone: readiness can no longer change.
    pub(crate) fn abandon(&self) {
        // Under the state lock, so that it is ordered after the writer's last publication.
        let _st = self.state.read();
        self.ready.abandon();
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.is_ready()
    }

    /// Waits until the cache is ready; `false` when it never will be (its writer is gone).
    pub(crate) async fn wait_ready(&self) -> bool {
        self.ready.wait().await
    }

    /// The upstream says it does not serve the resource (see [`Readiness::Absent`]); whether it
    /// was not absent before.
    pub(crate) fn set_absent(&self) -> bool {
        let mut st = self.state.write();
        if matches!(st.readiness, Readiness::Absent { .. }) {
            return false;
        }
        st.readiness = Readiness::Absent {
            since: Instant::now(),
        };
        self.ready.publish(&st.readiness);
        true
    }

    pub(crate) fn is_absent(&self) -> bool {
        matches!(self.state.read().readiness, Readiness::Absent { .. })
    }

    /// `Ok` when the cache serves reads, else [`Error::NotReady`] with upstream's Retry-After.
    pub(crate) fn check_ready(&self) -> Result<(), Error> {
        self.state.read().readiness.check(&self.schema.def.plural)
    }

    /// [`check_ready`](Shared::check_ready) for a read, counting a refusal.
    pub(crate) fn ready_for_read(&self) -> Result<(), Error> {
        let r = self.check_ready();
        if r.is_err() {
            Metrics::add(&self.metrics.refused_not_ready, 1);
        }
        r
    }

    /// The cache's counters.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    // ---- reader side ----

    /// The cache's revision: every change up to it has been applied and dispatched.
    pub(crate) fn resource_version(&self) -> u64 {
        self.dispatched_rv.load(Ordering::Acquire)
    }

    /// Follows the cache's revision.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    pub(crate) fn get(&self, key: &str) -> Option<Object> {
        self.state.read().store.get(key).cloned()
    }

    /// The cache's revision, if every key the store holds in `keys` is in `held` (sorted, as
    /// the upstream lists keys): the cache-side half of a freshness proof (`fresh.rs`).
    pub(crate) fn holds_only(&self, keys: &KeyRange, held: &[String]) -> Option<u64> {
        let st = self.state.read();
        let mut upstream = held.iter().map(String::as_str).peekable();
        for key in st.store.keys_in(keys) {
            // Both are in byte order: skip the upstream's keys the cache does not hold (values
            // it could not decode), and fail on one it holds that the upstream does not.
            while upstream.next_if(|k| *k < key).is_some() {}
            upstream.next_if_eq(&key)?;
        }
        Some(st.rv)
    }

    /// The cache's revision, if the objects `pred` selects are exactly `objects` (key and
    /// revision, sorted by key): the cache-side half of a freshness proof by selection
    /// (`fresh.rs`).
    pub(crate) fn holds_exactly(&self, pred: &Predicate, objects: &[(String, u64)]) -> Option<u64> {
        let st = self.state.read();
        let mut held = list::page(
            &self.schema,
            &st.store,
            &Rollback::default(),
            pred,
            None,
            None,
        )
        .items;
        if held.len() != objects.len() {
            return None;
        }
        held.sort_unstable_by(|a, b| a.key().cmp(b.key()));
        held.iter()
            .zip(objects)
            .all(|(o, (key, rv))| o.key() == key && o.resource_version() == *rv)
            .then_some(st.rv)
    }

    /// The object at `key` as it was at revision `rv` (the current state when the cache is
    /// still there): what a read proven fresh at `rv` serves, even when the cache moved on
    /// meanwhile.
    ///
    /// # Errors
    /// [`Evicted`] when the history since `rv` is gone.
    pub(crate) fn get_at(&self, key: &str, rv: u64) -> Result<Option<Object>, Evicted> {
        let st = self.state.read();
        if st.rv > rv {
            let seq = st.history.seq_after_rv(rv)?;
            st.history.check_seq(seq)?;
            if let Some(ev) = st.history.since(seq).find(|ev| ev.key() == key) {
                return Ok(ev.prev.clone());
            }
        }
        Ok(st.store.get(key).cloned())
    }

    pub(crate) fn lookup(&self, slot: usize, value: &str) -> Vec<Object> {
        self.state.read().store.lookup(slot, value)
    }

    /// One LIST page: of the current state (`at` = `None`), or of the state at revision `at`.
    /// Returns the page's revision with it.
    pub(crate) fn page(
        &self,
        at: Option<u64>,
        pred: &Predicate,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<(u64, Page), Evicted> {
        let st = self.state.read();
        let (rv, rollback) = match at {
            None => (st.rv, Rollback::default()),
            Some(n) => {
                let seq = st.history.seq_after_rv(n)?;
                (n, Rollback::since(&st.history, seq)?)
            }
        };
        let page = list::page(&self.schema, &st.store, &rollback, pred, after, limit);
        Ok((rv, page))
    }

    /// One page of initial events: the state before history sequence number `seq`.
    pub(crate) fn snapshot_page(
        &self,
        seq: u64,
        pred: &Predicate,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, Evicted> {
        let st = self.state.read();
        let rollback = Rollback::since(&st.history, seq)?;
        Ok(list::page(
            &self.schema,
            &st.store,
            &rollback,
            pred,
            after,
            Some(limit),
        ))
    }

    /// Registers a watcher with this predicate, starting as `from` says.
    ///
    /// A watcher the shard router routes takes two holds of the state lock, each as short as an
    /// ordinary watcher's one: the first registers it as unrouted (its filter checks the hash),
    /// the second swaps in the spare shard router, to which its ranges were added in between,
    /// outside the lock (see `shard_router.rs`).
    ///
    /// # Errors
    /// [`Evicted`] when [`From::After`] names a revision older than the window.
    pub(crate) fn register(&self, pred: Predicate, from: From) -> Result<Registered, Evicted> {
        let mut st = self.state.write();
        let held = Instant::now();
        if let Readiness::Diverged { .. } = st.readiness {
            // A position taken before the reset means nothing now.
            return Err(st.history.evicted());
        }
        let capacity = match pred.route(&self.schema) {
            Some(_) => self.config.routed_buffer,
            None => {
                let (lo, hi) = self.config.unrouted_buffer;
                let per_sec = st.history.capacity() as f64
                    / self.schema.def.history.window.as_secs_f64().max(1.0);
                (per_sec.ceil() as usize).clamp(lo, hi)
            }
        };
        // A past snapshot needs the history since it; were that gone (the revision was reached
        // a moment ago), the current state serves.
        let past = match from {
            From::SnapshotAt(n) if n < st.rv => st
                .history
                .seq_after_rv(n)
                .and_then(|seq| st.history.check_seq(seq).map(|()| (n, seq)))
                .ok(),
            _ => None,
        };
        let (watcher, start_rv, snapshot_seq) = match from {
            From::SnapshotAt(_) if let Some((n, seq)) = past => {
                let parked = (seq < st.history.end_seq()).then_some(seq);
                (Watcher::new(pred, n, capacity, parked), n, Some(seq))
            }
            From::SnapshotAt(_) => (
                Watcher::new(pred, st.rv, capacity, None),
                st.rv,
                Some(st.history.end_seq()),
            ),
            From::After(n) if n <= st.rv => {
                let seq = st.history.seq_after_rv(n)?;
                let parked = (seq < st.history.end_seq()).then_some(seq);
                (Watcher::new(pred, n, capacity, parked), n, None)
            }
            // A revision the cache has not reached: the watcher waits in its queue.
            From::After(n) => (Watcher::new(pred, n, capacity, None), n, None),
        };
        if st.use_paths(&watcher.predicate) {
            self.publish_paths(&st);
        }
        if st.closed {
            watcher.end();
        }
        let watcher = Arc::new(watcher);
        let (id, pending) = st.registry.add(&self.schema, Arc::clone(&watcher));
        let mut longest = held.elapsed();
        drop(st);
        if pending && let Some(shard) = watcher.predicate.shard() {
            longest = longest.max(self.change_shards(ShardChange::Added(id), shard));
        }
        self.metrics.registration_holds.observe_duration(longest);
        Ok(Registered {
            watcher,
            id,
            start_rv,
            snapshot_seq,
        })
    }

    /// Ends a registered watcher (after its [`register`](Shared::register) returned). A
    /// watcher in the shard router takes two short holds of the state lock, as it registered:
    /// its ranges are removed from the spare shard router in between, while events reaching its
    /// id are dropped.
    pub(crate) fn unregister(&self, id: u32) {
        let mut st = self.state.write();
        let Some((w, in_shards)) = st.registry.remove(&self.schema, id) else {
            return;
        };
        if st.release_paths(&w.predicate) {
            self.publish_paths(&st);
        }
        drop(st);
        if in_shards && let Some(shard) = w.predicate.shard() {
            self.change_shards(ShardChange::Removed(id), shard);
        }
    }

    /// Adds a watcher's ranges to the shard router, or removes them: to the spare copy, outside
    /// the state lock; then, under it, swaps the copies (O(1)); then copies the slots that wrote
    /// to the other copy, which no dispatch reads any more. Concurrent changes wait for each
    /// other on the spare's lock, never for the state lock's holders. Returns how long the
    /// state lock was held.
    fn change_shards(&self, change: ShardChange, shard: &ShardSelector) -> Duration {
        let mut guard = self.shard_spare.lock();
        let Some(spare) = guard.as_mut() else {
            return Duration::ZERO;
        };
        match change {
            ShardChange::Added(id) => spare.add(id, shard),
            ShardChange::Removed(id) => spare.remove(id, shard),
        }
        let patch = spare.take_patch();
        let mut st = self.state.write();
        let held = Instant::now();
        st.registry.swap_shards(spare, change);
        let took = held.elapsed();
        drop(st);
        spare.apply(patch);
        took
    }

    /// Refills a parked watcher's queue from history (see [`Watcher::catch_up`]).
    pub(crate) fn catch_up(&self, watcher: &Watcher) -> Result<(), Evicted> {
        let st = self.state.read();
        watcher.catch_up(&self.schema, &st.history)
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let st = self.state.read();
        let (routed, unrouted) = st.registry.counts();
        let m = &self.metrics;
        CacheStats {
            resource_version: st.rv,
            objects: st.store.len(),
            history_len: st.history.len(),
            history_capacity: st.history.capacity(),
            history_bytes: st.history.bytes(),
            routed_watchers: routed,
            unrouted_watchers: unrouted,
            events: Metrics::get(&m.events),
            delivered: Metrics::get(&m.delivered),
            parked: Metrics::get(&m.parked),
            expired: Metrics::get(&m.expired),
            decode_errors: Metrics::get(&m.decode_errors),
            misplaced_values: Metrics::get(&m.misplaced),
            resyncs: Metrics::get(&m.resyncs),
            upstream_failures: Metrics::get(&m.upstream_failures),
            fresh_reads: self.fresh_reads.reads(),
            fresh_by_selection: Metrics::get(&m.fresh_by_selection),
            ready: matches!(st.readiness, Readiness::Ready),
            object_bytes: st.store.bytes() as u64,
            queued_latency: m.queued.snapshot(),
            read_wait: m.read_wait.snapshot(),
            registration_holds: m.registration_holds.snapshot(),
            refused_not_ready: Metrics::get(&m.refused_not_ready),
            refused_timeout: Metrics::get(&m.refused_timeout),
            refused_upstream: Metrics::get(&m.refused_upstream),
            consistency_checks: ConsistencyChecks {
                success: Metrics::get(&m.checks[0]),
                failure: Metrics::get(&m.checks[1]),
                error: Metrics::get(&m.checks[2]),
            },
        }
    }

    // ---- consistency check ----

    /// Counts a finished consistency check.
    pub(crate) fn record_check(&self, status: CheckStatus) {
        let i = match status {
            CheckStatus::Success => 0,
            CheckStatus::Failure => 1,
            CheckStatus::Error => 2,
        };
        Metrics::add(&self.metrics.checks[i], 1);
    }

    /// One page of the store at revision `at` as (key, revision) pairs, after key `after`:
    /// the cache's side of a consistency check. One read-lock hold of at most `limit` objects
    /// plus the events since `at`.
    ///
    /// # Errors
    /// [`Evicted`] when `at` left the history window.
    pub(crate) fn entries_at(
        &self,
        at: u64,
        all: &Predicate,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Entry>, bool), Evicted> {
        let st = self.state.read();
        let seq = st.history.seq_after_rv(at)?;
        let rollback = Rollback::since(&st.history, seq)?;
        let page = list::page(&self.schema, &st.store, &rollback, all, after, Some(limit));
        drop(st);
        let entries = page
            .items
            .iter()
            // A copy of each key: the check is occasional, and holding the objects would keep
            // states the cache has since replaced.
            .map(|o| (Arc::from(o.key()), o.resource_version()))
            .collect();
        Ok((entries, page.more))
    }

    /// The test hook: corrupts the store without history or fan-out (see [`Corruption`]).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn corrupt(&self, c: Corruption) {
        let mut st = self.state.write();
        warn!(resource = %self.schema.def.plural, corruption = ?c, "test hook: corrupting the cache");
        match c {
            Corruption::MissNext(key) => {
                st.missed.insert(key);
            }
            Corruption::Forget(key) => {
                st.store.remove(&self.schema, &key);
            }
            Corruption::Plant(o) => {
                st.store.upsert(&self.schema, o);
            }
        }
    }
}

// ---- the writer: the one handle that changes a cache ----

/// The writer of one [`Cache`]: the feeder's handle. Not `Clone`, so "one feeder per cache" is a
/// property of the types, not of prose: whoever holds it is the only one who can apply, resync,
/// report progress or move the cache's readiness. A [`Resync`] borrows it mutably, so nothing is
/// applied while a relist is being read.
///
/// Dropping the writer leaves the cache as it is (readers keep reading); a cache that was not
/// ready then never becomes ready, and [`Cache::wait_ready`] says so instead of waiting forever.
pub struct CacheWriter {
    cache: Cache,
    /// The wakers of watchers that an apply queued events for, woken once the state lock is
    /// released (not under it, where a woken consumer would only wait). Kept to reuse its
    /// allocation.
    wakes: Vec<Waker>,
}

impl std::fmt::Debug for CacheWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheWriter")
            .field("resource", &self.cache.definition().plural)
            .finish()
    }
}

impl Drop for CacheWriter {
    fn drop(&mut self) {
        self.wake();
        self.cache.shared.abandon();
    }
}

impl CacheWriter {
    pub(crate) fn new(cache: Cache) -> CacheWriter {
        CacheWriter {
            cache,
            wakes: Vec::new(),
        }
    }

    fn wake(&mut self) {
        self.wakes.drain(..).for_each(Waker::wake);
    }

    /// The cache this writer feeds, as its readers see it (decoding, revision, reads).
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Sets the upstream the cache's consistent reads consult (see [`Cache::set_upstream`]).
    pub fn set_upstream(&self, upstream: Arc<dyn Upstream>) {
        self.cache.set_upstream(upstream);
    }

    /// Applies the changes of one revision: store, indexes, history, and fan-out to watchers.
    /// A deletion of an unknown key is ignored.
    ///
    /// # Errors
    /// [`OutOfOrder`] when `rv` is not above the cache's revision; nothing is applied.
    pub fn apply(
        &mut self,
        rv: u64,
        changes: impl IntoIterator<Item = Change>,
    ) -> Result<(), OutOfOrder> {
        let applied = self.cache.shared.apply(rv, changes, &mut self.wakes);
        self.wake();
        applied
    }

    /// Records that the upstream has no changes up to `rv` (etcd progress notification): readers
    /// waiting for `rv` proceed and bookmarks may carry it.
    pub fn progress(&mut self, rv: u64) {
        self.cache.shared.progress(rv);
    }

    /// Starts a resync to the upstream's full state at revision `rv`: the initial sync, or a relist
    /// after a compaction or an unrecoverable watch break. Feed it page by page, then
    /// [`finish`](Resync::finish) it.
    pub fn resync(&mut self, rv: u64) -> Resync<'_> {
        Resync::new(&self.cache.shared, rv)
    }

    /// Counts one failure of the upstream that the feeder retries (see
    /// [`CacheStats::upstream_failures`](crate::CacheStats::upstream_failures)).
    pub fn count_upstream_failure(&mut self) {
        let m = self.cache.shared.metrics();
        Metrics::add(&m.upstream_failures, 1);
    }

    /// Marks the cache not ready (reads answer 429 with a Retry-After that grows with the downtime),
    /// e.g. while its upstream is unavailable. A finished [`Resync`] or
    /// [`set_ready`](CacheWriter::set_ready) makes it ready again. Has no effect unless the cache
    /// is ready (before the initial sync finished, say); returns whether it had one.
    pub fn set_not_ready(&mut self, why: impl Into<String>) -> bool {
        self.cache.shared.set_not_ready(why.into())
    }

    /// Marks the cache ready again, after [`set_not_ready`](CacheWriter::set_not_ready), when the
    /// upstream recovered without a relist. Returns whether it had an effect.
    pub fn set_ready(&mut self) -> bool {
        self.cache.shared.set_ready()
    }

    /// The upstream does not serve this resource (it answered its collection with 404: a custom
    /// resource whose CRD is not installed). The cache is not ready, but a server does not wait
    /// for it (`/readyz` leaves it out, proxy mode forwards its requests); the next finished
    /// [`resync`](CacheWriter::resync) makes it ready. Returns whether it was not absent before.
    pub fn set_absent(&mut self) -> bool {
        self.cache.shared.set_absent()
    }

    /// The upstream's history was replaced: its revision went backwards (etcd wiped, or restored
    /// from a backup, on the same URL). Positions no longer mean anything, so every watcher ends
    /// with 410 Expired (clients relist), the store and history are emptied, and the cache is not
    /// ready until the next [`resync`](CacheWriter::resync) finishes, which loads the upstream's
    /// state at its own, possibly lower, revision.
    pub fn reset(&mut self, why: impl Into<String>) {
        self.cache.shared.reset(why.into());
    }
}

// ---- a resync in progress: the initial sync, or a relist after a compaction or an
// unrecoverable watch break. It keeps only the listed keys and the objects that differ from the
// cache, never a second copy of the whole data set; `finish` applies the difference through the
// same commit as live events. ----

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::testing::{Fixture, on_node};
    use crate::model::Selection;

    fn shared() -> (Shared, Fixture) {
        let f = Fixture::new();
        let shared = Shared::new(
            Schema::new(ResourceDef::builtin("pods").unwrap()),
            CacheConfig::default(),
        );
        (shared, f)
    }

    use crate::model::ResourceDef;

    /// The keys of pods in namespace `ns`, as a relist reports what it saw.
    fn keys(f: &Fixture, names: &[&str]) -> HashSet<ObjectKey> {
        names
            .iter()
            .map(|n| f.pod(n, "n1", 1).key_owned())
            .collect()
    }

    #[test]
    fn live_apply_and_resync_commit_the_same_way() {
        let (s, f) = shared();
        let out = s.finish_resync(
            1,
            vec![f.pod("a", "n1", 1), f.pod("b", "n1", 1)],
            &keys(&f, &["a", "b"]),
            2,
        );
        assert_eq!((out.listed, out.added), (2, 2));
        assert_eq!(s.stats().events, 0, "the first sync is silent");
        let r = s
            .register(
                Predicate::compile(&s.schema, &on_node("n1")),
                From::After(1),
            )
            .unwrap();
        s.apply(2, [Change::Put(f.pod("a", "n1", 2))], &mut Vec::new())
            .unwrap();
        // A relist at 5 that no longer has b and has a changed, c new.
        let out = s.finish_resync(
            5,
            vec![f.pod("a", "n2", 4), f.pod("c", "n1", 3)],
            &keys(&f, &["a", "c"]),
            2,
        );
        assert_eq!((out.added, out.modified, out.deleted), (1, 1, 1));
        let stats = s.stats();
        assert_eq!(
            (stats.events, stats.resyncs, stats.resource_version),
            (4, 1, 5)
        );
        assert_eq!(
            stats.delivered, 4,
            "live and resync deliveries are both counted"
        );
        let q: Vec<_> = r
            .watcher
            .queue
            .lock()
            .items
            .iter()
            .map(|d| (d.kind, d.event.rv))
            .collect();
        use crate::model::EventType::*;
        assert_eq!(q, [(Modified, 2), (Added, 5), (Deleted, 5), (Deleted, 5)]);
        assert_eq!(
            s.register(
                Predicate::compile(&s.schema, &on_node("n1")),
                From::After(4)
            )
            .err(),
            Some(Evicted { oldest: 5 }),
            "positions before the resync are gone"
        );
    }

    #[test]
    fn entries_at_a_revision_roll_back_later_changes_and_see_corruption() {
        let (s, f) = shared();
        s.finish_resync(
            3,
            vec![f.pod("a", "n1", 2), f.pod("b", "n1", 3)],
            &keys(&f, &["a", "b"]),
            2,
        );
        s.apply(4, [Change::Put(f.pod("c", "n1", 4))], &mut Vec::new())
            .unwrap();
        s.apply(5, [Change::Put(f.pod("a", "n1", 5))], &mut Vec::new())
            .unwrap();
        let all = Predicate::compile(&s.schema, &Selection::all());
        let at = |n: u64, after: Option<&str>, limit: usize| {
            let (e, more) = s.entries_at(n, &all, after, limit).unwrap();
            let e: Vec<(String, u64)> = e.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            (e, more)
        };
        let k = |n: &str| format!("/registry/pods/ns/{n}");
        assert_eq!(at(3, None, 10), (vec![(k("a"), 2), (k("b"), 3)], false));
        assert_eq!(at(4, None, 1), (vec![(k("a"), 2)], true));
        assert_eq!(
            at(5, Some(&k("a")), 10),
            (vec![(k("b"), 3), (k("c"), 4)], false)
        );
        // The hook: b forgotten, a ghost planted, c's next change missed.
        s.corrupt(Corruption::Forget(k("b")));
        s.corrupt(Corruption::Plant(f.pod("g", "n1", 5)));
        s.corrupt(Corruption::MissNext(k("c")));
        s.apply(6, [Change::Delete(k("c"))], &mut Vec::new())
            .unwrap();
        assert_eq!(
            at(6, None, 10).0,
            [(k("a"), 5), (k("c"), 4), (k("g"), 5)],
            "the store differs, and nothing was dispatched for it"
        );
        assert_eq!(s.stats().events, 2, "the missed delete is no event");
    }

    #[test]
    fn a_relist_keeps_no_copy_of_unchanged_objects() {
        let (s, f) = shared();
        let mut r = Resync::new(&s, 1);
        r.add_page(vec![f.pod("a", "n1", 1)]);
        r.finish();
        let (same, new) = (f.pod("a", "n1", 1), f.pod("b", "n1", 2));
        let mut r = Resync::new(&s, 2);
        r.add_page(vec![same.clone(), new.clone()]);
        assert_eq!(
            same.refs(),
            1,
            "the listed copy of an unchanged object is not kept"
        );
        assert_eq!(
            new.refs(),
            3,
            "a changed one is kept, to apply: once as a key"
        );
        let out = r.finish();
        assert_eq!((out.added, out.modified, out.deleted), (1, 0, 0));
    }

    #[test]
    fn a_reset_expires_every_watcher_and_the_next_resync_may_go_back() {
        let (s, f) = shared();
        s.finish_resync(10, vec![f.pod("a", "n1", 9)], &keys(&f, &["a"]), 1);
        let routed = s
            .register(
                Predicate::compile(&s.schema, &on_node("n1")),
                From::After(10),
            )
            .unwrap();
        let all = s
            .register(
                Predicate::compile(&s.schema, &Selection::all()),
                From::After(10),
            )
            .unwrap();
        s.apply(11, [Change::Put(f.pod("b", "n1", 11))], &mut Vec::new())
            .unwrap();
        s.reset("etcd went back".into());
        assert!(!s.is_ready());
        assert!(
            s.check_ready()
                .unwrap_err()
                .to_string()
                .contains("etcd went back")
        );
        for r in [&routed, &all] {
            assert!(
                r.watcher.queue.lock().items.is_empty(),
                "queued events dropped"
            );
            assert!(s.catch_up(&r.watcher).is_err(), "ended with 410");
        }
        assert!(
            s.register(
                Predicate::compile(&s.schema, &Selection::all()),
                From::SnapshotAt(u64::MAX)
            )
            .is_err(),
            "no new watcher before the resync"
        );
        s.set_ready();
        assert!(!s.is_ready(), "only a resync ends the reset");
        let out = s.finish_resync(3, vec![f.pod("c", "n2", 2)], &keys(&f, &["c"]), 1);
        assert_eq!(
            (out.added, out.deleted),
            (1, 0),
            "loaded silently into an empty store"
        );
        assert!(s.is_ready());
        assert_eq!(s.resource_version(), 3, "the revision went back with etcd");
        assert!(s.get("/registry/pods/ns/a").is_none());
        assert!(s.get("/registry/pods/ns/c").is_some());
        assert_eq!(
            s.stats().events,
            1,
            "the reload is silent: only b's live event counted"
        );
        s.apply(4, [Change::Put(f.pod("c", "n1", 4))], &mut Vec::new())
            .unwrap();
        assert_eq!(s.resource_version(), 4);
    }
}

#[cfg(test)]
mod writer_tests {
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake};

    use futures_util::Stream;

    use super::*;
    use crate::cache::testing::{Fixture, on_node};
    use crate::cache::{CacheConfig, WatchOptions};
    use crate::model::{ResourceDef, ResourceVersion};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn put(name: &str, node: &str, rv: u64) -> Change {
        Change::Put(Fixture::new().pod(name, node, rv))
    }

    #[tokio::test]
    async fn an_apply_wakes_the_watchers_it_queued_for_and_no_others() {
        let (cache, mut writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        writer.resync(1).finish();
        let mut s = cache
            .watch(WatchOptions::new(on_node("n1"), ResourceVersion::At(1)))
            .await
            .unwrap();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let mut poll = |s: &mut crate::cache::WatchStream| match Pin::new(s).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(ev))) => Some(ev.resource_version()),
            Poll::Pending => None,
            other => panic!(
                "{:?}",
                other.map(|o| o.map(|r| r.map(|e| e.resource_version())))
            ),
        };
        assert_eq!(poll(&mut s), None);
        writer.apply(2, [put("a", "n2", 2)]).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "another node's pod");
        writer.apply(3, [put("b", "n1", 3)]).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        writer.apply(4, [put("c", "n1", 4)]).unwrap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "not polled since: its waker was used"
        );
        let got: Vec<_> = std::iter::from_fn(|| poll(&mut s)).collect();
        assert_eq!(got, [3, 4]);
        writer.apply(5, [put("d", "n1", 5)]).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }
}

//! `/metrics` in the Prometheus text format (prometheus-client). Gauges and counters are read from
//! each cache's stats at scrape time; what requests and watches do is recorded in the server.
//!
//! kube-apiserver's names and labels where it has the metric (`apiserver_request_total`,
//! `apiserver_request_duration_seconds`, `apiserver_longrunning_requests`,
//! `apiserver_registered_watchers`, `apiserver_watch_events_total`, `apiserver_watch_events_sizes`,
//! `apiserver_watch_cache_read_wait_seconds`), `watchcache_` for the rest (design/semantics.md,
//! "Metrics", lists them all).
//!
//! Label values are bounded: verbs and scopes are upstream's fixed sets, codes are HTTP codes,
//! and resource labels name only what this server serves (a request for anything else is counted
//! with empty group, version and resource), so no client can grow the series.
//!
//! Per event, a watch touches only atomics: its resource's counters and histograms
//! ([`WatchMeters`], made once per resource and shared by its watches) and the atomic
//! histograms of `watchcache::histogram`. Lock order: `watch_meters` and `watch_kinds` are leaves,
//! taken at a watch's start (one, then the other, never together) and at scrape time, never
//! while another lock is held.
//!
//! Layer: below `auth/` and every handler, which record here; it knows no request (a request's
//! labels, [`RequestKey`], are made where the request is: `auth/attributes.rs`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use watchcache::Cache;
use watchcache::ResourceDef;
use watchcache::histogram::{self, HistogramSnapshot};
use watchcache::wire::convert::MadeCounter;
use watchcache::wire::format::{Fields, Format};

/// Labels naming one resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// The plural name.
    pub resource: String,
}

/// Labels of the watch-start counter: the resource, and how the watch starts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WatchStartLabels {
    group: String,
    resource: String,
    /// [`WatchStart::label`].
    start: &'static str,
}

/// How a watch starts: what tells a resume from a relist in a rollout, where a watch ended by
/// a drain should come back as `resume`, never as one of the starts that send the state again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchStart {
    /// From a resourceVersion, without initial events: a reflector resuming.
    Resume,
    /// `sendInitialEvents=true`: a WatchList, which is a relist.
    InitialEvents,
    /// resourceVersion unset or `0` without `sendInitialEvents`: the legacy start that sends the
    /// state as ADDED events first, also a relist.
    State,
    /// resourceVersion unset or `0` with `sendInitialEvents=false`: changes from now on.
    Now,
    /// Answered 410: the resourceVersion is older than the window (the client relists next).
    Expired,
}

impl WatchStart {
    /// How a watch with these options starts, when its start is not older than the window.
    pub(crate) fn of(opts: &watchcache::WatchOptions) -> WatchStart {
        use watchcache::ResourceVersion;
        match (opts.send_initial_events, opts.resource_version) {
            (Some(true), _) => WatchStart::InitialEvents,
            (_, ResourceVersion::At(_)) => WatchStart::Resume,
            (Some(false), _) => WatchStart::Now,
            (None, _) => WatchStart::State,
        }
    }

    fn label(self) -> &'static str {
        match self {
            WatchStart::Resume => "resume",
            WatchStart::InitialEvents => "initial_events",
            WatchStart::State => "state",
            WatchStart::Now => "now",
            WatchStart::Expired => "expired",
        }
    }
}

/// Labels of the watcher gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatcherLabels {
    resource: String,
    routing: String,
}

/// Labels of the connection counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionLabels {
    /// `tcp` or `tls`.
    pub transport: &'static str,
    /// `http/1.1` or `h2`.
    pub protocol: &'static str,
}

/// The label of the accept-error and refused-connection counters: one of a fixed set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Accept errors: `EMFILE`, `ENFILE` or `other`. Refusals: `max_connections`, `idle` or
    /// `idle_per_address`.
    pub reason: &'static str,
}

/// What a request is, as kube-apiserver labels its request metrics (`component` is always
/// `apiserver`, `dry_run` empty: nothing here is a dry run).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestKey {
    pub(crate) verb: &'static str,
    pub(crate) dry_run: &'static str,
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
    pub(crate) subresource: &'static str,
    pub(crate) scope: &'static str,
    pub(crate) component: &'static str,
}

/// [`RequestKey`] and the answer's HTTP code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestCode {
    verb: &'static str,
    dry_run: &'static str,
    group: String,
    version: String,
    resource: String,
    subresource: &'static str,
    scope: &'static str,
    component: &'static str,
    code: String,
}

impl RequestKey {
    fn with_code(&self, code: u16) -> RequestCode {
        RequestCode {
            verb: self.verb,
            dry_run: self.dry_run,
            group: self.group.clone(),
            version: self.version.clone(),
            resource: self.resource.clone(),
            subresource: self.subresource,
            scope: self.scope,
            component: self.component,
            code: code.to_string(),
        }
    }
}

/// A watch conversion's labels: resource, format and fields.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConversionLabels {
    resource: String,
    format: &'static str,
    fields: &'static str,
}

/// kube-apiserver's labels of watch event metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    group: String,
    version: String,
    kind: String,
}

impl KindLabels {
    fn of(def: &ResourceDef) -> KindLabels {
        KindLabels {
            group: def.group.clone(),
            version: def.version.clone(),
            kind: def.kind.clone(),
        }
    }
}

/// A dispatch stage of one resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    resource: String,
    stage: &'static str,
}

/// Bytes sent, by resource and verb.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SentLabels {
    resource: String,
    verb: &'static str,
}

/// Group and resource (`apiserver_watch_cache_read_wait_seconds`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupResource {
    group: String,
    resource: String,
}

/// kube-apiserver's labels of `apiserver_storage_consistency_checks_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    group: String,
    resource: String,
    status: &'static str,
}

/// Reads refused, by resource and reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    resource: String,
    reason: &'static str,
}

/// An atomic histogram (`watchcache::histogram`) as a Prometheus histogram: its values divided by
/// `scale` (1e9: nanoseconds as seconds; 1: bytes).
#[derive(Debug, Clone)]
struct Observed {
    snapshot: HistogramSnapshot,
    scale: f64,
}

impl EncodeMetric for Observed {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.snapshot;
        let buckets: Vec<(f64, u64)> = s
            .bounds
            .iter()
            .map(|b| *b as f64 / self.scale)
            .chain(std::iter::once(f64::INFINITY))
            .zip(s.counts.iter().copied())
            .collect();
        encoder.encode_histogram::<NoLabelSet>(s.sum as f64 / self.scale, s.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Histograms read at scrape time, one per label set.
#[derive(Debug, Clone)]
struct Snapshots<L>(Arc<parking_lot::Mutex<Vec<(L, Observed)>>>);

impl<L> Snapshots<L> {
    fn new() -> Snapshots<L> {
        Snapshots(Arc::new(parking_lot::Mutex::new(Vec::new())))
    }

    fn push(&self, labels: L, snapshot: HistogramSnapshot, scale: f64) {
        self.0.lock().push((labels, Observed { snapshot, scale }));
    }
}

impl<L: EncodeLabelSet + std::fmt::Debug + Send + Sync> EncodeMetric for Snapshots<L> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, m) in self.0.lock().iter() {
            m.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Nanoseconds per second, the scale of latency histograms.
const NANOS: f64 = 1e9;

/// What is sent of one resource: its watches' events (shared by them: atomics only, a delivery
/// locks nothing), and its GET and LIST bytes.
#[derive(Debug)]
pub(crate) struct WatchMeters {
    def: ResourceDef,
    /// Events sent (`apiserver_watch_events_total`).
    events: AtomicU64,
    /// Their sizes in bytes (`apiserver_watch_events_sizes`).
    sizes: histogram::Histogram,
    /// From the change entering the cache's history to its frame written to the connection.
    written: histogram::Histogram,
    /// Bytes of frames sent.
    bytes: AtomicU64,
    /// Bytes of GET answers.
    get_bytes: AtomicU64,
    /// Bytes of LIST answers.
    list_bytes: AtomicU64,
}

/// What the watches of one request key share: their resource's [`WatchMeters`] and their series
/// of `apiserver_longrunning_requests` and `apiserver_request_duration_seconds`. Made once per
/// key (`ServerMetrics::watch_kinds`), so that a watch holds one pointer for them, not three
/// handles (an idle watch holds its meter for hours: design/performance.md).
pub(crate) struct WatchKind {
    meters: Arc<WatchMeters>,
    /// `None`: a watch that is no labelled request (not counted among the long-running ones).
    longrunning: Option<(Gauge, Histogram)>,
}

/// One watch's share of the metrics: its [`WatchKind`] (its resource's meters, its place in
/// `apiserver_longrunning_requests`, left when dropped, when its duration is recorded), when it
/// started, and the frame it sent last, recorded as written once the writer asks for the next
/// one.
pub(crate) struct WatchMeter {
    kind: Arc<WatchKind>,
    started: Stamp,
    pending: Option<Stamp>,
}

/// An instant as nanoseconds since [`EPOCH`], plus one: 8 bytes where an `Instant` is 16, twice
/// in every idle watch's meter (`Option` of it is 8 bytes too).
#[derive(Clone, Copy)]
struct Stamp(NonZeroU64);

/// The origin of [`Stamp`]s, set when the first [`ServerMetrics`] is made (before any watch): an
/// instant before it (an event that entered a cache before the server was made) counts as it.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

impl Stamp {
    fn of(at: Instant) -> Stamp {
        let nanos =
            u64::try_from(at.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX - 1);
        Stamp(NonZeroU64::new(nanos.saturating_add(1)).unwrap_or(NonZeroU64::MIN))
    }

    fn elapsed(self) -> Duration {
        EPOCH
            .elapsed()
            .saturating_sub(Duration::from_nanos(self.0.get() - 1))
    }
}

impl WatchMeter {
    /// Records a frame of `len` bytes going out for an event that entered the cache at
    /// `received` (`None`: initial events and bookmarks, which have no dispatch latency).
    pub(crate) fn sent(&mut self, len: usize, received: Option<Instant>) {
        let m = &self.kind.meters;
        m.events.fetch_add(1, Ordering::Relaxed);
        m.bytes.fetch_add(len as u64, Ordering::Relaxed);
        m.sizes.observe(len as u64);
        self.written();
        self.pending = received.map(Stamp::of);
    }

    /// The frame sent last has been written (or handed to the connection's writer).
    pub(crate) fn written(&mut self) {
        if let Some(at) = self.pending.take() {
            self.kind.meters.written.observe_duration(at.elapsed());
        }
    }
}

impl Drop for WatchMeter {
    fn drop(&mut self) {
        self.written();
        if let Some((gauge, seconds)) = &self.kind.longrunning {
            gauge.dec();
            seconds.observe(self.started.elapsed().as_secs_f64());
        }
    }
}

/// kube-apiserver's buckets of `apiserver_request_duration_seconds`.
const REQUEST_SECONDS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_SECONDS.iter().copied())
}

/// Metrics the server records as requests happen.
#[derive(Clone)]
pub struct ServerMetrics {
    /// LIST latency by resource.
    pub list_seconds: Family<ResourceLabel, Histogram>,
    /// Connections accepted (and not refused), by transport and protocol.
    pub connections: Family<ConnectionLabels, Counter<u64, AtomicU64>>,
    /// TLS handshakes that failed or timed out.
    pub tls_handshake_failures: Counter<u64, AtomicU64>,
    /// Failed accepts, by reason.
    pub accept_errors: Family<ReasonLabel, Counter<u64, AtomicU64>>,
    /// Connections refused at their accept, by the bound they met.
    pub connections_refused: Family<ReasonLabel, Counter<u64, AtomicU64>>,
    watch_starts: Family<WatchStartLabels, Counter<u64, AtomicU64>>,
    requests: Family<RequestCode, Counter<u64, AtomicU64>>,
    request_seconds: Family<RequestKey, Histogram, fn() -> Histogram>,
    longrunning: Family<RequestKey, Gauge>,
    conversions: Family<ConversionLabels, Counter<u64, AtomicU64>>,
    watch_meters: Arc<parking_lot::RwLock<HashMap<String, Arc<WatchMeters>>>>,
    /// The watches' shared handles by request key (a key names one served resource).
    watch_kinds: Arc<parking_lot::RwLock<HashMap<RequestKey, Arc<WatchKind>>>>,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        LazyLock::force(&EPOCH);
        ServerMetrics {
            list_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
            }),
            connections: Family::default(),
            tls_handshake_failures: Counter::default(),
            accept_errors: Family::default(),
            connections_refused: Family::default(),
            watch_starts: Family::default(),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(request_histogram),
            longrunning: Family::default(),
            conversions: Family::default(),
            watch_meters: Arc::default(),
            watch_kinds: Arc::default(),
        }
    }
}

impl ServerMetrics {
    /// Records one LIST.
    pub fn observe_list(&self, resource: &str, took: Duration) {
        self.list_seconds
            .get_or_create(&ResourceLabel {
                resource: resource.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// Records one accepted connection.
    pub(crate) fn count_connection(&self, tls: bool, h2: bool) {
        self.connections
            .get_or_create(&ConnectionLabels {
                transport: if tls { "tls" } else { "tcp" },
                protocol: if h2 { "h2" } else { "http/1.1" },
            })
            .inc();
    }

    /// Records one failed TLS handshake.
    pub(crate) fn count_handshake_failure(&self) {
        self.tls_handshake_failures.inc();
    }

    /// Records one failed accept (`reason`: [`crate::transport::accept::reason`]'s).
    pub(crate) fn count_accept_error(&self, reason: &'static str) {
        self.accept_errors
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Records one connection refused at its accept (`reason`: a `Refused`'s label).
    pub(crate) fn count_refused_connection(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Records one watch started (or answered 410) on `def`.
    pub(crate) fn count_watch_start(&self, def: &ResourceDef, start: WatchStart) {
        self.watch_starts
            .get_or_create(&WatchStartLabels {
                group: def.group.clone(),
                resource: def.plural.clone(),
                start: start.label(),
            })
            .inc();
    }

    /// Records one answered request (`apiserver_request_total`), and its duration unless it is
    /// a watch, whose duration is recorded when it ends.
    pub(crate) fn observe_request(&self, key: &RequestKey, code: u16, started: Instant) {
        self.requests.get_or_create(&key.with_code(code)).inc();
        if key.verb != "WATCH" || code != 200 {
            self.request_seconds
                .get_or_create(key)
                .observe(started.elapsed().as_secs_f64());
        }
    }

    /// Records the bytes of a GET (`list`: false) or LIST answer of a resource.
    pub(crate) fn count_sent(&self, def: &ResourceDef, list: bool, bytes: usize) {
        let m = self.meters(def);
        let c = if list { &m.list_bytes } else { &m.get_bytes };
        c.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The meters of a resource, made on first use.
    fn meters(&self, def: &ResourceDef) -> Arc<WatchMeters> {
        if let Some(m) = self.watch_meters.read().get(&def.plural) {
            return Arc::clone(m);
        }
        Arc::clone(
            self.watch_meters
                .write()
                .entry(def.plural.clone())
                .or_insert_with(|| {
                    Arc::new(WatchMeters {
                        def: def.clone(),
                        events: AtomicU64::new(0),
                        sizes: histogram::Histogram::new(histogram::EVENT_SIZE_BYTES),
                        written: histogram::Histogram::new(histogram::LATENCY_NANOS),
                        bytes: AtomicU64::new(0),
                        get_bytes: AtomicU64::new(0),
                        list_bytes: AtomicU64::new(0),
                    })
                }),
        )
    }

    /// The counter of watch conversions made for (resource, format, fields).
    pub(crate) fn conversions(
        &self,
        resource: &str,
        format: Format,
        fields: Fields,
    ) -> MadeCounter {
        let format = format.label();
        let made = self
            .conversions
            .get_or_create(&ConversionLabels {
                resource: resource.to_owned(),
                format,
                fields: fields.label(),
            })
            .clone();
        Box::new(move || {
            made.inc();
        })
    }

    /// A started watch's meter: its resource's shared counters, and, when it is a request with
    /// labels (`key`), its place among the long-running requests until it is dropped.
    pub(crate) fn watch(&self, def: &ResourceDef, key: Option<&RequestKey>) -> WatchMeter {
        let kind = match key {
            Some(k) => self.watch_kind(def, k),
            None => Arc::new(WatchKind {
                meters: self.meters(def),
                longrunning: None,
            }),
        };
        if let Some((gauge, _)) = &kind.longrunning {
            gauge.inc();
        }
        WatchMeter {
            kind,
            started: Stamp::of(Instant::now()),
            pending: None,
        }
    }

    /// The shared handles of the watches of `key` on `def`, made on first use. (`watch_kinds`
    /// and `watch_meters` are never held together.)
    fn watch_kind(&self, def: &ResourceDef, key: &RequestKey) -> Arc<WatchKind> {
        let of_def = |kind: &WatchKind| kind.meters.def.plural == def.plural;
        if let Some(kind) = self.watch_kinds.read().get(key)
            && of_def(kind)
        {
            return Arc::clone(kind);
        }
        let kind = Arc::new(WatchKind {
            meters: self.meters(def),
            longrunning: Some((
                self.longrunning.get_or_create(key).clone(),
                self.request_seconds.get_or_create(key).clone(),
            )),
        });
        match self.watch_kinds.write().entry(key.clone()) {
            Entry::Vacant(v) => Arc::clone(v.insert(kind)),
            Entry::Occupied(o) if of_def(o.get()) => Arc::clone(o.get()),
            // A key names one served resource, so this does not happen; were it another
            // resource's, the watch keeps handles of its own, counted the same.
            Entry::Occupied(_) => kind,
        }
    }
}

/// Renders every metric. The lag gauge compares each cache with its upstream's current revision,
/// read (for all caches at once) with a 1 s timeout; a cache whose upstream does not answer has no
/// lag sample.
/// The process's heap as its allocator wrapper counts it (the binary's `WATCHCACHE_HEAP_STATS=1`):
/// a diagnostic for where memory goes, exported as `watchcache_heap_live_bytes` and
/// `watchcache_heap_held_bytes` when set.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeapBytes {
    /// Bytes asked for by live allocations.
    pub live: i64,
    /// The same, each rounded up to the allocator's block for it.
    pub held: i64,
}

static HEAP: OnceLock<fn() -> HeapBytes> = OnceLock::new();

/// The block mimalloc (the binary's allocator) serves `size` bytes from: whole words up to 64 B,
/// then four size classes a power of two (`mi_bin` in mimalloc's `page.c`), e.g. 280 B from a
/// 320-byte block. What an allocation holds of the process's memory, for the heap counters of the
/// binary and of `examples/conn_memory.rs`. (Huge allocations, their own mappings, are not
/// rounded.)
#[must_use]
pub fn mimalloc_block(size: usize) -> usize {
    let words = size.max(1).div_ceil(8);
    let words = if words <= 8 {
        words
    } else {
        let b = usize::BITS - 1 - (words - 1).leading_zeros();
        words.next_multiple_of(1 << (b - 2))
    };
    words * 8
}

/// Has `/metrics` report the heap as `counter` counts it (the binary's counting allocator). Set
/// once; later calls are ignored.
pub fn count_heap_with(counter: fn() -> HeapBytes) {
    let _ = HEAP.set(counter);
}

pub(crate) async fn render(
    caches: &[&Cache],
    server: &ServerMetrics,
    inflight: Option<(usize, usize)>,
) -> String {
    let upstream_revs = futures_util::future::join_all(caches.iter().map(|c| async move {
        let up = c.upstream()?;
        tokio::time::timeout(Duration::from_secs(1), up.current_revision())
            .await
            .ok()?
            .ok()
    }))
    .await;
    let stats: Vec<_> = caches.iter().map(|c| c.stats()).collect();
    let mut root = Registry::default();
    register_upstream_names(&mut root, caches, &stats, server);
    let reg = root.sub_registry_with_prefix("watchcache");
    let watchers = Family::<WatcherLabels, Gauge>::default();
    let gauge = |name: &str, help: &str, reg: &mut Registry| {
        let f = Family::<ResourceLabel, Gauge>::default();
        reg.register(name, help, f.clone());
        f
    };
    let counter = |name: &str, help: &str, reg: &mut Registry| {
        let f = Family::<ResourceLabel, Counter<u64, AtomicU64>>::default();
        reg.register(name, help, f.clone());
        f
    };
    reg.register(
        "watchers",
        "Open watchers by resource and routing (routed by a trigger, or unrouted)",
        watchers.clone(),
    );
    if let Some((executing, waiting)) = inflight {
        // One priority level here, so no labels (upstream's `apiserver_flowcontrol_current_*`
        // have a priority level and a flow schema; never a user).
        for (name, help, n) in [
            (
                "current_executing_requests",
                "Requests holding a --max-requests-inflight seat",
                executing,
            ),
            (
                "current_inqueue_requests",
                "Requests waiting in the --max-requests-inflight queues",
                waiting,
            ),
        ] {
            let g = Gauge::<i64>::default();
            g.set(i64::try_from(n).unwrap_or(i64::MAX));
            reg.register(name, help, g);
        }
    }
    if let Some(count) = HEAP.get() {
        let heap = count();
        let live = Gauge::<i64>::default();
        live.set(heap.live);
        reg.register(
            "heap_live_bytes",
            "Bytes asked for by the process's live allocations (WATCHCACHE_HEAP_STATS=1)",
            live,
        );
        let held = Gauge::<i64>::default();
        held.set(heap.held);
        reg.register(
            "heap_held_bytes",
            "The live allocations in the allocator's blocks (WATCHCACHE_HEAP_STATS=1)",
            held,
        );
    }
    let received = counter(
        "events_received",
        "Events applied from the upstream",
        &mut *reg,
    );
    let dispatched = counter(
        "events_dispatched",
        "Event deliveries queued to watchers",
        &mut *reg,
    );
    let parked = counter(
        "watchers_parked",
        "Times a watcher's queue was full and it was parked to catch up from history",
        &mut *reg,
    );
    let expired = counter(
        "watchers_expired",
        "Watchers ended with 410 Expired",
        &mut *reg,
    );
    let decode_errors = counter(
        "decode_errors",
        "Stored values skipped because they could not be decoded",
        &mut *reg,
    );
    let misplaced = counter(
        "misplaced_values",
        "Stored values left unserved because their metadata names another object than their key (counted in decode_errors too)",
        &mut *reg,
    );
    let resyncs = counter("resyncs", "Relists after the initial sync", &mut *reg);
    let upstream_failures = counter(
        "upstream_failures",
        "Failures of the upstream (a sync, a watch opening, the watch: timeouts, lost connections, errors) the follower retried",
        &mut *reg,
    );
    let fresh_reads = counter(
        "fresh_reads",
        "Upstream reads that proved consistent reads fresh (shared by the reads waiting at once)",
        &mut *reg,
    );
    let fresh_by_selection = counter(
        "fresh_by_selection",
        "Of the fresh reads, proofs by selection that held: the cache selected exactly the upstream's objects at their resourceVersions, and the consistent reads waiting on it waited for no event",
        &mut *reg,
    );
    let rv = gauge("resource_version", "The cache's resourceVersion", &mut *reg);
    let lag = gauge(
        "lag_revisions",
        "The upstream's current revision minus the cache's",
        &mut *reg,
    );
    let history = gauge("history_events", "Events in the history window", &mut *reg);
    let capacity = gauge(
        "history_capacity",
        "Capacity of the history window",
        &mut *reg,
    );
    let history_bytes = gauge(
        "history_bytes",
        "Bytes the history window's events hold (what --history-bytes and [history] max_bytes cap)",
        &mut *reg,
    );
    let objects = gauge("objects", "Objects in the cache", &mut *reg);
    let ready = gauge("ready", "1 when the cache serves reads", &mut *reg);
    reg.register(
        "list_duration_seconds",
        "LIST latency",
        server.list_seconds.clone(),
    );
    reg.register(
        "connections",
        "Client connections accepted, by transport (tcp, tls) and protocol (http/1.1, h2)",
        server.connections.clone(),
    );
    reg.register(
        "tls_handshake_failures",
        "TLS handshakes that failed or timed out",
        server.tls_handshake_failures.clone(),
    );
    reg.register(
        "accept_errors",
        "Failed accepts, by reason (EMFILE, ENFILE: out of file descriptors; other); each pauses \
         accepting, 10 ms doubling to 1 s",
        server.accept_errors.clone(),
    );
    reg.register(
        "connections_refused",
        "Connections answered 503 and closed at their accept, by the bound they met \
         (max_connections, idle: max_idle_connections, idle_per_address: \
         max_idle_connections_per_address)",
        server.connections_refused.clone(),
    );
    reg.register(
        "watch_starts",
        "Watches started, by resource and how: resume (from a resourceVersion), initial_events \
         (sendInitialEvents=true, a WatchList), state (resourceVersion unset or 0: the state as \
         ADDED events first), now (sendInitialEvents=false), expired (answered 410 Gone)",
        server.watch_starts.clone(),
    );
    let object_bytes = gauge(
        "object_bytes",
        "Bytes of the cached objects as stored (their protobuf or JSON values)",
        &mut *reg,
    );
    let refusals = Family::<RefusalLabels, Counter<u64, AtomicU64>>::default();
    reg.register(
        "read_refusals",
        "Reads refused: the cache not ready (not_ready, 429), not fresh in time (timeout, 504), \
         or the upstream read proving freshness failed (upstream)",
        refusals.clone(),
    );
    let dispatch = Snapshots::<StageLabels>::new();
    reg.register(
        "dispatch_latency_seconds",
        "Time from a change entering the cache to: its events in every matching watcher's \
         queue (stage queued, once per applied revision), its frame written to a watcher's \
         connection (stage written, once per delivery)",
        dispatch.clone(),
    );
    let holds = Snapshots::<ResourceLabel>::new();
    reg.register(
        "watch_registration_lock_hold_seconds",
        "For each watch registered: its longest hold of the cache's lock (a sharded watch's \
         ranges are inserted into the shard router outside it)",
        holds.clone(),
    );
    reg.register(
        "watch_conversions",
        "Watch event bodies made in a variant (format, fields): each event once per variant, \
         however many watchers share it",
        server.conversions.clone(),
    );
    let sent = Family::<SentLabels, Counter<u64, AtomicU64>>::default();
    reg.register(
        "sent_bytes",
        "Bytes of GET and LIST bodies and WATCH frames sent, by resource and verb (before gzip)",
        sent.clone(),
    );
    for m in server.watch_meters.read().values() {
        let l = StageLabels {
            resource: m.def.plural.clone(),
            stage: "written",
        };
        dispatch.push(l, m.written.snapshot(), NANOS);
        for (verb, n) in [
            ("GET", &m.get_bytes),
            ("LIST", &m.list_bytes),
            ("WATCH", &m.bytes),
        ] {
            sent.get_or_create(&SentLabels {
                resource: m.def.plural.clone(),
                verb,
            })
            .inc_by(n.load(Ordering::Relaxed));
        }
    }
    for ((cache, upstream_rev), s) in caches.iter().zip(upstream_revs).zip(&stats) {
        let l = ResourceLabel {
            resource: cache.definition().plural.clone(),
        };
        let w = |routing: &str| WatcherLabels {
            resource: l.resource.clone(),
            routing: routing.into(),
        };
        watchers
            .get_or_create(&w("routed"))
            .set(s.routed_watchers as i64);
        watchers
            .get_or_create(&w("unrouted"))
            .set(s.unrouted_watchers as i64);
        received.get_or_create(&l).inc_by(s.events);
        dispatched.get_or_create(&l).inc_by(s.delivered);
        parked.get_or_create(&l).inc_by(s.parked);
        expired.get_or_create(&l).inc_by(s.expired);
        decode_errors.get_or_create(&l).inc_by(s.decode_errors);
        misplaced.get_or_create(&l).inc_by(s.misplaced_values);
        resyncs.get_or_create(&l).inc_by(s.resyncs);
        upstream_failures
            .get_or_create(&l)
            .inc_by(s.upstream_failures);
        fresh_reads.get_or_create(&l).inc_by(s.fresh_reads);
        fresh_by_selection
            .get_or_create(&l)
            .inc_by(s.fresh_by_selection);
        rv.get_or_create(&l).set(s.resource_version as i64);
        if let Some(e) = upstream_rev {
            lag.get_or_create(&l)
                .set(e.saturating_sub(s.resource_version) as i64);
        }
        history.get_or_create(&l).set(s.history_len as i64);
        capacity.get_or_create(&l).set(s.history_capacity as i64);
        history_bytes
            .get_or_create(&l)
            .set(i64::try_from(s.history_bytes).unwrap_or(i64::MAX));
        objects.get_or_create(&l).set(s.objects as i64);
        ready.get_or_create(&l).set(i64::from(s.ready));
        object_bytes
            .get_or_create(&l)
            .set(i64::try_from(s.object_bytes).unwrap_or(i64::MAX));
        dispatch.push(
            StageLabels {
                resource: l.resource.clone(),
                stage: "queued",
            },
            s.queued_latency.clone(),
            NANOS,
        );
        holds.push(l.clone(), s.registration_holds.clone(), NANOS);
        for (reason, n) in [
            ("not_ready", s.refused_not_ready),
            ("timeout", s.refused_timeout),
            ("upstream", s.refused_upstream),
        ] {
            refusals
                .get_or_create(&RefusalLabels {
                    resource: l.resource.clone(),
                    reason,
                })
                .inc_by(n);
        }
    }
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &root) {
        tracing::warn!(error = %e, "encoding metrics");
    }
    out
}

/// The metrics kube-apiserver has, under its names and labels.
fn register_upstream_names(
    reg: &mut Registry,
    caches: &[&Cache],
    stats: &[watchcache::CacheStats],
    server: &ServerMetrics,
) {
    reg.register(
        "apiserver_request",
        "Counter of apiserver requests broken out for each verb, dry run value, group, version, \
         resource, scope, component, and HTTP response code",
        server.requests.clone(),
    );
    reg.register(
        "apiserver_request_duration_seconds",
        "Response latency distribution in seconds for each verb, dry run value, group, version, \
         resource, subresource, scope and component (a WATCH when it ends)",
        server.request_seconds.clone(),
    );
    reg.register(
        "apiserver_longrunning_requests",
        "Gauge of all active long-running apiserver requests broken out by verb, group, version, \
         resource, scope and component",
        server.longrunning.clone(),
    );
    let registered = Family::<KindLabels, Gauge>::default();
    reg.register(
        "apiserver_registered_watchers",
        "Number of currently registered watchers for a given resources",
        registered.clone(),
    );
    let read_wait = Snapshots::<GroupResource>::new();
    reg.register(
        "apiserver_watch_cache_read_wait_seconds",
        "Histogram of time spent waiting for a watch cache to become fresh",
        read_wait.clone(),
    );
    let checks = Family::<CheckLabels, Counter<u64, AtomicU64>>::default();
    reg.register(
        "apiserver_storage_consistency_checks",
        "Counter for status of consistency checks between etcd and watch cache",
        checks.clone(),
    );
    for (cache, s) in caches.iter().zip(stats) {
        let def = cache.definition();
        let c = s.consistency_checks;
        if c.success + c.failure + c.error > 0 {
            for (status, n) in [
                ("success", c.success),
                ("failure", c.failure),
                ("error", c.error),
            ] {
                checks
                    .get_or_create(&CheckLabels {
                        group: def.group.clone(),
                        resource: def.plural.clone(),
                        status,
                    })
                    .inc_by(n);
            }
        }
        registered
            .get_or_create(&KindLabels::of(def))
            .set(i64::try_from(s.routed_watchers + s.unrouted_watchers).unwrap_or(i64::MAX));
        read_wait.push(
            GroupResource {
                group: def.group.clone(),
                resource: def.plural.clone(),
            },
            s.read_wait.clone(),
            NANOS,
        );
    }
    let events = Family::<KindLabels, Counter<u64, AtomicU64>>::default();
    reg.register(
        "apiserver_watch_events",
        "Number of events sent in watch clients",
        events.clone(),
    );
    let sizes = Snapshots::<KindLabels>::new();
    reg.register(
        "apiserver_watch_events_sizes",
        "Watch event size distribution in bytes",
        sizes.clone(),
    );
    for m in server.watch_meters.read().values() {
        let l = KindLabels::of(&m.def);
        events
            .get_or_create(&l)
            .inc_by(m.events.load(Ordering::Relaxed));
        sizes.push(l, m.sizes.snapshot(), 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::{WatchStart, mimalloc_block};
    use watchcache::WatchOptions;
    use watchcache::{ResourceVersion, Selection};

    #[test]
    fn a_watch_from_a_resource_version_is_a_resume_and_one_sending_the_state_is_not() {
        let of = |rv, initial| {
            let mut o = WatchOptions::new(Selection::default(), rv);
            o.send_initial_events = initial;
            WatchStart::of(&o)
        };
        assert_eq!(of(ResourceVersion::At(7), None), WatchStart::Resume);
        assert_eq!(of(ResourceVersion::At(7), Some(false)), WatchStart::Resume);
        assert_eq!(
            of(ResourceVersion::At(7), Some(true)),
            WatchStart::InitialEvents
        );
        assert_eq!(
            of(ResourceVersion::Unset, Some(true)),
            WatchStart::InitialEvents
        );
        assert_eq!(of(ResourceVersion::Any, None), WatchStart::State);
        assert_eq!(of(ResourceVersion::Unset, None), WatchStart::State);
        assert_eq!(of(ResourceVersion::Any, Some(false)), WatchStart::Now);
    }

    #[test]
    fn blocks_are_mimallocs_size_classes() {
        let blocks: Vec<usize> = [1, 8, 9, 64, 65, 72, 80, 81, 200, 256, 257, 280, 1000, 1025]
            .into_iter()
            .map(mimalloc_block)
            .collect();
        assert_eq!(
            blocks,
            [8, 8, 16, 64, 80, 80, 80, 96, 224, 256, 320, 320, 1024, 1280]
        );
    }
}

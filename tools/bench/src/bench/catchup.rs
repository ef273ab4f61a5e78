//! `--model catchup`: ingest from the upstream, measured as a catch-up after a partition.
//!
//! etcd on this machine writes a few thousand pods a second, far below what the cache ingests,
//! so the events are made first and replayed: the server runs with its watchers attached (W
//! routed by `spec.nodeName`, K routed by the `app` label), the link between it and etcd is cut
//! ([`Partition`]), E pod events (the churn's mix, each its own revision, stored as kube-apiserver
//! stores pods or as JSON) are written to etcd meanwhile, and the link is healed. The follower
//! resumes its watch at the revision it had (after its backoff: up to seconds, which is policy,
//! not ingest), etcd sends the backlog from its history, and the figure is E − 1 over the time
//! from the cache's resourceVersion reaching the backlog's first revision to its reaching the
//! last: decoding, indexes, history and fan-out to the watchers' queues included, with etcd
//! reading its history and the proxy forwarding on the same 2 cores. The time from the heal is
//! reported too. Every watcher's stream is then checked against etcd's history (exactly once,
//! in order, none lost).
//!
//! What the server under test follows (`--follow`):
//! - `etcd`: etcd replays the backlog, paced by etcd (at most 1 000 revisions per 100 ms for a
//!   watch that starts in the past), so the figure is etcd's;
//! - `root`: a root watchcache on etcd ingests the backlog live while the link to its leaf (the
//!   server under test, `--upstream-kubeconfig`) is cut, then replays it from its history window
//!   at the leaf's pace;
//! - `root-embedded`: the same, the leaf embedded in the bench's process as a library (what a
//!   controller embedding watchcache runs), its watchers in-process streams: the cache's ingest
//!   without 10 000 sockets' worth of HTTP delivery on the same two cores.
//!
//! `--warmup-events W` first writes W events with the link up, delivered live, so that the cache
//! catches up warm: its history window holds them and the catch-up reuses their memory, as in a
//! long-running cache, instead of growing the heap from fresh pages (which the kernel zeroes: a
//! fifth of a cold run's samples here).
//!
//! A fresh cache reading a long history was not chosen: a fresh cache lists the current state and
//! watches from there, so it never reads history event by event, and a LIST is not what a
//! follower does per event.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Txn, TxnOp};
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::{Semaphore, watch};
use tracing::{info, warn};

use super::load::{self, Churn, Counters, Recorder};
use super::partition::Partition;
use super::pods::{self, Codec, Storage};
use super::stack::{self, Stack};
use super::{BenchConfig, Mode, bar, procstat, verify, watchers};
use watchcache::{Cache, CacheConfig, ResourceDef, ResourceVersion, Selection, WatchOptions};
use watchcache_kube as apiserver;

/// Writes in flight while the backlog is written (etcd batches them into its commits).
const IN_FLIGHT: usize = 256;

/// What the server under test follows, through the partition proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Follow {
    /// etcd: etcd replays the backlog from its history, paced by etcd (a watch that starts in
    /// the past gets at most 1 000 revisions per 100 ms).
    Etcd,
    /// A root watchcache on etcd: the server under test is a leaf (`--upstream-kubeconfig`), and
    /// the root, which ingested the backlog live, replays it from its history window.
    Root,
    /// A root watchcache, followed by a leaf embedded in the bench's process as a library (what a
    /// controller embedding watchcache runs), its watchers in-process streams: the cache's ingest
    /// without the HTTP delivery to 10 000 sockets on the same two cores.
    RootEmbedded,
}

/// A catch-up run's parameters.
#[derive(Debug, Clone)]
pub(crate) struct CatchupConfig {
    /// Nodes (N); pods are spread over them.
    pub nodes: usize,
    /// Pods seeded before the watchers open (P).
    pub pods: usize,
    /// Per-node watchers (W), one per node for the first W nodes.
    pub watchers: usize,
    /// Label watchers (K), watcher k selecting `app=app-k`.
    pub label_watchers: usize,
    /// Distinct `app` labels: pod i is labelled `app=app-{i % apps}`.
    pub apps: usize,
    /// Events written while the link is cut (E).
    pub events: usize,
    /// Events written with the link up before the cut, delivered live: the cache under test then
    /// catches up warm (its history window full of them, their memory reused).
    pub warmup_events: usize,
    /// How the pods are stored in etcd.
    pub storage: Storage,
    /// What the server under test follows.
    pub follow: Follow,
    /// What the watchers ask for (HTTP watchers only).
    pub watch_wire: load::WatchWire,
    /// How a leaf (`--follow root`, `root-embedded`) reads its root's watch.
    pub leaf_wire: load::WatchWire,
    /// The watchcache binary to start the server from.
    pub server_binary: std::path::PathBuf,
    /// Where the local etcd keeps its data; default: the system temp dir.
    pub etcd_data_dir: Option<std::path::PathBuf>,
    /// The local etcd's `--snapshot-count`; `None`: etcd's default.
    pub etcd_snapshot_count: Option<u64>,
    /// How long to wait for the catch-up and for delivery.
    pub grace: Duration,
    /// Draw progress bars on stderr.
    pub progress: bool,
}

/// What a catch-up run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CatchupReport {
    pub follow: Follow,
    /// How the watchers read, and how a leaf read its root.
    pub watch_wire: load::WatchWire,
    pub leaf_wire: load::WatchWire,
    pub storage: Storage,
    pub events: u64,
    /// Events written and delivered live before the cut.
    pub warmup_events: u64,
    /// The local etcd's `--snapshot-count`, when set (`None`: etcd's default).
    pub etcd_snapshot_count: Option<u64>,
    pub pods: usize,
    pub watchers: usize,
    pub label_watchers: usize,
    pub watchers_connected: usize,
    /// Mean bytes of a value put in the backlog (deletions have none).
    pub stored_bytes_mean: f64,
    /// Writing the backlog to etcd: seconds, and writes/s (etcd's rate here).
    pub write_s: f64,
    pub writes_per_sec: f64,
    /// Heal → the cache's resourceVersion is the last revision.
    pub catchup_s: f64,
    pub events_per_sec: f64,
    /// The backlog's first revision in the cache → its last: the ingest rate (E − 1 events).
    pub ingest_s: f64,
    pub ingest_events_per_sec: f64,
    /// Heal → the last event received by a watcher.
    pub delivered_by_s: f64,
    /// The CPU of the server's follower thread (where a resource's ingest runs) over the ingest
    /// span; the clock ticks at 10 ms.
    pub ingest_thread_cpu_s: Option<f64>,
    /// Server CPU over the ingest span, and from the heal to the end of delivery.
    pub server_cpu_catchup_s: Option<f64>,
    pub server_cpu_delivery_s: Option<f64>,
    /// This process (watchers' clients, the proxy) over the same span as the delivery figure.
    pub client_cpu_s: Option<f64>,
    pub etcd_cpu_s: Option<f64>,
    /// The root's CPU from the heal to the end of delivery, when the server is a leaf.
    pub root_cpu_s: Option<f64>,
    pub server_rss_bytes: Option<u64>,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    pub unexpected: u64,
    pub watcher_errors: u64,
    /// The 1-minute load average before the heal and after delivery.
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
}

/// Runs the catch-up.
///
/// # Errors
/// What could not be set up or measured (etcd, the server, the catch-up not ending in time).
pub(crate) async fn run(cfg: CatchupConfig) -> Result<CatchupReport, String> {
    if cfg.watchers > cfg.nodes {
        return Err(format!(
            "--watchers ({}) cannot exceed --nodes ({})",
            cfg.watchers, cfg.nodes
        ));
    }
    let bench = BenchConfig {
        nodes: cfg.nodes,
        pods: cfg.pods,
        watchers: cfg.watchers,
        unrouted: cfg.label_watchers,
        rate: 1.0,
        duration: Duration::ZERO,
        mode: Mode::Cache,
        etcd: Vec::new(),
        server: None,
        server_binary: cfg.server_binary.clone(),
        delivery_grace: cfg.grace,
        progress: cfg.progress,
        etcd_data_dir: cfg.etcd_data_dir.clone(),
        etcd_snapshot_count: cfg.etcd_snapshot_count,
        tls: None,
        samples: None,
        burst: 0,
    };
    let (stack, partition, under_test) = match cfg.follow {
        Follow::Etcd => {
            let partition: Arc<Mutex<Option<Partition>>> = Arc::default();
            let stack = Stack::start_fronted(&bench, Mode::Cache, |etcd| {
                let p = Partition::start(etcd)?;
                let url = p.url.clone();
                *partition.lock() = Some(p);
                Ok(url)
            })
            .await?;
            let partition = partition
                .lock()
                .take()
                .ok_or("the partition proxy was not started")?;
            let url = stack.server_url.clone().ok_or("no server")?;
            (stack, partition, UnderTest::Http { url, leaf: None })
        }
        Follow::Root | Follow::RootEmbedded => {
            let stack = Stack::start(&bench, Mode::Cache).await?;
            let root = stack.server_url.clone().ok_or("no root server")?;
            let partition = Partition::start(&root)?;
            let rev = stack::current_revision(&stack.client).await?;
            let under_test = if cfg.follow == Follow::Root {
                let (url, leaf) = stack
                    .start_leaf(&bench, &partition.url, rev, cfg.leaf_wire)
                    .await?;
                UnderTest::Http {
                    url,
                    leaf: Some(leaf),
                }
            } else {
                let kubeconfig = stack.leaf_kubeconfig(&partition.url)?;
                let client = apiserver::client_from_kubeconfig(&kubeconfig, None)
                    .await
                    .map_err(|e| e.to_string())?;
                let pods = ResourceDef::builtin("pods").ok_or("no built-in pods")?;
                let caches = apiserver::ApiServerCaches::connect(
                    client,
                    apiserver::ApiServerConfig {
                        protobuf_watch: cfg.leaf_wire == load::WatchWire::Protobuf,
                        ..apiserver::ApiServerConfig::default()
                    },
                    vec![pods],
                    CacheConfig::default(),
                )
                .map_err(|e| e.to_string())?;
                let cache = caches.cache("pods").ok_or("no pods cache")?.clone();
                let t = UnderTest::Embedded {
                    _caches: caches,
                    cache,
                };
                t.reached(&stack, rev, cfg.grace).await?;
                t
            };
            (stack, partition, under_test)
        }
    };
    let codec = Arc::new(Codec::new()?);

    let b = bar(cfg.progress, cfg.pods as u64, "seeding");
    let start_rev = seed(&cfg, &stack.client, &codec, &b).await?;
    b.finish_and_clear();
    under_test.reached(&stack, start_rev, cfg.grace).await?;
    info!(pods = cfg.pods, revision = start_rev, "seeded");

    let total = cfg.watchers + cfg.label_watchers;
    let (stop, stop_rx) = watch::channel(false);
    let counters = Arc::new(Counters::default());
    let recorders: Vec<Arc<Recorder>> = (0..total).map(|_| Arc::new(Recorder::default())).collect();
    let http = stack.http_client();
    let b = bar(cfg.progress, total as u64, "watchers");
    let tasks = watchers::open_watchers(total, &counters, &b, |i| {
        let (rec, counters, stop) = (
            Arc::clone(&recorders[i]),
            Arc::clone(&counters),
            stop_rx.clone(),
        );
        let (field, label) = if i < cfg.watchers {
            (format!("spec.nodeName=node-{i}"), String::new())
        } else {
            (String::new(), format!("app=app-{}", i - cfg.watchers))
        };
        match &under_test {
            UnderTest::Http { url, .. } => {
                let encode = |s: &str| s.replace('=', "%3D");
                let u = format!(
                    "{url}/api/v1/pods?watch=1&resourceVersion={start_rev}\
                     &fieldSelector={}&labelSelector={}",
                    encode(&field),
                    encode(&label)
                );
                tokio::spawn(load::http_watcher(
                    http.clone(),
                    u,
                    cfg.watch_wire,
                    rec,
                    counters,
                    stop,
                ))
            }
            UnderTest::Embedded { cache, .. } => {
                let selection = Selection::parse(None, &field, &label)
                    .unwrap_or_else(|e| unreachable!("the bench's selectors parse: {e}"));
                let opts = WatchOptions::new(selection, ResourceVersion::At(start_rev));
                tokio::spawn(load::embedded_watcher(
                    cache.clone(),
                    opts,
                    rec,
                    counters,
                    stop,
                ))
            }
        }
    })
    .await;
    b.finish_and_clear();
    let connected = counters.connected.load(Ordering::Relaxed);
    info!(
        connected,
        failed = counters.failed.load(Ordering::Relaxed),
        "watchers open"
    );

    // One churn for both phases: it knows which pods exist.
    let churn = Arc::new(Mutex::new(
        Churn::new(cfg.pods, cfg.nodes).with_apps(cfg.apps),
    ));
    if cfg.warmup_events > 0 {
        let b = bar(cfg.progress, cfg.warmup_events as u64, "warm-up");
        let warm = backlog(cfg.warmup_events, &cfg, &churn, &stack.client, &codec, &b).await?;
        b.finish_and_clear();
        under_test.reached(&stack, warm.last_rev, cfg.grace).await?;
        load::until_quiet(&counters.received, cfg.grace, None).await;
        info!(
            events = warm.events,
            rev = warm.last_rev,
            "warm-up delivered"
        );
    }

    partition.cut();
    let b = bar(cfg.progress, cfg.events as u64, "backlog");
    let written = backlog(cfg.events, &cfg, &churn, &stack.client, &codec, &b).await?;
    b.finish_and_clear();
    let end_rev = written.last_rev;
    info!(
        events = written.events,
        end_rev,
        secs = written.secs,
        "backlog written; healing"
    );

    let cpu = |pid: Option<u32>| pid.and_then(procstat::cpu_seconds);
    // The server under test is the leaf when there is one; the root is then reported apart. An
    // embedded leaf is this process: its CPU is the server's, with its watchers and the proxy.
    let me = Some(std::process::id());
    let (server_pid, root_pid, me) = match &under_test {
        UnderTest::Http { leaf: Some(p), .. } => (Some(p.0.id()), stack.server_pid(), me),
        UnderTest::Http { leaf: None, .. } => (stack.server_pid(), None, me),
        UnderTest::Embedded { .. } => (me, stack.server_pid(), None),
    };
    let etcd_pid = stack.etcd_pid();
    let load_before = procstat::load_average();
    let (server0, etcd0, me0, root0) = (cpu(server_pid), cpu(etcd_pid), cpu(me), cpu(root_pid));
    let healed = partition.heal();
    let healed_us = pods::now_us();
    under_test
        .reached(&stack, written.first_rev, cfg.grace)
        .await?;
    let first = Instant::now();
    let server_first = cpu(server_pid);
    // The follower's thread: a resource's ingest runs on it alone.
    let ingest_thread =
        |pid: Option<u32>| pid.and_then(|p| procstat::thread_cpu_seconds(p, "watchcache-upstream"));
    let thread_first = ingest_thread(server_pid);
    under_test.reached(&stack, end_rev, cfg.grace).await?;
    let done = Instant::now();
    let server_caught = cpu(server_pid);
    let thread_caught = ingest_thread(server_pid);

    load::until_quiet(&counters.received, cfg.grace, None).await;
    let (server1, etcd1, me1, root1) = (cpu(server_pid), cpu(etcd_pid), cpu(me), cpu(root_pid));
    let load_after = procstat::load_average();
    let server_rss_bytes = server_pid.and_then(procstat::rss_bytes);

    let history = verify::history_with(&stack.client, start_rev, end_rev, &codec).await?;
    if stop.send(true).is_err() {
        warn!("watchers already gone");
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut tally = verify::Tally::default();
    let mut errors = counters.failed.load(Ordering::Relaxed) as u64;
    let mut last_at = healed_us;
    for (i, rec) in recorders.iter().enumerate() {
        let expected: Vec<(u64, u32)> = if i < cfg.watchers {
            verify::expected(&history, Some(i))
        } else {
            let app = i - cfg.watchers;
            history
                .iter()
                .filter(|c| c.id as usize % cfg.apps.max(1) == app)
                .map(|c| (c.rev, c.id))
                .collect()
        };
        let got = rec.events.lock();
        tally += verify::tally(&got, &expected, end_rev, |_, at| {
            last_at = last_at.max(at);
        });
        errors += rec.errors.load(Ordering::Relaxed);
    }
    drop(partition);
    drop(under_test);
    drop(stack);

    let events = written.events;
    let catchup_s = done.duration_since(healed).as_secs_f64();
    let ingest_s = done.duration_since(first).as_secs_f64();
    let spent = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| b - a);
    Ok(CatchupReport {
        follow: cfg.follow,
        watch_wire: cfg.watch_wire,
        leaf_wire: cfg.leaf_wire,
        storage: cfg.storage,
        events,
        warmup_events: cfg.warmup_events as u64,
        etcd_snapshot_count: cfg.etcd_snapshot_count,
        pods: cfg.pods,
        watchers: cfg.watchers,
        label_watchers: cfg.label_watchers,
        watchers_connected: connected,
        stored_bytes_mean: written.bytes as f64 / written.puts.max(1) as f64,
        write_s: written.secs,
        writes_per_sec: events as f64 / written.secs.max(1e-9),
        catchup_s,
        events_per_sec: events as f64 / catchup_s.max(1e-9),
        ingest_s,
        ingest_events_per_sec: events.saturating_sub(1) as f64 / ingest_s.max(1e-9),
        delivered_by_s: last_at.saturating_sub(healed_us) as f64 / 1e6,
        server_cpu_catchup_s: spent(server_first, server_caught),
        ingest_thread_cpu_s: spent(thread_first, thread_caught),
        server_cpu_delivery_s: spent(server0, server1),
        client_cpu_s: spent(me0, me1),
        etcd_cpu_s: spent(etcd0, etcd1),
        root_cpu_s: spent(root0, root1),
        server_rss_bytes,
        delivered: tally.delivered,
        lost: tally.lost,
        duplicated: tally.duplicated,
        out_of_order: tally.out_of_order,
        unexpected: tally.unexpected,
        watcher_errors: errors,
        load_before,
        load_after,
    })
}

/// Seeds the pods in transactions of 100 (pod i on node i % N); returns the revision.
async fn seed(
    cfg: &CatchupConfig,
    client: &etcd_client::Client,
    codec: &Arc<Codec>,
    b: &indicatif::ProgressBar,
) -> Result<u64, String> {
    let sem = Arc::new(Semaphore::new(8));
    let mut tasks = Vec::new();
    for from in (0..cfg.pods).step_by(100) {
        let permit = Arc::clone(&sem)
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let (mut kv, codec, b) = (client.kv_client(), Arc::clone(codec), b.clone());
        let (pods, nodes, apps, storage) = (cfg.pods, cfg.nodes, cfg.apps.max(1), cfg.storage);
        tasks.push(tokio::spawn(async move {
            let to = (from + 100).min(pods);
            let ops = (from..to)
                .map(|i| {
                    let key = pods::key(i);
                    let json = pods::json_app(i, i % nodes, i % apps, 1, 0);
                    let value = codec.stored(storage, &key, json)?;
                    Ok(TxnOp::put(key, value, None))
                })
                .collect::<Result<Vec<_>, String>>()?;
            let r = kv
                .txn(Txn::new().and_then(ops))
                .await
                .map_err(|e| format!("seeding: {e}"))?;
            b.inc((to - from) as u64);
            drop(permit);
            Ok::<u64, String>(r.header().map_or(0, |h| h.revision() as u64))
        }));
    }
    let mut rev = 0;
    for t in tasks {
        rev = rev.max(t.await.map_err(|e| e.to_string())??);
    }
    Ok(rev.max(stack::current_revision(client).await?))
}

/// What writing the backlog did.
struct Written {
    events: u64,
    first_rev: u64,
    puts: u64,
    last_rev: u64,
    bytes: u64,
    secs: f64,
}

/// Writes `events` churn events as fast as etcd takes them, each its own revision (a put or a
/// delete, as kube-apiserver writes).
async fn backlog(
    events: usize,
    cfg: &CatchupConfig,
    churn: &Arc<Mutex<Churn>>,
    client: &etcd_client::Client,
    codec: &Arc<Codec>,
    b: &indicatif::ProgressBar,
) -> Result<Written, String> {
    let first_rev = stack::current_revision(client).await? + 1;
    let sem = Arc::new(Semaphore::new(IN_FLIGHT));
    let last_rev = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let puts = Arc::new(AtomicU64::new(0));
    let failed: Arc<Mutex<Option<String>>> = Arc::default();
    let began = Instant::now();
    let mut issued = 0;
    while issued < events {
        if let Some(e) = failed.lock().take() {
            return Err(e);
        }
        let permit = Arc::clone(&sem)
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let Some(w) = churn.lock().next_write() else {
            drop(permit);
            tokio::task::yield_now().await;
            continue;
        };
        issued += 1;
        let (mut kv, codec, churn, b) = (
            client.kv_client(),
            Arc::clone(codec),
            Arc::clone(churn),
            b.clone(),
        );
        let (last_rev, bytes, puts, failed, storage) = (
            Arc::clone(&last_rev),
            Arc::clone(&bytes),
            Arc::clone(&puts),
            Arc::clone(&failed),
            cfg.storage,
        );
        tokio::spawn(async move {
            let key = pods::key(w.id);
            let r = match w.node {
                Some(node) => {
                    let json = pods::json_app(w.id, node, w.app, w.generation, pods::now_us());
                    match codec.stored(storage, &key, json) {
                        Ok(value) => {
                            bytes.fetch_add(value.len() as u64, Ordering::Relaxed);
                            puts.fetch_add(1, Ordering::Relaxed);
                            kv.put(key, value, None)
                                .await
                                .map(|r| r.header().map(|h| h.revision()))
                                .map_err(|e| e.to_string())
                        }
                        Err(e) => Err(e),
                    }
                }
                None => kv
                    .delete(key, None)
                    .await
                    .map(|r| r.header().map(|h| h.revision()))
                    .map_err(|e| e.to_string()),
            };
            match r {
                Ok(Some(rev)) => {
                    last_rev.fetch_max(rev as u64, Ordering::Relaxed);
                }
                Ok(None) => *failed.lock() = Some("a write without a header".into()),
                Err(e) => *failed.lock() = Some(format!("backlog write: {e}")),
            }
            churn.lock().done(w.id);
            b.inc(1);
            drop(permit);
        });
    }
    let _all = sem
        .acquire_many(IN_FLIGHT as u32)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(e) = failed.lock().take() {
        return Err(e);
    }
    Ok(Written {
        events: issued as u64,
        first_rev,
        puts: puts.load(Ordering::Relaxed),
        last_rev: last_rev.load(Ordering::Relaxed),
        bytes: bytes.load(Ordering::Relaxed),
        secs: began.elapsed().as_secs_f64(),
    })
}

/// The server under test.
enum UnderTest {
    /// A server process reached over HTTP: etcd's follower (the stack's server), or a leaf
    /// following the root (its process, stopped on drop).
    Http {
        url: String,
        leaf: Option<stack::ServerProcess>,
    },
    /// A leaf cache embedded in this process, following the root: what a controller that embeds
    /// the library runs, its watchers in-process streams.
    Embedded {
        /// Kept for its follower tasks, which stop on drop.
        _caches: apiserver::ApiServerCaches,
        cache: Cache,
    },
}

impl UnderTest {
    /// Waits until the cache's resourceVersion is at least `rev`, looking every 2 ms (1 ms
    /// embedded): over HTTP a LIST of one item not older than `rev`.
    async fn reached(&self, stack: &Stack, rev: u64, grace: Duration) -> Result<(), String> {
        let deadline = Instant::now() + grace;
        match self {
            UnderTest::Http { url, .. } => {
                let http = stack.http_client();
                let probe = format!(
                    "{url}/api/v1/pods?resourceVersion={rev}&resourceVersionMatch=NotOlderThan&limit=1"
                );
                while Instant::now() < deadline {
                    if http.text(&probe).await.is_ok() {
                        return Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            UnderTest::Embedded { cache, .. } => {
                while Instant::now() < deadline {
                    if cache.resource_version() >= rev {
                        return Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        Err(format!(
            "the cache did not reach revision {rev} within {grace:?}"
        ))
    }
}

/// The machine's 1-minute load average.
/// The report as a table.
pub(crate) fn table(r: &CatchupReport) -> String {
    let opt = |v: Option<f64>, d: usize| v.map_or("-".to_owned(), |v| format!("{v:.d$}"));
    let rows = [
        (
            "follows, storage",
            format!(
                "{}, {:?}",
                clap::ValueEnum::to_possible_value(&r.follow)
                    .map_or_else(String::new, |v| v.get_name().to_owned()),
                r.storage
            )
            .to_lowercase(),
        ),
        (
            "watchers read, a leaf reads its root",
            format!("{:?}, {:?}", r.watch_wire, r.leaf_wire).to_lowercase(),
        ),
        (
            "pods, watchers (node / label), connected",
            format!(
                "{}, {} / {}, {}",
                r.pods, r.watchers, r.label_watchers, r.watchers_connected
            ),
        ),
        (
            "warm-up events; backlog events, mean stored bytes",
            format!(
                "{}; {}, {:.0}",
                r.warmup_events, r.events, r.stored_bytes_mean
            ),
        ),
        (
            "etcd --snapshot-count",
            r.etcd_snapshot_count
                .map_or_else(|| "etcd's default".to_owned(), |n| n.to_string()),
        ),
        (
            "backlog written in s (writes/s)",
            format!("{:.2} ({:.0})", r.write_s, r.writes_per_sec),
        ),
        (
            "catch-up s from heal (events/s)",
            format!("{:.3} ({:.0})", r.catchup_s, r.events_per_sec),
        ),
        (
            "ingest s, first to last backlog revision (events/s)",
            format!("{:.3} ({:.0})", r.ingest_s, r.ingest_events_per_sec),
        ),
        (
            "last delivery s after heal",
            format!("{:.3}", r.delivered_by_s),
        ),
        (
            "ingest thread CPU s over the ingest span (µs per event)",
            match r.ingest_thread_cpu_s {
                Some(c) => format!("{c:.2} ({:.1})", c * 1e6 / r.events.max(1) as f64),
                None => "-".to_owned(),
            },
        ),
        (
            "server CPU s: ingest span, heal to delivery end",
            format!(
                "{}, {}",
                opt(r.server_cpu_catchup_s, 2),
                opt(r.server_cpu_delivery_s, 2)
            ),
        ),
        (
            "bench CPU s (clients, proxy), etcd CPU s, root CPU s",
            format!(
                "{}, {}, {}",
                opt(r.client_cpu_s, 2),
                opt(r.etcd_cpu_s, 2),
                opt(r.root_cpu_s, 2)
            ),
        ),
        (
            "server RSS MiB",
            opt(r.server_rss_bytes.map(|b| b as f64 / 1048576.0), 1),
        ),
        (
            "delivered; lost / duplicated / out of order / unexpected",
            format!(
                "{}; {} / {} / {} / {}",
                r.delivered, r.lost, r.duplicated, r.out_of_order, r.unexpected
            ),
        ),
        ("watcher errors", r.watcher_errors.to_string()),
        (
            "load average before / after",
            format!("{} / {}", opt(r.load_before, 2), opt(r.load_after, 2)),
        ),
    ];
    let mut out = String::from("| catch-up | |\n|---|---:|\n");
    for (k, v) in rows {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    out
}

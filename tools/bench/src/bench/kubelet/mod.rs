//! `watchcache-bench --model kubelet`: simulated nodes as kubelets connect, against watchcache and
//! kube-apiserver 1.35 on the same etcd, one after the other in one run.
//!
//! Each node opens ONE TLS connection with its own client certificate (CN `system:node:NAME`, O
//! `system:nodes`), HTTP/2, and over it its watches (`--watches-per-node`, 18 by default: see
//! [`objects::watches`]) in protobuf. Writes: the pod churn of the pods model, plus each node's
//! Lease renewed every `--lease-period` (10 s, as a kubelet), both from a thread with its own
//! runtime and etcd client ([`write_apart`]: a real writer is another process). A side's steps:
//! seed (etcd), start its server (after the seed, so it starts from a full store as a restarted server would), open
//! the connections (RSS measured), open the watches (RSS measured), open the same watches again on
//! the same connections and close them (RSS measured: what a further idle watch costs, once the
//! first set made each watched object's encoding), check that a node cannot watch another node's
//! pods (403), churn, await delivery, and check every pod stream against etcd's history: the
//! `spec.nodeName` path and the label-routed path. watchcache's own dispatch-latency histogram,
//! read before and after the churn, splits the delivery time ([`stages`]).

mod objects;
pub(super) mod pki;
mod report;
pub(crate) mod rollout;
pub(super) mod servers;
mod stages;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{info, warn};
use watchcache_etcd::LocalEtcd;

use super::http::Http;
use super::load::{self, Churn, Recorder};
use super::{Latency, TlsMode, bar, pods, procstat, stack, verify};
use objects::Path as WatchPath;
pub(crate) use report::{KubeletReport, KubeletRun, table};
pub(crate) use servers::Side;

/// Which servers a kubelet run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sides {
    /// watchcache only.
    Watchcache,
    /// kube-apiserver only.
    KubeApiserver,
    /// watchcache, then kube-apiserver, on the same etcd.
    Both,
}

/// A kubelet run's parameters.
#[derive(Debug, Clone)]
pub(crate) struct KubeletConfig {
    /// Simulated nodes (each one connection).
    pub nodes: usize,
    /// Churned pods seeded (plus one static pod per node).
    pub pods: usize,
    /// Watches per node.
    pub watches: usize,
    /// Pod writes per second.
    pub rate: f64,
    /// Churn duration.
    pub duration: Duration,
    /// Each node's Lease is renewed once per period.
    pub lease_period: Duration,
    pub sides: Sides,
    /// The watchcache binary.
    pub server_binary: PathBuf,
    /// watchcache counts its heap, and the heap per idle watch is reported next to the RSS.
    pub heap_stats: bool,
    /// kube-apiserver 1.35's binary.
    pub kube_apiserver: PathBuf,
    pub delivery_grace: Duration,
    pub progress: bool,
    /// Where the run's etcd keeps its data; default: the system temp dir.
    pub etcd_data_dir: Option<PathBuf>,
    /// The etcd to run (kube-apiserver 1.35 needs 3.5.13+ for its watch cache's progress
    /// requests); `None`: `etcd` from PATH.
    pub etcd_binary: Option<PathBuf>,
    /// How the pods are stored in etcd: protobuf as kube-apiserver writes them (what a real
    /// cluster's kubelets are served from), or JSON (each pod version then converted once for
    /// the protobuf watches).
    pub storage: pods::Storage,
}

/// The Accept header of a kubelet's watches.
const WATCH_ACCEPT: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// Runs the kubelet model.
///
/// # Errors
/// What could not be set up: etcd, a server, the connections.
pub(crate) async fn run(cfg: KubeletConfig) -> Result<KubeletRun, String> {
    if cfg.watches == 0 {
        return Err("--watches-per-node must be at least 1".into());
    }
    let scratch = Scratch::start(
        "kubelets",
        cfg.etcd_data_dir.as_deref(),
        cfg.etcd_binary.as_deref(),
    )
    .await?;
    let (dir, client) = (scratch.dir.clone(), scratch.client.clone());
    let pki = pki::Pki::new(&dir.join("pki"))?;
    let made = Instant::now();
    let node_tls = (0..cfg.nodes)
        .map(|n| pki.node(&format!("node-{n}")))
        .collect::<Result<Vec<_>, _>>()?;
    info!(nodes = cfg.nodes, took = ?made.elapsed(), "node certificates made");
    let sides: &[Side] = match cfg.sides {
        Sides::Watchcache => &[Side::Watchcache],
        Sides::KubeApiserver => &[Side::KubeApiserver],
        Sides::Both => &[Side::Watchcache, Side::KubeApiserver],
    };
    let ctx = Ctx {
        cfg: &cfg,
        client,
        endpoint: scratch.endpoint.clone(),
        etcd_pid: scratch.etcd.pid(),
        pki: &pki,
        node_tls: &node_tls,
        dir: &dir,
    };
    let mut out = Vec::new();
    for side in sides {
        out.push(run_side(&ctx, *side).await?);
    }
    drop(scratch);
    Ok(KubeletRun { sides: out })
}

/// A run's scratch directory, under `--etcd-data-dir` (else the system's temporary one), and a
/// fresh etcd in it; dropped, the etcd stops and then the directory goes.
pub(in crate::bench) struct Scratch {
    pub dir: PathBuf,
    pub etcd: LocalEtcd,
    pub endpoint: String,
    pub client: etcd_client::Client,
    // Last: removed once the etcd above has stopped.
    _cleanup: RemoveOnDrop,
}

impl Scratch {
    /// Named for the model (`label`), with `etcd_binary` when given (else `LocalEtcd`'s).
    pub(super) async fn start(
        label: &str,
        data_dir: Option<&std::path::Path>,
        etcd_binary: Option<&std::path::Path>,
    ) -> Result<Scratch, String> {
        let base = data_dir.map_or_else(std::env::temp_dir, ToOwned::to_owned);
        let dir = base.join(format!(
            "watchcache-{label}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cleanup = RemoveOnDrop(dir.clone());
        let etcd = match etcd_binary {
            Some(b) => LocalEtcd::start_binary(b, &dir.join("etcd")).await,
            None => LocalEtcd::start(&dir.join("etcd")).await,
        }
        .map_err(|e| e.to_string())?;
        let endpoint = etcd.url();
        let client = etcd_client::Client::connect([endpoint.as_str()], None)
            .await
            .map_err(|e| format!("etcd: {e}"))?;
        Ok(Scratch {
            dir,
            etcd,
            endpoint,
            client,
            _cleanup: cleanup,
        })
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        // WATCHCACHE_BENCH_KEEP=1 keeps the servers' logs (and etcd's data) to read after a run.
        if std::env::var_os("WATCHCACHE_BENCH_KEEP").is_some_and(|v| v == "1") {
            eprintln!("kept {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What every side shares.
struct Ctx<'a> {
    cfg: &'a KubeletConfig,
    client: etcd_client::Client,
    endpoint: String,
    etcd_pid: Option<u32>,
    pki: &'a pki::Pki,
    node_tls: &'a [Arc<rustls::ClientConfig>],
    dir: &'a std::path::Path,
}

/// Counters of the watch streams.
#[derive(Default)]
struct Streams {
    opened: AtomicUsize,
    forbidden: AtomicUsize,
    failed: AtomicUsize,
    /// 429 answers (each retried).
    too_many: AtomicU64,
    received: AtomicU64,
    /// Frames that did not read as a protobuf watch event.
    unreadable: AtomicU64,
    /// Events on the idle (non-pod) watches: their initial ADDED events.
    other_events: AtomicU64,
}

/// One watch: who, what, and what it recorded.
struct Stream {
    node: usize,
    what: WatchPath,
    rec: Arc<Recorder>,
}

async fn run_side(ctx: &Ctx<'_>, side: Side) -> Result<KubeletReport, String> {
    let cfg = ctx.cfg;
    info!(
        side = side.name(),
        nodes = cfg.nodes,
        watches = cfg.watches,
        "kubelet model"
    );
    // A second side starts from the same objects: the first side's churned pods go.
    ctx.client
        .kv_client()
        .delete(
            "/registry/pods/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    let b = bar_of(cfg, 0, "seeding");
    objects::seed(&ctx.client, cfg.nodes, cfg.watches, &b).await?;
    let codec = match cfg.storage {
        pods::Storage::Protobuf => Some(Arc::new(pods::Codec::new()?)),
        pods::Storage::Json => None,
    };
    load::seed(
        &ctx.client,
        cfg.pods,
        cfg.nodes,
        cfg.nodes,
        codec.clone(),
        &b,
    )
    .await
    .map_err(|e| format!("seeding: {e}"))?;
    b.finish_and_clear();
    let start_rev = stack::current_revision(&ctx.client).await?;
    let binary = match side {
        Side::Watchcache => &cfg.server_binary,
        Side::KubeApiserver => &cfg.kube_apiserver,
    };
    let (url, server) = servers::start(
        side,
        binary,
        &ctx.endpoint,
        ctx.pki,
        ctx.dir,
        cfg.heap_stats,
    )?;
    let pid = server.0.id();
    let admin = Http::tls(ctx.pki.admin(), TlsMode::H2);
    let started = Instant::now();
    if let Err(e) = ready(ctx, &admin, &url, start_rev).await {
        return Err(format!(
            "{}: {e}; the end of its log:\n{}",
            side.name(),
            servers::log_tail(side, ctx.dir)
        ));
    }
    info!(side = side.name(), took = ?started.elapsed(), "server ready");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Connections, then watches, each measured.
    let rss0 = procstat::rss_bytes(pid);
    let clients: Vec<Http> = ctx
        .node_tls
        .iter()
        .map(|c| Http::tls(Arc::clone(c), TlsMode::H2))
        .collect();
    let connected = connect_all(cfg, &clients, &url).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = procstat::rss_bytes(pid);
    let counters = Arc::new(Streams::default());
    let (stop, stop_rx) = watch::channel(false);
    let (streams, tasks) = open_watches(cfg, &clients, &url, start_rev, &counters, &stop_rx).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss2 = procstat::rss_bytes(pid);
    let heap2 = heap_held(&admin, &url, cfg.heap_stats).await;
    let cross_node = cross_node_status(&clients, &url, cfg.nodes).await;
    // Missing, not 0, when nothing was opened or the RSS did not grow (pages reused, or the
    // watches refused): a 0 there once read as "free".
    let per = |a: Option<u64>, b: Option<u64>, n: usize| {
        a.zip(b)
            .filter(|&(a, b)| n > 0 && b > a)
            .map(|(a, b)| (b - a) as f64 / n as f64)
    };
    let rss_per_connection = per(rss0, rss1, connected);
    let rss_per_first_watch = per(rss1, rss2, counters.opened.load(Ordering::Relaxed));
    // The first set also made each watched object's protobuf encoding (kept with the object, as
    // after any protobuf LIST in a real cluster) and its initial events' buffers; the same watches
    // again on the same connections cost only what a further idle watch costs.
    let again = Arc::new(Streams::default());
    let (stop_again, stop_again_rx) = watch::channel(false);
    let (_, again_tasks) =
        open_watches(cfg, &clients, &url, start_rev, &again, &stop_again_rx).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss3 = procstat::rss_bytes(pid);
    let heap3 = heap_held(&admin, &url, cfg.heap_stats).await;
    let rss_per_watch = per(rss2, rss3, again.opened.load(Ordering::Relaxed));
    let bytes = |h: Option<i64>| h.and_then(|h| u64::try_from(h).ok());
    let heap_per_watch = per(
        bytes(heap2),
        bytes(heap3),
        again.opened.load(Ordering::Relaxed),
    );
    if stop_again.send(true).is_err() {
        warn!("second watch set already gone");
    }
    for t in again_tasks {
        let _ = t.await;
    }
    info!(
        side = side.name(),
        connected,
        opened = counters.opened.load(Ordering::Relaxed),
        forbidden = counters.forbidden.load(Ordering::Relaxed),
        again = again.opened.load(Ordering::Relaxed),
        ?rss_per_connection,
        ?rss_per_first_watch,
        ?rss_per_watch,
        ?heap_per_watch,
        "watches open"
    );
    // The second set's streams end (reset) before the churn.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The churn and the Leases, CPU measured over them and the delivery.
    let cpu = |pid: Option<u32>| pid.and_then(procstat::cpu_seconds);
    let me = Some(std::process::id());
    let metrics = format!("{url}/metrics");
    let metrics0 = admin.text(&metrics).await.unwrap_or_default();
    let (client0, server0, etcd0) = (cpu(me), cpu(Some(pid)), cpu(ctx.etcd_pid));
    let probe = tokio::spawn(etcd_probe(
        ctx.client.clone(),
        start_rev + 1,
        stop_rx.clone(),
    ));
    let b = bar_of(
        cfg,
        (cfg.rate * cfg.duration.as_secs_f64()) as u64,
        "writing",
    );
    let began = Instant::now();
    let (sent, lease_writes) = write_apart(cfg, ctx.endpoint.clone(), codec, b.clone()).await?;
    b.finish_and_clear();
    let wrote_for = cfg
        .duration
        .as_secs_f64()
        .min(began.elapsed().as_secs_f64());
    super::load::until_quiet(&counters.received, cfg.delivery_grace, None).await;
    let server_stages = match side {
        Side::Watchcache => Some(stages::Stages::between(
            &metrics0,
            &admin.text(&metrics).await.unwrap_or_default(),
        )),
        Side::KubeApiserver => None,
    };
    let spent = |before: Option<f64>, pid| before.zip(cpu(pid)).map(|(a, b)| b - a);
    let server_cpu = spent(server0, Some(pid));
    let etcd_cpu = spent(etcd0, ctx.etcd_pid);
    let client_cpu = spent(client0, me);
    let server_rss = procstat::rss_bytes(pid);
    let server_huge_pages = procstat::huge_page_bytes(pid);
    let etcd_rss = ctx.etcd_pid.and_then(procstat::rss_bytes);

    // Verification against etcd's history.
    let end_rev = sent.keys().copied().max().unwrap_or(start_rev);
    let history = verify::history(&ctx.client, start_rev, end_rev).await?;
    if stop.send(true).is_err() {
        warn!("watchers already gone");
    }
    for t in tasks {
        let _ = t.await;
    }
    let probed = probe.await.unwrap_or_default();
    let stream_errors = streams
        .iter()
        .map(|s| s.rec.errors.load(Ordering::Relaxed))
        .sum();
    let (node_path, label_path) = check_pod_streams(
        streams.iter().map(|s| (s.node, s.what, &*s.rec)),
        &history,
        cfg.nodes,
        &sent,
        end_rev,
        |_, _| {},
    );
    drop(server);
    let opened = counters.opened.load(Ordering::Relaxed);
    let r = KubeletReport {
        side,
        nodes: cfg.nodes,
        watches_per_node: cfg.watches,
        pods: cfg.pods,
        connections: connected,
        watches_opened: opened,
        watches_forbidden: counters.forbidden.load(Ordering::Relaxed),
        watches_failed: counters.failed.load(Ordering::Relaxed),
        watch_429s: counters.too_many.load(Ordering::Relaxed),
        unreadable_frames: counters.unreadable.load(Ordering::Relaxed),
        stream_errors,
        other_events: counters.other_events.load(Ordering::Relaxed),
        cross_node_watch_status: cross_node,
        pod_writes_per_sec: sent.len() as f64 / wrote_for.max(1e-3),
        etcd_write_ms: Latency::of(
            &mut sent
                .values()
                .map(|(s, a)| a.saturating_sub(*s) as f64 / 1000.0)
                .collect::<Vec<_>>(),
        ),
        etcd_watch_after_ack_ms: Latency::of(
            &mut sent
                .iter()
                .filter_map(|(rev, (_, ack))| {
                    probed
                        .get(rev)
                        .map(|at| at.saturating_sub(*ack) as f64 / 1000.0)
                })
                .collect::<Vec<_>>(),
        ),
        lease_writes_per_sec: lease_writes as f64 / wrote_for.max(1e-3),
        duration_s: cfg.duration.as_secs_f64(),
        storage: cfg.storage,
        server_stages,
        node_path: node_path.finish(),
        label_path: label_path.finish(),
        server_cpu_s: server_cpu,
        server_rss_bytes: server_rss,
        server_huge_page_bytes: server_huge_pages,
        rss_per_connection_bytes: rss_per_connection,
        rss_per_first_watch_bytes: rss_per_first_watch,
        rss_per_watch_bytes: rss_per_watch,
        heap_per_watch_bytes: heap_per_watch,
        etcd_cpu_s: etcd_cpu,
        etcd_rss_bytes: etcd_rss,
        client_cpu_s: client_cpu,
        load_average: procstat::load_average(),
    };
    info!(
        side = side.name(),
        delivered = r.delivered(),
        lost = r.lost(),
        "side done"
    );
    Ok(r)
}

/// The pod streams checked against etcd's `history` up to `end_rev`: the `spec.nodeName` path's
/// figures and the label path's (the other watches are left out). `sent` holds each write's send
/// and acknowledgement times by revision; `on_delivery(sent_us, ms)` sees each timed delivery.
fn check_pod_streams<'a>(
    streams: impl IntoIterator<Item = (usize, WatchPath, &'a load::Recorder)>,
    history: &[verify::HistoryEntry],
    nodes: usize,
    sent: &std::collections::HashMap<u64, (u64, u64)>,
    end_rev: u64,
    mut on_delivery: impl FnMut(u64, f64),
) -> (report::PathFigures, report::PathFigures) {
    let mut node_path = report::PathFigures::default();
    let mut label_path = report::PathFigures::default();
    for (node, what, rec) in streams {
        let (expected, figures) = match what {
            WatchPath::NodePods => (verify::expected(history, Some(node)), &mut node_path),
            WatchPath::LabelPods => (
                history
                    .iter()
                    .filter(|h| {
                        let id = h.id as usize;
                        id % nodes == node && id % objects::NAMESPACES == node % objects::NAMESPACES
                    })
                    .map(|h| (h.rev, h.id))
                    .collect(),
                &mut label_path,
            ),
            WatchPath::Other => continue,
        };
        let got = rec.events.lock();
        figures.watches += 1;
        let mut timed = Vec::new();
        let t = verify::tally(&got, &expected, end_rev, |rev, at| {
            if let Some(&(sent, ack)) = sent.get(&rev) {
                timed.push((sent, at.saturating_sub(sent), at.saturating_sub(ack)));
            }
        });
        for (sent_at, took, after_ack) in timed {
            let ms = took as f64 / 1000.0;
            figures.latencies.push(ms);
            figures.after_ack.push(after_ack as f64 / 1000.0);
            figures.slow_window(sent_at, ms);
            on_delivery(sent_at, ms);
        }
        figures.tally += t;
    }
    (node_path, label_path)
}

fn bar_of(cfg: &KubeletConfig, len: u64, what: &str) -> indicatif::ProgressBar {
    bar(cfg.progress, len, what)
}

/// Waits until the server has the seeded revision and the last node is authorized for each of
/// its watches (kube-apiserver's Node authorizer learns pods from its own informer).
async fn ready(ctx: &Ctx<'_>, admin: &Http, url: &str, rev: u64) -> Result<(), String> {
    let n = ctx.cfg.nodes - 1;
    let node = Http::tls(Arc::clone(&ctx.node_tls[n]), TlsMode::H2);
    ready_at(admin, &node, url, rev, n, ctx.cfg.watches)
        .await
        .map(drop)
}

/// [`ready`] for the server at `url`, node `n` (its client `node`) and its first `watches`;
/// returns how many LISTs it made that were answered 200 (the server counts them too). The
/// node's LISTs are at resourceVersion 0, so they cost the server no upstream read.
async fn ready_at(
    admin: &Http,
    node: &Http,
    url: &str,
    rev: u64,
    n: usize,
    watches: usize,
) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(180);
    let probe = format!(
        "{url}/api/v1/pods?resourceVersion={rev}&resourceVersionMatch=NotOlderThan&limit=1"
    );
    let mut last = String::new();
    let mut lists = 0;
    while Instant::now() < deadline {
        match admin.text(&probe).await {
            Ok(_) => {
                lists += 1;
                break;
            }
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    'probe: while Instant::now() < deadline {
        for w in objects::watches(n, watches) {
            match node
                .text(&format!("{url}{}&limit=1&resourceVersion=0", w.path))
                .await
            {
                Ok(_) => lists += 1,
                Err(e) => {
                    last = e;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue 'probe;
                }
            }
        }
        return Ok(lists);
    }
    Err(format!("not ready within 180 s: {last}"))
}

/// Opens every node's connection, 64 handshakes at a time; returns how many connected.
async fn connect_all(cfg: &KubeletConfig, clients: &[Http], url: &str) -> usize {
    let b = bar_of(cfg, clients.len() as u64, "connecting");
    let results = futures_util::stream::iter(clients.iter().cloned())
        .map(|c| {
            let b = b.clone();
            async move {
                let r = c.connect_h2(url).await;
                b.inc(1);
                r
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    b.finish_and_clear();
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    if let Some(e) = failed.first() {
        warn!(failed = failed.len(), first = %e, "connections failed");
    }
    results.len() - failed.len()
}

/// Opens every node's watches on its connection, paced; waits (at most 180 s) until each has
/// answered.
async fn open_watches(
    cfg: &KubeletConfig,
    clients: &[Http],
    url: &str,
    start_rev: u64,
    counters: &Arc<Streams>,
    stop: &watch::Receiver<bool>,
) -> (Vec<Stream>, Vec<tokio::task::JoinHandle<()>>) {
    let total = cfg.nodes * cfg.watches;
    let b = bar_of(cfg, total as u64, "watches");
    let mut streams = Vec::with_capacity(total);
    let mut tasks = Vec::with_capacity(total);
    for (n, client) in clients.iter().enumerate() {
        for w in objects::watches(n, cfg.watches) {
            // The pod streams start at the seeded revision (verified from there); the others
            // as a reflector's first watch after its list.
            let rv = match w.what {
                WatchPath::Other => 0,
                _ => start_rev,
            };
            let u = format!(
                "{url}{}&watch=1&allowWatchBookmarks=true&resourceVersion={rv}",
                w.path
            );
            let rec = Arc::new(Recorder::default());
            tasks.push(tokio::spawn(watcher(
                client.clone(),
                u,
                w.what,
                Arc::clone(&rec),
                Arc::clone(counters),
                stop.clone(),
            )));
            streams.push(Stream {
                node: n,
                what: w.what,
                rec,
            });
        }
        if n % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let done = counters.opened.load(Ordering::Relaxed)
            + counters.forbidden.load(Ordering::Relaxed)
            + counters.failed.load(Ordering::Relaxed);
        b.set_position(done as u64);
        if done >= total || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.finish_and_clear();
    (streams, tasks)
}

/// Node 0 asking for node 1's pods (or its own name with another node's, for one node): the
/// status both servers must answer, 403.
async fn cross_node_status(clients: &[Http], url: &str, nodes: usize) -> Option<u16> {
    let other = if nodes > 1 { 1 } else { 7 };
    let u = format!(
        "{url}/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-{other}&resourceVersion=0"
    );
    let (status, _) = clients
        .first()?
        .get_accept(&u, Some(WATCH_ACCEPT))
        .await
        .ok()?;
    Some(status)
}

fn pod_id(name: &[u8]) -> Option<u32> {
    std::str::from_utf8(name.strip_prefix(b"pod-")?)
        .ok()?
        .parse()
        .ok()
}

/// One kubelet watch in protobuf: pod streams record each change; the others count events.
async fn watcher(
    client: Http,
    url: String,
    what: WatchPath,
    rec: Arc<Recorder>,
    counters: Arc<Streams>,
    mut stop: watch::Receiver<bool>,
) {
    // A reflector retries a refused watch after a pause (client-go backs off from 800 ms); so do
    // the kubelets here, for a minute, counting the 429s.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        match client.get_accept(&url, Some(WATCH_ACCEPT)).await {
            Ok((429, mut body)) if Instant::now() < deadline => {
                if counters.too_many.fetch_add(1, Ordering::Relaxed) < 3
                    && let Some(Ok(b)) = body.next().await
                {
                    warn!(url, why = %b.escape_ascii(), "watch refused, retrying");
                }
                tokio::time::sleep(Duration::from_millis(800 + fastrand::u64(0..800))).await;
            }
            other => break other,
        }
    };
    let mut body = match answer {
        Ok((status, body)) if (200..300).contains(&status) => body,
        Ok((403, mut body)) => {
            if counters.forbidden.fetch_add(1, Ordering::Relaxed) < 5 {
                let why = match body.next().await {
                    Some(Ok(b)) => b.escape_ascii().to_string(),
                    _ => String::new(),
                };
                warn!(url, why, "watch forbidden");
            }
            return;
        }
        Ok((status, _)) => {
            warn!(status, url, "watch refused");
            counters.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(e) => {
            warn!(error = %e, url, "watch failed");
            counters.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    counters.opened.fetch_add(1, Ordering::Relaxed);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            c = body.next() => c,
        };
        let chunk = match chunk {
            Some(Ok(c)) => c,
            other => {
                warn!(url, end = ?other.map(|r| r.err()), "watch stream ended");
                rec.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        buf.extend_from_slice(&chunk);
        let used = super::proto::frames(&buf, |frame| {
            let Some(ev) = super::proto::event(frame) else {
                warn!(url, frame = %String::from_utf8_lossy(&frame[..frame.len().min(200)]), "unreadable frame");
                counters.unreadable.fetch_add(1, Ordering::Relaxed);
                return;
            };
            match ev.kind {
                b"ADDED" | b"MODIFIED" | b"DELETED" => {}
                b"ERROR" => {
                    warn!(url, frame = %frame.escape_ascii(), "watch ERROR event");
                    rec.errors.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                _ => return,
            }
            if what == WatchPath::Other {
                counters.other_events.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let rev = std::str::from_utf8(ev.rv).ok().and_then(|r| r.parse().ok());
            if let (Some(rev), Some(id)) = (rev, pod_id(ev.name)) {
                rec.record(&counters.received, rev, id);
            }
        });
        buf.drain(..used);
    }
}

/// One etcd watch of the pods from `from`, held by the load tool itself: when each revision
/// reached it (µs on the bench's clock). Against the writes' acks this is etcd's own watch
/// delivery on this machine, the part of a server's "after etcd ack" that is not the server's.
async fn etcd_probe(
    client: etcd_client::Client,
    from: u64,
    mut stop: watch::Receiver<bool>,
) -> std::collections::HashMap<u64, u64> {
    let mut seen = std::collections::HashMap::new();
    let opts = etcd_client::WatchOptions::new()
        .with_prefix()
        .with_start_revision(from as i64);
    let mut stream = match client
        .watch_client()
        .watch("/registry/pods/", Some(opts))
        .await
    {
        Ok(w) => w,
        Err(e) => {
            warn!(error = %e, "the etcd probe watch could not start");
            return seen;
        }
    };
    loop {
        let msg = tokio::select! {
            _ = stop.wait_for(|s| *s) => return seen,
            m = stream.message() => m,
        };
        match msg {
            Ok(Some(resp)) => {
                let now = pods::now_us();
                for ev in resp.events() {
                    if let Some(kv) = ev.kv() {
                        seen.entry(kv.mod_revision() as u64).or_insert(now);
                    }
                }
            }
            other => {
                warn!(end = ?other.err(), "the etcd probe watch ended");
                return seen;
            }
        }
    }
}

/// Renews every node's Lease once per `period`, spread evenly over it, for `duration`; returns
/// the renewals etcd acknowledged.
/// The pod churn and the Lease renewals, from a thread and an etcd client of their own, as a
/// real writer (kube-apiserver) is another process: the write and its acknowledgement are
/// timed there, not by the runtime that reads the 10 000 connections' frames.
async fn write_apart(
    cfg: &KubeletConfig,
    endpoint: String,
    codec: Option<Arc<pods::Codec>>,
    b: indicatif::ProgressBar,
) -> Result<(std::collections::HashMap<u64, (u64, u64)>, u64), String> {
    let (pods, nodes, rate, duration, period) = (
        cfg.pods,
        cfg.nodes,
        cfg.rate,
        cfg.duration,
        cfg.lease_period,
    );
    let writer = std::thread::Builder::new()
        .name("bench-writer".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("writer runtime: {e}"))?;
            rt.block_on(async move {
                let client = etcd_client::Client::connect([endpoint.as_str()], None)
                    .await
                    .map_err(|e| format!("etcd: {e}"))?;
                let leases = tokio::spawn(renew_leases(client.clone(), nodes, period, duration));
                let sent = load::churn(
                    &client,
                    Churn::new(pods, nodes).with_apps(nodes).with_codec(codec),
                    rate,
                    duration,
                    &b,
                )
                .await;
                Ok((sent, leases.await.unwrap_or(0)))
            })
        })
        .map_err(|e| format!("writer thread: {e}"))?;
    tokio::task::spawn_blocking(move || writer.join())
        .await
        .map_err(|e| format!("writer thread: {e}"))?
        .map_err(|_| "the writer thread panicked".to_string())?
}

async fn renew_leases(
    client: etcd_client::Client,
    nodes: usize,
    period: Duration,
    duration: Duration,
) -> u64 {
    let done = Arc::new(AtomicU64::new(0));
    let in_flight = Arc::new(Semaphore::new(256));
    let mut tick = tokio::time::interval(period.div_f64(nodes.max(1) as f64));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let deadline = Instant::now() + duration;
    let mut n = 0;
    while Instant::now() < deadline {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::time::sleep_until(deadline) => break,
        }
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            break;
        };
        let (mut kv, done) = (client.kv_client(), Arc::clone(&done));
        let node = n % nodes.max(1);
        n += 1;
        tokio::spawn(async move {
            let value = objects::lease(node, pods::now_us());
            if kv.put(objects::lease_key(node), value, None).await.is_ok() {
                done.fetch_add(1, Ordering::Relaxed);
            }
            drop(permit);
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), in_flight.acquire_many(256)).await;
    done.load(Ordering::Relaxed)
}

/// The server's live heap in mimalloc's blocks (`watchcache_heap_held_bytes`), when it counts it.
async fn heap_held(admin: &Http, url: &str, on: bool) -> Option<i64> {
    if !on {
        return None;
    }
    let text = admin.text(&format!("{url}/metrics")).await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("watchcache_heap_held_bytes "))
        .and_then(|v| v.trim().parse().ok())
}

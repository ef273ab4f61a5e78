//! `watchcache-bench --model rollout`: replicas behind HAProxy restarted one at a time (or one
//! killed with SIGKILL, `--kill`) under the kubelet model's load, and what the fleet paid for it.
//!
//! The set-up is the recommended one: `--replicas` watchcache servers on one etcd, with the drain
//! flags, behind HAProxy (Debian's, TCP mode, each replica's `/readyz` checked every 300 ms). One
//! HAProxy process carries at most what its open-file limit allows (two descriptors per
//! connection), so a large fleet is spread over several, every one balancing over all replicas.
//! Each node is a kubelet as in the kubelet model (one TLS HTTP/2 connection with its own client
//! certificate, its watches in protobuf, Node,RBAC), and behaves as client-go's reflector does:
//! a watch that ends is resumed from the last resourceVersion it saw (a change or a bookmark) on a
//! new connection when the old one went away, and only a 410 makes it relist (a LIST, counted).
//!
//! While the pods churn, each replica in turn gets SIGTERM, drains, exits, and is started again
//! on its port; the next one goes once HAProxy has taken it back. The report counts, for the
//! rollout: resumes against relists (the bench's own count, and the servers' by kind of watch
//! start), changes lost or duplicated on the pod streams (checked against etcd's history), the
//! delivery p99 of the writes made during it, the etcd Range calls the restarts made, and each
//! replica's drain and start times. There is no kube-apiserver in this set-up: its LISTs are not
//! a figure of this model.
//!
//! The servers' request counters are read from each replica's `/metrics` every 250 ms while it
//! stops; what a replica serves between its last answered scrape and the end of its delay (new
//! requests are refused with 429 after that) is not counted there, which the bench's own count of
//! relists does not depend on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};
use watchcache_etcd::free_port;

use super::objects::{self, Path as WatchPath};
use super::report::PathReport;
use super::servers::{self, Side};
use super::{KubeletConfig, Scratch, WATCH_ACCEPT, pki, pod_id, write_apart};
use crate::bench::http::Http;
use crate::bench::load::{self, Recorder};
use crate::bench::stack::ServerProcess;
use crate::bench::{Latency, TlsMode, burst, pods, proto, stack, verify};

/// A rollout run's parameters.
#[derive(Debug, Clone)]
pub(crate) struct RolloutConfig {
    /// The load: nodes, watches per node, pods, write rate, duration (which must outlast the
    /// rollout), binaries.
    pub kubelet: KubeletConfig,
    /// watchcache replicas behind the balancers.
    pub replicas: usize,
    /// SIGKILL one replica (no drain) instead of restarting each in turn.
    pub kill: bool,
    /// `--shutdown-delay-duration` of the replicas.
    pub shutdown_delay: Duration,
    /// `--shutdown-watch-termination-grace-period` of the replicas.
    pub watch_grace: Duration,
    /// Churn before the rollout begins.
    pub settle: Duration,
    /// The open-file limit of a process here: it decides how many HAProxy processes the nodes'
    /// connections need.
    pub open_files: u64,
}

/// What one rollout run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RolloutReport {
    pub nodes: usize,
    pub watches_per_node: usize,
    pub replicas: usize,
    /// HAProxy processes (each balancing over every replica).
    pub balancers: usize,
    /// `kill`: one replica SIGKILLed; `rolling`: each drained and restarted in turn.
    pub how: &'static str,
    pub shutdown_delay_s: f64,
    pub watch_grace_s: f64,
    pub pod_writes_per_sec: f64,
    /// Watches answered 200 at their first request.
    pub watches_opened: u64,
    /// Watches that never opened.
    pub watches_not_opened: u64,
    /// From the first replica's stop to the last one taken back.
    pub rollout_s: f64,
    /// Each replica stopped: signal → exit, and start → ready (s).
    pub replica_times: Vec<ReplicaTimes>,
    /// Watches resumed from their resourceVersion after their stream ended or broke.
    pub resumes: u64,
    /// LISTs after a 410: the goal is none.
    pub relists: u64,
    /// When each relist happened, seconds after the rollout began (sorted).
    pub relist_at_s: Vec<f64>,
    /// From a stream's end to its resumed watch answering 200 (none without a resume).
    pub resume_gap_ms: Option<Latency>,
    /// 429 answers (each retried after 0.5–1.5 s).
    pub too_many: u64,
    /// Requests that failed before an answer (connection refused or reset, GOAWAY), retried.
    pub request_errors: u64,
    /// How long those took to fail.
    pub request_errors_ms: Option<Latency>,
    /// Other answers than 200, 410 and 429, retried.
    pub other_answers: u64,
    /// ERROR events other than 410, and frames that did not read.
    pub stream_errors: u64,
    /// The servers' own count over the rollout, summed over replicas and restarts.
    pub servers: Served,
    /// Range requests etcd served from the rollout's start to its end, less the bench's own
    /// (its scrapes of `/metrics`, one Range per cache each).
    pub etcd_ranges: Option<u64>,
    /// The same from the rollout's end to the end of delivery, over `after_s` seconds: what
    /// the fleet costs etcd without a rollout.
    pub etcd_ranges_after: Option<u64>,
    pub after_s: f64,
    /// Pod streams checked against etcd's history (streams that relisted are left out).
    pub node_path: PathReport,
    pub label_path: PathReport,
    /// Delivery (write sent → received) of the writes sent during the rollout, both pod paths
    /// (none when none was delivered).
    pub during_rollout_ms: Option<Latency>,
    pub streams_relisted: u64,
    pub load_average: Option<f64>,
}

/// One replica's stop and start.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReplicaTimes {
    pub replica: usize,
    /// SIGTERM (or SIGKILL) → the process ended.
    pub stop_s: f64,
    /// Started again → ready (its caches synced, the last node's watches authorized).
    pub start_s: f64,
}

/// Requests the replicas served, from their `/metrics`.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub(crate) struct Served {
    /// LISTs answered 200 (less the bench's readiness probes of restarted replicas).
    pub lists: u64,
    /// Watch starts, by kind (`watchcache_watch_starts_total`).
    pub resume: u64,
    pub initial_events: u64,
    pub state: u64,
    pub now: u64,
    pub expired: u64,
    /// Requests answered 429.
    pub refused_429: u64,
}

impl Served {
    /// The counts in a `/metrics` text.
    pub(crate) fn parse(text: &str) -> Served {
        let sum = |name, labels: &[&str]| crate::bench::sum_metric(text, name, labels).unwrap_or(0);
        let start = |kind: &str| {
            sum(
                "watchcache_watch_starts_total",
                &[&format!("start=\"{kind}\"")],
            )
        };
        Served {
            lists: sum(
                "apiserver_request_total",
                &["verb=\"LIST\"", "code=\"200\""],
            ),
            resume: start("resume"),
            initial_events: start("initial_events"),
            state: start("state"),
            now: start("now"),
            expired: start("expired"),
            refused_429: sum("apiserver_request_total", &["code=\"429\""]),
        }
    }

    /// Adds what was served between two scrapes of one process.
    pub(crate) fn add(&mut self, later: Served, earlier: Served) {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        self.lists += d(later.lists, earlier.lists);
        self.resume += d(later.resume, earlier.resume);
        self.initial_events += d(later.initial_events, earlier.initial_events);
        self.state += d(later.state, earlier.state);
        self.now += d(later.now, earlier.now);
        self.expired += d(later.expired, earlier.expired);
        self.refused_429 += d(later.refused_429, earlier.refused_429);
    }
}

/// The kubelets' counters.
#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    resumes: AtomicU64,
    relists: AtomicU64,
    too_many: AtomicU64,
    request_errors: AtomicU64,
    other_answers: AtomicU64,
    stream_errors: AtomicU64,
    received: AtomicU64,
    relist_at_us: Mutex<Vec<u64>>,
    gaps_ms: Mutex<Vec<f64>>,
    /// How long each failed request took to fail.
    failed_after_ms: Mutex<Vec<f64>>,
}

/// One replica: its port (kept across restarts), its process, its counters.
struct Replica {
    index: usize,
    port: u16,
    url: String,
    process: Option<ServerProcess>,
    restarts: usize,
    admin: Http,
    /// The current process's counters at the rollout's start (zero for a restarted one).
    base: Served,
    /// Its last answered scrape.
    last: Served,
}

/// Runs the rollout model.
///
/// # Errors
/// What could not be set up: etcd, HAProxy, a replica, the connections.
pub(crate) async fn run(cfg: RolloutConfig) -> Result<RolloutReport, String> {
    let k = &cfg.kubelet;
    if k.watches == 0 || cfg.replicas < 2 {
        return Err("--model rollout needs --watches-per-node ≥ 1 and --replicas ≥ 2".into());
    }
    if !crate::ops::on_path("haproxy") {
        return Err(
            "--model rollout needs HAProxy on PATH (Debian: apt-get install haproxy)".into(),
        );
    }
    let scratch = Scratch::start(
        "rollout",
        k.etcd_data_dir.as_deref(),
        k.etcd_binary.as_deref(),
    )
    .await?;
    let dir = scratch.dir.clone();
    let pki = pki::Pki::new(&dir.join("pki"))?;
    let node_tls = (0..k.nodes)
        .map(|n| pki.node(&format!("node-{n}")))
        .collect::<Result<Vec<_>, _>>()?;
    let b = super::bar_of(k, 0, "seeding");
    objects::seed(&scratch.client, k.nodes, k.watches, &b).await?;
    let codec = match k.storage {
        pods::Storage::Protobuf => Some(Arc::new(pods::Codec::new()?)),
        pods::Storage::Json => None,
    };
    load::seed(&scratch.client, k.pods, k.nodes, k.nodes, codec.clone(), &b)
        .await
        .map_err(|e| format!("seeding: {e}"))?;
    b.finish_and_clear();
    let start_rev = stack::current_revision(&scratch.client).await?;

    // The replicas, each on a port of its own for the whole run.
    // HAProxy's checks come without a certificate: anonymous, allowed /readyz by the seeded
    // `system:public-info-viewer`, as kube-apiserver's are.
    let drain = vec![
        "--anonymous-auth=true".to_string(),
        "--shutdown-delay-duration".to_string(),
        format!("{}s", cfg.shutdown_delay.as_secs_f64()),
        "--shutdown-watch-termination-grace-period".to_string(),
        format!("{}s", cfg.watch_grace.as_secs_f64()),
    ];
    let spawn = |index: usize, port: u16, restarts: usize| {
        servers::start_on(
            Side::Watchcache,
            &k.server_binary,
            &scratch.endpoint,
            &pki,
            &dir,
            false,
            port,
            &drain,
            &dir.join(format!("watchcache-{index}.{restarts}.log")),
        )
    };
    let mut replicas = Vec::with_capacity(cfg.replicas);
    for index in 0..cfg.replicas {
        let port = free_port().map_err(|e| e.to_string())?;
        replicas.push(Replica {
            index,
            port,
            url: format!("https://127.0.0.1:{port}"),
            process: Some(spawn(index, port, 0)?),
            restarts: 0,
            admin: Http::tls(pki.admin(), TlsMode::H2),
            base: Served::default(),
            last: Served::default(),
        });
    }
    let last_node = Http::tls(Arc::clone(&node_tls[k.nodes - 1]), TlsMode::H2);
    for r in &replicas {
        let t = Instant::now();
        super::ready_at(
            &r.admin,
            &last_node,
            &r.url,
            start_rev,
            k.nodes - 1,
            k.watches,
        )
        .await
        .map_err(|e| format!("replica {}: {e}; see {}", r.index, dir.display()))?;
        info!(replica = r.index, took = ?t.elapsed(), "replica ready");
    }

    // The balancers, the nodes spread over them.
    // Two descriptors per connection, and room for each node's old and new connection at once
    // while a replica drains: a balancer at its maxconn stops accepting, and the nodes'
    // reconnections then wait in its listen queue.
    let per_balancer = (cfg.open_files.saturating_sub(512) / 4).max(100) as usize;
    let balancers = k.nodes.div_ceil(per_balancer).max(1);
    let mut lbs = Vec::with_capacity(balancers);
    let mut _lb_processes = Vec::with_capacity(balancers);
    for i in 0..balancers {
        let port = free_port().map_err(|e| e.to_string())?;
        let conf = dir.join(format!("haproxy-{i}.cfg"));
        std::fs::write(
            &conf,
            crate::ops::haproxy_config(
                &format!("127.0.0.1:{port}"),
                2 * k.nodes.div_ceil(balancers) + 100,
                replicas.iter().map(|r| r.port),
            ),
        )
        .map_err(|e| format!("{}: {e}", conf.display()))?;
        let mut cmd = std::process::Command::new("haproxy");
        cmd.arg("-db").arg("-f").arg(&conf);
        _lb_processes.push(servers::spawn_logged(
            &mut cmd,
            &dir.join(format!("haproxy-{i}.log")),
        )?);
        lbs.push(format!("https://127.0.0.1:{port}"));
    }
    for lb in &lbs {
        let probe = Http::tls(pki.admin(), TlsMode::H2);
        let deadline = Instant::now() + Duration::from_secs(30);
        while probe.text(&format!("{lb}/readyz")).await.is_err() {
            if Instant::now() > deadline {
                return Err(format!("HAProxy on {lb} did not answer within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Every check up (rise 2 × 300 ms).
    tokio::time::sleep(Duration::from_secs(1)).await;
    info!(balancers, replicas = cfg.replicas, "balancers up");

    // The kubelets.
    let counts = Arc::new(Counts::default());
    let (stop, stop_rx) = watch::channel(false);
    let clients: Vec<Http> = node_tls
        .iter()
        .map(|c| Http::tls(Arc::clone(c), TlsMode::H2))
        .collect();
    // Connected first, 64 handshakes at a time as the kubelet model does: 10 000 at once overflow
    // the accept queues, and every retry costs a handshake more.
    let b = super::bar_of(k, k.nodes as u64, "connecting");
    let failed = futures_util::stream::iter(clients.iter().enumerate())
        .map(|(n, c)| {
            let (b, lb) = (b.clone(), lbs[n % balancers].clone());
            async move {
                let r = c.connect_h2(&lb).await;
                b.inc(1);
                r.is_err()
            }
        })
        .buffer_unordered(64)
        .filter(|failed| std::future::ready(*failed))
        .count()
        .await;
    b.finish_and_clear();
    info!(nodes = k.nodes, failed, "nodes connected");
    let total = k.nodes * k.watches;
    let b = super::bar_of(k, total as u64, "watches");
    let mut streams = Vec::with_capacity(total);
    let mut tasks = Vec::with_capacity(total);
    for (n, client) in clients.iter().enumerate() {
        let lb = &lbs[n % balancers];
        for w in objects::watches(n, k.watches) {
            let rv = match w.what {
                WatchPath::Other => 0,
                _ => start_rev,
            };
            let rec = Arc::new(Recorder::default());
            let relisted = Arc::new(AtomicBool::new(false));
            tasks.push(tokio::spawn(kubelet_watch(
                Kubelet {
                    client: client.clone(),
                    lb: lb.clone(),
                    path: w.path,
                    what: w.what,
                    rec: Arc::clone(&rec),
                    relisted: Arc::clone(&relisted),
                    counts: Arc::clone(&counts),
                },
                rv,
                stop_rx.clone(),
            )));
            streams.push((n, w.what, rec, relisted));
        }
        if n % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while (counts.opened.load(Ordering::Relaxed) as usize) < total && Instant::now() < deadline {
        b.set_position(counts.opened.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.finish_and_clear();
    let opened = counts.opened.load(Ordering::Relaxed);
    info!(opened, of = total, "watches open");

    // The churn, and the rollout in its middle.
    let b = super::bar_of(k, (k.rate * k.duration.as_secs_f64()) as u64, "writing");
    let writer = {
        let (k, endpoint, codec, b) = (k.clone(), scratch.endpoint.clone(), codec, b.clone());
        tokio::spawn(async move { write_apart(&k, endpoint, codec, b).await })
    };
    tokio::time::sleep(cfg.settle).await;
    let scrape_ranges = AtomicU64::new(0);
    for r in &mut replicas {
        r.base = scrape(r, &scrape_ranges).await.unwrap_or_default();
        r.last = r.base;
    }
    let etcd_url = scratch.endpoint.clone();
    let ranges0 = burst::etcd_ranges(&etcd_url).await;
    scrape_ranges.store(0, Ordering::Relaxed);
    let mut probe_lists = 0;
    let rollout_began = pods::now_us();
    let began = Instant::now();
    let mut served = Served::default();
    let mut replica_times = Vec::new();
    let order: Vec<usize> = if cfg.kill {
        vec![0]
    } else {
        (0..cfg.replicas).collect()
    };
    for i in order {
        let r = &mut replicas[i];
        let stop_s = stop_replica(r, &cfg, &scrape_ranges).await?;
        served.add(r.last, r.base);
        r.restarts += 1;
        let t = Instant::now();
        r.process = Some(spawn(r.index, r.port, r.restarts)?);
        probe_lists += super::ready_at(
            &r.admin,
            &last_node,
            &r.url,
            start_rev,
            k.nodes - 1,
            k.watches,
        )
        .await
        .map_err(|e| format!("replica {} after its restart: {e}", r.index))?;
        let start_s = t.elapsed().as_secs_f64();
        r.base = Served::default();
        r.last = Served::default();
        info!(replica = r.index, stop_s, start_s, "replica back");
        replica_times.push(ReplicaTimes {
            replica: r.index,
            stop_s,
            start_s,
        });
        // HAProxy takes it back after two passed checks 300 ms apart.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let rollout_s = began.elapsed().as_secs_f64();
    let rollout_ended = pods::now_us();
    let ranges1 = burst::etcd_ranges(&etcd_url).await;
    let scraped1 = scrape_ranges.load(Ordering::Relaxed);
    let after_began = Instant::now();
    let (sent, _leases) = writer.await.map_err(|e| format!("writer: {e}"))??;
    b.finish_and_clear();
    if rollout_ended > sent.values().map(|(s, _)| *s).max().unwrap_or(0) {
        warn!(
            rollout_s,
            "the churn ended before the rollout did: raise --duration"
        );
    }
    load::until_quiet(&counts.received, k.delivery_grace, None).await;
    for r in &mut replicas {
        if let Some(s) = scrape(r, &scrape_ranges).await {
            r.last = s;
        }
        served.add(r.last, r.base);
    }
    // The bench's own requests are not the fleet's.
    served.lists = served.lists.saturating_sub(probe_lists);
    let ranges2 = burst::etcd_ranges(&etcd_url).await;
    let scraped2 = scrape_ranges.load(Ordering::Relaxed);
    let etcd_ranges = ranges1
        .zip(ranges0)
        .map(|(a, b)| a.saturating_sub(b + scraped1));
    let etcd_ranges_after = ranges2
        .zip(ranges1)
        .map(|(a, b)| a.saturating_sub(b + (scraped2 - scraped1)));
    let after_s = after_began.elapsed().as_secs_f64();

    // Verification.
    let end_rev = sent.keys().copied().max().unwrap_or(start_rev);
    let history = verify::history(&scratch.client, start_rev, end_rev).await?;
    let _ = stop.send(true);
    for t in tasks {
        let _ = t.await;
    }
    // Streams that relisted are left out: what happened between their last event and the list
    // is in the list, not in their events.
    let relisted = |r: &AtomicBool| r.load(Ordering::Relaxed);
    let streams_relisted = streams.iter().filter(|s| relisted(&s.3)).count() as u64;
    let mut during = Vec::new();
    let (node_path, label_path) = super::check_pod_streams(
        streams
            .iter()
            .filter(|s| !relisted(&s.3))
            .map(|(node, what, rec, _)| (*node, *what, &**rec)),
        &history,
        k.nodes,
        &sent,
        end_rev,
        |sent_at, ms| {
            if (rollout_began..=rollout_ended).contains(&sent_at) {
                during.push(ms);
            }
        },
    );
    let wrote_for = k.duration.as_secs_f64();
    let mut relist_at_s: Vec<f64> = counts
        .relist_at_us
        .lock()
        .iter()
        .map(|&at| at.saturating_sub(rollout_began) as f64 / 1e6)
        .collect();
    relist_at_s.sort_by(f64::total_cmp);
    let report = RolloutReport {
        nodes: k.nodes,
        watches_per_node: k.watches,
        replicas: cfg.replicas,
        balancers,
        how: if cfg.kill { "kill" } else { "rolling" },
        shutdown_delay_s: cfg.shutdown_delay.as_secs_f64(),
        watch_grace_s: cfg.watch_grace.as_secs_f64(),
        pod_writes_per_sec: sent.len() as f64 / wrote_for.max(1e-3),
        watches_opened: opened,
        watches_not_opened: (total as u64).saturating_sub(opened),
        rollout_s,
        replica_times,
        resumes: counts.resumes.load(Ordering::Relaxed),
        relists: counts.relists.load(Ordering::Relaxed),
        relist_at_s,
        resume_gap_ms: latency(&mut counts.gaps_ms.lock()),
        too_many: counts.too_many.load(Ordering::Relaxed),
        request_errors: counts.request_errors.load(Ordering::Relaxed),
        request_errors_ms: latency(&mut counts.failed_after_ms.lock()),
        other_answers: counts.other_answers.load(Ordering::Relaxed),
        stream_errors: counts.stream_errors.load(Ordering::Relaxed),
        servers: served,
        etcd_ranges,
        etcd_ranges_after,
        after_s,
        node_path: node_path.finish(),
        label_path: label_path.finish(),
        during_rollout_ms: latency(&mut during),
        streams_relisted,
        load_average: crate::bench::procstat::load_average(),
    };
    drop(replicas);
    drop(scratch);
    Ok(report)
}

/// The percentiles of `samples`; none without samples (a figure missing, not 0).
fn latency(samples: &mut [f64]) -> Option<Latency> {
    (!samples.is_empty()).then(|| Latency::of(samples))
}

/// Stops replica `r` (SIGTERM and its drain, or SIGKILL), scraping its counters until it stops
/// answering; returns how long it took to exit.
async fn stop_replica(
    r: &mut Replica,
    cfg: &RolloutConfig,
    ranges: &AtomicU64,
) -> Result<f64, String> {
    if let Some(s) = scrape(r, ranges).await {
        r.last = s;
    }
    let Some(mut process) = r.process.take() else {
        return Err(format!("replica {} is not running", r.index));
    };
    let t = Instant::now();
    if cfg.kill {
        process
            .0
            .kill()
            .map_err(|e| format!("SIGKILL replica {}: {e}", r.index))?;
    } else {
        let pid = process.0.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .map_err(|e| format!("kill: {e}"))?;
        if !sent.success() {
            return Err(format!("SIGTERM to replica {} failed", r.index));
        }
    }
    let limit = cfg.shutdown_delay + cfg.watch_grace + Duration::from_secs(30);
    let mut answering = !cfg.kill;
    loop {
        if process.0.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if t.elapsed() > limit {
            warn!(replica = r.index, ?limit, "did not exit: SIGKILL");
            let _ = process.0.kill();
            let _ = process.0.wait();
            break;
        }
        if answering {
            match tokio::time::timeout(Duration::from_millis(500), scrape(r, ranges)).await {
                Ok(Some(s)) => r.last = s,
                _ => answering = false,
            }
        }
        let poll = if cfg.kill { 10 } else { 250 };
        tokio::time::sleep(Duration::from_millis(poll)).await;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The replica's request counters, when it answers. Each answered scrape costs etcd one Range
/// per cache (`/metrics` reads each upstream's revision for its lag): counted in `ranges`, so
/// that the rollout's own Range calls are told from the bench's.
async fn scrape(r: &Replica, ranges: &AtomicU64) -> Option<Served> {
    let url = format!("{}/metrics", r.url);
    // The first request after a restart fails on the old connection and drops it.
    for _ in 0..2 {
        if let Ok(text) = r.admin.text(&url).await {
            let caches = text
                .lines()
                .filter(|l| l.starts_with("watchcache_ready{"))
                .count();
            ranges.fetch_add(caches as u64, Ordering::Relaxed);
            return Some(Served::parse(&text));
        }
    }
    None
}

/// One kubelet watch and what it reports to.
struct Kubelet {
    client: Http,
    lb: String,
    path: String,
    what: WatchPath,
    rec: Arc<Recorder>,
    relisted: Arc<AtomicBool>,
    counts: Arc<Counts>,
}

/// How one watch response ended.
enum Ended {
    /// The stream ended or broke: resume from the last resourceVersion.
    Resume,
    /// A 410: relist.
    Expired,
    /// The run is over.
    Stop,
}

/// A reflector's loop: watch from `rv`; whenever the stream ends or the request fails, watch
/// again from the last resourceVersion seen; relist (LIST) only after a 410.
async fn kubelet_watch(w: Kubelet, mut rv: u64, mut stop: watch::Receiver<bool>) {
    let c = &w.counts;
    let mut first = true;
    let mut ended_at: Option<Instant> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let url = format!(
            "{}{}&watch=1&allowWatchBookmarks=true&resourceVersion={rv}",
            w.lb, w.path
        );
        let asked = Instant::now();
        let answer = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            a = w.client.get_accept(&url, Some(WATCH_ACCEPT)) => a,
        };
        let body = match answer {
            Ok((200, body)) => body,
            Ok((429, _)) => {
                c.too_many.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500 + fastrand::u64(0..1000))).await;
                continue;
            }
            Ok((410, _)) => {
                rv = relist(&w, &mut stop).await;
                continue;
            }
            Ok((status, _)) => {
                if c.other_answers.fetch_add(1, Ordering::Relaxed) < 3 {
                    warn!(status, url, "watch answered, retrying");
                }
                tokio::time::sleep(Duration::from_millis(200 + fastrand::u64(0..300))).await;
                continue;
            }
            Err(e) => {
                c.failed_after_ms
                    .lock()
                    .push(asked.elapsed().as_secs_f64() * 1000.0);
                if c.request_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    warn!(error = %e, url, "a watch request failed (the first; the rest are counted)");
                }
                tokio::time::sleep(Duration::from_millis(50 + fastrand::u64(0..200))).await;
                continue;
            }
        };
        if first {
            c.opened.fetch_add(1, Ordering::Relaxed);
            first = false;
        } else {
            c.resumes.fetch_add(1, Ordering::Relaxed);
            if let Some(at) = ended_at.take() {
                c.gaps_ms.lock().push(at.elapsed().as_secs_f64() * 1000.0);
            }
        }
        match stream(&w, body, &mut rv, &mut stop).await {
            Ended::Stop => return,
            Ended::Resume => ended_at = Some(Instant::now()),
            Ended::Expired => rv = relist(&w, &mut stop).await,
        }
    }
}

/// Reads one watch response, moving `rv` along its events and bookmarks.
async fn stream(
    w: &Kubelet,
    mut body: crate::bench::http::BodyChunks,
    rv: &mut u64,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    let c = &w.counts;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            _ = stop.wait_for(|s| *s) => return Ended::Stop,
            c = body.next() => c,
        };
        let Some(Ok(chunk)) = chunk else {
            return Ended::Resume;
        };
        buf.extend_from_slice(&chunk);
        let mut expired = false;
        let used = proto::frames(&buf, |frame| {
            let Some(ev) = proto::event(frame) else {
                c.stream_errors.fetch_add(1, Ordering::Relaxed);
                return;
            };
            if ev.kind == b"ERROR" {
                if proto::status_code(frame) == Some(410) {
                    expired = true;
                } else {
                    c.stream_errors.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            let Some(at) = std::str::from_utf8(ev.rv)
                .ok()
                .and_then(|r| r.parse::<u64>().ok())
            else {
                return;
            };
            *rv = at;
            if ev.kind == b"BOOKMARK" || w.what == WatchPath::Other {
                return;
            }
            if let Some(id) = pod_id(ev.name) {
                w.rec.record(&c.received, at, id);
            }
        });
        buf.drain(..used);
        if expired {
            return Ended::Expired;
        }
    }
}

/// A relist after a 410: LIST the watch's path (retried until it answers) and return the
/// list's resourceVersion. The stream is left out of the loss check from then on: what happened
/// between its last event and the list is in the list, not in its events.
async fn relist(w: &Kubelet, stop: &mut watch::Receiver<bool>) -> u64 {
    let c = &w.counts;
    c.relists.fetch_add(1, Ordering::Relaxed);
    c.relist_at_us.lock().push(pods::now_us());
    w.relisted.store(true, Ordering::Relaxed);
    let url = format!("{}{}", w.lb, w.path);
    loop {
        if *stop.borrow() {
            return 0;
        }
        if let Ok((200, mut body)) = w.client.get_accept(&url, Some("application/json")).await {
            let mut out = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                out.extend_from_slice(&chunk);
            }
            let rv = serde_json::from_slice::<serde_json::Value>(&out)
                .ok()
                .and_then(|v| v["metadata"]["resourceVersion"].as_str()?.parse().ok());
            if let Some(rv) = rv {
                return rv;
            }
        }
        tokio::time::sleep(Duration::from_millis(200 + fastrand::u64(0..300))).await;
    }
}

/// The report as a table.
pub(crate) fn table(r: &RolloutReport) -> String {
    let opt = |v: Option<u64>| v.map_or("missing".to_string(), |v| v.to_string());
    let s = &r.servers;
    let mut out = format!(
        "rollout ({how}): {nodes} nodes × {w} watches, {rep} replicas behind {lb} HAProxy, \
         {rate:.0} pod writes/s, delay {d}s, grace {g}s\n\
         watches opened          {opened} ({not} not)\n\
         rollout                 {roll:.1} s\n",
        how = r.how,
        nodes = r.nodes,
        w = r.watches_per_node,
        rep = r.replicas,
        lb = r.balancers,
        rate = r.pod_writes_per_sec,
        d = r.shutdown_delay_s,
        g = r.watch_grace_s,
        opened = r.watches_opened,
        not = r.watches_not_opened,
        roll = r.rollout_s,
    );
    for t in &r.replica_times {
        out.push_str(&format!(
            "  replica {}              stopped in {:.1} s, ready again in {:.1} s\n",
            t.replica, t.stop_s, t.start_s
        ));
    }
    let ms = |l: &Option<Latency>| {
        l.as_ref().map_or("missing (no sample)".to_string(), |l| {
            format!(
                "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                l.p50, l.p99, l.max
            )
        })
    };
    out.push_str(&format!(
        "resumed                 {} (gap {})\n\
         relisted                {}{}\n\
         429s / request errors   {} / {} (failing after {})\n\
         other answers / errors  {} / {}\n\
         servers: LISTs {}, watch starts resume {} · initial_events {} · state {} · now {} · expired {}, 429s {}\n\
         etcd Range calls        {} during the rollout; {} in the {:.0} s after it\n\
         kube-apiserver LISTs    none in this set-up (the replicas read etcd)\n",
        r.resumes,
        ms(&r.resume_gap_ms),
        r.relists,
        if r.relist_at_s.is_empty() {
            String::new()
        } else {
            format!(
                " (first {:.1} s, median {:.1} s, last {:.1} s after the rollout began)",
                r.relist_at_s[0],
                r.relist_at_s[r.relist_at_s.len() / 2],
                r.relist_at_s[r.relist_at_s.len() - 1]
            )
        },
        r.too_many,
        r.request_errors,
        ms(&r.request_errors_ms),
        r.other_answers,
        r.stream_errors,
        s.lists,
        s.resume,
        s.initial_events,
        s.state,
        s.now,
        s.expired,
        s.refused_429,
        opt(r.etcd_ranges),
        opt(r.etcd_ranges_after),
        r.after_s,
    ));
    for (name, p) in [
        ("spec.nodeName", &r.node_path),
        ("label-routed", &r.label_path),
    ] {
        let p99 = if p.delivered > 0 {
            format!("{:.1} ms", p.latency_ms.p99)
        } else {
            "missing".to_string()
        };
        out.push_str(&format!(
            "{name:<23} {} streams: {} delivered, {} lost, {} duplicated, {} out of order; p99 {p99}\n",
            p.watches, p.delivered, p.lost, p.duplicated, p.out_of_order
        ));
    }
    out.push_str(&format!(
        "writes during rollout   {}\n\
         streams relisted        {} (left out of the loss check)\n",
        ms(&r.during_rollout_ms),
        r.streams_relisted
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_counts_add_each_lifetime_and_read_the_servers_labels() {
        let text = "\
apiserver_request_total{verb=\"LIST\",dry_run=\"\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",scope=\"cluster\",component=\"apiserver\",code=\"200\"} 4
apiserver_request_total{verb=\"LIST\",dry_run=\"\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",scope=\"cluster\",component=\"apiserver\",code=\"429\"} 2
apiserver_request_total{verb=\"WATCH\",dry_run=\"\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",scope=\"cluster\",component=\"apiserver\",code=\"429\"} 1
watchcache_watch_starts_total{group=\"\",resource=\"pods\",start=\"resume\"} 10
watchcache_watch_starts_total{group=\"\",resource=\"nodes\",start=\"resume\"} 5
watchcache_watch_starts_total{group=\"\",resource=\"pods\",start=\"expired\"} 1
";
        let now = Served::parse(text);
        assert_eq!(
            now,
            Served {
                lists: 4,
                resume: 15,
                expired: 1,
                refused_429: 3,
                ..Served::default()
            }
        );
        let mut total = Served::default();
        total.add(
            now,
            Served {
                resume: 5,
                ..Served::default()
            },
        );
        total.add(now, Served::default());
        assert_eq!(total.resume, 25);
        assert_eq!(total.lists, 8);
    }
}

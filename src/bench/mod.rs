//! `watchcache bench`: kubelet-style load on a real etcd, through the cache or with one etcd watch
//! per watcher (the world before the cache), measured in one run.
//!
//! A run seeds P pods of about 2 KB over N nodes, opens W per-node watchers
//! (`fieldSelector=spec.nodeName=node-i`) and K unrouted ones, then churns at R writes/s for D
//! seconds (updates, moves between nodes, creations, deletions; each write carries its send time).
//! Afterwards every watcher's stream is checked against etcd's own history: each change it must see
//! exactly once, in revision order. The writer stops at D whatever rate it reached, delivery is
//! awaited for at most 30 s more, and anything undelivered counts as lost.

mod load;
mod pods;
mod procstat;
mod verify;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::etcd::{LocalEtcd, free_port};
use load::{Churn, Counters, Recorder};

/// Which world to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Watchers watch the cache over HTTP.
    Cache,
    /// Each watcher has its own etcd watch and filters on the client.
    DirectEtcd,
    /// Both, one after the other, with ratios.
    Both,
}

/// A bench run's parameters.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Nodes (N).
    pub nodes: usize,
    /// Pods seeded before the churn (P).
    pub pods: usize,
    /// Per-node watchers (W), one per node for the first W nodes.
    pub watchers: usize,
    /// Unrouted watchers of all pods (K).
    pub unrouted: usize,
    /// Target writes per second (R).
    pub rate: f64,
    /// Churn duration (D).
    pub duration: Duration,
    /// What to measure.
    pub mode: Mode,
    /// etcd endpoints to use; empty: start a local etcd per mode.
    pub etcd: Vec<String>,
    /// A running watchcache server to use; `None`: start one per cache-mode run.
    pub server: Option<String>,
    /// The watchcache binary to start the server from.
    pub server_binary: PathBuf,
    /// How long to wait for delivery after the writer stops.
    pub delivery_grace: Duration,
    /// Draw progress bars on stderr.
    pub progress: bool,
    /// Where the local etcd keeps its data (a fresh directory under it per mode); default: the
    /// system temp dir.
    pub etcd_data_dir: Option<PathBuf>,
}

/// End-to-end latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Server process figures (absent when the server was not started by the bench).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerStats {
    /// Resident memory at the end of the run.
    pub rss_bytes: Option<u64>,
    /// CPU seconds during the churn and delivery.
    pub cpu_s: Option<f64>,
    /// Resident memory added per idle watcher (measured before the churn).
    pub rss_per_watcher_bytes: Option<f64>,
}

/// etcd process figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EtcdStats {
    /// Resident memory at the end of the run (local etcd only).
    pub rss_bytes: Option<u64>,
    /// CPU seconds during the churn and delivery (local etcd only).
    pub cpu_s: Option<f64>,
    /// Watches open on etcd during the churn (`etcd_debugging_mvcc_watcher_total`).
    pub watchers: Option<u64>,
}

/// The result of one mode.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModeReport {
    /// `cache` or `direct-etcd`.
    pub mode: String,
    /// Per-node watchers.
    pub watchers: usize,
    /// Unrouted watchers.
    pub unrouted_watchers: usize,
    /// Pods seeded.
    pub pods: usize,
    /// Achieved write rate.
    pub writes_per_sec: f64,
    /// Churn duration.
    pub duration_s: f64,
    /// Write sent → watcher received.
    pub latency_ms: Latency,
    /// Write sent → etcd acknowledged it: the part of the latency the cache cannot remove.
    pub etcd_write_ms: Latency,
    /// etcd acknowledged the write → watcher received it (0 when the event arrived first): the
    /// part the cache and the network add.
    pub after_ack_ms: Latency,
    /// Events delivered as expected.
    pub delivered: u64,
    /// Expected events never delivered.
    pub lost: u64,
    /// Events delivered more than once.
    pub duplicated: u64,
    /// Events delivered after a later revision.
    pub out_of_order: u64,
    /// Events a watcher received that its selector does not match.
    pub unexpected: u64,
    /// Watchers that failed to connect or whose stream broke.
    pub watcher_errors: u64,
    /// CPU seconds of the load tool itself (writer and watchers) during the churn and delivery: it
    /// shares the machine with etcd and the server.
    pub client_cpu_s: Option<f64>,
    /// Server figures.
    pub server: ServerStats,
    /// etcd figures.
    pub etcd: EtcdStats,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Report {
    /// One mode.
    One(Box<ModeReport>),
    /// Both modes, with cache / direct ratios.
    Both {
        /// Through the cache.
        cache: Box<ModeReport>,
        /// One etcd watch per watcher.
        direct: Box<ModeReport>,
        /// cache / direct.
        ratios: Ratios,
    },
}

/// Cache-mode figures divided by direct-mode ones.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ratios {
    /// etcd CPU seconds.
    pub etcd_cpu_s: Option<f64>,
    /// etcd watches.
    pub etcd_watchers: Option<f64>,
    /// p99 latency.
    pub latency_p99: f64,
    /// Achieved write rate.
    pub writes_per_sec: f64,
    /// Delivered events.
    pub delivered: f64,
}

fn bar(cfg: &BenchConfig, len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::with_draw_target(
        Some(len),
        if cfg.progress {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    b.set_style(
        ProgressStyle::with_template(
            "{msg:>12} [{elapsed_precise}] {bar:40} {pos}/{len} ({per_sec})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what.to_owned());
    b
}

/// Runs the bench.
///
/// # Errors
/// A description of what could not be set up (etcd, the server, connections).
pub async fn run(cfg: BenchConfig) -> Result<Report, String> {
    if cfg.watchers > cfg.nodes {
        return Err(format!(
            "--watchers ({}) cannot exceed --nodes ({}): one watcher per node",
            cfg.watchers, cfg.nodes
        ));
    }
    match cfg.mode {
        Mode::Cache => Ok(Report::One(Box::new(run_mode(&cfg, Mode::Cache).await?))),
        Mode::DirectEtcd => Ok(Report::One(Box::new(
            run_mode(&cfg, Mode::DirectEtcd).await?,
        ))),
        Mode::Both => {
            let cache = run_mode(&cfg, Mode::Cache).await?;
            let direct = run_mode(&cfg, Mode::DirectEtcd).await?;
            let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
            let ratios = Ratios {
                etcd_cpu_s: cache
                    .etcd
                    .cpu_s
                    .zip(direct.etcd.cpu_s)
                    .map(|(a, b)| div(a, b)),
                etcd_watchers: cache
                    .etcd
                    .watchers
                    .zip(direct.etcd.watchers)
                    .map(|(a, b)| div(a as f64, b as f64)),
                latency_p99: div(cache.latency_ms.p99, direct.latency_ms.p99),
                writes_per_sec: div(cache.writes_per_sec, direct.writes_per_sec),
                delivered: div(cache.delivered as f64, direct.delivered as f64),
            };
            Ok(Report::Both {
                cache: Box::new(cache),
                direct: Box::new(direct),
                ratios,
            })
        }
    }
}

struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let stopped = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

async fn start_server(
    cfg: &BenchConfig,
    etcd_url: &str,
    from_rev: u64,
) -> Result<(String, ServerProcess), String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let url = format!("http://127.0.0.1:{port}");
    let child = Command::new(&cfg.server_binary)
        .args([
            "serve",
            "--etcd",
            etcd_url,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--resources",
            "pods",
        ])
        .args([
            "--max-watchers",
            &(2 * (cfg.watchers + cfg.unrouted) + 100).to_string(),
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", cfg.server_binary.display()))?;
    let server = ServerProcess(child);
    wait_for_revision(&url, from_rev).await?;
    Ok((url, server))
}

/// Waits until the server's pods cache has reached `rev`.
async fn wait_for_revision(url: &str, rev: u64) -> Result<(), String> {
    let client = reqwest::Client::new();
    let probe = format!(
        "{url}/api/v1/pods?resourceVersion={rev}&resourceVersionMatch=NotOlderThan&limit=1"
    );
    for _ in 0..600 {
        if client
            .get(&probe)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "the watchcache server did not reach revision {rev} within 60 s"
    ))
}

/// Opens `total` watchers with `spawn(i)`, paced so the server's accept queue keeps up, and waits
/// (at most 120 s) until each has connected or failed.
async fn open_watchers(
    total: usize,
    counters: &Counters,
    bar: &ProgressBar,
    mut spawn: impl FnMut(usize) -> tokio::task::JoinHandle<()>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        tasks.push(spawn(i));
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done =
            counters.connected.load(Ordering::Relaxed) + counters.failed.load(Ordering::Relaxed);
        bar.set_position(done as u64);
        if done >= total || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tasks
}

/// Resident memory per idle watcher: the server's RSS before and after opening as many idle
/// watches as the run will (selecting nodes and labels no pod has), closed again afterwards.
async fn idle_watcher_rss(cfg: &BenchConfig, url: &str, pid: u32) -> Option<f64> {
    let total = cfg.watchers + cfg.unrouted;
    let before = procstat::rss_bytes(pid)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let counters = Arc::new(Counters::default());
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .ok()?;
    let tasks = open_watchers(total, &counters, &ProgressBar::hidden(), |i| {
        let selector = if i < cfg.watchers {
            format!("&fieldSelector=spec.nodeName%3Didle-{i}")
        } else {
            "&labelSelector=idle%3Dyes".to_owned()
        };
        let u = format!("{url}/api/v1/pods?watch=1&resourceVersion=0{selector}");
        let rec = Arc::new(Recorder::default());
        tokio::spawn(load::http_watcher(
            http.clone(),
            u,
            rec,
            Arc::clone(&counters),
            stop_rx.clone(),
        ))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = procstat::rss_bytes(pid)?;
    if stop_tx.send(true).is_err() {
        warn!("idle watchers already gone");
    }
    for t in tasks {
        let _ = t.await;
    }
    info!(before, after, watchers = total, "idle watchers measured");
    Some(after.saturating_sub(before) as f64 / total.max(1) as f64)
}

async fn etcd_watch_count(url: &str) -> Option<u64> {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

async fn run_mode(cfg: &BenchConfig, mode: Mode) -> Result<ModeReport, String> {
    let name = if mode == Mode::Cache {
        "cache"
    } else {
        "direct-etcd"
    };
    info!(mode = name, nodes = cfg.nodes, pods = cfg.pods, watchers = cfg.watchers, unrouted = cfg.unrouted, rate = cfg.rate, duration = ?cfg.duration, "bench");
    // etcd: a fresh local one per mode, or the given one emptied.
    let dir = tempfile_dir(cfg.etcd_data_dir.as_deref())?;
    let mut local = None;
    let endpoints = if cfg.etcd.is_empty() {
        let e = LocalEtcd::start(&dir).await.map_err(|e| e.to_string())?;
        let url = e.url();
        local = Some(e);
        vec![url]
    } else {
        cfg.etcd.clone()
    };
    let etcd_pid = local.as_ref().and_then(LocalEtcd::pid);
    let client = etcd_client::Client::connect(&endpoints, None)
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    if local.is_none() {
        let mut kv = client.kv_client();
        kv.delete(
            "/registry/pods/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    }

    // The server first, on an empty store: idle watchers are measured there, before a large sync
    // leaves the allocator holding memory that later allocations would reuse unseen.
    let base_rev = current_revision(&client).await?;
    let (server_url, server) = match (mode, &cfg.server) {
        (Mode::Cache, Some(url)) => (Some(url.clone()), None),
        (Mode::Cache, None) => {
            let (url, proc_) = start_server(cfg, &endpoints[0], base_rev).await?;
            (Some(url), Some(proc_))
        }
        _ => (None, None),
    };
    let server_pid = server.as_ref().map(|s| s.0.id());
    let rss_per_watcher = match (&server_url, server_pid) {
        (Some(url), Some(pid)) => idle_watcher_rss(cfg, url, pid).await,
        _ => None,
    };

    let b = bar(cfg, cfg.pods as u64, "seeding");
    let seeded = load::seed(&client, cfg.pods, cfg.nodes, &b)
        .await
        .map_err(|e| format!("seeding: {e}"))?;
    b.finish_and_clear();
    let start_rev = seeded.max(current_revision(&client).await?);
    info!(pods = cfg.pods, revision = start_rev, "seeded");
    if let Some(url) = &server_url {
        wait_for_revision(url, start_rev).await?;
    }

    // Watchers.
    let total = cfg.watchers + cfg.unrouted;
    let (stop_tx, stop_rx) = watch::channel(false);
    let counters = Arc::new(Counters::default());
    let recorders: Vec<Arc<Recorder>> = (0..total).map(|_| Arc::new(Recorder::default())).collect();
    let nodes: Vec<Option<usize>> = (0..total)
        .map(|i| (i < cfg.watchers).then_some(i))
        .collect();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    let mut etcd_clients = Vec::new();
    if mode == Mode::DirectEtcd {
        for _ in 0..16.min(total.max(1)) {
            etcd_clients.push(
                etcd_client::Client::connect(&endpoints, None)
                    .await
                    .map_err(|e| format!("etcd: {e}"))?,
            );
        }
    }
    let b = bar(cfg, total as u64, "watchers");
    let tasks = open_watchers(total, &counters, &b, |i| {
        let (rec, node) = (Arc::clone(&recorders[i]), nodes[i]);
        let (counters, stop) = (Arc::clone(&counters), stop_rx.clone());
        match &server_url {
            Some(url) => {
                let selector = node
                    .map(|n| format!("&fieldSelector=spec.nodeName%3Dnode-{n}"))
                    .unwrap_or_default();
                let url =
                    format!("{url}/api/v1/pods?watch=1&resourceVersion={start_rev}{selector}");
                tokio::spawn(load::http_watcher(http.clone(), url, rec, counters, stop))
            }
            None => {
                let client = etcd_clients[i % etcd_clients.len()].clone();
                tokio::spawn(load::etcd_watcher(
                    client, node, start_rev, rec, counters, stop,
                ))
            }
        }
    })
    .await;
    b.finish_and_clear();
    info!(
        connected = counters.connected.load(Ordering::Relaxed),
        failed = counters.failed.load(Ordering::Relaxed),
        "watchers open"
    );

    // Churn, then bounded delivery: CPU is measured over exactly these two phases.
    let client_cpu0 = procstat::cpu_seconds(std::process::id());
    let (server_cpu0, etcd_cpu0) = (
        server_pid.and_then(procstat::cpu_seconds),
        etcd_pid.and_then(procstat::cpu_seconds),
    );
    let b = bar(
        cfg,
        (cfg.rate * cfg.duration.as_secs_f64()) as u64,
        "writing",
    );
    let began = Instant::now();
    let sent = load::churn(
        &client,
        Churn::new(cfg.pods, cfg.nodes),
        cfg.rate,
        cfg.duration,
        &b,
    )
    .await;
    let wrote_for = cfg
        .duration
        .as_secs_f64()
        .min(began.elapsed().as_secs_f64());
    b.finish_and_clear();
    let etcd_watchers = etcd_watch_count(&endpoints[0]).await;
    let end_rev = sent.keys().copied().max().unwrap_or(start_rev);
    // What each watcher must see is only known from etcd's history, and reading it loads etcd; so
    // delivery ends when nothing has arrived for a second, or at the grace deadline.
    let b = bar(cfg, sent.len() as u64, "delivering");
    let deadline = Instant::now() + cfg.delivery_grace;
    let mut last = (counters.received.load(Ordering::Relaxed), Instant::now());
    while Instant::now() < deadline {
        let got = counters.received.load(Ordering::Relaxed);
        b.set_position(got);
        if got != last.0 {
            last = (got, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.finish_and_clear();
    let server_cpu = server_cpu0
        .zip(server_pid.and_then(procstat::cpu_seconds))
        .map(|(a, b)| b - a);
    let etcd_cpu = etcd_cpu0
        .zip(etcd_pid.and_then(procstat::cpu_seconds))
        .map(|(a, b)| b - a);
    let client_cpu = client_cpu0
        .zip(procstat::cpu_seconds(std::process::id()))
        .map(|(a, b)| b - a);
    let server_rss = server_pid.and_then(procstat::rss_bytes);
    let etcd_rss = etcd_pid.and_then(procstat::rss_bytes);

    // Verdict, against etcd's own history.
    let history = verify::history(&client, start_rev, end_rev).await?;
    let expected: Vec<Vec<(u64, u32)>> = nodes
        .iter()
        .map(|n| verify::expected(&history, *n))
        .collect();
    if stop_tx.send(true).is_err() {
        warn!("watchers already gone");
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut tally = verify::Tally::default();
    let mut lat: Vec<f64> = Vec::new();
    let mut after_ack: Vec<f64> = Vec::new();
    let mut errors = counters.failed.load(Ordering::Relaxed) as u64;
    for (rec, exp) in recorders.iter().zip(&expected) {
        let got = rec.events.lock();
        tally += verify::tally(&got, exp, end_rev, |rev, at| {
            lat.extend(verify::latency_ms(&sent, rev, at));
            after_ack.extend(
                sent.get(&rev)
                    .map(|(_, ack)| at.saturating_sub(*ack) as f64 / 1000.0),
            );
        });
        errors += rec.errors.load(Ordering::Relaxed);
    }
    lat.sort_by(f64::total_cmp);
    after_ack.sort_by(f64::total_cmp);
    let mut acks: Vec<f64> = sent
        .values()
        .map(|(s, a)| a.saturating_sub(*s) as f64 / 1000.0)
        .collect();
    acks.sort_by(f64::total_cmp);
    let latency = |v: &[f64]| Latency {
        p50: verify::percentile(v, 50.0),
        p90: verify::percentile(v, 90.0),
        p99: verify::percentile(v, 99.0),
        max: v.last().copied().unwrap_or(0.0),
    };
    let report = ModeReport {
        mode: name.into(),
        watchers: cfg.watchers,
        unrouted_watchers: cfg.unrouted,
        pods: cfg.pods,
        writes_per_sec: sent.len() as f64 / wrote_for.max(1e-3),
        duration_s: cfg.duration.as_secs_f64(),
        latency_ms: latency(&lat),
        etcd_write_ms: latency(&acks),
        after_ack_ms: latency(&after_ack),
        delivered: tally.delivered,
        lost: tally.lost,
        duplicated: tally.duplicated,
        out_of_order: tally.out_of_order,
        unexpected: tally.unexpected,
        watcher_errors: errors,
        client_cpu_s: client_cpu,
        server: ServerStats {
            rss_bytes: server_rss,
            cpu_s: server_cpu,
            rss_per_watcher_bytes: rss_per_watcher,
        },
        etcd: EtcdStats {
            rss_bytes: etcd_rss,
            cpu_s: etcd_cpu,
            watchers: etcd_watchers,
        },
    };
    drop(server);
    drop(local);
    let _ = std::fs::remove_dir_all(&dir);
    info!(
        mode = name,
        delivered = report.delivered,
        lost = report.lost,
        p99_ms = report.latency_ms.p99,
        "done"
    );
    Ok(report)
}

async fn current_revision(client: &etcd_client::Client) -> Result<u64, String> {
    let mut kv = client.kv_client();
    let r = kv
        .get("/", Some(etcd_client::GetOptions::new().with_count_only()))
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    Ok(r.header().map_or(0, |h| h.revision() as u64))
}

fn tempfile_dir(base: Option<&std::path::Path>) -> Result<PathBuf, String> {
    let base = base.map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
    let dir = base.join(format!(
        "watchcache-bench-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The report as a readable table.
pub fn table(report: &Report) -> String {
    let modes: Vec<&ModeReport> = match report {
        Report::One(m) => vec![&**m],
        Report::Both { cache, direct, .. } => vec![&**cache, &**direct],
    };
    let opt = |v: Option<f64>, scale: f64, digits: usize| {
        v.map_or("-".to_owned(), |v| format!("{:.*}", digits, v / scale))
    };
    let mut rows: Vec<(String, Vec<String>)> = vec![
        (
            "mode".into(),
            modes.iter().map(|m| m.mode.clone()).collect(),
        ),
        (
            "watchers (routed + unrouted)".into(),
            modes
                .iter()
                .map(|m| format!("{} + {}", m.watchers, m.unrouted_watchers))
                .collect(),
        ),
        (
            "pods".into(),
            modes.iter().map(|m| m.pods.to_string()).collect(),
        ),
        (
            "writes/s achieved".into(),
            modes
                .iter()
                .map(|m| format!("{:.0}", m.writes_per_sec))
                .collect(),
        ),
        (
            "etcd write ack p50 / p99 ms".into(),
            modes
                .iter()
                .map(|m| format!("{:.1} / {:.1}", m.etcd_write_ms.p50, m.etcd_write_ms.p99))
                .collect(),
        ),
        (
            "after etcd ack p50 / p99 ms".into(),
            modes
                .iter()
                .map(|m| format!("{:.1} / {:.1}", m.after_ack_ms.p50, m.after_ack_ms.p99))
                .collect(),
        ),
        (
            "latency p50 / p90 / p99 / max ms".into(),
            modes
                .iter()
                .map(|m| {
                    format!(
                        "{:.1} / {:.1} / {:.1} / {:.1}",
                        m.latency_ms.p50, m.latency_ms.p90, m.latency_ms.p99, m.latency_ms.max
                    )
                })
                .collect(),
        ),
        (
            "delivered".into(),
            modes.iter().map(|m| m.delivered.to_string()).collect(),
        ),
        (
            "lost / duplicated / out of order".into(),
            modes
                .iter()
                .map(|m| format!("{} / {} / {}", m.lost, m.duplicated, m.out_of_order))
                .collect(),
        ),
        (
            "unexpected / watcher errors".into(),
            modes
                .iter()
                .map(|m| format!("{} / {}", m.unexpected, m.watcher_errors))
                .collect(),
        ),
        (
            "server RSS MiB".into(),
            modes
                .iter()
                .map(|m| opt(m.server.rss_bytes.map(|v| v as f64), 1048576.0, 1))
                .collect(),
        ),
        (
            "server CPU s".into(),
            modes.iter().map(|m| opt(m.server.cpu_s, 1.0, 2)).collect(),
        ),
        (
            "server RSS per idle watcher B".into(),
            modes
                .iter()
                .map(|m| opt(m.server.rss_per_watcher_bytes, 1.0, 0))
                .collect(),
        ),
        (
            "load tool CPU s".into(),
            modes.iter().map(|m| opt(m.client_cpu_s, 1.0, 2)).collect(),
        ),
        (
            "etcd RSS MiB".into(),
            modes
                .iter()
                .map(|m| opt(m.etcd.rss_bytes.map(|v| v as f64), 1048576.0, 1))
                .collect(),
        ),
        (
            "etcd CPU s".into(),
            modes.iter().map(|m| opt(m.etcd.cpu_s, 1.0, 2)).collect(),
        ),
        (
            "etcd watches".into(),
            modes
                .iter()
                .map(|m| m.etcd.watchers.map_or("-".into(), |w| w.to_string()))
                .collect(),
        ),
    ];
    if let Report::Both { ratios, .. } = report {
        rows.push((
            "etcd CPU cache/direct".into(),
            vec![opt(ratios.etcd_cpu_s, 1.0, 4), String::new()],
        ));
        rows.push((
            "p99 latency cache/direct".into(),
            vec![format!("{:.3}", ratios.latency_p99), String::new()],
        ));
    }
    let mut out = String::new();
    for (k, vs) in rows {
        out.push_str(&format!("{k:<34}"));
        for v in vs {
            out.push_str(&format!("{v:>32}"));
        }
        out.push('\n');
    }
    out
}

//! `watchcache-bench`: kubelet-style load on a real etcd, through the cache or with one etcd watch
//! per watcher (the world before the cache), measured in one run.
//!
//! A run seeds P pods of about 2 KB over N nodes, opens W per-node watchers
//! (`fieldSelector=spec.nodeName=node-i`) and K unrouted ones, then churns at R writes/s for D
//! seconds (updates, moves between nodes, creations, deletions; each write carries its send time).
//! Afterwards every watcher's stream is checked against etcd's own history: each change it must see
//! exactly once, in revision order. The writer stops at D whatever rate it reached, delivery is
//! awaited for at most 30 s more, and anything undelivered counts as lost.

mod burst;
pub(crate) mod catchup;
pub(crate) mod cluster;
pub(crate) mod coldstart;
pub(crate) mod consistent;
mod http;
pub(crate) mod kubelet;
mod load;
mod partition;
pub(crate) mod pods;
mod procstat;
mod proto;
mod report;
mod stack;
mod verify;
mod watchers;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

pub(crate) use load::WatchWire;
use load::{Churn, Counters, Recorder};
pub(crate) use report::{EtcdStats, Latency, ModeReport, Ratios, Report, ServerStats, table};
use stack::Stack;

/// Which world to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Watchers watch the cache over HTTP.
    Cache,
    /// Each watcher has its own etcd watch and filters on the client.
    DirectEtcd,
    /// Both, one after the other, with ratios (`--model kubelet`: watchcache, then
    /// kube-apiserver, on the same etcd).
    Both,
    /// `--model kubelet` only: the kubelets against kube-apiserver 1.35.
    KubeApiserver,
}

/// What load a run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Model {
    /// Per-node and unrouted pod watchers, one stream each ([`BenchConfig`]).
    Pods,
    /// Simulated kubelets: one TLS HTTP/2 connection per node with its own client certificate,
    /// its watches in protobuf, Node,RBAC ([`kubelet`]).
    Kubelet,
    /// Ingest from etcd with watchers attached: the link to etcd cut, a backlog written, the
    /// link healed, the catch-up timed ([`catchup`]).
    Catchup,
    /// A server started on an etcd holding `--pods` pods of `--pod-bytes` each, timed to serving
    /// them from its cache, with its peak RSS ([`coldstart`]); `--mode both`: watchcache, then
    /// kube-apiserver 1.35.
    ColdStart,
    /// Consistent LISTs of `--pods` quiet configmaps through watchcache in proxy mode against
    /// the same LISTs sent to kube-apiserver 1.35, `--rounds` of each, interleaved
    /// ([`consistent`]).
    ConsistentList,
    /// `--replicas` watchcache servers on one etcd behind HAProxy under the kubelet model's
    /// load, restarted one at a time with their drain (or one killed, `--kill`): resumes
    /// against relists, changes lost, the p99 meanwhile ([`kubelet::rollout`]).
    Rollout,
    /// The same rollout under a real control plane (`watchcache up --replicas`, kubemark hollow
    /// nodes, kube-controller-manager, kube-scheduler; [`cluster`]).
    RolloutCluster,
}

/// The sum of Prometheus counter `name`'s samples in `text` whose labels contain every
/// `label="value"` given; `None` when no sample does (a figure that is missing, not 0).
fn sum_metric(text: &str, name: &str, labels: &[&str]) -> Option<u64> {
    let samples: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|want| l.contains(want))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    (!samples.is_empty()).then(|| samples.iter().sum::<f64>() as u64)
}

/// How the cache mode's clients reach the server over TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub(crate) enum TlsMode {
    /// HTTP/2, [`WATCHERS_PER_H2_CONNECTION`] watchers per connection.
    H2,
    /// HTTP/1.1, one connection per watcher.
    Http1,
}

/// Watch streams per HTTP/2 connection under `--tls h2`: a kubelet's watches on its one
/// connection.
pub(crate) const WATCHERS_PER_H2_CONNECTION: usize = 18;

/// Descriptors a run needs beyond its connections: etcd clients, the processes' pipes and
/// logs, the metrics scrapes, the server's upstream watches.
const FILE_MARGIN: u64 = 512;

/// Fails at once, naming the numbers and the fix, when the open-file limit cannot hold the
/// connections a run plans to keep open at once: each is a descriptor in the bench and one in
/// the server it starts, which raises its soft limit to the same hard one. (Without it, a run
/// past the limit hung for minutes with nothing said: accept failed with `EMFILE` in the server
/// while the bench waited for its watches.)
pub(crate) fn check_open_files(
    connections: usize,
    open_files: Option<crate::fdlimit::OpenFiles>,
) -> Result<(), String> {
    let Some(f) = open_files else {
        // Not known (getrlimit refused): the run finds out, and the server counts it.
        return Ok(());
    };
    let need = connections as u64 + FILE_MARGIN;
    if need > f.soft {
        return Err(format!(
            "this run keeps {connections} connections open, which needs about {need} open files in the bench and in the server, \
             but the open-file limit is {} (hard limit {}): raise the hard limit (`ulimit -Hn {need}` as root, \
             `LimitNOFILE={need}` in a systemd unit, nofile in /etc/security/limits.conf), or plan fewer connections",
            f.soft, f.hard
        ));
    }
    Ok(())
}

/// The connections a pods-model run keeps open at once: its watchers' (18 to an HTTP/2
/// connection, one each otherwise), or its burst's when larger (the burst ends before the
/// watchers open).
pub(crate) fn planned_connections(cfg: &BenchConfig) -> usize {
    let watchers = cfg.watchers + cfg.unrouted;
    let watching = match cfg.tls {
        Some(TlsMode::H2) => watchers.div_ceil(WATCHERS_PER_H2_CONNECTION),
        _ => watchers,
    };
    let bursting = match cfg.tls {
        Some(TlsMode::H2) => cfg.burst.div_ceil(100),
        _ => cfg.burst,
    };
    watching.max(bursting)
}

/// A bench run's parameters.
#[derive(Debug, Clone)]
pub(crate) struct BenchConfig {
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
    /// The local etcd's `--snapshot-count`; `None`: etcd's default.
    pub etcd_snapshot_count: Option<u64>,
    /// The cache mode over TLS (a server started by the bench only).
    pub tls: Option<TlsMode>,
    /// Write every delivered event here as CSV (with [`Mode::Both`], the last mode's).
    pub samples: Option<PathBuf>,
    /// Fresh requests (no resourceVersion) sent within one second after seeding, in the cache
    /// mode: a fleet reconnecting (0: none).
    pub burst: usize,
}

fn bar(progress: bool, len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::with_draw_target(
        Some(len),
        if progress {
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
pub(crate) async fn run(cfg: BenchConfig) -> Result<Report, String> {
    if cfg.watchers > cfg.nodes {
        return Err(format!(
            "--watchers ({}) cannot exceed --nodes ({}): one watcher per node",
            cfg.watchers, cfg.nodes
        ));
    }
    match cfg.mode {
        Mode::KubeApiserver => Err("--mode kube-apiserver is for --model kubelet".into()),
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

/// The watchers of a run, open.
struct Watchers {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    recorders: Vec<Arc<Recorder>>,
    /// The node each watcher selects (`None`: unrouted, every pod).
    nodes: Vec<Option<usize>>,
    counters: Arc<Counters>,
}

/// What the churn and delivery phases measured.
struct Churned {
    /// Per revision written: (sent, acknowledged) in µs.
    sent: HashMap<u64, (u64, u64)>,
    wrote_for: f64,
    end_rev: u64,
    server: ServerStats,
    etcd: EtcdStats,
    client_cpu_s: Option<f64>,
}

async fn run_mode(cfg: &BenchConfig, mode: Mode) -> Result<ModeReport, String> {
    let name = match mode {
        Mode::Cache => "cache",
        _ => "direct-etcd",
    };
    info!(mode = name, nodes = cfg.nodes, pods = cfg.pods, watchers = cfg.watchers, unrouted = cfg.unrouted, rate = cfg.rate, duration = ?cfg.duration, "bench");
    let stack = Stack::start(cfg, mode).await?;
    let rss_per_watcher = match (&stack.server_url, stack.server_pid()) {
        (Some(url), Some(pid)) => watchers::idle_watcher_rss(cfg, &stack, url, pid).await,
        _ => None,
    };
    let start_rev = seed(cfg, &stack).await?;
    let burst = match &stack.server_url {
        Some(url) if cfg.burst > 0 => {
            // HTTP/2 carries 100 streams per connection (kube-apiserver's limit); plain HTTP and
            // TLS HTTP/1.1 open a connection per request.
            let clients: Vec<http::Http> = match cfg.tls {
                Some(TlsMode::H2) => (0..cfg.burst.div_ceil(100))
                    .map(|_| stack.http_client())
                    .collect(),
                _ => vec![stack.http_client()],
            };
            Some(burst::run(cfg, &clients, url, &stack.endpoints[0]).await)
        }
        _ => None,
    };
    let watchers = open(cfg, &stack, mode, start_rev).await?;
    let mut churned = churn(cfg, &stack, &watchers, start_rev).await;
    churned.server.rss_per_watcher_bytes = rss_per_watcher;
    let mut report = verdict(cfg, name, &stack, watchers, churned, start_rev).await?;
    report.burst = burst;
    drop(stack);
    info!(
        mode = name,
        delivered = report.delivered,
        lost = report.lost,
        p99_ms = report.latency_ms.p99,
        "done"
    );
    Ok(report)
}

/// Seeds the pods; returns the revision the watchers start after.
async fn seed(cfg: &BenchConfig, stack: &Stack) -> Result<u64, String> {
    let b = bar(cfg.progress, cfg.pods as u64, "seeding");
    let seeded = load::seed(&stack.client, cfg.pods, cfg.nodes, 50, None, &b)
        .await
        .map_err(|e| format!("seeding: {e}"))?;
    b.finish_and_clear();
    let start_rev = seeded.max(stack::current_revision(&stack.client).await?);
    info!(pods = cfg.pods, revision = start_rev, "seeded");
    if let Some(url) = &stack.server_url {
        stack::wait_for_revision(&stack.http_client(), url, start_rev).await?;
    }
    Ok(start_rev)
}

/// Opens every watcher from `start_rev`: over HTTP to the cache, or one etcd watch each.
async fn open(
    cfg: &BenchConfig,
    stack: &Stack,
    mode: Mode,
    start_rev: u64,
) -> Result<Watchers, String> {
    let total = cfg.watchers + cfg.unrouted;
    let (stop, stop_rx) = watch::channel(false);
    let counters = Arc::new(Counters::default());
    let recorders: Vec<Arc<Recorder>> = (0..total).map(|_| Arc::new(Recorder::default())).collect();
    let nodes: Vec<Option<usize>> = (0..total)
        .map(|i| (i < cfg.watchers).then_some(i))
        .collect();
    // One client per connection group: HTTP/2 multiplexes a client's watchers on one connection.
    let per_client = match cfg.tls {
        Some(TlsMode::H2) => WATCHERS_PER_H2_CONNECTION,
        _ => total.max(1),
    };
    let http: Vec<http::Http> = (0..total.div_ceil(per_client).max(1))
        .map(|_| stack.http_client())
        .collect();
    let mut etcd_clients = Vec::new();
    if mode == Mode::DirectEtcd {
        for _ in 0..16.min(total.max(1)) {
            etcd_clients.push(
                etcd_client::Client::connect(&stack.endpoints, None)
                    .await
                    .map_err(|e| format!("etcd: {e}"))?,
            );
        }
    }
    let b = bar(cfg.progress, total as u64, "watchers");
    let tasks = watchers::open_watchers(total, &counters, &b, |i| {
        let (rec, node) = (Arc::clone(&recorders[i]), nodes[i]);
        let (counters, stop) = (Arc::clone(&counters), stop_rx.clone());
        match &stack.server_url {
            Some(url) => {
                let selector = node
                    .map(|n| format!("&fieldSelector=spec.nodeName%3Dnode-{n}"))
                    .unwrap_or_default();
                let url =
                    format!("{url}/api/v1/pods?watch=1&resourceVersion={start_rev}{selector}");
                let client = http[i / per_client].clone();
                tokio::spawn(load::http_watcher(
                    client,
                    url,
                    load::WatchWire::Json,
                    rec,
                    counters,
                    stop,
                ))
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
    Ok(Watchers {
        stop,
        tasks,
        recorders,
        nodes,
        counters,
    })
}

/// Churns for the configured duration, then waits (bounded) for delivery. CPU is measured over
/// exactly these two phases.
async fn churn(cfg: &BenchConfig, stack: &Stack, w: &Watchers, start_rev: u64) -> Churned {
    let (server_pid, etcd_pid) = (stack.server_pid(), stack.etcd_pid());
    let cpu = |pid: Option<u32>| pid.and_then(procstat::cpu_seconds);
    let me = Some(std::process::id());
    let (client0, server0, etcd0) = (cpu(me), cpu(server_pid), cpu(etcd_pid));
    let b = bar(
        cfg.progress,
        (cfg.rate * cfg.duration.as_secs_f64()) as u64,
        "writing",
    );
    let began = Instant::now();
    let sent = load::churn(
        &stack.client,
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
    let etcd_watchers = stack::etcd_watch_count(&stack.endpoints[0]).await;
    let end_rev = sent.keys().copied().max().unwrap_or(start_rev);
    let b = bar(cfg.progress, sent.len() as u64, "delivering");
    load::until_quiet(&w.counters.received, cfg.delivery_grace, Some(&b)).await;
    b.finish_and_clear();
    let spent = |before: Option<f64>, pid| before.zip(cpu(pid)).map(|(a, b)| b - a);
    Churned {
        wrote_for,
        end_rev,
        server: ServerStats {
            rss_bytes: server_pid.and_then(procstat::rss_bytes),
            cpu_s: spent(server0, server_pid),
            rss_per_watcher_bytes: None,
            connections: match &stack.server_url {
                Some(url) => stack::connections(stack, url).await,
                None => None,
            },
        },
        etcd: EtcdStats {
            rss_bytes: etcd_pid.and_then(procstat::rss_bytes),
            cpu_s: spent(etcd0, etcd_pid),
            watchers: etcd_watchers,
        },
        client_cpu_s: spent(client0, me),
        sent,
    }
}

/// Checks every watcher's stream against etcd's own history, and builds the mode's report.
async fn verdict(
    cfg: &BenchConfig,
    name: &str,
    stack: &Stack,
    w: Watchers,
    c: Churned,
    start_rev: u64,
) -> Result<ModeReport, String> {
    let history = verify::history(&stack.client, start_rev, c.end_rev).await?;
    let expected: Vec<Vec<(u64, u32)>> = w
        .nodes
        .iter()
        .map(|n| verify::expected(&history, *n))
        .collect();
    if w.stop.send(true).is_err() {
        warn!("watchers already gone");
    }
    for t in w.tasks {
        let _ = t.await;
    }
    let mut tally = verify::Tally::default();
    let mut lat: Vec<f64> = Vec::new();
    let mut after_ack: Vec<f64> = Vec::new();
    let mut errors = w.counters.failed.load(Ordering::Relaxed) as u64;
    let mut samples = String::new();
    for (i, (rec, exp)) in w.recorders.iter().zip(&expected).enumerate() {
        let got = rec.events.lock();
        let node = w.nodes[i].map(|n| n.to_string()).unwrap_or_default();
        tally += verify::tally(&got, exp, c.end_rev, |rev, at| {
            let Some(&(sent, ack)) = c.sent.get(&rev) else {
                return;
            };
            if cfg.samples.is_some() {
                let _ = writeln!(samples, "{i},{node},{rev},{sent},{ack},{at}");
            }
            lat.push(at.saturating_sub(sent) as f64 / 1000.0);
            after_ack.push(at.saturating_sub(ack) as f64 / 1000.0);
        });
        errors += rec.errors.load(Ordering::Relaxed);
    }
    if let Some(path) = &cfg.samples {
        std::fs::write(path, samples)
            .map_err(|e| format!("writing samples to {}: {e}", path.display()))?;
    }
    let mut acks: Vec<f64> = c
        .sent
        .values()
        .map(|(s, a)| a.saturating_sub(*s) as f64 / 1000.0)
        .collect();
    Ok(ModeReport {
        mode: name.into(),
        watchers: cfg.watchers,
        unrouted_watchers: cfg.unrouted,
        pods: cfg.pods,
        writes_per_sec: c.sent.len() as f64 / c.wrote_for.max(1e-3),
        duration_s: cfg.duration.as_secs_f64(),
        latency_ms: Latency::of(&mut lat),
        etcd_write_ms: Latency::of(&mut acks),
        after_ack_ms: Latency::of(&mut after_ack),
        delivered: tally.delivered,
        lost: tally.lost,
        duplicated: tally.duplicated,
        out_of_order: tally.out_of_order,
        unexpected: tally.unexpected,
        watcher_errors: errors,
        client_cpu_s: c.client_cpu_s,
        server: c.server,
        etcd: c.etcd,
        burst: None,
    })
}

#[cfg(test)]
mod open_files_tests {
    use super::*;
    use crate::fdlimit::OpenFiles;

    #[test]
    fn a_run_past_the_open_file_limit_fails_at_once_naming_the_numbers() {
        let f = Some(OpenFiles {
            was: 1024,
            soft: 20_000,
            hard: 20_000,
        });
        assert!(check_open_files(19_000, f).is_ok());
        let e = check_open_files(30_000, f).unwrap_err();
        for part in [
            "30000 connections",
            "30512 open files",
            "20000 (hard limit 20000)",
            "ulimit -Hn 30512",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        // Unknown: the run finds out.
        assert!(check_open_files(1_000_000, None).is_ok());
    }
}

//! `--model consistent-list`: consistent LISTs through proxy mode, against the same LIST sent to
//! kube-apiserver (issue 39, item 4).
//!
//! One etcd holds `--pods` configmaps of about `--pod-bytes` each in namespace `quiet`, which no
//! one writes. kube-apiserver 1.35 starts on it, and watchcache in proxy mode in front of it
//! (`serve --upstream-kubeconfig`, caching configmaps). Then `--rounds` times, one after the
//! other so that they share the machine's noise, each first in turn: the admin's consistent LIST
//! of the namespace's configmaps from kube-apiserver, and the same LIST through watchcache, each
//! timed from its request to its last byte over a kept HTTP/2 connection (one per server).
//! Nothing changes the configmaps, while
//! `--rate` Lease writes a second (straight into etcd, as kube-apiserver stores them) move etcd's
//! revision on, as a cluster's other resources do: each LIST through watchcache is served only
//! once proven fresh (`cache/fresh.rs`), and watchcache's metrics say how many upstream reads that
//! took and how many were proofs by selection (the others found the cache already at the
//! upstream's resourceVersion).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use super::kubelet::Scratch;
use super::kubelet::pki::Pki;
use super::kubelet::servers::{self, Side};
use crate::bench::stack::ServerProcess;

/// What a consistent-list run measures.
#[derive(Debug, Clone)]
pub(crate) struct ConsistentConfig {
    pub objects: usize,
    pub object_bytes: usize,
    pub rounds: usize,
    /// Lease writes a second during the rounds.
    pub rate: f64,
    pub server_binary: PathBuf,
    pub kube_apiserver: PathBuf,
    pub etcd_binary: Option<PathBuf>,
    pub etcd_data_dir: Option<PathBuf>,
    /// `tests/h2probe` built: after the rounds, the same LISTs (and at `resourceVersion=0`)
    /// timed by Go's own HTTP/2 client, the client kubectl and client-go use.
    pub go_probe: Option<PathBuf>,
}

/// Latencies of one side's LISTs, in milliseconds.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Latencies {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latencies {
    fn of(mut v: Vec<Duration>) -> Latencies {
        v.sort();
        let at = |q: usize| v[(v.len() * q / 100).min(v.len() - 1)].as_secs_f64() * 1e3;
        Latencies {
            p50_ms: at(50),
            p99_ms: at(99),
            max_ms: v.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        }
    }
}

/// The run's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ConsistentRun {
    pub objects: usize,
    pub rounds: usize,
    /// Writes to other resources during the rounds.
    pub lease_writes: u64,
    pub direct: Latencies,
    pub through_watchcache: Latencies,
    /// `watchcache_fresh_reads_total` and `_fresh_by_selection_total` for configmaps over the
    /// rounds; `None` when the metrics could not be read.
    pub fresh_reads: Option<u64>,
    pub proven_by_selection: Option<u64>,
    /// `--go-probe`'s lines: (server, what was read, its p50 / p99 / slowest as it printed them).
    pub go_client: Vec<(String, String, String)>,
}

/// How long a server may take to be ready before the run fails.
const READY_LIMIT: Duration = Duration::from_secs(120);

pub(crate) async fn run(cfg: ConsistentConfig) -> Result<ConsistentRun, String> {
    if cfg.rounds == 0 || cfg.objects == 0 {
        return Err("--model consistent-list needs --rounds and --pods above 0".into());
    }
    let scratch = Scratch::start(
        "consistent",
        cfg.etcd_data_dir.as_deref(),
        cfg.etcd_binary.as_deref(),
    )
    .await?;
    let dir = &scratch.dir;
    seed(&scratch.client, &cfg).await?;
    let pki = Pki::new(&dir.join("pki"))?;
    let kas_dir = dir.join("kube-apiserver");
    std::fs::create_dir_all(&kas_dir).map_err(|e| e.to_string())?;
    let (kas, _kas) = servers::start(
        Side::KubeApiserver,
        &cfg.kube_apiserver,
        &scratch.endpoint,
        &pki,
        &kas_dir,
        false,
    )?;
    // One client per server: a client keeps one HTTP/2 connection, to whichever it reached first.
    let to_kas = super::http::Http::tls(pki.admin(), super::TlsMode::H2);
    ready(&to_kas, &kas, "kube-apiserver").await?;
    let (wc, _wc) = start_proxy(&cfg.server_binary, &kas, &pki, dir)?;
    let http = super::http::Http::tls(pki.admin(), super::TlsMode::H2);
    ready(&http, &wc, "watchcache").await?;
    let path = "/api/v1/namespaces/quiet/configmaps";
    // Served from its cache once it holds them all.
    let began = Instant::now();
    while items(&http.text(&format!("{wc}{path}")).await?) < cfg.objects {
        if began.elapsed() > READY_LIMIT {
            return Err("watchcache never listed every configmap".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let going = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = tokio::spawn(write_leases(
        scratch.client.kv_client(),
        cfg.rate,
        std::sync::Arc::clone(&going),
    ));
    let before = fresh_counts(&http, &wc).await;
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    let mut last_log = Instant::now();
    for round in 0..cfg.rounds {
        // In turn first: a consistent LIST right after another finds kube-apiserver's cache
        // already fresh at nearly the same revision, where the first one waited for it.
        let mut pair = [(&to_kas, &kas, &mut direct), (&http, &wc, &mut through)];
        if round % 2 == 1 {
            pair.reverse();
        }
        for (client, url, out) in pair {
            let started = Instant::now();
            let text = client.text(&format!("{url}{path}")).await?;
            out.push(started.elapsed());
            if items(&text) != cfg.objects {
                return Err(format!("{url}{path}: not {} items", cfg.objects));
            }
        }
        if last_log.elapsed() > Duration::from_secs(10) {
            info!(round, of = cfg.rounds, "listing");
            last_log = Instant::now();
        }
    }
    let after = fresh_counts(&http, &wc).await;
    let mut go_client = Vec::new();
    if let Some(probe) = &cfg.go_probe {
        let (cert, key) = pki.admin_files(&dir.join("pki"))?;
        for (query, what) in [
            ("", "consistent"),
            ("?resourceVersion=0", "resourceVersion=0"),
        ] {
            for (name, url) in [("kube-apiserver", &kas), ("through watchcache", &wc)] {
                let out = Command::new(probe)
                    .arg(format!("{url}{path}{query}"))
                    .args([&cert, &key, &pki.ca_file])
                    .arg(cfg.rounds.to_string())
                    .output()
                    .map_err(|e| format!("{}: {e}", probe.display()))?;
                if !out.status.success() {
                    return Err(format!(
                        "{}: {}",
                        probe.display(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let line = String::from_utf8_lossy(&out.stdout);
                let figures = line
                    .split_once(" p50 ")
                    .map_or(line.trim(), |(_, f)| f.trim());
                go_client.push((name.to_owned(), what.to_owned(), format!("p50 {figures}")));
            }
        }
    }
    going.store(false, std::sync::atomic::Ordering::Relaxed);
    let leases = writer.await.map_err(|e| e.to_string())??;
    let diff = |f: fn(&(u64, u64)) -> u64| {
        before
            .as_ref()
            .zip(after.as_ref())
            .map(|(b, a)| f(a) - f(b))
    };
    Ok(ConsistentRun {
        objects: cfg.objects,
        rounds: cfg.rounds,
        lease_writes: leases,
        direct: Latencies::of(direct),
        through_watchcache: Latencies::of(through),
        fresh_reads: diff(|c| c.0),
        proven_by_selection: diff(|c| c.1),
        go_client,
    })
}

/// The configmaps, as JSON, in transactions of 64.
async fn seed(client: &etcd_client::Client, cfg: &ConsistentConfig) -> Result<(), String> {
    let pad = "x".repeat(cfg.object_bytes.saturating_sub(300));
    let mut kv = client.kv_client();
    for chunk in (0..cfg.objects).collect::<Vec<_>>().chunks(64) {
        let ops = chunk
            .iter()
            .map(|i| {
                let cm = serde_json::json!({
                    "kind": "ConfigMap",
                    "apiVersion": "v1",
                    "metadata": {
                        "name": format!("cm-{i:05}"),
                        "namespace": "quiet",
                        "uid": format!("00000000-0000-4000-8000-{i:012}"),
                        "creationTimestamp": "2026-01-01T00:00:00Z",
                    },
                    "data": {"pad": pad},
                });
                etcd_client::TxnOp::put(
                    format!("/registry/configmaps/quiet/cm-{i:05}"),
                    cm.to_string(),
                    None,
                )
            })
            .collect::<Vec<_>>();
        kv.txn(etcd_client::Txn::new().and_then(ops))
            .await
            .map_err(|e| format!("etcd: {e}"))?;
    }
    Ok(())
}

/// Writes Lease `other/l{0..10}` at `rate` a second until `going` is false; how many it wrote.
async fn write_leases(
    mut kv: etcd_client::KvClient,
    rate: f64,
    going: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<u64, String> {
    let mut n = 0u64;
    if rate <= 0.0 {
        return Ok(0);
    }
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    while going.load(std::sync::atomic::Ordering::Relaxed) {
        tick.tick().await;
        let i = n % 10;
        let lease = serde_json::json!({
            "kind": "Lease",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": {
                "name": format!("l{i}"),
                "namespace": "other",
                "uid": format!("00000000-0000-4000-9000-{i:012}"),
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"holderIdentity": format!("h{n}")},
        });
        kv.put(
            format!("/registry/leases/other/l{i}"),
            lease.to_string(),
            None,
        )
        .await
        .map_err(|e| format!("etcd: {e}"))?;
        n += 1;
    }
    Ok(n)
}

/// `watchcache serve` in proxy mode in front of `upstream`, caching configmaps, as the admin.
fn start_proxy(
    binary: &Path,
    upstream: &str,
    pki: &Pki,
    dir: &Path,
) -> Result<(String, ServerProcess), String> {
    let (cert, key) = pki.admin_files(&dir.join("pki"))?;
    let f = |p: &Path| p.display().to_string();
    let kubeconfig = dir.join("upstream.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {upstream}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: admin\ncurrent-context: c\n",
            f(&pki.ca_file),
            f(&cert),
            f(&key)
        ),
    )
    .map_err(|e| e.to_string())?;
    let port = watchcache_etcd::free_port().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(binary);
    cmd.args(["serve", "--upstream-kubeconfig", &f(&kubeconfig)])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--data-dir", &f(&dir.join("watchcache"))])
        .args(["--tls-cert-file", &f(&pki.serving_cert)])
        .args(["--tls-private-key-file", &f(&pki.serving_key)])
        .args(["--client-ca-file", &f(&pki.ca_file)])
        .args(["--authorization-mode", "Node,RBAC"])
        .args(["--resources", "configmaps"])
        .env("RUST_LOG", "warn");
    let process = servers::spawn_logged(&mut cmd, &dir.join("watchcache.log"))?;
    Ok((format!("https://127.0.0.1:{port}"), process))
}

async fn ready(http: &super::http::Http, url: &str, name: &str) -> Result<(), String> {
    let began = Instant::now();
    loop {
        match http.text(&format!("{url}/readyz")).await {
            Ok(_) => return Ok(()),
            Err(e) if began.elapsed() > READY_LIMIT => {
                return Err(format!("{name} not ready within {READY_LIMIT:?}: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// How many items a LIST's JSON holds.
fn items(text: &str) -> usize {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["items"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// (`watchcache_fresh_reads_total`, `watchcache_fresh_by_selection_total`) of configmaps.
async fn fresh_counts(http: &super::http::Http, url: &str) -> Option<(u64, u64)> {
    let text = match http.text(&format!("{url}/metrics")).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "watchcache's metrics unread: its fresh reads are missing");
            return None;
        }
    };
    let count = |name| super::sum_metric(&text, name, &["resource=\"configmaps\""]);
    let found =
        count("watchcache_fresh_reads_total").zip(count("watchcache_fresh_by_selection_total"));
    if found.is_none() {
        tracing::warn!("no configmaps fresh-read counters in watchcache's metrics");
    }
    found
}

/// The report as a table.
pub(crate) fn table(run: &ConsistentRun) -> String {
    let n = |v: Option<u64>| v.map_or_else(|| "missing".to_owned(), |v| v.to_string());
    let mut out = format!(
        "consistent LIST of {} quiet configmaps, {} rounds, interleaved, {} Lease writes meanwhile\n{:<20} {:>10} {:>10} {:>10}\n",
        run.objects, run.rounds, run.lease_writes, "side", "p50 (ms)", "p99 (ms)", "max (ms)"
    );
    for (name, l) in [
        ("kube-apiserver", &run.direct),
        ("through watchcache", &run.through_watchcache),
    ] {
        out.push_str(&format!(
            "{name:<20} {:>10.2} {:>10.2} {:>10.2}\n",
            l.p50_ms, l.p99_ms, l.max_ms
        ));
    }
    out.push_str(&format!(
        "p99 difference: {:+.2} ms; upstream reads {}, proven by selection {}\n",
        run.through_watchcache.p99_ms - run.direct.p99_ms,
        n(run.fresh_reads),
        n(run.proven_by_selection)
    ));
    for (name, what, figures) in &run.go_client {
        out.push_str(&format!(
            "Go's HTTP/2 client, {what}: {name:<20} {figures}\n"
        ));
    }
    out
}

//! `--model cold-start`: how long a server takes from its start to serving a large resource from
//! its cache, and the memory it takes to get there (issue 39, item 9; k/k#136950: a large CRD
//! took 8 minutes to load, longer than the 5-minute compaction, and the cache never warmed).
//!
//! One etcd is seeded with `--pods` pods of about `--pod-bytes` each, stored as kube-apiserver
//! 1.35 stores them (protobuf, or JSON with `--storage json`). Then each side in turn starts
//! on it, alone, from nothing:
//! - watchcache (`serve --etcd URL`, the kubelet model's resources, as Node,RBAC needs them):
//!   ready when `/readyz` answers 200, which it does once every cache has loaded;
//! - kube-apiserver 1.35 (`--mode kube-apiserver`, or `both`): ready when it logs its pods
//!   cacher initialized (`cacher initialized ... resource="pods"`, klog V(1)), polled every 20 ms.
//!
//! Reported per side: time from the process's start to ready, its peak RSS by then (VmHWM), and
//! that against the bytes stored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use super::kubelet::Scratch;
use super::kubelet::pki::Pki;
use super::kubelet::servers::{self, Side};
use super::pods::{Codec, Storage};
use super::procstat;

/// What a cold-start run measures.
#[derive(Debug, Clone)]
pub(crate) struct ColdStartConfig {
    pub pods: usize,
    pub pod_bytes: usize,
    pub sides: Vec<Side>,
    pub server_binary: PathBuf,
    /// Each measured in turn where the sides name kube-apiserver (1.35.4's, then 1.37.2's).
    pub kube_apiservers: Vec<PathBuf>,
    pub etcd_binary: Option<PathBuf>,
    pub etcd_data_dir: Option<PathBuf>,
    pub storage: Storage,
}

/// One side's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ColdStart {
    pub side: Side,
    /// The side and its version where the binary's path names one (`target/k8s/v1.37.2/...`).
    pub name: String,
    /// From the process's start to serving the pods from its cache.
    pub ready_s: f64,
    /// Peak resident set by then (VmHWM); `None` when it could not be read.
    pub peak_rss_bytes: Option<u64>,
}

/// The run: what was stored, and each side's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ColdStartRun {
    pub pods: usize,
    pub stored_bytes: u64,
    pub seed_s: f64,
    pub sides: Vec<ColdStart>,
}

/// How long a side may take to be ready before the run fails.
const READY_LIMIT: Duration = Duration::from_secs(900);

/// Puts per etcd transaction, at most (etcd's default `--max-txn-ops` is 128).
const TXN_OPS: usize = 128;

/// Bytes per etcd transaction, about (etcd's default request limit is 1.5 MiB).
const TXN_BYTES: usize = 1 << 20;

pub(crate) async fn run(cfg: ColdStartConfig) -> Result<ColdStartRun, String> {
    let scratch = Scratch::start(
        "coldstart",
        cfg.etcd_data_dir.as_deref(),
        cfg.etcd_binary.as_deref(),
    )
    .await?;
    let (dir, endpoint, client) = (&scratch.dir, &scratch.endpoint, &scratch.client);
    let began = Instant::now();
    let stored_bytes = seed(client, &cfg).await?;
    let seed_s = began.elapsed().as_secs_f64();
    info!(
        pods = cfg.pods,
        stored_bytes,
        took_s = seed_s,
        "etcd seeded"
    );
    let pki = Pki::new(&dir.join("pki"))?;
    let mut sides = Vec::new();
    for side in &cfg.sides {
        match side {
            Side::Watchcache => {
                let name = side.name().to_owned();
                let binary = &cfg.server_binary;
                sides.push(start_side(*side, binary, name, endpoint, &pki, dir).await?);
            }
            Side::KubeApiserver => {
                for binary in &cfg.kube_apiservers {
                    let name = match version_in(binary) {
                        Some(v) => format!("{} {v}", side.name()),
                        None => side.name().to_owned(),
                    };
                    sides.push(start_side(*side, binary, name, endpoint, &pki, dir).await?);
                }
            }
        }
    }
    drop(scratch);
    Ok(ColdStartRun {
        pods: cfg.pods,
        stored_bytes,
        seed_s,
        sides,
    })
}

/// The pods, in transactions of [`TXN_OPS`] puts, 8 at a time; the bytes stored.
async fn seed(client: &etcd_client::Client, cfg: &ColdStartConfig) -> Result<u64, String> {
    let codec = std::sync::Arc::new(Codec::new()?);
    let pad = cfg.pod_bytes.saturating_sub(1_100);
    let mut bytes = 0u64;
    let mut batches = tokio::task::JoinSet::new();
    let started = Instant::now();
    let mut last_log = Instant::now();
    let mut next = 0;
    while next < cfg.pods {
        let first = next;
        let mut ops = Vec::with_capacity(TXN_OPS);
        let mut txn_bytes = 0;
        while next < cfg.pods && ops.len() < TXN_OPS && txn_bytes < TXN_BYTES {
            let key = super::pods::key(next);
            let json = pod_json(next, pad);
            let value = codec.stored(cfg.storage, &key, json)?;
            bytes += value.len() as u64;
            txn_bytes += value.len();
            ops.push(etcd_client::TxnOp::put(key, value, None));
            next += 1;
        }
        let mut kv = client.kv_client();
        batches.spawn(async move {
            kv.txn(etcd_client::Txn::new().and_then(ops))
                .await
                .map(|_| ())
                .map_err(|e| format!("etcd: {e}"))
        });
        while batches.len() >= 8 {
            if let Some(r) = batches.join_next().await {
                r.map_err(|e| e.to_string())??;
            }
        }
        if last_log.elapsed() > Duration::from_secs(10) {
            info!(
                pods = first,
                of = cfg.pods,
                elapsed_s = started.elapsed().as_secs(),
                "seeding etcd"
            );
            last_log = Instant::now();
        }
    }
    while let Some(r) = batches.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    Ok(bytes)
}

/// A pod of about `pad` + 1.1 KB of JSON: the bench's pod with an annotation of `pad` bytes.
fn pod_json(i: usize, pad: usize) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(&super::pods::json_app(i, i % 1000, i % 100, 1, 0))
            .unwrap_or_default();
    v["metadata"]["annotations"]["pad"] = serde_json::Value::String("x".repeat(pad));
    v.to_string()
}

/// The version directory a peer binary was built into (`target/k8s/v1.37.2/kube-apiserver`).
fn version_in(binary: &Path) -> Option<String> {
    binary
        .parent()
        .and_then(Path::file_name)
        .and_then(|v| v.to_str())
        .filter(|v| v.starts_with('v') && v[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_owned)
}

async fn start_side(
    side: Side,
    binary: &Path,
    name: String,
    etcd_url: &str,
    pki: &Pki,
    dir: &Path,
) -> Result<ColdStart, String> {
    let side_dir = dir.join(name.replace(' ', "-"));
    std::fs::create_dir_all(&side_dir).map_err(|e| e.to_string())?;
    info!(side = %name, "starting");
    let started = Instant::now();
    let (url, process) = servers::start(side, binary, etcd_url, pki, &side_dir, false)?;
    let pid = process.0.id();
    let log = side_dir.join(format!("{}.log", side.name()));
    let http = super::http::Http::tls(pki.admin(), super::TlsMode::H2);
    let mut last = String::new();
    loop {
        if started.elapsed() > READY_LIMIT {
            return Err(format!(
                "{} not ready within {READY_LIMIT:?} (last: {last}); its log ends:\n{}",
                side.name(),
                servers::log_tail(side, &side_dir)
            ));
        }
        let ready = match side {
            Side::Watchcache => match http.text(&format!("{url}/readyz")).await {
                Ok(_) => true,
                Err(e) => {
                    last = e;
                    false
                }
            },
            Side::KubeApiserver => std::fs::read_to_string(&log).is_ok_and(|t| {
                t.lines()
                    .any(|l| l.contains("cacher initialized") && l.contains("resource=\"pods\""))
            }),
        };
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready_s = started.elapsed().as_secs_f64();
    let peak_rss_bytes = procstat::peak_rss_bytes(pid);
    info!(side = %name, ready_s, peak_rss_bytes, "ready");
    drop(process);
    Ok(ColdStart {
        side,
        name,
        ready_s,
        peak_rss_bytes,
    })
}

/// The report as a table.
pub(crate) fn table(run: &ColdStartRun) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let mut out = format!(
        "cold start: {} pods, {:.0} MB stored (seeded in {:.1} s)\n{:<24} {:>10} {:>14} {:>16}\n",
        run.pods,
        mb(run.stored_bytes),
        run.seed_s,
        "side",
        "ready (s)",
        "peak RSS (MB)",
        "RSS / stored"
    );
    for s in &run.sides {
        let (rss, ratio) = match s.peak_rss_bytes {
            Some(r) => (
                format!("{:.0}", mb(r)),
                format!("{:.2}", r as f64 / run.stored_bytes.max(1) as f64),
            ),
            None => ("missing".into(), "missing".into()),
        };
        out.push_str(&format!(
            "{:<24} {:>10.2} {:>14} {:>16}\n",
            s.name, s.ready_s, rss, ratio
        ));
    }
    out
}

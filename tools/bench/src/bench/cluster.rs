//! `watchcache-bench --model rollout-cluster`: the rollout of [`super::kubelet::rollout`] under a
//! real control plane instead of simulated kubelets.
//!
//! The bench runs `watchcache up --replicas R --nodes N` (etcd 3.6, kube-apiserver,
//! kube-controller-manager, kube-scheduler and N kubemark hollow nodes, all pointed at HAProxy in
//! front of the replicas, which read etcd and send writes to kube-apiserver), creates a
//! Deployment of `--pods` pods, scales it up and down every 5 s meanwhile, and keeps one client of
//! its own: kube-rs's `watcher` on ConfigMaps through the balancer, while it writes one ConfigMap
//! `--rate` times a second through the balancer too. Then it restarts each replica in turn with
//! SIGTERM (`up` starts an exited replica again on its port), or kills one with SIGKILL
//! (`--kill`).
//!
//! The components are real and run unchanged, so their relists are counted where they land: the
//! replicas' LISTs and the watch starts that send the state again (`initial_events`, `state`),
//! against their resumes (`watchcache_watch_starts_total`), kube-apiserver's LISTs, and etcd's
//! Range calls. Each figure is given for the rollout and for a window of the same load and
//! length before it, so that what the rollout added stands out. The probe's write → event
//! p99 is measured over the rollout; its changes are checked to arrive once each, in order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::time::Instant;
use tracing::{info, warn};
use watchcache_etcd::free_port;

use super::kubelet::servers::spawn_logged;
use super::{Latency, burst, pods};

/// A cluster rollout's parameters.
#[derive(Debug, Clone)]
pub(crate) struct ClusterConfig {
    /// kubemark hollow nodes.
    pub nodes: usize,
    /// The Deployment's pods (scaled between this and half as many again).
    pub pods: usize,
    pub replicas: usize,
    pub kill: bool,
    /// The probe's ConfigMap writes per second.
    pub rate: f64,
    /// The length of the window measured before the rollout.
    pub before: Duration,
    pub shutdown_delay: Duration,
    pub watch_grace: Duration,
    /// This binary (it runs `up` and the replicas).
    pub binary: PathBuf,
    pub k8s_bin_dir: PathBuf,
    /// etcd 3.6 for `up` (`None`: `etcd` from PATH).
    pub etcd_binary: Option<PathBuf>,
    /// Where the plane's data dir goes (default: the system temp dir).
    pub data_dir: Option<PathBuf>,
}

/// What one cluster rollout measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClusterReport {
    pub nodes: usize,
    pub pods: usize,
    pub replicas: usize,
    pub how: &'static str,
    pub rollout_s: f64,
    pub replica_times: Vec<super::kubelet::rollout::ReplicaTimes>,
    /// The window before the rollout (same length as the rollout, at least `--settle`).
    pub before_s: f64,
    pub before: Window,
    pub during: Window,
    /// The probe: kube-rs's watcher through the balancer.
    pub probe_writes: usize,
    pub probe_lost: usize,
    pub probe_duplicated: usize,
    pub probe_out_of_order: usize,
    /// Its relists (kube-rs restarts its watch with a list: `Event::Init`), the first excluded.
    pub probe_relists: usize,
    /// Write sent → event received, for the writes sent during the rollout.
    pub probe_ms: Option<Latency>,
    pub load_average: Option<f64>,
}

/// The counts of one window.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Window {
    pub served: super::kubelet::rollout::Served,
    pub kube_apiserver_lists: Option<u64>,
    pub etcd_ranges: Option<u64>,
}

/// One replica, as `up` writes it in `replicas.json`.
#[derive(Debug, Clone, serde::Deserialize)]
struct ReplicaState {
    replica: usize,
    url: String,
    pid: u32,
}

/// Runs the model.
///
/// # Errors
/// What could not be set up or measured.
pub(crate) async fn run(cfg: ClusterConfig) -> Result<ClusterReport, String> {
    let base = cfg.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let data = base.join(format!(
        "watchcache-rollout-cluster-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let listen = format!("127.0.0.1:{}", free_port().map_err(|e| e.to_string())?);
    let mut cmd = std::process::Command::new(&cfg.binary);
    cmd.arg("up")
        .args(["--replicas", &cfg.replicas.to_string()])
        .args(["--nodes", &cfg.nodes.to_string()])
        .arg("--data-dir")
        .arg(&data)
        .args(["--listen", &listen])
        .arg("--k8s-bin-dir")
        .arg(&cfg.k8s_bin_dir);
    if let Some(etcd) = &cfg.etcd_binary {
        cmd.arg("--etcd-bin").arg(etcd);
    }
    cmd.arg("--").args([
        "--shutdown-delay-duration".to_string(),
        format!("{}s", cfg.shutdown_delay.as_secs_f64()),
        "--shutdown-watch-termination-grace-period".to_string(),
        format!("{}s", cfg.watch_grace.as_secs_f64()),
    ]);
    let log = data.join("up.log");
    let mut up = spawn_logged(&mut cmd, &log)?;
    info!(data = %data.display(), nodes = cfg.nodes, replicas = cfg.replicas, "starting the control plane");
    // "ready in …: watchcache on … (…; kube-apiserver URL, etcd URL)".
    let started = Instant::now();
    let ready_line = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.starts_with("ready in ")) {
            break l.to_owned();
        }
        if let Ok(Some(status)) = up.0.try_wait() {
            return Err(format!(
                "watchcache up exited ({status}):\n{}",
                tail(&text, 30)
            ));
        }
        if started.elapsed() > Duration::from_secs(900) {
            return Err(format!(
                "the control plane was not ready in 15 minutes; see {}",
                log.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let between = |from: &str, to: char| {
        let at = ready_line.find(from)? + from.len();
        let rest = &ready_line[at..];
        Some(rest[..rest.find(to)?].to_owned())
    };
    let etcd_url = between("etcd http", ')')
        .map(|rest| format!("http{rest}"))
        .ok_or("no etcd URL in up's output")?;
    let client = |path: PathBuf| async move {
        watchcache_kube::client_from_kubeconfig(&path, None)
            .await
            .map_err(|e| e.to_string())
    };
    let admin = client(data.join("admin.kubeconfig")).await?;
    let kas = client(data.join("kube-apiserver.kubeconfig")).await?;
    let ready = wait_nodes(&admin, cfg.nodes).await;
    info!(ready, of = cfg.nodes, took = ?started.elapsed(), "control plane up, nodes ready");

    // The workload.
    let ns = "rollout";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
                .map_err(|e| e.to_string())?,
        )
        .await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    // The service-account controller makes `default` first; the pods wait for it.
    let mut made = false;
    for _ in 0..120 {
        if deployments
            .create(&PostParams::default(), &deployment(cfg.pods))
            .await
            .is_ok()
        {
            made = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if !made {
        return Err("the Deployment could not be created".into());
    }
    let scaler = tokio::spawn(scale_loop(deployments.clone(), cfg.pods));

    // The probe.
    let probe = Probe::default();
    let seen = Arc::clone(&probe.seen);
    let relists = Arc::clone(&probe.inits);
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let watch_task = tokio::spawn({
        let cms = cms.clone();
        async move {
            let mut stream = watcher(cms, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                let now = pods::now_us();
                match ev {
                    Ok(watcher::Event::Apply(cm)) => {
                        if let Some(rv) = rv_of(&cm) {
                            seen.lock().push((rv, now));
                        }
                    }
                    Ok(watcher::Event::Init) => *relists.lock() += 1,
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "probe watcher"),
                }
            }
        }
    });
    let written = Arc::clone(&probe.written);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn({
        let cms = cms.clone();
        let rate = cfg.rate.max(0.1);
        let mut stop = stop_rx.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            let mut i = 0u64;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                let name = format!("probe-{}", i % 20);
                i += 1;
                let cm = serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name}, "data": {"i": i.to_string()}
                });
                let sent = pods::now_us();
                match cms
                    .patch(
                        &name,
                        &PatchParams::apply("watchcache-bench").force(),
                        &Patch::Apply(&cm),
                    )
                    .await
                {
                    Ok(cm) => {
                        if let Some(rv) = rv_of(&cm) {
                            written.lock().push((rv, sent, pods::now_us()));
                        }
                    }
                    Err(e) => warn!(error = %e, "probe write"),
                }
            }
        }
    });

    // The window before, then the rollout.
    let replicas_file = data.join("replicas.json");
    let states = read_replicas(&replicas_file)?;
    let mut clients = Vec::new();
    for s in &states {
        clients.push(replica_client(&data, &s.url).await?);
    }
    let scrape_all = |clients: &[kube::Client]| {
        let clients = clients.to_vec();
        async move {
            let mut out = Vec::new();
            for c in &clients {
                out.push(scrape(c).await);
            }
            out
        }
    };
    let before_s = cfg.before.as_secs_f64();
    let w0 = (
        scrape_all(&clients).await,
        kas_lists(&kas).await,
        burst::etcd_ranges(&etcd_url).await,
    );
    tokio::time::sleep(cfg.before).await;
    let w1 = (
        scrape_all(&clients).await,
        kas_lists(&kas).await,
        burst::etcd_ranges(&etcd_url).await,
    );
    let mut before = Window::default();
    for (a, b) in w1.0.iter().zip(&w0.0) {
        if let (Some(a), Some(b)) = (a, b) {
            before.served.add(*a, *b);
        }
    }
    before.kube_apiserver_lists = w1.1.zip(w0.1).map(|(a, b)| a.saturating_sub(b));
    before.etcd_ranges = w1.2.zip(w0.2).map(|(a, b)| a.saturating_sub(b));

    let rollout_began = pods::now_us();
    let began = Instant::now();
    let mut during = Window::default();
    let mut bases: Vec<super::kubelet::rollout::Served> =
        w1.0.iter().map(|s| s.unwrap_or_default()).collect();
    let mut lasts = bases.clone();
    let mut replica_times = Vec::new();
    let order: Vec<usize> = if cfg.kill {
        vec![0]
    } else {
        (0..states.len()).collect()
    };
    for i in order {
        let state = read_replicas(&replicas_file)?
            .into_iter()
            .find(|s| s.replica == i)
            .ok_or("replica missing from replicas.json")?;
        if let Some(s) = scrape(&clients[i]).await {
            lasts[i] = s;
        }
        let t = Instant::now();
        let signal = if cfg.kill { "-KILL" } else { "-TERM" };
        let sent = std::process::Command::new("kill")
            .args([signal, &state.pid.to_string()])
            .status()
            .map_err(|e| format!("kill: {e}"))?;
        if !sent.success() {
            return Err(format!("kill {signal} {} failed", state.pid));
        }
        // Until the process is gone, its counters as long as it answers.
        let mut answering = !cfg.kill;
        while Path::new(&format!("/proc/{}", state.pid)).exists() && !zombie(state.pid) {
            if answering {
                match tokio::time::timeout(Duration::from_millis(500), scrape(&clients[i])).await {
                    Ok(Some(s)) => lasts[i] = s,
                    _ => answering = false,
                }
            }
            tokio::time::sleep(Duration::from_millis(if cfg.kill { 10 } else { 250 })).await;
            if t.elapsed() > Duration::from_secs(120) {
                return Err(format!("replica {i} did not exit in 120 s"));
            }
        }
        let stop_s = t.elapsed().as_secs_f64();
        during.served.add(lasts[i], bases[i]);
        // `up` starts it again; ready when it answers /readyz.
        let t = Instant::now();
        loop {
            let again = read_replicas(&replicas_file)?
                .into_iter()
                .find(|s| s.replica == i && s.pid != state.pid);
            if again.is_some() && crate::ops::get_ok(&clients[i], "/readyz").await {
                break;
            }
            if t.elapsed() > Duration::from_secs(300) {
                return Err(format!("replica {i} was not ready again in 300 s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let start_s = t.elapsed().as_secs_f64();
        info!(replica = i, stop_s, start_s, "replica back");
        replica_times.push(super::kubelet::rollout::ReplicaTimes {
            replica: i,
            stop_s,
            start_s,
        });
        bases[i] = Default::default();
        lasts[i] = Default::default();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let rollout_s = began.elapsed().as_secs_f64();
    let rollout_ended = pods::now_us();
    for (i, c) in clients.iter().enumerate() {
        if let Some(s) = scrape(c).await {
            lasts[i] = s;
        }
        during.served.add(lasts[i], bases[i]);
    }
    let w2 = (kas_lists(&kas).await, burst::etcd_ranges(&etcd_url).await);
    during.kube_apiserver_lists = w2.0.zip(w1.1).map(|(a, b)| a.saturating_sub(b));
    during.etcd_ranges = w2.1.zip(w1.2).map(|(a, b)| a.saturating_sub(b));

    // The probe's account: a few seconds for the last events.
    let _ = stop_tx.send(true);
    let _ = writer.await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    watch_task.abort();
    scaler.abort();
    let written = probe.written.lock().clone();
    let seen = probe.seen.lock().clone();
    let mut times: HashMap<u64, u64> = HashMap::new();
    let (mut duplicated, mut out_of_order, mut last) = (0, 0, 0);
    for &(rv, at) in &seen {
        if times.insert(rv, at).is_some() {
            duplicated += 1;
        }
        if rv < last {
            out_of_order += 1;
        }
        last = last.max(rv);
    }
    let lost = written
        .iter()
        .filter(|(rv, _, _)| !times.contains_key(rv))
        .count();
    let mut during_ms: Vec<f64> = written
        .iter()
        .filter(|(_, sent, _)| (rollout_began..=rollout_ended).contains(sent))
        .filter_map(|(rv, sent, _)| {
            times
                .get(rv)
                .map(|at| at.saturating_sub(*sent) as f64 / 1000.0)
        })
        .collect();
    let inits = *probe.inits.lock();
    let report = ClusterReport {
        nodes: cfg.nodes,
        pods: cfg.pods,
        replicas: cfg.replicas,
        how: if cfg.kill { "kill" } else { "rolling" },
        rollout_s,
        replica_times,
        before_s,
        before,
        during,
        probe_writes: written.len(),
        probe_lost: lost,
        probe_duplicated: duplicated,
        probe_out_of_order: out_of_order,
        probe_relists: inits.saturating_sub(1),
        probe_ms: (!during_ms.is_empty()).then(|| Latency::of(&mut during_ms)),
        load_average: super::procstat::load_average(),
    };
    drop(up);
    let _ = std::fs::remove_dir_all(&data);
    Ok(report)
}

#[derive(Default)]
struct Probe {
    /// (resourceVersion, sent µs, acknowledged µs) of each write.
    written: Arc<Mutex<Vec<(u64, u64, u64)>>>,
    /// (resourceVersion, received µs) of each Apply event.
    seen: Arc<Mutex<Vec<(u64, u64)>>>,
    inits: Arc<Mutex<usize>>,
}

fn rv_of<K: kube::Resource>(o: &K) -> Option<u64> {
    o.meta().resource_version.as_deref()?.parse().ok()
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('Z')))
        .unwrap_or(true)
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn read_replicas(path: &Path) -> Result<Vec<ReplicaState>, String> {
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The admin's client, sent to one replica instead of the balancer.
async fn replica_client(data: &Path, url: &str) -> Result<kube::Client, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(data.join("admin.kubeconfig"))
        .map_err(|e| e.to_string())?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    config.cluster_url = url.parse().map_err(|e| format!("{url}: {e}"))?;
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

async fn get_text(c: &kube::Client, path: &str) -> Option<String> {
    let req = http::Request::get(path).body(Vec::new()).ok()?;
    tokio::time::timeout(Duration::from_secs(5), c.request_text(req))
        .await
        .ok()?
        .ok()
}

async fn scrape(c: &kube::Client) -> Option<super::kubelet::rollout::Served> {
    get_text(c, "/metrics")
        .await
        .map(|t| super::kubelet::rollout::Served::parse(&t))
}

/// kube-apiserver's LISTs answered 200.
async fn kas_lists(kas: &kube::Client) -> Option<u64> {
    let text = get_text(kas, "/metrics").await?;
    super::sum_metric(
        &text,
        "apiserver_request_total",
        &["verb=\"LIST\"", "code=\"200\""],
    )
}

/// Waits (at most 10 minutes) until `want` nodes are Ready; returns how many are.
async fn wait_nodes(c: &kube::Client, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut ready = 0;
    while Instant::now() < deadline {
        ready = crate::ops::nodes_ready(c).await;
        if ready >= want {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    ready
}

fn deployment(replicas: usize) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "churn"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "churn"}},
            "template": {
                "metadata": {"labels": {"app": "churn"}},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    }))
    .unwrap_or_default()
}

/// Scales the Deployment between `pods` and half as many again, every 5 s: the scheduler,
/// the ReplicaSet controller and the kubelets busy throughout.
async fn scale_loop(api: Api<Deployment>, pods: usize) {
    let mut up = true;
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let n = if up { pods + pods / 2 } else { pods };
        up = !up;
        let patch = serde_json::json!({"spec": {"replicas": n}});
        if let Err(e) = api
            .patch("churn", &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            warn!(error = %e, "scaling");
        }
    }
}

/// The report as a table.
pub(crate) fn table(r: &ClusterReport) -> String {
    let opt = |v: Option<u64>| v.map_or("missing".to_string(), |v| v.to_string());
    let mut out = format!(
        "rollout-cluster ({}): {} hollow nodes, a Deployment of {} pods scaled every 5 s, {} replicas behind HAProxy\n\
         rollout {:.1} s; the window before it {:.0} s\n",
        r.how, r.nodes, r.pods, r.replicas, r.rollout_s, r.before_s
    );
    for t in &r.replica_times {
        out.push_str(&format!(
            "  replica {}  stopped in {:.1} s, ready again in {:.1} s\n",
            t.replica, t.stop_s, t.start_s
        ));
    }
    out.push_str("                           before     during\n");
    let row = |name: &str, a: String, b: String| format!("{name:<26} {a:>8} {b:>10}\n");
    let (b, d) = (&r.before, &r.during);
    for (name, x, y) in [
        ("replicas: LISTs", b.served.lists, d.served.lists),
        ("  watch resumes", b.served.resume, d.served.resume),
        (
            "  WatchLists (initial)",
            b.served.initial_events,
            d.served.initial_events,
        ),
        ("  watches from the state", b.served.state, d.served.state),
        ("  410 Gone", b.served.expired, d.served.expired),
        ("  429", b.served.refused_429, d.served.refused_429),
    ] {
        out.push_str(&row(name, x.to_string(), y.to_string()));
    }
    out.push_str(&row(
        "kube-apiserver LISTs",
        opt(b.kube_apiserver_lists),
        opt(d.kube_apiserver_lists),
    ));
    out.push_str(&row(
        "etcd Range calls",
        opt(b.etcd_ranges),
        opt(d.etcd_ranges),
    ));
    out.push_str(&format!(
        "probe (kube-rs watcher): {} writes, {} lost, {} duplicated, {} out of order, {} relists; during the rollout {}\n",
        r.probe_writes,
        r.probe_lost,
        r.probe_duplicated,
        r.probe_out_of_order,
        r.probe_relists,
        r.probe_ms.as_ref().map_or("missing (no sample)".to_string(), |l| format!(
            "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            l.p50, l.p99, l.max
        )),
    ));
    out
}

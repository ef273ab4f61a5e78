//! A real control plane with and without watchcache, one run (issue 19, item 6): etcd 3.6,
//! kube-apiserver 1.35, kube-controller-manager, kube-scheduler and N kubemark hollow nodes
//! (the real kubelet with a fake runtime). Once they talk to kube-apiserver directly; once through
//! watchcache in proxy mode; once through watchcache reading etcd with writes forwarded to
//! kube-apiserver, the recommended set-up (TLS, `Node,RBAC`). The same workload each time: a Deployment of P
//! pods created with kubectl, run until every pod is Running and Ready.
//!
//! Reported per set-up:
//! - kube-apiserver's CPU (user + system, from /proc) over the workload and its RSS at the end;
//!   watchcache's too, so the saving is not hidden in another process;
//! - the watches kube-apiserver holds (`apiserver_longrunning_requests{verb="WATCH"}`) and the
//!   LISTs it served (`apiserver_request_total{verb="LIST"}`) from the nodes' start to the end;
//! - pod start latency, p50 and p99: from a pod's first sighting (ADDED) to its first sighting
//!   Running and Ready, by one observer watching kube-apiserver directly in both set-ups;
//! - scheduling throughput: pods bound per second, from the first pod seen to the last bound.
//!
//! `cargo bench --bench control_plane` (env `CP_NODES`, default 50; `CP_PODS`, default 500).
//! Needs the Go-built peers (`scripts/k8s-peers`, run on demand) and etcd 3.6.

/// The shared helpers (tests/support/) this binary uses: each binary names its own, so that
/// none needs a feature it does not build with.
#[path = "../tests/support"]
mod support {
    #![allow(dead_code, unused_imports, unreachable_pub)]
    mod common;
    pub use common::*;
    pub mod etcd;
    pub mod k8s_peers;
    pub mod kube;
    pub mod kubectl;
    pub mod pki;
    pub mod venv;
}

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use support::etcd::{EtcdVersion, etcd_version};
use support::kube::{
    KubeApiserver, Proc, Target, Watchcache, condition, controller_manager, hollow_nodes,
    scheduler, wait_items,
};
use support::kubectl::{Kubectl, must};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A process's CPU seconds so far (user + system) and its RSS in bytes, from /proc.
fn cpu_and_rss(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = clock_ticks();
    let cpu = (ticks(11) + ticks(12)) / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024;
    (cpu, rss)
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    static HZ: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// What one pod went through, as the observer saw it.
#[derive(Default)]
struct Seen {
    added: Option<Instant>,
    bound: Option<Instant>,
    running: Option<Instant>,
}

struct Report {
    setup: &'static str,
    kas_cpu: f64,
    kas_rss: u64,
    wc_cpu: f64,
    wc_rss: u64,
    watches: f64,
    lists: f64,
    p50: Duration,
    p99: Duration,
    sched_per_s: f64,
    wall: Duration,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Where the components and nodes connect.
#[derive(Clone, Copy)]
enum SetUp {
    /// kube-apiserver itself.
    Direct,
    /// watchcache following kube-apiserver (`--upstream-kubeconfig`).
    Proxy,
    /// watchcache reading the cluster's etcd, writes to kube-apiserver (`--apiserver-kubeconfig`).
    Recommended,
}

async fn run(set_up: SetUp, nodes: usize, pods: usize) -> Report {
    let setup = match set_up {
        SetUp::Direct => "direct to kube-apiserver",
        SetUp::Proxy => "watchcache, proxy mode",
        SetUp::Recommended => "watchcache on etcd, writes to kube-apiserver",
    };
    eprintln!("== {setup}: {nodes} hollow nodes, {pods} pods");
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let upstream = kas.admin_kubeconfig.display().to_string();
    let mut wc = match set_up {
        SetUp::Direct => None,
        SetUp::Proxy => Some(Watchcache::proxy(&kas.pki, &kas.admin_kubeconfig, &[]).await),
        SetUp::Recommended => Some(
            Watchcache::on_etcd(
                &kas.pki,
                &etcd.server.url(),
                &["--apiserver-kubeconfig", &upstream],
            )
            .await,
        ),
    };
    let (url, kubeconfig) = match &wc {
        Some(w) => (w.url.clone(), w.admin_kubeconfig.clone()),
        None => (kas.url.clone(), kas.admin_kubeconfig.clone()),
    };
    let target = Target {
        url: &url,
        ca: &kas.pki.ca.cert_file,
    };
    let dir = kas.dir.path();
    let lists_at_start = kas
        .metric("apiserver_request_total", &["verb=\"LIST\""])
        .await;
    let mut kcm = controller_manager(&kas.pki, target, dir);
    let mut sched = scheduler(&kas.pki, target, dir);
    let mut hollow = hollow_nodes(&kas.pki, target, dir, "hollow", nodes);
    let k = Kubectl::with_kubeconfig(&kubeconfig);
    let limit = Duration::from_secs(600);
    let started = Instant::now();
    {
        let mut procs: Vec<&mut Proc> = vec![&mut kcm, &mut sched];
        if let Some(w) = wc.as_mut() {
            procs.push(&mut w.proc);
        }
        procs.extend(hollow.iter_mut());
        wait_items(
            &k,
            &["get", "nodes", "-o", "json"],
            limit,
            &mut procs,
            |items| items.len() == nodes && items.iter().all(|n| condition(n, "Ready")),
        )
        .await;
    }
    eprintln!("   {nodes} nodes Ready after {:?}", started.elapsed());
    must(&k.run(&["create", "namespace", "bench"]).await, "namespace");

    // The observer: kube-apiserver's own view in both set-ups.
    let kc = kube::config::Kubeconfig::read_from(&kas.admin_kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("client config");
    let client = kube::Client::try_from(config).expect("client");
    let api: kube::Api<Pod> = kube::Api::namespaced(client, "bench");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let observer = tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(e) = events.next().await {
            let now = Instant::now();
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = e {
                let name = p.metadata.name.clone().unwrap_or_default();
                let bound = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
                let status = p.status.as_ref();
                let running = status.is_some_and(|s| {
                    s.phase.as_deref() == Some("Running")
                        && s.conditions.as_ref().is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                });
                if tx.send((name, now, bound, running)).is_err() {
                    return;
                }
            }
        }
    });

    let (kas_cpu0, _) = cpu_and_rss(kas.proc.pid().expect("kube-apiserver pid"));
    let wc_pid = wc.as_ref().and_then(|w| w.proc.pid());
    let wc_cpu0 = wc_pid.map_or(0.0, |p| cpu_and_rss(p).0);
    let t0 = Instant::now();
    must(
        &k.run(&[
            "create",
            "deployment",
            "load",
            "-n",
            "bench",
            "--image=registry.k8s.io/pause:3.10",
            &format!("--replicas={pods}"),
        ])
        .await,
        "create deployment",
    );
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut last_progress = Instant::now();
    loop {
        let done = seen.values().filter(|s| s.running.is_some()).count();
        if done == pods {
            break;
        }
        if last_progress.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "   {done}/{pods} running after {:?} ({} bound)",
                t0.elapsed(),
                seen.values().filter(|s| s.bound.is_some()).count()
            );
            last_progress = Instant::now();
            for p in [&mut kcm, &mut sched] {
                p.assert_running();
            }
            if let Some(w) = wc.as_mut() {
                w.proc.assert_running();
            }
        }
        assert!(
            t0.elapsed() < limit,
            "{done}/{pods} pods running after {limit:?}"
        );
        let Ok(Some((name, at, bound, running))) =
            tokio::time::timeout(Duration::from_secs(1), rx.recv()).await
        else {
            continue;
        };
        let s = seen.entry(name).or_default();
        s.added.get_or_insert(at);
        if bound {
            s.bound.get_or_insert(at);
        }
        if running {
            s.running.get_or_insert(at);
        }
    }
    let wall = t0.elapsed();
    observer.abort();
    let (kas_cpu1, kas_rss) = cpu_and_rss(kas.proc.pid().expect("kube-apiserver pid"));
    let (wc_cpu1, wc_rss) = wc_pid.map_or((0.0, 0), cpu_and_rss);
    let watches = kas
        .metric("apiserver_longrunning_requests", &["verb=\"WATCH\""])
        .await;
    let lists = kas
        .metric("apiserver_request_total", &["verb=\"LIST\""])
        .await
        - lists_at_start;

    let mut start: Vec<Duration> = seen
        .values()
        .filter_map(|s| Some(s.running? - s.added?))
        .collect();
    start.sort_unstable();
    let first = seen.values().filter_map(|s| s.added).min().unwrap_or(t0);
    let last_bound = seen.values().filter_map(|s| s.bound).max().unwrap_or(first);
    let span = (last_bound - first).as_secs_f64().max(1e-3);
    let r = Report {
        setup,
        kas_cpu: kas_cpu1 - kas_cpu0,
        kas_rss,
        wc_cpu: wc_cpu1 - wc_cpu0,
        wc_rss,
        watches,
        lists,
        p50: quantile(&start, 0.50),
        p99: quantile(&start, 0.99),
        sched_per_s: pods as f64 / span,
        wall,
    };
    eprintln!("   all {pods} Running and Ready after {wall:?}");
    drop(hollow);
    drop(kcm);
    drop(sched);
    drop(wc);
    r
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that does not name this bench skips it.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if !args.is_empty() && !args.iter().any(|a| "control_plane".contains(a.as_str())) {
        return;
    }
    let nodes = env_usize("CP_NODES", 50);
    let pods = env_usize("CP_PODS", 500);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let reports = rt.block_on(async {
        vec![
            run(SetUp::Direct, nodes, pods).await,
            run(SetUp::Proxy, nodes, pods).await,
            run(SetUp::Recommended, nodes, pods).await,
        ]
    });
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut out = String::new();
    out.push_str(&format!(
        "\n{nodes} hollow nodes, a Deployment of {pods} pods\n\n\
         | set-up | kube-apiserver CPU-s | kube-apiserver RSS | watchcache CPU-s | watchcache RSS | watches at kube-apiserver | LISTs at kube-apiserver | pod start p50 | pod start p99 | scheduled pods/s | all Running |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n"
    ));
    for r in &reports {
        out.push_str(&format!(
            "| {} | {:.1} | {:.0} MiB | {:.1} | {:.0} MiB | {:.0} | {:.0} | {:.2} s | {:.2} s | {:.1} | {:.1} s |\n",
            r.setup,
            r.kas_cpu,
            mib(r.kas_rss),
            r.wc_cpu,
            mib(r.wc_rss),
            r.watches,
            r.lists,
            r.p50.as_secs_f64(),
            r.p99.as_secs_f64(),
            r.sched_per_s,
            r.wall.as_secs_f64(),
        ));
    }
    eprintln!("{out}");
}

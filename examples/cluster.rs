//! A local Kubernetes control plane with watchcache in front, to try it: etcd 3.6,
//! kube-apiserver 1.35 (encryption at rest, `Node,RBAC`), watchcache, kube-controller-manager,
//! kube-scheduler and kubemark hollow nodes (the real kubelet with a fake runtime), all built
//! from the Go module proxy by `scripts/k8s-peers`. Run it with `scripts/cluster`, which builds
//! what is missing first.
//!
//! `--proxy` runs watchcache in proxy mode (it follows kube-apiserver); the default is the
//! recommended set-up, where watchcache reads the cluster's etcd itself and forwards writes and
//! everything it does not cache to kube-apiserver. The components and the nodes talk to
//! watchcache. It prints the kubeconfig to use, then runs until Ctrl-C, and stops everything.
//!
//! `cargo run --release --features etcd,server,apiserver,cli --example cluster -- [--proxy] [--nodes N] [--out DIR]`

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::etcd::{EtcdVersion, etcd_version};
use support::kube::{
    KubeApiserver, Proc, Target, Watchcache, condition, controller_manager, hollow_nodes,
    kubeconfig, scheduler, wait_items,
};
use support::kubectl::Kubectl;

struct Options {
    proxy: bool,
    nodes: usize,
    out: PathBuf,
}

fn options() -> Options {
    let mut o = Options {
        proxy: false,
        nodes: 3,
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/cluster"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--proxy" => o.proxy = true,
            "--nodes" => o.nodes = args.next().and_then(|n| n.parse().ok()).expect("--nodes N"),
            "--out" => o.out = args.next().expect("--out DIR").into(),
            other => panic!("unknown argument {other}: [--proxy] [--nodes N] [--out DIR]"),
        }
    }
    o
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = options();
    std::fs::create_dir_all(&o.out).expect("the output directory");
    eprintln!("starting etcd 3.6 and kube-apiserver 1.35 ...");
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let upstream = kas.admin_kubeconfig.display().to_string();
    eprintln!(
        "starting watchcache ({}) ...",
        if o.proxy {
            "proxy mode"
        } else {
            "reading etcd, writes to kube-apiserver"
        }
    );
    let mut wc = if o.proxy {
        Watchcache::proxy(&kas.pki, &kas.admin_kubeconfig, &[]).await
    } else {
        Watchcache::on_etcd(
            &kas.pki,
            &etcd.server.url(),
            &["--apiserver-kubeconfig", &upstream],
        )
        .await
    };
    let target = Target {
        url: &wc.url,
        ca: &kas.pki.ca.cert_file,
    };
    let dir = kas.dir.path();
    let mut kcm = controller_manager(&kas.pki, target, dir);
    let mut sched = scheduler(&kas.pki, target, dir);
    let mut nodes = hollow_nodes(&kas.pki, target, dir, "node", o.nodes);
    let through = kubeconfig(
        &o.out.join("kubeconfig"),
        &wc.url,
        &kas.pki.ca.cert_file,
        &kas.pki.admin,
    );
    let direct = kubeconfig(
        &o.out.join("kube-apiserver.kubeconfig"),
        &kas.url,
        &kas.pki.ca.cert_file,
        &kas.pki.admin,
    );
    let started = Instant::now();
    {
        let k = Kubectl::with_kubeconfig(&through);
        let mut procs: Vec<&mut Proc> = vec![&mut kcm, &mut sched, &mut wc.proc];
        procs.extend(nodes.iter_mut());
        let n = o.nodes;
        wait_items(
            &k,
            &["get", "nodes", "-o", "json"],
            Duration::from_secs(300),
            &mut procs,
            |items| items.len() == n && items.iter().all(|i| condition(i, "Ready")),
        )
        .await;
    }
    eprintln!(
        "\n{} hollow nodes Ready after {:.0?}. Through watchcache ({}):\n\n  \
         export KUBECONFIG={}\n  export PATH={}:$PATH\n  kubectl get nodes\n  kubectl create deployment web --image=registry.k8s.io/pause:3.10 --replicas=10\n\n\
         kube-apiserver itself: {} ({})\nlogs: {} (kube-apiserver, controller manager, scheduler, nodes), {}\n\
         Ctrl-C stops everything.",
        o.nodes,
        started.elapsed(),
        wc.url,
        through.display(),
        support::kubectl::kubectl_bin()
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        direct.display(),
        kas.url,
        dir.display(),
        wc.dir.path().display(),
    );
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {
                for p in [&mut kcm, &mut sched, &mut wc.proc] {
                    if let Some(status) = p.exited() {
                        eprintln!("{} exited ({status}); the end of its log:\n{}", p.name, p.tail(30));
                        return;
                    }
                }
            }
        }
    }
    eprintln!("stopping ...");
}

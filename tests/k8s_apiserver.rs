//! Real Kubernetes, unchanged, beside watchcache: kube-apiserver 1.35 (built from its Go modules by
//! scripts/k8s-peers) on a real etcd, with encryption at rest and `Node,RBAC`. kubectl works
//! through it, and the client-go conformance program (tests/k8s/conformance) passes against it
//! on both etcd versions: that proves the program right before it judges watchcache. Then
//! `watchcache serve` on the same etcd reads what kube-apiserver wrote, encrypted values too.

mod support;

use serde_json::Value;
use support::etcd::{EtcdVersion, etcd_version};
use support::kube::{KubeApiserver, Watchcache, condition, conformance, https_get, wait_items};
use support::kubectl::{Kubectl, must};

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_on_etcd_3_4_serves_kubectl_and_passes_the_conformance_program() {
    let etcd = etcd_version(EtcdVersion::Debian34).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    let ns = json(&k.ok(&["get", "namespaces", "-o", "json"]).await);
    let mut names: Vec<&str> = ns["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );

    // etcd 3.4.23 has no working progress requests (kube-apiserver wants 3.4.31+): kube-apiserver
    // refuses WatchList, and client-go falls back to LIST then WATCH.
    let c = conformance(&kas.admin_kubeconfig, &["--watchlist=optional"]).await;
    c.assert_passed("kube-apiserver on etcd 3.4.23");
    let refused = &c.check("watch/watchlist/initial-events-end").detail;
    assert!(
        refused.starts_with("refused") && refused.contains("RequestWatchProgress is disabled"),
        "{refused}"
    );
    for kind in ["typed", "metadata", "dynamic"] {
        let d = &c.check(&format!("informer/{kind}/watchlist=true")).detail;
        assert!(
            d.starts_with("WatchList refused, client-go fell back"),
            "{d}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_on_etcd_3_6_passes_the_conformance_program_with_watchlist() {
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let c = conformance(&kas.admin_kubeconfig, &["--watchlist=required"]).await;
    c.assert_passed("kube-apiserver on etcd 3.6");
    for kind in ["typed", "metadata", "dynamic"] {
        let d = &c.check(&format!("informer/{kind}/watchlist=true")).detail;
        assert!(d.starts_with("WatchList: "), "{d}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchcache_on_kube_apiservers_etcd_reads_what_it_wrote() {
    let etcd = etcd_version(EtcdVersion::Debian34).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    // A secret (stored with aescbc) and a configmap (secretbox), written by kube-apiserver.
    must(
        &k.run(&[
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=password=hunter2",
        ])
        .await,
        "create secret",
    );
    must(
        &k.run(&["create", "configmap", "c1", "--from-literal=k=v"])
            .await,
        "create configmap",
    );

    let wc = Watchcache::on_etcd(&kas.pki, &etcd.server.url(), &[]).await;
    let ca = &kas.pki.ca.cert_file;
    for path in [
        "/api/v1/namespaces/default",
        "/api/v1/namespaces/default/secrets/s1",
        "/api/v1/namespaces/default/configmaps/c1",
    ] {
        let (code, body) = https_get(&wc.url, ca, Some(&kas.pki.admin), path)
            .await
            .unwrap();
        assert_eq!(code, 200, "GET {path} from watchcache: {body}");
        let (kcode, kbody) = kas.get(path).await;
        assert_eq!(kcode, 200, "GET {path} from kube-apiserver: {kbody}");
        let (ours, theirs) = (json(&body), json(&kbody));
        for field in ["uid", "resourceVersion", "name", "creationTimestamp"] {
            assert_eq!(
                ours["metadata"][field], theirs["metadata"][field],
                "{path}: metadata.{field}"
            );
        }
        assert_eq!(ours["data"], theirs["data"], "{path}: data");
        assert_eq!(ours["spec"], theirs["spec"], "{path}: spec");
    }
    // kubectl through watchcache, with the same admin certificate.
    let kw = Kubectl::with_kubeconfig(&wc.admin_kubeconfig);
    let got = json(&kw.ok(&["get", "secret", "s1", "-o", "json"]).await);
    assert_eq!(got["data"]["password"], "aHVudGVyMg==");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_control_plane_runs_a_deployment_on_hollow_nodes() {
    use support::kube::{Target, controller_manager, hollow_nodes, scheduler};
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let target = Target {
        url: &kas.url,
        ca: &kas.pki.ca.cert_file,
    };
    let dir = kas.dir.path();
    let mut kcm = controller_manager(&kas.pki, target, dir);
    let mut sched = scheduler(&kas.pki, target, dir);
    let mut nodes = hollow_nodes(&kas.pki, target, dir, "hollow", 2);
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    let limit = std::time::Duration::from_secs(120);
    let mut procs: Vec<&mut support::kube::Proc> = vec![&mut kcm, &mut sched];
    procs.extend(nodes.iter_mut());

    let ready = wait_items(
        &k,
        &["get", "nodes", "-o", "json"],
        limit,
        &mut procs,
        |items| items.len() == 2 && items.iter().all(|n| condition(n, "Ready")),
    )
    .await;
    let mut names: Vec<&str> = ready
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["hollow-0", "hollow-1"]);

    must(
        &k.run(&[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "--replicas=3",
        ])
        .await,
        "create deployment",
    );
    let pods = wait_items(
        &k,
        &["get", "pods", "-l", "app=web", "-o", "json"],
        limit,
        &mut procs,
        |items| {
            items.len() == 3
                && items
                    .iter()
                    .all(|p| p["status"]["phase"] == "Running" && condition(p, "Ready"))
        },
    )
    .await;
    for p in &pods {
        let node = p["spec"]["nodeName"].as_str().unwrap();
        assert!(names.contains(&node), "{node}");
    }
}

//! client-go, unchanged (the conformance program, tests/k8s/conformance), against watchcache in
//! the three set-ups of issue 19 item 3. kube-apiserver passes the same program on both etcd
//! versions (tests/system/k8s_apiserver.rs), so a failure here is watchcache's.
//!
//! - watchcache on etcd (3.4.23 and 3.6), beside the kube-apiserver that owns that etcd (the
//!   recommended set-up): the program's writes go through watchcache to kube-apiserver
//!   (`--apiserver-kubeconfig`), its reads are watchcache's;
//! - watchcache in proxy mode in front of kube-apiserver (its writes forwarded);
//! - a leaf of a leaf: etcd ← kube-apiserver ← watchcache (proxy) ← watchcache (proxy): the
//!   outer leaf follows the inner one, whose own answers (WatchList, bookmarks, consistent
//!   reads) are all the outer one sees of the cluster.

use crate::support;

use support::etcd::{EtcdVersion, etcd_version};
use support::kube::{KubeApiserver, Watchcache, conformance};

/// The program against watchcache on kube-apiserver's etcd.
async fn on_etcd(version: EtcdVersion, watchlist: &str) {
    let _one = support::kube::ONE_CLUSTER_AT_A_TIME.lock().await;
    let etcd = etcd_version(version).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let upstream = kas.admin_kubeconfig.display().to_string();
    let wc = Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &["--apiserver-kubeconfig", &upstream],
    )
    .await;
    let c = conformance(&wc.admin_kubeconfig, &[watchlist]).await;
    c.assert_passed(&format!("watchcache on etcd {version:?}"));
    // The custom resource its CRD check made was read from watchcache's own cache of it (a
    // resource not served here is counted without its name).
    let (_, metrics) = support::kube::https_get(
        &wc.url,
        &kas.pki.ca.cert_file,
        Some(&kas.pki.admin),
        "/metrics",
    )
    .await
    .unwrap();
    // (Its informer starts with a WatchList, and its updates GET first.)
    let served: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{") && l.contains(r#"resource="gadgets""#)
        })
        .collect();
    for verb in ["GET", "WATCH"] {
        assert!(
            served
                .iter()
                .any(|l| l.contains(&format!(r#"verb="{verb}""#))),
            "no {verb} of the custom resource served from the cache: {served:#?}"
        );
    }
    // watchcache serves WatchList whatever the etcd version: it proves its reads fresh itself.
    for kind in ["typed", "metadata", "dynamic"] {
        let d = &c.check(&format!("informer/{kind}/watchlist=true")).detail;
        assert!(d.starts_with("WatchList: "), "{kind}: {d}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_passes_against_watchcache_on_etcd_3_4() {
    on_etcd(EtcdVersion::Debian34, "--watchlist=required").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_passes_against_watchcache_on_etcd_3_6() {
    on_etcd(EtcdVersion::V36, "--watchlist=required").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_passes_against_watchcache_in_front_of_kube_apiserver() {
    let _one = support::kube::ONE_CLUSTER_AT_A_TIME.lock().await;
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    // The default definitions include widgets.example.com, whose CRD this cluster does not have:
    // it must not keep the proxy from becoming ready.
    let wc = Watchcache::proxy(&kas.pki, &kas.admin_kubeconfig, &[]).await;
    let c = conformance(&wc.admin_kubeconfig, &["--watchlist=required"]).await;
    c.assert_passed("watchcache in proxy mode in front of kube-apiserver on etcd 3.6");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_passes_against_a_leaf_of_a_leaf() {
    let _one = support::kube::ONE_CLUSTER_AT_A_TIME.lock().await;
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let inner = Watchcache::proxy(&kas.pki, &kas.admin_kubeconfig, &[]).await;
    let outer = Watchcache::proxy(&kas.pki, &inner.admin_kubeconfig, &[]).await;
    let c = conformance(&outer.admin_kubeconfig, &["--watchlist=required"]).await;
    c.assert_passed("watchcache ← watchcache ← kube-apiserver on etcd 3.6");
}

//! The periodic consistency check (issue 23 item 3) against the real upstreams: a cache on a real
//! etcd, and a cache following a real kube-apiserver 1.35.4, are corrupted through the test hook
//! (feature `test-hooks`) as lost events would corrupt them: a missed create (an object missing),
//! a missed update (a stale version), a missed delete (a ghost). The check counts the mismatch
//! (`apiserver_storage_consistency_checks_total{status="failure"}`, on `/metrics` for etcd), the
//! follower relists, the cache equals the upstream again, a watcher opened before the corruption
//! gets exactly the healing events in order, and the next check passes.

use crate::support;

use std::time::Duration;

use etcd_client::{GetOptions, Txn, TxnOp};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use support::etcd::{EtcdVersion, etcd, etcd_version};
use support::kube::KubeApiserver;
use tokio::sync::oneshot;
use watchcache::{
    Cache, CacheConfig, ConsistencyChecks, Corruption, EventType, ListOptions, ResourceDef,
    ResourceVersion, Selection, WatchOptions, WatchStream,
};
use watchcache_etcd::EtcdCaches;
use watchcache_kube::{ApiServerCaches, ApiServerConfig, client_from_kubeconfig};
use watchcache_server::{Served, Server, ServerConfig};

const PERIOD: Duration = Duration::from_millis(400);

fn config() -> CacheConfig {
    CacheConfig::default().consistency_check_period(PERIOD)
}

async fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let until = tokio::time::Instant::now() + limit;
    while !f() {
        assert!(tokio::time::Instant::now() < until, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn checks(c: &Cache) -> ConsistencyChecks {
    c.stats().consistency_checks
}

/// The cache's (key, revision) pairs, from a LIST of the cache at its revision.
async fn cached(c: &Cache, ns: &str) -> Vec<(String, u64)> {
    let opts = ListOptions {
        selection: Selection::all().in_namespace(ns),
        resource_version: ResourceVersion::Any,
        ..ListOptions::all()
    };
    let list = c.list(&opts).await.unwrap();
    list.items
        .iter()
        .map(|o| (o.key().to_owned(), o.resource_version()))
        .collect()
}

/// (type, key, object revision) of each event the watcher has within `quiet` of the last.
async fn drain(w: &mut WatchStream, quiet: Duration) -> Vec<(EventType, String, u64)> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(quiet, w.next()).await {
        let ev = ev.unwrap();
        if ev.kind() == EventType::Bookmark {
            continue;
        }
        let o = ev.object().unwrap();
        out.push((ev.kind(), o.key().to_owned(), o.resource_version()));
    }
    out
}

/// A pod's JSON.
/// The pods of etcd at `url` in a cache, ready, and served over HTTP at `base`.
struct PodsServed {
    caches: EtcdCaches,
    pods: Cache,
    base: String,
    stop: oneshot::Sender<()>,
    served: tokio::task::JoinHandle<()>,
}

impl PodsServed {
    async fn start(url: &str) -> PodsServed {
        let caches = EtcdCaches::connect(
            support::etcd::config(&[url.to_owned()]),
            vec![ResourceDef::builtin("pods").unwrap()],
            config(),
        )
        .await
        .unwrap();
        let pods = caches.cache("pods").unwrap().clone();
        tokio::time::timeout(Duration::from_secs(30), pods.wait_ready())
            .await
            .unwrap()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = Server::new(ServerConfig::default(), [Served::new(pods.clone())]);
        let served = tokio::spawn(async move {
            server
                .serve(listener, async { stopped.await.ok().unwrap_or(()) })
                .await
                .unwrap();
        });
        PodsServed {
            caches,
            pods,
            base,
            stop,
            served,
        }
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.served.await.unwrap();
        self.caches.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_cache_on_etcd_is_found_counted_healed_and_its_watchers_told() {
    support::etcd::init_tracing();
    let etcd = etcd().await;
    let url = etcd.server.url();
    // /metrics is served from the same caches.
    let served = PodsServed::start(&url).await;
    let pods = served.pods.clone();
    let metrics_url = format!("{}/metrics", served.base);

    let mut c = support::etcd::client(std::slice::from_ref(&url)).await;
    let mut rev = 0;
    for name in ["a", "b", "c", "keep"] {
        rev = support::etcd::put_rev(
            &mut c,
            &support::key("ns", name),
            support::TestPod::new("ns", name)
                .container("c", "v1")
                .json(),
        )
        .await;
    }
    wait_for("the cache has the pods", Duration::from_secs(10), || {
        pods.resource_version() >= rev
    })
    .await;
    wait_for("a first check passed", Duration::from_secs(10), || {
        checks(&pods).success >= 1
    })
    .await;
    assert_eq!(checks(&pods).failure, 0, "no false mismatch");

    let mut w = pods
        .watch(WatchOptions::new(
            Selection::all().in_namespace("ns"),
            ResourceVersion::At(rev),
        ))
        .await
        .unwrap();
    // A change it sees, then lost events: a create, an update and a delete the cache never sees
    // (one transaction, so that no check falls between them).
    let keep = support::etcd::put_rev(
        &mut c,
        &support::key("ns", "keep"),
        support::TestPod::new("ns", "keep")
            .container("c", "v2")
            .json(),
    )
    .await;
    for name in ["d", "b", "c"] {
        pods.corrupt(Corruption::MissNext(support::key("ns", name)));
    }
    let txn = Txn::new().and_then([
        TxnOp::put(
            support::key("ns", "d"),
            support::TestPod::new("ns", "d").container("c", "v1").json(),
            None,
        ),
        TxnOp::put(
            support::key("ns", "b"),
            support::TestPod::new("ns", "b").container("c", "v2").json(),
            None,
        ),
        TxnOp::delete(support::key("ns", "c"), None),
    ]);
    let lost = c.txn(txn).await.unwrap().header().unwrap().revision() as u64;
    wait_for("the cache followed", Duration::from_secs(10), || {
        pods.resource_version() >= lost
    })
    .await;

    wait_for(
        "the check found the mismatch",
        Duration::from_secs(15),
        || checks(&pods).failure >= 1,
    )
    .await;
    let after_failure = checks(&pods);
    wait_for("a later check passed", Duration::from_secs(15), || {
        checks(&pods).success > after_failure.success
    })
    .await;
    let now = checks(&pods);
    assert_eq!(now.failure, 1, "healed by one relist: {now:?}");
    assert_eq!(now.error, 0, "{now:?}");
    // The cache equals etcd.
    let resp = c
        .get("/registry/pods/ns/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let truth: Vec<(String, u64)> = resp
        .kvs()
        .iter()
        .map(|kv| (kv.key_str().unwrap().to_owned(), kv.mod_revision() as u64))
        .collect();
    assert_eq!(cached(&pods, "ns").await, truth);
    assert_eq!(
        truth.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        [
            support::key("ns", "a"),
            support::key("ns", "b"),
            support::key("ns", "d"),
            support::key("ns", "keep")
        ]
    );

    // The watcher: the change it saw, then the healing events, once: changed objects oldest
    // first (b and d by key at one revision), deletions last.
    let events = drain(&mut w, Duration::from_millis(1500)).await;
    let kinds: Vec<(EventType, String)> = events.iter().map(|(t, k, _)| (*t, k.clone())).collect();
    assert_eq!(
        kinds,
        [
            (EventType::Modified, support::key("ns", "keep")),
            (EventType::Modified, support::key("ns", "b")),
            (EventType::Added, support::key("ns", "d")),
            (EventType::Deleted, support::key("ns", "c")),
        ],
        "the healing events in order: {events:?}"
    );
    assert_eq!(
        (events[0].2, events[1].2, events[2].2),
        (keep, lost, lost),
        "the objects as etcd has them"
    );

    let text = reqwest::get(&metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(
            r#"apiserver_storage_consistency_checks_total{group="",resource="pods",status="failure"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"apiserver_storage_consistency_checks_total{group="",resource="pods",status="success"}"#),
        "{text}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_cache_of_kube_apiserver_is_found_healed_and_its_watchers_told() {
    support::etcd::init_tracing();
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let client = client_from_kubeconfig(&kas.admin_kubeconfig, None)
        .await
        .unwrap();
    let caches = ApiServerCaches::connect(
        client.clone(),
        ApiServerConfig {
            page_size: 500,
            ..ApiServerConfig::default()
        },
        vec![ResourceDef::builtin("configmaps").unwrap()],
        config(),
    )
    .unwrap();
    let cms = caches.cache("configmaps").unwrap().clone();
    tokio::time::timeout(Duration::from_secs(30), cms.wait_ready())
        .await
        .unwrap()
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm = |name: &str, v: &str| -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "data": {"v": v},
        }))
        .unwrap()
    };
    let rv = |c: &ConfigMap| -> u64 {
        c.metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap()
    };
    let pp = PostParams::default();
    let mut last = 0;
    for name in ["a", "b", "c", "keep"] {
        last = rv(&api.create(&pp, &cm(name, "1")).await.unwrap());
    }
    let k = |name: &str| format!("/registry/configmaps/default/{name}");
    wait_for(
        "the cache has the configmaps",
        Duration::from_secs(10),
        || cms.resource_version() >= last,
    )
    .await;
    wait_for("a first check passed", Duration::from_secs(15), || {
        checks(&cms).success >= 1
    })
    .await;
    assert_eq!(checks(&cms).failure, 0, "no false mismatch");

    let mut w = cms
        .watch(WatchOptions::new(
            Selection::all().in_namespace("default"),
            ResourceVersion::At(last),
        ))
        .await
        .unwrap();
    for name in ["d", "b", "c"] {
        cms.corrupt(Corruption::MissNext(k(name)));
    }
    let d = rv(&api.create(&pp, &cm("d", "1")).await.unwrap());
    let mut b_new = api.get("b").await.unwrap();
    b_new.data = Some([("v".to_owned(), "2".to_owned())].into());
    let b = rv(&api.replace("b", &pp, &b_new).await.unwrap());
    api.delete("c", &DeleteParams::default()).await.unwrap();
    // A check may fall between these writes, so that more than one relist heals them; each heals
    // what was lost by then, so the order of the healing events holds either way.
    wait_for(
        "the check found the mismatch",
        Duration::from_secs(20),
        || checks(&cms).failure >= 1,
    )
    .await;
    wait_for("the cache was healed", Duration::from_secs(20), || {
        cms.peek(Some("default"), "c").is_none()
            && cms.peek(Some("default"), "d").is_some()
            && cms
                .peek(Some("default"), "b")
                .is_some_and(|o| o.resource_version() == b)
    })
    .await;
    let healed = checks(&cms);
    wait_for("a later check passed", Duration::from_secs(20), || {
        checks(&cms).success > healed.success
    })
    .await;
    assert_eq!(
        checks(&cms).failure,
        healed.failure,
        "no mismatch after healing"
    );
    assert_eq!(checks(&cms).error, 0);

    // The cache equals kube-apiserver's consistent LIST.
    let truth: Vec<(String, u64)> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| (k(c.metadata.name.as_deref().unwrap()), rv(c)))
        .collect();
    assert_eq!(cached(&cms, "default").await, truth);
    assert!(truth.iter().any(|(key, r)| *key == k("b") && *r == b));
    assert!(!truth.iter().any(|(key, _)| *key == k("c")));

    let events = drain(&mut w, Duration::from_millis(1500)).await;
    let kinds: Vec<(EventType, String)> = events.iter().map(|(t, k, _)| (*t, k.clone())).collect();
    assert_eq!(
        kinds,
        [
            (EventType::Added, k("d")),
            (EventType::Modified, k("b")),
            (EventType::Deleted, k("c")),
        ],
        "the healing events in order: {events:?}"
    );
    assert_eq!((events[0].2, events[1].2), (d, b));
    caches.shutdown().await;
}

/// A pod's JSON stored under `key`, naming pod `names` of namespace ns (k/k#135115).
fn naming(names: &str) -> String {
    support::TestPod::new("ns", names)
        .container("c", "misplaced")
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_naming_another_object_are_never_served_and_the_check_stays_consistent() {
    support::etcd::init_tracing();
    let etcd = etcd_version(EtcdVersion::V36).await;
    let url = etcd.server.url();
    let mut c = support::etcd::client(std::slice::from_ref(&url)).await;
    // Before the cache starts (its list reads them): good pods, and more values naming pod a
    // than the check would read one by one (64). One transaction: one fsync.
    let misplaced: Vec<String> = (0..80)
        .map(|i| support::key("ns", &format!("m{i:02}")))
        .collect();
    let mut ops: Vec<TxnOp> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            TxnOp::put(
                support::key("ns", n),
                support::TestPod::new("ns", n).container("c", "v1").json(),
                None,
            )
        })
        .collect();
    ops.extend(
        misplaced
            .iter()
            .map(|k| TxnOp::put(k.as_str(), naming("a"), None)),
    );
    let listed = c.txn(Txn::new().and_then(ops)).await.unwrap();
    let listed = listed.header().unwrap().revision() as u64;
    let served = PodsServed::start(&url).await;
    let (pods, base) = (served.pods.clone(), served.base.clone());

    let mut w = pods
        .watch(WatchOptions::new(
            Selection::all().in_namespace("ns"),
            ResourceVersion::At(pods.resource_version()),
        ))
        .await
        .unwrap();
    // While it watches: a new key naming b, and cached c overwritten with a value naming a.
    support::etcd::put_rev(&mut c, &support::key("ns", "n"), naming("b")).await;
    let over = support::etcd::put_rev(&mut c, &support::key("ns", "c"), naming("a")).await;
    let keep = support::etcd::put_rev(
        &mut c,
        &support::key("ns", "b"),
        support::TestPod::new("ns", "b").container("c", "v2").json(),
    )
    .await;
    wait_for("the cache followed", Duration::from_secs(10), || {
        pods.resource_version() >= keep
    })
    .await;

    // LISTs serve each pod once, under its own key: none of the values naming another.
    for rv in ["0", ""] {
        let list: serde_json::Value = reqwest::get(format!(
            "{base}/api/v1/namespaces/ns/pods?resourceVersion={rv}"
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"], "rv={rv:?}: {list}");
        let a = list["items"][0]["spec"]["containers"][0]["image"].as_str();
        assert_eq!(a, Some("v1"), "pod a as stored under its own key");
    }
    let keys: Vec<String> = cached(&pods, "ns")
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, [support::key("ns", "a"), support::key("ns", "b")]);
    for name in ["m00", "n", "c"] {
        let status = reqwest::get(format!("{base}/api/v1/namespaces/ns/pods/{name}"))
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "GET {name}");
    }
    // The watch: c leaves (DELETED, carrying its last decodable state), b changes; nothing of
    // n or the m's.
    let events = drain(&mut w, Duration::from_millis(1000)).await;
    assert_eq!(
        events,
        [
            (EventType::Deleted, support::key("ns", "c"), listed),
            (EventType::Modified, support::key("ns", "b"), keep),
        ],
        "{events:?}"
    );
    assert!(over < keep);

    // Checks pass, none fails, and none relists: the follower and the check skip the same.
    let stats = pods.stats();
    assert_eq!(stats.misplaced_values, 82, "80 listed, n and c watched");
    assert!(stats.decode_errors >= stats.misplaced_values);
    let at = checks(&pods);
    wait_for("three more checks passed", Duration::from_secs(15), || {
        checks(&pods).success >= at.success + 3
    })
    .await;
    let now = checks(&pods);
    assert_eq!((now.failure, now.error), (0, 0), "{now:?}");
    assert_eq!(pods.stats().resyncs, 0, "no relist");
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.lines().any(|l| {
            l.starts_with(r#"watchcache_misplaced_values_total{resource="pods""#)
                && l.ends_with(" 82")
        }),
        "{text}"
    );
    served.stop().await;
}

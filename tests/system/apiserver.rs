//! The API server upstream against a real API: a root watchcache on a real etcd (in process, on a
//! fixed loopback port so it can be restarted), followed by a leaf `ApiServerCaches` through
//! kube-rs's client, served by a second server. Clients talk HTTP to both.

use crate::support;

use std::time::Duration;

use etcd_client::Client as EtcdClient;
use futures_util::StreamExt;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use watchcache::{CacheConfig, ResourceDef};
use watchcache_etcd::{ConsistentReads, EtcdCaches, free_port};
use watchcache_kube::{ApiServerCaches, ApiServerConfig, InitialList};
use watchcache_server::{Served, Server, ServerConfig};

use support::etcd::{Etcd, etcd};
use support::pod_value;

/// An in-process server over some caches; stopping it ends every watch.
struct Running {
    url: String,
    /// The root's etcd, which tests write into as kube-apiserver would (the root is read-only).
    etcd: Option<String>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Running {
    async fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("server stops")
                .unwrap();
        }
    }
}

/// The root: a watchcache of pods on etcd, serving on `port`.
async fn root(etcd_url: &str, port: u16) -> Running {
    root_with(etcd_url, port, ConsistentReads::Auto).await
}

async fn root_with(etcd_url: &str, port: u16, reads: ConsistentReads) -> Running {
    let mut config = support::etcd::config(&[etcd_url.to_owned()]);
    config.consistent_reads = reads;
    let caches = EtcdCaches::connect(
        config,
        vec![
            ResourceDef::builtin("pods").unwrap(),
            ResourceDef::builtin("configmaps").unwrap(),
        ],
        CacheConfig::default(),
    )
    .await
    .unwrap();
    for plural in ["pods", "configmaps"] {
        let cache = caches.cache(plural).unwrap();
        tokio::time::timeout(Duration::from_secs(30), cache.wait_ready())
            .await
            .expect("ready in time")
            .unwrap();
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let served: Vec<Served> = caches
        .caches()
        .map(|(_, c)| Served::new(c.clone()))
        .collect();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = Server::new(ServerConfig::default(), served);
    let task = tokio::spawn(async move {
        server
            .serve(listener, async { stopped.await.ok().unwrap_or(()) })
            .await
            .unwrap();
        caches.shutdown().await;
    });
    Running {
        url: format!("http://127.0.0.1:{port}"),
        etcd: Some(etcd_url.to_owned()),
        stop: Some(stop),
        task: Some(task),
    }
}

fn leaf_config(initial_list: InitialList) -> ApiServerConfig {
    ApiServerConfig {
        initial_list,
        page_size: 500,
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(300),
        unavailable_grace: Duration::from_secs(1),
        watch_timeout: Duration::from_secs(30),
        request_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(150),
        absent_retry: Duration::from_secs(1),
        protobuf_watch: true,
    }
}

/// The leaf's pods cache following `root_url` through kube-rs's client, ready.
async fn leaf_caches(root_url: &str, config: ApiServerConfig) -> ApiServerCaches {
    let client =
        kube::Client::try_from(kube::Config::new(root_url.parse().unwrap())).expect("a client");
    let caches = ApiServerCaches::connect(
        client,
        config,
        vec![ResourceDef::builtin("pods").unwrap()],
        CacheConfig::default(),
    )
    .unwrap();
    let pods = caches.cache("pods").unwrap();
    tokio::time::timeout(Duration::from_secs(30), pods.wait_ready())
        .await
        .expect("ready in time")
        .unwrap();
    caches
}

/// The leaf: [`leaf_caches`], served on a free port.
async fn leaf(root_url: &str, config: ApiServerConfig) -> Running {
    let caches = leaf_caches(root_url, config).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served: Vec<Served> = caches
        .caches()
        .map(|(_, c)| Served::new(c.clone()))
        .collect();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = Server::new(ServerConfig::default(), served);
    let task = tokio::spawn(async move {
        server
            .serve(listener, async { stopped.await.ok().unwrap_or(()) })
            .await
            .unwrap();
        caches.shutdown().await;
    });
    Running {
        url,
        etcd: None,
        stop: Some(stop),
        task: Some(task),
    }
}

/// Puts `obj` into the root's etcd under `key` as kube-apiserver stores it, or deletes the key
/// (`None`); returns the revision once the root serves it (a consistent read through it).
async fn write(root: &Running, key: &str, obj: Option<&Value>) -> u64 {
    let mut e = EtcdClient::connect([root.etcd.clone().expect("a root")], None)
        .await
        .unwrap();
    let header = match obj {
        Some(o) => {
            let def = ResourceDef::builtin(key.split('/').nth(2).unwrap()).unwrap();
            let (stored_key, value) = support::etcd::stored(&def, o);
            assert_eq!(stored_key, key);
            e.put(key, value, None).await.unwrap().header().cloned()
        }
        None => e.delete(key, None).await.unwrap().header().cloned(),
    };
    let revision = header.unwrap().revision() as u64;
    let [_, _, resource, ns, name] = key.split('/').collect::<Vec<_>>()[..] else {
        panic!("{key}")
    };
    let url = format!("{}/api/v1/namespaces/{ns}/{resource}/{name}", root.url);
    for _ in 0..200 {
        let (code, v) = get(&Client::new(), &url).await;
        match (code, obj) {
            (StatusCode::OK, Some(_)) if rv(&v) == revision => return revision,
            (StatusCode::NOT_FOUND, None) => return revision,
            _ => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
    panic!("the root never served {key} at {revision}")
}

/// A pod put into the root's etcd (the root is read-only: writes are kube-apiserver's); its
/// resourceVersion.
async fn create(root: &Running, name: &str, node: &str) -> u64 {
    let mut p = pod_value(name, node, "web");
    p["metadata"]["namespace"] = json!("ns");
    write(root, &format!("/registry/pods/ns/{name}"), Some(&p)).await
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn get(c: &Client, url: &str) -> (StatusCode, Value) {
    let r = c.get(url).send().await.unwrap();
    (r.status(), r.json().await.unwrap())
}

/// (name, resourceVersion) of a list's items.
fn items(list: &Value) -> Vec<(String, u64)> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), rv(i)))
        .collect()
}

/// An open watch, read line by line.
struct Lines {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Lines {
    async fn open(c: &Client, url: &str) -> Lines {
        let r = c.get(url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{url}");
        Lines {
            body: Box::pin(r.bytes_stream()),
            buf: Vec::new(),
        }
    }

    /// The next frame, or `None` when the stream ends or nothing comes for `wait`.
    async fn next(&mut self, wait: Duration) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            match tokio::time::timeout(wait, self.body.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// The next non-bookmark frame as (type, name, rv).
    async fn event(&mut self) -> (String, String, u64) {
        loop {
            let f = self.next(Duration::from_secs(10)).await.expect("an event");
            let t = f["type"].as_str().unwrap().to_owned();
            if t == "BOOKMARK" {
                continue;
            }
            let o = &f["object"];
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let v = o["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            return (t, name, v);
        }
    }
}

/// Waits until the leaf lists what the root lists (same names at the same resourceVersions).
async fn converged(c: &Client, root: &str, leaf: &str) -> Vec<(String, u64)> {
    let path = "/api/v1/pods?resourceVersion=0";
    for _ in 0..200 {
        let (_, r) = get(c, &format!("{root}{path}")).await;
        let (s, l) = get(c, &format!("{leaf}{path}")).await;
        if s == StatusCode::OK && items(&r) == items(&l) {
            return items(&l);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the leaf never converged on the root");
}

async fn setup() -> (Etcd, Running, Client) {
    let etcd = etcd().await;
    let root = root(&etcd.server.url(), free_port().unwrap()).await;
    (etcd, root, Client::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_syncs_by_watch_list_or_by_list_and_streams_the_roots_events() {
    let (_etcd, mut root, c) = setup().await;
    for i in 0..30 {
        create(&root, &format!("p{i:02}"), &format!("node-{}", i % 3)).await;
    }
    for mode in [InitialList::WatchList, InitialList::List] {
        let mut leaf = leaf(&root.url, leaf_config(mode)).await;
        let listed = converged(&c, &root.url, &leaf.url).await;
        assert!(listed.len() >= 30, "{mode:?}: {listed:?}");
        // A kubelet-style watch on the leaf sees a write at the root with the root's revision.
        let mut w = Lines::open(
            &c,
            &format!(
                "{}/api/v1/pods?watch=1&fieldSelector=spec.nodeName=node-1&resourceVersion={}",
                leaf.url,
                listed.iter().map(|(_, v)| *v).max().unwrap()
            ),
        )
        .await;
        let name = format!("x-{mode:?}").to_lowercase();
        let at = create(&root, &name, "node-1").await;
        create(&root, &format!("{name}-elsewhere"), "node-2").await;
        assert_eq!(w.event().await, ("ADDED".into(), name, at));
        leaf.stop().await;
    }
    root.stop().await;
}

/// With `protobuf_watch`, the leaf reads its root's LIST and watch in protobuf: it keeps the
/// root's protobuf bytes as they came, and the JSON it makes of them is the root's JSON. Without
/// it, the same LIST and watch are read in JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_reads_its_roots_watch_in_protobuf_and_serves_the_roots_objects() {
    let (_etcd, mut root, c) = setup().await;
    create(&root, "listed", "node-1").await;
    for protobuf_watch in [true, false] {
        let gone = format!("gone-{protobuf_watch}");
        create(&root, &gone, "node-1").await;
        let caches = leaf_caches(
            &root.url,
            ApiServerConfig {
                protobuf_watch,
                ..leaf_config(InitialList::List)
            },
        )
        .await;
        let pods = caches.cache("pods").unwrap().clone();
        // Listed (`InitialList::List`): read in protobuf under the watch's rule, and stored as
        // a watched object is, its JSON the root's.
        let listed = pods.peek(Some("ns"), "listed").unwrap();
        assert_eq!(listed.protobuf().is_some(), protobuf_watch, "listed");
        // In JSON too: a typed list's items carry no kind and apiVersion, and the leaf puts
        // them back as a watch event and a GET have them.
        let (_, want) = get(
            &c,
            &format!("{}/api/v1/namespaces/ns/pods/listed", root.url),
        )
        .await;
        let got: Value = serde_json::from_slice(listed.json()).unwrap();
        assert_eq!(got, want, "listed: the leaf's JSON is the root's");
        let name = format!("watched-{protobuf_watch}");
        let at = create(&root, &name, "node-2").await;
        write(&root, &format!("/registry/pods/ns/{gone}"), None).await;
        let last = create(&root, &format!("last-{protobuf_watch}"), "node-3").await;
        tokio::time::timeout(Duration::from_secs(10), pods.wait_for(last))
            .await
            .expect("the leaf reaches the root's revision")
            .unwrap();
        let o = pods.peek(Some("ns"), &name).expect("the watched pod");
        assert_eq!(o.protobuf().is_some(), protobuf_watch, "{name}");
        assert_eq!((o.resource_version(), o.label("app")), (at, Some("web")));
        let (_, want) = get(
            &c,
            &format!("{}/api/v1/namespaces/ns/pods/{name}", root.url),
        )
        .await;
        let got: Value = serde_json::from_slice(o.json()).unwrap();
        assert_eq!(got, want, "{name}: the leaf's JSON is the root's");
        assert!(pods.peek(Some("ns"), &gone).is_none(), "{gone} deleted");
        caches.shutdown().await;
    }
    root.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_on_the_leaf_from_a_resource_version_the_root_gave_it() {
    let (_etcd, mut root, c) = setup().await;
    let mut leaf = leaf(&root.url, leaf_config(InitialList::Auto)).await;
    create(&root, "a", "n1").await;
    let (_, list) = get(&c, &format!("{}/api/v1/pods", root.url)).await;
    let from = rv(&list);
    let b = create(&root, "b", "n1").await;
    // A bound pod deleted with grace 0, as kube-apiserver deletes it: its deletion is written
    // (MODIFIED), then it goes.
    let mut dying = pod_value("a", "n1", "web");
    dying["metadata"]["namespace"] = json!("ns");
    dying["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
    dying["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    write(&root, "/registry/pods/ns/a", Some(&dying)).await;
    let a_gone = write(&root, "/registry/pods/ns/a", None).await;
    // The leaf replays from the root's revision: exactly the later events, no relist, no 410.
    let mut w = Lines::open(
        &c,
        &format!("{}/api/v1/pods?watch=1&resourceVersion={from}", leaf.url),
    )
    .await;
    assert_eq!(w.event().await, ("ADDED".into(), "b".into(), b));
    assert_eq!(w.event().await, ("MODIFIED".into(), "a".into(), a_gone - 1));
    assert_eq!(w.event().await, ("DELETED".into(), "a".into(), a_gone));
    assert!(w.next(Duration::from_millis(500)).await.is_none());
    leaf.stop().await;
    root.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_on_the_leaf_are_proven_by_the_roots_selected_objects() {
    // The root's bookmarks could only move the leaf as far as the root's own revision; the
    // proof by selection needs no bookmark at all (design/semantics.md, "Consistent reads are
    // proven by selection"): a quiet resource is read at once.
    let etcd = etcd().await;
    let mut root = root_with(
        &etcd.server.url(),
        free_port().unwrap(),
        ConsistentReads::FromCache,
    )
    .await;
    let c = Client::new();
    let mut leaf = leaf(&root.url, leaf_config(InitialList::Auto)).await;
    let mut e = EtcdClient::connect([etcd.server.url()], None)
        .await
        .unwrap();
    create(&root, "quiet", "n1").await;
    // Another resource moves etcd's revision on; no pod event will carry the leaf there.
    let mut bumped = 0;
    for i in 0..5 {
        bumped = e
            .put(format!("/registry/configmaps/ns/c{i}"), "{}", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision() as u64;
    }
    let proofs = || async {
        let text = c
            .get(format!("{}/metrics", leaf.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        support::sum_samples(
            &text,
            "watchcache_fresh_by_selection_total",
            &["resource=\"pods\""],
        ) as u64
    };
    let before = proofs().await;
    let started = std::time::Instant::now();
    let (s, list) = get(&c, &format!("{}/api/v1/pods", leaf.url)).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let (_, at_root) = get(&c, &format!("{}/api/v1/pods", root.url)).await;
    assert_eq!(items(&list), items(&at_root));
    // Served at the leaf's last pod change, before the configmaps moved etcd on: the same
    // state of the pods as the root's answer at `bumped` or later.
    assert!(
        rv(&list) < bumped && rv(&at_root) >= bumped,
        "{list} {at_root}"
    );
    assert_eq!(proofs().await, before + 1, "proven by selection");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // A write at the root is in the next consistent read of the leaf.
    let at = create(&root, "fresh", "n1").await;
    let (s, list) = get(&c, &format!("{}/api/v1/pods", leaf.url)).await;
    assert_eq!(s, StatusCode::OK);
    assert!(items(&list).contains(&("fresh".into(), at)), "{list}");
    leaf.stop().await;
    root.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_root_makes_the_leaf_relist_and_its_watchers_see_ordinary_events() {
    let etcd = etcd().await;
    let port = free_port().unwrap();
    let mut root1 = root(&etcd.server.url(), port).await;
    let c = Client::new();
    let mut leaf = leaf(&root1.url, leaf_config(InitialList::Auto)).await;
    create(&root1, "stays", "n1").await;
    create(&root1, "goes", "n1").await;
    let changed_rv = create(&root1, "changes", "n1").await;
    let listed = converged(&c, &root1.url, &leaf.url).await;
    let from = listed.iter().map(|(_, v)| *v).max().unwrap();
    let mut w = Lines::open(
        &c,
        &format!("{}/api/v1/pods?watch=1&resourceVersion={from}", leaf.url),
    )
    .await;
    // The root goes away; etcd changes and is compacted meanwhile; a new root starts at etcd's
    // current revision, so the leaf's resume position is older than its window: 410.
    root1.stop().await;
    let mut e = EtcdClient::connect([etcd.server.url()], None)
        .await
        .unwrap();
    e.delete("/registry/pods/ns/goes", None).await.unwrap();
    let v = support::pod("ns", "changes", "n9", &[]);
    e.put("/registry/pods/ns/changes", v, None).await.unwrap();
    let v = support::pod("ns", "new", "n1", &[]);
    let last = e
        .put("/registry/pods/ns/new", v, None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    e.compact(last, None).await.unwrap();
    let mut root2 = root(&etcd.server.url(), port).await;
    // The leaf relisted and resynced by difference: its watcher got ordinary events, no ERROR.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (t, name, v) = w.event().await;
        assert!(v > changed_rv);
        seen.push((t, name));
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("ADDED".to_owned(), "new".to_owned()),
            ("DELETED".to_owned(), "goes".to_owned()),
            ("MODIFIED".to_owned(), "changes".to_owned()),
        ]
    );
    let listed = converged(&c, &root2.url, &leaf.url).await;
    assert_eq!(listed.len(), 3);
    leaf.stop().await;
    root2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaf_is_not_ready_while_the_root_is_down_and_ready_again_after() {
    let etcd = etcd().await;
    let port = free_port().unwrap();
    let mut root1 = root(&etcd.server.url(), port).await;
    let c = Client::new();
    let mut leaf = leaf(&root1.url, leaf_config(InitialList::Auto)).await;
    let a = create(&root1, "a", "n1").await;
    root1.stop().await;
    // Past the 1 s grace: reads answer 429 with Retry-After.
    let mut status = StatusCode::OK;
    for _ in 0..100 {
        let r = c
            .get(format!("{}/api/v1/pods?resourceVersion=0", leaf.url))
            .send()
            .await
            .unwrap();
        status = r.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert!(r.headers().contains_key("retry-after"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // The root returns; the leaf resumes from its revision (no relist) and is ready again.
    let mut root2 = root(&etcd.server.url(), port).await;
    let b = create(&root2, "b", "n1").await;
    let listed = converged(&c, &root2.url, &leaf.url).await;
    assert_eq!(listed, vec![("a".into(), a), ("b".into(), b)]);
    leaf.stop().await;
    root2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_cache_gives_up_on_a_server_that_does_not_answer_within_its_bound() {
    use k8s_openapi::api::core::v1::Pod;
    use watchcache_kube::{KubeCache, definition_for};

    // Nothing listens there.
    let port = watchcache_etcd::free_port().unwrap();
    let client = kube::Client::try_from(kube::Config::new(
        format!("http://127.0.0.1:{port}").parse().unwrap(),
    ))
    .unwrap();
    let def = definition_for::<Pod>(&[("spec.nodeName", true)]).unwrap();
    let began = std::time::Instant::now();
    let e = KubeCache::<Pod>::start_within(client, def, Duration::from_secs(2))
        .await
        .unwrap_err();
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "{took:?}"
    );
    assert_eq!(e.code(), 429, "{e}");
    assert!(e.to_string().contains("pods"), "{e}");
    assert!(e.to_string().contains("first sync"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_cache_reads_typed_objects_by_index_and_routes_watches() {
    use k8s_openapi::api::core::v1::Pod;
    use watchcache::{EventType, Selection};
    use watchcache_kube::{KubeCache, definition_for};

    let (_etcd, mut root, _) = setup().await;
    for i in 0..6 {
        create(&root, &format!("p{i}"), &format!("node-{}", i % 3)).await;
    }
    let client = kube::Client::try_from(kube::Config::new(root.url.parse().unwrap())).unwrap();
    let def = definition_for::<Pod>(&[("spec.nodeName", true), ("label:app", false)]).unwrap();
    let pods: KubeCache<Pod> = KubeCache::start(client, def).await.unwrap();
    let name = |p: &Pod| p.metadata.name.clone().unwrap();
    let on1: Vec<String> = pods
        .by_index("spec.nodeName", "node-1")
        .unwrap()
        .iter()
        .map(|p| name(p))
        .collect();
    assert_eq!(on1, ["p1", "p4"]);
    assert_eq!(pods.by_index("label:app", "web").unwrap().len(), 6);
    assert!(pods.by_index("spec.nope", "x").is_err());
    let p0 = pods.get(Some("ns"), "p0").await.unwrap().unwrap();
    assert_eq!(
        p0.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-0")
    );
    // Decoded once per object version: a second read shares the first's.
    let again = pods.get(Some("ns"), "p0").await.unwrap().unwrap();
    assert!(std::sync::Arc::ptr_eq(&p0, &again));
    assert!(pods.get(Some("ns"), "nope").await.unwrap().is_none());
    assert_eq!(pods.state().await.unwrap().len(), 6);
    // A routed watch on node-1 sees node-1's pod and not node-2's.
    let mut w = pods
        .watch(
            Selection::all()
                .with_fields("spec.nodeName=node-1")
                .unwrap(),
        )
        .await
        .unwrap();
    create(&root, "elsewhere", "node-2").await;
    create(&root, "here", "node-1").await;
    let (kind, pod) = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((kind, name(&pod)), (EventType::Added, "here".to_owned()));
    // A clone is the same cache behind the same one watch: it has both new pods already.
    let clone = pods.clone();
    assert_eq!(clone.state().await.unwrap().len(), 8);
    assert_eq!(clone.cache().stats().objects, pods.cache().stats().objects);
    drop(clone);
    pods.shutdown().await;
    root.stop().await;
}

/// The embedded cache's watch as kube-runtime's `watcher::Event`s: a kube-runtime `reflector`
/// keeps a `Store` of one node's pods from it, and a `Controller` built with `for_stream`
/// reconciles another node's pods, each fed by a routed watch of the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_cache_feeds_kube_runtimes_reflector_and_controller() {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::controller::{Action, Controller};
    use kube::runtime::{WatchStreamExt, reflector};
    use watchcache::Selection;
    use watchcache_kube::{KubeCache, definition_for};

    let (_etcd, mut root, _) = setup().await;
    for i in 0..4 {
        create(&root, &format!("p{i}"), &format!("node-{}", i % 2)).await;
    }
    let client = kube::Client::try_from(kube::Config::new(root.url.parse().unwrap())).unwrap();
    let def = definition_for::<Pod>(&[("spec.nodeName", true)]).unwrap();
    let pods: KubeCache<Pod> = KubeCache::start(client, def).await.unwrap();
    let on = |node: &str| {
        Selection::all()
            .with_fields(&format!("spec.nodeName={node}"))
            .unwrap()
    };
    let names = |store: &reflector::Store<Pod>| {
        let mut n: Vec<String> = store
            .state()
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        n.sort();
        n
    };

    // A reflector: node-1's pods in a kube-runtime Store.
    let (store, writer) = reflector::store::<Pod>();
    let reflect = reflector::reflector(writer, pods.events(on("node-1")).await.unwrap());
    let reflecting = tokio::spawn(reflect.for_each(|ev| {
        ev.unwrap();
        std::future::ready(())
    }));
    tokio::time::timeout(Duration::from_secs(5), store.wait_until_ready())
        .await
        .expect("InitDone in time")
        .unwrap();
    assert_eq!(names(&store), ["p1", "p3"]);

    // A controller on node-0's pods, triggered by the cache's stream through its own store.
    let (ctl_store, ctl_writer) = reflector::store::<Pod>();
    let trigger = pods
        .events(on("node-0"))
        .await
        .unwrap()
        .reflect(ctl_writer)
        .applied_objects();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<String>();
    async fn reconcile(
        pod: Arc<Pod>,
        seen: Arc<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Action, kube::Error> {
        seen.send(pod.metadata.name.clone().unwrap()).unwrap();
        Ok(Action::await_change())
    }
    fn error_policy(
        _: Arc<Pod>,
        e: &kube::Error,
        _: Arc<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Action {
        panic!("reconcile failed: {e}")
    }
    let controller = tokio::spawn(
        Controller::for_stream(trigger, ctl_store)
            .run(reconcile, error_policy, Arc::new(seen_tx))
            .for_each(|_| std::future::ready(())),
    );
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), seen.recv())
            .await
            .expect("reconciled in time")
            .unwrap()
    };
    let mut first = vec![next().await, next().await];
    first.sort();
    assert_eq!(first, ["p0", "p2"]);

    // Live changes: each reaches only its node's consumer.
    create(&root, "p4", "node-1").await;
    create(&root, "p5", "node-0").await;
    assert_eq!(next().await, "p5");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while names(&store) != ["p1", "p3", "p4"] {
        assert!(
            std::time::Instant::now() < deadline,
            "the reflector's store has node-1's new pod: {:?}",
            names(&store)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen.try_recv().is_err(), "node-1's pod is not node-0's");
    controller.abort();
    reflecting.abort();
    pods.shutdown().await;
    root.stop().await;
}

#[tokio::test]
async fn the_embedded_cache_holds_dynamic_objects_of_a_discovered_resource() {
    use kube::core::{DynamicObject, GroupVersionKind};
    use watchcache::{EventType, Selection};
    use watchcache_kube::{KubeCache, definition_for_api_resource};

    let (_etcd, mut root, _) = setup().await;
    let configmap = |name: &str, team: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "ns", "labels": {"team": team}},
               "data": {"k": name}})
    };
    for (name, team) in [("a1", "a"), ("b1", "b"), ("a2", "a")] {
        let key = format!("/registry/configmaps/ns/{name}");
        write(&root, &key, Some(&configmap(name, team))).await;
    }
    let client = kube::Client::try_from(kube::Config::new(root.url.parse().unwrap())).unwrap();
    // What the resource is comes from kube-rs's discovery against the server, not from a type.
    let (ar, caps) =
        kube::discovery::pinned_kind(&client, &GroupVersionKind::gvk("", "v1", "ConfigMap"))
            .await
            .unwrap();
    let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
    assert!(namespaced);
    let def = definition_for_api_resource(&ar, namespaced, &[("label:team", true)]).unwrap();
    let cms: KubeCache<DynamicObject> = KubeCache::start(client, def).await.unwrap();
    let mut team_a: Vec<String> = cms
        .by_index("label:team", "a")
        .unwrap()
        .into_iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    team_a.sort();
    assert_eq!(team_a, ["a1", "a2"]);
    let b1 = cms.get(Some("ns"), "b1").await.unwrap().unwrap();
    assert_eq!(b1.data["data"]["k"], "b1");
    // A watch routed by the label trigger: team b's change is not delivered to team a's watcher.
    let mut w = cms
        .watch(Selection::all().with_labels("team=a").unwrap())
        .await
        .unwrap();
    for (name, team) in [("b2", "b"), ("a3", "a")] {
        let key = format!("/registry/configmaps/ns/{name}");
        write(&root, &key, Some(&configmap(name, team))).await;
    }
    let (kind, obj) = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            kind,
            obj.metadata.name.as_deref(),
            obj.types.as_ref().map(|t| t.kind.clone())
        ),
        (EventType::Added, Some("a3"), Some("ConfigMap".to_owned()))
    );
    cms.shutdown().await;
    root.stop().await;
}

/// A leaf over a root that serves only pods and configmaps: of every built-in definition it
/// follows those two, and leaves the rest (a whole group the root lacks, a resource missing from
/// a group version it serves) to the root, so that it becomes ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_follows_only_what_its_upstream_serves() {
    let (_etcd, root, _c) = setup().await;
    let client =
        kube::Client::try_from(kube::Config::new(root.url.parse().unwrap())).expect("a client");
    let (served, missing) = watchcache_kube::served_by(&client, ResourceDef::builtins()).await;
    let mut served: Vec<String> = served.iter().map(ResourceDef::resource_name).collect();
    served.sort();
    assert_eq!(served, ["configmaps", "pods"]);
    assert_eq!(missing.len(), ResourceDef::builtins().len() - 2);
    assert!(missing.iter().any(|d| d.plural == "secrets"));
    assert!(
        missing
            .iter()
            .any(|d| d.resource_name() == "deployments.apps")
    );
    // An upstream that cannot answer discovery: everything is followed, as before.
    let down = kube::Client::try_from(kube::Config::new(
        format!("http://127.0.0.1:{}", free_port().unwrap())
            .parse()
            .unwrap(),
    ))
    .unwrap();
    let (all, none) = watchcache_kube::served_by(&down, ResourceDef::builtins()).await;
    assert_eq!((all.len(), none.len()), (ResourceDef::builtins().len(), 0));
}

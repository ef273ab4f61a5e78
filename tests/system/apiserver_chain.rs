//! A tree of caches as real processes: etcd ← `watchcache serve --etcd` (root) ←
//! `watchcache serve --upstream-kubeconfig` (leaf, through a generated kubeconfig pointing at the
//! root's URL) ← clients. Both servers are `kill -9`ed and restarted under load; clients must see
//! every change exactly once and in order, or a clear 410 followed by a relist that converges.
//! The root serves every built-in resource, the leaf caches pods and proxies the rest to the root.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::Client as EtcdClient;
use futures_util::StreamExt;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use support::kubectl::Kubectl;
use watchcache_etcd::free_port;

/// A `watchcache serve` process, killed with SIGKILL on drop.
struct Proc {
    child: Child,
    url: String,
}

impl Proc {
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Starts `watchcache serve` on `port` (`scheme`: what its URL will be) without waiting for it.
fn start(args: &[&str], port: u16, scheme: &str) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn watchcache");
    Proc {
        child,
        url: format!("{scheme}://127.0.0.1:{port}"),
    }
}

/// Starts `watchcache serve` on plain HTTP and waits until it is ready.
async fn spawn(args: &[&str], port: u16) -> Proc {
    let p = start(args, port, "http");
    let c = Client::new();
    for _ in 0..300 {
        if let Ok(r) = c.get(format!("{}/readyz", p.url)).send().await
            && r.status() == StatusCode::OK
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("watchcache {args:?} never became ready");
}

/// A root on `etcd`, where the tests' namespace `ns` exists.
async fn root(etcd: &str, port: u16) -> Proc {
    support::etcd::put_namespaces(etcd, &["ns"]).await;
    spawn(&["--etcd", etcd], port).await
}

fn kubeconfig(dir: &Path, root_url: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: root\n  cluster:\n    server: {root_url}\n\
             users:\n- name: anonymous\n  user: {{}}\ncontexts:\n- name: root\n  context:\n    cluster: root\n    user: anonymous\n\
             current-context: root\n"
        ),
    )
    .unwrap();
    path
}

async fn leaf(kubeconfig: &Path, port: u16) -> Proc {
    spawn(
        &[
            "--upstream-kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--upstream-context",
            "root",
            "--resources",
            "pods",
        ],
        port,
    )
    .await
}

/// GETs `url` and reads its JSON answer.
async fn get_json(c: &Client, url: impl reqwest::IntoUrl) -> Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The number of watchers a server has open on pods, from its metrics.
async fn pod_watchers(c: &Client, url: &str) -> i64 {
    let text = c
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("watchcache_watchers{") && l.contains("resource=\"pods\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum()
}

/// What a client following the leaf saw: every event's (rv, name, type), 410s and relists.
#[derive(Default, Debug)]
struct Seen {
    events: Vec<(u64, String, String)>,
    expired: usize,
    relists: usize,
    /// How many events came before the first 410.
    before_expired: Option<usize>,
    /// The resourceVersion of the first list.
    listed_at: u64,
    /// The client's view of the state: name → rv.
    state: std::collections::BTreeMap<String, u64>,
}

/// A reflector-like client of the leaf: list, then watch from the list's resourceVersion; on a
/// broken stream resume from the last one; on 410, relist and carry on. Runs until `stop`.
async fn follow(url: String, stop: tokio::sync::watch::Receiver<bool>) -> Seen {
    let c = Client::new();
    let mut seen = Seen::default();
    let mut from: Option<u64> = None;
    loop {
        if *stop.borrow() {
            return seen;
        }
        let start = match from {
            Some(r) => r,
            None => match c.get(format!("{url}/api/v1/pods")).send().await {
                Ok(r) if r.status() == StatusCode::OK => {
                    let list: Value = r.json().await.unwrap();
                    seen.relists += 1;
                    seen.state = list["items"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), rv(i)))
                        .collect();
                    let r = rv(&list);
                    if seen.relists == 1 {
                        seen.listed_at = r;
                    }
                    from = Some(r);
                    r
                }
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let resp = match c
            .get(format!(
                "{url}/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={start}&timeoutSeconds=30"
            ))
            .send()
            .await
        {
            Ok(r) if r.status() == StatusCode::OK => r,
            _ => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        let mut stop_rx = stop.clone();
        'stream: loop {
            let chunk = tokio::select! {
                _ = stop_rx.changed() => return seen,
                c = body.next() => c,
            };
            let Some(Ok(chunk)) = chunk else { break };
            buf.extend_from_slice(&chunk);
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                let f: Value = serde_json::from_slice(&line).unwrap();
                let t = f["type"].as_str().unwrap().to_owned();
                let o = &f["object"];
                match t.as_str() {
                    "BOOKMARK" => from = Some(rv(o)),
                    "ERROR" => {
                        assert_eq!(o["code"], 410, "{o}");
                        seen.expired += 1;
                        seen.before_expired.get_or_insert(seen.events.len());
                        from = None;
                        break 'stream;
                    }
                    _ => {
                        let name = o["metadata"]["name"].as_str().unwrap().to_owned();
                        let r = rv(o);
                        if t == "DELETED" {
                            seen.state.remove(&name);
                        } else {
                            seen.state.insert(name.clone(), r);
                        }
                        seen.events.push((r, name, t));
                        from = Some(r);
                    }
                }
            }
        }
    }
}

/// Writes pod `i` into etcd, as kube-apiserver stores it: the caches are read-only (writes are
/// kube-apiserver's), and go on while the root is down.
async fn write(etcd: &str, i: usize) {
    let name = format!("p{i:03}");
    let body = json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {"nodeName": format!("node-{}", i % 4)}});
    put(etcd, "pods", &body).await;
}

/// Puts an object of the built-in `resource` into etcd, as kube-apiserver stores it.
async fn put(etcd: &str, resource: &str, obj: &Value) {
    let def = watchcache::ResourceDef::builtin(resource).unwrap();
    let (key, value) = support::etcd::stored(&def, obj);
    let mut e = EtcdClient::connect([etcd], None).await.unwrap();
    e.put(key, value, None).await.unwrap();
}

/// etcd's history of the pods prefix after `from`: (revision, name).
async fn etcd_history(etcd: &str, from: u64) -> Vec<(u64, String)> {
    let mut e = EtcdClient::connect([etcd], None).await.unwrap();
    let now = e.get("/", None).await.unwrap().header().unwrap().revision();
    support::etcd::history(&mut e, "/registry/pods/", from as i64 + 1, now)
        .await
        .into_iter()
        .filter(|(r, _, _)| *r > from)
        .map(|(r, k, _)| (r, k.rsplit('/').next().unwrap().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_processes_keeps_every_client_stream_exactly_once_through_kill_9() {
    let etcd = support::etcd::etcd().await;
    let etcd_url = etcd.server.url();
    let dir = tempfile::tempdir().unwrap();
    let (root_port, leaf_port) = (free_port().unwrap(), free_port().unwrap());
    let mut root_proc = root(&etcd_url, root_port).await;
    let root_url = root_proc.url.clone();
    let config = kubeconfig(dir.path(), &root_url);
    let mut leaf_proc = leaf(&config, leaf_port).await;
    let leaf_url = leaf_proc.url.clone();
    let c = Client::new();

    // A client resumes on the leaf from a resourceVersion the root gave it: no relist.
    let list: Value = get_json(&c, format!("{root_url}/api/v1/pods")).await;
    let from = rv(&list);
    write(&etcd_url, 0).await;
    let r = c
        .get(format!(
            "{leaf_url}/api/v1/pods?watch=1&resourceVersion={from}&timeoutSeconds=1"
        ))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED", "{text}");
    assert_eq!(first["object"]["metadata"]["name"], "p000");

    // Clients follow the leaf while writes go through the root, and the root, then the leaf,
    // is killed with SIGKILL and restarted.
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let followers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(follow(leaf_url.clone(), stop_rx.clone())))
        .collect();
    // Many clients of the leaf (once their lists are read and their watches open: no fixed
    // wait, which a loaded machine outlasts), one watch on the root.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pod_watchers(&c, &leaf_url).await < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the followers' 4 watches were not open on the leaf within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(pod_watchers(&c, &root_url).await, 1);
    let writer = {
        let etcd_url = etcd_url.clone();
        tokio::spawn(async move {
            for i in 1..=150 {
                write(&etcd_url, i).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    root_proc.kill9();
    tokio::time::sleep(Duration::from_millis(700)).await;
    root_proc = root(&etcd_url, root_port).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    leaf_proc.kill9();
    tokio::time::sleep(Duration::from_millis(300)).await;
    leaf_proc = leaf(&config, leaf_port).await;
    writer.await.unwrap();
    // The leaf catches up with the root; then the clients stop.
    let root_rv = {
        let l: Value = get_json(&c, format!("{root_url}/api/v1/pods")).await;
        rv(&l)
    };
    let l: Value = get_json(&c, format!("{leaf_url}/api/v1/pods")).await;
    assert!(rv(&l) >= root_rv);
    let final_state: std::collections::BTreeMap<String, u64> = l["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), rv(i)))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.send(true).unwrap();
    let history = etcd_history(&etcd_url, from).await;
    for f in followers {
        let seen = f.await.unwrap();
        eprintln!(
            "client: {} events, {} relists, {} × 410, listed at {}",
            seen.events.len(),
            seen.relists,
            seen.expired,
            seen.listed_at
        );
        assert!(seen.events.len() >= 20, "{seen:?}");
        // In order, never twice.
        assert!(
            seen.events.windows(2).all(|w| w[0].0 < w[1].0),
            "out of order or duplicated: {:?}",
            seen.events
        );
        // Exactly etcd's history up to the first 410 (the root's kill -9 included: the leaf
        // relists by difference, and its clients see ordinary events); after it, a relist that
        // converges.
        let got: Vec<(u64, String)> = seen
            .events
            .iter()
            .take(seen.before_expired.unwrap_or(usize::MAX))
            .map(|(r, n, _)| (*r, n.clone()))
            .collect();
        let want: Vec<(u64, String)> = history
            .iter()
            .filter(|(r, _)| *r > seen.listed_at)
            .take(got.len())
            .cloned()
            .collect();
        assert_eq!(got, want);
        if seen.expired == 0 {
            assert_eq!(
                got.len(),
                history.iter().filter(|(r, _)| *r > seen.listed_at).count()
            );
        }
        assert_eq!(seen.state, final_state, "the client converged ({seen:?})");
    }
    drop(leaf_proc);
    drop(root_proc);
}

/// A kube-rs watcher of the leaf's pods, keeping name → resourceVersion and counting inits.
#[derive(Default, Debug, Clone)]
struct KubeView {
    state: std::collections::BTreeMap<String, u64>,
    inits: usize,
    errors: usize,
}

fn kube_watch(
    leaf_url: &str,
    config: kube::runtime::watcher::Config,
) -> (
    tokio::sync::watch::Receiver<KubeView>,
    tokio::task::JoinHandle<()>,
) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::{Event, watcher};
    let client = kube::Client::try_from(kube::Config::new(leaf_url.parse().unwrap())).unwrap();
    let (tx, rx) = tokio::sync::watch::channel(KubeView::default());
    let task = tokio::spawn(async move {
        let mut view = KubeView::default();
        let mut pending = std::collections::BTreeMap::new();
        let mut stream = std::pin::pin!(watcher(kube::Api::<Pod>::all(client), config));
        while let Some(ev) = stream.next().await {
            let key = |p: &Pod| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata
                        .resource_version
                        .as_deref()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                )
            };
            match ev {
                Ok(Event::Init) => {
                    view.inits += 1;
                    pending.clear();
                }
                Ok(Event::InitApply(p)) => {
                    let (n, r) = key(&p);
                    pending.insert(n, r);
                }
                Ok(Event::InitDone) => view.state = std::mem::take(&mut pending),
                Ok(Event::Apply(p)) => {
                    let (n, r) = key(&p);
                    view.state.insert(n, r);
                }
                Ok(Event::Delete(p)) => {
                    view.state.remove(&key(&p).0);
                }
                Err(_) => view.errors += 1,
            }
            let _ = tx.send(view.clone());
        }
    });
    (rx, task)
}

async fn pods_of(c: &Client, url: &str) -> std::collections::BTreeMap<String, u64> {
    let l: Value = get_json(c, format!("{url}/api/v1/pods")).await;
    l["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), rv(i)))
        .collect()
}

/// Waits until the view holds `want`.
async fn view_reaches(
    rx: &mut tokio::sync::watch::Receiver<KubeView>,
    want: &std::collections::BTreeMap<String, u64>,
) -> KubeView {
    let reached = tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|v| &v.state == want))
        .await
        .ok()
        .and_then(Result::ok)
        .map(|v| v.clone());
    reached.unwrap_or_else(|| {
        panic!(
            "the kube-rs watcher never reached {want:?}: {:?}",
            rx.borrow()
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_at_the_root_makes_the_leaf_relist_and_kube_rs_watchers_converge() {
    let etcd = support::etcd::etcd().await;
    let etcd_url = etcd.server.url();
    let dir = tempfile::tempdir().unwrap();
    let (root_port, leaf_port) = (free_port().unwrap(), free_port().unwrap());
    let mut root_proc = root(&etcd_url, root_port).await;
    let root_url = root_proc.url.clone();
    let leaf_proc = leaf(&kubeconfig(dir.path(), &root_url), leaf_port).await;
    let leaf_url = leaf_proc.url.clone();
    let c = Client::new();
    for i in 0..5 {
        write(&etcd_url, i).await;
    }
    // kube-rs's watcher on the leaf, with streaming lists (WatchList) and with paged LIST.
    use kube::runtime::watcher::Config as WatcherConfig;
    let (mut streaming, t1) = kube_watch(&leaf_url, WatcherConfig::default().streaming_lists());
    let (mut listing, t2) = kube_watch(&leaf_url, WatcherConfig::default().page_size(2));
    let want = pods_of(&c, &root_url).await;
    assert_eq!(want.len(), 5);
    view_reaches(&mut streaming, &want).await;
    view_reaches(&mut listing, &want).await;

    // The root dies; etcd changes and is compacted; the new root's window starts past the
    // leaf's position, so the leaf's resume is 410 Expired and it relists by difference.
    root_proc.kill9();
    let mut e = EtcdClient::connect([etcd_url.as_str()], None)
        .await
        .unwrap();
    e.delete("/registry/pods/ns/p001", None).await.unwrap();
    e.put(
        "/registry/pods/ns/p002",
        support::pod("ns", "p002", "node-9", &[]),
        None,
    )
    .await
    .unwrap();
    let last = e
        .put(
            "/registry/pods/ns/p100",
            support::pod("ns", "p100", "node-1", &[]),
            None,
        )
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    e.compact(last, None).await.unwrap();
    let _root_proc = root(&etcd_url, root_port).await;
    let want = pods_of(&c, &root_url).await;
    assert!(want.contains_key("p100") && !want.contains_key("p001"));
    // The leaf's clients saw ordinary events: no re-initialisation, no errors.
    for rx in [&mut streaming, &mut listing] {
        let v = view_reaches(rx, &want).await;
        assert_eq!((v.inits, v.errors), (1, 0), "{v:?}");
    }
    assert_eq!(pods_of(&c, &leaf_url).await, want);
    t1.abort();
    t2.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaf_proxies_what_it_does_not_cache_and_answers_503_when_the_root_is_down() {
    let etcd = support::etcd::etcd().await;
    let etcd_url = etcd.server.url();
    let dir = tempfile::tempdir().unwrap();
    let (root_port, leaf_port) = (free_port().unwrap(), free_port().unwrap());
    let mut root_proc = root(&etcd_url, root_port).await;
    let root_url = root_proc.url.clone();
    let leaf_proc = leaf(&kubeconfig(dir.path(), &root_url), leaf_port).await;
    let leaf_url = leaf_proc.url.clone();
    let c = Client::new();
    // Discovery is the root's: configmaps are listed though the leaf caches only pods.
    let d: Value = get_json(&c, format!("{leaf_url}/api/v1")).await;
    assert!(
        d["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "configmaps"),
        "{d}"
    );
    // Every verb on a resource the leaf does not define goes to the root, watches included.
    let cms = format!("{leaf_url}/api/v1/namespaces/ns/configmaps");
    let mut watch = c
        .get(format!(
            "{leaf_url}/api/v1/configmaps?watch=1&resourceVersion=0&timeoutSeconds=5"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "1"}});
    put(&etcd_url, "configmaps", &cm).await;
    let mut first = Vec::new();
    while !first.contains(&b'\n') {
        let chunk = tokio::time::timeout(Duration::from_secs(5), watch.chunk())
            .await
            .unwrap()
            .unwrap()
            .expect("a watch event");
        first.extend_from_slice(&chunk);
    }
    let ev: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("c"))
    );
    let got: Value = get_json(&c, format!("{cms}/c")).await;
    let at_root: Value =
        get_json(&c, format!("{root_url}/api/v1/namespaces/ns/configmaps/c")).await;
    assert_eq!(got, at_root);
    // Writes, of the cached resource too, are the root's: every verb through the leaf is
    // answered by the root (here a read-only cache too, whose answer is 405), unchanged.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": {"nodeName": "n1"}});
    for (method, path, ct) in [
        (
            reqwest::Method::POST,
            "/api/v1/namespaces/ns/pods",
            "application/json",
        ),
        (
            reqwest::Method::PUT,
            "/api/v1/namespaces/ns/pods/w",
            "application/json",
        ),
        (
            reqwest::Method::PATCH,
            "/api/v1/namespaces/ns/pods/w?fieldManager=t",
            "application/apply-patch+yaml",
        ),
        (
            reqwest::Method::DELETE,
            "/api/v1/namespaces/ns/pods/w",
            "application/json",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/namespaces/ns/configmaps",
            "application/json",
        ),
        (
            reqwest::Method::DELETE,
            "/api/v1/namespaces/ns/configmaps/c",
            "application/json",
        ),
    ] {
        let mut answers = Vec::new();
        for base in [&leaf_url, &root_url] {
            let r = c
                .request(method.clone(), format!("{base}{path}"))
                .header("Content-Type", ct)
                .body(pod.to_string())
                .send()
                .await
                .unwrap();
            answers.push((r.status(), r.text().await.unwrap()));
        }
        assert_eq!(answers[0], answers[1], "{method} {path}");
        let (code, text) = &answers[0];
        assert_eq!(*code, StatusCode::METHOD_NOT_ALLOWED, "{text}");
        assert!(text.contains("--apiserver-kubeconfig"), "{text}");
    }
    let r = c
        .get(format!("{leaf_url}/api/v1/namespaces/ns/pods/w"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // A subresource is the root's answer, whatever it is.
    let sub = "/api/v1/namespaces/ns/pods/x/status";
    let (a, b) = (
        c.get(format!("{leaf_url}{sub}")).send().await.unwrap(),
        c.get(format!("{root_url}{sub}")).send().await.unwrap(),
    );
    assert_eq!(a.status(), b.status());
    assert_eq!(a.text().await.unwrap(), b.text().await.unwrap());
    // The root goes down: proxied requests are 503 ServiceUnavailable; cached reads still work.
    write(&etcd_url, 1).await;
    let l: Value = get_json(&c, format!("{leaf_url}/api/v1/pods")).await;
    root_proc.kill9();
    let r = c.get(&cms).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("Status"), Some("ServiceUnavailable"))
    );
    let r = c
        .get(format!("{leaf_url}/api/v1/pods?resourceVersion=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cached: Value = r.json().await.unwrap();
    assert_eq!(cached["items"], l["items"]);
    // A consistent GET of one cached object is the root's to answer, as kube-apiserver answers
    // it from etcd (no wait for the root's next bookmark): 503 while it is down; the same GET at
    // resourceVersion=0 is the cache's.
    let one = l["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let ns = l["items"][0]["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_owned();
    let at = format!("{leaf_url}/api/v1/namespaces/{ns}/pods/{one}");
    let r = c.get(&at).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let r = c
        .get(format!("{at}?resourceVersion=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    // A list's items leave their type out, as kube-apiserver's typed lists do; a GET has it.
    let mut item = l["items"][0].clone();
    item["kind"] = json!("Pod");
    item["apiVersion"] = json!("v1");
    assert_eq!(v, item);
}

/// RBAC objects as a JSON file in `dir` (the `--authorization-rbac-dir` format).
fn rbac_file(dir: &Path, name: &str, objects: &[Value]) {
    std::fs::create_dir_all(dir).unwrap();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(dir.join(format!("{name}.json")), list.to_string()).unwrap();
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": rules})
}

fn bind(name: &str, role: &str, subject: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name}, "subjects": [subject],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaf_forwards_its_clients_identity_by_impersonation() {
    let etcd = support::etcd::etcd().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Both: /readyz and /version for everyone, as upstream's system:public-info-viewer.
    let public = [
        cluster_role(
            "public-info",
            json!([{"verbs": ["get"], "nonResourceURLs": ["/readyz", "/livez", "/version"]}]),
        ),
        bind(
            "public-info",
            "public-info",
            json!({"kind": "Group", "name": "system:unauthenticated"}),
        ),
    ];
    // The root: the leaf's identity may follow pods, read secrets, and impersonate; alice may
    // do nothing yet.
    std::fs::write(
        d.join("root-tokens.csv"),
        "leaf-token,leaf-proxy,1\nadmin-token,admin,0,system:masters\nalice-root-token,alice,2\n",
    )
    .unwrap();
    let mut root_rbac = public.to_vec();
    root_rbac.extend([
        cluster_role(
            "leaf",
            json!([
                {"apiGroups": [""], "resources": ["pods", "secrets", "configmaps"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["uids"], "verbs": ["impersonate"]},
                {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/version"]}
            ]),
        ),
        bind(
            "leaf",
            "leaf",
            json!({"kind": "User", "name": "leaf-proxy"}),
        ),
    ]);
    rbac_file(&d.join("root-rbac"), "objects", &root_rbac);
    support::etcd::put_namespaces(&etcd.server.url(), &["ns"]).await;
    let root_port = free_port().unwrap();
    let root_proc = spawn(
        &[
            "--etcd",
            &etcd.server.url(),
            "--token-auth-file",
            d.join("root-tokens.csv").to_str().unwrap(),
            "--authorization-mode",
            "RBAC",
            "--authorization-rbac-dir",
            d.join("root-rbac").to_str().unwrap(),
        ],
        root_port,
    )
    .await;
    // The leaf: caches pods, proxies the rest; alice may read pods and secrets here (the leaf
    // authorizes every request itself, forwarded or not, whatever the upstream enforces).
    std::fs::write(d.join("leaf-tokens.csv"), "alice-token,alice,2,devs\n").unwrap();
    let mut leaf_rbac = public.to_vec();
    leaf_rbac.extend([
        cluster_role(
            "pod-reader",
            json!([
                {"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
            ]),
        ),
        bind(
            "alice-pods",
            "pod-reader",
            json!({"kind": "User", "name": "alice"}),
        ),
    ]);
    rbac_file(&d.join("leaf-rbac"), "objects", &leaf_rbac);
    let kubeconfig = d.join("leaf.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: root\n  cluster:\n    server: {}\n\
             users:\n- name: leaf\n  user:\n    token: leaf-token\ncontexts:\n- name: root\n  context:\n    cluster: root\n    user: leaf\n\
             current-context: root\n",
            root_proc.url
        ),
    )
    .unwrap();
    let leaf_port = free_port().unwrap();
    let leaf_proc = spawn(
        &[
            "--upstream-kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--upstream-context",
            "root",
            "--resources",
            "pods",
            "--token-auth-file",
            d.join("leaf-tokens.csv").to_str().unwrap(),
            "--authorization-mode",
            "RBAC",
            "--authorization-rbac-dir",
            d.join("leaf-rbac").to_str().unwrap(),
        ],
        leaf_port,
    )
    .await;
    let c = Client::new();
    let get = |url: String, token: &'static str| {
        let c = c.clone();
        async move {
            let r = c.get(url).bearer_auth(token).send().await.unwrap();
            let status = r.status();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let secrets = "/api/v1/namespaces/ns/secrets";
    // The leaf's own identity may read secrets at the root...
    let (s, _) = get(format!("{}{secrets}", root_proc.url), "leaf-token").await;
    assert_eq!(s, StatusCode::OK);
    // ...and the leaf lets alice ask, but the root authorizes her as alice: 403, naming her.
    let (s, v) = get(format!("{}{secrets}", leaf_proc.url), "alice-token").await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(
        v["message"],
        r#"secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "ns""#
    );
    // What the leaf answers itself, it authorizes itself.
    let (s, v) = get(
        format!("{}/api/v1/namespaces/ns/pods", leaf_proc.url),
        "alice-token",
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // A client cannot impersonate through the leaf what it may not impersonate itself.
    let r = c
        .get(format!("{}/api/v1/namespaces/ns/pods", leaf_proc.url))
        .bearer_auth("alice-token")
        .header("Impersonate-User", "admin")
        .header("Impersonate-Group", "system:masters")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // Writes of the cached resource carry her identity too: the leaf lets her create pods, the
    // root does not, and says so naming her (the leaf's own identity may not create them either).
    let r = c
        .post(format!("{}/api/v1/namespaces/ns/pods", leaf_proc.url))
        .bearer_auth("alice-token")
        .json(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(
        v["message"],
        r#"pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the namespace "ns""#
    );
    // The root grants alice's group secrets (written into etcd, as kube-apiserver writes RBAC
    // objects); through the leaf she now reads them.
    let grant = [
        cluster_role(
            "secret-reader",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]),
        ),
        bind(
            "devs-secrets",
            "secret-reader",
            json!({"kind": "Group", "name": "devs"}),
        ),
    ];
    for (plural, obj) in [
        ("clusterroles", &grant[0]),
        ("clusterrolebindings", &grant[1]),
    ] {
        put(&etcd.server.url(), plural, obj).await;
    }
    let started = std::time::Instant::now();
    loop {
        let (s, v) = get(format!("{}{secrets}", leaf_proc.url), "alice-token").await;
        if s == StatusCode::OK {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "alice's group grant at the root did not reach her through the leaf within 1 s: {s} {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Her token at the root (where alice is not in devs) still does not read secrets: the leaf
    // passed on the groups it authenticated, not more.
    let (s, _) = get(format!("{}{secrets}", root_proc.url), "alice-root-token").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
}

/// An upstream that answers upgrades only, standing in for a kubelet's exec and port-forward
/// streams (no cluster runs here; the relay under test is byte for byte whatever the protocol):
/// `101 Switching Protocols` with the protocol headers it was asked for, then every byte echoed
/// back in upper case. Anything else is 503. Each upgrade request is recorded.
async fn upgrade_echo_upstream() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use http_body_util::Full;
    use hyper::body::Incoming;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                let record = record.clone();
                async move {
                    let h = |n: &str| {
                        req.headers()
                            .get(n)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned()
                    };
                    let Some(proto) = req.headers().get("upgrade").cloned() else {
                        return Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .status(503)
                                .body(Full::new(bytes::Bytes::from_static(b"no")))
                                .unwrap(),
                        );
                    };
                    record.lock().unwrap().push(format!(
                        "{} {} upgrade={} protocol={}{} impersonate={}",
                        req.method(),
                        req.uri(),
                        h("upgrade"),
                        h("sec-websocket-protocol"),
                        h("x-stream-protocol-version"),
                        h("impersonate-user"),
                    ));
                    let mut res = hyper::Response::builder()
                        .status(101)
                        .header("connection", "Upgrade")
                        .header("upgrade", proto);
                    for name in ["sec-websocket-protocol", "x-stream-protocol-version"] {
                        if let Some(v) = req.headers().get(name) {
                            res = res.header(name, v.clone());
                        }
                    }
                    let on = hyper::upgrade::on(&mut req);
                    tokio::spawn(async move {
                        let mut io = TokioIo::new(on.await.unwrap());
                        let mut buf = [0u8; 1024];
                        loop {
                            match io.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    if io.write_all(&buf[..n].to_ascii_uppercase()).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    });
                    Ok(res.body(Full::new(bytes::Bytes::new())).unwrap())
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (url, seen)
}

#[tokio::test]
async fn the_leaf_relays_exec_and_port_forward_upgrades_both_ways() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let (upstream, seen) = upgrade_echo_upstream().await;
    let port = free_port().unwrap();
    // The leaf never syncs from this upstream (its LIST is 503): it is live, not ready, and
    // proxies all the same.
    let kubeconfig = kubeconfig(dir.path(), &upstream);
    let _leaf = start(
        &[
            "--upstream-kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--upstream-context",
            "root",
            "--resources",
            "pods",
        ],
        port,
        "http",
    );
    let c = Client::new();
    for i in 0.. {
        if let Ok(r) = c.get(format!("{}/livez", _leaf.url)).send().await
            && r.status() == StatusCode::OK
        {
            break;
        }
        assert!(i < 300, "the leaf never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The upstream's 503 comes back at once, as it is (kube-rs's own retries are off): the
    // client retries, not the leaf.
    let started = std::time::Instant::now();
    let r = c
        .get(format!("{}/api/v1/namespaces/ns/pods/p/log", _leaf.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.text().await.unwrap(), "no");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // kubectl exec over WebSocket (1.30+), and its SPDY fallback and port-forward's.
    let cases = [
        (
            "GET /api/v1/namespaces/ns/pods/p/exec?command=sh&stdin=true&stdout=true",
            "websocket",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n",
            "sec-websocket-protocol: v5.channel.k8s.io",
        ),
        (
            "POST /api/v1/namespaces/ns/pods/p/portforward",
            "SPDY/3.1",
            "X-Stream-Protocol-Version: portforward.k8s.io\r\nContent-Length: 0\r\n",
            "x-stream-protocol-version: portforward.k8s.io",
        ),
    ];
    for (line, proto, extra, echoed) in cases {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        tcp.write_all(
            format!(
                "{line} HTTP/1.1\r\nHost: leaf\r\nConnection: Upgrade\r\nUpgrade: {proto}\r\n{extra}\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut b))
                .await
                .expect("the 101 in time")
                .unwrap();
            assert_eq!(n, 1, "the leaf closed before its answer: {head:?}");
            head.push(b[0]);
        }
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 101"), "{head}");
        assert!(
            head.contains(&format!("upgrade: {}", proto.to_ascii_lowercase())),
            "{head}"
        );
        assert!(head.contains(echoed), "{head}");
        // Bytes both ways, more than once, through the same relay.
        for msg in ["hello", "stdin line 2"] {
            tcp.write_all(msg.as_bytes()).await.unwrap();
            let mut back = vec![0u8; msg.len()];
            tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut back))
                .await
                .expect("the echo in time")
                .unwrap();
            assert_eq!(back, msg.to_ascii_uppercase().as_bytes());
        }
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "GET /api/v1/namespaces/ns/pods/p/exec?command=sh&stdin=true&stdout=true upgrade=websocket protocol=v5.channel.k8s.io impersonate=",
            "POST /api/v1/namespaces/ns/pods/p/portforward upgrade=SPDY/3.1 protocol=portforward.k8s.io impersonate=",
        ]
    );
    // After the upgrades, plain requests are proxied as before.
    let r = c
        .get(format!("{}/api/v1/namespaces/ns/pods/p/log", _leaf.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn a_leaf_follows_a_tls_root_with_the_client_certificate_of_its_kubeconfig() {
    let etcd = support::etcd::etcd().await;
    let data = tempfile::tempdir().unwrap();
    support::etcd::put_namespaces(&etcd.server.url(), &["ns"]).await;
    let root_port = free_port().unwrap();
    // The root serves TLS only, and writes an admin kubeconfig (its CA, a client certificate
    // of system:masters) as a cluster's installer would.
    let _root = start(
        &[
            "--local-pki",
            "--etcd",
            &etcd.server.url(),
            "--data-dir",
            data.path().to_str().unwrap(),
        ],
        root_port,
        "https",
    );
    let kubeconfig = data.path().join("admin.kubeconfig");
    for i in 0.. {
        if kubeconfig.exists() {
            break;
        }
        assert!(i < 300, "no admin kubeconfig");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The leaf is plain HTTP itself; it becomes ready only by syncing over the root's TLS.
    let leaf_port = free_port().unwrap();
    let leaf = spawn(
        &[
            "--upstream-kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--resources",
            "pods",
        ],
        leaf_port,
    )
    .await;
    let c = Client::new();
    // Plain HTTP to the root is refused: everything the leaf sees came over TLS.
    assert!(
        c.get(format!("http://127.0.0.1:{root_port}/readyz"))
            .send()
            .await
            .map_or(true, |r| !r.status().is_success())
    );
    let pod = json!({"metadata": {"name": "t", "namespace": "ns"}, "spec": {"nodeName": "n"}});
    put(&etcd.server.url(), "pods", &pod).await;
    // A consistent read on the leaf waits for its watch on the root to bring the pod.
    let got: Value = get_json(&c, format!("{}/api/v1/namespaces/ns/pods/t", leaf.url)).await;
    assert_eq!(got["spec"]["nodeName"], "n", "{got}");
    let list: Value = get_json(
        &c,
        format!("{}/api/v1/pods?fieldSelector=spec.nodeName%3Dn", leaf.url),
    )
    .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn kubectl_reads_through_the_leaf() {
    let etcd = support::etcd::etcd().await;
    let dir = tempfile::tempdir().unwrap();
    let (root_port, leaf_port) = (free_port().unwrap(), free_port().unwrap());
    let root_proc = root(&etcd.server.url(), root_port).await;
    let leaf_proc = leaf(&kubeconfig(dir.path(), &root_proc.url), leaf_port).await;
    let k = Kubectl::new(&leaf_proc.url);
    let etcd_url = etcd.server.url();
    put(
        &etcd_url,
        "pods",
        &json!({"metadata": {"name": "web", "namespace": "default",
            "labels": {"app": "web", "tier": "front"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx"}]}}),
    )
    .await;
    put(
        &etcd_url,
        "configmaps",
        &json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"mode": "fast"}}),
    )
    .await;
    // Reads of the cached pods are the leaf's; configmaps are proxied.
    let out = k
        .ok(&["get", "pods", "-l", "tier=front", "-o", "name"])
        .await;
    assert_eq!(out.trim(), "pod/web");
    let out = k
        .ok(&[
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.mode}",
        ])
        .await;
    assert_eq!(out, "fast");
    // A write goes through the leaf to the root, a read-only cache too here: kubectl shows the
    // root's answer, which says how writes reach kube-apiserver.
    let out = k.run(&["label", "pod", "web", "checked=yes"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("MethodNotAllowed") && err.contains("--apiserver-kubeconfig"),
        "{err}"
    );
    // The root agrees.
    let at_root: Value = get_json(
        &Client::new(),
        format!(
            "{}/api/v1/namespaces/default/configmaps/settings",
            root_proc.url
        ),
    )
    .await;
    assert_eq!(at_root["data"]["mode"], "fast");
}

/// Issue 37, item 2: caches in a tree over different etcds have different resourceVersion
/// spaces. A leaf whose root is replaced, behind the same address, by a root over another etcd
/// (a load balancer moving it) sees another `X-Watchcache-Origin` and starts over: its watchers
/// get 410 and relist, and it serves the new etcd's objects only, never a mixture. The new etcd
/// is ahead, so the leaf's resourceVersion is a valid one there: resuming would be silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_moved_to_a_root_over_another_etcd_starts_over() {
    let (e1, e2) = (support::etcd::etcd().await, support::etcd::etcd().await);
    let (u1, u2) = (e1.server.url(), e2.server.url());
    let port = free_port().unwrap();
    let mut first = root(&u1, port).await;
    support::etcd::put_namespaces(&u2, &["ns"]).await;
    for i in 0..3 {
        write(&u1, i).await;
    }
    for i in 100..140 {
        write(&u2, i).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let leaf = leaf(&kubeconfig(dir.path(), &first.url), free_port().unwrap()).await;
    let c = Client::new();
    // Waits until the leaf lists exactly `want` (it lists none while it cannot answer).
    let holds = async |want: &[String], what: &str| {
        for _ in 0..400 {
            let l: Value = get_json(&c, format!("{}/api/v1/pods", leaf.url)).await;
            let names: Vec<&str> = l["items"].as_array().map_or_else(Vec::new, |items| {
                items
                    .iter()
                    .map(|i| i["metadata"]["name"].as_str().unwrap())
                    .collect()
            });
            if names == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the leaf never held {what}");
    };
    let first_pods: Vec<String> = (0..3).map(|i| format!("p{i:03}")).collect();
    holds(&first_pods, "the first etcd's pods").await;
    let answer = c
        .get(format!("{}/api/v1/pods", leaf.url))
        .send()
        .await
        .unwrap();
    let origin = answer.headers()["x-watchcache-origin"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(origin.len(), 16, "{origin}");
    let list: Value = answer.json().await.unwrap();
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut watch = c
        .get(format!(
            "{}/api/v1/namespaces/ns/pods?watch=1&resourceVersion={from}",
            leaf.url
        ))
        .send()
        .await
        .unwrap()
        .bytes_stream();

    // The first root goes; a root over the other etcd takes its address.
    first.kill9();
    let second = root(&u2, port).await;
    let mut seen = String::new();
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(chunk) = watch.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            if seen.contains(r#""type":"ERROR""#) && seen.ends_with('\n') {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the leaf's watcher was not ended: {seen}");
    assert!(seen.contains(r#""code":410"#), "{seen}");
    assert!(
        !seen.contains("p1"),
        "no event of the other etcd reached it: {seen}"
    );
    let second_pods: Vec<String> = (100..140).map(|i| format!("p{i:03}")).collect();
    holds(&second_pods, "the second etcd's pods alone").await;
    let now = c
        .get(format!("{}/api/v1/pods", leaf.url))
        .send()
        .await
        .unwrap();
    assert_ne!(now.headers()["x-watchcache-origin"], origin.as_str());
    drop(second);
}

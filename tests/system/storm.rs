//! A storm of TLS connections and watch opens against a server over a real etcd, while writes
//! flow (issue 22, "noticed"): the server's own etcd followers must keep following. Before the
//! followers had their own runtime, they shared the server's workers with every handshake and
//! watch open; the storm queued them behind thousands of tasks for seconds, so their etcd
//! watches and idle probes hit their time limits ("watch: timed out", "probe: timed out"), the
//! caches fell behind and, past the grace period, answered 429.
//!
//! What is asserted is availability and correctness, not speed: no follower failed
//! (`watchcache_upstream_failures_total` stays 0 for every cache), every cache is ready after the
//! storm, no storm watch was refused, and watchers opened before the storm saw every write made
//! during it, once, in order.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::sync::watch;

use support::pki::Ca;
use support::server::TestServer;
use watchcache::ResourceDef;
use watchcache_server::{ServerConfig, TlsConfig};

/// The storm: this many TLS HTTP/2 connections opened at once, each opening this many watches at
/// once as a kubelet does (pods of its node, and every pod, configmap and secret, from
/// `resourceVersion=0`, so each open sends initial events).
const CONNECTIONS: usize = 200;
const WATCHES_PER_CONNECTION: usize = 18;
/// Pods seeded before the storm, over this many nodes.
const PODS: usize = 600;
const NODES: usize = 40;
/// Writes made while the storm runs (pods and configmaps alternately), one every `WRITE_EVERY`.
const WRITES: usize = 200;
const WRITE_EVERY: Duration = Duration::from_millis(25);

type Https = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// One HTTP/2 connection's client (the pool of a client holds one h2 connection per host).
fn client(ca: &std::path::Path) -> Https {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http2()
        .build();
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(https)
}

/// What the storm saw.
#[derive(Default)]
struct Storm {
    /// Watches answered 200.
    opened: AtomicUsize,
    /// Watches answered otherwise (429 when a cache was not ready), or failed to connect.
    refused: AtomicUsize,
    /// The first refusal, for the failure message.
    first_refusal: parking_lot::Mutex<Option<String>>,
    /// Bytes of watch events the storm read.
    bytes: AtomicU64,
}

impl Storm {
    fn refuse(&self, why: String) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.first_refusal.lock().get_or_insert(why);
    }
}

/// One storm watch: opened, then read until the storm stops.
async fn storm_watch(c: Https, url: String, storm: Arc<Storm>, mut stop: watch::Receiver<bool>) {
    let req = hyper::Request::get(url).body(Empty::new()).unwrap();
    let resp = tokio::select! {
        r = c.request(req) => r,
        _ = stop.wait_for(|s| *s) => return,
    };
    let mut body = match resp {
        Ok(r) if r.status() == 200 => r.into_body(),
        Ok(r) => {
            let status = r.status();
            let body = r.into_body().collect().await.map(|b| b.to_bytes());
            return storm.refuse(format!("{status}: {body:?}"));
        }
        Err(e) => return storm.refuse(format!("{e:?}")),
    };
    storm.opened.fetch_add(1, Ordering::Relaxed);
    loop {
        tokio::select! {
            f = body.frame() => match f {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        storm.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
                    }
                }
                _ => return,
            },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// The paths a kubelet-like connection watches, from `resourceVersion=0`.
fn storm_paths(conn: usize) -> Vec<String> {
    let node = conn % NODES;
    (0..WATCHES_PER_CONNECTION)
        .map(|w| match w % 4 {
            0 => format!("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-{node}"),
            1 => "/api/v1/pods".to_owned(),
            2 => "/api/v1/configmaps".to_owned(),
            _ => "/api/v1/secrets".to_owned(),
        })
        .map(|p| {
            let sep = if p.contains('?') { '&' } else { '?' };
            format!("{p}{sep}watch=1&resourceVersion=0&allowWatchBookmarks=true")
        })
        .collect()
}

/// What a watch opened before the storm saw: every (name, resourceVersion), in order.
type Seen = Arc<parking_lot::Mutex<Vec<(String, u64)>>>;

/// Opens a watch that records what it sees into `seen` until it ends.
async fn checker(c: Https, url: String, seen: Seen) {
    let req = hyper::Request::get(url).body(Empty::new()).unwrap();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    tokio::spawn(async move {
        let mut buf = Vec::new();
        while let Some(Ok(f)) = body.frame().await {
            let Some(d) = f.data_ref() else { continue };
            buf.extend_from_slice(d);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let ev: serde_json::Value = serde_json::from_slice(&line).unwrap();
                let kind = ev["type"].as_str().unwrap().to_owned();
                if kind == "BOOKMARK" {
                    continue;
                }
                let meta = &ev["object"]["metadata"];
                let rv = meta["resourceVersion"]
                    .as_str()
                    .unwrap_or("0")
                    .parse()
                    .unwrap();
                let name = if kind == "ERROR" {
                    format!("ERROR {ev}")
                } else {
                    meta["name"].as_str().unwrap().to_owned()
                };
                seen.lock().push((name, rv));
            }
        }
    });
}

async fn get_text(c: &Https, url: String) -> (u16, String) {
    let req = hyper::Request::get(url).body(Empty::new()).unwrap();
    let resp = c.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The server's worst scheduling delay while the storm ran: a task on its runtime asking to wake
/// every 50 ms, and how late it woke. Only reported, never asserted: it shows the storm's load.
fn lateness_probe(mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let mut worst = Duration::ZERO;
        loop {
            let asked = Instant::now();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stop.wait_for(|s| *s) => return worst,
            }
            worst = worst.max(asked.elapsed().saturating_sub(Duration::from_millis(50)));
        }
    })
}

/// etcd's worst answer time while the storm ran, asked every 100 ms from a thread of its own:
/// whether etcd itself was slow. Only reported, never asserted.
fn etcd_probe(
    url: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut c = support::etcd::client(&[url]).await;
            let mut worst = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                c.get("/registry/configmaps/", None).await.unwrap();
                worst = worst.max(asked.elapsed());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            worst
        })
    })
}

/// The server (and its followers, and the in-process test) runs on this runtime's two workers,
/// as `watchcache serve` on the project's 2-core machine; the storm's clients run on their own
/// runtime, as other processes would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_tls_connections_and_watch_opens_leaves_the_caches_following_etcd() {
    support::etcd::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let serving = ca.server("serving");
    let defs: Vec<ResourceDef> = ["pods", "configmaps", "secrets", "namespaces", "nodes"]
        .iter()
        .map(|r| ResourceDef::builtin(r).unwrap())
        .collect();
    let resources = defs.len();
    let mut s = TestServer::start_full(
        ServerConfig::default(),
        |_| {},
        defs,
        Some(TlsConfig::new(&serving.cert_file, &serving.key_file)),
        |s| s,
    )
    .await;
    let mut etcd = support::etcd::client(&[s.etcd.server.url()]).await;
    let seeded = support::etcd::seed(&mut etcd, PODS, NODES).await as u64;

    // The storm's clients, on their own runtime.
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let admin = client(&ca.cert_file);
    // Watchers from before the storm, from the seeded revision: they must see every write.
    let seen: BTreeMap<&str, Seen> = [("pods", Seen::default()), ("configmaps", Seen::default())]
        .into_iter()
        .collect();
    for (resource, seen) in &seen {
        let url = format!(
            "{}/api/v1/{resource}?watch=1&resourceVersion={seeded}",
            s.url
        );
        clients
            .spawn(checker(admin.clone(), url, Arc::clone(seen)))
            .await
            .unwrap();
    }

    let storm = Arc::new(Storm::default());
    let (stop, stopped) = watch::channel(false);
    let lateness = lateness_probe(stopped.clone());
    let etcd_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let etcd_worst = etcd_probe(s.etcd.server.url(), Arc::clone(&etcd_stop));
    let started = Instant::now();
    for conn in 0..CONNECTIONS {
        let c = client(&ca.cert_file);
        for path in storm_paths(conn) {
            clients.spawn(storm_watch(
                c.clone(),
                format!("{}{path}", s.url),
                Arc::clone(&storm),
                stopped.clone(),
            ));
        }
    }
    // Writes flow while the storm opens: pods modified and configmaps created, alternately.
    let mut written: BTreeMap<&str, Vec<(String, u64)>> = BTreeMap::new();
    for i in 0..WRITES {
        let (resource, key, name, value) = if i % 2 == 0 {
            let name = format!("pod-{:05}", i % PODS);
            let mut pod: serde_json::Value = serde_json::from_str(&support::pod(
                "ns",
                &name,
                &format!("node-{}", (i % PODS) % NODES),
                &[],
            ))
            .unwrap();
            pod["metadata"]["labels"]["write"] = i.to_string().into();
            ("pods", support::key("ns", &name), name, pod.to_string())
        } else {
            let name = format!("cm-{i:04}");
            let cm = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns"}},"data":{{"i":"{i}"}}}}"#
            );
            (
                "configmaps",
                format!("/registry/configmaps/ns/{name}"),
                name,
                cm,
            )
        };
        let rev = support::etcd::put_rev(&mut etcd, &key, value).await;
        written.entry(resource).or_default().push((name, rev));
        tokio::time::sleep(WRITE_EVERY).await;
    }
    // Every storm watch answered (opened, or refused).
    let deadline = Instant::now() + Duration::from_secs(120);
    let total = CONNECTIONS * WATCHES_PER_CONNECTION;
    while storm.opened.load(Ordering::Relaxed) + storm.refused.load(Ordering::Relaxed) < total
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let storm_took = started.elapsed();
    stop.send_replace(true);
    let worst_lateness = lateness.await.unwrap();
    etcd_stop.store(true, Ordering::Relaxed);
    let etcd_worst = etcd_worst.join().unwrap();
    eprintln!(
        "storm: {} watches on {CONNECTIONS} connections opened in {storm_took:?} ({} refused, {} MB of events read); \
         the server runtime's worst wake-up lateness {worst_lateness:?}; etcd's worst answer {etcd_worst:?}",
        storm.opened.load(Ordering::Relaxed),
        storm.refused.load(Ordering::Relaxed),
        storm.bytes.load(Ordering::Relaxed) >> 20,
    );

    // The followers never failed: no cache fell behind its etcd watch, so none was unavailable.
    let metrics = clients
        .spawn({
            let (c, url) = (admin.clone(), format!("{}/metrics", s.url));
            async move { get_text(&c, url).await }
        })
        .await
        .unwrap();
    assert_eq!(metrics.0, 200);
    let failures: Vec<&str> = metrics
        .1
        .lines()
        .filter(|l| l.starts_with("watchcache_upstream_failures_total{"))
        .collect();
    assert_eq!(
        failures.len(),
        resources,
        "one line per cache: {failures:?}"
    );
    for l in &failures {
        assert!(
            l.ends_with(" 0"),
            "a follower failed during the storm: {l} (all: {failures:?})"
        );
    }
    let readyz = clients
        .spawn({
            let (c, url) = (admin.clone(), format!("{}/readyz", s.url));
            async move { get_text(&c, url).await }
        })
        .await
        .unwrap();
    assert_eq!(readyz.0, 200, "ready after the storm: {}", readyz.1);
    assert_eq!(
        storm.opened.load(Ordering::Relaxed),
        total,
        "every storm watch was served, none refused (first refusal: {:?})",
        storm.first_refusal.lock()
    );

    // Every write reached the watchers from before the storm: once each, in order.
    for (resource, want) in &written {
        let last = want.last().unwrap().1;
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen[resource]
            .lock()
            .last()
            .is_none_or(|(_, rv)| *rv < last)
        {
            assert!(
                Instant::now() < deadline,
                "the {resource} watcher from before the storm saw the last write within 60 s: {:?}",
                seen[resource].lock().last()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            *seen[resource].lock(),
            *want,
            "the {resource} watcher from before the storm saw every write, once, in order"
        );
    }
    clients.shutdown_background();
    s.stop().await;
}

//! Real etcd for the integration tests: started from PATH on free loopback ports with a temporary
//! data dir, stopped on drop (see `watchcache_etcd::LocalEtcd`).
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::{
    Client, EventType as EtcdEventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use tempfile::TempDir;
use watchcache::{CacheConfig, ResourceDef};
use watchcache_etcd::{EtcdCaches, EtcdConfig, LocalEtcd, free_port};

pub struct Etcd {
    pub server: LocalEtcd,
    pub dir: TempDir,
}

pub async fn etcd() -> Etcd {
    etcd_version(EtcdVersion::Debian34).await
}

/// The etcd versions the tests run: Debian's etcd-server package (3.4.23: no working progress
/// requests) and etcd 3.6 built from its Go modules by scripts/k8s-peers (what clusters run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdVersion {
    Debian34,
    V36,
}

/// A single-node etcd of that version on free loopback ports, data in a temp dir, stopped on drop.
pub async fn etcd_version(version: EtcdVersion) -> Etcd {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let server = match version {
        EtcdVersion::Debian34 => LocalEtcd::start(dir.path())
            .await
            .expect("etcd starts (apt-get install -y etcd-server)"),
        EtcdVersion::V36 => LocalEtcd::start_binary(&super::k8s_peers::etcd36_bin(), dir.path())
            .await
            .expect("etcd 3.6 starts"),
    };
    Etcd { server, dir }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

pub async fn client(endpoints: &[String]) -> Client {
    Client::connect(endpoints, None).await.unwrap()
}

/// Config for tests: small pages, quick reconnects.
pub fn config(endpoints: &[String]) -> EtcdConfig {
    let mut c = EtcdConfig::new(endpoints.iter().cloned());
    c.page_size = 3000;
    c.backoff_initial = Duration::from_millis(50);
    c.backoff_max = Duration::from_millis(500);
    c.idle_probe = Duration::from_secs(1);
    c
}

pub async fn pods_from(config: EtcdConfig) -> EtcdCaches {
    let caches = EtcdCaches::connect(
        config,
        vec![ResourceDef::builtin("pods").unwrap()],
        CacheConfig::default(),
    )
    .await
    .unwrap();
    let pods = caches.cache("pods").unwrap();
    tokio::time::timeout(Duration::from_secs(30), pods.wait_ready())
        .await
        .expect("ready in time")
        .unwrap();
    caches
}

/// Writes `n` pods (pod-i on node-(i % nodes)) in transactions of 100.
pub async fn seed(c: &mut Client, n: usize, nodes: usize) -> i64 {
    let mut rev = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|i| {
                let name = format!("pod-{i:05}");
                TxnOp::put(
                    super::key("ns", &name),
                    super::pod("ns", &name, &format!("node-{}", i % nodes), &[]),
                    None,
                )
            })
            .collect();
        rev = c
            .txn(Txn::new().and_then(ops))
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
    }
    rev
}

/// Puts once; returns the revision it was written at.
pub async fn put_rev(c: &mut Client, key: &str, value: impl Into<Vec<u8>>) -> u64 {
    c.put(key, value, None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision() as u64
}

/// Puts with retries (etcd may be restarting); returns the revision.
pub async fn put_retry(c: &mut Client, key: &str, value: String) -> i64 {
    for _ in 0..400 {
        match tokio::time::timeout(
            Duration::from_secs(2),
            c.put(key, value.clone(), Some(PutOptions::new())),
        )
        .await
        {
            Ok(Ok(r)) => return r.header().unwrap().revision(),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("etcd never came back for {key}");
}

/// etcd's own history of the prefix, from a direct watch: (revision, key, is_delete), up to `until`.
pub async fn history(
    c: &mut Client,
    prefix: &str,
    from: i64,
    until: i64,
) -> Vec<(u64, String, bool)> {
    // A balanced client may still hold a refused connection to a member that just restarted.
    let mut attempt = 0;
    let mut stream = loop {
        match c
            .watch(
                prefix,
                Some(WatchOptions::new().with_prefix().with_start_revision(from)),
            )
            .await
        {
            Ok(s) => break s,
            Err(e) if attempt < 50 => {
                attempt += 1;
                tracing::debug!(error = %e, "retrying the history watch");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("history watch: {e}"),
        }
    };
    let mut out = Vec::new();
    while out
        .last()
        .is_none_or(|(r, _, _): &(u64, String, bool)| (*r as i64) < until)
    {
        let resp = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        for ev in resp.events() {
            let kv = ev.kv().unwrap();
            out.push((
                kv.mod_revision() as u64,
                kv.key_str().unwrap().to_owned(),
                ev.event_type() == EtcdEventType::Delete,
            ));
        }
    }
    out
}

pub async fn current_revision(c: &mut Client) -> i64 {
    c.get("x", Some(GetOptions::new().with_count_only()))
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision()
}

/// Namespaces written straight into etcd (as kube-apiserver would have created them), so that
/// a server finds them: a create in a namespace that does not exist is 404, as upstream.
pub async fn put_namespaces(url: &str, names: &[&str]) {
    let mut c = client(&[url.to_owned()]).await;
    for ns in names {
        let value = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "uid": format!("uid-{ns}"),
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        c.put(
            format!("/registry/namespaces/{ns}"),
            value.to_string(),
            None,
        )
        .await
        .unwrap();
    }
}

/// An object as kube-apiserver stores it under `def`'s key: `apiVersion`, `kind`, a `uid` and a
/// `creationTimestamp` filled in when missing, no `resourceVersion`, and a built-in kind in its
/// storage protobuf. Returns the etcd key and the value.
pub fn stored(def: &watchcache::ResourceDef, obj: &serde_json::Value) -> (String, Vec<u8>) {
    let mut obj = obj.clone();
    if obj["apiVersion"].is_null() {
        obj["apiVersion"] = def.api_version().into();
    }
    if obj["kind"].is_null() {
        obj["kind"] = def.kind.clone().into();
    }
    let meta = obj["metadata"].as_object_mut().expect("metadata");
    meta.remove("resourceVersion");
    let name = meta["name"].as_str().expect("metadata.name").to_owned();
    let ns = meta
        .get("namespace")
        .and_then(|n| n.as_str())
        .map(str::to_owned);
    meta.entry("uid")
        .or_insert_with(|| format!("uid-{}-{name}", ns.as_deref().unwrap_or("")).into());
    meta.entry("creationTimestamp")
        .or_insert_with(|| "2026-01-01T00:00:00Z".into());
    let key = def.key_for(ns.as_deref(), &name);
    let value = watchcache_etcd::stored_value(obj.to_string().as_bytes()).expect("storable");
    (key, value)
}

/// `etcd grpc-proxy` in front of one etcd: a connection the tests can cut.
pub struct Proxy {
    pub port: u16,
    target: String,
    dir: TempDir,
    child: Option<Child>,
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        let mut p = Proxy {
            port: free_port().unwrap(),
            target: target.trim_start_matches("http://").to_owned(),
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        p.spawn().await;
        p
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        let addr = format!("127.0.0.1:{}", self.port);
        let child = Command::new("etcd")
            .args([
                "grpc-proxy",
                "start",
                &format!("--endpoints={}", self.target),
                &format!("--listen-addr={addr}"),
            ])
            .arg(format!("--advertise-client-url={addr}"))
            .arg(format!("--data-dir={}", self.dir.path().display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        for _ in 0..100 {
            let probe = async {
                Client::connect([self.url()], None)
                    .await
                    .ok()?
                    .get("probe", None)
                    .await
                    .ok()
            };
            if tokio::time::timeout(Duration::from_millis(500), probe)
                .await
                .ok()
                .flatten()
                .is_some()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("grpc-proxy did not start");
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// etcd's own count of open watchers, from its /metrics endpoint.
/// etcd's watchers once at least one is registered (etcd counts a watch when its create request
/// reaches the server, which can come after the cache reports ready on a busy machine), or 0 after
/// 10 s.
pub async fn etcd_watchers_settled(url: &str) -> u64 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = etcd_watchers(url).await;
        if n > 0 || tokio::time::Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

pub async fn etcd_watchers(url: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .map(|v| v.trim().parse::<f64>().unwrap() as u64)
        .expect("etcd_debugging_mvcc_watcher_total in /metrics")
}

//! An in-process watchcache server on a free loopback port, over a real etcd. The server is
//! read-only (writes are kube-apiserver's): tests put their objects straight into etcd, as
//! kube-apiserver stores them ([`TestServer::seed`]).
#![allow(dead_code)]

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use watchcache::{Cache, CacheConfig, ResourceDef, ResourceVersion};
use watchcache_etcd::{EtcdCaches, EtcdConfig};
use watchcache_server::{Served, Server, ServerConfig, TlsConfig};

use super::etcd::{Etcd, etcd};

/// Serves `server` over plain HTTP on a free loopback port until the returned sender is sent or
/// dropped: its URL, and that sender. For servers of caches the test feeds itself.
pub async fn serve_http(server: Server) -> (String, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.serve(listener, async {
        stopped.await.ok();
    }));
    (url, stop)
}

/// The first `n` lines of the watch at `url` as JSON, read with `client`, or fewer when 10 s
/// pass without one. One chunk can carry several (the server writes the events that are ready
/// together, e.g. the initial-events-end bookmark and a periodic one).
pub async fn watch_lines(client: &reqwest::Client, url: &str, n: usize) -> Vec<serde_json::Value> {
    use futures_util::StreamExt;
    let resp = client.get(url).send().await.unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::OK, "{url}");
    let mut body = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(10), body.next()).await
        else {
            break;
        };
        buf.extend_from_slice(&chunk.unwrap());
        while let Some(i) = buf.iter().position(|b| *b == b'\n')
            && out.len() < n
        {
            let line: Vec<u8> = buf.drain(..=i).collect();
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}

/// What kube-apiserver creates at start; there from the start here too.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Namespaces the tests put objects into, there from the start as in a cluster where someone
/// created them.
pub const FIXTURE_NAMESPACES: [&str; 7] = ["a", "b", "ns", "gz", "other", "team", "demo"];

pub struct TestServer {
    pub url: String,
    pub etcd: Etcd,
    /// The served caches.
    pub caches: Vec<Cache>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(config: ServerConfig) -> TestServer {
        Self::start_with(config, |_| {}).await
    }

    pub async fn start_with(
        config: ServerConfig,
        tune: impl FnOnce(&mut EtcdConfig),
    ) -> TestServer {
        Self::start_with_defs(config, tune, ResourceDef::builtins()).await
    }

    pub async fn start_with_defs(
        config: ServerConfig,
        tune: impl FnOnce(&mut EtcdConfig),
        defs: Vec<ResourceDef>,
    ) -> TestServer {
        Self::start_full(config, tune, defs, None, |s| s).await
    }

    /// A server on TLS (its `url` is `https://`), with these files.
    pub async fn start_tls(config: ServerConfig, tls: TlsConfig) -> TestServer {
        Self::start_full(config, |_| {}, ResourceDef::builtins(), Some(tls), |s| s).await
    }

    /// With the server adjusted before it serves (authentication, a proxy).
    pub async fn start_with_server(
        config: ServerConfig,
        tune: impl FnOnce(&mut EtcdConfig),
        defs: Vec<ResourceDef>,
        adjust: impl FnOnce(Server) -> Server,
    ) -> TestServer {
        Self::start_full(config, tune, defs, None, adjust).await
    }

    /// Everything: definitions, TLS, and the server adjusted before it serves.
    pub async fn start_full(
        config: ServerConfig,
        tune: impl FnOnce(&mut EtcdConfig),
        defs: Vec<ResourceDef>,
        tls: Option<TlsConfig>,
        adjust: impl FnOnce(Server) -> Server,
    ) -> TestServer {
        Self::start_cached(config, CacheConfig::default(), tune, defs, tls, adjust).await
    }

    /// As [`TestServer::start_full`], with the caches' own settings (a short bookmark period).
    pub async fn start_cached(
        config: ServerConfig,
        cache: CacheConfig,
        tune: impl FnOnce(&mut EtcdConfig),
        defs: Vec<ResourceDef>,
        tls: Option<TlsConfig>,
        adjust: impl FnOnce(Server) -> Server,
    ) -> TestServer {
        let etcd = etcd().await;
        let serves_namespaces = defs
            .iter()
            .any(|d| d.group.is_empty() && d.plural == "namespaces");
        let mut ec = super::etcd::config(&[etcd.server.url()]);
        if serves_namespaces {
            super::etcd::put_namespaces(&etcd.server.url(), &SYSTEM_NAMESPACES).await;
            super::etcd::put_namespaces(&etcd.server.url(), &FIXTURE_NAMESPACES).await;
        }
        tune(&mut ec);
        let caches = EtcdCaches::connect(ec, defs, cache).await.unwrap();
        for (_, c) in caches.caches() {
            tokio::time::timeout(Duration::from_secs(30), c.wait_ready())
                .await
                .expect("ready in time")
                .unwrap();
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let served: Vec<Cache> = caches.caches().map(|(_, c)| c.clone()).collect();
        let mut server = adjust(Server::new(config, served.iter().cloned().map(Served::new)));
        if let Some(tls) = tls {
            server = server.with_tls(tls).unwrap();
        }
        let task = tokio::spawn(async move {
            server
                .serve(listener, async { stopped.await.ok().unwrap_or(()) })
                .await
                .unwrap();
            caches.shutdown().await;
        });
        let server = TestServer {
            url,
            etcd,
            caches: served,
            stop: Some(stop),
            task: Some(task),
        };
        if scheme == "http" {
            server.wait_ready_as(None).await;
        }
        server
    }

    /// Waits until `/readyz` answers 200, asked with `token` (a bearer token) or anonymously:
    /// ready as a load balancer sees it, which also waits for the authorizer to have read the
    /// RBAC caches (a request before that is told to retry, 429). Anonymously, a server that
    /// authenticates answers 401 or 403: then its test waits with a token of its own.
    pub async fn wait_ready_as(&self, token: Option<&str>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut req = reqwest::Client::new().get(format!("{}/readyz", self.url));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let status = req.send().await.map(|r| r.status());
            match &status {
                Ok(s) if s.is_success() => return,
                Ok(s) if token.is_none() && matches!(s.as_u16(), 401 | 403) => return,
                _ => {}
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the test server's /readyz not ok within 30 s: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Creates namespaces straight in etcd (as kube-apiserver would have).
    pub async fn namespaces(&self, names: &[&str]) {
        super::etcd::put_namespaces(&self.etcd.server.url(), names).await;
    }

    /// The served cache of a collection path (`/api/v1/namespaces/a/pods`, `/apis/g/v/things`),
    /// and the namespace the path names.
    fn collection(&self, path: &str) -> (&Cache, Option<String>) {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match segs.as_slice() {
            ["api", rest @ ..] => ("", rest),
            ["apis", g, rest @ ..] => (*g, rest),
            _ => panic!("not a resource path: {path}"),
        };
        let (version, ns, plural) = match rest {
            [v, "namespaces", ns, plural] => (*v, Some((*ns).to_owned()), *plural),
            [v, plural] => (*v, None, *plural),
            _ => panic!("not a collection path: {path}"),
        };
        let cache = self
            .caches
            .iter()
            .find(|c| {
                let d = c.definition();
                d.group == group && d.version == version && d.plural == plural
            })
            .unwrap_or_else(|| panic!("not served: {path}"));
        (cache, ns)
    }

    /// Puts an object straight into etcd, as kube-apiserver stores it (this server is
    /// read-only), into the collection at `path` (`/api/v1/namespaces/a/pods`: the namespace
    /// comes from the path); returns it as the server's cache holds it, once it does.
    pub async fn seed(&self, path: &str, obj: &serde_json::Value) -> serde_json::Value {
        let (cache, ns) = self.collection(path);
        let mut obj = obj.clone();
        if let Some(ns) = &ns {
            obj["metadata"]["namespace"] = ns.clone().into();
        }
        let (key, value) = super::etcd::stored(cache.definition(), &obj);
        let mut c = super::etcd::client(&[self.etcd.server.url()]).await;
        c.put(key, value, None).await.unwrap();
        let name = obj["metadata"]["name"].as_str().unwrap();
        let got = cache
            .get(ns.as_deref(), name, ResourceVersion::Unset)
            .await
            .unwrap();
        serde_json::from_slice(got.json()).unwrap()
    }

    /// Deletes an object straight from etcd (`path` as [`TestServer::seed`]'s); returns the
    /// deletion's revision once the server's cache has seen it.
    pub async fn unseed(&self, path: &str, name: &str) -> u64 {
        let (cache, ns) = self.collection(path);
        let key = cache.definition().key_for(ns.as_deref(), name);
        let mut c = super::etcd::client(&[self.etcd.server.url()]).await;
        let rev = c
            .delete(key, None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision() as u64;
        let gone = cache.get(ns.as_deref(), name, ResourceVersion::Unset).await;
        assert!(gone.is_err(), "{name} is gone from the cache");
        rev
    }

    /// Stops the server (ending every watch) and waits for it.
    pub async fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .expect("server stops within 5 s")
                .unwrap();
        }
    }
}

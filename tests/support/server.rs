//! An in-process watchcache server on a free loopback port, over a real etcd.
#![allow(dead_code)]

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use watchcache::etcd::{EtcdCaches, EtcdConfig};
use watchcache::server::{Served, Server, ServerConfig, TlsConfig};
use watchcache::{CacheConfig, ResourceDef};

use super::etcd::{Etcd, etcd};

/// What the server creates at start (as kube-apiserver).
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Namespaces the tests write into, there from the start as in a cluster where someone created
/// them (a create in a namespace that does not exist is 404, as upstream).
pub const FIXTURE_NAMESPACES: [&str; 7] = ["a", "b", "ns", "gz", "other", "team", "demo"];

pub struct TestServer {
    pub url: String,
    pub etcd: Etcd,
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
        let etcd = etcd().await;
        let serves_namespaces = defs
            .iter()
            .any(|d| d.group.is_empty() && d.plural == "namespaces");
        let mut ec = super::etcd::config(&[etcd.server.url()]);
        if serves_namespaces {
            super::etcd::put_namespaces(&etcd.server.url(), &FIXTURE_NAMESPACES).await;
        }
        tune(&mut ec);
        let caches = EtcdCaches::connect(ec, defs, CacheConfig::default())
            .await
            .unwrap();
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
        let mut server = adjust(Server::new(
            config,
            caches
                .caches()
                .map(|(_, c)| Served::new(c.clone(), caches.writes())),
        ));
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
        let s = TestServer {
            url,
            etcd,
            stop: Some(stop),
            task: Some(task),
        };
        // The server creates the system namespaces (`default`, ...) as kube-apiserver does; a
        // test starts once they exist, as a client would wait for /readyz.
        if serves_namespaces {
            s.wait_for_namespaces(&SYSTEM_NAMESPACES).await;
        }
        s
    }

    /// Creates namespaces straight in etcd (as kube-apiserver would have; no authentication
    /// needed), for tests that write into them (a create finds them with a consistent read).
    pub async fn namespaces(&self, names: &[&str]) {
        super::etcd::put_namespaces(&self.etcd.server.url(), names).await;
    }

    async fn wait_for_namespaces(&self, names: &[&str]) {
        let mut c = super::etcd::client(&[self.etcd.server.url()]).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        for ns in names {
            let key = format!("/registry/namespaces/{ns}");
            while c.get(key.as_str(), None).await.unwrap().kvs().is_empty() {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the server created namespace {ns} within 20 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
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

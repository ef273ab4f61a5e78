//! etcd over TLS with client certificates (kube-apiserver's --etcd-cafile, --etcd-certfile,
//! --etcd-keyfile), against a real etcd started with --client-cert-auth: the library and the
//! `watchcache serve` binary.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use support::pki::Ca;
use support::{key, pod};
use watchcache::{CacheConfig, ResourceDef, ResourceVersion, Selection, WatchOptions};
use watchcache_etcd::{EtcdCaches, EtcdConfig, EtcdTls, LocalEtcd, LocalEtcdTls, free_port};

struct Setup {
    etcd: LocalEtcd,
    ca: Ca,
    client: EtcdTls,
    dir: tempfile::TempDir,
}

async fn tls_etcd() -> Setup {
    support::etcd::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "etcd-ca");
    let serving = ca.server("etcd-server");
    let client = ca.client("apiserver-etcd-client", "kube-apiserver-etcd-client", &[]);
    let client = EtcdTls {
        ca_file: Some(ca.cert_file.clone()),
        cert_file: Some(client.cert_file),
        key_file: Some(client.key_file),
    };
    let etcd = LocalEtcd::start_tls(
        &dir.path().join("etcd"),
        LocalEtcdTls {
            cert_file: serving.cert_file,
            key_file: serving.key_file,
            client_ca_file: ca.cert_file.clone(),
            probe: client.clone(),
        },
    )
    .await
    .unwrap();
    Setup {
        etcd,
        ca,
        client,
        dir,
    }
}

async fn tls_client(s: &Setup) -> etcd_client::Client {
    let opts = etcd_client::ConnectOptions::new().with_tls(s.client.options().unwrap());
    etcd_client::Client::connect([s.etcd.url()], Some(opts))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_follows_an_etcd_that_requires_client_certificates() {
    let s = tls_etcd().await;
    assert!(s.etcd.url().starts_with("https://"));
    let mut c = tls_client(&s).await;
    c.put(key("ns", "a"), pod("ns", "a", "n1", &[]), None)
        .await
        .unwrap();

    // Without a client certificate etcd refuses the handshake: never ready.
    let mut no_cert = EtcdConfig::new([s.etcd.url()]);
    no_cert.tls = Some(EtcdTls {
        ca_file: Some(s.ca.cert_file.clone()),
        ..EtcdTls::default()
    });
    let defs = || vec![ResourceDef::builtin("pods").unwrap()];
    if let Ok(caches) = EtcdCaches::connect(no_cert, defs(), CacheConfig::default()).await {
        let pods = caches.cache("pods").unwrap();
        let ready = tokio::time::timeout(Duration::from_secs(3), pods.wait_ready()).await;
        assert!(
            !matches!(ready, Ok(Ok(()))),
            "synced without a client certificate"
        );
        caches.shutdown().await;
    }

    let mut config = EtcdConfig::new([s.etcd.url()]);
    config.tls = Some(s.client.clone());
    let caches = EtcdCaches::connect(config, defs(), CacheConfig::default())
        .await
        .unwrap();
    let cache = caches.cache("pods").unwrap();
    tokio::time::timeout(Duration::from_secs(20), cache.wait_ready())
        .await
        .expect("ready in time")
        .unwrap();
    assert_eq!(cache.stats().objects, 1);
    let mut w = cache
        .watch(WatchOptions::new(
            Selection::all(),
            ResourceVersion::At(cache.resource_version()),
        ))
        .await
        .unwrap();
    c.put(key("ns", "b"), pod("ns", "b", "n1", &[]), None)
        .await
        .unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(ev.object().unwrap().name(), "b");
    caches.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchcache_serve_takes_kube_apiservers_etcd_tls_flags() {
    let s = tls_etcd().await;
    let mut c = tls_client(&s).await;
    c.put(key("ns", "a"), pod("ns", "a", "n1", &[]), None)
        .await
        .unwrap();
    let port = free_port().unwrap();
    let tls = &s.client;
    let mut child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .arg("serve")
        .args(["--etcd", &s.etcd.url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--resources", "pods"])
        .arg("--etcd-cafile")
        .arg(tls.ca_file.as_ref().unwrap())
        .arg("--etcd-certfile")
        .arg(tls.cert_file.as_ref().unwrap())
        .arg("--etcd-keyfile")
        .arg(tls.key_file.as_ref().unwrap())
        .arg("--data-dir")
        .arg(s.dir.path().join("unused"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/api/v1/namespaces/ns/pods/a");
    let mut body = String::new();
    for _ in 0..200 {
        if let Ok(r) = reqwest::get(&url).await
            && r.status() == 200
        {
            body = r.text().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let v: serde_json::Value = serde_json::from_str(&body).expect("the pod, read through TLS etcd");
    assert_eq!(v["metadata"]["name"], "a");
}

//! Client compatibility shown with a real client: the official Python `kubernetes` package,
//! unchanged, against watchcache in its recommended set-up (reading the cluster's etcd, writes
//! forwarded to kube-apiserver with `--apiserver-kubeconfig`). Lists with selectors, watches
//! with a resource_version and bookmarks, discovery and a metadata-only list are watchcache's;
//! creates, updates (with a conflict), patches (merge, strategic, status) and deletes go
//! through it to kube-apiserver. One kube-apiserver for both scripts (each start costs seconds).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::etcd::{EtcdVersion, etcd_version};
use support::kube::{KubeApiserver, Watchcache};
use watchcache_etcd::free_port;

/// Runs a script of tests/python with `url` as its argument; panics with its output unless it
/// prints OK.
async fn run(venv: &Path, script: &str, url: &str) {
    let script = support::repo().join("tests/python").join(script);
    let (python, url) = (venv.join("bin/python"), url.to_owned());
    let out =
        tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(url).output())
            .await
            .unwrap()
            .expect("run the Python script");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_works_unchanged_through_watchcache() {
    let venv: PathBuf = support::venv::venv();
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let kc = kas.admin_kubeconfig.display().to_string();
    // The scripts speak plain HTTP to the development listener; what it forwards goes up with
    // watchcache's own credentials (the admin's here).
    let plain = format!("127.0.0.1:{}", free_port().unwrap());
    let _wc = Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &["--apiserver-kubeconfig", &kc, "--insecure-listen", &plain],
    )
    .await;
    let url = format!("http://{plain}");
    run(&venv, "client_test.py", &url).await;
    // The dynamic client, PATCH (merge, strategic, status), deletecollection and a metadata-only
    // list (issue 12), with the same client, in another namespace's worth of pods.
    run(&venv, "dynamic_test.py", &url).await;
}

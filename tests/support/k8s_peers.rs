//! The real Kubernetes peers the tests run, built from the Go module proxy by
//! `scripts/k8s-peers` into `target/` when missing or stale (a test never skips for want of
//! them): kube-apiserver, kube-controller-manager, kube-scheduler, kubemark, the client-go
//! programs, and etcd 3.6. Needs no watchcache binary, so every test binary can include it.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The Kubernetes version the peers are built at (tests/k8s/go.mod).
pub const K8S_VERSION: &str = "v1.35.4";

/// Runs `scripts/k8s-peers ARGS` once per test process (`once` per step): it builds what is
/// missing or stale and returns at once when everything is there.
fn run_peers(once: &'static OnceLock<()>, args: &[&str]) {
    once.get_or_init(|| {
        let status = Command::new(super::repo().join("scripts/k8s-peers"))
            .args(args)
            .stdin(Stdio::null())
            .status()
            .expect("run scripts/k8s-peers (needs Go 1.26)");
        assert!(
            status.success(),
            "scripts/k8s-peers {args:?} failed ({status}): the peers could not be built"
        );
    });
}

fn build_peers() {
    static BUILT: OnceLock<()> = OnceLock::new();
    run_peers(&BUILT, &[]);
}

/// A Kubernetes binary of [`K8S_VERSION`] (`kube-apiserver`, `kube-controller-manager`,
/// `kube-scheduler`, `kubemark`, `wc-conformance`), built first when needed.
pub fn k8s_bin(name: &str) -> PathBuf {
    build_peers();
    let p = super::repo()
        .join("target/k8s")
        .join(K8S_VERSION)
        .join(name);
    assert!(
        p.exists(),
        "{} is missing after scripts/k8s-peers",
        p.display()
    );
    p
}

/// `wc-shards`, the client-go program of tests/clientgo-shards, built first when needed by
/// `scripts/k8s-peers clientgo` (that step only: the program needs no Kubernetes peer).
pub fn clientgo_shards_bin() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    run_peers(&BUILT, &["clientgo"]);
    let gomod =
        std::fs::read_to_string(super::repo().join("tests/clientgo-shards/go.mod")).unwrap();
    let version = gomod
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/client-go "))
        .expect("tests/clientgo-shards/go.mod requires k8s.io/client-go")
        .trim();
    let p = super::repo()
        .join("target/k8s")
        .join(format!("clientgo-{version}"))
        .join("wc-shards");
    assert!(
        p.exists(),
        "{} is missing after scripts/k8s-peers clientgo",
        p.display()
    );
    p
}

/// The etcd 3.6 server built from tests/etcd36, built first when needed.
pub fn etcd36_bin() -> PathBuf {
    build_peers();
    let gomod = std::fs::read_to_string(super::repo().join("tests/etcd36/go.mod")).unwrap();
    let version = gomod
        .lines()
        .find_map(|l| l.strip_prefix("require go.etcd.io/etcd/server/v3 "))
        .expect("tests/etcd36/go.mod requires go.etcd.io/etcd/server/v3")
        .trim();
    let p = super::repo().join("target/etcd").join(version).join("etcd");
    assert!(
        p.exists(),
        "{} is missing after scripts/k8s-peers",
        p.display()
    );
    p
}

//! The command lines of the Kubernetes peers `watchcache up` runs: etcd 3.6, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kubemark hollow nodes, as kubeadm configures
//! them, reduced to what runs on one machine without a cloud, a container runtime or kube-proxy.
//!
//! Only `std` here: the integration tests include this file (tests/support/kube.rs), so the
//! launcher and the tests run the peers the same way.
#![allow(dead_code)]

use std::path::Path;

/// The service-account issuer of the control plane (kubeadm's).
pub(crate) const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

fn f(p: &Path) -> String {
    p.display().to_string()
}

/// A single-member etcd on loopback, plain HTTP. A restart on other ports is fine: a member's
/// peer URLs are read from its data once it has some, and there is no other member to reach.
pub(crate) fn etcd_args(
    name: &str,
    data_dir: &Path,
    client_port: u16,
    peer_port: u16,
) -> Vec<String> {
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    vec![
        format!("--name={name}"),
        format!("--data-dir={}", f(data_dir)),
        "--logger=zap".into(),
        "--log-level=warn".into(),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={name}={peer}"),
        "--initial-cluster-state=new".into(),
        // Progress notifications every 5 s, as KEP-3157 assumes (etcd's default is 10 min).
        "--experimental-watch-progress-notify-interval=5s".into(),
    ]
}

/// The files kube-apiserver is started with.
pub(crate) struct ApiserverFiles<'a> {
    /// Serving certificate and key (localhost, 127.0.0.1).
    pub serving_cert: &'a Path,
    /// Its key.
    pub serving_key: &'a Path,
    /// The CA of every client certificate.
    pub client_ca: &'a Path,
    /// The service-account signing key.
    pub sa_key: &'a Path,
    /// Its public key.
    pub sa_pub: &'a Path,
    /// The EncryptionConfiguration.
    pub encryption_config: &'a Path,
    /// Where it writes what it generates (`--cert-dir`).
    pub cert_dir: &'a Path,
}

/// kube-apiserver 1.35 on `etcd_url`: what it needs to run here (a serving certificate, a client
/// CA, a service-account key pair and issuer, a service cluster IP range), plus encryption at rest
/// and `Node,RBAC`. No feature gates, no cloud provider, no aggregation layer certificates.
pub(crate) fn kube_apiserver_args(
    files: &ApiserverFiles<'_>,
    etcd_url: &str,
    port: u16,
) -> Vec<String> {
    vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", f(files.cert_dir)),
        format!("--tls-cert-file={}", f(files.serving_cert)),
        format!("--tls-private-key-file={}", f(files.serving_key)),
        format!("--client-ca-file={}", f(files.client_ca)),
        format!("--service-account-key-file={}", f(files.sa_pub)),
        format!("--service-account-signing-key-file={}", f(files.sa_key)),
        format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        "--authorization-mode=Node,RBAC".into(),
        format!(
            "--encryption-provider-config={}",
            f(files.encryption_config)
        ),
        // No cloud, no kube-proxy: nothing to reach pods or nodes on.
        "--enable-admission-plugins=NodeRestriction".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        "--v=1".into(),
    ]
}

/// kube-controller-manager as kubeadm runs it (one service account per controller), leader
/// election off (one replica), serving its own endpoints on `port`.
pub(crate) fn controller_manager_args(
    kubeconfig: &Path,
    port: u16,
    cert_dir: &Path,
    sa_key: &Path,
    root_ca: &Path,
) -> Vec<String> {
    let kc = f(kubeconfig);
    vec![
        format!("--kubeconfig={kc}"),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", f(cert_dir)),
        "--leader-elect=false".into(),
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", f(sa_key)),
        format!("--root-ca-file={}", f(root_ca)),
        "--v=1".into(),
    ]
}

/// kube-scheduler as kubeadm runs it, leader election off.
pub(crate) fn scheduler_args(kubeconfig: &Path, port: u16, cert_dir: &Path) -> Vec<String> {
    let kc = f(kubeconfig);
    vec![
        format!("--kubeconfig={kc}"),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", f(cert_dir)),
        "--leader-elect=false".into(),
        "--v=1".into(),
    ]
}

/// A kubemark hollow node: the real kubelet with a fake runtime and image service (there is no
/// containerd). It makes its root, static-pod and log directories under `TMPDIR`, which the
/// caller sets to the node's own directory.
pub(crate) fn kubemark_args(name: &str, kubeconfig: &Path, kubelet_port: u16) -> Vec<String> {
    vec![
        "--morph=kubelet".into(),
        format!("--name={name}"),
        format!("--kubeconfig={}", f(kubeconfig)),
        format!("--kubelet-port={kubelet_port}"),
        "--kubelet-read-only-port=0".into(),
        "--use-host-image-service=false".into(),
        "--v=1".into(),
    ]
}

//! The two servers the kubelet model measures, started on the run's etcd with the run's PKI and
//! `--authorization-mode=Node,RBAC`: watchcache (`serve`), and kube-apiserver 1.35 with the flags
//! the project's control-plane tests use (`tests/support/kube.rs`), without encryption at rest.

use std::path::Path;
use std::process::{Command, Stdio};

use watchcache_etcd::free_port;

use super::pki::Pki;
use crate::bench::stack::ServerProcess;

/// Which server a side of the run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Side {
    /// watchcache.
    Watchcache,
    /// kube-apiserver 1.35 and its watch cache.
    KubeApiserver,
}

impl Side {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Side::Watchcache => "watchcache",
            Side::KubeApiserver => "kube-apiserver",
        }
    }
}

/// What the watchcache server serves: what the kubelets watch, what the Node authorizer and
/// RBAC read, and the Leases the nodes renew.
const RESOURCES: &str = "pods,nodes,configmaps,secrets,services,endpoints,endpointslices.discovery.k8s.io,\
namespaces,networkpolicies.networking.k8s.io,runtimeclasses.node.k8s.io,csidrivers.storage.k8s.io,\
csinodes.storage.k8s.io,leases.coordination.k8s.io,serviceaccounts,persistentvolumeclaims,persistentvolumes,\
volumeattachments.storage.k8s.io,clusterroles.rbac.authorization.k8s.io,\
clusterrolebindings.rbac.authorization.k8s.io,roles.rbac.authorization.k8s.io,\
rolebindings.rbac.authorization.k8s.io";

/// Starts `side` on `etcd_url`; returns its URL and process (stopped on drop). With
/// `heap_stats`, watchcache counts its heap (`WATCHCACHE_HEAP_STATS=1`, `heap.rs`).
pub(crate) fn start(
    side: Side,
    binary: &Path,
    etcd_url: &str,
    pki: &Pki,
    dir: &Path,
    heap_stats: bool,
) -> Result<(String, ServerProcess), String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let log = dir.join(format!("{}.log", side.name()));
    let process = start_on(
        side,
        binary,
        etcd_url,
        pki,
        dir,
        heap_stats,
        port,
        &[],
        &log,
    )?;
    Ok((format!("https://127.0.0.1:{port}"), process))
}

/// Starts `side` as [`start`] does, on loopback `port`, with `extra` flags, its output in `log`
/// (a replica restarted on its port, with the drain flags).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_on(
    side: Side,
    binary: &Path,
    etcd_url: &str,
    pki: &Pki,
    dir: &Path,
    heap_stats: bool,
    port: u16,
    extra: &[String],
    log: &Path,
) -> Result<ServerProcess, String> {
    let f = |p: &Path| p.display().to_string();
    let mut cmd = Command::new(binary);
    match side {
        Side::Watchcache => {
            cmd.args(["serve", "--etcd", etcd_url])
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .args(["--tls-cert-file", &f(&pki.serving_cert)])
                .args(["--tls-private-key-file", &f(&pki.serving_key)])
                .args(["--client-ca-file", &f(&pki.ca_file)])
                .args(["--authorization-mode", "Node,RBAC"])
                .args(["--resources", RESOURCES])
                .env("RUST_LOG", "warn");
            if heap_stats {
                cmd.env("WATCHCACHE_HEAP_STATS", "1");
            }
        }
        Side::KubeApiserver => {
            cmd.args([
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                // 1.37 refuses a loopback advertise address with the endpoint reconciler; the
                // `kubernetes` Service's endpoints matter to no one here.
                "--endpoint-reconciler-type=none".into(),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", f(&dir.join("certs"))),
                format!("--tls-cert-file={}", f(&pki.serving_cert)),
                format!("--tls-private-key-file={}", f(&pki.serving_key)),
                format!("--client-ca-file={}", f(&pki.ca_file)),
                format!("--service-account-key-file={}", f(&pki.sa_pub)),
                format!("--service-account-signing-key-file={}", f(&pki.sa_key)),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ]);
        }
    }
    cmd.args(extra);
    spawn_logged(&mut cmd, log)
}

/// Starts `cmd` with its output (both streams) in the file `log`; stopped on drop.
pub(crate) fn spawn_logged(cmd: &mut Command, log: &Path) -> Result<ServerProcess, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", cmd.get_program().to_string_lossy()))?;
    Ok(ServerProcess(child))
}

/// The last lines of a side's log, for an error message.
pub(crate) fn log_tail(side: Side, dir: &Path) -> String {
    let text =
        std::fs::read_to_string(dir.join(format!("{}.log", side.name()))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

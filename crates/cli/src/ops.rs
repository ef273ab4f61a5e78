//! What the binary and the load tool (tools/bench, which includes this file) share: the log
//! filter, the stop signals, HAProxy's configuration in front of replicas, a PATH lookup,
//! probes through a kube-rs client, and the admin certificate's parameters.

use std::time::Duration;

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose};
use tracing::{error, info};

/// Silences kube-rs's client, which logs every failed request at ERROR (1 005 lines in 30 s of
/// an upstream API server down): the followers log their failures themselves, throttled, and a
/// failed proxied request is logged where it is answered.
const QUIET_KUBE_CLIENT: &str = "kube_client::client::builder=off";

/// The log filter: RUST_LOG (default `default`), with kube-rs's client silenced unless RUST_LOG
/// names it.
pub(crate) fn log_filter(rust_log: Option<String>, default: &str) -> tracing_subscriber::EnvFilter {
    let given = rust_log.filter(|v| !v.trim().is_empty());
    let spec = match given {
        Some(v) if v.contains("kube_client") => v,
        Some(v) => format!("{v},{QUIET_KUBE_CLIENT}"),
        None => format!("{default},{QUIET_KUBE_CLIENT}"),
    };
    tracing_subscriber::EnvFilter::try_new(&spec)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("info,{QUIET_KUBE_CLIENT}")))
}

/// Until SIGTERM or SIGINT arrives.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM"),
        _ = int.recv() => info!("SIGINT"),
    }
}

/// HAProxy's configuration in front of replicas on loopback `ports` (named `r0`, `r1`, ... in
/// order), listening on `listen`, at most `maxconn` connections: TCP mode (TLS passes through,
/// so each client keeps its certificate), each replica's `/readyz` checked over TLS every
/// 300 ms. Two failed checks take a replica out (600 ms, well inside a 2 s shutdown delay), two
/// passed bring it back. A check may take 2 s: with the default (the interval), a replica busy
/// taking over a drained one's watches answered a check late, was taken out too, and with no
/// replica left the clients' reconnections waited seconds in HAProxy. Connections it holds are
/// left to the replica's drain.
pub(crate) fn haproxy_config(
    listen: &str,
    maxconn: usize,
    ports: impl IntoIterator<Item = u16>,
) -> String {
    let mut out = format!(
        "global\n  maxconn {maxconn}\n\
         defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 1h\n  timeout server 1h\n  \
         retries 3\n  option redispatch\n\
         frontend fe\n  bind {listen}\n  maxconn {maxconn}\n  default_backend be\n\
         backend be\n  balance leastconn\n  timeout check 2s\n  option httpchk GET /readyz\n  \
         http-check expect status 200\n  \
         default-server inter 300ms fall 2 rise 2 check-ssl verify none\n"
    );
    for (i, port) in ports.into_iter().enumerate() {
        out.push_str(&format!("  server r{i} 127.0.0.1:{port} check\n"));
    }
    out
}

/// Whether `name` is an executable file on PATH.
pub(crate) fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
}

/// GET `path` through a kube-rs client: whether it answered 200.
pub(crate) async fn get_ok(client: &kube::Client, path: &str) -> bool {
    let Ok(req) = http::Request::get(path).body(Vec::new()) else {
        return false;
    };
    tokio::time::timeout(Duration::from_secs(5), client.request_text(req))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// How many nodes have condition Ready True.
pub(crate) async fn nodes_ready(client: &kube::Client) -> usize {
    let Ok(req) = http::Request::get("/api/v1/nodes").body(Vec::new()) else {
        return 0;
    };
    let Ok(Ok(text)) = tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await
    else {
        return 0;
    };
    let list: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|n| {
                    n["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
                .count()
        })
        .unwrap_or(0)
}

/// The admin's certificate: `kubernetes-admin` in `system:masters`, for client authentication.
pub(crate) fn admin_params() -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kubernetes-admin");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    Ok(params)
}

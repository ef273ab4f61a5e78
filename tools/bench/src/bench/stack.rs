//! What a mode runs against: etcd (a fresh local one, or the given one emptied) and, for the cache
//! mode, a watchcache server process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use watchcache_etcd::{LocalEtcd, free_port};

use super::http::Http;
use super::{BenchConfig, Mode, TlsMode};

/// etcd and the server for one mode, stopped on drop (the server first).
pub(super) struct Stack {
    pub server: Option<ServerProcess>,
    /// The cache server's URL (cache mode).
    pub server_url: Option<String>,
    pub client: etcd_client::Client,
    pub endpoints: Vec<String>,
    pub local: Option<LocalEtcd>,
    dir: PathBuf,
    /// The server's TLS, when the bench started it with `--local-pki`.
    tls: Option<ClientTls>,
    /// The plain HTTP client (cloned: one pool).
    plain: Http,
}

/// What a client needs to reach a `--local-pki` server: its CA, the admin identity, the ALPN.
struct ClientTls {
    config: Arc<rustls::ClientConfig>,
    mode: TlsMode,
}

impl Stack {
    /// Starts etcd and, for the cache mode, the server: on an empty store, so that idle watchers
    /// are measured before a large sync leaves the allocator holding memory that later allocations
    /// would reuse unseen.
    pub(super) async fn start(cfg: &BenchConfig, mode: Mode) -> Result<Stack, String> {
        Stack::start_fronted(cfg, mode, |etcd| Ok(etcd.to_owned())).await
    }

    /// As [`start`](Stack::start), the server reaching etcd at the URL `front` gives for etcd's
    /// (a proxy in between: `--model catchup`'s partition).
    pub(super) async fn start_fronted(
        cfg: &BenchConfig,
        mode: Mode,
        front: impl FnOnce(&str) -> Result<String, String>,
    ) -> Result<Stack, String> {
        let dir = tempfile_dir(cfg.etcd_data_dir.as_deref())?;
        let mut local = None;
        let endpoints = if cfg.etcd.is_empty() {
            let args: Vec<String> = cfg
                .etcd_snapshot_count
                .map(|n| format!("--snapshot-count={n}"))
                .into_iter()
                .collect();
            let e = LocalEtcd::start_with_args(&dir, &args)
                .await
                .map_err(|e| e.to_string())?;
            let url = e.url();
            local = Some(e);
            vec![url]
        } else {
            cfg.etcd.clone()
        };
        let client = etcd_client::Client::connect(&endpoints, None)
            .await
            .map_err(|e| format!("etcd: {e}"))?;
        if local.is_none() {
            let mut kv = client.kv_client();
            kv.delete(
                "/registry/pods/",
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .map_err(|e| format!("etcd: {e}"))?;
        }
        let base_rev = current_revision(&client).await?;
        let (server_url, server, tls) = match (mode, &cfg.server) {
            (Mode::Cache, Some(url)) => (Some(url.clone()), None, None),
            (Mode::Cache, None) => {
                let etcd = front(&endpoints[0])?;
                let (url, p, tls) = start_server(cfg, &etcd, base_rev, &dir).await?;
                (Some(url), Some(p), tls)
            }
            _ => (None, None, None),
        };
        Ok(Stack {
            server,
            server_url,
            client,
            endpoints,
            local,
            dir,
            tls,
            plain: Http::plain()?,
        })
    }

    /// An HTTP client for the server: plain, or TLS with the local PKI's CA and admin certificate
    /// (offering `h2` and `http/1.1`, or `http/1.1` only, as the run asks). Each client has its own
    /// connections.
    pub(super) fn http_client(&self) -> Http {
        match &self.tls {
            Some(t) => Http::tls(Arc::clone(&t.config), t.mode),
            None => self.plain.clone(),
        }
    }

    pub(super) fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.0.id())
    }

    pub(super) fn etcd_pid(&self) -> Option<u32> {
        self.local.as_ref().and_then(LocalEtcd::pid)
    }

    /// Starts a leaf: a watchcache server following `upstream` (this stack's server, or a proxy in
    /// front of it) as a Kubernetes API server, over plain HTTP and anonymously, as
    /// `scripts/bench-tree` runs one. Returns once the leaf's pods cache has reached `rev`.
    pub(super) async fn start_leaf(
        &self,
        cfg: &BenchConfig,
        upstream: &str,
        rev: u64,
        wire: super::WatchWire,
    ) -> Result<(String, ServerProcess), String> {
        let kubeconfig = self.leaf_kubeconfig(upstream)?;
        let port = free_port().map_err(|e| e.to_string())?;
        let url = format!("http://127.0.0.1:{port}");
        let wire = match wire {
            super::WatchWire::Json => "json",
            super::WatchWire::Protobuf => "auto",
        };
        let leaf = spawn_serve(
            cfg,
            port,
            [
                "--upstream-kubeconfig".into(),
                kubeconfig.into_os_string(),
                "--upstream-watch-wire".into(),
                wire.into(),
            ],
        )?;
        wait_for_revision(&self.plain, &url, rev).await?;
        Ok((url, leaf))
    }

    /// A kubeconfig for `upstream` over plain HTTP, anonymous, in the stack's directory.
    pub(super) fn leaf_kubeconfig(&self, upstream: &str) -> Result<PathBuf, String> {
        let kubeconfig = self.dir.join("leaf.kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters: [{{name: root, cluster: {{server: \"{upstream}\"}}}}]\n\
                 users: [{{name: anonymous, user: {{}}}}]\n\
                 contexts: [{{name: root, context: {{cluster: root, user: anonymous}}}}]\n\
                 current-context: root\n"
            ),
        )
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
        Ok(kubeconfig)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.server.take();
        self.local.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A watchcache server process, stopped with SIGTERM on drop.
pub(super) struct ServerProcess(pub Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Already ended and reaped (a replica the rollout stopped): its pid may be another
        // process's by now.
        if matches!(self.0.try_wait(), Ok(Some(_))) {
            return;
        }
        let stopped = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

async fn start_server(
    cfg: &BenchConfig,
    etcd_url: &str,
    from_rev: u64,
    dir: &Path,
) -> Result<(String, ServerProcess, Option<ClientTls>), String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{port}");
    let server_dir = dir.join("server");
    let mut source: Vec<OsString> = vec!["--etcd".into(), etcd_url.into()];
    if cfg.tls.is_some() {
        source.extend([
            "--local-pki".into(),
            "--data-dir".into(),
            server_dir.clone().into(),
        ]);
    }
    let server = spawn_serve(cfg, port, source)?;
    let tls = match cfg.tls {
        Some(mode) => Some(client_tls(&server_dir.join("pki"), mode).await?),
        None => None,
    };
    let client = match &tls {
        Some(t) => Http::tls(Arc::clone(&t.config), t.mode),
        None => Http::plain()?,
    };
    wait_for_revision(&client, &url, from_rev).await?;
    Ok((url, server, tls))
}

/// Starts `watchcache serve` for the pods on loopback `port`, with room for twice the run's
/// watchers, reading from `source` (its upstream's flags, and any TLS ones).
fn spawn_serve(
    cfg: &BenchConfig,
    port: u16,
    source: impl IntoIterator<Item = OsString>,
) -> Result<ServerProcess, String> {
    Command::new(&cfg.server_binary)
        .arg("serve")
        .args(source)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--resources",
            "pods",
            "--max-watchers",
            &(2 * (cfg.watchers + cfg.unrouted) + 100).to_string(),
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map(ServerProcess)
        .map_err(|e| format!("cannot start {}: {e}", cfg.server_binary.display()))
}

/// The client side of the local PKI the server makes at start (waited for).
async fn client_tls(pki: &Path, mode: TlsMode) -> Result<ClientTls, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let ca = pki.join("ca.crt");
    for _ in 0..600 {
        if ca.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = |e: &dyn std::fmt::Display| format!("local PKI in {}: {e}", pki.display());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&ca).map_err(|e| err(&e))? {
        roots.add(c.map_err(|e| err(&e))?).map_err(|e| err(&e))?;
    }
    let certs = CertificateDer::pem_file_iter(pki.join("admin.crt"))
        .map_err(|e| err(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(&e))?;
    let key = PrivateKeyDer::from_pem_file(pki.join("admin.key")).map_err(|e| err(&e))?;
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| err(&e))?
    .with_root_certificates(roots)
    .with_client_auth_cert(certs, key)
    .map_err(|e| err(&e))?;
    config.alpn_protocols = match mode {
        TlsMode::H2 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        TlsMode::Http1 => vec![b"http/1.1".to_vec()],
    };
    Ok(ClientTls {
        config: Arc::new(config),
        mode,
    })
}

/// Waits until the server's pods cache has reached `rev`.
pub(super) async fn wait_for_revision(client: &Http, url: &str, rev: u64) -> Result<(), String> {
    let probe = format!(
        "{url}/api/v1/pods?resourceVersion={rev}&resourceVersionMatch=NotOlderThan&limit=1"
    );
    for _ in 0..600 {
        if client.text(&probe).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "the watchcache server did not reach revision {rev} within 60 s"
    ))
}

/// The server's `watchcache_connections_total`, as `transport protocol count` items.
pub(super) async fn connections(stack: &Stack, url: &str) -> Option<String> {
    let text = stack
        .http_client()
        .text(&format!("{url}/metrics"))
        .await
        .ok()?;
    let items: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let labels = l.strip_prefix("watchcache_connections_total{")?;
            let (labels, count) = labels.split_once("} ")?;
            let value = |k: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(k)?.strip_prefix("=\""))
                    .map(|v| v.trim_end_matches('"').to_owned())
            };
            Some(format!(
                "{} {} {}",
                value("transport")?,
                value("protocol")?,
                count.trim()
            ))
        })
        .collect();
    Some(items.join(", "))
}

/// Watches open on etcd (`etcd_debugging_mvcc_watcher_total`).
pub(super) async fn etcd_watch_count(url: &str) -> Option<u64> {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

pub(super) async fn current_revision(client: &etcd_client::Client) -> Result<u64, String> {
    let mut kv = client.kv_client();
    let r = kv
        .get("/", Some(etcd_client::GetOptions::new().with_count_only()))
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    Ok(r.header().map_or(0, |h| h.revision() as u64))
}

fn tempfile_dir(base: Option<&std::path::Path>) -> Result<PathBuf, String> {
    let base = base.map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
    let dir = base.join(format!(
        "watchcache-bench-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

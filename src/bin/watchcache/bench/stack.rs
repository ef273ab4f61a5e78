//! What a mode runs against: etcd (a fresh local one, or the given one emptied) and, for the cache
//! mode, a watchcache server process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use watchcache::etcd::{LocalEtcd, free_port};

use super::{BenchConfig, Mode};

/// etcd and the server for one mode, stopped on drop (the server first).
pub struct Stack {
    pub server: Option<ServerProcess>,
    /// The cache server's URL (cache mode).
    pub server_url: Option<String>,
    pub client: etcd_client::Client,
    pub endpoints: Vec<String>,
    pub local: Option<LocalEtcd>,
    dir: PathBuf,
}

impl Stack {
    /// Starts etcd and, for the cache mode, the server: on an empty store, so that idle watchers
    /// are measured before a large sync leaves the allocator holding memory that later allocations
    /// would reuse unseen.
    pub async fn start(cfg: &BenchConfig, mode: Mode) -> Result<Stack, String> {
        let dir = tempfile_dir(cfg.etcd_data_dir.as_deref())?;
        let mut local = None;
        let endpoints = if cfg.etcd.is_empty() {
            let e = LocalEtcd::start(&dir).await.map_err(|e| e.to_string())?;
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
        let (server_url, server) = match (mode, &cfg.server) {
            (Mode::Cache, Some(url)) => (Some(url.clone()), None),
            (Mode::Cache, None) => {
                let (url, p) = start_server(cfg, &endpoints[0], base_rev).await?;
                (Some(url), Some(p))
            }
            _ => (None, None),
        };
        Ok(Stack {
            server,
            server_url,
            client,
            endpoints,
            local,
            dir,
        })
    }

    pub fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.0.id())
    }

    pub fn etcd_pid(&self) -> Option<u32> {
        self.local.as_ref().and_then(LocalEtcd::pid)
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
pub struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
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
) -> Result<(String, ServerProcess), String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let url = format!("http://127.0.0.1:{port}");
    let child = Command::new(&cfg.server_binary)
        .args([
            "serve",
            "--etcd",
            etcd_url,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--resources",
            "pods",
        ])
        .args([
            "--max-watchers",
            &(2 * (cfg.watchers + cfg.unrouted) + 100).to_string(),
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", cfg.server_binary.display()))?;
    let server = ServerProcess(child);
    wait_for_revision(&url, from_rev).await?;
    Ok((url, server))
}

/// Waits until the server's pods cache has reached `rev`.
pub async fn wait_for_revision(url: &str, rev: u64) -> Result<(), String> {
    let client = reqwest::Client::new();
    let probe = format!(
        "{url}/api/v1/pods?resourceVersion={rev}&resourceVersionMatch=NotOlderThan&limit=1"
    );
    for _ in 0..600 {
        if client
            .get(&probe)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "the watchcache server did not reach revision {rev} within 60 s"
    ))
}

/// Watches open on etcd (`etcd_debugging_mvcc_watcher_total`).
pub async fn etcd_watch_count(url: &str) -> Option<u64> {
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

pub async fn current_revision(client: &etcd_client::Client) -> Result<u64, String> {
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

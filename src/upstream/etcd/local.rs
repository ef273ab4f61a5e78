//! A local etcd process (the `etcd` binary from PATH, e.g. Debian's `etcd-server`, or a given
//! one) on loopback ports: the server's embedded default and the test suite's real etcd. Stopped
//! on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tracing::{debug, info};

/// Why a local etcd could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalEtcdError {
    /// The binary could not be run.
    #[error("cannot run `{binary}` (install it with `apt-get install -y etcd-server`): {source}")]
    Spawn {
        /// The binary that was tried.
        binary: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It started but never became healthy.
    #[error("etcd at {url} did not become healthy within {waited:?}; its log is {log}")]
    NotHealthy {
        /// The client URL.
        url: String,
        /// How long we waited.
        waited: Duration,
        /// Where its output went.
        log: String,
    },
    /// A free port or the data directory could not be had.
    #[error("cannot prepare etcd: {0}")]
    Setup(#[from] std::io::Error),
}

/// Serving TLS of a local etcd, with client-certificate authentication (`--client-cert-auth`).
#[derive(Debug, Clone)]
pub struct LocalEtcdTls {
    /// etcd's serving certificate (PEM), valid for 127.0.0.1.
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// The CA etcd requires client certificates to be signed by (`--trusted-ca-file`).
    pub client_ca_file: PathBuf,
    /// What the health probe presents: a client certificate and the CA of etcd's certificate.
    pub probe: crate::upstream::etcd::EtcdTls,
}

/// One member of a local etcd (a single node, or a member of a local cluster).
#[derive(Debug)]
pub struct LocalEtcd {
    binary: PathBuf,
    tls: Option<LocalEtcdTls>,
    name: String,
    data_dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    initial_cluster: String,
    /// Flags passed after the ones this type sets (see [`LocalEtcd::start_with_args`]).
    extra_args: Vec<String>,
    child: Option<Child>,
}

/// A free TCP port below the ephemeral range (bound on every address, then released).
pub fn free_port() -> std::io::Result<u16> {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    // Not the kernel's port 0: that draws from the ephemeral range, which outgoing connections
    // draw from too, so a port found free that way can be taken by some connect() before the
    // server binds it (seen with 50 kubelets starting at once). Below that range only listeners
    // take ports; each process walks the span from its own random point, one step per call.
    const LOW: u32 = 15_000;
    const SPAN: u32 = 17_000; // up to 31 999, under Linux's default ephemeral range (32 768)
    const STEP: u32 = 7_919; // prime, coprime with SPAN: the walk visits every port once
    static START: OnceLock<u32> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = *START.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        (std::process::id().wrapping_mul(2_654_435_761) ^ nanos) % SPAN
    });
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port =
            u16::try_from(LOW + (start + n.wrapping_mul(STEP) % SPAN) % SPAN).unwrap_or(u16::MAX);
        // Free on every address: some servers (kubelets) bind the wildcard address.
        if TcpListener::bind(("0.0.0.0", port)).is_ok()
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return Ok(port);
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl LocalEtcd {
    /// Starts a single-node etcd with its data under `data_dir`, on free loopback ports, and waits
    /// until it answers.
    ///
    /// # Errors
    /// [`LocalEtcdError`] when the binary is missing or the server does not come up.
    pub async fn start(data_dir: &Path) -> Result<LocalEtcd, LocalEtcdError> {
        let (client_port, peer_port) = (free_port()?, free_port()?);
        Self::start_on(data_dir, client_port, peer_port).await
    }

    /// Like [`start`](LocalEtcd::start), with `args` added to etcd's command line after the
    /// flags this type sets (etcd takes the last of a repeated flag). For benches that tune a part
    /// of etcd not under test, e.g. `--snapshot-count`.
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn start_with_args(
        data_dir: &Path,
        args: &[String],
    ) -> Result<LocalEtcd, LocalEtcdError> {
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let mut e = Self::unstarted(data_dir, client_port, peer_port);
        e.extra_args = args.to_vec();
        e.launch().await
    }

    /// Like [`start`](LocalEtcd::start), running `binary` instead of `etcd` from PATH (another
    /// etcd version; it must take etcd 3.4's flags).
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn start_binary(binary: &Path, data_dir: &Path) -> Result<LocalEtcd, LocalEtcdError> {
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let mut e = Self::unstarted(data_dir, client_port, peer_port);
        e.binary = binary.to_owned();
        e.launch().await
    }

    /// Spawns the configured etcd and waits until it answers.
    async fn launch(mut self) -> Result<LocalEtcd, LocalEtcdError> {
        self.spawn()?;
        self.wait_healthy(Duration::from_secs(20)).await?;
        Ok(self)
    }

    fn unstarted(data_dir: &Path, client_port: u16, peer_port: u16) -> LocalEtcd {
        let name = "watchcache".to_owned();
        LocalEtcd {
            binary: PathBuf::from("etcd"),
            tls: None,
            initial_cluster: format!("{name}=http://127.0.0.1:{peer_port}"),
            name,
            data_dir: data_dir.to_owned(),
            client_port,
            peer_port,
            extra_args: Vec::new(),
            child: None,
        }
    }

    /// Like [`start`](LocalEtcd::start), on given ports.
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn start_on(
        data_dir: &Path,
        client_port: u16,
        peer_port: u16,
    ) -> Result<LocalEtcd, LocalEtcdError> {
        Self::unstarted(data_dir, client_port, peer_port)
            .launch()
            .await
    }

    /// Starts a single-node etcd that serves TLS only and requires client certificates, on free
    /// loopback ports; its [`url`](LocalEtcd::url) is `https://`.
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn start_tls(
        data_dir: &Path,
        tls: LocalEtcdTls,
    ) -> Result<LocalEtcd, LocalEtcdError> {
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let mut e = Self::unstarted(data_dir, client_port, peer_port);
        e.tls = Some(tls);
        e.launch().await
    }

    /// Starts an `n`-member cluster on loopback, data under `base_dir/member-i`.
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn cluster(base_dir: &Path, n: usize) -> Result<Vec<LocalEtcd>, LocalEtcdError> {
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            members.push(LocalEtcd {
                binary: PathBuf::from("etcd"),
                tls: None,
                name: format!("m{i}"),
                data_dir: base_dir.join(format!("member-{i}")),
                client_port: free_port()?,
                peer_port: free_port()?,
                initial_cluster: String::new(),
                extra_args: Vec::new(),
                child: None,
            });
        }
        let initial: Vec<String> = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        for m in &mut members {
            m.initial_cluster = initial.join(",");
            m.spawn()?;
        }
        for m in &members {
            m.wait_healthy(Duration::from_secs(30)).await?;
        }
        Ok(members)
    }

    fn spawn(&mut self) -> Result<(), LocalEtcdError> {
        std::fs::create_dir_all(&self.data_dir)?;
        let log = std::fs::File::create(self.log_path())?;
        let p = self.peer_port;
        let url = self.url();
        let mut cmd = Command::new(&self.binary);
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.cert_file)
                .arg("--key-file")
                .arg(&tls.key_file)
                .arg("--trusted-ca-file")
                .arg(&tls.client_ca_file)
                .arg("--client-cert-auth");
        }
        let child = cmd
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.data_dir.join("data"))
            .args(["--logger=zap", "--log-level=warn"])
            .args(["--listen-client-urls", &url])
            .args(["--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{p}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{p}"),
            ])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            // Periodic progress notifications every 5 s, as KEP-3157 assumes (etcd's default is 10 min).
            .arg("--experimental-watch-progress-notify-interval=5s")
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|source| LocalEtcdError::Spawn {
                binary: self.binary.display().to_string(),
                source,
            })?;
        info!(name = %self.name, url = %self.url(), data_dir = %self.data_dir.display(), pid = child.id(), "started etcd");
        self.child = Some(child);
        Ok(())
    }

    async fn wait_healthy(&self, limit: Duration) -> Result<(), LocalEtcdError> {
        let start = Instant::now();
        let url = self.url();
        while start.elapsed() < limit {
            let probe = async {
                let opts = match &self.tls {
                    Some(tls) => {
                        Some(etcd_client::ConnectOptions::new().with_tls(tls.probe.options().ok()?))
                    }
                    None => None,
                };
                let mut c = etcd_client::Client::connect([url.as_str()], opts)
                    .await
                    .ok()?;
                c.get("health-probe", None).await.ok()
            };
            if tokio::time::timeout(Duration::from_secs(1), probe)
                .await
                .ok()
                .flatten()
                .is_some()
            {
                debug!(%url, waited = ?start.elapsed(), "etcd healthy");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(LocalEtcdError::NotHealthy {
            url,
            waited: limit,
            log: self.log_path().display().to_string(),
        })
    }

    fn log_path(&self) -> PathBuf {
        self.data_dir.join("etcd.log")
    }

    /// The client URL, e.g. `http://127.0.0.1:23790` (`https://` when serving TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the process with SIGKILL (no clean shutdown) and waits for it to exit.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Err(e) = c.kill() {
                debug!(error = %e, "etcd already gone");
            }
            if let Err(e) = c.wait() {
                debug!(error = %e, "waiting for etcd");
            }
        }
    }

    /// Restarts a killed member on the same ports and data dir, and waits until it answers (for a
    /// cluster member: until the cluster has quorum again).
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn restart(&mut self) -> Result<(), LocalEtcdError> {
        self.kill9();
        self.spawn()?;
        self.wait_healthy(Duration::from_secs(30)).await
    }

    /// Kills the member, deletes its data and starts it again on the same ports: an etcd wiped (or
    /// replaced by an empty one) behind the same URL, whose revisions start again from 1.
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn restart_empty(&mut self) -> Result<(), LocalEtcdError> {
        self.kill9();
        match std::fs::remove_dir_all(self.data_dir.join("data")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        self.spawn()?;
        self.wait_healthy(Duration::from_secs(30)).await
    }

    /// Stops the process with SIGTERM and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id().to_string();
            let terminated = Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .is_ok_and(|s| s.success());
            if !terminated {
                let _killed = c.kill();
            }
            match c.wait() {
                Ok(status) => info!(name = %self.name, %status, "etcd stopped"),
                Err(e) => debug!(error = %e, "waiting for etcd"),
            }
        }
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
        for p in ports {
            assert!((15_000..32_000).contains(&p), "{p}");
            TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
    }
}

//! A local etcd process (the `etcd` binary from PATH, e.g. Debian's `etcd-server`, or a given
//! one) on loopback ports: the server's embedded default and the test suite's real etcd. Stopped
//! on drop.
//!
//! ## It is this process's own etcd, or the start fails
//! An etcd that cannot bind its ports exits, and whatever else holds them would answer in its
//! place (another watchcache's etcd: its data served as ours). So a start
//! - refuses ports already bound, naming them ([`LocalEtcdError::PortInUse`]); on ports it
//!   found free itself it tries other free ones first (another process may have bound one in
//!   between), up to five times;
//! - fails when the child exits before it answers ([`LocalEtcdError::Exited`], with its log's
//!   last line);
//! - checks the member that answers: its name is the one given to the child, unique per data
//!   dir (`<data-dir>/etcd-name`, also the cluster token, so cluster IDs differ), and on data
//!   kept from an earlier start its cluster ID is the one recorded then
//!   (`<data-dir>/etcd-cluster-id`) ([`LocalEtcdError::NotOurs`]).
//!
//! The child is run through util-linux's `setpriv --pdeathsig KILL` (which execs etcd: the pid
//! is etcd's), so it is killed when its parent dies, `kill -9` included, and no orphan holds the
//! ports and data dir at the next start. The signal follows the *thread* that spawned it: start
//! and restart a `LocalEtcd` from a thread that outlives it (the main thread, a runtime's worker).
//! Without `setpriv` on PATH the child is run directly, and a warning says it would outlive a
//! killed parent.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

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
    /// A port the etcd is to listen on is taken (by another etcd, perhaps another watchcache's).
    #[error("the local etcd's {role} port {addr} is in use: {source}")]
    PortInUse {
        /// `client` or `peer`.
        role: &'static str,
        /// The address, e.g. `127.0.0.1:23790`.
        addr: String,
        /// The bind error.
        #[source]
        source: std::io::Error,
    },
    /// The process exited before it answered.
    #[error("etcd exited during its start ({status}): \"{last_line}\"; its log is {log}")]
    Exited {
        /// How it exited.
        status: String,
        /// The last error line of its log (etcd's reason, e.g. a bind failure), else its last.
        last_line: String,
        /// Where its output went.
        log: String,
    },
    /// What answers on the client URL is not the member this process started.
    #[error("the etcd answering at {url} is not the one started here: {what}")]
    NotOurs {
        /// The client URL.
        url: String,
        /// What differs.
        what: String,
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
    pub probe: crate::EtcdTls,
}

/// One member of a local etcd (a single node, or a member of a local cluster).
#[derive(Debug)]
pub struct LocalEtcd {
    binary: PathBuf,
    tls: Option<LocalEtcdTls>,
    /// Empty until the first spawn of a single node, which reads (or makes) the data dir's.
    name: String,
    data_dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    initial_cluster: String,
    /// `--initial-cluster-token`: the node's name, or one shared by a cluster's members.
    token: String,
    /// Flags passed after the ones this type sets (see [`LocalEtcd::start_with_args`]).
    extra_args: Vec<String>,
    child: Option<Child>,
    /// Whether the last spawn found no data: a cluster ID is recorded, not checked.
    fresh: bool,
}

/// Where a data dir's member name is kept.
const NAME_FILE: &str = "etcd-name";
/// Where the cluster ID of a data dir's data is recorded.
const CLUSTER_ID_FILE: &str = "etcd-cluster-id";

/// The member name of a single node's data dir: the one recorded there, else `watchcache` for
/// data made before names were recorded, else a new one (recorded).
fn member_name(data_dir: &Path) -> std::io::Result<String> {
    let file = data_dir.join(NAME_FILE);
    match std::fs::read_to_string(&file) {
        Ok(n) if !n.trim().is_empty() => return Ok(n.trim().to_owned()),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let name = if data_dir.join("data").join("member").exists() {
        "watchcache".to_owned()
    } else {
        format!("watchcache-{:016x}", fastrand_u64())
    };
    std::fs::write(&file, format!("{name}\n"))?;
    Ok(name)
}

/// 64 random bits without a dependency: the standard hasher's per-process random keys, mixed
/// with the time and pid.
fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// `binary` as the path that will run: looked up on PATH when it names no directory. Checked
/// here because `setpriv` would otherwise report a missing etcd only in its exit status.
fn resolve(binary: &Path) -> std::io::Result<PathBuf> {
    if binary.components().count() > 1 {
        return std::fs::metadata(binary).map(|_| binary.to_owned());
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(binary))
        .find(|p| p.is_file())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "not found on PATH"))
}

/// util-linux's `setpriv`, when on PATH (looked up once).
fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            let found = resolve(Path::new("setpriv")).ok();
            if found.is_none() {
                warn!("setpriv (util-linux) is not on PATH: a local etcd outlives a killed parent");
            }
            found
        })
        .as_deref()
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
        Self::launch_on_free_ports(|c, p| Self::unstarted(data_dir, c, p)).await
    }

    /// Launches `make(client_port, peer_port)` on free ports, on others when one was taken
    /// between being found free and being checked (another process's listener): a few times,
    /// then the last error.
    async fn launch_on_free_ports(
        make: impl Fn(u16, u16) -> LocalEtcd,
    ) -> Result<LocalEtcd, LocalEtcdError> {
        let mut tries = 0;
        loop {
            let (client_port, peer_port) = (free_port()?, free_port()?);
            match make(client_port, peer_port).launch().await {
                Err(LocalEtcdError::PortInUse { .. }) if tries < 4 => tries += 1,
                other => return other,
            }
        }
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
        Self::launch_on_free_ports(|c, p| {
            let mut e = Self::unstarted(data_dir, c, p);
            e.extra_args = args.to_vec();
            e
        })
        .await
    }

    /// Like [`start`](LocalEtcd::start), running `binary` instead of `etcd` from PATH (another
    /// etcd version; it must take etcd 3.4's flags).
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn start_binary(binary: &Path, data_dir: &Path) -> Result<LocalEtcd, LocalEtcdError> {
        Self::launch_on_free_ports(|c, p| {
            let mut e = Self::unstarted(data_dir, c, p);
            e.binary = binary.to_owned();
            e
        })
        .await
    }

    /// Spawns the configured etcd and waits until it answers.
    async fn launch(mut self) -> Result<LocalEtcd, LocalEtcdError> {
        self.spawn()?;
        self.wait_healthy(Duration::from_secs(20)).await?;
        Ok(self)
    }

    fn unstarted(data_dir: &Path, client_port: u16, peer_port: u16) -> LocalEtcd {
        LocalEtcd {
            binary: PathBuf::from("etcd"),
            tls: None,
            initial_cluster: String::new(),
            token: String::new(),
            name: String::new(),
            data_dir: data_dir.to_owned(),
            client_port,
            peer_port,
            extra_args: Vec::new(),
            child: None,
            fresh: true,
        }
    }

    /// Like [`start`](LocalEtcd::start), on given ports (both must be free:
    /// [`LocalEtcdError::PortInUse`] otherwise).
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
        Self::launch_on_free_ports(|c, p| {
            let mut e = Self::unstarted(data_dir, c, p);
            e.tls = Some(tls.clone());
            e
        })
        .await
    }

    /// Starts an `n`-member cluster on loopback, data under `base_dir/member-i`.
    ///
    /// # Errors
    /// [`LocalEtcdError`].
    pub async fn cluster(base_dir: &Path, n: usize) -> Result<Vec<LocalEtcd>, LocalEtcdError> {
        let mut members = Vec::with_capacity(n);
        let token = format!("watchcache-{:016x}", fastrand_u64());
        for i in 0..n {
            members.push(LocalEtcd {
                binary: PathBuf::from("etcd"),
                tls: None,
                name: format!("m{i}"),
                data_dir: base_dir.join(format!("member-{i}")),
                client_port: free_port()?,
                peer_port: free_port()?,
                initial_cluster: String::new(),
                token: token.clone(),
                extra_args: Vec::new(),
                child: None,
                fresh: true,
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
        for m in &mut members {
            m.wait_healthy(Duration::from_secs(30)).await?;
        }
        Ok(members)
    }

    fn spawn(&mut self) -> Result<(), LocalEtcdError> {
        std::fs::create_dir_all(&self.data_dir)?;
        if self.name.is_empty() {
            self.name = member_name(&self.data_dir)?;
            self.initial_cluster = format!("{}=http://127.0.0.1:{}", self.name, self.peer_port);
            self.token.clone_from(&self.name);
        }
        // Bound, then released for etcd: a port taken now is named here, and one taken in the
        // instant between is caught by the exit and identity checks of `wait_healthy`.
        for (role, port) in [("client", self.client_port), ("peer", self.peer_port)] {
            if let Err(source) = TcpListener::bind(("127.0.0.1", port)) {
                return Err(LocalEtcdError::PortInUse {
                    role,
                    addr: format!("127.0.0.1:{port}"),
                    source,
                });
            }
        }
        self.fresh = !self.data_dir.join("data").join("member").exists();
        let binary = resolve(&self.binary).map_err(|source| LocalEtcdError::Spawn {
            binary: self.binary.display().to_string(),
            source,
        })?;
        let log = std::fs::File::create(self.log_path())?;
        let p = self.peer_port;
        let url = self.url();
        let mut cmd = match setpriv() {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
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
            // A cluster ID of this data dir's own (etcd derives it from the token and the peer
            // URL, which another watchcache's etcd on the same port shares).
            .args(["--initial-cluster-token", &self.token])
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
        debug!(name = %self.name, url = %self.url(), data_dir = %self.data_dir.display(), pid = child.id(), "started etcd");
        self.child = Some(child);
        Ok(())
    }

    /// Whether the child has exited: its error, with the log's last line.
    fn exited(&mut self) -> Option<LocalEtcdError> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        // etcd's reason: its last fatal or error line (a bad flag is followed by the usage).
        let reason = |l: &&str| {
            let l = l.to_ascii_lowercase();
            ["fatal", "error", "panic", "not defined"]
                .iter()
                .any(|w| l.contains(w))
        };
        let lines = || log.lines().rev().filter(|l| !l.trim().is_empty());
        let last_line = lines()
            .find(reason)
            .or_else(|| lines().next())
            .unwrap_or("")
            .chars()
            .take(400)
            .collect();
        Some(LocalEtcdError::Exited {
            status: status.to_string(),
            last_line,
            log: self.log_path().display().to_string(),
        })
    }

    async fn wait_healthy(&mut self, limit: Duration) -> Result<(), LocalEtcdError> {
        let start = Instant::now();
        let url = self.url();
        while start.elapsed() < limit {
            if let Some(e) = self.exited() {
                return Err(e);
            }
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
                self.check_identity().await?;
                if let Some(e) = self.exited() {
                    return Err(e);
                }
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

    /// Fails unless the member answering is the one spawned: its name, and on kept data the
    /// cluster ID recorded when the data was made (recorded now for fresh data).
    async fn check_identity(&self) -> Result<(), LocalEtcdError> {
        let url = self.url();
        let not_ours = |what: String| LocalEtcdError::NotOurs {
            url: url.clone(),
            what,
        };
        let who = async {
            let opts = match &self.tls {
                Some(tls) => Some(
                    etcd_client::ConnectOptions::new()
                        .with_tls(tls.probe.options().map_err(|e| e.to_string())?),
                ),
                None => None,
            };
            let mut c = etcd_client::Client::connect([url.as_str()], opts)
                .await
                .map_err(|e| e.to_string())?;
            let status = c.status().await.map_err(|e| e.to_string())?;
            let header = status.header().ok_or("its status has no header")?;
            let (member, cluster) = (header.member_id(), header.cluster_id());
            let members = c.member_list().await.map_err(|e| e.to_string())?;
            let name = members
                .members()
                .iter()
                .find(|m| m.id() == member)
                .map(|m| m.name().to_owned())
                .unwrap_or_default();
            Ok::<_, String>((name, cluster))
        };
        let (name, cluster) = tokio::time::timeout(Duration::from_secs(5), who)
            .await
            .map_err(|_| not_ours("it did not say who it is within 5 s".into()))?
            .map_err(|e| not_ours(format!("it did not say who it is: {e}")))?;
        if name != self.name {
            return Err(not_ours(format!(
                "its member is named \"{name}\", the one started for {} is \"{}\"",
                self.data_dir.display(),
                self.name
            )));
        }
        let record = self.data_dir.join(CLUSTER_ID_FILE);
        let id = format!("{cluster:016x}");
        if !self.fresh
            && let Ok(recorded) = std::fs::read_to_string(&record)
            && recorded.trim() != id
        {
            return Err(not_ours(format!(
                "its cluster ID is {id}, the data in {} is cluster {} ({})",
                self.data_dir.display(),
                recorded.trim(),
                record.display()
            )));
        }
        std::fs::write(&record, format!("{id}\n"))?;
        Ok(())
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
                Ok(status) => debug!(name = %self.name, %status, "etcd stopped"),
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

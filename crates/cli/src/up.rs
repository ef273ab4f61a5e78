//! `watchcache up`: a local Kubernetes control plane with watchcache in front, in the set-up the
//! README recommends. etcd 3.6 and kube-apiserver run as a cluster's do; watchcache reads that
//! etcd and sends writes and what it does not cache to kube-apiserver (`--apiserver-kubeconfig`;
//! `--proxy`: it follows kube-apiserver instead); kube-controller-manager, kube-scheduler, the
//! kubemark hollow nodes (`--nodes N`) and the admin's kubeconfig point at watchcache.
//! `./scripts/run` builds the peers (scripts/k8s-peers) and runs this.
//!
//! Everything lives in the data dir and survives restarts: etcd's data (`etcd/`), the PKI and
//! keys (`pki/`, pki.rs), the kubeconfigs, the components' own directories and the logs
//! (`logs/`). Only watchcache's `--listen` is a fixed port; etcd's, kube-apiserver's and the
//! components' are picked free at each start and written into the kubeconfigs again.
//!
//! Process invariants: every child is spawned by the thread that runs `up` (the runtime's
//! `block_on` thread, which lives as long as the process: PR_SET_PDEATHSIG fires when the
//! spawning *thread* ends), in its own process group, with PR_SET_PDEATHSIG SIGKILL. So a
//! terminal's Ctrl-C reaches only this process, which stops the children in order (the
//! components and watchcache, then kube-apiserver, then etcd), and `kill -9` of this process
//! takes the children with it.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use watchcache_etcd::free_port;

use crate::ops;
use crate::peers;
use crate::pki::{ClusterPki, server_url};

type Error = Box<dyn std::error::Error>;

/// The flags of `watchcache up`.
#[derive(clap::Args)]
pub(crate) struct UpArgs {
    /// watchcache's HTTPS address: the one port clients use (the kubeconfig points here).
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    /// Where everything is kept across restarts: etcd's data, the PKI, kubeconfigs, logs.
    #[arg(long, default_value = "./watchcache-data")]
    data_dir: PathBuf,
    /// The number of kubemark hollow nodes (the real kubelet with a fake runtime), node-0 …
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// Proxy mode: watchcache follows kube-apiserver instead of reading etcd.
    #[arg(long)]
    proxy: bool,
    /// The directory of kube-apiserver, kube-controller-manager, kube-scheduler and kubemark
    /// (default: found on PATH).
    #[arg(long, value_name = "DIR")]
    k8s_bin_dir: Option<PathBuf>,
    /// The etcd 3.6 binary (default: `etcd` on PATH).
    #[arg(long, value_name = "FILE")]
    etcd_bin: Option<PathBuf>,
    /// Static tokens (CSV `token,user,uid,"group1,group2"`), for watchcache and kube-apiserver.
    #[arg(long, value_name = "FILE")]
    token_auth_file: Option<PathBuf>,
    /// watchcache replicas. Above 1, they listen on free loopback ports behind HAProxy (from
    /// PATH; TCP, each replica's `/readyz` checked every 300 ms) on `--listen`, drain on
    /// SIGTERM (`--shutdown-delay-duration 2s`, `--shutdown-watch-termination-grace-period
    /// 10s` unless the serve flags say otherwise), and one that exits is started again on its
    /// port, as a Deployment's pod would be. `<data-dir>/replicas.json` names each one's port
    /// and pid: `kill -TERM` one to see a rollout.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    replicas: u16,
    /// Flags for `watchcache serve` after `--`, e.g. `-- --history-bytes 64Mi`.
    #[arg(last = true, value_name = "SERVE FLAGS")]
    serve_flags: Vec<String>,
}

/// A child process whose output goes to a log file.
struct Proc {
    name: String,
    log: PathBuf,
    child: Child,
}

impl Proc {
    // pre_exec is unsafe by signature; the block below says why it is sound.
    #[allow(unsafe_code)]
    fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Result<Proc, Error> {
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        // SAFETY: between fork and exec the closure calls only async-signal-safe functions
        // (setpgid, prctl, getppid) and allocates nothing.
        let parent = std::process::id();
        unsafe {
            cmd.pre_exec(move || {
                if libc::setpgid(0, 0) != 0
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the prctl: then no signal would come.
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("cannot run {name} ({:?}): {e}", cmd.get_program()))?;
        Ok(Proc {
            name: name.to_owned(),
            log,
            child,
        })
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// An error naming it, its exit status and the end of its log, when it has exited.
    fn check(&mut self) -> Result<(), Error> {
        match self.exited() {
            None => Ok(()),
            Some(status) => Err(format!(
                "{} exited ({status}); the end of {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log, 30)
            )
            .into()),
        }
    }

    // kill(2) is unsafe by signature; the block below says why it is sound.
    #[allow(unsafe_code)]
    fn terminate(&mut self) {
        if self.exited().is_none() {
            // SAFETY: kill(2) on a pid this process spawned and has not reaped (try_wait above
            // saw it running), so the pid cannot have been reused.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        }
    }
}

/// The last `n` lines of a log.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The running processes, in start order, and the order they stop in.
#[derive(Default)]
struct Plane {
    etcd: Option<Proc>,
    apiserver: Option<Proc>,
    /// watchcache, the components and the nodes: stopped together, first.
    front: Vec<Proc>,
    /// With `--replicas` above 1: the replicas, each started again when it exits.
    replicas: Option<Replicas>,
}

/// watchcache replicas behind HAProxy, each kept running on its own port.
struct Replicas {
    /// How to start replica `i` on its port.
    command: Box<dyn Fn(u16) -> Result<Command, Error> + Send>,
    each: Vec<Replica>,
    logs: PathBuf,
    /// `replicas.json`, rewritten on every start.
    state: PathBuf,
}

struct Replica {
    port: u16,
    proc: Proc,
    starts: usize,
    started: Instant,
    /// Exits within 10 s of a start, in a row: three end the plane (a crash loop).
    quick_exits: usize,
}

impl Replicas {
    /// Starts replica `i` on `port`, its `starts`-th start (which names its log).
    fn spawn(&self, i: usize, port: u16, starts: usize) -> Result<Proc, Error> {
        Proc::spawn(
            &format!("watchcache-{i}"),
            (self.command)(port)?,
            self.logs.join(format!("watchcache-{i}.{starts}.log")),
        )
    }

    /// Starts again each replica that exited; fails after three quick exits in a row.
    fn check(&mut self) -> Result<(), Error> {
        let mut changed = false;
        for i in 0..self.each.len() {
            let Some(status) = self.each[i].proc.exited() else {
                continue;
            };
            let r = &mut self.each[i];
            r.quick_exits = if r.started.elapsed() < Duration::from_secs(10) {
                r.quick_exits + 1
            } else {
                0
            };
            if r.quick_exits >= 3 {
                return Err(format!(
                    "watchcache-{i} exited three times within 10 s of its start ({status}); the end of {}:\n{}",
                    r.proc.log.display(),
                    tail(&r.proc.log, 30)
                )
                .into());
            }
            r.starts += 1;
            let (port, starts) = (r.port, r.starts);
            eprintln!("watchcache-{i} exited ({status}): starting it again on port {port}");
            let p = self.spawn(i, port, starts)?;
            let r = &mut self.each[i];
            r.proc = p;
            r.started = Instant::now();
            changed = true;
        }
        if changed {
            self.write_state()?;
        }
        Ok(())
    }

    fn write_state(&self) -> Result<(), Error> {
        let list: Vec<serde_json::Value> = self
            .each
            .iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::json!({
                    "replica": i,
                    "url": format!("https://127.0.0.1:{}", r.port),
                    "pid": r.proc.child.id(),
                    "starts": r.starts,
                })
            })
            .collect();
        let tmp = self.state.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&list)?)?;
        std::fs::rename(&tmp, &self.state)?;
        Ok(())
    }
}

impl Plane {
    fn check(&mut self) -> Result<(), Error> {
        if let Some(r) = &mut self.replicas {
            r.check()?;
        }
        for p in self
            .front
            .iter_mut()
            .chain(&mut self.apiserver)
            .chain(&mut self.etcd)
        {
            p.check()?;
        }
        Ok(())
    }

    /// SIGTERM to the front, then kube-apiserver, then etcd, each tier given 10 s before
    /// SIGKILL: nothing that writes outlives what it writes to.
    async fn stop(&mut self) {
        let mut front = std::mem::take(&mut self.front);
        if let Some(r) = self.replicas.take() {
            front.extend(r.each.into_iter().map(|r| r.proc));
        }
        for tier in [
            front,
            self.apiserver.take().into_iter().collect(),
            self.etcd.take().into_iter().collect(),
        ] {
            let mut tier = tier;
            for p in &mut tier {
                p.terminate();
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && tier.iter_mut().any(|p| p.exited().is_none()) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            for p in &mut tier {
                if p.exited().is_none() {
                    eprintln!("{} did not stop within 10 s: SIGKILL", p.name);
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                }
            }
        }
    }
}

/// Runs the control plane until SIGINT, SIGTERM or SIGHUP (then stops it, and returns Ok) or until one of
/// its processes exits (then stops the rest, and returns that as the error).
pub(crate) async fn up(args: UpArgs) -> Result<(), Error> {
    let mut plane = Plane::default();
    let result = tokio::select! {
        r = run(&args, &mut plane) => r,
        () = ops::shutdown_signal() => Ok(()),
        () = hangup() => Ok(()),
    };
    eprintln!("stopping ...");
    plane.stop().await;
    result
}

/// SIGHUP: the terminal closed. Stopping in order beats its default action, which would end this
/// process at once and leave the children to PR_SET_PDEATHSIG's SIGKILL.
async fn hangup() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

fn binary(dir: &Option<PathBuf>, name: &str) -> PathBuf {
    match dir {
        Some(d) => d.join(name),
        None => PathBuf::from(name),
    }
}

/// Whether the etcd on loopback `port` answers `GET /health` with 200: one plain HTTP/1.0
/// exchange, so the binary needs no HTTP client for it.
async fn etcd_healthy(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        conn.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut head = [0u8; 12];
        conn.read_exact(&mut head).await?;
        std::io::Result::Ok(head.starts_with(b"HTTP/1.") && &head[9..12] == b"200")
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .is_ok_and(|r| r.unwrap_or(false))
}

/// Polls `probe` every 100 ms until it holds, failing when a process exits or after `limit`.
async fn wait_until<F: Future<Output = bool>>(
    plane: &mut Plane,
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> F,
) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        plane.check()?;
        if probe().await {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!("{what}: not within {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn run(args: &UpArgs, plane: &mut Plane) -> Result<(), Error> {
    let started = Instant::now();
    let at = |what: &str| eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
    if args.replicas > 1 && !ops::on_path("haproxy") {
        return Err(
            "--replicas above 1 needs HAProxy on PATH (Debian: apt-get install haproxy)".into(),
        );
    }
    // Refused at once rather than after kube-apiserver's start: another `up` holds the port.
    drop(TcpListener::bind(args.listen).map_err(|e| {
        format!(
            "{} is not free ({e}): is another watchcache up running?",
            args.listen
        )
    })?);
    std::fs::create_dir_all(&args.data_dir)?;
    let data = std::path::absolute(&args.data_dir)?;
    let logs = data.join("logs");
    std::fs::create_dir_all(&logs)?;
    let pki = ClusterPki::ensure(&data, args.listen)?;
    let url = server_url(args.listen);

    let (client_port, peer_port) = (free_port()?, free_port()?);
    let mut cmd = Command::new(args.etcd_bin.clone().unwrap_or_else(|| "etcd".into()));
    cmd.args(peers::etcd_args(
        "watchcache",
        &data.join("etcd"),
        client_port,
        peer_port,
    ));
    plane.etcd = Some(Proc::spawn("etcd", cmd, logs.join("etcd.log"))?);
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    wait_until(plane, "etcd healthy", Duration::from_secs(60), || {
        etcd_healthy(client_port)
    })
    .await?;
    at(&format!("etcd ready on {etcd_url}"));

    let kas_port = free_port()?;
    let kas_url = format!("https://127.0.0.1:{kas_port}");
    let cert_dir = data.join("kube-apiserver");
    let files = peers::ApiserverFiles {
        serving_cert: &pki.local.cert_file,
        serving_key: &pki.local.key_file,
        client_ca: &pki.local.ca_file,
        sa_key: &pki.sa_key,
        sa_pub: &pki.sa_pub,
        encryption_config: &pki.encryption_config,
        cert_dir: &cert_dir,
    };
    let mut cmd = Command::new(binary(&args.k8s_bin_dir, "kube-apiserver"));
    cmd.args(peers::kube_apiserver_args(&files, &etcd_url, kas_port));
    let token_file = args
        .token_auth_file
        .as_deref()
        .map(std::path::absolute)
        .transpose()?;
    if let Some(t) = &token_file {
        cmd.arg(format!("--token-auth-file={}", t.display()));
    }
    plane.apiserver = Some(Proc::spawn(
        "kube-apiserver",
        cmd,
        logs.join("kube-apiserver.log"),
    )?);
    // watchcache's identity at kube-apiserver: the admin (it needs `impersonate`).
    let kas_kubeconfig = data.join("kube-apiserver.kubeconfig");
    pki.kubeconfig(&kas_kubeconfig, &kas_url, &pki.admin)?;
    let kas = watchcache_kube::client_from_kubeconfig(&kas_kubeconfig, None).await?;
    let wc = watchcache_kube::client_from_kubeconfig(&pki.local.kubeconfig, None).await?;

    // `watchcache serve`'s flags but `--listen`, which each replica has its own of.
    let serve_args = {
        let f = |p: &Path| p.display().to_string();
        let mut a: Vec<String> = vec!["serve".into()];
        if args.proxy {
            a.extend(["--upstream-kubeconfig".into(), f(&kas_kubeconfig)]);
        } else {
            a.extend(["--etcd".into(), etcd_url.clone()]);
            a.extend(["--apiserver-kubeconfig".into(), f(&kas_kubeconfig)]);
        }
        a.extend([
            "--tls-cert-file".into(),
            f(&pki.local.cert_file),
            "--tls-private-key-file".into(),
            f(&pki.local.key_file),
            "--client-ca-file".into(),
            f(&pki.local.ca_file),
            "--service-account-key-file".into(),
            f(&pki.sa_pub),
            "--service-account-issuer".into(),
            peers::SERVICE_ACCOUNT_ISSUER.into(),
            "--authorization-mode".into(),
            "Node,RBAC".into(),
            "--encryption-provider-config".into(),
            f(&pki.encryption_config),
        ]);
        if let Some(t) = &token_file {
            a.extend(["--token-auth-file".into(), f(t)]);
        }
        if args.replicas > 1 {
            // HAProxy's checks carry no credentials: anonymous, allowed /readyz by
            // kube-apiserver's bootstrap role `system:public-info-viewer`, as its own are.
            a.push("--anonymous-auth=true".into());
            let given = |flag: &str| args.serve_flags.iter().any(|f| f.starts_with(flag));
            if !given("--shutdown-delay-duration") {
                a.extend(["--shutdown-delay-duration".into(), "2s".into()]);
            }
            if !given("--shutdown-watch-termination-grace-period") {
                a.extend([
                    "--shutdown-watch-termination-grace-period".into(),
                    "10s".into(),
                ]);
            }
        }
        a.extend(args.serve_flags.iter().cloned());
        a
    };
    let exe = std::env::current_exe()?;
    let watchcache_cmd = move |listen: SocketAddr| -> Result<Command, Error> {
        let mut cmd = Command::new(&exe);
        cmd.args(&serve_args)
            .args(["--listen", &listen.to_string()]);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.env("NO_COLOR", "1");
        Ok(cmd)
    };
    let start_front = |plane: &mut Plane| -> Result<(), Error> {
        if args.replicas == 1 {
            plane.front.push(Proc::spawn(
                "watchcache",
                watchcache_cmd(args.listen)?,
                logs.join("watchcache.log"),
            )?);
            return Ok(());
        }
        let cmd = watchcache_cmd.clone();
        let mut replicas = Replicas {
            command: Box::new(move |port| cmd(SocketAddr::from(([127, 0, 0, 1], port)))),
            each: Vec::new(),
            logs: logs.clone(),
            state: data.join("replicas.json"),
        };
        for i in 0..usize::from(args.replicas) {
            let port = free_port()?;
            let proc = replicas.spawn(i, port, 0)?;
            replicas.each.push(Replica {
                port,
                proc,
                starts: 0,
                started: Instant::now(),
                quick_exits: 0,
            });
        }
        replicas.write_state()?;
        let cfg = data.join("haproxy.cfg");
        // Two descriptors a connection, under the 20 000 a process is often allowed.
        let ports: Vec<u16> = replicas.each.iter().map(|r| r.port).collect();
        std::fs::write(
            &cfg,
            ops::haproxy_config(&args.listen.to_string(), 9000, ports),
        )?;
        let mut cmd = Command::new("haproxy");
        cmd.arg("-db").arg("-f").arg(&cfg);
        plane
            .front
            .push(Proc::spawn("haproxy", cmd, logs.join("haproxy.log"))?);
        plane.replicas = Some(replicas);
        Ok(())
    };
    // Reading etcd, watchcache starts beside kube-apiserver (the two starts overlap); following
    // kube-apiserver, it starts once that answers.
    if !args.proxy {
        start_front(plane)?;
    }
    wait_until(
        plane,
        "kube-apiserver ready",
        Duration::from_secs(180),
        || ops::get_ok(&kas, "/readyz"),
    )
    .await?;
    at(&format!("kube-apiserver ready on {kas_url}"));
    if args.proxy {
        start_front(plane)?;
    }
    wait_until(plane, "watchcache ready", Duration::from_secs(120), || {
        ops::get_ok(&wc, "/readyz")
    })
    .await?;
    if args.replicas > 1 {
        at(&format!(
            "{} watchcache replicas ready behind HAProxy on {url} (ports and pids: {})",
            args.replicas,
            data.join("replicas.json").display()
        ));
    } else {
        at(&format!("watchcache ready on {url}"));
    }

    let component = |name: &str, user: &str, groups: &[&str]| -> Result<PathBuf, Error> {
        let id = pki.client(name, user, groups)?;
        let kc = data.join(format!("{name}.kubeconfig"));
        pki.kubeconfig(&kc, &url, &id)?;
        Ok(kc)
    };
    let kc = component("controller-manager", "system:kube-controller-manager", &[])?;
    let mut cmd = Command::new(binary(&args.k8s_bin_dir, "kube-controller-manager"));
    cmd.args(peers::controller_manager_args(
        &kc,
        free_port()?,
        &data.join("controller-manager"),
        &pki.sa_key,
        &pki.local.ca_file,
    ));
    plane.front.push(Proc::spawn(
        "kube-controller-manager",
        cmd,
        logs.join("kube-controller-manager.log"),
    )?);
    let kc = component("scheduler", "system:kube-scheduler", &[])?;
    let mut cmd = Command::new(binary(&args.k8s_bin_dir, "kube-scheduler"));
    cmd.args(peers::scheduler_args(
        &kc,
        free_port()?,
        &data.join("scheduler"),
    ));
    plane.front.push(Proc::spawn(
        "kube-scheduler",
        cmd,
        logs.join("kube-scheduler.log"),
    )?);
    for i in 0..args.nodes {
        let name = format!("node-{i}");
        let home = data.join("nodes").join(&name);
        std::fs::create_dir_all(&home)?;
        let id = pki.client(
            &format!("kubelet-{name}"),
            &format!("system:node:{name}"),
            &["system:nodes"],
        )?;
        let kc = home.join("kubeconfig");
        pki.kubeconfig(&kc, &url, &id)?;
        let mut cmd = Command::new(binary(&args.k8s_bin_dir, "kubemark"));
        cmd.args(peers::kubemark_args(&name, &kc, free_port()?))
            .env("TMPDIR", &home);
        plane.front.push(Proc::spawn(
            &format!("kubemark {name}"),
            cmd,
            logs.join(format!("{name}.log")),
        )?);
    }
    at("kube-controller-manager and kube-scheduler started");
    // Pods cannot be created before the service-account controller makes `default` (the
    // ServiceAccount admission plugin refuses them): ready means a pod can be created.
    wait_until(
        plane,
        "the default service account",
        Duration::from_secs(120),
        || ops::get_ok(&wc, "/api/v1/namespaces/default/serviceaccounts/default"),
    )
    .await?;
    let mode = if args.proxy {
        "following kube-apiserver"
    } else {
        "reading etcd 3.6, writing through kube-apiserver"
    };
    println!(
        "ready in {:.1}s: watchcache on {url} ({mode}; kube-apiserver {kas_url}, etcd {etcd_url})\n\n  \
         export KUBECONFIG={}\n  kubectl get pods -A\n\n\
         kube-apiserver itself: {}\nlogs: {}\nCtrl-C stops everything.",
        started.elapsed().as_secs_f64(),
        pki.local.kubeconfig.display(),
        kas_kubeconfig.display(),
        logs.display(),
    );
    let mut ready_nodes = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        plane.check()?;
        if ready_nodes < args.nodes {
            let n = ops::nodes_ready(&wc).await;
            if n > ready_nodes {
                ready_nodes = n;
                at(&format!("{n} of {} nodes Ready", args.nodes));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Field `n` (1-based, as proc(5) counts) of /proc/PID/stat, after the command name.
    fn stat_field(pid: u32, n: usize) -> i64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(n - 3).unwrap().parse().unwrap()
    }

    #[test]
    fn a_child_has_its_own_process_group_and_stops_on_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let mut p = Proc::spawn("sleep", cmd, dir.path().join("sleep.log")).unwrap();
        let pid = p.child.id();
        assert_eq!(stat_field(pid, 5), i64::from(pid), "its own process group");
        assert!(p.check().is_ok());
        p.terminate();
        let status = p.child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("sleep exited"), "{e}");
    }
}

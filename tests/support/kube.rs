//! Real Kubernetes components for the integration tests, unchanged: kube-apiserver 1.35 on a
//! given etcd, and kube-controller-manager, kube-scheduler and kubemark hollow nodes pointed at
//! any server URL (kube-apiserver itself, or a watchcache in front of it). Built by
//! `scripts/k8s-peers` into `target/k8s/v1.35.4/` (run on demand: a test never skips for want of
//! them). Each runs on free loopback ports in a temporary directory, is stopped on drop, and
//! writes its output to a log file whose tail is printed when the test fails.
//!
//! What kube-apiserver 1.35 needs to run here (see [`KubeApiserver::args`]): a serving
//! certificate, a client CA, a service-account signing key and issuer, a service cluster IP
//! range, and the etcd servers. Nothing else: no feature gates, no cloud provider, no
//! aggregation layer certificates (it warns that it cannot authenticate aggregated API servers).
//! On Debian's etcd 3.4.23 it runs too: it finds the etcd version lacks working progress
//! requests (needs 3.4.31+ or 3.5.13+), serves consistent LISTs from etcd instead of its watch
//! cache, and answers a WatchList request (`sendInitialEvents=true`) with a 500 ERROR event
//! ("the required storage feature RequestWatchProgress is disabled") after which client-go's
//! reflector falls back to LIST then WATCH.
#![allow(dead_code)]

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use watchcache_etcd::free_port;

use super::pki::{Ca, Issued};

/// The peers' command lines, shared with `watchcache up` (the binary's own module).
#[path = "../../crates/cli/src/peers.rs"]
mod peers;

use super::k8s_peers::k8s_bin;

/// Held by the tests that run whole clusters (a control plane and client-go's or kubectl's
/// checks against it, through watchcache and directly): two at once would share two cores and
/// time out. Their files are modules of one test binary, so one lock serves them all.
pub static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A child process whose output goes to a log file; stopped (SIGTERM, then SIGKILL after 10 s)
/// on drop, and its log's tail printed to stderr when the test is failing.
pub struct Proc {
    pub name: String,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let out = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({cmd:?}): {e}"));
        tracing::info!(name, pid = child.id(), log = %log.display(), "started");
        Proc {
            name: name.to_owned(),
            log,
            child: Some(child),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status when it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The last `n` lines of its log.
    pub fn tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }

    /// Panics with its log's tail when it has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.exited() {
            panic!(
                "{} exited ({status}); the end of its log {}:\n{}",
                self.name,
                self.log.display(),
                self.tail(60)
            );
        }
    }

    /// SIGKILL, and wait.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, without waiting (a drain to watch).
    pub fn term(&self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }

    /// SIGTERM, wait up to 10 s, then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- the end of {}'s log ({}) ----\n{}",
                self.name,
                self.log.display(),
                self.tail(40)
            );
        }
        self.stop();
    }
}

/// The last `n` lines of a file (reading at most its last 256 KiB).
pub fn tail(path: &Path, n: usize) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return format!("({} cannot be read)", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(256 << 10)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The PKI of a test cluster, as kubeadm lays it out: one CA that signs the serving certificates
/// and every client certificate (so it is also the client CA), an admin in `system:masters`, a
/// service-account key pair, and an EncryptionConfiguration.
pub struct KubePki {
    pub dir: PathBuf,
    pub ca: Ca,
    /// kube-apiserver's serving certificate (localhost, 127.0.0.1).
    pub serving: Issued,
    /// CN `kubernetes-admin`, O `system:masters`.
    pub admin: Issued,
    /// The service-account signing key (ECDSA P-256, PKCS#8) and its public key.
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    /// Secrets encrypted with aescbc, configmaps with secretbox, leases with aesgcm; each
    /// resource reads all three and identity.
    pub encryption_config: PathBuf,
}

impl KubePki {
    pub fn new(dir: &Path) -> KubePki {
        std::fs::create_dir_all(dir).unwrap();
        let ca = Ca::new(dir, "ca");
        let serving = ca.server("apiserver");
        let admin = ca.client("admin", "kubernetes-admin", &["system:masters"]);
        let key = rcgen::KeyPair::generate().unwrap();
        let (sa_key, sa_pub) = (dir.join("sa.key"), dir.join("sa.pub"));
        std::fs::write(&sa_key, key.serialize_pem()).unwrap();
        std::fs::write(&sa_pub, key.public_key_pem()).unwrap();
        let encryption_config = dir.join("encryption-config.yaml");
        std::fs::write(&encryption_config, encryption_config_yaml()).unwrap();
        KubePki {
            dir: dir.to_owned(),
            ca,
            serving,
            admin,
            sa_key,
            sa_pub,
            encryption_config,
        }
    }

    /// A client certificate: CN is the user, each O a group.
    pub fn client(&self, name: &str, user: &str, groups: &[&str]) -> Issued {
        self.ca.client(name, user, groups)
    }

    /// A kubeconfig (`DIR/NAME.kubeconfig`) for `server`, trusting this PKI's CA, as `user`.
    pub fn kubeconfig(&self, name: &str, server: &str, user: &Issued) -> PathBuf {
        kubeconfig(
            &self.dir.join(format!("{name}.kubeconfig")),
            server,
            &self.ca.cert_file,
            user,
        )
    }
}

/// Writes a kubeconfig with the files embedded.
pub fn kubeconfig(path: &Path, server: &str, ca: &Path, user: &Issued) -> PathBuf {
    let b64 =
        |p: &Path| base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap());
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            b64(ca),
            b64(&user.cert_file),
            b64(&user.key_file)
        ),
    )
    .unwrap();
    path.to_owned()
}

fn random_key(len: usize) -> String {
    let mut key = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut key)
        .unwrap();
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// kube-apiserver's EncryptionConfiguration: each of aescbc, aesgcm and secretbox is the writing
/// provider of one resource, and every resource can read all of them (and plain values).
fn encryption_config_yaml() -> String {
    let (cbc, gcm, sbox) = (random_key(32), random_key(32), random_key(32));
    let provider = |name: &str| match name {
        "aescbc" => format!(
            "      - aescbc:\n          keys:\n          - name: cbc\n            secret: {cbc}\n"
        ),
        "aesgcm" => format!(
            "      - aesgcm:\n          keys:\n          - name: gcm\n            secret: {gcm}\n"
        ),
        "secretbox" => format!(
            "      - secretbox:\n          keys:\n          - name: box\n            secret: {sbox}\n"
        ),
        _ => "      - identity: {}\n".to_owned(),
    };
    let mut y = String::from(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n",
    );
    for (resource, order) in [
        ("secrets", ["aescbc", "aesgcm", "secretbox"]),
        ("configmaps", ["secretbox", "aescbc", "aesgcm"]),
        (
            "leases.coordination.k8s.io",
            ["aesgcm", "aescbc", "secretbox"],
        ),
    ] {
        y.push_str(&format!(
            "  - resources:\n      - {resource}\n    providers:\n"
        ));
        for p in order {
            y.push_str(&provider(p));
        }
        y.push_str(&provider("identity"));
    }
    y
}

/// One HTTPS GET over a new TLS connection, trusting `ca`, with a client certificate:
/// (status, body). HTTP/1.1, `Connection: close`, chunked bodies decoded.
pub async fn https_get(
    url: &str,
    ca: &Path,
    client: Option<&Issued>,
    path: &str,
) -> std::io::Result<(u16, String)> {
    https_request(url, ca, client, "GET", path, None).await
}

/// One HTTPS GET as [`https_get`], asking for `accept` (a Table, PartialObjectMetadata).
pub async fn https_get_as(
    url: &str,
    ca: &Path,
    client: Option<&Issued>,
    path: &str,
    accept: &str,
) -> std::io::Result<(u16, String)> {
    request(url, ca, client, ("GET", path), None, Some(accept)).await
}

/// One HTTPS request as [`https_get`], with any method and, when given, a JSON body.
pub async fn https_request(
    url: &str,
    ca: &Path,
    client: Option<&Issued>,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> std::io::Result<(u16, String)> {
    request(url, ca, client, (method, path), json, None).await
}

async fn request(
    url: &str,
    ca: &Path,
    client: Option<&Issued>,
    (method, path): (&str, &str),
    json: Option<&str>,
    accept: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).map_err(std::io::Error::other)? {
        roots
            .add(c.map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_root_certificates(roots);
    let config = match client {
        None => b.with_no_client_auth(),
        Some(i) => b
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&i.cert_file)
                    .map_err(std::io::Error::other)?
                    .map(|c| c.map_err(std::io::Error::other))
                    .collect::<Result<_, _>>()?,
                PrivateKeyDer::from_pem_file(&i.key_file).map_err(std::io::Error::other)?,
            )
            .map_err(std::io::Error::other)?,
    };
    let addr = url.trim_start_matches("https://").trim_end_matches('/');
    let io = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        if let Some(a) = accept {
            head.push_str(&format!("Accept: {a}\r\n"));
        }
        if let Some(body) = json {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        head.push_str(json.unwrap_or_default());
        s.write_all(head.as_bytes()).await?;
        let mut out = Vec::new();
        // A close without close_notify after a complete answer is fine.
        let _ = s.read_to_end(&mut out).await;
        Ok::<_, std::io::Error>(out)
    };
    let out = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| {
            std::io::Error::other(format!("{method} {url}{path}: no answer within 10 s"))
        })??;
    parse_response(&out).ok_or_else(|| {
        std::io::Error::other(format!(
            "{method} {url}{path}: not an HTTP answer: {}",
            String::from_utf8_lossy(&out)
        ))
    })
}

fn parse_response(raw: &[u8]) -> Option<(u16, String)> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            let start = eol + 2;
            out.extend_from_slice(rest.get(start..start + size)?);
            rest = rest.get(start + size + 2..)?;
        }
        body = out;
    }
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// kube-apiserver 1.35 on an etcd, with this PKI, encryption at rest and `Node,RBAC`.
pub struct KubeApiserver {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    pub etcd_url: String,
    /// The admin's kubeconfig (system:masters).
    pub admin_kubeconfig: PathBuf,
    // Dropped in this order: the process stops before its directory goes.
    pub proc: Proc,
    pub pki: KubePki,
    pub dir: TempDir,
}

impl KubeApiserver {
    /// Starts it on `etcd_url` and waits until `/readyz` answers ok.
    pub async fn start(etcd_url: &str) -> KubeApiserver {
        Self::start_with(etcd_url, &[]).await
    }

    /// With extra flags (later flags win).
    pub async fn start_with(etcd_url: &str, extra: &[&str]) -> KubeApiserver {
        let dir = tempfile::tempdir().unwrap();
        let pki = KubePki::new(&dir.path().join("pki"));
        let port = free_port().unwrap();
        let url = format!("https://127.0.0.1:{port}");
        let mut cmd = Command::new(k8s_bin("kube-apiserver"));
        cmd.args(Self::args(&pki, etcd_url, port, dir.path()))
            .args(extra);
        let proc = Proc::spawn("kube-apiserver", cmd, dir.path().join("kube-apiserver.log"));
        let admin_kubeconfig = pki.kubeconfig("admin", &url, &pki.admin);
        let mut s = KubeApiserver {
            url,
            etcd_url: etcd_url.to_owned(),
            admin_kubeconfig,
            proc,
            pki,
            dir,
        };
        s.wait_ready(Duration::from_secs(90)).await;
        s
    }

    /// Its flags: what kube-apiserver 1.35 needs to run here, plus encryption at rest and
    /// `Node,RBAC`.
    pub fn args(pki: &KubePki, etcd_url: &str, port: u16, dir: &Path) -> Vec<String> {
        let cert_dir = dir.join("certs");
        let files = peers::ApiserverFiles {
            serving_cert: &pki.serving.cert_file,
            serving_key: &pki.serving.key_file,
            client_ca: &pki.ca.cert_file,
            sa_key: &pki.sa_key,
            sa_pub: &pki.sa_pub,
            encryption_config: &pki.encryption_config,
            cert_dir: &cert_dir,
        };
        peers::kube_apiserver_args(&files, etcd_url, port)
    }

    /// Waits until `/readyz` answers 200 to the admin; panics with the log's tail when it exits or
    /// does not within `limit`.
    pub async fn wait_ready(&mut self, limit: Duration) {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < limit {
            self.proc.assert_running();
            match https_get(
                &self.url,
                &self.pki.ca.cert_file,
                Some(&self.pki.admin),
                "/readyz",
            )
            .await
            {
                Ok((200, _)) => {
                    tracing::info!(waited = ?start.elapsed(), url = %self.url, "kube-apiserver ready");
                    return;
                }
                Ok((code, body)) => last = format!("{code}: {body}"),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "kube-apiserver not ready within {limit:?} (last /readyz: {last}); the end of its log:\n{}",
            self.proc.tail(60)
        );
    }

    /// The sum of its Prometheus metric `name`'s samples whose labels contain every
    /// `label="value"` given (from `/metrics`, as the admin).
    pub async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let (code, text) = self.get("/metrics").await;
        assert_eq!(code, 200, "{text}");
        super::sum_samples(&text, name, labels)
    }

    /// GET as the admin: (status, body).
    pub async fn get(&self, path: &str) -> (u16, String) {
        https_get(
            &self.url,
            &self.pki.ca.cert_file,
            Some(&self.pki.admin),
            path,
        )
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }
}

/// Where a component connects: a server URL and the CA of its serving certificate.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub url: &'a str,
    pub ca: &'a Path,
}

/// kube-controller-manager as kubeadm runs it (its own identity, one service account per
/// controller, leader election off), with a kubeconfig for `target`.
pub fn controller_manager(pki: &KubePki, target: Target<'_>, dir: &Path) -> Proc {
    let id = pki.client("controller-manager", "system:kube-controller-manager", &[]);
    let kc = kubeconfig(
        &dir.join("controller-manager.kubeconfig"),
        target.url,
        target.ca,
        &id,
    );
    let mut cmd = Command::new(k8s_bin("kube-controller-manager"));
    cmd.args(peers::controller_manager_args(
        &kc,
        free_port().unwrap(),
        &dir.join("controller-manager-certs"),
        &pki.sa_key,
        &pki.ca.cert_file,
    ));
    Proc::spawn(
        "kube-controller-manager",
        cmd,
        dir.join("kube-controller-manager.log"),
    )
}

/// kube-scheduler as kubeadm runs it (leader election off), with a kubeconfig for `target`.
pub fn scheduler(pki: &KubePki, target: Target<'_>, dir: &Path) -> Proc {
    let id = pki.client("scheduler", "system:kube-scheduler", &[]);
    let kc = kubeconfig(
        &dir.join("scheduler.kubeconfig"),
        target.url,
        target.ca,
        &id,
    );
    let mut cmd = Command::new(k8s_bin("kube-scheduler"));
    cmd.args(peers::scheduler_args(
        &kc,
        free_port().unwrap(),
        &dir.join("scheduler-certs"),
    ));
    Proc::spawn("kube-scheduler", cmd, dir.join("kube-scheduler.log"))
}

/// `n` kubemark hollow nodes (the real kubelet with a fake runtime) named `PREFIX-i`, each with
/// its own client certificate (CN `system:node:NAME`, O `system:nodes`), kubeconfig for `target`,
/// kubelet port and temporary directory.
pub fn hollow_nodes(
    pki: &KubePki,
    target: Target<'_>,
    dir: &Path,
    prefix: &str,
    n: usize,
) -> Vec<Proc> {
    (0..n)
        .map(|i| hollow_node(pki, target, dir, &format!("{prefix}-{i}")))
        .collect()
}

/// One hollow node; see [`hollow_nodes`].
pub fn hollow_node(pki: &KubePki, target: Target<'_>, dir: &Path, name: &str) -> Proc {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).unwrap();
    let id = pki.client(
        &format!("node-{name}"),
        &format!("system:node:{name}"),
        &["system:nodes"],
    );
    let kc = kubeconfig(&home.join("kubeconfig"), target.url, target.ca, &id);
    let mut cmd = Command::new(k8s_bin("kubemark"));
    cmd.args(peers::kubemark_args(name, &kc, free_port().unwrap()))
        // Its root, static-pod and log directories are made under TMPDIR.
        .env("TMPDIR", &home);
    Proc::spawn(&format!("kubemark {name}"), cmd, home.join("kubemark.log"))
}

/// The watchcache binary cargo built for this test or bench (this module is included only by
/// the binary's package, crates/cli, whose targets get it).
pub fn watchcache_bin() -> PathBuf {
    env!("CARGO_BIN_EXE_watchcache").into()
}

/// `watchcache serve` as a process in front of a Kubernetes cluster's etcd (as kube-apiserver
/// is) or of its kube-apiserver (proxy mode): TLS with a certificate of the cluster's CA, the cluster's client CA, service-account
/// tokens, `Node,RBAC` (the RBAC objects kube-apiserver keeps in etcd) and its
/// EncryptionConfiguration.
pub struct Watchcache {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The admin's kubeconfig for it.
    pub admin_kubeconfig: PathBuf,
    pub proc: Proc,
    /// The command's arguments, to start it again the same way ([`Watchcache::restart`]).
    args: Vec<String>,
    starts: usize,
    pub dir: TempDir,
}

impl Watchcache {
    /// Starts it on `etcd_url` with the cluster's PKI and waits until `/readyz` answers ok.
    pub async fn on_etcd(pki: &KubePki, etcd_url: &str, extra: &[&str]) -> Watchcache {
        Self::start(pki, &["--etcd", etcd_url], extra).await
    }

    /// Starts it in proxy mode in front of an API server (`--upstream-kubeconfig`), with the
    /// cluster's PKI, and waits until `/readyz` answers ok.
    pub async fn proxy(pki: &KubePki, upstream_kubeconfig: &Path, extra: &[&str]) -> Watchcache {
        let kc = upstream_kubeconfig.display().to_string();
        Self::start(pki, &["--upstream-kubeconfig", &kc], extra).await
    }

    async fn start(pki: &KubePki, upstream: &[&str], extra: &[&str]) -> Watchcache {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port().unwrap();
        let url = format!("https://127.0.0.1:{port}");
        let serving = pki.ca.server("watchcache");
        let f = |p: &Path| p.display().to_string();
        let mut args: Vec<String> = vec!["serve".into()];
        args.extend(upstream.iter().map(|s| (*s).to_owned()));
        for (flag, value) in [
            ("--listen", format!("127.0.0.1:{port}")),
            ("--data-dir", f(&dir.path().join("data"))),
            ("--tls-cert-file", f(&serving.cert_file)),
            ("--tls-private-key-file", f(&serving.key_file)),
            ("--client-ca-file", f(&pki.ca.cert_file)),
            ("--service-account-key-file", f(&pki.sa_pub)),
            (
                "--service-account-issuer",
                peers::SERVICE_ACCOUNT_ISSUER.into(),
            ),
            ("--authorization-mode", "Node,RBAC".into()),
            ("--encryption-provider-config", f(&pki.encryption_config)),
        ] {
            args.push(flag.into());
            args.push(value);
        }
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let proc = Self::spawn(&args, &dir.path().join("watchcache.log"));
        let admin_kubeconfig = kubeconfig(
            &dir.path().join("admin.kubeconfig"),
            &url,
            &pki.ca.cert_file,
            &pki.admin,
        );
        let mut w = Watchcache {
            url,
            admin_kubeconfig,
            proc,
            args,
            starts: 1,
            dir,
        };
        w.wait_ready(pki).await;
        w
    }

    fn spawn(args: &[String], log: &Path) -> Proc {
        let mut cmd = Command::new(watchcache_bin());
        cmd.args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1");
        Proc::spawn("watchcache", cmd, log.to_owned())
    }

    /// `kill -9`, then the same command again on the same address (its log in a new file), and
    /// waits until `/readyz` answers ok.
    pub async fn restart(&mut self, pki: &KubePki) {
        self.proc.kill9();
        self.starts += 1;
        let log = self
            .dir
            .path()
            .join(format!("watchcache-{}.log", self.starts));
        // The address was just freed: a listener may still be closing for a moment.
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.proc = Self::spawn(&self.args, &log);
        self.wait_ready(pki).await;
    }

    async fn wait_ready(&mut self, pki: &KubePki) {
        let w = self;
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < Duration::from_secs(60) {
            w.proc.assert_running();
            match https_get(&w.url, &pki.ca.cert_file, Some(&pki.admin), "/readyz").await {
                Ok((200, _)) => return,
                Ok((code, body)) => last = format!("{code}: {body}"),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "watchcache not ready within 60 s (last /readyz: {last}); the end of its log:\n{}",
            w.proc.tail(60)
        );
    }
}

/// One line of wc-conformance's output.
#[derive(Debug, serde::Deserialize)]
pub struct Check {
    pub check: String,
    pub ok: bool,
    pub detail: String,
}

/// What wc-conformance found.
#[derive(Debug)]
pub struct Conformance {
    pub checks: Vec<Check>,
    pub passed: bool,
    pub stderr: String,
}

impl Conformance {
    pub fn check(&self, name: &str) -> &Check {
        self.checks
            .iter()
            .find(|c| c.check == name)
            .unwrap_or_else(|| panic!("no check {name} in {:#?}", self.checks))
    }

    /// Checks every run must hold (a program that stopped running one passes nothing).
    const REQUIRED: [&str; 3] = [
        "informer/typed/narrow-user/watchlist=true",
        "informer/typed/node/watchlist=true",
        "informer/dynamic/crd-field-selector",
    ];

    /// Panics listing every failed check, with its detail, or a required check missing.
    pub fn assert_passed(&self, against: &str) {
        for name in Self::REQUIRED {
            self.check(name);
        }
        let failed: Vec<String> = self
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| format!("  {}: {}", c.check, c.detail))
            .collect();
        assert!(
            self.passed && failed.is_empty() && self.checks.len() > 20,
            "wc-conformance against {against}: {} checks, {} failed:\n{}\nstderr:\n{}",
            self.checks.len(),
            failed.len(),
            failed.join("\n"),
            self.stderr
        );
    }
}

/// Runs the client-go conformance program (tests/k8s/conformance) against a kubeconfig's
/// server, with a time limit of 5 minutes.
pub async fn conformance(kubeconfig: &Path, args: &[&str]) -> Conformance {
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(k8s_bin("wc-conformance"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--timeout=30s")
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("wc-conformance ends within 5 minutes")
    .expect("run wc-conformance");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let checks = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    Conformance {
        checks,
        passed: out.status.success(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Polls `kubectl get RESOURCE -o json` until `done` holds for its items, panicking with the last
/// answer after `limit`, or as soon as a component exits.
pub async fn wait_items(
    k: &super::kubectl::Kubectl,
    args: &[&str],
    limit: std::time::Duration,
    procs: &mut [&mut Proc],
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let start = std::time::Instant::now();
    let mut last = Vec::new();
    while start.elapsed() < limit {
        for p in procs.iter_mut() {
            p.assert_running();
        }
        let out = k.run(args).await;
        if out.status.success() {
            last = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()["items"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if done(&last) {
                return last;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!(
        "kubectl {args:?}: not done within {limit:?}; last items: {}",
        serde_json::to_string_pretty(&last).unwrap()
    );
}

/// Whether `item`'s status has condition `kind` True.
pub fn condition(item: &serde_json::Value, kind: &str) -> bool {
    item["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

//! TLS on the serving port with real clients: kube-rs over HTTP/2, raw TLS HTTP/1.1 watches (the
//! fast path), certificate rotation under an open watch, a broken replacement, client certificates
//! from the client CA or another, and `watchcache serve --local-pki` with kubectl and the official
//! Python client.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::client::ConfigExt;
use kube::runtime::watcher;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::client::TlsStream;

use support::etcd::put_rev;
use support::pki::{Ca, Issued};
use support::server::TestServer;
use watchcache_server::{ServerConfig, TlsConfig};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls client trusting `ca`, presenting `cert` when given, offering these ALPN protocols.
fn client_config(ca: &Path, cert: Option<&Issued>, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match cert {
        None => b.with_no_client_auth(),
        Some(i) => b
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&i.cert_file)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(&i.key_file).unwrap(),
            )
            .unwrap(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

fn addr(url: &str) -> String {
    url.trim_start_matches("https://").to_owned()
}

async fn connect(
    url: &str,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr(url)).await?;
    tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// The leaf certificate (DER) a new connection is served.
async fn served_leaf(url: &str, ca: &Path) -> Vec<u8> {
    let s = connect(url, client_config(ca, None, &[b"http/1.1"]))
        .await
        .unwrap();
    s.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der(pem_file: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(pem_file)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// One request over a new TLS HTTP/1.1 connection, answered and closed: the whole answer.
async fn request(url: &str, ca: &Path, head_and_body: &str) -> String {
    let mut s = connect(url, client_config(ca, None, &[b"http/1.1"]))
        .await
        .unwrap();
    s.write_all(head_and_body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // A close_notify-less close is fine here: the answer is complete.
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Opens a watch on a raw TLS HTTP/1.1 connection and returns the stream after the response head.
async fn open_watch(
    url: &str,
    ca: &Path,
    query: &str,
) -> (TlsStream<tokio::net::TcpStream>, String) {
    let mut s = connect(url, client_config(ca, None, &[b"http/1.1"]))
        .await
        .unwrap();
    s.write_all(format!("GET /api/v1/pods?watch=1&{query} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut b))
            .await
            .expect("a response head within 10 s")
            .unwrap();
        head.push(b[0]);
    }
    (s, String::from_utf8(head).unwrap())
}

/// Reads from the watch until `needle` has been seen.
async fn read_until(s: &mut TlsStream<tokio::net::TcpStream>, needle: &str) -> String {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&got).contains(needle) {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, s.read(&mut buf))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{needle} within 10 s; got {}",
                    String::from_utf8_lossy(&got)
                )
            })
            .unwrap();
        assert!(n > 0, "the watch ended before {needle}");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

struct Pki {
    _dir: tempfile::TempDir,
    ca: Ca,
    serving: Issued,
    dir: PathBuf,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let serving = ca.server("serving");
    Pki {
        dir: dir.path().to_owned(),
        _dir: dir,
        ca,
        serving,
    }
}

impl Pki {
    fn tls(&self) -> TlsConfig {
        TlsConfig::new(&self.serving.cert_file, &self.serving.key_file)
            .with_client_ca(&self.ca.cert_file)
    }

    /// A kubeconfig for `url` with the client certificate `client`.
    fn kubeconfig(&self, url: &str, client: &Issued) -> PathBuf {
        let b64 =
            |p: &Path| base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap());
        let path = self.dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
                b64(&self.ca.cert_file),
                b64(&client.cert_file),
                b64(&client.key_file)
            ),
        )
        .unwrap();
        path
    }
}

/// `watchcache_connections_total` for this transport and protocol, read over TLS.
async fn connections(url: &str, ca: &Path, protocol: &str) -> u64 {
    let answer = request(
        url,
        ca,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let key = format!("watchcache_connections_total{{transport=\"tls\",protocol=\"{protocol}\"}} ");
    answer
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rs_watcher_runs_over_tls_with_http2() {
    let pki = pki();
    let s = TestServer::start_tls(ServerConfig::default(), pki.tls()).await;
    let admin = pki
        .ca
        .client("admin", "kubernetes-admin", &["system:masters"]);
    let kubeconfig = kube::config::Kubeconfig::read_from(pki.kubeconfig(&s.url, &admin)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    // kube's own connector offers only http/1.1; client-go offers h2 first, as this one does.
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config().unwrap())
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().unwrap())
        .service(tower::ServiceExt::map_err(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(https),
            Box::<dyn std::error::Error + Send + Sync>::from,
        ));
    let client = kube::Client::new(service, config.default_namespace);
    let h2_before = connections(&s.url, &pki.ca.cert_file, "h2").await;

    let pods: Api<Pod> = Api::all(client.clone());
    let mut etcd = support::etcd::client(&[s.etcd.server.url()]).await;
    put_rev(
        &mut etcd,
        &support::key("default", "a"),
        support::pod("default", "a", "node-1", &[]),
    )
    .await;
    let mut events = watcher(
        pods.clone(),
        watcher::Config::default().fields("spec.nodeName=node-1"),
    )
    .boxed();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut wrote_b = false;
    while !seen.contains(&"b".to_owned()) {
        let ev = tokio::time::timeout_at(deadline, events.try_next())
            .await
            .expect("events within 20 s")
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                seen.push(p.metadata.name.unwrap());
            }
            watcher::Event::InitDone if !wrote_b => {
                wrote_b = true;
                put_rev(
                    &mut etcd,
                    &support::key("default", "b"),
                    support::pod("default", "b", "node-1", &[]),
                )
                .await;
            }
            _ => {}
        }
    }
    assert_eq!(seen, ["a", "b"]);
    // A LIST on the same client, multiplexed on the same connection.
    let list = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    let h2_after = connections(&s.url, &pki.ca.cert_file, "h2").await;
    assert!(
        h2_after > h2_before,
        "the kube-rs client was served over h2 ({h2_before} → {h2_after})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_http11_watch_is_served_by_the_fast_path() {
    let pki = pki();
    let s = TestServer::start_tls(ServerConfig::default(), pki.tls()).await;
    let ca = &pki.ca.cert_file;
    let (mut watch, head) = open_watch(&s.url, ca, "fieldSelector=spec.nodeName%3Dnode-1").await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    // TLS 1.3: the watch streams from the connection's sending half (server/transport/sealed.rs), which
    // closes after the watch.
    assert!(head.contains("Connection: close\r\n"), "{head}");
    // hyper writes a date header; the fast path does not.
    assert!(
        !head.to_ascii_lowercase().contains("date:"),
        "the fast path answered: {head}"
    );
    let mut etcd = support::etcd::client(&[s.etcd.server.url()]).await;
    put_rev(
        &mut etcd,
        &support::key("default", "a"),
        support::pod("default", "a", "node-1", &[]),
    )
    .await;
    let got = read_until(&mut watch, "\"name\":\"a\"").await;
    assert!(got.contains("\"type\":\"ADDED\""), "{got}");
    // A change seen by the watch, and a consistent GET of it over TLS, answered by hyper.
    put_rev(
        &mut etcd,
        &support::key("default", "b"),
        support::pod("default", "b", "node-1", &[]),
    )
    .await;
    read_until(&mut watch, "\"name\":\"b\"").await;
    let answer = request(
        &s.url,
        ca,
        "GET /api/v1/namespaces/default/pods/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("\"name\":\"b\""),
        "{answer}"
    );
    assert!(connections(&s.url, ca, "http/1.1").await >= 3);
}

/// A watch handed down to its sending half (TLS 1.3) ends as any other: its last chunk, then a
/// `close_notify` the client's TLS verifies; over TLS 1.2 rustls keeps the connection, which stays
/// open for another request.
#[tokio::test]
async fn a_handed_down_tls_watch_ends_with_its_last_chunk_and_close_notify() {
    let pki = pki();
    let s = TestServer::start_tls(ServerConfig::default(), pki.tls()).await;
    let ca = &pki.ca.cert_file;
    let mut etcd = support::etcd::client(&[s.etcd.server.url()]).await;
    put_rev(
        &mut etcd,
        &support::key("default", "a"),
        support::pod("default", "a", "node-1", &[]),
    )
    .await;
    let (mut watch, head) = open_watch(&s.url, ca, "timeoutSeconds=2&resourceVersion=0").await;
    assert!(head.contains("Connection: close\r\n"), "{head}");
    let mut rest = Vec::new();
    // read_to_end fails on a close without close_notify (rustls' UnexpectedEof).
    tokio::time::timeout(Duration::from_secs(10), watch.read_to_end(&mut rest))
        .await
        .expect("the watch ends by its timeout")
        .expect("a clean close_notify");
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("\"name\":\"a\""), "{rest}");
    assert!(rest.ends_with("0\r\n\r\n"), "{rest}");

    // TLS 1.2: not handed down; the connection serves a second request after the watch.
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut tls12 = connect(&s.url, Arc::new(config)).await.unwrap();
    tls12
        .write_all(b"GET /api/v1/pods?watch=1&timeoutSeconds=1&resourceVersion=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let first = read_until(&mut tls12, "0\r\n\r\n").await;
    assert!(!first.contains("Connection: close"), "{first}");
    tls12
        .write_all(b"GET /api/v1/namespaces/default/pods/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let second = read_until(&mut tls12, "\"name\":\"a\"").await;
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
}

/// Rewrites the serving files with `issued`'s (cert first, then key, as a careless operator might).
fn install(pki: &Pki, issued: &Issued) {
    std::fs::write(
        &pki.serving.cert_file,
        std::fs::read(&issued.cert_file).unwrap(),
    )
    .unwrap();
    std::fs::write(
        &pki.serving.key_file,
        std::fs::read(&issued.key_file).unwrap(),
    )
    .unwrap();
}

async fn wait_for_leaf(url: &str, ca: &Path, want: &[u8]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while served_leaf(url, ca).await != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate is served within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_open_watches_and_a_broken_replacement_keeps_the_old_certificate() {
    let pki = pki();
    let mut config = pki.tls();
    config.reload_interval = Duration::from_millis(200);
    let s = TestServer::start_tls(ServerConfig::default(), config).await;
    let ca = &pki.ca.cert_file;
    let first = der(&pki.serving.cert_file);
    assert_eq!(served_leaf(&s.url, ca).await, first);
    let (mut watch, head) = open_watch(&s.url, ca, "fieldSelector=spec.nodeName%3Dnode-1").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut etcd = support::etcd::client(&[s.etcd.server.url()]).await;

    // Rotation: a new certificate from the same CA.
    let second = pki.ca.server("second");
    install(&pki, &second);
    let second_der = der(&second.cert_file);
    assert_ne!(second_der, first);
    wait_for_leaf(&s.url, ca, &second_der).await;
    // The watch opened before is still open and delivering.
    put_rev(
        &mut etcd,
        &support::key("default", "a"),
        support::pod("default", "a", "node-1", &[]),
    )
    .await;
    read_until(&mut watch, "\"name\":\"a\"").await;

    // A broken replacement: a certificate whose key does not match, then a truncated key.
    let third = pki.ca.server("third");
    std::fs::write(
        &pki.serving.cert_file,
        std::fs::read(&third.cert_file).unwrap(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        served_leaf(&s.url, ca).await,
        second_der,
        "a mismatched pair is not served"
    );
    let key = std::fs::read(&third.key_file).unwrap();
    std::fs::write(&pki.serving.key_file, &key[..key.len() / 2]).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        served_leaf(&s.url, ca).await,
        second_der,
        "a half-written key is not loaded"
    );
    // Completing the key completes the rotation.
    std::fs::write(&pki.serving.key_file, &key).unwrap();
    wait_for_leaf(&s.url, ca, &der(&third.cert_file)).await;
    put_rev(
        &mut etcd,
        &support::key("default", "b"),
        support::pod("default", "b", "node-1", &[]),
    )
    .await;
    read_until(&mut watch, "\"name\":\"b\"").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_from_another_ca_fail_the_handshake_and_none_is_fine() {
    let pki = pki();
    let s = TestServer::start_tls(ServerConfig::default(), pki.tls()).await;
    let ca = &pki.ca.cert_file;
    let get = b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let answer = |cert: Option<Issued>| {
        let url = s.url.clone();
        async move {
            let mut s = connect(&url, client_config(ca, cert.as_ref(), &[b"http/1.1"])).await?;
            s.write_all(get).await?;
            let mut out = Vec::new();
            s.read_to_end(&mut out).await?;
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&out).into_owned())
        }
    };
    let none = answer(None).await.unwrap();
    assert!(none.starts_with("HTTP/1.1 200"), "{none}");
    let ours = answer(Some(pki.ca.client("alice", "alice", &["devs"])))
        .await
        .unwrap();
    assert!(ours.starts_with("HTTP/1.1 200"), "{ours}");
    // TLS 1.3: the client's side of the handshake ends before the server checks its certificate,
    // so the refusal (an alert) arrives on the first read.
    let other = Ca::new(&pki.dir, "other-ca");
    let theirs = answer(Some(other.client(
        "mallory",
        "mallory",
        &["system:masters"],
    )))
    .await;
    assert!(
        theirs.is_err(),
        "a certificate from another CA is refused: {theirs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_that_never_finishes_gives_its_slot_back() {
    let pki = pki();
    let config = ServerConfig {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(500),
        ..ServerConfig::default()
    };
    let s = TestServer::start_tls(config, pki.tls()).await;
    let ca = &pki.ca.cert_file;
    // Opens TCP and sends nothing: the only slot is taken.
    let mut idle = tokio::net::TcpStream::connect(addr(&s.url)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = request(
        &s.url,
        ca,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        refused.starts_with("HTTP/1.1 503"),
        "over the limit, over TLS: {refused}"
    );
    assert!(refused.contains("Retry-After: 1"), "{refused}");
    // After the handshake timeout the idle client is closed and its slot is free.
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .expect("the idle connection is closed after the handshake timeout");
    assert!(matches!(n, Ok(0) | Err(_)));
    let ok = request(
        &s.url,
        ca,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

// `watchcache serve --local-pki`, as ./scripts/run starts it.

fn free_port() -> u16 {
    watchcache_etcd::free_port().unwrap()
}

struct Serve {
    child: Child,
}

impl Serve {
    fn start(data: &Path, port: u16, etcd_port: u16) -> Serve {
        let child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
            .args(["serve", "--local-pki", "--data-dir"])
            .arg(data)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--local-etcd-port", &etcd_port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Serve { child }
    }

    fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "watchcache exits cleanly: {status}");
        let mut out = String::new();
        use std::io::Read;
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        out
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(support::venv::bin("kubectl"))
        .env("HOME", home)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

/// Waits for `kubectl get --raw /readyz` to answer ok over TLS with the admin kubeconfig.
fn wait_ready(kubeconfig: &Path, home: &Path) {
    for _ in 0..300 {
        if kubeconfig.exists() {
            let out = kubectl(kubeconfig, home, &["get", "--raw", "/readyz"]);
            if out.status.success() {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("watchcache --local-pki did not become ready over TLS");
}

/// Runs a Python client script with the kubeconfig as its argument; its output, trimmed.
fn python(script: &str, kubeconfig: &Path) -> String {
    let py = Command::new(support::venv::bin("python"))
        .arg("-c")
        .arg(script)
        .arg(kubeconfig)
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    String::from_utf8_lossy(&py.stdout).trim().to_owned()
}

#[test]
fn local_pki_is_made_once_and_its_kubeconfig_works_with_kubectl_and_python() {
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (port, etcd_port) = (free_port(), free_port());
    let kubeconfig = data.path().join("admin.kubeconfig");
    let files = [
        "pki/ca.crt",
        "pki/ca.key",
        "pki/serving.crt",
        "pki/serving.key",
        "pki/admin.crt",
        "pki/admin.key",
    ];

    let serve = Serve::start(data.path(), port, etcd_port);
    wait_ready(&kubeconfig, home.path());
    let first: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(data.path().join(f)).unwrap())
        .collect();
    // A pod as kube-apiserver would have stored it in the local etcd (watchcache is read-only).
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut etcd = support::etcd::client(&[format!("http://127.0.0.1:{etcd_port}")]).await;
        let pod = serde_json::json!({"metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "web", "image": "nginx"}], "restartPolicy": "Never"},
            "status": {"phase": "Pending"}});
        let (key, value) =
            support::etcd::stored(&watchcache::ResourceDef::builtin("pods").unwrap(), &pod);
        put_rev(&mut etcd, &key, value).await;
    });
    let out = kubectl(&kubeconfig, home.path(), &["get", "pods", "-o", "name"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pod/web");
    // The official Python client with the same kubeconfig.
    let script = "import sys\nfrom kubernetes import client, config\nconfig.load_kube_config(config_file=sys.argv[1])\nprint(' '.join(p.metadata.name for p in client.CoreV1Api().list_namespaced_pod('default').items))\n";
    assert_eq!(python(script, &kubeconfig), "web");
    // Watches over TLS 1.3 HTTP/1.1 stream from the connection's sending half
    // (server/transport/sealed.rs): Go's crypto/tls (kubectl, HTTP/2 off) and OpenSSL (the Python client)
    // read its records to the watch's end.
    let watched = Command::new(support::venv::bin("kubectl"))
        .env("HOME", home.path())
        .env("GODEBUG", "http2client=0")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=2",
        ])
        .output()
        .unwrap();
    assert!(
        watched.status.success(),
        "{}",
        String::from_utf8_lossy(&watched.stderr)
    );
    let out = String::from_utf8_lossy(&watched.stdout);
    assert!(
        out.contains("\"type\":\"ADDED\"") && out.contains("\"name\":\"web\""),
        "{out}"
    );
    let script = "import sys\nfrom kubernetes import client, config, watch\nconfig.load_kube_config(config_file=sys.argv[1])\nprint(' '.join(e['type'] + ':' + e['object'].metadata.name for e in watch.Watch().stream(client.CoreV1Api().list_namespaced_pod, 'default', timeout_seconds=2)))\n";
    assert_eq!(python(script, &kubeconfig), "ADDED:web");
    let printed = serve.stop();
    assert!(
        printed.contains("kubectl --kubeconfig"),
        "it says how to use it: {printed}"
    );

    // Second start: the same files, and the same kubeconfig still works.
    let serve = Serve::start(data.path(), port, etcd_port);
    wait_ready(&kubeconfig, home.path());
    let second: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(data.path().join(f)).unwrap())
        .collect();
    assert!(first == second, "the PKI is reused on the second start");
    let out = kubectl(&kubeconfig, home.path(), &["get", "pods", "-o", "name"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pod/web");
    serve.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_never_sends_its_preface_is_closed() {
    let pki = pki();
    let config = ServerConfig {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(500),
        ..ServerConfig::default()
    };
    let s = TestServer::start_tls(config, pki.tls()).await;
    let ca = &pki.ca.cert_file;
    let mut silent = connect(&s.url, client_config(ca, None, &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(silent.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            // The server's SETTINGS may come first; then the close.
            match silent.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "closed after the head deadline");
    let ok = request(
        &s.url,
        ca,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        ok.starts_with("HTTP/1.1 200"),
        "its slot is free again: {ok}"
    );
}

/// One HTTP/2 frame: (type, flags, stream, payload).
async fn read_frame<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> (u8, u8, u32, Vec<u8>) {
    try_read_frame(r).await.unwrap()
}

/// One HTTP/2 frame, or the error that ended the connection.
async fn try_read_frame<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
) -> std::io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    r.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok((head[3], head[4], stream, payload))
}

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], ty, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_offer_no_hpack_table_and_serve_requests_that_drop_theirs() {
    // The server advertises SETTINGS_HEADER_TABLE_SIZE 0 (design/performance.md: an indexed
    // header pins the buffer it arrived in), and a client that then resizes its table to 0, as
    // RFC 7541 §4.2 has it do, and indexes its headers anyway is served.
    let pki = pki();
    let s = TestServer::start_tls(ServerConfig::default(), pki.tls()).await;
    let mut c = connect(&s.url, client_config(&pki.ca.cert_file, None, &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(c.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    c.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    let (ty, flags, _, settings) = read_frame(&mut c).await;
    assert_eq!((ty, flags), (0x4, 0), "the server's SETTINGS first");
    let table: Vec<u32> = settings
        .chunks(6)
        .filter(|p| u16::from_be_bytes([p[0], p[1]]) == 0x1)
        .map(|p| u32::from_be_bytes([p[2], p[3], p[4], p[5]]))
        .collect();
    assert_eq!(table, [0], "SETTINGS_HEADER_TABLE_SIZE 0: {settings:?}");
    c.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap();
    // A table size update to 0, then :method GET, :scheme https (static), and :path and
    // :authority as literals with incremental indexing (into a table of size 0).
    let mut block = vec![0x20, 0x82, 0x87, 0x44, 6];
    block.extend_from_slice(b"/livez");
    block.extend_from_slice(&[0x41, 1, b'x']);
    for stream in [1u32, 3] {
        c.write_all(&frame(0x1, 0x4 | 0x1, stream, &block))
            .await
            .unwrap();
        // The second request repeats the size update: allowed at the start of any block.
        let status = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let (ty, _, id, payload) = read_frame(&mut c).await;
                assert_ne!(ty, 0x7, "GOAWAY: {payload:?}");
                if ty == 0x1 && id == stream {
                    // :status 200 from the static table, after any size update of its own.
                    break payload.into_iter().find(|b| b & 0xe0 != 0x20);
                }
            }
        })
        .await
        .expect("a response");
        assert_eq!(status, Some(0x88), "stream {stream}: 200");
    }
}

/// The process's resident set (`VmRSS`), in bytes: the server runs in this process.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// `apiserver_request_total` summed over the series with this code, read over TLS.
async fn requests_with_code(url: &str, ca: &Path, code: u16) -> u64 {
    let answer = request(
        url,
        ca,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let want = format!("code=\"{code}\"");
    answer
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains(&want))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A header block of literal fields with new names, neither indexed nor Huffman-coded (every
/// name and value under 127 bytes).
fn hpack_literals(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// How the server answered stream 1 of a raw HTTP/2 connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum H2Answer {
    /// A response's HEADERS.
    Headers,
    /// RST_STREAM with this error code.
    Reset(u32),
    /// GOAWAY with this error code.
    GoAway(u32),
    /// The connection ended without either.
    Closed,
}

/// What the server has sent on a raw HTTP/2 connection, as far as a sender needs it: its send
/// windows, and how stream 1 was answered, if it was.
#[derive(Default)]
struct H2Peer {
    conn_window: i64,
    stream_window: i64,
    answered: Option<H2Answer>,
    settings_to_ack: u32,
}

/// Issue 35, H2-PAD: a POST whose body came as 160 000 DATA frames of one byte padded to 255,
/// left open, added 46 MiB to the server (303 B per body byte; ~900 MiB a stream at the 3 MiB
/// limit). The body is now one buffer of its data, and its frames' padding and headers count
/// against the limit: it is refused with 413 once its framing outweighs its data past 64 KiB
/// (a few hundred frames), or by h2's small-frame budget when the handler falls behind (about
/// 2 000 frames: half the 1 MiB connection window, 255 bytes of overhead each), and the process
/// grows by what it carried, not by what it pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_padded_h2_frames_costs_its_data_not_its_frames() {
    let pki = pki();
    let s = TestServer::start_tls(ServerConfig::default(), pki.tls()).await;
    let ca = pki.ca.cert_file.clone();
    let refused_before = requests_with_code(&s.url, &ca, 413).await;
    let tls = connect(&s.url, client_config(&ca, None, &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut rd, mut wr) = tokio::io::split(tls);
    let peer = Arc::new(std::sync::Mutex::new(H2Peer {
        conn_window: 65_535,
        stream_window: 65_535,
        ..H2Peer::default()
    }));
    let reader = {
        let peer = Arc::clone(&peer);
        tokio::spawn(async move {
            while let Ok((kind, flags, stream, payload)) = try_read_frame(&mut rd).await {
                let mut p = peer.lock().unwrap();
                let code = |at: usize| {
                    payload
                        .get(at..at + 4)
                        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                };
                match kind {
                    // The first answer counts: a GOAWAY may follow a response.
                    _ if p.answered.is_some() => {}
                    1 if stream == 1 => p.answered = Some(H2Answer::Headers),
                    3 if stream == 1 => p.answered = Some(H2Answer::Reset(code(0))),
                    7 => p.answered = Some(H2Answer::GoAway(code(4))),
                    // SETTINGS (not an ACK): INITIAL_WINDOW_SIZE sets the stream's window.
                    4 if flags & 1 == 0 => {
                        for setting in payload.chunks_exact(6) {
                            let id = u16::from_be_bytes([setting[0], setting[1]]);
                            let v = u32::from_be_bytes([
                                setting[2], setting[3], setting[4], setting[5],
                            ]);
                            if id == 4 {
                                p.stream_window += i64::from(v) - 65_535;
                            }
                        }
                        p.settings_to_ack += 1;
                    }
                    8 => {
                        let inc =
                            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                                & !(1 << 31);
                        if stream == 0 {
                            p.conn_window += i64::from(inc);
                        } else if stream == 1 {
                            p.stream_window += i64::from(inc);
                        }
                    }
                    _ => {}
                }
            }
            peer.lock()
                .unwrap()
                .answered
                .get_or_insert(H2Answer::Closed);
        })
    };
    let mut start = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    start.extend(frame(4, 0, 0, &[]));
    let headers = hpack_literals(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "localhost"),
        (":path", "/api/v1/namespaces/default/configmaps"),
        ("content-type", "application/json"),
    ]);
    // END_HEADERS, not END_STREAM: the body follows, and is never ended.
    start.extend(frame(1, 0x4, 1, &headers));
    wr.write_all(&start).await.unwrap();
    let before = rss();
    // One byte of data, a pad-length byte and 254 bytes of padding: 256 flow-controlled bytes.
    let mut padded = vec![254u8, b'{'];
    padded.extend([0u8; 254]);
    let data = frame(0, 0x8, 1, &padded);
    const FRAMES: usize = 160_000;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut sent = 0;
    while sent < FRAMES && tokio::time::Instant::now() < deadline {
        let (batch, acks) = {
            let mut p = peer.lock().unwrap();
            if p.answered.is_some() {
                break;
            }
            let room = p.conn_window.min(p.stream_window) / 256;
            let batch = (room.max(0) as usize).min(64).min(FRAMES - sent);
            p.conn_window -= 256 * batch as i64;
            p.stream_window -= 256 * batch as i64;
            (batch, std::mem::take(&mut p.settings_to_ack))
        };
        let mut out = Vec::new();
        for _ in 0..acks {
            out.extend(frame(4, 1, 0, &[]));
        }
        for _ in 0..batch {
            out.extend_from_slice(&data);
        }
        if !out.is_empty() && wr.write_all(&out).await.is_err() {
            break;
        }
        sent += batch;
        if batch == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grew = rss().saturating_sub(before);
    let answered = peer.lock().unwrap().answered;
    eprintln!(
        "H2-PAD: {sent} padded frames sent ({} KiB on the wire), answered: {answered:?}, RSS +{} KiB",
        sent * data.len() / 1024,
        grew / 1024
    );
    let answered = answered.expect("the body was never refused");
    assert!(
        sent < 20_000,
        "refused only after {sent} frames: the limit counts the wire"
    );
    assert!(
        grew < 8 << 20,
        "the server grew {grew} B for {sent} body bytes"
    );
    // Two refusals, each bounded: the handler reads the frames and answers upstream's 413 once
    // their framing outweighs their data (`http/body.rs`); or, when the handler falls behind (a
    // loaded machine), the frames it has not read yet use up h2's budget for small DATA frames
    // (half the connection's window of framing overhead) and h2 ends the connection with
    // ENHANCE_YOUR_CALM before the handler gets to them.
    let refused_413 = requests_with_code(&s.url, &ca, 413).await - refused_before;
    match answered {
        H2Answer::Headers => assert_eq!(refused_413, 1, "refused with upstream's 413"),
        // The handler may have refused it too, just before h2 did.
        H2Answer::GoAway(11) => assert!(refused_413 <= 1, "{refused_413} refusals of one body"),
        other => panic!("the body was refused with {other:?}, neither 413 nor ENHANCE_YOUR_CALM"),
    }
    reader.abort();
}

/// Issue 35, H1-CHUNKS: one chunked POST of 3 MiB sent in 1-byte chunks added 179 MiB to the
/// server. Each chunk is now copied into the body's one buffer and dropped, and its size line and
/// CRLFs count against the limit: refused with 413 once its framing outweighs its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_one_byte_chunks_costs_its_data_not_its_chunks() {
    let pki = pki();
    let s = TestServer::start_tls(ServerConfig::default(), pki.tls()).await;
    let ca = pki.ca.cert_file.clone();
    let mut tls = connect(&s.url, client_config(&ca, None, &[b"http/1.1"]))
        .await
        .unwrap();
    tls.write_all(
        b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n\
          Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let (mut rd, mut wr) = tokio::io::split(tls);
    let answer = tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut out)).await;
        out
    });
    let before = rss();
    // Under the limit's 3 MiB of data, and left open: what the server holds is measured while
    // it still holds it.
    const CHUNKS: usize = (3 << 20) - 4096;
    let batch = b"1\r\nx\r\n".repeat(4096);
    let mut sent = 0;
    while sent < CHUNKS && !answer.is_finished() {
        if wr.write_all(&batch).await.is_err() {
            break;
        }
        sent += 4096;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grew = rss().saturating_sub(before);
    let _ = wr.write_all(b"0\r\n\r\n").await;
    let answer = answer.await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    eprintln!(
        "H1-CHUNKS: {sent} one-byte chunks sent, RSS +{} KiB, answer: {}",
        grew / 1024,
        text.lines().next().unwrap_or_default()
    );
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        text.contains(r#""reason":"RequestEntityTooLarge""#),
        "{text}"
    );
    assert!(
        grew < 16 << 20,
        "the server grew {grew} B for {sent} body bytes"
    );
}

/// Writes `n` ConfigMaps of 100 KB each into the server's etcd (`default`), as JSON.
async fn big_config_maps(s: &TestServer, n: usize) {
    let mut etcd = support::etcd::client(&[s.etcd.server.url()]).await;
    let data = "x".repeat(100_000);
    for i in 0..n {
        let name = format!("big-{i}");
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{i}"),
                "creationTimestamp": "2026-11-28T00:00:00Z"},
            "data": {"k": data}});
        put_rev(
            &mut etcd,
            &format!("/registry/configmaps/default/{name}"),
            cm.to_string(),
        )
        .await;
    }
}

/// Issue 35, H1-SLOWREAD and H2-ZEROWIN: with `--request-timeout 5s`, 9 MB LISTs whose client
/// never read (HTTP/1.1) or never opened its window (HTTP/2) were still held 12 s later, with
/// their snapshot. The timeout now covers the whole response: at it the HTTP/1.1 connection is
/// closed and the HTTP/2 stream reset (`INTERNAL_ERROR`), as kube-apiserver aborts its handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_its_client_does_not_take_ends_at_the_request_timeout() {
    let pki = pki();
    let s = TestServer::start_tls(
        ServerConfig {
            request_timeout: Duration::from_secs(2),
            ..ServerConfig::default()
        },
        pki.tls(),
    )
    .await;
    let ca = pki.ca.cert_file.clone();
    big_config_maps(&s, 90).await;
    // The cache has them all: a LIST of 9 MB.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = request(
            &s.url,
            &ca,
            "GET /api/v1/namespaces/default/configmaps?limit=1&continue= HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        if got.contains("big-89") || got.contains(r#""remainingItemCount":89"#) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not cached: {got:.300}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // HTTP/1.1: the request, and nothing read until well past the timeout.
    let mut h1 = connect(&s.url, client_config(&ca, None, &[b"http/1.1"]))
        .await
        .unwrap();
    h1.write_all(b"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // HTTP/2: a stream window of 0, so that no DATA may come.
    let mut h2 = connect(&s.url, client_config(&ca, None, &[b"h2"]))
        .await
        .unwrap();
    let mut start = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    start.extend(frame(4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    let headers = hpack_literals(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "localhost"),
        (":path", "/api/v1/namespaces/default/configmaps"),
    ]);
    start.extend(frame(1, 0x4 | 0x1, 1, &headers));
    h2.write_all(&start).await.unwrap();
    let started = tokio::time::Instant::now();

    // The HTTP/2 stream is reset at the deadline: its RST_STREAM is INTERNAL_ERROR (2).
    let reset = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (kind, _, stream, payload) = read_frame(&mut h2).await;
            assert!(kind != 0, "DATA sent through a window of 0");
            if kind == 3 && stream == 1 {
                return u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
            }
        }
    })
    .await
    .expect("the HTTP/2 stream is reset within 10 s");
    let waited = started.elapsed();
    assert_eq!(reset, 2, "INTERNAL_ERROR");
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(6),
        "{waited:?}"
    );

    // The HTTP/1.1 connection was closed at the deadline: what was sent before it is there to
    // read, then the end, well short of the whole list.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match h1.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
    })
    .await;
    assert!(
        end.is_ok(),
        "the connection is still open after {got} bytes"
    );
    assert!(got < 9_000_000, "the whole list was sent: {got} bytes");
}

/// C-FDLIMIT (issue 35): on TLS a connection counts as waiting for its first request from its
/// accept; an HTTP/2 connection stops counting with its first bytes (its preface), so a client
/// whose h2 connection is open is not refused its next connection by a per-address bound of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_stops_counting_as_silent_once_it_has_spoken() {
    let pki = pki();
    let config = ServerConfig {
        max_idle_connections_per_address: 1,
        ..ServerConfig::default()
    };
    let s = TestServer::start_tls(config, pki.tls()).await;
    let ca = &pki.ca.cert_file;
    let mut c = connect(&s.url, client_config(ca, None, &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(c.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    c.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    // GET /livez (:method GET, :scheme https, :path and :authority literal, not indexed).
    let mut block = vec![0x82, 0x87, 0x04, 6];
    block.extend_from_slice(b"/livez");
    block.extend_from_slice(&[0x01, 1, b'x']);
    c.write_all(&frame(0x1, 0x4 | 0x1, 1, &block))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let (ty, _, id, payload) = read_frame(&mut c).await;
            assert_ne!(ty, 0x7, "GOAWAY: {payload:?}");
            if ty == 0x1 && id == 1 {
                break;
            }
        }
    })
    .await
    .expect("the h2 request is answered");
    // The h2 connection stays open; the same address's next connection is not over the bound.
    let next = request(
        &s.url,
        ca,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(next.starts_with("HTTP/1.1 200"), "{next}");
    // While a silent one (no handshake yet) does fill it.
    let _silent = tokio::net::TcpStream::connect(addr(&s.url)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let over = request(
        &s.url,
        ca,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(over.starts_with("HTTP/1.1 503"), "{over}");
    drop(c);
}

// C-FDLIMIT (issue 35): clients that open connections and send nothing, past the open-file
// limit, on the real binary.

/// Silent connections opened: more than a limit of 1 024 descriptors can hold.
const SILENT: usize = 1_030;

/// `watchcache serve` over TLS on a test's etcd, started with its open-file limit set to
/// `soft`/`hard`, with these extra flags; waits until it is ready.
async fn serve_limited(
    etcd: &str,
    pki: &Pki,
    (soft, hard): (u64, u64),
    flags: &[&str],
) -> (Serve, String) {
    use std::os::unix::process::CommandExt;
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_watchcache"));
    cmd.args(["serve", "--etcd", etcd, "--resources", "configmaps"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--tls-cert-file")
        .arg(&pki.serving.cert_file)
        .arg("--tls-private-key-file")
        .arg(&pki.serving.key_file)
        .arg("--data-dir")
        .arg(&pki.dir)
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // SAFETY: between fork and exec the closure only calls setrlimit (async-signal-safe) and
    // allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let serve = Serve {
        child: cmd.spawn().unwrap(),
    };
    let url = format!("https://127.0.0.1:{port}");
    for _ in 0..300 {
        if let Ok(Ok(a)) = tokio::time::timeout(
            Duration::from_secs(2),
            request_from(
                "127.0.0.1",
                &url,
                &pki.ca.cert_file,
                "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            ),
        )
        .await
            && a.starts_with("HTTP/1.1 200")
        {
            return (serve, url);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("watchcache serve did not become ready");
}

/// One request over a new TLS HTTP/1.1 connection from the loopback address `from` (any of
/// 127.0.0.0/8): the whole answer.
async fn request_from(from: &str, url: &str, ca: &Path, head: &str) -> std::io::Result<String> {
    let tcp = tokio::net::TcpSocket::new_v4()?;
    tcp.bind(format!("{from}:0").parse().unwrap())?;
    let tcp = tcp.connect(addr(url).parse().unwrap()).await?;
    let mut s = tokio_rustls::TlsConnector::from(client_config(ca, None, &[b"http/1.1"]))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    s.write_all(head.as_bytes()).await?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The server's open-file limit as /proc shows it: (soft, hard).
fn open_file_limit(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (v[0], v[1])
}

/// The hard open-file limit of this process, its soft one raised to it: the test's own end of
/// the silent connections must not be what runs out.
fn raise_own_open_file_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit`, which we own; setrlimit reads it.
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_max
}

/// Opens [`SILENT`] TCP connections from 127.0.0.1 that never start their handshake, and keeps
/// them open.
async fn silent_connections(url: &str) -> Vec<tokio::net::TcpStream> {
    assert!(raise_own_open_file_limit() > 2 * SILENT as u64);
    let mut silent = Vec::with_capacity(SILENT);
    for _ in 0..SILENT {
        // The kernel completes the TCP handshake whether or not the server accepts.
        let c = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect(addr(url)),
        )
        .await
        .expect("a connect completes in the listen queue")
        .unwrap();
        silent.push(c);
    }
    silent
}

/// A counter's value in a `/metrics` answer (0 when absent).
fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The serving client's request, within a deadline far below the header read timeout (30 s,
/// when silent connections would be closed and their descriptors freed).
async fn served_within(from: &str, url: &str, ca: &Path, secs: u64) -> (String, Duration) {
    let started = std::time::Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(secs),
        request_from(
            from,
            url,
            ca,
            "GET /api/v1/configmaps HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ),
    )
    .await
    .unwrap_or_else(|_| {
        panic!("a client from {from} was not served within {secs} s of {SILENT} silent connections")
    })
    .unwrap();
    (answer, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_past_a_soft_open_file_limit_of_1024_leave_the_server_serving() {
    let pki = pki();
    let etcd = support::etcd::etcd().await;
    let hard = raise_own_open_file_limit();
    assert!(
        hard > 2 * SILENT as u64,
        "this test needs a hard open-file limit above {}: it is {hard}",
        2 * SILENT
    );
    // No bound on silent connections: only the raised limit can keep the server serving.
    let (serve, url) = serve_limited(
        &etcd.server.url(),
        &pki,
        (1_024, hard),
        &[
            "--max-idle-connections",
            "0",
            "--max-idle-connections-per-address",
            "0",
        ],
    )
    .await;
    assert_eq!(
        open_file_limit(serve.child.id()),
        (hard, hard),
        "the server raised its soft limit to the hard one"
    );
    let silent = silent_connections(&url).await;
    let (answer, took) = served_within("127.0.0.1", &url, &pki.ca.cert_file, 10).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    eprintln!(
        "served in {took:?} next to {} silent connections",
        silent.len()
    );
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_past_a_hard_open_file_limit_of_1024_leave_the_server_serving() {
    let pki = pki();
    let etcd = support::etcd::etcd().await;
    // Raising cannot help here: the defaults bound silent connections (256 from one address,
    // 512 in all: half the limit), and accepts failing with EMFILE pause instead of spinning.
    let (serve, url) = serve_limited(&etcd.server.url(), &pki, (1_024, 1_024), &[]).await;
    assert_eq!(open_file_limit(serve.child.id()), (1_024, 1_024));
    let silent = silent_connections(&url).await;
    // Another client, from another address, is served while the silent ones stay open.
    let (answer, took) = served_within("127.0.0.2", &url, &pki.ca.cert_file, 10).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let metrics = request_from(
        "127.0.0.3",
        &url,
        &pki.ca.cert_file,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let refused = counter(
        &metrics,
        "watchcache_connections_refused_total{reason=\"idle_per_address\"} ",
    );
    assert!(
        refused >= (SILENT - 256) as u64,
        "every silent connection past 256 from one address is refused: {refused}"
    );
    // 256 kept and the others refused after a 1 s linger for their handshake: when the silent
    // connections arrive within that second, more than 1 024 descriptors are wanted for a moment
    // and accepts fail with EMFILE until the lingers end (usually; not when they arrive slower).
    let emfile = counter(
        &metrics,
        "watchcache_accept_errors_total{reason=\"EMFILE\"} ",
    );
    eprintln!(
        "served in {took:?} next to {} silent connections: {refused} refused, {emfile} EMFILE",
        silent.len()
    );
    drop(silent);
}

//! Live heap bytes per idle watch connection on the server, with a counting allocator: the server
//! runs in process against a local etcd, and N raw TCP clients each open one watch and stay idle.
//!
//! `cargo run --release --example conn_memory -- [N] [routed|unrouted] [gzip] [tls|h2[=S]]`: with
//! `gzip`, every watch asks for `Accept-Encoding: gzip`, as client-go does by default.
//!
//! - `tls`: the server serves TLS; N TLS HTTP/1.1 connections each open one watch (the fast path).
//! - `h2=S` (default S = 18, a kubelet's watches): the server serves TLS; N/S HTTP/2 connections
//!   each open one watch stream, then S - 1 more. Reported: the cost of a connection with its first
//!   stream, and the cost of each further idle watch stream on a shared connection.
//!
//! - `rustls`: with `tls`, the server keeps every watch's connection in rustls instead of handing
//!   a TLS 1.3 watch down to its sending half (`ServerConfig::tls_watch_hand_down`), for the
//!   figure before that change.
//!
//! - `proto`: with `tls` or `h2`, the watches ask for protobuf
//!   (`application/vnd.kubernetes.protobuf;stream=watch`), as a kubelet does.
//! - `bookmarks`: every watch asks for `allowWatchBookmarks=true`, as a kubelet's do (its
//!   stream then waits for its periodic bookmark too).
//! - `live`: after the report, the process exits at once with every connection still open, so
//!   that a heap profiler's "leaked" allocations are those live while idle:
//!   `heaptrack target/release/examples/conn_memory 1800 routed h2=18 proto live`, then
//!   `heaptrack_print -f heaptrack.conn_memory.*.zst --print-leaks 1 -n 40`.
//!
//! With TLS the clients run in a child process (this example, re-run as `client`), so that their
//! own TLS state is not counted; without, in a thread with blocking sockets (they allocate nothing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use watchcache::{CacheConfig, ResourceDef};
use watchcache_etcd::{EtcdCaches, EtcdConfig, LocalEtcd};
use watchcache_server::{Served, Server, ServerConfig, TlsConfig};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The same, each allocation rounded up to the block mimalloc (the binary's allocator) gives it:
/// what the allocations hold in the server's RSS.
static HELD: AtomicIsize = AtomicIsize::new(0);
/// Live allocations by size class (powers of two from 16 B to 1 MiB), to see what dominates.
static CLASSES: [AtomicIsize; 17] = [const { AtomicIsize::new(0) }; 17];

fn class(size: usize) -> usize {
    (usize::BITS - size.max(16).leading_zeros())
        .saturating_sub(5)
        .min(16) as usize
}

/// What an allocation of `size` holds in the binary's allocator (mimalloc).
fn held(size: usize) -> isize {
    isize::try_from(watchcache_server::mimalloc_block(size)).unwrap_or(isize::MAX)
}

// A global allocator is unsafe by contract: this one only counts, then calls the system's.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        HELD.fetch_add(held(l.size()), Ordering::Relaxed);
        CLASSES[class(l.size())].fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        HELD.fetch_sub(held(l.size()), Ordering::Relaxed);
        CLASSES[class(l.size())].fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        HELD.fetch_add(held(new) - held(l.size()), Ordering::Relaxed);
        CLASSES[class(l.size())].fetch_sub(l.size() as isize, Ordering::Relaxed);
        CLASSES[class(new)].fetch_add(new as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// How the clients connect.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Transport {
    Plain,
    Tls,
    /// HTTP/2 over TLS, this many watch streams per connection.
    H2(usize),
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("client") {
        return client::run().await;
    }
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let routed = std::env::args().nth(2).is_none_or(|a| a == "routed");
    let gzip = std::env::args().skip(3).any(|a| a == "gzip");
    let proto = std::env::args().skip(3).any(|a| a == "proto");
    let live = std::env::args().skip(3).any(|a| a == "live");
    let bookmarks = if std::env::args().skip(3).any(|a| a == "bookmarks") {
        "&allowWatchBookmarks=true"
    } else {
        ""
    };
    let transport = std::env::args()
        .skip(3)
        .find_map(|a| match a.split_once('=') {
            _ if a == "tls" => Some(Transport::Tls),
            _ if a == "h2" => Some(Transport::H2(18)),
            Some(("h2", s)) => s.parse().ok().map(Transport::H2),
            _ => None,
        })
        .unwrap_or(Transport::Plain);
    let accept = if gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    let dir = std::env::temp_dir().join(format!("conn-memory-{}", std::process::id()));
    let etcd = LocalEtcd::start(&dir).await?;
    let pods = ResourceDef::builtin("pods").ok_or("pods")?;
    let caches = EtcdCaches::connect(
        EtcdConfig::new([etcd.url()]),
        vec![pods],
        CacheConfig::default(),
    )
    .await?;
    let pods = caches.cache("pods").ok_or("pods")?;
    tokio::time::timeout(Duration::from_secs(20), pods.wait_ready()).await??;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut server = Server::new(
        ServerConfig {
            tls_watch_hand_down: !std::env::args().skip(3).any(|a| a == "rustls"),
            ..ServerConfig::default()
        },
        caches.caches().map(|(_, c)| Served::new(c.clone())),
    );
    if transport != Transport::Plain {
        server = server.with_tls(pki(&dir)?)?;
    }
    tokio::spawn(server.serve(listener, std::future::pending()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    if transport != Transport::Plain {
        let result = measure_tls(
            addr, &dir, n, routed, gzip, proto, bookmarks, transport, live,
        )
        .await;
        drop(etcd);
        let _ = std::fs::remove_dir_all(dir);
        if matches!(&result, Err(e) if e.to_string() == LIVE_EXIT) {
            std::process::exit(0);
        }
        return result;
    }
    // Clients in a plain thread with blocking sockets, so their memory is counted apart.
    let before = LIVE.load(Ordering::Relaxed);
    let classes_before: Vec<isize> = CLASSES.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let clients = std::thread::spawn(move || {
        let mut socks = Vec::with_capacity(n);
        for i in 0..n {
            let mut s = std::net::TcpStream::connect(addr).expect("connect");
            let sel = if routed {
                format!("&fieldSelector=spec.nodeName%3Dnode-{i}")
            } else {
                String::new()
            };
            write!(
                s,
                "GET /api/v1/pods?watch=1&resourceVersion=1{sel}{bookmarks} HTTP/1.1\r\nHost: x\r\n{accept}\r\n"
            )
            .expect("send");
            socks.push(s);
        }
        socks
    });
    let socks = tokio::task::spawn_blocking(move || clients.join().expect("clients")).await?;
    let client_bytes = socks.capacity() * std::mem::size_of::<std::net::TcpStream>();
    tokio::time::sleep(Duration::from_secs(2)).await;
    if gzip {
        // One event through every (unrouted) watch first, so the figure is that of a gzip watch
        // that has compressed something and gone idle, not one that never started its stream.
        // Written straight into etcd, as kube-apiserver stores it: this server is read-only.
        let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"probe","namespace":"default"},"spec":{"nodeName":"node-0"}}"#;
        let value = watchcache_etcd::stored_value(pod.as_bytes())?;
        let mut kv = caches.client().kv_client();
        kv.put("/registry/pods/default/probe", value, None).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let after = LIVE.load(Ordering::Relaxed);
    let per = (after - before - client_bytes as isize) as f64 / n as f64;
    println!(
        "{n} idle {}{}{} watch connections: {per:.0} live heap bytes per connection on the server",
        if routed { "routed" } else { "unrouted" },
        if gzip { " gzip" } else { "" },
        if bookmarks.is_empty() {
            ""
        } else {
            " bookmarks"
        }
    );
    for (i, c) in CLASSES.iter().enumerate() {
        let d = c.load(Ordering::Relaxed) - classes_before[i];
        if d.abs() as f64 / n as f64 >= 64.0 {
            println!(
                "  allocations of {}..{} B: {:.0} B per connection",
                16usize << i,
                32usize << i,
                d as f64 / n as f64
            );
        }
    }
    drop(socks);
    drop(etcd);
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// A CA and a serving certificate for 127.0.0.1 in `dir`.
fn pki(dir: &std::path::Path) -> Result<TlsConfig, Box<dyn std::error::Error>> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate()?;
    std::fs::write(dir.join("ca.crt"), ca.self_signed(&ca_key)?.pem())?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &issuer)?;
    std::fs::write(dir.join("s.crt"), cert.pem())?;
    std::fs::write(dir.join("s.key"), key.serialize_pem())?;
    Ok(TlsConfig::new(dir.join("s.crt"), dir.join("s.key")).with_client_ca(dir.join("ca.crt")))
}

/// Live heap now, held in mimalloc's blocks, and by size class.
fn snapshot() -> (isize, isize, Vec<isize>) {
    (
        LIVE.load(Ordering::Relaxed),
        HELD.load(Ordering::Relaxed),
        CLASSES.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
    )
}

fn report(
    what: &str,
    before: &(isize, isize, Vec<isize>),
    after: &(isize, isize, Vec<isize>),
    per: usize,
) {
    println!(
        "{what}: {:.0} live heap bytes each on the server ({:.0} in mimalloc's blocks)",
        (after.0 - before.0) as f64 / per as f64,
        (after.1 - before.1) as f64 / per as f64
    );
    for (i, (a, b)) in after.2.iter().zip(&before.2).enumerate() {
        let d = a - b;
        if d.abs() as f64 / per as f64 >= 64.0 {
            println!(
                "  allocations of {}..{} B: {:.0} B each",
                16usize << i,
                32usize << i,
                d as f64 / per as f64
            );
        }
    }
}

/// TLS clients in a child process; the server's heap measured after each phase. With `live`, the
/// process exits after the report, its connections open (see the module's doc).
#[allow(clippy::too_many_arguments)]
async fn measure_tls(
    addr: std::net::SocketAddr,
    dir: &std::path::Path,
    n: usize,
    routed: bool,
    gzip: bool,
    proto: bool,
    bookmarks: &str,
    transport: Transport,
    live: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let per_conn = match transport {
        Transport::H2(s) => s.max(1),
        _ => 1,
    };
    let conns = n.div_ceil(per_conn);
    let before = snapshot();
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .arg("client")
        .arg(addr.to_string())
        .arg(dir.join("ca.crt"))
        .arg(conns.to_string())
        .arg(per_conn.to_string())
        .arg(if matches!(transport, Transport::H2(_)) {
            "h2"
        } else {
            "http/1.1"
        })
        .arg(if routed { "routed" } else { "unrouted" })
        .arg(if gzip { "gzip" } else { "identity" })
        .arg(if proto { "proto" } else { "json" })
        .arg(format!("query={bookmarks}"))
        // A heap profiler's preload is for the server only.
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("stdout")?).lines();
    let expect = |l: Option<String>| match l.as_deref() {
        Some("opened") => Ok(()),
        other => Err(format!("client: {other:?}")),
    };
    expect(lines.next_line().await?)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let one = snapshot();
    let kind = format!(
        "{}{}{}{}",
        if routed { "routed" } else { "unrouted" },
        if gzip { " gzip" } else { "" },
        if proto { " protobuf" } else { "" },
        if bookmarks.is_empty() {
            ""
        } else {
            " bookmarks"
        }
    );
    match transport {
        Transport::H2(s) => {
            report(
                &format!("{conns} idle TLS HTTP/2 connections with one {kind} watch stream"),
                &before,
                &one,
                conns,
            );
            if s > 1 {
                stdin.write_all(b"more\n").await?;
                expect(lines.next_line().await?)?;
                tokio::time::sleep(Duration::from_secs(2)).await;
                let all = snapshot();
                report(
                    &format!(
                        "{} further idle {kind} watch streams ({s} per connection)",
                        conns * (s - 1)
                    ),
                    &one,
                    &all,
                    conns * (s - 1),
                );
            }
        }
        _ => report(
            &format!("{conns} idle TLS HTTP/1.1 {kind} watch connections"),
            &before,
            &one,
            conns,
        ),
    }
    if live {
        // Neither killed nor closed: the connections stay open until this process exits (the
        // child exits when its stdin closes with it).
        std::mem::forget((stdin, child));
        return Err(LIVE_EXIT.into());
    }
    drop(stdin);
    child.kill().await?;
    Ok(())
}

/// `measure_tls`'s way of asking `main` to exit with the connections open.
const LIVE_EXIT: &str = "live";

/// The clients (a child process): TLS connections with watches; "opened" on stdout once they are
/// all answered; on a line on stdin (h2), the further streams; exits when stdin closes.
mod client {
    use std::sync::Arc;

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, ServerName};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    pub(crate) async fn run() -> Result<(), Box<dyn std::error::Error>> {
        let a: Vec<String> = std::env::args().skip(2).collect();
        let [
            addr,
            ca,
            conns,
            per_conn,
            proto,
            routed,
            gzip,
            format,
            query,
        ] = &a[..]
        else {
            return Err("client: addr ca conns per-conn proto routed gzip format query=".into());
        };
        let query = query.strip_prefix("query=").unwrap_or_default();
        let media = if format == "proto" {
            "application/vnd.kubernetes.protobuf;stream=watch"
        } else {
            "application/json"
        };
        let (conns, per_conn): (usize, usize) = (conns.parse()?, per_conn.parse()?);
        let h2 = proto == "h2";
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca)? {
            roots.add(c?)?;
        }
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![proto.as_bytes().to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let path = |i: usize| {
            let sel = if routed == "routed" {
                format!("&fieldSelector=spec.nodeName%3Dnode-{i}")
            } else {
                String::new()
            };
            format!("/api/v1/pods?watch=1&resourceVersion=1{sel}{query}")
        };
        let accept = if gzip == "gzip" { "gzip" } else { "identity" };
        let mut held_h1 = Vec::new();
        let mut senders = Vec::new();
        let mut held_h2 = Vec::new();
        for c in 0..conns {
            let tcp = tokio::net::TcpStream::connect(addr.as_str()).await?;
            let mut tls = connector
                .connect(ServerName::try_from("127.0.0.1")?.to_owned(), tcp)
                .await?;
            if h2 {
                let (mut send, conn) = hyper::client::conn::http2::handshake(
                    hyper_util::rt::TokioExecutor::new(),
                    hyper_util::rt::TokioIo::new(tls),
                )
                .await?;
                tokio::spawn(conn);
                held_h2.push(watch(&mut send, &path(c * per_conn), accept, media).await?);
                senders.push(send);
            } else {
                tls.write_all(
                    format!(
                        "GET {} HTTP/1.1\r\nHost: x\r\nAccept: {media}\r\nAccept-Encoding: {accept}\r\n\r\n",
                        path(c)
                    )
                    .as_bytes(),
                )
                .await?;
                let mut head = [0u8; 12];
                tls.read_exact(&mut head).await?;
                if &head != b"HTTP/1.1 200" {
                    return Err(format!("{}", String::from_utf8_lossy(&head)).into());
                }
                held_h1.push(tls);
            }
        }
        println!("opened");
        let mut stdin = BufReader::new(tokio::io::stdin()).lines();
        if h2 && stdin.next_line().await?.is_some() {
            for (c, send) in senders.iter_mut().enumerate() {
                for s in 1..per_conn {
                    held_h2.push(watch(send, &path(c * per_conn + s), accept, media).await?);
                }
            }
            println!("opened");
        }
        while stdin.next_line().await?.is_some() {}
        drop((held_h1, held_h2, senders));
        Ok(())
    }

    async fn watch(
        send: &mut hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
        path: &str,
        accept: &str,
        media: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Box<dyn std::error::Error>> {
        send.ready().await?;
        let req = hyper::Request::get(format!("https://127.0.0.1{path}"))
            .header("accept", media)
            .header("accept-encoding", accept)
            .body(http_body_util::Empty::new())?;
        let resp = send.send_request(req).await?;
        if resp.status() != 200 {
            return Err(format!("watch: {}", resp.status()).into());
        }
        Ok(resp)
    }
}

//! Live heap bytes per idle watch connection on the server, with a counting allocator: the server
//! runs in process against a local etcd, and N raw TCP clients each open one watch and stay idle.
//!
//! `cargo run --release --example conn_memory -- [N] [routed|unrouted] [gzip]`: with `gzip`, every
//! watch asks for `Accept-Encoding: gzip`, as client-go does by default.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use watchcache::etcd::{EtcdCaches, EtcdConfig, LocalEtcd};
use watchcache::server::{Served, Server, ServerConfig};
use watchcache::{CacheConfig, ResourceDef};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Live allocations by size class (powers of two from 16 B to 1 MiB), to see what dominates.
static CLASSES: [AtomicIsize; 17] = [const { AtomicIsize::new(0) }; 17];

fn class(size: usize) -> usize {
    (usize::BITS - size.max(16).leading_zeros())
        .saturating_sub(5)
        .min(16) as usize
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        CLASSES[class(l.size())].fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        CLASSES[class(l.size())].fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        CLASSES[class(l.size())].fetch_sub(l.size() as isize, Ordering::Relaxed);
        CLASSES[class(new)].fetch_add(new as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let routed = std::env::args().nth(2).is_none_or(|a| a == "routed");
    let gzip = std::env::args().nth(3).is_some_and(|a| a == "gzip");
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
    caches
        .cache("pods")
        .ok_or("pods")?
        .wait_ready(Duration::from_secs(20))
        .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = Server::new(
        ServerConfig::default(),
        caches
            .caches()
            .map(|(_, c)| Served::new(c.clone(), caches.writes())),
    );
    tokio::spawn(server.serve(listener, std::future::pending()));
    tokio::time::sleep(Duration::from_millis(200)).await;
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
                "GET /api/v1/pods?watch=1&resourceVersion=1{sel} HTTP/1.1\r\nHost: x\r\n{accept}\r\n"
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
        tokio::task::spawn_blocking(move || create_pod(addr)).await??;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let after = LIVE.load(Ordering::Relaxed);
    let per = (after - before - client_bytes as isize) as f64 / n as f64;
    println!(
        "{n} idle {}{} watch connections: {per:.0} live heap bytes per connection on the server",
        if routed { "routed" } else { "unrouted" },
        if gzip { " gzip" } else { "" }
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

/// Creates one pod over HTTP, waiting for the answer.
fn create_pod(addr: std::net::SocketAddr) -> std::io::Result<()> {
    use std::io::Read;
    let body = r#"{"metadata":{"name":"probe"},"spec":{"nodeName":"node-0"}}"#;
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(
        s,
        "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    if !answer.starts_with(b"HTTP/1.1 201") {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&answer).into_owned(),
        ));
    }
    Ok(())
}

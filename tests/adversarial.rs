//! Hostile and careless clients against the real server over a real etcd (issue 9): every item
//! here failed once (a panic, a stored-then-500, a stall) and is kept fixed. Raw sockets where the
//! bytes on the wire matter; both watch transports (the fast path, which serves a connection's
//! first request, and hyper, which serves any later one) where both exist.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::server::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use watchcache::server::ServerConfig;

/// Reads from a raw socket until `end` appears, the peer closes, or `within` passes.
async fn read_until(s: &mut TcpStream, end: &[u8], within: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while !out.windows(end.len()).any(|w| w == end) {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    out
}

fn addr(s: &TestServer) -> String {
    s.url.trim_start_matches("http://").to_owned()
}

/// A request on a fresh connection, answered by the fast path when it is a watch.
async fn first_request(s: &TestServer, head: &str) -> TcpStream {
    let mut sock = TcpStream::connect(addr(s)).await.unwrap();
    sock.write_all(head.as_bytes()).await.unwrap();
    sock
}

/// A connection whose first request (a GET of /livez) went to hyper, so that the next request on
/// it is served by hyper too.
async fn hyper_connection(s: &TestServer) -> TcpStream {
    let mut sock = first_request(s, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let r = read_until(&mut sock, b"ok", Duration::from_secs(10)).await;
    assert!(r.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&r));
    sock
}

async fn create(c: &reqwest::Client, base: &str, ns: &str, body: &Value) -> reqwest::Response {
    c.post(format!("{base}/api/v1/namespaces/{ns}/pods"))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Issue 9, item 4: `timeoutSeconds` ≥ 2^63 panicked the connection's task, on both transports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_timeout_is_a_long_watch_not_a_panic() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    let r = create(&c, &s.url, "a", &json!({"metadata": {"name": "p"}})).await;
    assert_eq!(r.status(), 201);
    let head = "GET /api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=18446744073709551615 HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut fast = first_request(&s, head).await;
    let mut slow = hyper_connection(&s).await;
    slow.write_all(head.as_bytes()).await.unwrap();
    for (path, sock) in [("fast path", &mut fast), ("hyper", &mut slow)] {
        let got = read_until(sock, br#""name":"p""#, Duration::from_secs(10)).await;
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.contains("HTTP/1.1 200 OK") && text.contains(r#"{"type":"ADDED""#),
            "{path}: {text}"
        );
    }
    // Both watches are still open: nothing more arrives, and the connections are not closed.
    for sock in [&mut fast, &mut slow] {
        let mut buf = [0u8; 64];
        assert!(
            tokio::time::timeout(Duration::from_millis(300), sock.read(&mut buf))
                .await
                .is_err()
        );
    }
}

/// Issue 9, item 12: `limit` near 2^63 overflowed the page planner's arithmetic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_limit_lists_everything() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    for name in ["a", "b"] {
        let r = create(&c, &s.url, "ns", &json!({"metadata": {"name": name}})).await;
        assert_eq!(r.status(), 201);
    }
    for q in [
        "limit=9223372036854775807",
        "limit=9223372036854775807&labelSelector=x!%3Dy",
        "limit=4611686018427387904&fieldSelector=metadata.namespace%3Dns",
    ] {
        let r = c
            .get(format!("{}/api/v1/namespaces/ns/pods?{q}", s.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{q}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["items"].as_array().map(Vec::len), Some(2), "{q}: {v}");
    }
}

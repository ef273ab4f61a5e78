//! Hostile and careless clients against the real server over a real etcd (issue 9): every item
//! here failed once (a panic, a stored-then-500, a stall) and is kept fixed. Raw sockets where the
//! bytes on the wire matter; both watch transports (the fast path, which serves a connection's
//! first request, and hyper, which serves any later one) where both exist.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::server::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use watchcache_server::ServerConfig;
use watchcache_server::auth::{AuthConfig, Authenticator, Mode, RbacObjects, TokenFile};

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
    assert!(
        r.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&r)
    );
    sock
}

/// A pod put straight into etcd, as kube-apiserver stores it (the server is read-only).
async fn create(s: &TestServer, ns: &str, body: &Value) -> Value {
    s.seed(&format!("/api/v1/namespaces/{ns}/pods"), body).await
}

/// Issue 9, item 4: `timeoutSeconds` ≥ 2^63 panicked the connection's task, on both transports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_timeout_is_a_long_watch_not_a_panic() {
    let s = TestServer::start(ServerConfig::default()).await;
    create(&s, "a", &json!({"metadata": {"name": "p"}})).await;
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
        create(&s, "ns", &json!({"metadata": {"name": name}})).await;
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

async fn etcd_client(s: &TestServer) -> etcd_client::Client {
    support::etcd::client(&[s.etcd.server.url()]).await
}

/// Whether etcd holds a key.
async fn in_etcd(s: &TestServer, key: &str) -> bool {
    let r = etcd_client(s).await.get(key, None).await.unwrap();
    !r.kvs().is_empty()
}

/// Issue 36: writes are kube-apiserver's. Without an upstream API server to forward them to, the
/// server is a read-only cache of its etcd: every write (create, update, patch, delete, delete of
/// a collection, a write of `/status`) is 405 with upstream's `Status` naming the flag that
/// forwards writes, and etcd is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_read_only_server_are_405_and_store_nothing() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    create(&s, "ns", &json!({"metadata": {"name": "p"}})).await;
    let before = etcd_client(&s)
        .await
        .get("/registry/pods/ns/p", None)
        .await
        .unwrap()
        .kvs()[0]
        .mod_revision();
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}});
    let pods = format!("{}/api/v1/namespaces/ns/pods", s.url);
    for (method, url, ct) in [
        (reqwest::Method::POST, pods.clone(), "application/json"),
        (
            reqwest::Method::PUT,
            format!("{pods}/p"),
            "application/json",
        ),
        (
            reqwest::Method::PATCH,
            format!("{pods}/p"),
            "application/merge-patch+json",
        ),
        (
            reqwest::Method::PATCH,
            format!("{pods}/p"),
            "application/apply-patch+yaml",
        ),
        (
            reqwest::Method::DELETE,
            format!("{pods}/p"),
            "application/json",
        ),
        (reqwest::Method::DELETE, pods.clone(), "application/json"),
        (
            reqwest::Method::PUT,
            format!("{pods}/p/status"),
            "application/json",
        ),
        (
            reqwest::Method::PATCH,
            format!("{pods}/p/status"),
            "application/merge-patch+json",
        ),
        (
            reqwest::Method::POST,
            format!("{}/api/v1/namespaces", s.url),
            "application/json",
        ),
    ] {
        let r = c
            .request(method.clone(), &url)
            .header("content-type", ct)
            .body(pod.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method} {url}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (
                v["kind"].as_str(),
                v["status"].as_str(),
                v["reason"].as_str(),
                v["code"].as_u64()
            ),
            (
                Some("Status"),
                Some("Failure"),
                Some("MethodNotAllowed"),
                Some(405)
            ),
            "{method} {url}: {v}"
        );
        let message = v["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{method} is not supported on "))
                && message.contains("--apiserver-kubeconfig"),
            "{message}"
        );
    }
    let after = etcd_client(&s)
        .await
        .get("/registry/pods/ns/p", None)
        .await
        .unwrap()
        .kvs()[0]
        .mod_revision();
    assert_eq!(after, before, "the pod is as it was");
    let r = c.get(format!("{pods}/p")).send().await.unwrap();
    assert_eq!(r.status(), 200, "and still served");
    assert!(
        !in_etcd(&s, "/registry/namespaces/p").await,
        "no namespace created"
    );
}

/// Item 9: path segments are percent-decoded, and a watch by name pins the name exactly instead
/// of splicing it into selector text (`=` and `,` in a name gave 400), on both transports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_in_paths_are_decoded_and_watched_exactly() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    create(&s, "ns", &json!({"metadata": {"name": "a-b.c"}})).await;
    let r = c
        .get(format!("{}/api/v1/namespaces/n%73/pods/a%2Db%2Ec", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["metadata"]["name"], "a-b.c");
    let watch = |name: &str| {
        format!(
            "GET /api/v1/namespaces/ns/pods/{name}?watch=1&resourceVersion=0&timeoutSeconds=1 HTTP/1.1\r\nHost: x\r\n\r\n"
        )
    };
    for name in [
        "a-b.c",
        "a%2Db.c",
        "x%3Dy%2Cz",
        "a-b.c,metadata.name!%3Da-b.c",
    ] {
        let mut fast = first_request(&s, &watch(name)).await;
        let mut slow = hyper_connection(&s).await;
        slow.write_all(watch(name).as_bytes()).await.unwrap();
        for (path, sock) in [("fast path", &mut fast), ("hyper", &mut slow)] {
            let got = read_until(sock, b"\r\n0\r\n\r\n", Duration::from_secs(10)).await;
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 200 OK"), "{path} {name}: {text}");
            let added = text.contains(r#""name":"a-b.c""#);
            assert_eq!(
                added,
                !name.starts_with('x') && !name.contains(','),
                "{path} {name}: {text}"
            );
        }
    }
}

/// Item 10: values in etcd that strict clients could not read (a lone surrogate, nesting 5 000
/// deep) are decode errors, counted and never served; every served body parses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_strict_clients_cannot_read_are_never_served() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    let mut etcd = etcd_client(&s).await;
    let good = r#"{"metadata":{"name":"good","namespace":"ns"}}"#;
    let surrogate = r#"{"metadata":{"name":"sur","namespace":"ns"},"x":"\ud800zz"}"#;
    let deep = format!(
        r#"{{"metadata":{{"name":"deep","namespace":"ns"}},"x":{}0{}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    for (k, v) in [
        ("sur", surrogate.to_owned()),
        ("deep", deep),
        ("good", good.to_owned()),
    ] {
        etcd.put(format!("/registry/pods/ns/{k}"), v, None)
            .await
            .unwrap();
    }
    // A consistent LIST waits for the cache to reach etcd's revision.
    let body = c
        .get(format!("{}/api/v1/namespaces/ns/pods", s.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let list: Value = serde_json::from_slice(&body).unwrap();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["good"]);
    let metrics = c
        .get(format!("{}/metrics", s.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let errors: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("watchcache_decode_errors_total{resource=\"pods\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    // Each read that meets them counts them: the follower's watch, and here (etcd 3.4) the
    // consistent LIST's range read too.
    assert!(errors >= 2, "{metrics}");
}

/// Item 13: upstream's conventions. Option combinations upstream refuses are 422 Invalid; a
/// continue token at a revision etcd has not reached is a 504 `Status` with Retry-After (what a
/// resourceVersion the cache has not reached gets), never 500 with etcd's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conventions_follow_upstream() {
    use base64::Engine;
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    let base = &s.url;
    for q in [
        "continue=abc&resourceVersionMatch=NotOlderThan&resourceVersion=1",
        "resourceVersionMatch=Exact",
        "watch=1&resourceVersionMatch=NotOlderThan",
    ] {
        let r = c
            .get(format!("{base}/api/v1/pods?{q}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{q}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["reason"], "Invalid", "{q}: {v}");
        assert_eq!(
            v["details"]["causes"][0]["field"], "resourceVersionMatch",
            "{v}"
        );
    }
    create(&s, "ns", &json!({"metadata": {"name": "a"}})).await;
    let future = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(r#"{"v":"meta.k8s.io/v1","rv":999999999,"start":"ns/a\u0000"}"#);
    let r = c
        .get(format!("{base}/api/v1/pods?limit=1&continue={future}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (
            v["reason"].as_str(),
            v["details"]["causes"][0]["reason"].as_str()
        ),
        (Some("Timeout"), Some("ResourceVersionTooLarge")),
        "{v}"
    );
    assert!(!v["message"].as_str().unwrap().contains("etcd"), "{v}");
}

/// Tokens of the servers with authentication below: `admin` (system:masters); `alice` may watch
/// pods in `a`, get and list only the pod `one` there, and create and list configmaps there;
/// `bob` may only watch the pod `one`.
const TOKENS: &str = "admin,admin,0,system:masters\nalice,alice,1\nbob,bob,2\ncarol,carol,3\n";

fn auth_config() -> AuthConfig {
    let mut rbac = RbacObjects::default();
    for o in [
        json!({"kind": "Role", "metadata": {"name": "alice", "namespace": "a"}, "rules": [
            {"verbs": ["watch"], "apiGroups": [""], "resources": ["pods"]},
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["one"]},
            {"verbs": ["create", "list"], "apiGroups": [""], "resources": ["configmaps"]}]}),
        json!({"kind": "Role", "metadata": {"name": "bob", "namespace": "a"}, "rules": [
            {"verbs": ["watch"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["one"]}]}),
        json!({"kind": "RoleBinding", "metadata": {"name": "alice", "namespace": "a"},
            "subjects": [{"kind": "User", "name": "alice"}], "roleRef": {"kind": "Role", "name": "alice"}}),
        // carol may do what alice may: a second user of the same rights (issue 35, item 5).
        json!({"kind": "RoleBinding", "metadata": {"name": "carol", "namespace": "a"},
            "subjects": [{"kind": "User", "name": "carol"}], "roleRef": {"kind": "Role", "name": "alice"}}),
        json!({"kind": "RoleBinding", "metadata": {"name": "bob", "namespace": "a"},
            "subjects": [{"kind": "User", "name": "bob"}], "roleRef": {"kind": "Role", "name": "bob"}}),
    ] {
        rbac.add(o).unwrap();
    }
    AuthConfig {
        authenticator: Authenticator {
            tokens: Some(TokenFile::parse("tokens.csv", TOKENS).unwrap()),
            ..Authenticator::default()
        },
        modes: vec![Mode::Rbac],
        rbac_bootstrap: rbac,
    }
}

async fn auth_server(config: ServerConfig) -> TestServer {
    TestServer::start_with_server(
        config,
        |_| {},
        watchcache::ResourceDef::builtins(),
        |s| s.with_auth(auth_config()),
    )
    .await
}

/// The status code of an answer read so far (0 when there is no status line).
fn status_of(answer: &[u8]) -> u16 {
    String::from_utf8_lossy(answer)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A GET of `target` as `token` on both transports: on a new connection (the watch fast path
/// serves it when it is a watch) and on a connection hyper serves. What came back on each, until
/// `end` (or an answer's end).
async fn on_both_paths(s: &TestServer, token: &str, target: &str, end: &[u8]) -> [Vec<u8>; 2] {
    let head = format!("GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n");
    let mut fast = first_request(s, &head).await;
    let mut slow = hyper_connection(s).await;
    slow.write_all(head.as_bytes()).await.unwrap();
    let mut out = [Vec::new(), Vec::new()];
    for (i, sock) in [&mut fast, &mut slow].into_iter().enumerate() {
        let mut got = read_until(sock, b"\r\n\r\n", Duration::from_secs(10)).await;
        if status_of(&got) == 200 && !got.windows(end.len()).any(|w| w == end) {
            got.extend(read_until(sock, end, Duration::from_secs(10)).await);
        }
        out[i] = got;
    }
    out
}

/// Issue 20, item 13, and issue 21, item 2: one admission function for both transports. A
/// repeated `watch=` was authorized as a watch and served as a LIST (alice, who may watch but
/// not list, got the list); the first value now counts for both. And a rule added to admission
/// (a field selector on `metadata.name` authorizes as that name, item 15) holds on both paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_is_one_rule_on_both_transports() {
    let s = auth_server(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    for name in ["one", "two"] {
        create(&s, "a", &json!({"metadata": {"name": name}})).await;
    }
    let pods = "/api/v1/namespaces/a/pods";
    for (path, got) in ["fast path", "hyper"].iter().zip(
        on_both_paths(
            &s,
            "alice",
            &format!("{pods}?watch=1&watch=0&resourceVersion=0"),
            br#""name":"two""#,
        )
        .await,
    ) {
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 200")
                && text.contains(r#"{"type":"ADDED""#)
                && !text.contains("PodList"),
            "{path}: a watch, as authorized: {text}"
        );
    }
    for (path, got) in ["not a watch: hyper", "hyper"]
        .iter()
        .zip(on_both_paths(&s, "alice", &format!("{pods}?watch=0&watch=1"), b"}").await)
    {
        assert_eq!(
            status_of(&got),
            403,
            "{path}: a list, which alice may not: {}",
            String::from_utf8_lossy(&got)
        );
    }
    // bob may watch the pod `one` only: a watch selecting it by name is his, on both paths, and
    // sees only it; any other watch is 403 on both.
    let one = format!("{pods}?watch=1&resourceVersion=0&fieldSelector=metadata.name%3Done");
    for (path, got) in ["fast path", "hyper"]
        .iter()
        .zip(on_both_paths(&s, "bob", &one, br#""name":"one""#).await)
    {
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 200")
                && text.contains(r#""name":"one""#)
                && !text.contains(r#""name":"two""#),
            "{path}: {text}"
        );
    }
    for target in [
        format!("{pods}?watch=1"),
        format!("{pods}?watch=1&fieldSelector=metadata.name%3Dtwo"),
        format!("{pods}?watch=1&fieldSelector=metadata.name%21%3Dtwo"),
    ] {
        for (path, got) in ["fast path", "hyper"]
            .iter()
            .zip(on_both_paths(&s, "bob", &target, b"}").await)
        {
            assert_eq!(
                status_of(&got),
                403,
                "{path} {target}: {}",
                String::from_utf8_lossy(&got)
            );
        }
    }
    // alice lists the pod her grant names, and nothing else.
    let list = |q: &'static str| {
        let c = c.clone();
        let url = format!("{}{pods}{q}", s.url);
        async move { c.get(url).bearer_auth("alice").send().await.unwrap() }
    };
    let r = list("?fieldSelector=metadata.name%3Done").await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["items"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(list("").await.status(), 403);
    assert_eq!(
        list("?fieldSelector=metadata.name%3Dtwo").await.status(),
        403
    );
    // Item 15: `Bearer  token` (two spaces) is no token: 401 (anonymous is off), as upstream.
    let r = c
        .get(format!("{}/api/v1/pods", s.url))
        .header("authorization", "Bearer  admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let head =
        "GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer  admin\r\n\r\n";
    let mut fast = first_request(&s, head).await;
    assert_eq!(
        status_of(&read_until(&mut fast, b"\r\n\r\n", Duration::from_secs(10)).await),
        401
    );
}

/// Issue 20, item 4: four POSTs that sent one byte of their body held `--max-requests-inflight 4`
/// against everyone (masters included) for as long as they stalled. The permit is taken before
/// the body (issue 35: the bodies read at once are at most the seats), and a body that brings
/// less than 4 KiB in 100 ms gives it back until it goes on (`server/auth/gate.rs`); a stalled body
/// ends at `--request-timeout` with upstream's 504, and `system:masters` is never refused by the
/// limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_hold_no_permit_and_end_at_the_request_timeout() {
    let s = auth_server(ServerConfig {
        max_requests_inflight: 4,
        request_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    })
    .await;
    let started = tokio::time::Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut sock = TcpStream::connect(addr(&s)).await.unwrap();
        sock.write_all(b"POST /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{").await.unwrap();
        stalled.push(sock);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = reqwest::Client::new();
    let list = |token: &'static str, q: &'static str| {
        let c = c.clone();
        let url = format!("{}/api/v1/namespaces/a/configmaps{q}", s.url);
        async move { c.get(url).bearer_auth(token).send().await.unwrap().status() }
    };
    assert_eq!(
        list("alice", "").await,
        200,
        "the stalled bodies hold no permit"
    );
    // Each stalled body is answered 504 at the deadline, as upstream's timeout filter answers.
    for sock in &mut stalled {
        let got = read_until(sock, b"}", Duration::from_secs(10)).await;
        let text = String::from_utf8_lossy(&got);
        assert_eq!(status_of(&got), 504, "{text}");
        assert!(
            text.contains(r#""reason":"Timeout""#)
                && text.contains("Timeout: request did not complete within the allotted timeout"),
            "{text}"
        );
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    // Four reads that wait (a resourceVersion the cache has not reached: up to 3 s) hold the
    // four permits: alice's next request is 429, the admin's is served.
    let waiting: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(list(
                "alice",
                "?resourceVersion=999999999&resourceVersionMatch=NotOlderThan",
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(list("alice", "").await, 429);
    assert_eq!(
        list("admin", "").await,
        200,
        "system:masters is never refused"
    );
    for w in waiting {
        assert_eq!(w.await.unwrap(), 504);
    }
}

/// Issue 35, item 5: one FIFO for every user's in-flight requests. With
/// `--max-requests-inflight 4`, alice's 24 reads at a resourceVersion the cache has not reached
/// (each holds its seat for the 3 s it waits) queued ahead of carol's LISTs, which were 429 when
/// their queue wait ran out (3 of 4 tries). The queues are fair per user now: carol's LISTs take
/// the first seats that free, one seat's turn (those 3 s), not alice's backlog (18 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_users_waiting_reads_delay_another_user_by_one_seats_turn() {
    let s = auth_server(ServerConfig {
        max_requests_inflight: 4,
        // A queue wait of 4 s, longer than one of alice's reads holds its seat.
        request_timeout: Duration::from_secs(16),
        ..ServerConfig::default()
    })
    .await;
    let c = reqwest::Client::new();
    let list = |token: &'static str, q: &'static str| {
        let c = c.clone();
        let url = format!("{}/api/v1/namespaces/a/configmaps{q}", s.url);
        async move {
            let started = tokio::time::Instant::now();
            let status = c.get(url).bearer_auth(token).send().await.unwrap().status();
            (status, started.elapsed())
        }
    };
    let flooded = tokio::time::Instant::now();
    let flood: Vec<_> = (0..24)
        .map(|_| {
            tokio::spawn(list(
                "alice",
                "?resourceVersion=999999999&resourceVersionMatch=NotOlderThan",
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Four hold the seats, twenty wait (the admin is served without a seat).
    let metrics = c
        .get(format!("{}/metrics", s.url))
        .bearer_auth("admin")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "watchcache_current_executing_requests 4",
        "watchcache_current_inqueue_requests 20",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}");
    }
    let tries: Vec<_> = (0..4).map(|_| tokio::spawn(list("carol", ""))).collect();
    for t in tries {
        let (status, took) = t.await.unwrap();
        assert_eq!(status, 200, "after {took:?}");
        assert!(took < Duration::from_millis(3500), "{took:?}");
    }
    // alice's first four were answered at the end of their wait (504), the others still wait
    // (for a seat until 4 s, or for the resourceVersion).
    tokio::time::sleep_until(flooded + Duration::from_millis(3600)).await;
    let mut first: Vec<_> = Vec::new();
    for f in flood {
        if f.is_finished() {
            first.push(f.await.unwrap().0);
        } else {
            f.abort();
        }
    }
    assert_eq!(first, [504; 4]);
}

/// Sends `bytes` one at a time, `every` apart, until the server closes the connection; returns
/// how long the connection lived (or `None` if it outlived `within`).
async fn trickle(
    sock: &mut TcpStream,
    bytes: &[u8],
    every: Duration,
    within: Duration,
) -> Option<Duration> {
    let started = tokio::time::Instant::now();
    for b in bytes.iter().cycle() {
        if started.elapsed() > within {
            return None;
        }
        if sock.write_all(&[*b]).await.is_err() {
            return Some(started.elapsed());
        }
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(every, sock.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            _ => {}
        }
    }
    None
}

/// Item 7: the request head has one absolute deadline (a byte every 200 ms used to re-arm it
/// forever), on a connection's first request and on a later one (hyper's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_request_head_is_cut_at_its_deadline() {
    let s = TestServer::start(ServerConfig {
        header_read_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    })
    .await;
    // The whole head of a request that would be valid, never finished: "X-A: aaaa…".
    let head = b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\nX-A: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut first = TcpStream::connect(addr(&s)).await.unwrap();
    let lived = trickle(
        &mut first,
        head,
        Duration::from_millis(200),
        Duration::from_secs(8),
    )
    .await;
    assert!(
        lived.is_some_and(|d| d < Duration::from_secs(3)),
        "first request: {lived:?}"
    );
    let mut later = hyper_connection(&s).await;
    let lived = trickle(
        &mut later,
        head,
        Duration::from_millis(200),
        Duration::from_secs(8),
    )
    .await;
    assert!(
        lived.is_some_and(|d| d < Duration::from_secs(3)),
        "later request: {lived:?}"
    );
}

/// Item 7: beyond `max_connections`, a connection is answered 503 with a `Status` and Retry-After
/// and closed; a slot freed is usable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_refused_cleanly() {
    let s = TestServer::start(ServerConfig {
        max_connections: 3,
        ..ServerConfig::default()
    })
    .await;
    let watch = "GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut w1 = first_request(&s, watch).await;
    let mut w2 = first_request(&s, watch).await;
    for w in [&mut w1, &mut w2] {
        let r = read_until(w, b"chunked\r\n\r\n", Duration::from_secs(10)).await;
        assert!(
            r.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&r)
        );
    }
    let idle = TcpStream::connect(addr(&s)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = first_request(&s, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let r = read_until(&mut over, b"\0never", Duration::from_secs(5)).await;
    let text = String::from_utf8_lossy(&r);
    assert!(
        text.starts_with("HTTP/1.1 503 Service Unavailable\r\n")
            && text.contains("Retry-After: 1\r\n")
            && text.contains(r#""reason":"ServiceUnavailable""#)
            && text.contains(r#""code":503"#),
        "{text}"
    );
    // read_until returned because the server closed the connection.
    let mut buf = [0u8; 16];
    assert_eq!(over.read(&mut buf).await.unwrap_or(0), 0);
    drop(idle);
    let mut ok = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut sock = first_request(&s, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n").await;
        if read_until(&mut sock, b"ok", Duration::from_secs(5))
            .await
            .starts_with(b"HTTP/1.1 200")
        {
            ok = true;
            break;
        }
    }
    assert!(ok, "a freed slot is usable again");
}

/// A raw connection from the loopback address `from` (any of 127.0.0.0/8).
async fn connect_from(s: &TestServer, from: &str) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    sock.connect(addr(s).parse().unwrap()).await.unwrap()
}

/// The answer to a GET of /livez on a new connection from `from`, read until the server closes.
async fn livez_from(s: &TestServer, from: &str) -> String {
    let mut sock = connect_from(s, from).await;
    sock.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let r = read_until(&mut sock, b"\0never", Duration::from_secs(5)).await;
    String::from_utf8_lossy(&r).into_owned()
}

/// C-FDLIMIT (issue 35): connections that have sent nothing are bounded per source address and
/// in total, and one over a bound is refused as one over `max_connections`; a connection whose
/// first request head has arrived (a fast-path watch, a request hyper served) no longer counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_bounded_and_a_request_head_ends_their_count() {
    let s = TestServer::start(ServerConfig {
        max_idle_connections: 3,
        max_idle_connections_per_address: 2,
        ..ServerConfig::default()
    })
    .await;
    // More connections with their request sent than either bound, from one address.
    let watch = "GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut watches = Vec::new();
    for _ in 0..3 {
        let mut w = first_request(&s, watch).await;
        let r = read_until(&mut w, b"chunked\r\n\r\n", Duration::from_secs(10)).await;
        assert!(
            r.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&r)
        );
        watches.push(w);
    }
    let _hyper = [hyper_connection(&s).await, hyper_connection(&s).await];
    // Two silent connections from 127.0.0.1 fill its bound; a third is refused.
    let silent = [
        connect_from(&s, "127.0.0.1").await,
        connect_from(&s, "127.0.0.1").await,
    ];
    tokio::time::sleep(Duration::from_millis(200)).await;
    let over = livez_from(&s, "127.0.0.1").await;
    assert!(
        over.starts_with("HTTP/1.1 503 Service Unavailable\r\n")
            && over.contains("Retry-After: 1\r\n")
            && over.contains(r#""reason":"ServiceUnavailable""#)
            && over.contains("too many connections from this address waiting for their first request: the limit is 2"),
        "{over}"
    );
    // Another address is served, and once one more is silent the total (3) is full for all.
    assert!(
        livez_from(&s, "127.0.0.2")
            .await
            .starts_with("HTTP/1.1 200"),
        "another address is served"
    );
    let _other = connect_from(&s, "127.0.0.2").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let over = livez_from(&s, "127.0.0.3").await;
    assert!(
        over.starts_with("HTTP/1.1 503")
            && over
                .contains("too many connections waiting for their first request: the limit is 3"),
        "{over}"
    );
    // A silent connection closed gives its slot back.
    drop(silent);
    let mut served = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if livez_from(&s, "127.0.0.1")
            .await
            .starts_with("HTTP/1.1 200")
        {
            served = true;
            break;
        }
    }
    assert!(served, "a closed silent connection's slot is usable again");
    let metrics = reqwest::get(format!("{}/metrics", s.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (reason, n) in [("idle_per_address", 1), ("idle", 1)] {
        let series = format!("watchcache_connections_refused_total{{reason=\"{reason}\"}} {n}");
        assert!(metrics.lines().any(|l| l == series), "{series}");
    }
}

/// Decodes what a gzip stream has delivered so far (a stream still open has no trailer yet).
fn gunzip_so_far(bytes: &[u8]) -> String {
    use std::io::Read;
    let mut d = flate2::read::DeflateDecoder::new(bytes.get(10..).unwrap_or_default());
    let mut out = Vec::new();
    let _ = d.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Item 2: gzip watches keep no deflate state of their own (design/performance.md has the memory
/// figures from examples/conn_memory.rs); the stream must still be one valid gzip member in which
/// each event can be read as soon as it arrives, on both transports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_watches_flush_every_event_and_end_as_valid_gzip() {
    use futures_util::StreamExt;
    use std::io::Read;
    let s = TestServer::start(ServerConfig::default()).await;
    let fast = reqwest::Client::new();
    let slow = reqwest::Client::new();
    let r = slow.get(format!("{}/livez", s.url)).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "ok");
    let url = format!(
        "{}/api/v1/namespaces/gz/pods?watch=1&timeoutSeconds=4",
        s.url
    );
    let mut streams = Vec::new();
    for c in [&fast, &slow] {
        let r = c
            .get(&url)
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["content-encoding"], "gzip");
        streams.push((r.bytes_stream(), Vec::new()));
    }
    for i in 0..3 {
        let name = format!("p{i}");
        create(
            &s,
            "gz",
            // (Padded in an annotation: pods are stored as protobuf, which keeps only the
            // fields a Pod has, as kube-apiserver does.)
            &json!({"metadata": {"name": name, "annotations": {"pad": "x".repeat(3000)}}}),
        )
        .await;
        for (body, got) in &mut streams {
            while !gunzip_so_far(got).contains(&format!(r#""name":"{name}""#)) {
                let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
                    .await
                    .expect("the event arrives compressed and flushed")
                    .unwrap()
                    .unwrap();
                got.extend_from_slice(&chunk);
            }
        }
    }
    for (mut body, mut got) in streams {
        while let Some(chunk) = body.next().await {
            got.extend_from_slice(&chunk.unwrap());
        }
        let mut text = String::new();
        let mut d = flate2::read::GzDecoder::new(&got[..]);
        d.read_to_string(&mut text).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{text:.300}");
        assert!(
            got.len() < text.len() / 4,
            "compressed {} of {}",
            got.len(),
            text.len()
        );
    }
}

// ---- Issue 20: status as kube-apiserver serves it. ----

mod issue20 {
    use super::*;
    use watchcache::ResourceDef;
    use watchcache_server::auth::{AuthConfig, Authenticator, Mode, RbacObjects, TokenFile};

    const TOKENS: &str = "\
admin-token,admin,0,system:masters
sam-token,sam,4
";

    /// sam may read any `*/status`.
    fn rbac() -> RbacObjects {
        let mut o = RbacObjects::default();
        for v in [
            json!({"kind": "ClusterRole", "metadata": {"name": "status-reader"}, "rules": [
                {"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/status"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "sam-status"},
                "subjects": [{"kind": "User", "name": "sam"}],
                "roleRef": {"kind": "ClusterRole", "name": "status-reader"}}),
        ] {
            o.add(v).unwrap();
        }
        o
    }

    async fn auth_server() -> TestServer {
        TestServer::start_with_server(
            ServerConfig::default(),
            |_| {},
            ResourceDef::builtins(),
            |s| {
                s.with_auth(AuthConfig {
                    authenticator: Authenticator {
                        client_certs: false,
                        tokens: Some(TokenFile::parse("tokens.csv", TOKENS).unwrap()),
                        service_accounts: None,
                        anonymous: false,
                    },
                    modes: vec![Mode::Node, Mode::Rbac],
                    rbac_bootstrap: rbac(),
                })
            },
        )
        .await
    }

    async fn send(
        method: reqwest::Method,
        url: &str,
        token: Option<&str>,
        body: Option<(&str, &Value)>,
    ) -> (u16, Value) {
        let mut r = reqwest::Client::new().request(method, url);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if let Some((ct, b)) = body {
            r = r.header("content-type", ct).body(b.to_string());
        }
        let resp = r.send().await.unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Item 3: `GET secrets/NAME/status` by a user granted only `*/status` returned the whole
    /// Secret. Only resources with a status subresource upstream serve `/status`; the others are
    /// 404, and discovery lists only the real ones.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_is_served_only_where_upstream_has_it() {
        let s = auth_server().await;
        let api = format!("{}/api/v1/namespaces/team", s.url);
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"password": "aHVudGVyMg=="}});
        let api_path = "/api/v1/namespaces/team";
        s.seed(&format!("{api_path}/secrets"), &secret).await;
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        s.seed(&format!("{api_path}/configmaps"), &cm).await;
        s.seed(
            &format!("{api_path}/pods"),
            &json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}),
        )
        .await;
        for path in ["secrets/s/status", "configmaps/c/status"] {
            let (code, v) = send(
                reqwest::Method::GET,
                &format!("{api}/{path}"),
                Some("sam-token"),
                None,
            )
            .await;
            assert_eq!(code, 404, "{path}: {v}");
            assert_eq!(v["reason"], "NotFound");
            assert_eq!(
                v["message"],
                "the server could not find the requested resource"
            );
            assert!(!v.to_string().contains("aHVudGVyMg"), "{v}");
        }
        let (code, v) = send(
            reqwest::Method::PUT,
            &format!("{api}/configmaps/c/status"),
            Some("admin-token"),
            Some(("application/json", &cm)),
        )
        .await;
        assert_eq!(code, 404, "{v}");
        let (code, v) = send(
            reqwest::Method::GET,
            &format!("{api}/pods/p/status"),
            Some("sam-token"),
            None,
        )
        .await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["status"]["phase"], "Pending");
        let (_, d) = send(
            reqwest::Method::GET,
            &format!("{}/api/v1", s.url),
            Some("admin-token"),
            None,
        )
        .await;
        let names: Vec<&str> = d["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(
            names.contains(&"pods/status") && names.contains(&"namespaces/status"),
            "{names:?}"
        );
        assert!(
            !names.contains(&"secrets/status") && !names.contains(&"configmaps/status"),
            "{names:?}"
        );
    }
}

mod issue20_tokens {
    use super::*;
    use std::path::Path;
    use watchcache::ResourceDef;
    use watchcache_server::auth::{
        AuthConfig, Authenticator, Mode, RbacObjects, ServiceAccounts, TokenFile,
    };

    const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/auth/testdata");
    const ISSUER: &str = "https://issuer.test";

    /// A projected token of `team/builder` with these `kubernetes.io` claims.
    fn token(claims: Value) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let body = json!({"iss": ISSUER, "aud": [ISSUER], "exp": now + 600, "iat": now, "nbf": now,
            "sub": "system:serviceaccount:team:builder", "kubernetes.io": claims});
        let pem = std::fs::read(Path::new(TESTDATA).join("sa-rsa.key")).unwrap();
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
            &body,
            &jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap(),
        )
        .unwrap()
    }

    async fn server() -> TestServer {
        let mut rbac = RbacObjects::default();
        rbac.add(
            json!({"kind": "ClusterRole", "metadata": {"name": "pod-lister"},
            "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]}),
        )
        .unwrap();
        rbac.add(
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "team-sas"},
            "subjects": [{"kind": "Group", "name": "system:serviceaccounts:team"}],
            "roleRef": {"kind": "ClusterRole", "name": "pod-lister"}}),
        )
        .unwrap();
        TestServer::start_with_server(
            ServerConfig::default(),
            |_| {},
            ResourceDef::builtins(),
            move |s| {
                s.with_auth(AuthConfig {
                    authenticator: Authenticator {
                        client_certs: false,
                        tokens: Some(
                            TokenFile::parse("t.csv", "admin-token,admin,0,system:masters\n")
                                .unwrap(),
                        ),
                        service_accounts: Some(
                            ServiceAccounts::load(
                                &[Path::new(TESTDATA).join("sa-rsa.pub")],
                                vec![ISSUER.into()],
                                vec![],
                            )
                            .unwrap(),
                        ),
                        anonymous: false,
                    },
                    modes: vec![Mode::Node, Mode::Rbac],
                    rbac_bootstrap: rbac,
                })
            },
        )
        .await
    }

    async fn as_admin(method: reqwest::Method, url: &str, body: Option<&Value>) -> Value {
        let mut r = reqwest::Client::new()
            .request(method, url)
            .bearer_auth("admin-token");
        if let Some(b) = body {
            r = r.json(b);
        }
        let r = r.send().await.unwrap();
        assert!(r.status().is_success(), "{url}: {}", r.status());
        r.json().await.unwrap()
    }

    async fn list_pods(s: &TestServer, token: &str) -> u16 {
        reqwest::Client::new()
            .get(format!("{}/api/v1/namespaces/team/pods", s.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// Polls until the answer is `want` (the cache sees a write within milliseconds).
    async fn becomes(s: &TestServer, token: &str, want: u16) {
        let mut got = 0;
        for _ in 0..100 {
            got = list_pods(s, token).await;
            if got == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("answered {got}, not {want}, after 2 s");
    }

    /// Item 7: a token of a deleted service account authenticated. The account, and the pod or
    /// secret a token is bound to, are looked up on every request (`--service-account-lookup`,
    /// default true): gone, recreated (another uid) or never there is 401.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tokens_of_deleted_service_accounts_and_pods_are_refused() {
        let s = server().await;
        let api = "/api/v1/namespaces/team";
        let sa = s
            .seed(
                &format!("{api}/serviceaccounts"),
                &json!({"metadata": {"name": "builder", "uid": "sa-uid-1"}}),
            )
            .await;
        let sa_uid = sa["metadata"]["uid"].as_str().unwrap().to_owned();
        let pod = s
            .seed(
                &format!("{api}/pods"),
                &json!({"metadata": {"name": "runner", "uid": "pod-uid-1"}}),
            )
            .await;
        let pod_uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
        let plain = token(
            json!({"namespace": "team", "serviceaccount": {"name": "builder", "uid": sa_uid}}),
        );
        let bound = token(
            json!({"namespace": "team", "serviceaccount": {"name": "builder", "uid": sa_uid},
            "pod": {"name": "runner", "uid": pod_uid}}),
        );
        let stranger = token(
            json!({"namespace": "team", "serviceaccount": {"name": "builder", "uid": "not-its-uid"}}),
        );
        becomes(&s, &plain, 200).await;
        assert_eq!(list_pods(&s, &bound).await, 200);
        assert_eq!(list_pods(&s, &stranger).await, 401, "another account's uid");
        // The pod goes: its bound token with it; the account's other token stays.
        s.unseed(&format!("{api}/pods"), "runner").await;
        becomes(&s, &bound, 401).await;
        assert_eq!(list_pods(&s, &plain).await, 200);
        // The account goes: every token of it, at once (not after a memo expires).
        s.unseed(&format!("{api}/serviceaccounts"), "builder").await;
        becomes(&s, &plain, 401).await;
        // Recreated under the same name: a new uid, the old tokens stay refused.
        s.seed(
            &format!("{api}/serviceaccounts"),
            &json!({"metadata": {"name": "builder", "uid": "sa-uid-2"}}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(list_pods(&s, &plain).await, 401);
        // A token bound to a secret: the secret must be there with its uid.
        let secret = s
            .seed(
                &format!("{api}/secrets"),
                &json!({"metadata": {"name": "tok", "uid": "secret-uid-1"}}),
            )
            .await;
        let sa = as_admin(
            reqwest::Method::GET,
            &format!("{}{api}/serviceaccounts/builder", s.url),
            None,
        )
        .await;
        let secret_bound = token(json!({"namespace": "team",
            "serviceaccount": {"name": "builder", "uid": sa["metadata"]["uid"]},
            "secret": {"name": "tok", "uid": secret["metadata"]["uid"]}}));
        becomes(&s, &secret_bound, 200).await;
        s.unseed(&format!("{api}/secrets"), "tok").await;
        becomes(&s, &secret_bound, 401).await;
    }
}

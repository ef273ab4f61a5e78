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
use watchcache::server::auth::{AuthConfig, Authenticator, Mode, RbacObjects, TokenFile};

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

async fn etcd_client(s: &TestServer) -> etcd_client::Client {
    support::etcd::client(&[s.etcd.server.url()]).await
}

/// Whether etcd holds a key.
async fn in_etcd(s: &TestServer, key: &str) -> bool {
    let r = etcd_client(s).await.get(key, None).await.unwrap();
    !r.kvs().is_empty()
}

fn cause_fields(v: &Value) -> Vec<&str> {
    v["details"]["causes"]
        .as_array()
        .map(|cs| cs.iter().filter_map(|c| c["field"].as_str()).collect())
        .unwrap_or_default()
}

/// Issue 9, item 5: writes the cache would refuse were stored, then answered 500. Item 9: names,
/// namespaces and labels follow upstream's rules (422 Invalid, a cause per field).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_the_cache_would_refuse_are_never_stored() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    let base = &s.url;
    // Non-string label values: a malformed body, refused before etcd.
    let r = create(
        &c,
        base,
        "ns",
        &json!({"metadata": {"name": "l", "labels": {"a": 1}}}),
    )
    .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["reason"], "BadRequest", "{v}");
    assert!(!in_etcd(&s, "/registry/pods/ns/l").await);
    // Nesting the cache refuses (serde_json alone would take it), in a field the type keeps as
    // it is (an unknown field would be dropped before the cache sees it), and a lone surrogate.
    let deep = format!(
        r#"{{"metadata":{{"name":"d","managedFields":[{{"manager":"m","fieldsV1":{{"f":{}0{}}}}}]}}}}"#,
        "[".repeat(110),
        "]".repeat(110)
    );
    for body in [
        deep.as_str(),
        r#"{"metadata":{"name":"d"},"spec":{"nodeName":"\ud800zz"}}"#,
    ] {
        let r = c
            .post(format!("{base}/api/v1/namespaces/ns/pods"))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body:.40}");
        assert!(!in_etcd(&s, "/registry/pods/ns/d").await);
    }
    // An empty namespace segment names nothing.
    let r = c
        .post(format!("{base}/api/v1/namespaces//pods"))
        .json(&json!({"metadata": {"name": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let all = etcd_client(&s)
        .await
        .get(
            "/registry/pods/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert!(all.kvs().is_empty(), "nothing was stored");
    // Names and labels: 422 Invalid, each broken rule a cause naming its field.
    for (body, fields) in [
        (json!({"metadata": {"name": "a b"}}), vec!["metadata.name"]),
        (
            json!({"metadata": {"name": "héllo☃"}}),
            vec!["metadata.name"],
        ),
        (
            json!({"metadata": {"name": "UPPER"}}),
            vec!["metadata.name"],
        ),
        (json!({"metadata": {}}), vec!["metadata.name"]),
        (
            json!({"metadata": {"name": "ok", "labels": {"bad key!": "v", "k": "bad value"}}}),
            vec!["metadata.labels", "metadata.labels[\"k\"]"],
        ),
        (
            json!({"metadata": {"name": "Bad", "labels": {"k": "-"}}}),
            vec!["metadata.name", "metadata.labels[\"k\"]"],
        ),
        (
            json!({"metadata": {"name": "ok", "annotations": {"not a key": "v", "ok/fine": "any text ☃"}}}),
            vec!["metadata.annotations"],
        ),
    ] {
        let r = create(&c, base, "ns", &body).await;
        assert_eq!(r.status(), 422, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["reason"], "Invalid", "{v}");
        assert_eq!(v["details"]["kind"], "Pod", "{v}");
        assert_eq!(cause_fields(&v), fields, "{v}");
    }
    let r = c
        .post(format!("{base}/api/v1/namespaces/Bad_NS/pods"))
        .json(&json!({"metadata": {"name": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(cause_fields(&v), ["metadata.namespace"], "{v}");
    // Annotations: at most 256 KiB in all (FieldValueTooLong), string values (400).
    let r = create(
        &c,
        base,
        "ns",
        &json!({"metadata": {"name": "big", "annotations": {"a": "x".repeat(300_000)}}}),
    )
    .await;
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["details"]["causes"][0]["reason"], "FieldValueTooLong",
        "{v}"
    );
    assert_eq!(cause_fields(&v), ["metadata.annotations"], "{v}");
    let r = create(
        &c,
        base,
        "ns",
        &json!({"metadata": {"name": "n", "annotations": {"a": 1}}}),
    )
    .await;
    assert_eq!(r.status(), 400);
    // The first refused create stored nothing: the name is still free; free-text annotations pass.
    let r = create(
        &c,
        base,
        "ns",
        &json!({"metadata": {"name": "l", "labels": {"a": "1"}, "annotations": {"example.com/note": "any text ☃, {}"}}}),
    )
    .await;
    assert_eq!(r.status(), 201);
    // PUT runs the same checks.
    let r = c
        .put(format!("{base}/api/v1/namespaces/ns/pods/l"))
        .json(&json!({"metadata": {"name": "l", "labels": {"a": 2}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Deleting a stored value the cache could not decode succeeds (it is how it gets cleaned up).
    let mut etcd = etcd_client(&s).await;
    etcd.put("/registry/pods/ns/junk", "not json", None)
        .await
        .unwrap();
    let r = c
        .delete(format!("{base}/api/v1/namespaces/ns/pods/junk"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["status"].as_str()),
        (Some("Status"), Some("Success"))
    );
    assert!(!in_etcd(&s, "/registry/pods/ns/junk").await);
}

/// Item 9: path segments are percent-decoded, and a watch by name pins the name exactly instead
/// of splicing it into selector text (`=` and `,` in a name gave 400), on both transports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_in_paths_are_decoded_and_watched_exactly() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    let r = create(&c, &s.url, "ns", &json!({"metadata": {"name": "a-b.c"}})).await;
    assert_eq!(r.status(), 201);
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
/// resourceVersion the cache has not reached gets), never 500 with etcd's text; write bodies that
/// are not JSON are 415 and not stored; uids are RFC 4122 version 4.
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
    let r = create(&c, base, "ns", &json!({"metadata": {"name": "a"}})).await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let uid = created["metadata"]["uid"].as_str().unwrap();
    let nibbles: Vec<char> = uid.chars().collect();
    assert_eq!((nibbles[14], uid.len()), ('4', 36), "{uid}");
    assert!(matches!(nibbles[19], '8' | '9' | 'a' | 'b'), "{uid}");
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
    // The bodies a browser sends cross-site without a preflight (YAML is read, as upstream).
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = c
            .post(format!("{base}/api/v1/namespaces/ns/pods"))
            .header("content-type", ct)
            .body(r#"{"metadata":{"name":"csrf"}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415, "{ct}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["reason"], "UnsupportedMediaType", "{v}");
    }
    assert!(!in_etcd(&s, "/registry/pods/ns/csrf").await);
}

/// Tokens of the servers with authentication below: `admin` (system:masters); `alice` may watch
/// pods in `a`, get and list only the pod `one` there, and create and list configmaps there;
/// `bob` may only watch the pod `one`.
const TOKENS: &str = "admin,admin,0,system:masters\nalice,alice,1\nbob,bob,2\n";

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
        let r = c
            .post(format!("{}/api/v1/namespaces/a/pods", s.url))
            .bearer_auth("admin")
            .json(&json!({"metadata": {"name": name}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
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
/// against everyone (masters included) for as long as they stalled. The permit is now taken once
/// the body has arrived, a stalled body ends at `--request-timeout` with upstream's 504, and
/// `system:masters` is never refused by the limit.
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

/// Issue 20, item 5: strategic merge was quadratic and ran on the reactor's workers: three
/// concurrent patches adding 60 000 finalizers (516 KiB each) held `/readyz` for 11 s. The merge
/// is linear now and runs on the blocking pool: `/readyz` answers while they run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_while_big_strategic_patches_run() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    let finalizers: Vec<String> = (0..60_000).map(|i| format!("f{i:05}")).collect();
    let patch = json!({"metadata": {"finalizers": finalizers}}).to_string();
    assert!(patch.len() > 500 * 1024, "{}", patch.len());
    for i in 0..3 {
        let r = create(
            &c,
            &s.url,
            "a",
            &json!({"metadata": {"name": format!("p{i}")}}),
        )
        .await;
        assert_eq!(r.status(), 201);
    }
    let patches: Vec<_> = (0..3)
        .map(|i| {
            let (c, url, patch) = (
                c.clone(),
                format!("{}/api/v1/namespaces/a/pods/p{i}", s.url),
                patch.clone(),
            );
            tokio::spawn(async move {
                c.patch(url)
                    .header("content-type", "application/strategic-merge-patch+json")
                    .body(patch)
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    while !patches.iter().all(|p| p.is_finished()) {
        let started = tokio::time::Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            c.get(format!("{}/readyz", s.url)).send(),
        )
        .await
        .expect("/readyz answers while the patches run")
        .unwrap();
        assert_eq!(r.status(), 200);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(slowest < Duration::from_secs(2), "/readyz took {slowest:?}");
    for p in patches {
        assert_eq!(p.await.unwrap(), 200);
    }
    let v: Value = c
        .get(format!("{}/api/v1/namespaces/a/pods/p2", s.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["metadata"]["finalizers"].as_array().map(Vec::len),
        Some(60_000)
    );
}

/// Issue 20, item 1: JSON patch `copy` operations doubling the object (14 of them, 802 bytes, on
/// a 1 MiB object, grew the server to 24 GB). Copies stop at upstream's 3 MiB (422, json-patch's
/// message; 5 copies here, which asked for 32 MiB), and more than 10 000 operations are 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patches_cannot_amplify_the_object() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    let big = "x".repeat(1 << 20);
    let r = c
        .post(format!("{}/api/v1/namespaces/a/configmaps", s.url))
        .json(&json!({"metadata": {"name": "big"}, "data": {"big": big}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let url = format!("{}/api/v1/namespaces/a/configmaps/big", s.url);
    let send = |ops: Vec<Value>| {
        let (c, url) = (c.clone(), url.clone());
        async move {
            let r = c
                .patch(url)
                .header("content-type", "application/json-patch+json")
                .json(&ops)
                .send()
                .await
                .unwrap();
            let code = r.status().as_u16();
            (code, r.json::<Value>().await.unwrap())
        }
    };
    let copies: Vec<Value> = (0..5)
        .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/c{i}")}))
        .collect();
    let (code, v) = send(copies).await;
    let message = v["message"].as_str().unwrap_or_default();
    assert_eq!(
        (code, v["reason"].as_str()),
        (422, Some("Invalid")),
        "{message:.300}"
    );
    assert!(
        message.contains("exceeding the limit 3145728"),
        "{message:.300}"
    );
    let tests: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/kind", "value": "ConfigMap"}))
        .collect();
    let (code, v) = send(tests).await;
    assert_eq!(
        (code, v["reason"].as_str()),
        (413, Some("RequestEntityTooLarge")),
        "{v}"
    );
    // The object is as it was.
    let v: Value = c.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["data"].as_object().map(|d| d.len()), Some(1));
}

/// Issue 20, item 10: a POST with 100 000 unknown fields was answered with 7 162 `Warning`
/// headers (300 KB), more than HTTP clients accept. They are deduplicated and capped as upstream
/// caps them: 4 KiB of text, each cut to 256 characters past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_are_capped_as_upstream_caps_them() {
    let s = TestServer::start(ServerConfig::default()).await;
    let mut spec = serde_json::Map::new();
    for i in 0..100_000 {
        spec.insert(format!("f{i}"), json!(1));
    }
    let r = create(
        &reqwest::Client::new(),
        &s.url,
        "a",
        &json!({"metadata": {"name": "w"}, "spec": spec}),
    )
    .await;
    assert_eq!(r.status(), 201);
    let lines: Vec<&str> = r
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    let bytes: usize = lines.iter().map(|w| w.len()).sum();
    // Upstream's cap: about 4 KiB of text, some 150 short warnings, several to a line.
    assert!(
        !lines.is_empty() && lines.len() <= 10 && bytes < 8 * 1024,
        "{} lines, {bytes} bytes",
        lines.len()
    );
    assert!(
        lines[0].starts_with(r#"299 - "unknown field \"spec.f"#),
        "{}",
        lines[0]
    );
    let values = lines.iter().flat_map(|l| l.split(r#"", 299 - ""#)).count();
    assert!((100..200).contains(&values), "{values}");
}

/// Issue 20, item 15: an object over etcd's request limit (1.5 MiB by default; the body limit is
/// 3 MiB) was answered 500 with etcd's gRPC text. It is 413 RequestEntityTooLarge, saying which
/// limit; nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_over_etcds_limit_is_413() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    // Over etcd's --max-request-bytes; and over the gRPC limit 512 KiB above it.
    for (name, size) in [("a", 1_800_000), ("b", 2_800_000)] {
        let r = c
            .post(format!("{}/api/v1/namespaces/a/configmaps", s.url))
            .json(&json!({"metadata": {"name": name}, "data": {"big": "x".repeat(size)}}))
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (code, v["reason"].as_str()),
            (413, Some("RequestEntityTooLarge")),
            "{size}: {v}"
        );
        let m = v["message"].as_str().unwrap();
        assert!(
            m.starts_with("Request entity too large: configmaps")
                && m.contains("--max-request-bytes")
                && !m.contains("grpc")
                && !m.contains("status"),
            "{m}"
        );
        assert!(!in_etcd(&s, &format!("/registry/configmaps/a/{name}")).await);
    }
}

/// A length-delimited protobuf field: its key, its length as a varint, its bytes.
fn pb_len(out: &mut Vec<u8>, num: u8, bytes: &[u8]) {
    out.push(num << 3 | 2);
    let mut n = bytes.len();
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out.extend_from_slice(bytes);
}

/// Issue 20, item 15: a 2 MB protobuf body of a million empty containers (2 bytes each) stood
/// for 27 MB of JSON and cost 5 CPU-seconds and 300 MB. Its reading stops at twice the body
/// limit of JSON: 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_body_cannot_stand_for_unbounded_json() {
    let s = TestServer::start(ServerConfig::default()).await;
    let mut meta = Vec::new();
    pb_len(&mut meta, 1, b"p");
    let mut raw = Vec::new();
    pb_len(&mut raw, 1, &meta);
    pb_len(&mut raw, 2, &[0x12, 0x00].repeat(1_000_000));
    let mut type_meta = Vec::new();
    pb_len(&mut type_meta, 1, b"v1");
    pb_len(&mut type_meta, 2, b"Pod");
    let mut body = b"k8s\0".to_vec();
    pb_len(&mut body, 1, &type_meta);
    pb_len(&mut body, 2, &raw);
    assert!(body.len() < 2_100_000);
    let started = std::time::Instant::now();
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/namespaces/a/pods", s.url))
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .body(body)
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (code, v["reason"].as_str()),
        (413, Some("RequestEntityTooLarge")),
        "{v}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(!in_etcd(&s, "/registry/pods/a/p").await);
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
    let writer = reqwest::Client::new();
    for i in 0..3 {
        let name = format!("p{i}");
        let r = create(
            &writer,
            &s.url,
            "gz",
            // (Padded in an annotation: pods are stored as protobuf, which keeps only the
            // fields a Pod has, as kube-apiserver does.)
            &json!({"metadata": {"name": name, "annotations": {"pad": "x".repeat(3000)}}}),
        )
        .await;
        assert_eq!(r.status(), 201);
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

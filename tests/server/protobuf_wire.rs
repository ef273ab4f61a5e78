//! Protobuf on the wire, compared byte for byte with what Kubernetes 1.35's own serializers wrote
//! (tests/data/kubernetes-protobuf): a real server over a real etcd whose revisions are brought to
//! the vectors' own (12340…12347), so that LIST, WATCH (on both transports: the fast path and
//! hyper) and GET answer exactly upstream's bytes, for objects stored as JSON (encoded from JSON)
//! and as protobuf (the stored bytes with the revision spliced in).

use crate::support;

use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use watchcache_server::ServerConfig;

use support::server::TestServer;

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/kubernetes-protobuf/"
);
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn read(name: &str) -> Vec<u8> {
    std::fs::read(format!("{DATA}{name}")).unwrap()
}

/// An object as watchcache stores JSON: with kind and apiVersion, without resourceVersion.
fn stored_json(mut v: Value) -> Vec<u8> {
    v["kind"] = "Pod".into();
    v["apiVersion"] = "v1".into();
    v["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    serde_json::to_vec(&v).unwrap()
}

fn pod_key(v: &Value) -> String {
    format!(
        "/registry/pods/default/{}",
        v["metadata"]["name"].as_str().unwrap()
    )
}

/// Puts outside the cached prefixes until etcd's revision is `rev`.
async fn advance_to(kv: &Client, rev: i64) {
    let now = kv
        .clone()
        .get("x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let n = rev - now;
    assert!(n >= 0, "etcd is at {now}, past {rev}");
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let mut kv = kv.clone();
            let count = n / 32 + i64::from(t < n % 32);
            tokio::spawn(async move {
                for _ in 0..count {
                    kv.put(format!("/filler/{t}"), "x", None).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let at = kv
        .clone()
        .get("x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    assert_eq!(at, rev);
}

/// A minimal HTTP/1.1 client over one socket, so that a test chooses the transport: a watch as a
/// connection's first request is the fast path's, a watch after another request is hyper's.
struct Conn {
    tcp: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(base: &str) -> Conn {
        let addr = base.trim_start_matches("http://");
        Conn {
            tcp: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    async fn fill(&mut self) {
        let mut b = [0u8; 16384];
        let n = tokio::time::timeout(Duration::from_secs(20), self.tcp.read(&mut b))
            .await
            .expect("response within 20 s")
            .unwrap();
        assert!(
            n > 0,
            "connection closed; have {:?}",
            String::from_utf8_lossy(&self.buf)
        );
        self.buf.extend_from_slice(&b[..n]);
    }

    /// Sends a GET and reads the response head: status and headers (lower-cased names).
    async fn get(&mut self, path: &str, accept: &str) -> (u16, Vec<(String, String)>) {
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nAccept: {accept}\r\n\r\n");
        self.tcp.write_all(req.as_bytes()).await.unwrap();
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            self.fill().await;
        };
        let head = String::from_utf8(self.buf.drain(..end + 4).collect()).unwrap();
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        (status, headers)
    }

    async fn take(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            self.fill().await;
        }
        self.buf.drain(..n).collect()
    }

    async fn line(&mut self) -> String {
        let i = loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            self.fill().await;
        };
        let l = String::from_utf8(self.buf.drain(..i + 2).collect()).unwrap();
        l.trim_end().to_owned()
    }

    /// The next chunk of a chunked body (empty at its end).
    async fn chunk(&mut self) -> Vec<u8> {
        let size = usize::from_str_radix(&self.line().await, 16).unwrap();
        let data = self.take(size).await;
        assert_eq!(self.take(2).await, b"\r\n");
        data
    }

    /// A whole body: by Content-Length, or chunked.
    async fn body(&mut self, headers: &[(String, String)]) -> Vec<u8> {
        if let Some((_, n)) = headers.iter().find(|(k, _)| k == "content-length") {
            return self.take(n.parse().unwrap()).await;
        }
        let mut out = Vec::new();
        loop {
            let c = self.chunk().await;
            if c.is_empty() {
                return out;
            }
            out.extend_from_slice(&c);
        }
    }

    /// The next `n` bytes of a chunked body.
    async fn chunked_bytes(&mut self, n: usize, have: &mut Vec<u8>) {
        while have.len() < n {
            let c = self.chunk().await;
            assert!(!c.is_empty(), "body ended early");
            have.extend_from_slice(&c);
        }
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

/// Reads `frames` length-prefixed frames of a protobuf watch stream.
async fn frames(c: &mut Conn, have: &mut Vec<u8>, frames: usize) -> usize {
    let mut at = 0;
    for _ in 0..frames {
        c.chunked_bytes(at + 4, have).await;
        let len = u32::from_be_bytes(have[at..at + 4].try_into().unwrap()) as usize;
        at += 4 + len;
        c.chunked_bytes(at, have).await;
    }
    at
}

fn varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0;
    for shift in (0..64).step_by(7) {
        let x = b[*at];
        *at += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x < 0x80 {
            break;
        }
    }
    v
}

/// The length-delimited fields of a message: (number, span with the tag, payload span).
fn len_fields(b: &[u8]) -> Vec<(u64, std::ops::Range<usize>, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let start = at;
        let tag = varint(b, &mut at);
        assert_eq!(tag & 7, 2, "only length-delimited fields here");
        let n = varint(b, &mut at) as usize;
        out.push((tag >> 3, start..at + n, at..at + n));
        at += n;
    }
    out
}

/// A protobuf list body with its first two items swapped (same lengths, so nothing else moves).
fn swap_first_items(list: &[u8]) -> Vec<u8> {
    let body = &list[4..];
    let raw = len_fields(body).into_iter().find(|f| f.0 == 2).unwrap().2;
    let raw_at = 4 + raw.start;
    let items: Vec<_> = len_fields(&body[raw])
        .into_iter()
        .filter(|f| f.0 == 2)
        .map(|f| f.1)
        .collect();
    let (a, b) = (items[0].clone(), items[1].clone());
    assert_eq!(a.end, b.start);
    let mut out = list.to_vec();
    let mut swapped = list[raw_at + b.start..raw_at + b.end].to_vec();
    swapped.extend_from_slice(&list[raw_at + a.start..raw_at + a.end]);
    out[raw_at + a.start..raw_at + b.end].copy_from_slice(&swapped);
    out
}

/// Where the vectors' first difference is, for readable failures.
fn diff(got: &[u8], want: &[u8]) -> String {
    let i = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    format!(
        "lengths {} / {}; first difference at {i}: got {:02x?}",
        got.len(),
        want.len(),
        &got[i.saturating_sub(8)..(i + 16).min(got.len())]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_watches_and_gets_are_upstreams_protobuf_byte_for_byte() {
    let server = TestServer::start(ServerConfig::default()).await;
    let base = server.url.clone();
    let mut kv = support::etcd::client(&[server.etcd.server.url()]).await;

    // The list's pods and the watch's pods share revisions 12340 and 12341 (one transaction
    // each); the list selects the first (pod-template-hash set), the watch the second.
    let list: Value = serde_json::from_slice(&read("pods-list.json")).unwrap();
    let list_pods = list["items"].as_array().unwrap().clone();
    let events: Vec<Value> = read("pods-watch.json-stream")
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let (web_a, web_b) = (events[0]["object"].clone(), events[1]["object"].clone());
    advance_to(&kv, 12339).await;
    for (p, w) in [
        (&list_pods[0], Some(&web_a)),
        (&list_pods[1], Some(&web_b)),
        (&list_pods[2], None),
    ] {
        let mut ops = vec![TxnOp::put(pod_key(p), stored_json(p.clone()), None)];
        if let Some(w) = w {
            ops.push(TxnOp::put(pod_key(w), stored_json(w.clone()), None));
        }
        kv.txn(Txn::new().and_then(ops)).await.unwrap();
    }
    // The vectors were read at 12345, and a consistent read answers at the cache's revision
    // (the last change of pods; see design/semantics.md, "Consistent reads on etcd"): the last
    // write of the run is a pod elsewhere, selected by neither the LIST nor the WATCH.
    advance_to(&kv, 12344).await;
    let mut elsewhere = list_pods[2].clone();
    elsewhere["metadata"]["namespace"] = "elsewhere".into();
    let at = format!(
        "/registry/pods/elsewhere/{}",
        elsewhere["metadata"]["name"].as_str().unwrap()
    );
    let r = support::etcd::put_rev(&mut kv, &at, stored_json(elsewhere)).await;
    assert_eq!(r, 12345);

    // LIST: pods stored as JSON, encoded once each, framed as upstream's PodList.
    let mut c = Conn::open(&base).await;
    let (status, h) = c
        .get(
            "/api/v1/namespaces/default/pods?labelSelector=pod-template-hash",
            PROTOBUF,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(header(&h, "content-type"), PROTOBUF);
    let got = c.body(&h).await;
    // The vector lists its pods in the order they were given (x2k8p, q9m4t, z5w1n); a LIST from
    // etcd is in key order, as kube-apiserver's: the same items, the first two swapped.
    let want = swap_first_items(&read("pods-list.pb"));
    assert!(got == want, "LIST: {}", diff(&got, &want));

    // WATCH (WatchList): the fast path (first request of a connection) and hyper (after a GET
    // on the same connection), both from the same state.
    let watch = "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&labelSelector=!pod-template-hash";
    let accept = "application/vnd.kubernetes.protobuf, application/json";
    let mut fast = Conn::open(&base).await;
    let (status, fh) = fast.get(watch, accept).await;
    assert_eq!(status, 200);
    let mut slow = Conn::open(&base).await;
    let (_, rh) = slow.get("/readyz", "*/*").await;
    slow.body(&rh).await;
    let (status, sh) = slow.get(watch, accept).await;
    assert_eq!(status, 200);
    for h in [&fh, &sh] {
        assert_eq!(
            header(h, "content-type"),
            "application/vnd.kubernetes.protobuf;stream=watch"
        );
    }
    let (mut fast_bytes, mut slow_bytes) = (Vec::new(), Vec::new());
    frames(&mut fast, &mut fast_bytes, 3).await;
    frames(&mut slow, &mut slow_bytes, 3).await;
    let modified = &events[3]["object"];
    let r =
        support::etcd::put_rev(&mut kv, &pod_key(modified), stored_json(modified.clone())).await;
    assert_eq!(r, 12346);
    let d = kv.delete(pod_key(&web_b), None).await.unwrap();
    assert_eq!(d.header().unwrap().revision(), 12347);
    let want = read("pods-watch.pb-stream");
    for (name, c, have) in [
        ("fast path", &mut fast, &mut fast_bytes),
        ("hyper", &mut slow, &mut slow_bytes),
    ] {
        let n = frames(c, have, 5).await;
        assert!(
            have[..n] == want[..],
            "WATCH ({name}): {}",
            diff(&have[..n], &want)
        );
    }

    // GET: every vector stored as kube-apiserver stores it; the answer is the vector's GET body
    // with the revision (5 digits, as the vector's 12345) in ObjectMeta field 6.
    let stored: &[(&str, &str, &str)] = &[
        (
            "pod",
            "/registry/pods/default/web-7d4b9c-x2k8p",
            "/api/v1/namespaces/default/pods/web-7d4b9c-x2k8p",
        ),
        ("node", "/registry/minions/node-1", "/api/v1/nodes/node-1"),
        (
            "namespace",
            "/registry/namespaces/team-a",
            "/api/v1/namespaces/team-a",
        ),
        (
            "service",
            "/registry/services/specs/default/web",
            "/api/v1/namespaces/default/services/web",
        ),
        (
            "endpointslice",
            "/registry/endpointslices/default/web-x7k2q",
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/web-x7k2q",
        ),
        (
            "lease",
            "/registry/leases/kube-node-lease/node-1",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1",
        ),
        (
            "event",
            "/registry/events/default/web-7d4b9c-x2k8p.18a9f3c2d4e5b6a7",
            "/api/v1/namespaces/default/events/web-7d4b9c-x2k8p.18a9f3c2d4e5b6a7",
        ),
        (
            "configmap",
            "/registry/configmaps/default/web-config",
            "/api/v1/namespaces/default/configmaps/web-config",
        ),
        (
            "secret",
            "/registry/secrets/default/db-credentials",
            "/api/v1/namespaces/default/secrets/db-credentials",
        ),
        (
            "zero-pod",
            "/registry/pods/default/zero",
            "/api/v1/namespaces/default/pods/zero",
        ),
    ];
    let http = reqwest::Client::new();
    for (name, key, path) in stored {
        let rev = support::etcd::put_rev(&mut kv, key, read(&format!("{name}.etcd.bin"))).await;
        let mut want = read(&format!("{name}.pb"));
        let at = want.windows(7).position(|w| w == b"\x32\x0512345").unwrap();
        want[at + 2..at + 7].copy_from_slice(rev.to_string().as_bytes());
        // A consistent read: served once the cache has the revision.
        let url = format!("{base}{path}");
        let r = http
            .get(&url)
            .header("Accept", PROTOBUF)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(r.headers()["content-type"], PROTOBUF);
        let got = r.bytes().await.unwrap();
        assert!(got[..] == want[..], "GET {name}: {}", diff(&got, &want));
        // JSON clients still get JSON; `*/*` is JSON.
        let r = http.get(&url).header("Accept", "*/*").send().await.unwrap();
        assert_eq!(r.headers()["content-type"], "application/json");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_answer_json_or_406_and_errors_end_protobuf_watches_in_protobuf() {
    let mut defs = watchcache::ResourceDef::builtins();
    for d in defs.iter_mut().filter(|d| d.plural == "pods") {
        d.history = watchcache::HistoryConfig {
            min_events: 64,
            max_events: 64,
            window: Duration::from_secs(75),
            max_bytes: None,
        };
    }
    let server = TestServer::start_with_defs(ServerConfig::default(), |_| {}, defs).await;
    let base = server.url.clone();
    let http = reqwest::Client::new();
    let widgets = format!("{base}/apis/example.com/v1alpha1/namespaces/a/widgets");
    let r = http
        .get(&widgets)
        .header("Accept", "application/vnd.kubernetes.protobuf, */*")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let r = http
        .get(&widgets)
        .header("Accept", PROTOBUF)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    // Both transports: a protobuf-only watch of a custom resource is 406 too.
    for preface in [false, true] {
        let mut c = Conn::open(&base).await;
        if preface {
            let (_, h) = c.get("/readyz", "*/*").await;
            c.body(&h).await;
        }
        let (status, _) = c
            .get(
                "/apis/example.com/v1alpha1/namespaces/a/widgets?watch=1",
                PROTOBUF,
            )
            .await;
        assert_eq!(status, 406, "preface {preface}");
    }
    // A watch from a revision older than the window: one ERROR event, a protobuf Status (410).
    let mut kv = support::etcd::client(&[server.etcd.server.url()]).await;
    let pod: Value = serde_json::from_slice(&read("zero-pod.json")).unwrap();
    for _ in 0..100 {
        kv.put(pod_key(&pod), stored_json(pod.clone()), None)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for preface in [false, true] {
        let mut c = Conn::open(&base).await;
        if preface {
            let (_, h) = c.get("/readyz", "*/*").await;
            c.body(&h).await;
        }
        let (status, h) = c
            .get("/api/v1/pods?watch=1&resourceVersion=2", PROTOBUF)
            .await;
        assert_eq!(status, 200);
        assert_eq!(
            header(&h, "content-type"),
            "application/vnd.kubernetes.protobuf;stream=watch"
        );
        let body = c.body(&h).await;
        let len = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
        assert_eq!(body.len(), 4 + len, "one frame");
        // WatchEvent {type = "ERROR", object = {raw = k8s\0 + Unknown{v1 Status}}}.
        assert_eq!(&body[4..11], b"\x0a\x05ERROR");
        let raw = &body[11..];
        let env = raw.windows(4).position(|w| w == b"k8s\0").unwrap();
        let status = &raw[env..];
        assert!(status.windows(6).any(|w| w == b"Status"));
        assert!(status.windows(7).any(|w| w == b"Expired"));
        // code = 410 (field 6, varint 0x9a 0x03) ends the Status message, before the envelope's
        // empty contentEncoding and contentType.
        assert!(
            status.ends_with(b"\x30\x9a\x03\x1a\x00\x22\x00"),
            "{status:02x?}"
        );
    }
}

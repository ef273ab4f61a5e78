//! `shardSelector` (KEP-5866) over HTTP on a real etcd: LIST, WATCH (fast path and hyper) and
//! WatchList select exactly the objects whose hashed field falls in the ranges, composed with
//! field and label selectors; bad expressions are 400 naming the position; and the watchers are
//! routed by their ranges (the cache's routed count), not scanned.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use support::server::{TestServer, watch_lines};
use watchcache_server::ServerConfig;

/// FNV-1a 64, written here from its definition (offset basis 0xcbf29ce484222325, prime
/// 0x100000001b3), independently of the crate's.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn range(path: &str, start: u64, end: Option<u64>) -> String {
    let end = end.map_or("0x10000000000000000".to_owned(), |e| format!("0x{e:016x}"));
    format!("shardRange({path}, '0x{start:016x}', '{end}')")
}

fn q(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A pod put straight into etcd, as kube-apiserver stores it (the server is read-only).
async fn create(s: &TestServer, ns: &str, name: &str, app: &str) -> Value {
    let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}}, "spec": {"nodeName": "n1"}});
    s.seed(&format!("/api/v1/namespaces/{ns}/pods"), &body)
        .await
}

async fn list(c: &Client, url: &str) -> (StatusCode, Value) {
    let r = c.get(url).send().await.unwrap();
    (r.status(), r.json().await.unwrap())
}

fn names(list: &Value) -> BTreeSet<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_selectors_select_route_and_compose_on_list_watch_and_watchlist() {
    let s = TestServer::start(ServerConfig::default()).await;
    let base = s.url.clone();
    let c = Client::new();
    let mut uid_of = std::collections::BTreeMap::new();
    for i in 0..24 {
        let ns = if i % 2 == 0 { "a" } else { "b" };
        let app = if i % 3 == 0 { "web" } else { "db" };
        let p = create(&s, ns, &format!("p{i}"), app).await;
        uid_of.insert(
            format!("p{i}"),
            (ns, app, p["metadata"]["uid"].as_str().unwrap().to_owned()),
        );
    }
    let half = 1u64 << 63;
    let low = range("object.metadata.uid", 0, Some(half));
    let high = range("object.metadata.uid", half, None);
    let expect = |f: &dyn Fn(&str, &str, u64) -> bool| -> BTreeSet<String> {
        uid_of
            .iter()
            .filter(|(_, (ns, app, uid))| f(ns, app, fnv(uid)))
            .map(|(n, _)| n.clone())
            .collect()
    };

    // LIST: each half is exactly its hashes; together they are everything, disjoint.
    let (st, lo) = list(&c, &format!("{base}/api/v1/pods?shardSelector={}", q(&low))).await;
    assert_eq!(st, StatusCode::OK, "{lo}");
    let (_, hi) = list(
        &c,
        &format!("{base}/api/v1/pods?shardSelector={}", q(&high)),
    )
    .await;
    assert_eq!(names(&lo), expect(&|_, _, h| h < half));
    // The list echoes the selector (upstream's canonical form), so a client knows it is a shard.
    assert_eq!(
        lo["metadata"]["shardInfo"]["selector"],
        low.as_str(),
        "{}",
        lo["metadata"]
    );
    assert_eq!(names(&hi), expect(&|_, _, h| h >= half));
    assert!(
        !names(&lo).is_empty() && !names(&hi).is_empty(),
        "24 uids split"
    );
    assert_eq!(names(&lo).len() + names(&hi).len(), 24);
    // `||` of both halves is the whole space.
    let both = format!("{low} || {high}");
    let (_, all) = list(
        &c,
        &format!("{base}/api/v1/pods?shardSelector={}", q(&both)),
    )
    .await;
    assert_eq!(names(&all).len(), 24);
    assert_eq!(all["metadata"]["shardInfo"]["selector"], both.as_str());
    let (_, plain) = list(&c, &format!("{base}/api/v1/pods")).await;
    assert!(
        plain["metadata"].get("shardInfo").is_none(),
        "{}",
        plain["metadata"]
    );
    // Composed with a label selector, a field selector and a namespace path, and paged.
    let (_, l) = list(
        &c,
        &format!(
            "{base}/api/v1/namespaces/a/pods?labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1&shardSelector={}",
            q(&low)
        ),
    )
    .await;
    assert_eq!(
        names(&l),
        expect(&|ns, app, h| ns == "a" && app == "web" && h < half)
    );
    let mut paged = BTreeSet::new();
    let mut cont = String::new();
    loop {
        let (_, page) = list(
            &c,
            &format!(
                "{base}/api/v1/pods?limit=3&shardSelector={}&continue={}",
                q(&high),
                q(&cont)
            ),
        )
        .await;
        assert!(names(&page).len() <= 3);
        paged.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => cont = t.to_owned(),
            _ => break,
        }
    }
    assert_eq!(paged, names(&hi));
    // By namespace: every object of a namespace is in the same shard.
    let ns_a = fnv("a");
    let ns_sel = range("object.metadata.namespace", ns_a, Some(ns_a + 1));
    let (_, l) = list(
        &c,
        &format!("{base}/api/v1/pods?shardSelector={}", q(&ns_sel)),
    )
    .await;
    assert_eq!(names(&l), expect(&|ns, _, _| ns == "a"));

    // WATCH from the current revision: only the shard's changes, on the fast path.
    let rv = lo["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch = format!(
        "{base}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=8&shardSelector={}",
        q(&low)
    );
    let watching = tokio::spawn(async move { watch_lines(&Client::new(), &watch, 100).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut new_low = BTreeSet::new();
    for i in 24..40 {
        let p = create(&s, "a", &format!("p{i}"), "web").await;
        if fnv(p["metadata"]["uid"].as_str().unwrap()) < half {
            new_low.insert(format!("p{i}"));
        }
    }
    let seen: BTreeSet<String> = watching
        .await
        .unwrap()
        .iter()
        .map(|l| {
            assert_eq!(l["type"], "ADDED", "{l}");
            l["object"]["metadata"]["name"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(seen, new_low);

    // WatchList: initial events of the shard only, then the bookmark.
    let (_, lo) = list(&c, &format!("{base}/api/v1/pods?shardSelector={}", q(&low))).await;
    let url = format!(
        "{base}/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=3&shardSelector={}",
        q(&low)
    );
    let lines = watch_lines(&Client::new(), &url, names(&lo).len() + 1).await;
    let (init, end) = lines.split_at(lines.len() - 1);
    assert_eq!(
        init.iter()
            .map(|l| l["object"]["metadata"]["name"].as_str().unwrap().to_owned())
            .collect::<BTreeSet<_>>(),
        names(&lo)
    );
    assert_eq!(end[0]["type"], "BOOKMARK", "{}", end[0]);

    // Sharded watchers are routed: the metric counts them as routed, not unrouted.
    let rv = lo["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch = format!(
        "{base}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=8&shardSelector={}",
        q(&high)
    );
    let held = tokio::spawn(async move { watch_lines(&Client::new(), &watch, 1).await });
    let mut routed = false;
    for _ in 0..50 {
        let m = c
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if m.lines().any(|l| {
            l.contains("resource=\"pods\"") && l.contains("routing=\"routed\"") && l.ends_with(" 1")
        }) && m.lines().any(|l| {
            l.contains("resource=\"pods\"")
                && l.contains("routing=\"unrouted\"")
                && l.ends_with(" 0")
        }) {
            routed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(routed, "the sharded watcher is routed");
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_shard_selectors_are_400_naming_the_position() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = Client::new();
    // 219 of the shortest calls: over the 16 KiB length limit, which caps a selector at 218
    // ranges (upstream has no cap).
    let too_many = (0..219u64)
        .map(|i| {
            format!(
                "shardRange(object.metadata.uid,'0x{:016x}','0x{:016x}')",
                i * 2,
                i * 2 + 1
            )
        })
        .collect::<Vec<_>>()
        .join("||");
    for (sel, want) in [
        (
            "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
            "invalid shard selector: hexStart must be a 0x-prefixed 16-digit hex value, got \"0x0\" (did you mean \"0x0000000000000000\"?) (at position 32)",
        ),
        (
            "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
            "unsupported field path \"object.metadata.name\"",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && x",
            "(at position 76)",
        ),
        ("   ", "empty shard selector is not allowed"),
        (
            too_many.as_str(),
            "invalid shard selector: shard selector is 16423 bytes long; the limit is 16384 (at most 218 shardRange calls) (at position 16384)",
        ),
    ] {
        for watch in ["", "&watch=1"] {
            let url = format!("{}/api/v1/pods?shardSelector={}{watch}", s.url, q(sel));
            // A new client: a watch is served on the fast path.
            let r = Client::new().get(&url).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{sel}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["reason"], "BadRequest", "{v}");
            assert!(v["message"].as_str().unwrap().contains(want), "{sel}: {v}");
        }
    }
    // An empty parameter is no selector, as upstream reads it.
    let (st, l) = list(&c, &format!("{}/api/v1/pods?shardSelector=", s.url)).await;
    assert_eq!(st, StatusCode::OK, "{l}");
}

//! The HTTP API against a real etcd: paths, every parameter, every error code, pagination,
//! bookmarks, sendInitialEvents, gzip, limits, discovery and metrics. Objects are put straight
//! into etcd, as kube-apiserver stores them: the server is read-only.

use crate::support;

use std::io::Read;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use support::pod_value;
use support::server::{TestServer, watch_lines};
use watchcache_server::ServerConfig;

/// A pod put straight into etcd, as kube-apiserver stores it (the server is read-only); as the
/// server's cache then holds it.
async fn create(s: &TestServer, ns: &str, body: &Value) -> Value {
    s.seed(&format!("/api/v1/namespaces/{ns}/pods"), body).await
}

async fn get_json(c: &Client, url: &str) -> (StatusCode, Value) {
    let r = c.get(url).send().await.unwrap();
    (r.status(), r.json().await.unwrap())
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

fn assert_status(v: &Value, code: u16, reason: &str) {
    assert_eq!(
        (v["kind"].as_str(), v["code"].as_u64(), v["reason"].as_str()),
        (Some("Status"), Some(code as u64), Some(reason)),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_gets_and_pages_with_selectors() {
    let s = TestServer::start(ServerConfig::default()).await;
    let (c, base) = (Client::new(), s.url.clone());
    for i in 0..12 {
        create(
            &s,
            if i % 2 == 0 { "a" } else { "b" },
            &pod_value(
                &format!("p{i:02}"),
                &format!("n{}", i % 3),
                if i < 6 { "web" } else { "db" },
            ),
        )
        .await;
    }
    let (code, list) = get_json(&c, &format!("{base}/api/v1/pods")).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("PodList"), Some("v1"))
    );
    assert_eq!(names(&list).len(), 12);
    let (_, l) = get_json(&c, &format!("{base}/api/v1/namespaces/a/pods?fieldSelector=spec.nodeName%3Dn0&labelSelector=app%3Dweb")).await;
    assert_eq!(names(&l), ["p00"]);
    let (_, l) = get_json(&c, &format!("{base}/api/v1/pods?labelSelector=app+in+(db),app!%3Dweb&fieldSelector=metadata.namespace!%3Da")).await;
    assert_eq!(names(&l), ["p07", "p09", "p11"]);
    // Pagination at one revision, with continue and remainingItemCount (known for a page gathered
    // from an index of the cache).
    let (_, p1) = get_json(
        &c,
        &format!("{base}/api/v1/pods?resourceVersion=0&limit=5&labelSelector=app%3Ddb"),
    )
    .await;
    assert_eq!(names(&p1).len(), 5);
    assert_eq!(p1["metadata"]["remainingItemCount"], 1);
    let token = p1["metadata"]["continue"].as_str().unwrap().to_owned();
    s.unseed("/api/v1/namespaces/b/pods", "p11").await;
    let (_, p2) = get_json(
        &c,
        &format!("{base}/api/v1/pods?limit=5&labelSelector=app%3Ddb&continue={token}"),
    )
    .await;
    // A consistent paged list (served from etcd 3.4.23) pages the same way.
    let (_, c1) = get_json(&c, &format!("{base}/api/v1/pods?limit=4")).await;
    let t = c1["metadata"]["continue"].as_str().unwrap().to_owned();
    let (_, c2) = get_json(&c, &format!("{base}/api/v1/pods?limit=100&continue={t}")).await;
    assert_eq!(names(&c1).len() + names(&c2).len(), 11);
    assert_eq!(
        names(&p2),
        ["p11"],
        "the continuation is consistent with the first page"
    );
    assert_eq!(
        p2["metadata"]["resourceVersion"],
        p1["metadata"]["resourceVersion"]
    );
    assert!(p2["metadata"].get("continue").is_none());
    // GET one object, with resourceVersion semantics.
    let (code, obj) = get_json(
        &c,
        &format!("{base}/api/v1/namespaces/a/pods/p00?resourceVersion=0"),
    )
    .await;
    assert_eq!(
        (code, obj["metadata"]["name"].as_str()),
        (StatusCode::OK, Some("p00"))
    );
    let (code, st) = get_json(&c, &format!("{base}/api/v1/namespaces/a/pods/nope")).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_status(&st, 404, "NotFound");
    // Exact and NotOlderThan.
    let at = rv(&p1);
    let (_, exact) = get_json(&c, &format!("{base}/api/v1/pods?resourceVersion={at}&resourceVersionMatch=Exact&labelSelector=app%3Ddb")).await;
    assert_eq!(names(&exact).len(), 6);
    let (_, now) = get_json(&c, &format!("{base}/api/v1/pods?resourceVersion={at}&resourceVersionMatch=NotOlderThan&labelSelector=app%3Ddb")).await;
    assert_eq!(names(&now).len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_statuses_with_the_right_codes() {
    let s = TestServer::start(ServerConfig {
        max_selector_len: 64,
        max_body_bytes: 4096,
        ..ServerConfig::default()
    })
    .await;
    let (c, base) = (Client::new(), s.url.clone());
    let cases: &[(&str, u16, &str, &str)] = &[
        (
            "/api/v1/pods?labelSelector=app%20in%20(x",
            400,
            "BadRequest",
            "at position 9",
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName",
            400,
            "BadRequest",
            "expected an operator",
        ),
        (
            "/api/v1/pods?resourceVersion=abc",
            400,
            "BadRequest",
            "invalid resource version",
        ),
        ("/api/v1/pods?limit=ten", 400, "BadRequest", "invalid limit"),
        ("/api/v1/pods?watch=perhaps", 400, "BadRequest", "for watch"),
        (
            "/api/v1/pods?resourceVersionMatch=Exact",
            422,
            "Invalid",
            "forbidden unless resourceVersion",
        ),
        (
            "/api/v1/pods?resourceVersion=0&resourceVersionMatch=Exact",
            422,
            "Invalid",
            "forbidden for resourceVersion",
        ),
        (
            "/api/v1/pods?resourceVersionMatch=Sometimes&resourceVersion=1",
            422,
            "Invalid",
            "NotOlderThan or Exact",
        ),
        (
            "/api/v1/pods?continue=bogus",
            400,
            "BadRequest",
            "continue key is not valid",
        ),
        (
            "/api/v1/pods?sendInitialEvents=true",
            422,
            "Invalid",
            "forbidden for list",
        ),
        (
            "/api/v1/pods?labelSelector=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            400,
            "BadRequest",
            "the limit is 64",
        ),
        ("/api/v1/gizmos", 404, "NotFound", "could not find"),
        ("/api/v2/pods", 404, "NotFound", "could not find"),
        ("/api/v1/pods/x", 404, "NotFound", "could not find"),
        (
            "/api/v1/namespaces/a/nodes",
            404,
            "NotFound",
            "could not find",
        ),
        (
            "/api/v1/pods?resourceVersion=999999&resourceVersionMatch=NotOlderThan",
            504,
            "Timeout",
            "Too large resource version",
        ),
    ];
    for (path, code, reason, msg) in cases {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), *code, "{path}");
        let retry = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let v: Value = r.json().await.unwrap();
        assert_status(&v, *code, reason);
        assert!(v["message"].as_str().unwrap().contains(msg), "{path}: {v}");
        if *code == 504 {
            assert_eq!(retry.as_deref(), Some("1"));
            assert_eq!(
                v["details"]["causes"][0]["reason"],
                "ResourceVersionTooLarge"
            );
        }
    }
    // An oversized body is refused before anything else (the body limit holds for every
    // request); a write is 405 (this server is read-only: writes are kube-apiserver's).
    let big = json!({"metadata": {"name": "big", "annotations": {"x": "y".repeat(5000)}}});
    let r = c
        .post(format!("{base}/api/v1/namespaces/a/pods"))
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_status(&r.json().await.unwrap(), 413, "RequestEntityTooLarge");
    let r = c
        .patch(format!("{base}/api/v1/namespaces/a/pods"))
        .header("content-type", "application/merge-patch+json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_status(&r.json().await.unwrap(), 405, "MethodNotAllowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_stream_events_bookmarks_initial_events_and_410() {
    let mut defs = watchcache::ResourceDef::builtins();
    for d in defs.iter_mut().filter(|d| d.plural == "pods") {
        d.history = watchcache::HistoryConfig {
            min_events: 64,
            max_events: 64,
            window: Duration::from_secs(75),
            max_bytes: None,
        };
    }
    let s = TestServer::start_with_defs(ServerConfig::default(), |_| {}, defs).await;
    let (c, base) = (Client::new(), s.url.clone());
    let a = create(&s, "a", &pod_value("a", "n1", "web")).await;
    let start = rv(&a);
    // A routed watch from a revision: the rest of history, then live events, one per line.
    let url = format!(
        "{base}/api/v1/pods?watch=1&resourceVersion={}&fieldSelector=spec.nodeName%3Dn1",
        start - 1
    );
    let watcher = {
        let (c, url) = (c.clone(), url.clone());
        tokio::spawn(async move { watch_lines(&c, &url, 4).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    create(&s, "a", &pod_value("b", "n2", "web")).await;
    create(&s, "a", &pod_value("c", "n1", "web")).await;
    // A bound pod deleted with grace 0, as kube-apiserver deletes it: its deletionTimestamp is
    // written, then it is removed.
    let mut dying = a.clone();
    dying["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
    dying["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    s.seed("/api/v1/namespaces/a/pods", &dying).await;
    s.unseed("/api/v1/namespaces/a/pods", "a").await;
    let lines = watcher.await.unwrap();
    let got: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["type"].as_str().unwrap().to_owned(),
                l["object"]["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ADDED".into(), "a".into()),
            ("ADDED".into(), "c".into()),
            ("MODIFIED".into(), "a".into()),
            ("DELETED".into(), "a".into())
        ]
    );
    assert!(lines[2]["object"]["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        lines[2]["object"]["metadata"]["deletionGracePeriodSeconds"],
        0
    );
    // WatchList: initial events, then the initial-events-end bookmark.
    let url = format!(
        "{base}/api/v1/namespaces/a/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=5"
    );
    let lines = watch_lines(&c, &url, 3).await;
    assert_eq!(lines.len(), 3);
    assert_eq!(
        (lines[0]["type"].as_str(), lines[1]["type"].as_str()),
        (Some("ADDED"), Some("ADDED"))
    );
    assert_eq!(lines[2]["type"], "BOOKMARK");
    assert_eq!(
        lines[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(lines[2]["object"]["kind"], "Pod");
    // timeoutSeconds ends the stream.
    let t = std::time::Instant::now();
    let lines = watch_lines(
        &c,
        &format!(
            "{base}/api/v1/pods?watch=1&resourceVersion={}&timeoutSeconds=1",
            start + 100
        ),
        10,
    )
    .await;
    assert!(lines.is_empty() && t.elapsed() < Duration::from_secs(5));
    // A resourceVersion older than the window is an ERROR event carrying 410 Expired.
    let mut etcd = etcd_client::Client::connect([s.etcd.server.url()], None)
        .await
        .unwrap();
    for i in 0..100 {
        let mut p = pod_value("churn", &format!("n{i}"), "x");
        p["metadata"]["namespace"] = json!("a");
        etcd.put("/registry/pods/a/churn", p.to_string(), None)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = watch_lines(
        &c,
        &format!("{base}/api/v1/pods?watch=1&resourceVersion=2"),
        1,
    )
    .await;
    assert_eq!(lines[0]["type"], "ERROR");
    assert_status(&lines[0]["object"], 410, "Expired");
    assert!(
        lines[0]["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version: 2")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_discovery_metrics_readiness_and_the_watcher_limit() {
    let mut s = TestServer::start(ServerConfig {
        max_watchers: 2,
        ..ServerConfig::default()
    })
    .await;
    let (c, base) = (Client::new(), s.url.clone());
    create(&s, "a", &pod_value("g", "n1", "web")).await;
    // gzip when asked, for lists and watches.
    let r = c
        .get(format!("{base}/api/v1/pods"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.bytes().await.unwrap()[..])
        .read_to_string(&mut text)
        .unwrap();
    assert!(text.contains("\"PodList\""));
    let r = c
        .get(format!(
            "{base}/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=1"
        ))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.bytes().await.unwrap()[..])
        .read_to_string(&mut text)
        .unwrap();
    assert!(text.starts_with("{\"type\":\"ADDED\""), "{text}");
    // Discovery.
    let (_, api) = get_json(&c, &format!("{base}/api")).await;
    assert_eq!(api["versions"], json!(["v1"]));
    let (_, v1) = get_json(&c, &format!("{base}/api/v1")).await;
    assert!(
        v1["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pods" && r["namespaced"] == true)
    );
    let (_, apis) = get_json(&c, &format!("{base}/apis")).await;
    assert!(
        apis["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com")
    );
    let (_, gv) = get_json(&c, &format!("{base}/apis/discovery.k8s.io/v1")).await;
    assert_eq!(gv["resources"][0]["name"], "endpointslices");
    // Health and metrics.
    assert_eq!(
        c.get(format!("{base}/livez"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        c.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    // Two watches fill the limit; a third is 429.
    let w1 = c
        .get(format!(
            "{base}/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dn1"
        ))
        .send()
        .await
        .unwrap();
    let w2 = c
        .get(format!("{base}/api/v1/pods?watch=1"))
        .send()
        .await
        .unwrap();
    let r = c
        .get(format!("{base}/api/v1/pods?watch=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let metrics = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "watchcache_watchers{resource=\"pods\",routing=\"routed\"} 1",
        "watchcache_watchers{resource=\"pods\",routing=\"unrouted\"} 1",
        "watchcache_events_received_total{resource=\"pods\"} 1",
        "watchcache_list_duration_seconds_count{resource=\"pods\"}",
        "watchcache_lag_revisions{resource=\"pods\"} 0",
        "watchcache_history_events{resource=\"pods\"} 1",
        "watchcache_watchers_expired_total",
        "watchcache_watchers_parked_total",
        "watchcache_events_dispatched_total",
        "watchcache_resource_version{resource=\"pods\"}",
    ] {
        assert!(metrics.contains(want), "{want} missing from\n{metrics}");
    }
    // Shutdown ends open watch streams cleanly, and an idle connection that never sent a request
    // does not hold it up.
    let _idle = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    s.stop().await;
    for w in [w1, w2] {
        let body = tokio::time::timeout(Duration::from_secs(5), w.bytes())
            .await
            .expect("stream ends on shutdown");
        assert!(body.is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unready_caches_answer_429_with_retry_after() {
    let mut s = TestServer::start_with(ServerConfig::default(), |c| {
        c.unavailable_grace = Duration::from_millis(500)
    })
    .await;
    let (c, base) = (Client::new(), s.url.clone());
    s.etcd.server.kill9();
    let mut answer = None;
    for _ in 0..100 {
        let r = c
            .get(format!("{base}/api/v1/pods?resourceVersion=0"))
            .send()
            .await
            .unwrap();
        if r.status().as_u16() == 429 {
            answer = Some((
                r.headers()["retry-after"].to_str().unwrap().to_owned(),
                r.json::<Value>().await.unwrap(),
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (retry, status) = answer.expect("429 within 10 s of etcd going away");
    assert!(retry.parse::<u64>().unwrap() >= 1);
    assert_status(&status, 429, "TooManyRequests");
    assert_eq!(
        c.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        503
    );
    s.etcd.server.restart().await.unwrap();
    let mut ready = false;
    for _ in 0..100 {
        if c.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
            == 200
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready);
}

/// Reads from a raw socket until `end` appears (or 10 s pass).
async fn read_until(s: &mut tokio::net::TcpStream, end: &[u8]) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !out.windows(end.len()).any(|w| w == end) {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_connection_is_kept_alive_and_a_gone_client_releases_its_watcher() {
    use tokio::io::AsyncWriteExt;
    let s = TestServer::start(ServerConfig::default()).await;
    let (c, base) = (Client::new(), s.url.clone());
    create(&s, "a", &pod_value("k", "n1", "web")).await;
    let addr = base.trim_start_matches("http://");
    // A watch as the connection's first request, then a LIST on the same connection.
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(b"GET /api/v1/pods?watch=true&resourceVersion=0&timeoutSeconds=1 HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let watch = read_until(&mut sock, b"\r\n0\r\n\r\n").await;
    let text = String::from_utf8_lossy(&watch);
    assert!(
        text.starts_with("HTTP/1.1 200 OK\r\n") && text.contains("Transfer-Encoding: chunked"),
        "{text}"
    );
    assert!(text.contains(r#"{"type":"ADDED","object":"#), "{text}");
    sock.write_all(b"GET /api/v1/namespaces/a/pods/k HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let get = read_until(&mut sock, b"}}").await;
    let text = String::from_utf8_lossy(&get);
    assert!(
        text.starts_with("HTTP/1.1 200 OK") && text.contains(r#""name":"k""#),
        "{text}"
    );
    // Errors on the fast path are Status responses too.
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(
        b"GET /api/v1/pods?watch=1&labelSelector=a%20in%20(b HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&read_until(&mut sock, b"}").await).into_owned();
    assert!(
        err.starts_with("HTTP/1.1 400 Bad Request") && err.contains(r#""reason":"BadRequest""#),
        "{err}"
    );
    // A client that goes away without any event releases its watcher.
    let watchers = |m: &str| {
        m.lines()
            .filter(|l| l.starts_with("watchcache_watchers{resource=\"pods\""))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnowhere HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    read_until(&mut idle, b"\r\n\r\n").await;
    let m = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(watchers(&m), 1);
    drop(idle);
    let mut released = false;
    for _ in 0..50 {
        let m = c
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if watchers(&m) == 0 {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(released, "the watcher of a disconnected client is released");
}

//! Every metric operators expect (issue 22, item 5), each shown moving on `/metrics` after the
//! thing it counts happened, on a memory-fed server: requests by verb, resource and code and
//! their durations, long-running requests and registered watchers, watch events and their sizes,
//! dispatch latency by stage, read waits and refusals, bytes per resource.

use std::time::Duration;

use crate::support::TestPod;
use futures_util::StreamExt;
use reqwest::{Client, StatusCode};
use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef};
use watchcache_server::{Served, Server, ServerConfig};

struct Fixture {
    url: String,
    pods: MemorySource,
    // Held, never used: the nodes cache's sync never finishes.
    _nodes_writer: watchcache::CacheWriter,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A server over pods (fed by a memory source at revision 1) and nodes (a cache whose initial
/// sync never finishes: not ready). Reads wait at most 300 ms for freshness.
async fn serve() -> Fixture {
    let config = CacheConfig {
        too_large_wait: Duration::from_millis(300),
        ..CacheConfig::default()
    };
    let (pods, pods_writer) = Cache::new(ResourceDef::builtin("pods").unwrap(), config.clone());
    let (nodes, nodes_writer) = Cache::new(ResourceDef::builtin("nodes").unwrap(), config);
    let src = MemorySource::new(pods_writer, 1, []);
    let server = Server::new(
        ServerConfig::default(),
        [Served::new(pods), Served::new(nodes)],
    );
    let (url, stop) = crate::support::server::serve_http(server).await;
    Fixture {
        url,
        pods: src,
        _nodes_writer: nodes_writer,
        _stop: stop,
    }
}

async fn scrape(url: &str) -> String {
    Client::new()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The sum of the samples of `name` having all of `labels` (0 when there is none).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `f` holds for a scrape (the pump records a frame as written after the write).
async fn eventually(url: &str, f: impl Fn(&str) -> bool) -> String {
    for _ in 0..50 {
        let text = scrape(url).await;
        if f(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = scrape(url).await;
    panic!("the metrics never got there:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_by_verb_resource_scope_and_code_with_their_durations() {
    let f = serve().await;
    let c = Client::new();
    let before = scrape(&f.url).await;
    let list = [("verb", "LIST"), ("resource", "pods"), ("code", "200")];
    assert_eq!(sample(&before, "apiserver_request_total", &list), 0.0);

    for _ in 0..2 {
        let r = c
            .get(format!("{}/api/v1/pods", f.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = c
        .post(format!("{}/api/v1/namespaces/default/pods", f.url))
        .body(
            TestPod::new("default", "a")
                .uid("u-a")
                .node("n1")
                .container("c", "x")
                .json(),
        )
        .header("Content-Type", "application/json")
        .send()
        .await
        .unwrap();
    // Counted as upstream counts it, refused: this server is read-only.
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    f.pods
        .put(
            "/registry/pods/default/a",
            TestPod::new("default", "a")
                .uid("u-a")
                .node("n1")
                .container("c", "x")
                .json(),
        )
        .unwrap();
    let r = c
        .get(format!("{}/api/v1/namespaces/default/pods/missing", f.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // A path naming nothing served: counted without a resource (bounded labels).
    let r = c
        .get(format!(
            "{}/apis/made.up/v1/things{}",
            f.url,
            "x".repeat(20)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    let text = scrape(&f.url).await;
    let all = |extra: &[(&'static str, &'static str)]| {
        let mut l = vec![
            ("component", "apiserver"),
            ("dry_run", ""),
            ("group", ""),
            ("version", "v1"),
            ("subresource", ""),
        ];
        l.extend_from_slice(extra);
        l
    };
    assert_eq!(
        sample(
            &text,
            "apiserver_request_total",
            &all(&[
                ("verb", "LIST"),
                ("resource", "pods"),
                ("scope", "cluster"),
                ("code", "200")
            ])
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "apiserver_request_total",
            &all(&[
                ("verb", "POST"),
                ("resource", "pods"),
                ("scope", "resource"),
                ("code", "405")
            ])
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "apiserver_request_total",
            &all(&[
                ("verb", "GET"),
                ("resource", "pods"),
                ("scope", "resource"),
                ("code", "404")
            ])
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "apiserver_request_total",
            &[
                ("verb", "GET"),
                ("resource", ""),
                ("group", ""),
                ("code", "404")
            ]
        ),
        1.0
    );
    assert!(
        !text.contains("made.up"),
        "no label value from an unserved path"
    );
    assert_eq!(
        sample(
            &text,
            "apiserver_request_duration_seconds_count",
            &[("verb", "LIST"), ("resource", "pods")]
        ),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            "apiserver_request_duration_seconds_bucket",
            &[("verb", "LIST"), ("resource", "pods"), ("le", "+Inf")]
        ),
        2.0
    );
    // Bytes per resource: the LIST bodies, and what is cached.
    assert!(
        sample(
            &text,
            "watchcache_sent_bytes_total",
            &[("resource", "pods"), ("verb", "LIST")]
        ) > 0.0
    );
    assert_eq!(
        sample(&text, "watchcache_object_bytes", &[("resource", "pods")]),
        f.pods
            .cache()
            .list(&Default::default())
            .await
            .unwrap()
            .items[0]
            .stored_len() as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_long_running_registered_and_their_events_counted_sized_and_timed() {
    let f = serve().await;
    let kind = [("group", ""), ("version", "v1"), ("kind", "Pod")];
    let longrunning = [
        ("verb", "WATCH"),
        ("resource", "pods"),
        ("scope", "namespace"),
    ];
    // One watch on the fast path (first request of its connection), one through hyper.
    let c = Client::new();
    let _ = c
        .get(format!("{}/api/v1/pods", f.url))
        .send()
        .await
        .unwrap();
    let url = format!(
        "{}/api/v1/namespaces/default/pods?watch=1&resourceVersion=1",
        f.url
    );
    let mut fast = Client::new().get(&url).send().await.unwrap().bytes_stream();
    let mut hyper = c.get(&url).send().await.unwrap().bytes_stream();
    let text = eventually(&f.url, |t| {
        sample(t, "apiserver_longrunning_requests", &longrunning) == 2.0
    })
    .await;
    assert_eq!(sample(&text, "apiserver_registered_watchers", &kind), 2.0);
    assert_eq!(sample(&text, "apiserver_watch_events_total", &kind), 0.0);
    let pods = [("resource", "pods")];
    assert_eq!(
        sample(
            &text,
            "watchcache_watch_registration_lock_hold_seconds_count",
            &pods
        ),
        2.0,
        "one longest hold per registered watch"
    );
    let held = sample(
        &text,
        "watchcache_watch_registration_lock_hold_seconds_sum",
        &pods,
    );
    assert!(held > 0.0 && held < 0.1, "{held} s");

    f.pods
        .put(
            "/registry/pods/default/a",
            TestPod::new("default", "a")
                .uid("u-a")
                .node("n1")
                .container("c", "x")
                .json(),
        )
        .unwrap();
    let mut frame_len = 0;
    for s in [&mut fast, &mut hyper] {
        let chunk = tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        frame_len = chunk.len();
    }
    let text = eventually(&f.url, |t| {
        sample(
            t,
            "watchcache_dispatch_latency_seconds_count",
            &[("resource", "pods"), ("stage", "written")],
        ) == 2.0
    })
    .await;
    assert_eq!(sample(&text, "apiserver_watch_events_total", &kind), 2.0);
    assert_eq!(
        sample(&text, "apiserver_watch_events_sizes_count", &kind),
        2.0
    );
    assert_eq!(
        sample(&text, "apiserver_watch_events_sizes_sum", &kind),
        2.0 * frame_len as f64
    );
    assert_eq!(
        sample(
            &text,
            "watchcache_dispatch_latency_seconds_count",
            &[("resource", "pods"), ("stage", "queued")]
        ),
        1.0,
        "one applied revision"
    );
    assert!(
        sample(
            &text,
            "watchcache_dispatch_latency_seconds_sum",
            &[("resource", "pods"), ("stage", "written")]
        ) > 0.0
    );
    assert_eq!(
        sample(
            &text,
            "watchcache_sent_bytes_total",
            &[("resource", "pods"), ("verb", "WATCH")]
        ),
        2.0 * frame_len as f64
    );
    assert_eq!(
        sample(
            &text,
            "apiserver_request_total",
            &[("verb", "WATCH"), ("resource", "pods"), ("code", "200")]
        ),
        2.0
    );

    // Ended watches leave the gauges and record their durations.
    drop(fast);
    drop(hyper);
    let text = eventually(&f.url, |t| {
        sample(t, "apiserver_longrunning_requests", &longrunning) == 0.0
            && sample(t, "apiserver_registered_watchers", &kind) == 0.0
    })
    .await;
    assert_eq!(
        sample(
            &text,
            "apiserver_request_duration_seconds_count",
            &[("verb", "WATCH"), ("resource", "pods")]
        ),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_waits_and_refusals_are_recorded() {
    let f = serve().await;
    let c = Client::new();
    let wait = [("group", ""), ("resource", "pods")];
    let refused = |reason| [("resource", "pods"), ("reason", reason)];
    // A consistent LIST waits for the upstream's revision (at once here).
    let r = c
        .get(format!("{}/api/v1/pods", f.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let text = scrape(&f.url).await;
    assert_eq!(
        sample(
            &text,
            "apiserver_watch_cache_read_wait_seconds_count",
            &wait
        ),
        1.0
    );
    // A LIST at a revision the cache never reaches: 504 after the wait, a refusal.
    let r = c
        .get(format!(
            "{}/api/v1/pods?resourceVersion=100&resourceVersionMatch=NotOlderThan",
            f.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
    // Nodes are not ready: 429, a refusal.
    let r = c
        .get(format!("{}/api/v1/nodes", f.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let text = scrape(&f.url).await;
    assert_eq!(
        sample(
            &text,
            "apiserver_watch_cache_read_wait_seconds_count",
            &wait
        ),
        2.0
    );
    assert!(sample(&text, "apiserver_watch_cache_read_wait_seconds_sum", &wait) >= 0.3);
    assert_eq!(
        sample(&text, "watchcache_read_refusals_total", &refused("timeout")),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "watchcache_read_refusals_total",
            &refused("not_ready")
        ),
        0.0
    );
    assert_eq!(
        sample(
            &text,
            "watchcache_read_refusals_total",
            &[("resource", "nodes"), ("reason", "not_ready")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "apiserver_request_total",
            &[("verb", "LIST"), ("resource", "pods"), ("code", "504")]
        ),
        1.0
    );
}

//! The server depends on the caches only: a cache fed by an in-process `MemorySource` is served
//! over HTTP, with watches (fast path and hyper), and no etcd anywhere. The process writes through
//! its source (the `Writes` contract, in code); over HTTP the server is read-only.

use std::time::Duration;

use crate::support::TestPod;
use futures_util::StreamExt;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef};
use watchcache_server::{Served, Server, ServerConfig};

async fn serve() -> (String, MemorySource, tokio::sync::oneshot::Sender<()>) {
    let (pods, pods_writer) = Cache::new(
        ResourceDef::builtin("pods").unwrap(),
        CacheConfig::default(),
    );
    let (nodes, nodes_writer) = Cache::new(
        ResourceDef::builtin("nodes").unwrap(),
        CacheConfig::default(),
    );
    let src = MemorySource::new(pods_writer, 1, []);
    let _nodes_src = MemorySource::new(nodes_writer, 1, []);
    let server = Server::new(
        ServerConfig::default(),
        [Served::new(pods), Served::new(nodes)],
    );
    let (url, stop) = crate::support::server::serve_http(server).await;
    (url, src, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_fed_cache_is_served_with_watches_and_written_in_code() {
    let (url, src, _stop) = serve().await;
    let c = Client::new();
    let pods = format!("{url}/api/v1/namespaces/default/pods");

    // A kubelet-style watch on the fast path (its connection's first request).
    let watch = reqwest::Client::new()
        .get(format!(
            "{url}/api/v1/pods?watch=1&resourceVersion=1&fieldSelector=spec.nodeName%3Dn1"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    let mut events = watch.bytes_stream();

    assert_eq!(
        src.put(
            "/registry/pods/default/a",
            TestPod::new("default", "a").node("n1").json()
        )
        .unwrap(),
        2
    );
    let created: Value = c
        .get(format!("{pods}/a"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["metadata"]["resourceVersion"], "2");

    let line = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let ev: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("a"))
    );

    src.put(
        "/registry/pods/default/a",
        TestPod::new("default", "a").node("n2").json(),
    )
    .unwrap();
    let line = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let ev: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(ev["type"], "DELETED", "moved off the watched node");

    // A second request on a kept-alive connection is served by hyper, including a watch.
    let list: Value = c.get(&pods).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["items"][0]["spec"]["nodeName"], "n2");
    let body = c
        .get(format!(
            "{url}/api/v1/pods?watch=1&resourceVersion=2&timeoutSeconds=1"
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("\"MODIFIED\""), "{body}");

    src.delete("/registry/pods/default/a").unwrap();
    let gone = c.get(format!("{pods}/a")).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);

    // Over HTTP, every resource is read-only: writes are 405 and reach no source.
    let nodes = c.get(format!("{url}/api/v1/nodes")).send().await.unwrap();
    assert_eq!(nodes.status(), StatusCode::OK);
    let revision = src.revision();
    for url in [pods.clone(), format!("{url}/api/v1/nodes")] {
        let write = c
            .post(&url)
            .json(&json!({"metadata": {"name": "n1"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(write.status(), StatusCode::METHOD_NOT_ALLOWED, "{url}");
    }
    assert_eq!(src.revision(), revision);
}

//! The server depends on the cache and the `Writes` contract only: a cache fed by an in-process
//! `MemorySource` is served over HTTP, with writes, watches (fast path and hyper) and a read-only
//! resource, and no etcd anywhere.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use watchcache::server::{Served, Server, ServerConfig};
use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef};

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
        [
            Served::new(pods, Arc::new(src.clone())),
            Served::read_only(nodes),
        ],
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(listener, async {
        stopped.await.ok();
    }));
    (url, src, stop)
}

fn pod(name: &str, node: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"nodeName": node}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_fed_cache_is_served_with_writes_and_watches() {
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

    let created = c.post(&pods).json(&pod("a", "n1")).send().await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["metadata"]["resourceVersion"], "2");
    assert_eq!(src.revision(), 2, "the write went to the source");

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

    let again = c.post(&pods).json(&pod("a", "n1")).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let mut stale = pod("a", "n2");
    stale["metadata"]["resourceVersion"] = json!("1");
    let stale = c
        .put(format!("{pods}/a"))
        .json(&stale)
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    let moved = c
        .put(format!("{pods}/a"))
        .json(&pod("a", "n2"))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), StatusCode::OK);
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

    let deleted = c.delete(format!("{pods}/a")).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::OK);
    assert!(src.value("/registry/pods/default/a").is_none());
    let gone = c.delete(format!("{pods}/a")).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);

    // A read-only resource is listed, and refuses writes.
    let nodes = c.get(format!("{url}/api/v1/nodes")).send().await.unwrap();
    assert_eq!(nodes.status(), StatusCode::OK);
    let write = c
        .post(format!("{url}/api/v1/nodes"))
        .json(&json!({"metadata": {"name": "n1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), StatusCode::METHOD_NOT_ALLOWED);
}

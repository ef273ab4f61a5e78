//! Fixtures shared by the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use watchcache::{
    Cache, CacheConfig, Error, EventType, MemorySource, ResourceDef, WatchEvent, WatchStream,
};

/// A pod's JSON.
pub fn pod(ns: &str, name: &str, node: &str, labels: &[(&str, &str)]) -> String {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("\"{k}\":\"{v}\""))
        .collect();
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","labels":{{{}}}}},"spec":{{"nodeName":"{node}"}},"status":{{"phase":"Running"}}}}"#,
        labels.join(",")
    )
}

/// The sum of Prometheus metric `name`'s samples in `text` whose labels contain every
/// `label="value"` given.
pub fn sum_samples(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|want| l.contains(want))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A pod with no namespace (the collection it is created in gives it one), labelled
/// `app: {app}`, as a JSON value to edit before it is written.
pub fn pod_value(name: &str, node: &str, app: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}}, "spec": {"nodeName": node}})
}

/// A pod's storage key.
pub fn key(ns: &str, name: &str) -> String {
    format!("/registry/pods/{ns}/{name}")
}

/// A ready pods cache fed by a memory source at revision 1.
pub fn pods(config: CacheConfig) -> (Cache, MemorySource) {
    let (cache, writer) = Cache::new(ResourceDef::builtin("pods").unwrap(), config);
    let src = MemorySource::new(writer, 1, []);
    (cache, src)
}

/// Every event the stream has ready now, without waiting.
pub fn ready_events(s: &mut WatchStream) -> Vec<Result<WatchEvent, Error>> {
    let mut out = Vec::new();
    while let Some(Some(item)) = s.next().now_or_never() {
        out.push(item);
    }
    out
}

/// The next event, failing the test after a second.
pub async fn next(s: &mut WatchStream) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("an event within 5 s")
        .expect("the stream is open")
        .expect("not an error")
}

/// (type, name, event rv) of a list of events.
pub fn summary(evs: &[Result<WatchEvent, Error>]) -> Vec<(EventType, String, u64)> {
    evs.iter()
        .map(|e| {
            let e = e.as_ref().expect("no error");
            (
                e.kind(),
                e.object().map(|o| o.name().to_owned()).unwrap_or_default(),
                e.resource_version(),
            )
        })
        .collect()
}
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(all(feature = "etcd", feature = "cli"))]
pub mod kube;
pub mod kubectl;
#[cfg(feature = "cli")]
pub mod pki;
#[cfg(all(feature = "etcd", feature = "server"))]
pub mod server;
pub mod venv;

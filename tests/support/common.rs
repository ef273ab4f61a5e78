//! Fixtures shared by every integration test binary: pods, keys, memory-fed caches, events, and
//! where the repository is.

use std::path::Path;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use watchcache::{
    Cache, CacheConfig, Error, EventType, MemorySource, ResourceDef, WatchEvent, WatchStream,
};

/// The repository's root, whichever of the workspace's packages the test binary belongs to
/// (tests/system is the binary's package's, the others the library's): test data, scripts, the
/// README and `target/` are found from here.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .expect("the workspace root (Cargo.lock) above CARGO_MANIFEST_DIR")
}

/// A pod's JSON: `namespace/name` on `node`, running, with `labels`.
pub fn pod(ns: &str, name: &str, node: &str, labels: &[(&str, &str)]) -> String {
    let mut p = TestPod::new(ns, name).node(node).phase("Running");
    for (k, v) in labels {
        p = p.label(k, v);
    }
    p.json()
}

/// A pod for a test to write, built from its namespace and name with what the test needs, so
/// that a test says what matters about its pod and no more ([`pod`] is one; [`pod_value`], a pod
/// without a namespace for a collection to give it one, is the other shape tests write).
///
/// `TestPod::new("default", "a").node("n1").container("c", "busybox").json()`
#[derive(Clone, Debug)]
pub struct TestPod(serde_json::Value);

impl TestPod {
    /// `apiVersion`, `kind` and `metadata.{name, namespace}`.
    pub fn new(ns: &str, name: &str) -> TestPod {
        TestPod(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns}}))
    }

    /// `metadata.uid`.
    pub fn uid(mut self, uid: &str) -> TestPod {
        self.0["metadata"]["uid"] = uid.into();
        self
    }

    /// One label more.
    pub fn label(mut self, key: &str, value: &str) -> TestPod {
        self.0["metadata"]["labels"][key] = value.into();
        self
    }

    /// `spec.nodeName`.
    pub fn node(mut self, node: &str) -> TestPod {
        self.0["spec"]["nodeName"] = node.into();
        self
    }

    /// One container more.
    pub fn container(mut self, name: &str, image: &str) -> TestPod {
        self.push(
            &["spec", "containers"],
            serde_json::json!({"name": name, "image": image}),
        );
        self
    }

    /// A volume of the Secret `secret`.
    pub fn secret_volume(mut self, volume: &str, secret: &str) -> TestPod {
        self.push(
            &["spec", "volumes"],
            serde_json::json!({"name": volume, "secret": {"secretName": secret}}),
        );
        self
    }

    /// A volume of the ConfigMap `config_map`.
    pub fn config_map_volume(mut self, volume: &str, config_map: &str) -> TestPod {
        self.push(
            &["spec", "volumes"],
            serde_json::json!({"name": volume, "configMap": {"name": config_map}}),
        );
        self
    }

    /// `status.phase`.
    pub fn phase(mut self, phase: &str) -> TestPod {
        self.0["status"]["phase"] = phase.into();
        self
    }

    /// `status`, whole.
    pub fn status(mut self, status: serde_json::Value) -> TestPod {
        self.0["status"] = status;
        self
    }

    /// The pod as a value, to edit further or to send.
    pub fn value(self) -> serde_json::Value {
        self.0
    }

    /// The pod's JSON.
    pub fn json(&self) -> String {
        self.0.to_string()
    }

    fn push(&mut self, path: &[&str], item: serde_json::Value) {
        let mut at = &mut self.0;
        for k in path {
            at = &mut at[*k];
        }
        if !at.is_array() {
            *at = serde_json::Value::Array(Vec::new());
        }
        if let serde_json::Value::Array(items) = at {
            items.push(item);
        }
    }
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

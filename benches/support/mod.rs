//! Fixtures shared by the benches: realistic pod JSON and a cache preloaded with decoded pods.
// Each bench uses some of these; they are written as the API they are to the benches.
#![allow(dead_code, unreachable_pub)]

use watchcache::{Cache, CacheConfig, CacheWriter, Object, ResourceDef};

/// A pod of about `pad` + 600 bytes of JSON, shaped like a real one.
pub fn pod_json(ns: &str, name: &str, node: &str, app: &str, pad: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","uid":"6f1c2d3e-0000-4000-8000-{name:0>12}","creationTimestamp":"2026-11-21T10:00:00Z","labels":{{"app":"{app}","pod-template-hash":"7c9b8d6f5"}},"annotations":{{"note":"{}"}}}},"spec":{{"nodeName":"{node}","containers":[{{"name":"main","image":"registry.example/app:1.2.3","resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}}}},"ports":[{{"containerPort":8080,"protocol":"TCP"}}]}}],"restartPolicy":"Always","serviceAccountName":"default"}},"status":{{"phase":"Running","podIP":"10.0.0.1","hostIP":"192.0.2.1","conditions":[{{"type":"Ready","status":"True"}}]}}}}"#,
        "x".repeat(pad)
    )
}

/// A pod's storage key.
pub fn key(ns: &str, name: &str) -> String {
    format!("/registry/pods/{ns}/{name}")
}

/// Decoded pods: pod i is on node i % nodes.
pub fn pods(cache: &Cache, n: usize, nodes: usize, pad: usize, rv: u64) -> Vec<Object> {
    (0..n)
        .map(|i| {
            let (ns, name, node) = (
                format!("ns-{}", i % 100),
                format!("pod-{i}"),
                format!("node-{}", i % nodes),
            );
            cache
                .decode(
                    &key(&ns, &name),
                    pod_json(&ns, &name, &node, "web", pad).as_bytes(),
                    rv,
                )
                .unwrap()
        })
        .collect()
}

/// A ready cache holding `objects`, synced at revision `rv`, and its writer.
pub fn loaded(
    def: ResourceDef,
    config: CacheConfig,
    objects: Vec<Object>,
    rv: u64,
) -> (Cache, CacheWriter) {
    let (cache, mut writer) = Cache::new(def, config);
    let mut r = writer.resync(rv);
    r.add_page(objects);
    r.finish();
    (cache, writer)
}

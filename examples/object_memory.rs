//! Heap per cached object against its JSON size, for kube-apiserver 1.35's own objects
//! (`tests/data/kubernetes-protobuf/*.etcd.bin`: bytes its storage codec wrote).
//!
//! For each vector, N copies with distinct names (`<name>-00000` ...) are made in kube-apiserver's
//! storage form (protobuf, `k8s\0` + `runtime.Unknown`, no resourceVersion), decoded as the etcd
//! follower decodes them and loaded into a cache of the resource; the heap they hold (a counting
//! global allocator: bytes asked for, not the allocator's own overhead) is divided by N and set
//! against the JSON kube-apiserver serves for the object (the vector's `.json`, its name 6 bytes
//! longer). The same objects stored as JSON are measured beside them. Nothing is encoded on the
//! way: a cache that only ingests never makes an object's JSON.
//!
//! `cargo run --release --example object_memory [N]` (default 20 000).

#[path = "../benches/counting/mod.rs"]
mod counting;

use counting::live;
use watchcache::{Cache, CacheConfig, Object, ResourceDef};

/// (file stem, resource, etcd key prefix up to the name, name).
const VECTORS: &[(&str, &str, &str, &str)] = &[
    ("pod", "pods", "/registry/pods/default/", "web-7d4b9c-x2k8p"),
    ("zero-pod", "pods", "/registry/pods/default/", "zero"),
    ("node", "nodes", "/registry/minions/", "node-1"),
    ("namespace", "namespaces", "/registry/namespaces/", "team-a"),
    (
        "service",
        "services",
        "/registry/services/specs/default/",
        "web",
    ),
    (
        "endpointslice",
        "endpointslices.discovery.k8s.io",
        "/registry/endpointslices/default/",
        "web-x7k2q",
    ),
    (
        "lease",
        "leases.coordination.k8s.io",
        "/registry/leases/kube-node-lease/",
        "node-1",
    ),
    (
        "event",
        "events",
        "/registry/events/default/",
        "web-7d4b9c-x2k8p.18a9f3c2d4e5b6a7",
    ),
    (
        "configmap",
        "configmaps",
        "/registry/configmaps/default/",
        "web-config",
    ),
    (
        "secret",
        "secrets",
        "/registry/secrets/default/",
        "db-credentials",
    ),
];

/// The GET bodies' resourceVersion: loading at it makes each object's JSON the vector's.
const RV: u64 = 12345;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kubernetes-protobuf"
    );
    println!("N = {n} copies per vector; bytes per object (heap, counting allocator)\n");
    println!(
        "| object | stored (protobuf) B | JSON as served B | per object, stored as protobuf B | ratio | per object, stored as JSON B | ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for &(stem, resource, prefix, name) in VECTORS {
        let def = ResourceDef::builtin(resource).unwrap();
        let (probe, _w) = Cache::new(def.clone(), CacheConfig::default());
        let stored = std::fs::read(format!("{dir}/{stem}.etcd.bin")).unwrap();
        let served = std::fs::read(format!("{dir}/{stem}.json")).unwrap();
        let served_len = served.trim_ascii_end().len();
        // The vector as the cache reads it, then its JSON with another name, then that JSON in
        // storage form: JSON decoded, its protobuf as served, read back at revision 0 (which
        // leaves the resourceVersion out, as kube-apiserver's storage does).
        let original = probe
            .decode(&format!("{prefix}{name}"), &stored, RV)
            .unwrap();
        let original: serde_json::Value = serde_json::from_slice(original.json()).unwrap();
        let json_of = |copy: &str| -> String {
            let mut v = original.clone();
            v["metadata"]["name"] = serde_json::Value::from(copy);
            v.to_string()
        };
        let storage_of = |name: &str, json: &str| -> Vec<u8> {
            let key = format!("{prefix}{name}");
            let o = probe.decode(&key, json.as_bytes(), RV).unwrap();
            let back = probe.decode(&key, o.protobuf_wire().unwrap(), 0).unwrap();
            back.protobuf_wire().unwrap().to_vec()
        };
        // The round trip reproduces kube-apiserver's bytes, so the copies are what it would write.
        assert_eq!(
            storage_of(name, &json_of(name)),
            stored,
            "{stem}: the storage form made here differs from kube-apiserver's"
        );
        let names: Vec<String> = (0..n).map(|i| format!("{name}-{i:05}")).collect();
        let pb: Vec<(String, Vec<u8>)> = names
            .iter()
            .map(|m| (format!("{prefix}{m}"), storage_of(m, &json_of(m))))
            .collect();
        let json: Vec<(String, Vec<u8>)> = names
            .iter()
            .map(|m| (format!("{prefix}{m}"), json_of(m).into_bytes()))
            .collect();
        let per_pb = per_object(&def, &probe, &pb);
        let per_json = per_object(&def, &probe, &json);
        // Each copy's name is 6 bytes longer than the vector's.
        let json_len = (served_len + 6) as f64;
        println!(
            "| {stem} | {} | {} | {per_pb:.0} | {:.2} | {per_json:.0} | {:.2} |",
            stored.len() + 6,
            served_len + 6,
            per_pb / json_len,
            per_json / json_len
        );
    }
}

/// Heap per object held by a cache loaded with `values` (decoding included), once the inputs are
/// gone.
fn per_object(def: &ResourceDef, probe: &Cache, values: &[(String, Vec<u8>)]) -> f64 {
    let before = live();
    let objects: Vec<Object> = values
        .iter()
        .map(|(k, v)| probe.decode(k, v, RV).unwrap())
        .collect();
    let (cache, mut writer) = Cache::new(def.clone(), CacheConfig::default());
    let mut r = writer.resync(RV);
    r.add_page(objects);
    r.finish();
    let per = (live() - before) as f64 / values.len() as f64;
    assert_eq!(cache.stats().objects, values.len());
    drop((cache, writer));
    per
}

//! Decoding one pod at ingest, JSON against kube-apiserver's protobuf, without the ingest bench's
//! 200 000-pod set-up (so runs can alternate on a noisy machine). `decode/json_padded` is the
//! ingest bench's ~2 KB pod (600 bytes of fields and a 1 400-byte annotation);
//! `decode/json_upstream_pod` and `decode/protobuf_upstream_pod` are the same realistic pod as
//! kube-apiserver returns it (2 891 bytes of JSON) and stores it (1 348 bytes of protobuf).

mod support;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use watchcache::{Cache, CacheConfig, ResourceDef};

fn bench(c: &mut Criterion) {
    let (cache, _writer) = Cache::new(
        ResourceDef::builtin("pods").unwrap(),
        CacheConfig::default(),
    );
    let data = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kubernetes-protobuf/"
    );
    let padded = support::pod_json("ns-1", "pod-1", "node-1", "web", 1400);
    let padded_key = support::key("ns-1", "pod-1");
    let json = std::fs::read(format!("{data}pod.json")).unwrap();
    let pb = std::fs::read(format!("{data}pod.etcd.bin")).unwrap();
    let key = "/registry/pods/default/web-7d4b9c-x2k8p";
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(1));
    g.bench_function("json_padded", |b| {
        b.iter(|| cache.decode(&padded_key, padded.as_bytes(), 7).unwrap())
    });
    g.bench_function("json_upstream_pod", |b| {
        b.iter(|| cache.decode(key, &json, 7).unwrap())
    });
    g.bench_function("protobuf_upstream_pod", |b| {
        b.iter(|| cache.decode(key, &pb, 7).unwrap())
    });
    // The JSON encoding a protobuf object makes on first use (once per object).
    g.bench_function("protobuf_upstream_pod_then_json", |b| {
        b.iter(|| cache.decode(key, &pb, 7).unwrap().json().len())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

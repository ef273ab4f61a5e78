//! Decoding one pod at ingest, JSON against kube-apiserver's protobuf, without the ingest bench's
//! 200 000-pod set-up (so runs can alternate on a noisy machine). `decode/json_padded` is the
//! ingest bench's ~2 KB pod (600 bytes of fields and a 1 400-byte annotation);
//! `decode/json_upstream_pod` and `decode/protobuf_upstream_pod` are the same realistic pod as
//! kube-apiserver returns it (2 891 bytes of JSON) and stores it (1 348 bytes of protobuf).
//! `decode/custom_resource_*`: a 2.6 KB custom resource of a CRD with a 20-field schema, read
//! as stored (`as_stored`, no schema) and pruned and defaulted by its schema as kube-apiserver
//! reads it (`schema_read`, nothing to change: the common case).

mod support;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use watchcache::{Cache, CacheConfig, CrdServing, ResourceDef};

/// A CRD shaped like the common operators' (a certificate-like spec, a status with conditions).
fn crd() -> serde_json::Value {
    let s = |t: &str| json!({"type": t});
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "secretName": s("string"), "commonName": s("string"),
            "dnsNames": {"type": "array", "items": s("string")},
            "duration": {"type": "string", "default": "2160h"},
            "renewBefore": s("string"), "isCA": {"type": "boolean", "default": false},
            "usages": {"type": "array", "items": s("string")},
            "privateKey": {"type": "object", "properties": {
                "algorithm": {"type": "string", "default": "RSA"}, "size": s("integer"),
                "rotationPolicy": s("string")}},
            "issuerRef": {"type": "object", "properties": {
                "name": s("string"), "kind": s("string"), "group": s("string")}},
            "secretTemplate": {"type": "object", "properties": {
                "labels": {"type": "object", "additionalProperties": s("string")},
                "annotations": {"type": "object", "additionalProperties": s("string")}}}}},
        "status": {"type": "object", "properties": {
            "conditions": {"type": "array", "items": {"type": "object", "properties": {
                "type": s("string"), "status": s("string"), "reason": s("string"),
                "message": s("string"), "lastTransitionTime": s("string"),
                "observedGeneration": s("integer")}}},
            "notAfter": s("string"), "notBefore": s("string"), "renewalTime": s("string"),
            "revision": s("integer")}}}});
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "certificates.cert.example.com"},
        "spec": {"group": "cert.example.com", "scope": "Namespaced",
            "names": {"plural": "certificates", "singular": "certificate", "kind": "Certificate"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema}}]},
        "status": {"conditions": [{"type": "Established", "status": "True"}]}})
}

/// One certificate as kube-apiserver stores it (keys sorted, defaults applied).
fn certificate() -> Vec<u8> {
    let cond = |t: &str| {
        json!({"type": t, "status": "True", "reason": "Ready",
        "message": "Certificate is up to date and has not expired",
        "lastTransitionTime": "2026-11-01T10:00:00Z", "observedGeneration": 3})
    };
    let v = json!({"apiVersion": "cert.example.com/v1", "kind": "Certificate",
        "metadata": {"name": "web-tls", "namespace": "shop", "uid": "5c1f0c3e-6a59-4a3f-9c1b-1f6f1c0e7f44",
            "generation": 3, "creationTimestamp": "2026-10-01T10:00:00Z",
            "labels": {"app": "web", "team": "shop"},
            "annotations": {"note": "x".repeat(900)}},
        "spec": {"secretName": "web-tls", "commonName": "web.shop.example.com",
            "dnsNames": ["web.shop.example.com", "www.shop.example.com", "shop.example.com"],
            "duration": "2160h", "renewBefore": "360h", "isCA": false,
            "usages": ["digital signature", "key encipherment", "server auth"],
            "privateKey": {"algorithm": "RSA", "size": 2048, "rotationPolicy": "Always"},
            "issuerRef": {"name": "letsencrypt", "kind": "ClusterIssuer", "group": "cert.example.com"},
            "secretTemplate": {"labels": {"app": "web"}, "annotations": {"owner": "shop"}}},
        "status": {"conditions": [cond("Ready"), cond("Issuing")],
            "notAfter": "2027-01-30T10:00:00Z", "notBefore": "2026-11-01T10:00:00Z",
            "renewalTime": "2027-01-15T10:00:00Z", "revision": 3}});
    serde_json::to_vec(&v).unwrap()
}

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
    let def = CrdServing::of(&crd()).definition().unwrap().clone();
    let cr = certificate();
    let cr_key = "/registry/cert.example.com/certificates/shop/web-tls";
    let (schema_read, _w1) = Cache::new(def.clone(), CacheConfig::default());
    let as_stored = ResourceDef {
        stored_schemas: None,
        ..def
    };
    let (as_stored, _w2) = Cache::new(as_stored, CacheConfig::default());
    assert_eq!(
        schema_read.decode(cr_key, &cr, 7).unwrap().json(),
        as_stored.decode(cr_key, &cr, 7).unwrap().json(),
        "nothing to prune or default"
    );
    g.bench_function("custom_resource_as_stored", |b| {
        b.iter(|| as_stored.decode(cr_key, &cr, 7).unwrap())
    });
    g.bench_function("custom_resource_schema_read", |b| {
        b.iter(|| schema_read.decode(cr_key, &cr, 7).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

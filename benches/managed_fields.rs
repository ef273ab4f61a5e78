//! `drop=metadata.managedFields` (KEP-5958): the bytes an event saves and what making the variant
//! costs, on the objects kube-apiserver 1.35.4 wrote (`tests/data/kube-apiserver-1.35`, one of
//! each stored resource, managedFields as it wrote them). Before timing, it prints each object's
//! JSON and protobuf size with and without managed fields.
//!
//! `managed_fields/json_pod` and `managed_fields/protobuf_pod` make the variant of the pod (2 305 B
//! of JSON, 1 553 B of protobuf); `.../all` do it for all 56 objects. The variant is made once per
//! event whatever the number of watchers (tests/system/drop_managed_fields.rs), so this is its whole
//! cost per event.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use watchcache::managed_fields::{json_without, protobuf_without};
use watchcache::{Cache, CacheConfig, Object, ResourceDef};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/kube-apiserver-1.35/"
);

/// Every vector that decodes as its resource, with its name.
fn objects() -> Vec<(String, Object)> {
    std::fs::read_to_string(format!("{DIR}objects.txt"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let resource = f[0].split('-').next()?;
            let (cache, _writer) =
                Cache::new(ResourceDef::builtin(resource)?, CacheConfig::default());
            let value = std::fs::read(format!("{DIR}{}.etcd.bin", f[0])).ok()?;
            let obj = cache.decode(f[1], &value, f[3].parse().ok()?).ok()?;
            Some((f[0].to_owned(), obj))
        })
        .collect()
}

fn sizes(objects: &[(String, Object)]) {
    let (mut j, mut jd, mut p, mut pd) = (0, 0, 0, 0);
    println!(
        "{:<62} {:>14} {:>18}",
        "object", "JSON (-drop)", "protobuf (-drop)"
    );
    for (name, o) in objects {
        let json = o.json().len();
        let json_drop = json_without(o.json()).unwrap().map_or(json, |b| b.len());
        let pb = o.protobuf_wire().unwrap().len();
        let pb_drop = protobuf_without(o.protobuf_wire().unwrap())
            .unwrap()
            .map_or(pb, |b| b.len());
        println!(
            "{name:<62} {json:>6} {:>6.1} % {pb:>8} {:>6.1} %",
            100.0 * (json - json_drop) as f64 / json as f64,
            100.0 * (pb - pb_drop) as f64 / pb as f64
        );
        (j, jd, p, pd) = (j + json, jd + json_drop, p + pb, pd + pb_drop);
    }
    println!(
        "{} objects: JSON {j} B -> {jd} B ({:.1} % saved, {} B per object); protobuf {p} B -> {pd} B ({:.1} % saved, {} B per object)",
        objects.len(),
        100.0 * (j - jd) as f64 / j as f64,
        (j - jd) / objects.len(),
        100.0 * (p - pd) as f64 / p as f64,
        (p - pd) / objects.len(),
    );
}

fn bench(c: &mut Criterion) {
    let objects = objects();
    sizes(&objects);
    let pod = &objects.iter().find(|(n, _)| n == "pods").unwrap().1;
    let mut g = c.benchmark_group("managed_fields");
    g.throughput(Throughput::Elements(1));
    g.bench_function("json_pod", |b| b.iter(|| json_without(pod.json()).unwrap()));
    g.bench_function("protobuf_pod", |b| {
        b.iter(|| protobuf_without(pod.protobuf_wire().unwrap()).unwrap())
    });
    g.throughput(Throughput::Elements(objects.len() as u64));
    g.bench_function("json_all", |b| {
        b.iter(|| {
            for (_, o) in &objects {
                json_without(o.json()).unwrap();
            }
        })
    });
    g.bench_function("protobuf_all", |b| {
        b.iter(|| {
            for (_, o) in &objects {
                protobuf_without(o.protobuf_wire().unwrap()).unwrap();
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

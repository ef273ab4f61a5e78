//! LIST the pods of one node out of 1 000 000 pods on 10 000 nodes: by the spec.nodeName index, and by
//! a scan of a cache whose definition has no such index.

mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::FutureExt;
use watchcache::{
    Cache, CacheConfig, IndexKey, ListOptions, ResourceDef, ResourceVersion, Selection,
};

fn bench(c: &mut Criterion) {
    let def = ResourceDef::builtin("pods").unwrap();
    let mut plain = def.clone();
    plain
        .indexes
        .retain(|ix| !matches!(&ix.key, IndexKey::Field(p) if p.as_str() == "spec.nodeName"));
    let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
    let objects = support::pods(&probe, 1_000_000, 10_000, 0, 1);
    let (indexed, _indexed_writer) =
        support::loaded(def, CacheConfig::default(), objects.clone(), 1);
    let (probe_plain, _) = Cache::new(plain.clone(), CacheConfig::default());
    let plain_objects: Vec<_> = objects
        .iter()
        .map(|o| probe_plain.decode(o.key(), o.json(), 1).unwrap())
        .collect();
    drop(objects);
    let (scanned, _scanned_writer) =
        support::loaded(plain, CacheConfig::default(), plain_objects, 1);
    let opts = ListOptions::all()
        .select(
            Selection::all()
                .with_fields("spec.nodeName=node-7")
                .unwrap(),
        )
        .at(ResourceVersion::Any, None);
    let list = |cache: &Cache| cache.list(&opts).now_or_never().unwrap().unwrap();
    assert_eq!(list(&indexed).items.len(), 100);
    assert_eq!(list(&scanned).items.len(), 100);
    let mut g = c.benchmark_group("list");
    g.bench_function("node_pods_by_index", |b| b.iter(|| list(&indexed)));
    g.sample_size(10);
    g.bench_function("node_pods_by_scan", |b| b.iter(|| list(&scanned)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The embedded cache (`watchcache_kube`, i.e. a `Cache`) against kube-rs's reflector `Store` on the
//! same 10 000 pods (on 1 000 nodes, label `app` with 100 values), in process, no network:
//! - `lookup_label`: the pods with one `app` value (the cache: the label index's bitmap; the
//!   reflector: `state_filter`, a scan, since it has no index);
//! - `event_1000_subscribers`: one pod update with 1 000 in-process subscribers, delivered and
//!   taken by every subscriber that receives it (the cache: 1 000 per-node watchers routed by
//!   `spec.nodeName`, so one receives it; the reflector: 1 000 `ReflectHandle`s of a shared store,
//!   each of which receives every event).
//!
//! Memory per object is in `examples/reflector_memory.rs` (it needs its own process). Results in
//! design/performance.md.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use watchcache::{
    Cache, CacheConfig, Change, Object, ResourceDef, ResourceVersion, Selection, WatchOptions,
};

const PODS: usize = 10_000;
const NODES: usize = 1_000;
const SUBSCRIBERS: usize = 1_000;

fn json(i: usize) -> String {
    let (ns, name) = (format!("ns-{}", i % 100), format!("pod-{i}"));
    support::pod_json(
        &ns,
        &name,
        &format!("node-{}", i % NODES),
        &format!("app-{}", i % 100),
        0,
    )
}

fn objects(cache: &Cache, rv: u64) -> Vec<Object> {
    (0..PODS)
        .map(|i| {
            let key = support::key(&format!("ns-{}", i % 100), &format!("pod-{i}"));
            cache.decode(&key, json(i).as_bytes(), rv).unwrap()
        })
        .collect()
}

fn typed() -> Vec<Pod> {
    (0..PODS)
        .map(|i| serde_json::from_str(&json(i)).unwrap())
        .collect()
}

fn lookup(c: &mut Criterion) {
    let def = ResourceDef::builtin("pods").unwrap();
    let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
    let (cache, _cache_writer) =
        support::loaded(def, CacheConfig::default(), objects(&probe, 1), 1);
    let mut writer: Writer<Pod> = Writer::default();
    for p in typed() {
        writer.apply_watcher_event(&watcher::Event::Apply(p));
    }
    let store = writer.as_reader();
    let mut g = c.benchmark_group("lookup_label");
    g.bench_function("watchcache_index", |b| {
        b.iter(|| {
            let found = cache.lookup("label:app", "app-7").unwrap();
            assert_eq!(found.len(), PODS / 100);
            found
        })
    });
    g.bench_function("kube_reflector_scan", |b| {
        b.iter(|| {
            let found = store.state_filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .is_some_and(|v| v == "app-7")
            });
            assert_eq!(found.len(), PODS / 100);
            found
        })
    });
    g.finish();
}

fn event(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("event_1000_subscribers");

    // watchcache: 1 000 per-node watchers; each update goes to its node's watcher only.
    let def = ResourceDef::builtin("pods").unwrap();
    let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
    let updates = objects(&probe, 1);
    let (cache, mut writer) = support::loaded(def, CacheConfig::default(), updates.clone(), 1);
    let mut watchers: Vec<_> = (0..SUBSCRIBERS)
        .map(|i| {
            let sel = Selection::all()
                .with_fields(&format!("spec.nodeName=node-{i}"))
                .unwrap();
            cache
                .watch(WatchOptions::new(sel, ResourceVersion::At(1)))
                .now_or_never()
                .unwrap()
                .unwrap()
        })
        .collect();
    let mut rv = 1;
    g.bench_function("watchcache_routed", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for n in 0..iters as usize {
                let i = n % PODS;
                rv += 1;
                let o = &updates[i];
                let obj = cache.decode(o.key(), o.json(), rv).unwrap();
                let start = Instant::now();
                writer.apply(rv, [Change::Put(obj)]).unwrap();
                let ev = watchers[i % NODES].next().now_or_never().unwrap().unwrap();
                total += start.elapsed();
                drop(ev);
            }
            total
        })
    });
    drop(watchers);

    // kube-rs: a shared reflector store with 1 000 subscribers; each update reaches all of them.
    let pods = typed();
    let (store, mut writer) = reflector::store_shared::<Pod>(16);
    // Loaded directly (no subscriber yet, so no broadcast of the initial objects), then subscribed.
    for p in &pods {
        writer.apply_watcher_event(&watcher::Event::Apply(p.clone()));
    }
    let mut subscribers: Vec<_> = (0..SUBSCRIBERS)
        .map(|_| writer.subscribe().unwrap())
        .collect();
    let (tx, mut rx) =
        tokio::sync::mpsc::unbounded_channel::<watcher::Result<watcher::Event<Pod>>>();
    let events = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let mut reflect = Box::pin(reflector::reflector(writer, events));
    assert_eq!(store.len(), PODS);
    g.bench_function("kube_reflector_shared", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for n in 0..iters as usize {
                    let mut p = pods[n % PODS].clone();
                    p.metadata.resource_version = Some(n.to_string());
                    let start = Instant::now();
                    tx.send(Ok(watcher::Event::Apply(p))).unwrap();
                    reflect.next().await;
                    for s in &mut subscribers {
                        let got: Option<Arc<Pod>> = s.next().await;
                        assert!(got.is_some());
                    }
                    total += start.elapsed();
                }
                total
            })
        })
    });
    g.finish();
}

criterion_group!(benches, lookup, event);
criterion_main!(benches);

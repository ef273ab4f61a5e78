//! Per-event dispatch cost with W per-node watchers (one per node, kubelet-style), events spread over
//! the nodes. `routed` uses the spec.nodeName trigger; `scan` is the baseline without triggers, where
//! every watcher's filter is evaluated for every event. Time is per event (apply = store + indexes +
//! history + fan-out); draining the watchers' queues is not timed. The store holds the same 100 000
//! pods for every W (pod i on node i % W), so only the number of watchers varies.

mod support;

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::{FutureExt, StreamExt};
use watchcache::{
    Cache, CacheConfig, Change, Object, ResourceDef, ResourceVersion, Selection, WatchOptions,
    WatchStream,
};

const PODS: usize = 100_000;

struct Setup {
    cache: Cache,
    watchers: Vec<WatchStream>,
    updates: Vec<Object>,
    rv: u64,
}

fn setup(w: usize, routed: bool) -> Setup {
    let mut def = ResourceDef::builtin("pods").unwrap();
    if !routed {
        def = def.without_triggers();
    }
    let probe = Cache::new(def.clone(), CacheConfig::default());
    // Every event goes to exactly one node's watcher.
    let objects = support::pods(&probe, PODS, w, 0, 1);
    let updates = objects.clone();
    let cache = support::loaded(def, CacheConfig::default(), objects, 1);
    let watchers = (0..w)
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
    let stats = cache.stats();
    assert_eq!(
        if routed {
            stats.routed_watchers
        } else {
            stats.unrouted_watchers
        },
        w as u64
    );
    Setup {
        cache,
        watchers,
        updates,
        rv: 1,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("fanout");
    g.throughput(Throughput::Elements(1));
    for w in [1_000usize, 10_000, 100_000] {
        for routed in [true, false] {
            let mut s = setup(w, routed);
            if !routed && w >= 10_000 {
                g.sample_size(10).measurement_time(Duration::from_secs(8));
            } else {
                g.sample_size(30).measurement_time(Duration::from_secs(4));
            }
            let name = if routed { "routed" } else { "scan" };
            let mut next = 0usize;
            g.bench_function(BenchmarkId::new(name, w), |b| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    let mut done = 0u64;
                    while done < iters {
                        // Batches no larger than the routed queue, so no watcher is parked.
                        let batch = (iters - done).min(w as u64 * 8);
                        let first = next;
                        let t = Instant::now();
                        for _ in 0..batch {
                            s.rv += 1;
                            let obj = s.updates[next % PODS].clone();
                            s.cache.apply(s.rv, [Change::Put(obj)]).unwrap();
                            next += 1;
                        }
                        spent += t.elapsed();
                        for i in first..next.min(first + PODS) {
                            let stream = &mut s.watchers[(i % PODS) % w];
                            while let Some(Some(ev)) = stream.next().now_or_never() {
                                std::hint::black_box(ev.unwrap());
                            }
                        }
                        done += batch;
                    }
                    spent
                });
            });
            assert_eq!(
                s.cache.stats().parked,
                0,
                "the bench measures live dispatch, not parking"
            );
        }
    }
    g.finish();
}

/// Ingest (decode + apply) of a 1 MB pod with W unrouted watchers whose field selector names an
/// undeclared path (`spec.serviceAccountName`): the path is read once per event at decode, outside
/// the lock, whatever W is; before the field memo each watcher read it from the JSON, twice (new
/// and previous state), under the write lock.
fn undeclared_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("undeclared_path_1mb");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    for w in [0usize, 100, 300] {
        let cache = support::loaded(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
            Vec::new(),
            1,
        );
        let sel = Selection::all()
            .with_fields("spec.serviceAccountName=other")
            .unwrap();
        let mut watchers: Vec<WatchStream> = (0..w)
            .map(|_| {
                cache
                    .watch(WatchOptions::new(sel.clone(), ResourceVersion::At(1)))
                    .now_or_never()
                    .unwrap()
                    .unwrap()
            })
            .collect();
        let json = support::pod_json("ns", "big", "node-1", "web", 1 << 20);
        let key = support::key("ns", "big");
        let mut rv = 1;
        g.bench_function(BenchmarkId::from_parameter(w), |b| {
            b.iter(|| {
                rv += 1;
                let obj = cache.decode(&key, json.as_bytes(), rv).unwrap();
                cache.apply(rv, [Change::Put(obj)]).unwrap();
            });
        });
        for s in &mut watchers {
            while let Some(Some(ev)) = s.next().now_or_never() {
                std::hint::black_box(ev.unwrap());
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench, undeclared_path);
criterion_main!(benches);

//! Per-event dispatch cost with W per-node watchers (one per node, kubelet-style), events spread over
//! the nodes. `routed` uses the spec.nodeName trigger; `scan` is the baseline without triggers, where
//! every watcher's filter is evaluated for every event. Time is per event (apply = store + indexes +
//! history + fan-out); draining the watchers' queues is not timed. The store holds the same 100 000
//! pods for every W (pod i on node i % W), so only the number of watchers varies.
//!
//! `fanout_crd_selectable`: the same for a custom resource, W watchers each on one value of a
//! field its CRD declares in `selectableFields` (read from the CRD, no definition file), routed
//! by that trigger against scanned.
//!
//! `fanout_shards`: the same for 64 `shardSelector` watchers (one uid hash range each), routed by
//! their ranges against scanned. `fanout_shards_1000x200`: 1 000 sharded watchers of 200 ranges
//! each, the cost of registering one more and of routing an event among them.

mod support;

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::{FutureExt, StreamExt};
use watchcache::wire::format::Wire;
use watchcache::{
    Cache, CacheConfig, CacheWriter, Change, CrdServing, Object, ResourceDef, ResourceVersion,
    Selection, WatchOptions, WatchStream,
};

const PODS: usize = 100_000;

struct Setup {
    cache: Cache,
    writer: CacheWriter,
    watchers: Vec<WatchStream>,
    updates: Vec<Object>,
    rv: u64,
}

fn setup(w: usize, routed: bool) -> Setup {
    let def = ResourceDef::builtin("pods").unwrap();
    let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
    // Every event goes to exactly one node's watcher.
    let objects = support::pods(&probe, PODS, w, 0, 1);
    watched(def, objects, w, routed, |i| {
        format!("spec.nodeName=node-{i}")
    })
}

/// A CRD's custom resources, `shirts.stable.example.com`, with `spec.color` among its
/// `selectableFields`: the definition watchcache makes of it (a trigger), and PODS objects of W
/// colors, each watched by `spec.color=` (a controller per color).
fn setup_crd(w: usize, routed: bool) -> Setup {
    let crd = serde_json::json!({
        "metadata": {"name": "shirts.stable.example.com"},
        "spec": {"group": "stable.example.com", "scope": "Namespaced",
                 "names": {"plural": "shirts", "kind": "Shirt"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "selectableFields": [{"jsonPath": ".spec.color"}]}]},
        "status": {"conditions": [{"type": "Established", "status": "True"}]}
    });
    let def = CrdServing::of(&crd).definition().cloned().unwrap();
    let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
    let objects = (0..PODS)
        .map(|i| {
            let json = format!(
                r#"{{"apiVersion":"stable.example.com/v1","kind":"Shirt","metadata":{{"name":"shirt-{i}","namespace":"ns-{}","uid":"u-{i}"}},"spec":{{"color":"color-{}","size":"M"}}}}"#,
                i % 50,
                i % w
            );
            probe
                .decode(&format!("/registry/stable.example.com/shirts/ns-{}/shirt-{i}", i % 50), json.as_bytes(), 1)
                .unwrap()
        })
        .collect();
    watched(def, objects, w, routed, |i| format!("spec.color=color-{i}"))
}

/// The cache of `def` holding `objects`, with W watchers, the i-th selecting `select(i)`;
/// `routed: false` takes the triggers away (the scan baseline).
fn watched(
    mut def: ResourceDef,
    objects: Vec<Object>,
    w: usize,
    routed: bool,
    select: impl Fn(usize) -> String,
) -> Setup {
    if !routed {
        def = def.without_triggers();
    }
    let updates = objects.clone();
    let (cache, writer) = support::loaded(def, CacheConfig::default(), objects, 1);
    let watchers = (0..w)
        .map(|i| {
            let sel = Selection::all().with_fields(&select(i)).unwrap();
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
        writer,
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
            run(&mut g, setup(w, routed), w, routed);
        }
    }
    g.finish();
}

/// `fanout` for a custom resource's selectable field: the same dispatch, by a trigger that
/// comes from the CRD (no definition file), against the scan.
fn crd_selectable(c: &mut Criterion) {
    let mut g = c.benchmark_group("fanout_crd_selectable");
    g.throughput(Throughput::Elements(1));
    for w in [1_000usize, 10_000] {
        for routed in [true, false] {
            run(&mut g, setup_crd(w, routed), w, routed);
        }
    }
    g.finish();
}

/// Times one event's apply (store, indexes, history, fan-out) with `s`'s W watchers.
fn run(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    mut s: Setup,
    w: usize,
    routed: bool,
) {
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
                    s.writer.apply(s.rv, [Change::Put(obj)]).unwrap();
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

/// Per-event dispatch cost with 64 shard watchers (`shardSelector` on the uid, each 1/64 of the
/// hash space, as 64 controller replicas), events spread over the same 100 000 pods. `routed`
/// finds the one watcher whose range holds the event's hash by binary search over the shard
/// segments; `scan` (shard routing off, as upstream) evaluates all 64 filters per event.
fn shards(c: &mut Criterion) {
    const W: u64 = 64;
    let mut g = c.benchmark_group("fanout_shards");
    g.throughput(Throughput::Elements(1));
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    // `none`: the same events with no watcher, the cost of apply without fan-out.
    for (name, routed, w) in [("none", true, 0), ("routed", true, W), ("scan", false, W)] {
        let mut def = ResourceDef::builtin("pods").unwrap();
        if !routed {
            def = def.without_triggers();
        }
        let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
        let objects = support::pods(&probe, PODS, 1000, 0, 1);
        let updates = objects.clone();
        let (cache, mut writer) = support::loaded(def, CacheConfig::default(), objects, 1);
        let step = 1u128 << 58;
        let mut watchers: Vec<WatchStream> = (0..w)
            .map(|i| {
                let end = u128::from(i + 1) * step;
                let end = if end == 1 << 64 {
                    "0x10000000000000000".to_owned()
                } else {
                    format!("0x{end:016x}")
                };
                let sel = Selection::all()
                    .with_shard(&format!(
                        "shardRange(object.metadata.uid, '0x{:016x}', '{end}')",
                        u128::from(i) * step
                    ))
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
            (stats.routed_watchers, stats.unrouted_watchers),
            if routed { (w, 0) } else { (0, w) }
        );
        let mut run = ShuffledUpdates::new(1);
        g.bench_function(BenchmarkId::new(name, w), |b| {
            // About 8 events per watcher per batch: no queue fills, none parks.
            b.iter_custom(|iters| run.apply(iters, W * 8, &updates, &mut writer, &mut watchers));
        });
        assert_eq!(cache.stats().parked, 0, "live dispatch only");
        // Every event reached exactly one shard: the ranges tile the hash space.
        assert_eq!(run.delivered, if w == 0 { 0 } else { run.rv - 1 });
    }
    g.finish();
}

/// Pod updates applied in a fixed shuffled order, for the shard benches: the bench's uids differ
/// only in their last digits, and FNV-1a's top bits (the shard) barely move with a string's last
/// bytes, so pods in name order come in runs of one shard that would fill its queue.
struct ShuffledUpdates {
    order: Vec<usize>,
    next: usize,
    /// The last revision applied.
    rv: u64,
    /// Events the watchers received.
    delivered: u64,
}

impl ShuffledUpdates {
    fn new(rv: u64) -> ShuffledUpdates {
        let mut order: Vec<usize> = (0..PODS).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in (1..PODS).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        ShuffledUpdates {
            order,
            next: 0,
            rv,
            delivered: 0,
        }
    }

    /// Applies `iters` updates in batches of at most `batch`, draining every watcher after each
    /// batch: the time spent applying (dispatch included, the watchers' reads not).
    fn apply(
        &mut self,
        iters: u64,
        batch: u64,
        updates: &[Object],
        writer: &mut CacheWriter,
        watchers: &mut [WatchStream],
    ) -> Duration {
        let mut spent = Duration::ZERO;
        let mut done = 0u64;
        while done < iters {
            let n = (iters - done).min(batch);
            let t = Instant::now();
            for _ in 0..n {
                self.rv += 1;
                let obj = updates[self.order[self.next % PODS]].clone();
                writer.apply(self.rv, [Change::Put(obj)]).unwrap();
                self.next += 1;
            }
            spent += t.elapsed();
            for stream in watchers.iter_mut() {
                while let Some(Some(ev)) = stream.next().now_or_never() {
                    std::hint::black_box(ev.unwrap());
                    self.delivered += 1;
                }
            }
            done += n;
        }
        spent
    }
}

/// The selector of a watcher among `w` that each take `ranges` slices of the hash space cut into
/// `w * ranges` equal slices, striped (watcher i has slices i, w + i, 2w + i...): together they
/// tile the space, and no two of a watcher's slices touch (so none merge). `shift` moves every
/// bound by half a slice (a watcher whose bounds no registered one shares).
fn striped(w: u64, ranges: u64, i: u64, shift: bool) -> Selection {
    let slice = (1u128 << 64) / u128::from(w * ranges);
    let off = if shift { slice / 2 } else { 0 };
    let text = (0..ranges)
        .map(|j| {
            let start = u128::from(j * w + i) * slice + off;
            // The last slice runs to the top (the division's remainder).
            let last = j * w + i + 1 == w * ranges && !shift;
            let end = if last {
                1 << 64
            } else {
                (start + slice).min(1 << 64)
            };
            let end = if end == 1 << 64 {
                "0x10000000000000000".to_owned()
            } else {
                format!("0x{end:016x}")
            };
            format!("shardRange(object.metadata.uid, '0x{start:016x}', '{end}')")
        })
        .collect::<Vec<_>>()
        .join(" || ");
    Selection::all().with_shard(&text).unwrap()
}

/// Writes a line of every 64 bytes of `buf` (larger than the last-level cache): what the cache
/// state held in the CPU's caches is evicted.
fn evict_caches(buf: &mut [u8]) {
    for line in buf.chunks_mut(64) {
        line[0] = line[0].wrapping_add(1);
    }
    std::hint::black_box(buf);
}

/// 1 000 sharded watchers of 200 uid ranges each (200 000 registered ranges; each selector about
/// 15 KB, under the 16 KiB limit), striped so that each event matches exactly one watcher.
/// `register/sharded_200`: registering one more watcher of 200 ranges (its bounds new to the
/// router), timed around `Cache::watch` (the selector parsed beforehand; the drop that
/// unregisters it untimed); `register/node` the same for an ordinary watch routed by
/// `spec.nodeName`, for scale. `register_lock_hold/*`: the same registrations' longest single
/// hold of the cache's lock (`CacheStats::registration_holds`; a sharded watch takes two, its
/// ranges added between them), `*_cold` with the CPU's caches evicted before each. `event/routed`: per-event apply over the same 100 000 pods as
/// `fanout_shards`, each event offered to its one watcher by a stabbing query among the 200 000
/// ranges.
fn many_ranges(c: &mut Criterion) {
    const W: u64 = 1_000;
    const R: u64 = 200;
    let mut g = c.benchmark_group("fanout_shards_1000x200");
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    let def = ResourceDef::builtin("pods").unwrap();
    let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
    let objects = support::pods(&probe, PODS, 1000, 0, 1);
    let updates = objects.clone();
    let (cache, mut writer) = support::loaded(def, CacheConfig::default(), objects, 1);
    let sels: Vec<Selection> = (0..W).map(|i| striped(W, R, i, false)).collect();
    let t = Instant::now();
    let mut watchers: Vec<WatchStream> = sels
        .into_iter()
        .map(|sel| {
            cache
                .watch(WatchOptions::new(sel, ResourceVersion::At(1)))
                .now_or_never()
                .unwrap()
                .unwrap()
        })
        .collect();
    println!(
        "registered {W} watchers of {R} ranges in {:?} ({:?} each, parsing included)",
        t.elapsed(),
        t.elapsed() / W as u32
    );
    assert_eq!(cache.stats().routed_watchers, W);

    let extra: Vec<Selection> = (0..16).map(|i| striped(W, R, i * 61, true)).collect();
    let mut evict = vec![0u8; 64 << 20];
    let rv = 1u64;
    for (name, pool) in [
        ("sharded_200", extra),
        (
            "node",
            (0..16)
                .map(|i| {
                    Selection::all()
                        .with_fields(&format!("spec.nodeName=node-{i}"))
                        .unwrap()
                })
                .collect(),
        ),
    ] {
        let mut k = 0usize;
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("register", name), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let opts =
                        WatchOptions::new(pool[k % pool.len()].clone(), ResourceVersion::At(rv));
                    k += 1;
                    let t = Instant::now();
                    let stream = cache.watch(opts).now_or_never().unwrap().unwrap();
                    spent += t.elapsed();
                    drop(stream);
                }
                spent
            });
        });
        // The registration's longest hold of the cache's lock, as the cache measures it; `cold`:
        // with the caches evicted first, as a sharded watch's tree work outside the lock leaves
        // them (its 400 inserts among 400 000 nodes read some 20 MB).
        for cold in [false, true] {
            let id = if cold {
                format!("{name}_cold")
            } else {
                name.to_owned()
            };
            g.bench_function(BenchmarkId::new("register_lock_hold", id), |b| {
                b.iter_custom(|iters| {
                    let mut held = 0u64;
                    for _ in 0..iters {
                        let opts = WatchOptions::new(
                            pool[k % pool.len()].clone(),
                            ResourceVersion::At(rv),
                        );
                        k += 1;
                        if cold {
                            evict_caches(&mut evict);
                        }
                        let before = cache.stats().registration_holds;
                        let stream = cache.watch(opts).now_or_never().unwrap().unwrap();
                        let after = cache.stats().registration_holds;
                        assert_eq!(after.count(), before.count() + 1);
                        held += after.sum - before.sum;
                        drop(stream);
                    }
                    Duration::from_nanos(held)
                });
            });
        }
    }
    assert_eq!(cache.stats().routed_watchers, W);

    let mut run = ShuffledUpdates::new(rv);
    g.bench_function(BenchmarkId::new("event", "routed"), |b| {
        // About one event per watcher per batch: no queue fills, none parks.
        b.iter_custom(|iters| run.apply(iters, W, &updates, &mut writer, &mut watchers));
    });
    assert_eq!(cache.stats().parked, 0, "live dispatch only");
    // Every event reached exactly one watcher: the stripes tile the hash space.
    assert_eq!(run.delivered, run.rv - rv);
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
        let (cache, mut writer) = support::loaded(
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
                writer.apply(rv, [Change::Put(obj)]).unwrap();
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

/// Which frames the watchers of [`wire_formats`] take.
#[derive(Clone, Copy, Debug)]
enum Frames {
    Json,
    Protobuf,
    /// Every other watcher protobuf.
    Mixed,
}

/// Fan-out of one event to W watchers of everything, each turning it into its wire frame: the
/// cost per event with every watcher in JSON, every watcher in protobuf, and half of each. The
/// event's object is kube-apiserver's stored protobuf pod (tests/data/kubernetes-protobuf, 1.3 KB),
/// decoded fresh for each event (untimed), so each event's encodings are made inside the timing:
/// once per format in use, whatever W is (checked with the encode counters).
fn wire_formats(c: &mut Criterion) {
    let value = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kubernetes-protobuf/pod.etcd.bin"
    ))
    .unwrap();
    let key = "/registry/pods/default/web-7d4b9c-x2k8p";
    let w: usize = std::env::var("FANOUT_WIRE_W")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let mut g = c.benchmark_group("fanout_wire");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    // FANOUT_WIRE_PROTOBUF_FIRST=1 runs protobuf before JSON: with the order alternated between
    // runs, a drift of the machine during a run is not taken for a difference of the formats.
    let order = if std::env::var_os("FANOUT_WIRE_PROTOBUF_FIRST").is_some() {
        [Frames::Protobuf, Frames::Json, Frames::Mixed]
    } else {
        [Frames::Json, Frames::Protobuf, Frames::Mixed]
    };
    for frames in order {
        let (cache, mut writer) = support::loaded(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
            Vec::new(),
            1,
        );
        let mut watchers: Vec<WatchStream> = (0..w)
            .map(|_| {
                cache
                    .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(1)))
                    .now_or_never()
                    .unwrap()
                    .unwrap()
            })
            .collect();
        let mut rv = 1;
        let mut frame_len = [0usize; 2];
        let mut events = 0u64;
        let before = watchcache::encode_counts();
        g.bench_function(BenchmarkId::new(format!("{frames:?}"), w), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    rv += 1;
                    let obj = cache.decode(key, &value, rv).unwrap();
                    let t = Instant::now();
                    writer.apply(rv, [Change::Put(obj)]).unwrap();
                    for (i, s) in watchers.iter_mut().enumerate() {
                        let ev = s.next().now_or_never().unwrap().unwrap().unwrap();
                        let pb = match frames {
                            Frames::Json => false,
                            Frames::Protobuf => true,
                            Frames::Mixed => i % 2 == 1,
                        };
                        // As the server frames a watch in a stored format (`Wire`).
                        let wire = if pb { Wire::Protobuf } else { Wire::Json };
                        let f = wire.frame(&ev).unwrap();
                        if i < 2 {
                            frame_len[usize::from(pb)] = f.len();
                        }
                        std::hint::black_box(f);
                    }
                    spent += t.elapsed();
                    events += 1;
                }
                spent
            });
        });
        let after = watchcache::encode_counts();
        let (json, pb) = (after.json - before.json, after.protobuf - before.protobuf);
        // Exactly one encoding per event per format in use (JSON: transcoded from the stored
        // protobuf), and none for protobuf: the stored bytes, their revision spliced in at decode.
        let (want_json, want_pb) = match frames {
            Frames::Json | Frames::Mixed => (events, 0),
            Frames::Protobuf => (0, 0),
        };
        assert_eq!((json, pb), (want_json, want_pb), "{frames:?}: encodes");
        println!(
            "{frames:?}: {events} events, {json} JSON and {pb} protobuf encodings; frame bytes (JSON, protobuf): {frame_len:?}"
        );
    }
    g.finish();
}

criterion_group!(
    benches,
    bench,
    crd_selectable,
    shards,
    many_ranges,
    undeclared_path,
    wire_formats
);
criterion_main!(benches);

//! Memory: bytes per idle watcher (routed, unrouted, and sharded with 201 ranges at probe
//! W-SHARDMEM's scale) and bytes per cached object beyond its JSON, measured with a counting
//! global allocator. Run with `cargo bench --bench memory`.

mod counting;
mod support;

use counting::live;
use futures_util::FutureExt;
use watchcache::{Cache, CacheConfig, ResourceDef, ResourceVersion, Selection, WatchOptions};

/// Builds watcher i's selection.
type SelectionFor = fn(usize) -> Selection;

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too, so keep it small there.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n = if quick { 2_000 } else { 100_000 };
    let def = ResourceDef::builtin("pods").unwrap();
    let (probe, _) = Cache::new(def.clone(), CacheConfig::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();

    let before = live();
    let objects = support::pods(&probe, n, n / 100, 1400, 1);
    let json: usize = objects.iter().map(|o| o.json().len()).sum();
    let (cache, _writer) = support::loaded(def, CacheConfig::default(), objects, 1);
    let per_object = (live() - before) as f64 / n as f64 - json as f64 / n as f64;
    println!(
        "objects: {n}, mean JSON {} B, bytes per object beyond its JSON: {per_object:.0}",
        json / n
    );

    let cases: [(&str, SelectionFor); 2] = [
        ("routed (spec.nodeName=node-i)", |i| {
            Selection::all()
                .with_fields(&format!("spec.nodeName=node-{i}"))
                .unwrap()
        }),
        ("unrouted (labelSelector=tier=t-i)", |i| {
            Selection::all()
                .with_labels(&format!("tier=t-{i}"))
                .unwrap()
        }),
    ];
    for (label, sel) in cases {
        let mut watchers = Vec::with_capacity(n);
        let before = live();
        for i in 0..n {
            let opts = WatchOptions::new(sel(i), ResourceVersion::At(1));
            watchers.push(cache.watch(opts).now_or_never().unwrap().unwrap());
        }
        let per = (live() - before) as f64 / n as f64;
        println!(
            "idle watchers {label}: {n}, bytes per idle watcher (stream, queue, compiled selector, router entry): {per:.0}"
        );
        drop(watchers);
    }

    // Probe W-SHARDMEM's scale: three batches of 80 cluster-wide watches, each with a
    // `shardSelector` of 201 disjoint uid ranges whose bounds no other watch shares. What
    // registering a watch adds should not depend on how many are already registered.
    let batch = if quick { 8 } else { 80 };
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut watchers = Vec::new();
    for b in 0..3 {
        let before = live();
        let sels: Vec<Selection> = (0..batch)
            .map(|_| shard_selection(&mut seed, 201))
            .collect();
        let parsed = live();
        for sel in sels {
            let opts = WatchOptions::new(sel, ResourceVersion::At(1));
            watchers.push(cache.watch(opts).now_or_never().unwrap().unwrap());
        }
        println!(
            "sharded watchers (201 uid ranges), batch {b} of {batch}: selection {:.0} B, registration {:.0} B per watch",
            (parsed - before) as f64 / batch as f64,
            (live() - parsed) as f64 / batch as f64
        );
    }
}

/// A selection of `count` random disjoint uid ranges (xorshift from `seed`).
fn shard_selection(seed: &mut u64, count: usize) -> Selection {
    let mut bounds: Vec<u64> = (0..count * 2)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        })
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let text = bounds
        .chunks_exact(2)
        .map(|p| {
            format!(
                "shardRange(object.metadata.uid, '0x{:016x}', '0x{:016x}')",
                p[0], p[1]
            )
        })
        .collect::<Vec<_>>()
        .join(" || ");
    Selection::all().with_shard(&text).unwrap()
}

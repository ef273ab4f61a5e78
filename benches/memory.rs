//! Memory: bytes per idle watcher (routed and unrouted) and bytes per cached object beyond its JSON,
//! measured with a counting global allocator. Run with `cargo bench --bench memory`.

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
}

//! loom models of the watcher protocol: dispatch (the writer, under the state write lock) racing
//! with a consumer that drains its queue, gets parked when the queue is full, catches up from
//! history (under the read lock) and rejoins live dispatch. loom runs every interleaving of the
//! lock and atomic operations (up to a preemption bound) and each must deliver every change
//! exactly once, in order, and leave no watcher parked at the head.
//!
//! Run: `RUSTFLAGS="--cfg watchcache_loom" cargo test -p watchcache --lib loom`
//! (`scripts/test` does, with its own target directory).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use futures_util::FutureExt;
use futures_util::task::noop_waker_ref;

use crate::cache::{Cache, CacheConfig, CacheWriter, Change, WatchOptions, WatchStream};
use crate::model::{EventType, ResourceDef, ResourceVersion, Selection};

fn pod(cache: &Cache, name: &str, node: &str, rv: u64) -> Change {
    let json = format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"nodeName":"{node}"}}}}"#
    );
    Change::Put(
        cache
            .decode(&format!("/registry/pods/ns/{name}"), json.as_bytes(), rv)
            .unwrap(),
    )
}

/// Polls until `n` items arrived, yielding to the writer while the stream is pending. A stream
/// still short after many polls lost an event (the writer has long finished by then).
fn take(stream: &mut WatchStream, n: usize) -> Vec<(EventType, String, u64)> {
    let mut cx = Context::from_waker(noop_waker_ref());
    let mut out = Vec::new();
    for _ in 0..64 {
        if out.len() == n {
            return out;
        }
        match Pin::new(&mut *stream).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(ev))) => out.push((
                ev.kind(),
                ev.object().map(|o| o.name().to_owned()).unwrap_or_default(),
                ev.resource_version(),
            )),
            Poll::Ready(other) => panic!("the stream ended: {other:?}"),
            Poll::Pending => loom::thread::yield_now(),
        }
    }
    assert_eq!(out.len(), n, "events lost: only these arrived: {out:?}");
    out
}

/// Runs `f` under every interleaving loom explores; returns how many it ran.
fn model(f: impl Fn(ResourceDef) + Sync + Send + 'static) -> usize {
    let def = ResourceDef::builtin("pods").unwrap();
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f(def.clone())
    });
    runs.load(std::sync::atomic::Ordering::Relaxed)
}

fn cache(def: ResourceDef) -> (Cache, CacheWriter) {
    let (cache, mut writer) = Cache::new(def, CacheConfig::default().routed_buffer(1));
    writer.resync(1).finish();
    (cache, writer)
}

#[test]
fn loom_park_catch_up_and_rejoin_race_with_dispatch() {
    let runs = model(|def| {
        let (cache, mut writer) = cache(def);
        let sel = Selection::all().with_fields("spec.nodeName=n1").unwrap();
        let mut stream = cache
            .watch(WatchOptions::new(sel, ResourceVersion::At(1)))
            .now_or_never()
            .unwrap()
            .unwrap();
        let feeder = {
            let cache = cache.clone();
            loom::thread::spawn(move || {
                for rv in 2..=4 {
                    let change = pod(&cache, "a", "n1", rv);
                    writer.apply(rv, [change]).unwrap();
                }
                writer
            })
        };
        let got = take(&mut stream, 3);
        let mut writer = feeder.join().unwrap();
        use EventType::*;
        assert_eq!(
            got,
            [
                (Added, "a".into(), 2),
                (Modified, "a".into(), 3),
                (Modified, "a".into(), 4)
            ]
        );
        // Nothing more, and not parked at the head: the next event is queued by dispatch itself.
        let mut cx = Context::from_waker(noop_waker_ref());
        assert!(Pin::new(&mut stream).poll_next(&mut cx).is_pending());
        assert!(!stream.is_parked(), "left parked at the head");
        let change = pod(&cache, "a", "n2", 5);
        writer.apply(5, [change]).unwrap();
        assert_eq!(stream.queued(), 1, "DELETED queued by dispatch");
    });
    eprintln!("park/catch-up/rejoin: {runs} interleavings");
    assert!(runs > 100, "loom explored {runs} interleavings");
}

#[test]
fn loom_initial_events_and_concurrent_changes_meet_without_gap_or_duplicate() {
    let runs = model(|def| {
        let (cache, mut writer) = cache(def);
        let change = pod(&cache, "x", "n1", 2);
        writer.apply(2, [change]).unwrap();
        let mut stream = cache
            .watch(
                // (no periodic bookmarks: they need a tokio timer; the initial-events-end one is
                // sent regardless)
                WatchOptions::new(Selection::all(), ResourceVersion::Any).send_initial_events(true),
            )
            .now_or_never()
            .unwrap()
            .unwrap();
        let feeder = {
            let cache = cache.clone();
            loom::thread::spawn(move || {
                let (moved, created) = (pod(&cache, "x", "n2", 3), pod(&cache, "y", "n1", 4));
                writer.apply(3, [moved]).unwrap();
                writer.apply(4, [created]).unwrap();
            })
        };
        let got = take(&mut stream, 4);
        feeder.join().unwrap();
        use EventType::*;
        assert_eq!(
            got,
            [
                (Added, "x".into(), 2),
                (Bookmark, String::new(), 2),
                (Modified, "x".into(), 3),
                (Added, "y".into(), 4)
            ]
        );
    });
    eprintln!("initial events: {runs} interleavings");
    assert!(runs > 10, "loom explored {runs} interleavings");
}

fn everything() -> Selection {
    Selection::all()
        .with_shard("shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')")
        .unwrap()
}

fn feed(cache: &Cache, mut writer: CacheWriter) -> loom::thread::JoinHandle<()> {
    let cache = cache.clone();
    loom::thread::spawn(move || {
        for rv in 2..=3 {
            let change = pod(&cache, "a", "n1", rv);
            writer.apply(rv, [change]).unwrap();
        }
    })
}

/// A sharded watch registers in two holds of the state lock, its ranges added to the spare shard
/// router in between, while the writer dispatches: every interleaving delivers each change once,
/// in order, whether the watch is still waiting in the unrouted set or already in the shard
/// router when it comes.
#[test]
fn loom_a_sharded_watch_registering_while_changes_are_dispatched_misses_nothing() {
    let runs = model(|def| {
        let (cache, writer) = cache(def);
        let feeder = feed(&cache, writer);
        let mut stream = cache
            .watch(WatchOptions::new(everything(), ResourceVersion::At(1)))
            .now_or_never()
            .unwrap()
            .unwrap();
        let got = take(&mut stream, 2);
        feeder.join().unwrap();
        use EventType::*;
        assert_eq!(got, [(Added, "a".into(), 2), (Modified, "a".into(), 3)]);
        let stats = cache.stats();
        assert_eq!((stats.routed_watchers, stats.unrouted_watchers), (1, 0));
    });
    eprintln!("sharded registration: {runs} interleavings");
    assert!(runs > 10, "loom explored {runs} interleavings");
}

/// A sharded watch ends the same way (its id's events dropped until the swap) while the writer
/// dispatches: another sharded watch gets every change once, and the ended one's id is free.
#[test]
fn loom_a_sharded_watch_ending_while_changes_are_dispatched_leaves_the_others_whole() {
    let runs = model(|def| {
        let (cache, writer) = cache(def);
        let watch = || {
            cache
                .watch(WatchOptions::new(everything(), ResourceVersion::At(1)))
                .now_or_never()
                .unwrap()
                .unwrap()
        };
        let (leaving, mut staying) = (watch(), watch());
        let feeder = feed(&cache, writer);
        drop(leaving);
        let got = take(&mut staying, 2);
        feeder.join().unwrap();
        use EventType::*;
        assert_eq!(got, [(Added, "a".into(), 2), (Modified, "a".into(), 3)]);
        let stats = cache.stats();
        assert_eq!((stats.routed_watchers, stats.unrouted_watchers), (1, 0));
    });
    eprintln!("sharded removal: {runs} interleavings");
    assert!(runs > 10, "loom explored {runs} interleavings");
}

//! Serialize once per (event, format): whatever the number of watchers and however they get an
//! event (history replay, initial events, live dispatch), each object state and each deletion is
//! encoded at most once per wire format in use, and a protobuf-stored object sent to a protobuf
//! watcher is never transcoded (its revision was spliced in at decode). Every watcher's frame of
//! one event shares its pieces: nothing is made per delivery. Its own test binary: the counters
//! are process-wide.

/// The shared helpers (tests/support/) this binary uses: each binary names its own, so that
/// none needs a feature it does not build with.
#[path = "support"]
mod support {
    #![allow(dead_code, unreachable_pub)]
    mod common;
    pub use common::*;
}

use std::collections::HashMap;

use futures_util::FutureExt;
use futures_util::StreamExt;
use watchcache::wire::{Encoder, JsonFrames, ProtobufFrames};
use watchcache::{
    Cache, CacheConfig, Change, EventType, ResourceDef, ResourceVersion, Selection, WatchOptions,
    WatchStream, encode_counts,
};

const W: usize = 1_000;
const PODS: usize = 20;

/// Drains every ready event, half of the watchers taking JSON frames and half protobuf frames;
/// returns the event types seen by the first watcher.
fn drain(watchers: &mut [WatchStream]) -> Vec<EventType> {
    drain_as(watchers, |i| i % 2 == 1)
}

/// Drains every ready event, watcher `i` taking protobuf frames when `protobuf(i)`, and checks
/// that every frame of one event (object, revision, type) in one format is the same pieces.
fn drain_as(watchers: &mut [WatchStream], protobuf: impl Fn(usize) -> bool) -> Vec<EventType> {
    let mut first = Vec::new();
    let mut pieces: HashMap<(String, u64, String, bool), Vec<usize>> = HashMap::new();
    for (i, w) in watchers.iter_mut().enumerate() {
        while let Some(Some(ev)) = w.next().now_or_never() {
            let ev = ev.unwrap();
            let frame = if !protobuf(i) {
                JsonFrames.frame(&ev).unwrap()
            } else {
                ProtobufFrames.frame(&ev).unwrap()
            };
            let at: Vec<usize> = frame.parts().iter().map(|p| p.as_ptr() as usize).collect();
            let key = ev.object().map(|o| o.key().to_owned()).unwrap_or_default();
            let event = (
                key,
                ev.resource_version(),
                format!("{:?}", ev.kind()),
                protobuf(i),
            );
            assert_eq!(
                pieces.entry(event.clone()).or_insert_with(|| at.clone()),
                &at,
                "{event:?}: a frame's pieces made for one delivery"
            );
            std::hint::black_box(frame);
            if i == 0 {
                first.push(ev.kind());
            }
        }
    }
    first
}

fn watchers(cache: &Cache, rv: ResourceVersion) -> Vec<WatchStream> {
    (0..W)
        .map(|_| {
            cache
                .watch(WatchOptions::new(Selection::all(), rv))
                .now_or_never()
                .unwrap()
                .unwrap()
        })
        .collect()
}

#[test]
fn each_event_is_encoded_once_per_format_for_any_number_of_watchers() {
    let def = ResourceDef::builtin("pods").unwrap();
    let (cache, mut writer) = Cache::new(def, CacheConfig::default());
    writer.resync(1).finish();
    // Pods stored as kube-apiserver stores them (protobuf): made from JSON by a helper cache.
    let (helper, _) = Cache::new(
        ResourceDef::builtin("pods").unwrap(),
        CacheConfig::default(),
    );
    let stored = |name: &str, image: &str| {
        let o = helper
            .decode(
                &support::key("ns", name),
                support::TestPod::new("ns", name)
                    .uid(&format!("u-{name}"))
                    .label("app", "web")
                    .node("n1")
                    .container("main", image)
                    .phase("Running")
                    .json()
                    .as_bytes(),
                1,
            )
            .unwrap();
        o.protobuf_wire().unwrap().to_vec()
    };
    let v1: Vec<Vec<u8>> = (0..PODS).map(|i| stored(&format!("p{i}"), "a:1")).collect();
    let v2: Vec<Vec<u8>> = (0..PODS).map(|i| stored(&format!("p{i}"), "a:2")).collect();

    let before = encode_counts();
    let mut rv = 1;
    for vals in [&v1, &v2] {
        for (i, v) in vals.iter().enumerate() {
            rv += 1;
            let o = cache
                .decode(&support::key("ns", &format!("p{i}")), v, rv)
                .unwrap();
            assert!(o.protobuf().is_some(), "stored as protobuf");
            writer.apply(rv, [Change::Put(o)]).unwrap();
        }
    }
    // History replays to W watchers, and initial events to W more.
    let mut replay = watchers(&cache, ResourceVersion::At(1));
    let mut initial = watchers(&cache, ResourceVersion::Any);
    let seen = drain(&mut replay);
    assert_eq!(seen.len(), 2 * PODS);
    assert_eq!(drain(&mut initial).len(), PODS);
    // Live deletions to all 2 W.
    for i in 0..PODS {
        rv += 1;
        writer
            .apply(rv, [Change::Delete(support::key("ns", &format!("p{i}")))])
            .unwrap();
    }
    assert_eq!(drain(&mut replay), vec![EventType::Deleted; PODS]);
    assert_eq!(drain(&mut initial).len(), PODS);

    let after = encode_counts();
    // Per pod: two states and one deletion, each encoded once per format: JSON transcoded from
    // the stored protobuf; in protobuf, the deletion's last state at its revision (a state's
    // protobuf is its stored bytes, its revision spliced in at decode).
    assert_eq!(after.json - before.json, 3 * PODS as u64);
    assert_eq!(after.protobuf - before.protobuf, PODS as u64);

    // Protobuf watchers only: a protobuf-stored object is never transcoded to JSON.
    let before = encode_counts();
    let mut pb_only = watchers(&cache, ResourceVersion::At(rv));
    for (i, v) in v2.iter().enumerate() {
        rv += 1;
        let o = cache
            .decode(&support::key("ns", &format!("p{i}")), v, rv)
            .unwrap();
        writer.apply(rv, [Change::Put(o)]).unwrap();
    }
    assert_eq!(
        drain_as(&mut pb_only, |_| true),
        vec![EventType::Added; PODS]
    );
    let after = encode_counts();
    assert_eq!(
        after.json - before.json,
        0,
        "no JSON made for protobuf watchers"
    );
    assert_eq!(
        after.protobuf - before.protobuf,
        0,
        "the stored bytes, not an encoding"
    );
}

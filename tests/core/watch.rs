//! WATCH behaviour: routing, transitions, replay, slow watchers, initial events, bookmarks and
//! serialize-once.

use crate::support;

use std::time::Duration;

use futures_util::StreamExt;
use support::*;
use watchcache::wire::{Encoder, JsonFrames};
use watchcache::{
    CacheConfig, Error, EventType, HistoryConfig, ResourceDef, ResourceVersion, Selection,
    WatchOptions,
};

fn on_node(n: &str) -> Selection {
    Selection::all()
        .with_fields(&format!("spec.nodeName={n}"))
        .unwrap()
}

#[tokio::test]
async fn routed_watchers_see_only_their_node_and_a_move_reaches_both() {
    let (cache, src) = pods(CacheConfig::default());
    let mut n1 = cache
        .watch(WatchOptions::new(on_node("n1"), ResourceVersion::At(1)))
        .await
        .unwrap();
    let mut n2 = cache
        .watch(WatchOptions::new(on_node("n2"), ResourceVersion::At(1)))
        .await
        .unwrap();
    let mut all = cache
        .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(1)))
        .await
        .unwrap();
    let stats = cache.stats();
    assert_eq!((stats.routed_watchers, stats.unrouted_watchers), (2, 1));

    let r_add = src.put(&key("ns", "a"), pod("ns", "a", "n1", &[])).unwrap();
    src.put(&key("ns", "other"), pod("ns", "other", "n3", &[]))
        .unwrap();
    let r_move = src.put(&key("ns", "a"), pod("ns", "a", "n2", &[])).unwrap();
    let r_del = src.delete(&key("ns", "a")).unwrap();

    let e1 = ready_events(&mut n1);
    assert_eq!(
        summary(&e1),
        [
            (EventType::Added, "a".into(), r_add),
            (EventType::Deleted, "a".into(), r_move)
        ]
    );
    // The DELETED event carries the last state on n1, at the move's revision.
    let deleted = e1[1].as_ref().unwrap();
    let v: serde_json::Value = serde_json::from_slice(deleted.json()).unwrap();
    assert_eq!(
        (
            v["spec"]["nodeName"].as_str(),
            v["metadata"]["resourceVersion"].as_str()
        ),
        (Some("n1"), Some(&*r_move.to_string()))
    );
    assert_eq!(
        summary(&ready_events(&mut n2)),
        [
            (EventType::Added, "a".into(), r_move),
            (EventType::Deleted, "a".into(), r_del)
        ]
    );
    let kinds: Vec<_> = summary(&ready_events(&mut all))
        .into_iter()
        .map(|(k, n, _)| (k, n))
        .collect();
    assert_eq!(
        kinds,
        [
            (EventType::Added, "a".into()),
            (EventType::Added, "other".into()),
            (EventType::Modified, "a".into()),
            (EventType::Deleted, "a".into())
        ]
    );
    // Only the matching node's watcher was offered each event: 4 + 3 for `all`, 2 + 2 for the nodes.
    assert_eq!(cache.stats().delivered, 8);
}

#[tokio::test]
async fn label_and_namespace_triggers_route_and_relabels_transition() {
    let (cache, src) = pods(CacheConfig::default());
    let web = Selection::all().with_labels("app=web").unwrap();
    let mut w = cache
        .watch(WatchOptions::new(web, ResourceVersion::At(1)))
        .await
        .unwrap();
    let mut ns = cache
        .watch(WatchOptions::new(
            Selection::all().in_namespace("b"),
            ResourceVersion::At(1),
        ))
        .await
        .unwrap();
    assert_eq!(cache.stats().routed_watchers, 2);
    src.put(&key("a", "p"), pod("a", "p", "n", &[("app", "db")]))
        .unwrap();
    src.put(&key("a", "p"), pod("a", "p", "n", &[("app", "web")]))
        .unwrap();
    src.put(&key("b", "q"), pod("b", "q", "n", &[("app", "web")]))
        .unwrap();
    src.put(&key("a", "p"), pod("a", "p", "n", &[("app", "db")]))
        .unwrap();
    let got: Vec<_> = summary(&ready_events(&mut w))
        .into_iter()
        .map(|(k, n, _)| (k, n))
        .collect();
    assert_eq!(
        got,
        [
            (EventType::Added, "p".into()),
            (EventType::Added, "q".into()),
            (EventType::Deleted, "p".into())
        ]
    );
    assert_eq!(summary(&ready_events(&mut ns)).len(), 1);
}

#[tokio::test]
async fn watch_from_a_revision_replays_history_exactly_once() {
    let (cache, src) = pods(CacheConfig::default());
    let revs: Vec<u64> = (0..10)
        .map(|i| {
            src.put(
                &key("ns", &format!("p{i}")),
                pod("ns", &format!("p{i}"), "n1", &[]),
            )
            .unwrap()
        })
        .collect();
    let mut w = cache
        .watch(WatchOptions::new(
            on_node("n1"),
            ResourceVersion::At(revs[4]),
        ))
        .await
        .unwrap();
    let replay = summary(&ready_events(&mut w));
    assert_eq!(replay.iter().map(|e| e.2).collect::<Vec<_>>(), revs[5..]);
    let r = src
        .put(&key("ns", "p0"), pod("ns", "p0", "n1", &[]))
        .unwrap();
    assert_eq!(
        summary(&ready_events(&mut w)),
        [(EventType::Modified, "p0".into(), r)]
    );
    // A watch from a future revision waits for it, skipping what comes before.
    let mut future = cache
        .watch(WatchOptions::new(
            Selection::all(),
            ResourceVersion::At(r + 2),
        ))
        .await
        .unwrap();
    src.put(&key("ns", "x"), pod("ns", "x", "n1", &[])).unwrap();
    src.put(&key("ns", "x"), pod("ns", "x", "n1", &[])).unwrap();
    let r3 = src.put(&key("ns", "x"), pod("ns", "x", "n1", &[])).unwrap();
    assert_eq!(
        summary(&ready_events(&mut future)),
        [(EventType::Modified, "x".into(), r3)]
    );
}

fn small_window() -> CacheConfig {
    CacheConfig::default().routed_buffer(2)
}

fn tiny_history_pods() -> (watchcache::Cache, watchcache::MemorySource) {
    let mut def = ResourceDef::builtin("pods").unwrap();
    def.history = HistoryConfig {
        min_events: 8,
        max_events: 8,
        window: Duration::from_secs(75),
        max_bytes: None,
    };
    let (cache, writer) = watchcache::Cache::new(def, small_window());
    let src = watchcache::MemorySource::new(writer, 1, []);
    (cache, src)
}

#[tokio::test]
async fn a_watch_from_before_the_window_is_expired() {
    let (cache, src) = tiny_history_pods();
    for i in 0..20 {
        src.put(&key("ns", "p"), pod("ns", "p", &format!("n{i}"), &[]))
            .unwrap();
    }
    let err = cache
        .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(2)))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::Expired {
            requested: 2,
            oldest: 13
        }
    );
    assert_eq!((err.code(), err.reason()), (410, "Expired"));
    assert_eq!(err.to_string(), "too old resource version: 2 (13)");
    assert!(
        cache
            .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(13)))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_slow_watcher_is_parked_and_catches_up_without_loss() {
    let (cache, src) = pods(small_window());
    let mut slow = cache
        .watch(WatchOptions::new(on_node("n1"), ResourceVersion::At(1)))
        .await
        .unwrap();
    let mut fast = cache
        .watch(WatchOptions::new(on_node("n1"), ResourceVersion::At(1)))
        .await
        .unwrap();
    let mut revs = Vec::new();
    let mut fast_seen = Vec::new();
    for i in 0..60 {
        revs.push(
            src.put(
                &key("ns", &format!("p{}", i % 7)),
                pod("ns", &format!("p{}", i % 7), "n1", &[]),
            )
            .unwrap(),
        );
        fast_seen.extend(summary(&ready_events(&mut fast)).into_iter().map(|e| e.2));
    }
    assert_eq!(
        fast_seen, revs,
        "a fast watcher is never held up by a slow one"
    );
    assert!(cache.stats().parked >= 1);
    let slow_seen: Vec<u64> = summary(&ready_events(&mut slow))
        .into_iter()
        .map(|e| e.2)
        .collect();
    assert_eq!(
        slow_seen, revs,
        "the slow watcher got everything, in order, once"
    );
    // Having caught up, it is live again.
    let r = src.put(&key("ns", "z"), pod("ns", "z", "n1", &[])).unwrap();
    assert_eq!(
        summary(&ready_events(&mut slow)),
        [(EventType::Added, "z".into(), r)]
    );
}

#[tokio::test]
async fn a_parked_watcher_whose_position_left_the_window_gets_expired_then_ends() {
    let (cache, src) = tiny_history_pods();
    let mut w = cache
        .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(1)))
        .await
        .unwrap();
    // Unrouted queues are at least 100 long; overflow it, then push the position out of the window.
    for i in 0..150 {
        src.put(&key("ns", "p"), pod("ns", "p", &format!("n{i}"), &[]))
            .unwrap();
    }
    let evs = ready_events(&mut w);
    let (ok, err): (Vec<_>, Vec<_>) = evs.into_iter().partition(Result::is_ok);
    assert_eq!(ok.len(), 100, "the queued events are delivered first");
    assert!(
        matches!(err[..], [Err(Error::Expired { requested: 101, .. })]),
        "{err:?}"
    );
    assert!(w.next().await.is_none(), "the stream ends after the error");
    assert_eq!(cache.stats().expired, 1);
}

#[tokio::test]
async fn send_initial_events_streams_the_state_then_a_bookmark_then_live_events() {
    let (cache, src) = pods(small_window());
    for i in 0..600 {
        let node = if i % 2 == 0 { "n1" } else { "n2" };
        src.put(
            &key("ns", &format!("p{i:04}")),
            pod("ns", &format!("p{i:04}"), node, &[]),
        )
        .unwrap();
    }
    let start_rv = cache.resource_version();
    let opts = WatchOptions::new(on_node("n1"), ResourceVersion::Unset)
        .send_initial_events(true)
        .with_bookmarks();
    let mut w = cache.watch(opts).await.unwrap();
    let first = next(&mut w).await;
    assert_eq!(
        (first.kind(), first.object().unwrap().name()),
        (EventType::Added, "p0000")
    );
    // Changes while the initial state streams: not part of it, delivered after the bookmark.
    let r_mod = src
        .put(&key("ns", "p0598"), pod("ns", "p0598", "n1", &[("x", "y")]))
        .unwrap();
    let r_del = src.delete(&key("ns", "p0002")).unwrap();
    let r_add = src
        .put(&key("ns", "zzz"), pod("ns", "zzz", "n1", &[]))
        .unwrap();
    for i in 0..40 {
        src.put(
            &key("ns", "churn"),
            pod("ns", "churn", "n2", &[("i", &i.to_string())]),
        )
        .unwrap();
    }
    let mut names = vec![first.object().unwrap().name().to_owned()];
    loop {
        let e = next(&mut w).await;
        if e.kind() == EventType::Bookmark {
            assert!(e.is_initial_events_end());
            assert_eq!(e.resource_version(), start_rv);
            let v: serde_json::Value = serde_json::from_slice(e.json()).unwrap();
            assert_eq!(
                v["metadata"]["annotations"]["k8s.io/initial-events-end"],
                "true"
            );
            assert_eq!(v["kind"], "Pod");
            break;
        }
        assert_eq!(e.kind(), EventType::Added);
        assert!(e.resource_version() <= start_rv);
        names.push(e.object().unwrap().name().to_owned());
    }
    let want: Vec<String> = (0..600).step_by(2).map(|i| format!("p{i:04}")).collect();
    assert_eq!(names, want, "the state at the start revision, in key order");
    let live = summary(&ready_events(&mut w));
    assert_eq!(
        live,
        [
            (EventType::Modified, "p0598".into(), r_mod),
            (EventType::Deleted, "p0002".into(), r_del),
            (EventType::Added, "zzz".into(), r_add)
        ]
    );
}

#[tokio::test]
async fn legacy_watch_from_zero_lists_the_state_without_a_bookmark() {
    let (cache, src) = pods(CacheConfig::default());
    src.put(&key("ns", "a"), pod("ns", "a", "n1", &[])).unwrap();
    src.put(&key("ns", "b"), pod("ns", "b", "n1", &[])).unwrap();
    let mut w = cache
        .watch(WatchOptions::new(on_node("n1"), ResourceVersion::Any))
        .await
        .unwrap();
    let evs = summary(&ready_events(&mut w));
    assert_eq!(
        evs.iter().map(|e| (e.0, e.1.as_str())).collect::<Vec<_>>(),
        [(EventType::Added, "a"), (EventType::Added, "b")]
    );
    // sendInitialEvents=false from "0": only what comes next.
    let opts = WatchOptions::new(on_node("n1"), ResourceVersion::Any).send_initial_events(false);
    let mut w = cache.watch(opts).await.unwrap();
    assert!(ready_events(&mut w).is_empty());
}

#[tokio::test(start_paused = true)]
async fn bookmarks_are_periodic_and_carry_the_cache_revision() {
    let (cache, src) = pods(CacheConfig::default().bookmark_interval(Duration::from_secs(1)));
    let mut w = cache
        .watch(WatchOptions::new(on_node("n1"), ResourceVersion::At(1)).with_bookmarks())
        .await
        .unwrap();
    src.put(&key("ns", "a"), pod("ns", "a", "n9", &[])).unwrap();
    let other = src.bump();
    let b = next(&mut w).await;
    assert_eq!(
        (b.kind(), b.resource_version(), b.is_initial_events_end()),
        (EventType::Bookmark, other, false)
    );
    let r = src.put(&key("ns", "b"), pod("ns", "b", "n1", &[])).unwrap();
    assert_eq!(next(&mut w).await.resource_version(), r);
    let b2 = next(&mut w).await;
    assert_eq!((b2.kind(), b2.resource_version()), (EventType::Bookmark, r));
    // Without allowWatchBookmarks there are none.
    let mut quiet = cache
        .watch(WatchOptions::new(on_node("n1"), ResourceVersion::At(r)))
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), quiet.next())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn encoded_bytes_are_shared_by_live_replayed_and_initial_events() {
    let (cache, src) = pods(CacheConfig::default());
    let mut a = cache
        .watch(WatchOptions::new(on_node("n1"), ResourceVersion::At(1)))
        .await
        .unwrap();
    let mut b = cache
        .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(1)))
        .await
        .unwrap();
    let r = src.put(&key("ns", "p"), pod("ns", "p", "n1", &[])).unwrap();
    src.delete(&key("ns", "p")).unwrap();
    let (ea, eb) = (ready_events(&mut a), ready_events(&mut b));
    let mut replay = cache
        .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(1)))
        .await
        .unwrap();
    let er = ready_events(&mut replay);
    for i in 0..2 {
        let (x, y, z) = (
            ea[i].as_ref().unwrap(),
            eb[i].as_ref().unwrap(),
            er[i].as_ref().unwrap(),
        );
        assert_eq!(
            x.json().as_ptr(),
            y.json().as_ptr(),
            "live watchers share event {i}"
        );
        assert_eq!(
            x.json().as_ptr(),
            z.json().as_ptr(),
            "a replay shares event {i}"
        );
        assert_eq!(
            JsonFrames.frame(x).unwrap().body().as_ptr(),
            x.json().as_ptr(),
            "frames carry the shared bytes"
        );
    }
    let line = JsonFrames
        .frame(ea[0].as_ref().unwrap())
        .unwrap()
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(
        (
            v["type"].as_str(),
            v["object"]["metadata"]["resourceVersion"].as_str()
        ),
        (Some("ADDED"), Some(&*r.to_string()))
    );
    assert!(line.ends_with(b"}\n") && line.iter().filter(|c| **c == b'\n').count() == 1);
    // Initial events and list items point at the stored object's bytes.
    src.put(&key("ns", "q"), pod("ns", "q", "n1", &[])).unwrap();
    let mut init = cache
        .watch(WatchOptions::new(Selection::all(), ResourceVersion::Any))
        .await
        .unwrap();
    let e = next(&mut init).await;
    let stored = cache
        .get(Some("ns"), "q", ResourceVersion::Any)
        .await
        .unwrap();
    assert_eq!(e.json().as_ptr(), stored.json().as_ptr());
}

#[tokio::test]
async fn malformed_values_are_skipped_counted_and_the_stream_goes_on() {
    let (cache, src) = pods(CacheConfig::default());
    let mut w = cache
        .watch(WatchOptions::new(Selection::all(), ResourceVersion::At(1)))
        .await
        .unwrap();
    assert!(src.put(&key("ns", "bad"), "{not json").is_err());
    assert!(
        src.put(&key("ns", "bad"), r#"{"metadata":{"namespace":"ns"}}"#)
            .is_err()
    );
    let r = src
        .put(&key("ns", "good"), pod("ns", "good", "n", &[]))
        .unwrap();
    assert_eq!(
        summary(&ready_events(&mut w)),
        [(EventType::Added, "good".into(), r)]
    );
    assert_eq!(cache.stats().decode_errors, 2);
}

#[tokio::test]
async fn a_resync_turns_the_difference_into_events_and_expires_older_positions() {
    let (cache, src) = pods(CacheConfig::default());
    for n in ["a", "b", "c"] {
        src.put(&key("ns", n), pod("ns", n, "n1", &[])).unwrap();
    }
    let before = cache.resource_version();
    let mut w = cache
        .watch(WatchOptions::new(
            on_node("n1"),
            ResourceVersion::At(before),
        ))
        .await
        .unwrap();
    // The upstream moved on while the cache was cut off: b changed, c went away, d appeared.
    let at = before + 10;
    let mut writer = src.writer();
    let mut resync = writer.resync(at);
    let page: Vec<_> = [
        ("a", before - 2, "n1"),
        ("b", before + 3, "n1"),
        ("d", before + 5, "n1"),
    ]
    .iter()
    .map(|(n, rv, node)| {
        cache
            .decode(&key("ns", n), pod("ns", n, node, &[]).as_bytes(), *rv)
            .unwrap()
    })
    .collect();
    resync.add_page(page);
    let out = resync.finish();
    drop(writer);
    assert_eq!(
        (out.listed, out.added, out.modified, out.deleted),
        (3, 1, 1, 1)
    );
    let evs = summary(&ready_events(&mut w));
    assert_eq!(
        evs,
        [
            (EventType::Modified, "b".into(), at),
            (EventType::Added, "d".into(), at),
            (EventType::Deleted, "c".into(), at)
        ]
    );
    let err = cache
        .watch(WatchOptions::new(
            Selection::all(),
            ResourceVersion::At(before),
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Expired { oldest, .. } if oldest == at));
    assert_eq!(cache.stats().resyncs, 1);
}

#[test]
fn public_handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<watchcache::Cache>();
    check::<watchcache::WatchStream>();
    check::<watchcache::WatchEvent>();
    check::<watchcache::Object>();
    check::<watchcache::MemorySource>();
    check::<watchcache::Error>();
}

#[tokio::test(start_paused = true)]
async fn a_bookmark_comes_two_seconds_before_the_deadline() {
    let (cache, src) = pods(CacheConfig::default());
    let r = src.put(&key("ns", "a"), pod("ns", "a", "n1", &[])).unwrap();
    let mut w = cache
        .watch(WatchOptions::new(on_node("n9"), ResourceVersion::At(r)).with_bookmarks())
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    w.bookmark_before(start + Duration::from_secs(10));
    let b = tokio::time::timeout(Duration::from_secs(20), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((b.kind(), b.resource_version()), (EventType::Bookmark, r));
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(8),
        "at the deadline minus 2 s, not the 60 s period"
    );
    // Without bookmarks asked for, nothing is scheduled.
    let mut quiet = cache
        .watch(WatchOptions::new(on_node("n9"), ResourceVersion::At(r)))
        .await
        .unwrap();
    quiet.bookmark_before(tokio::time::Instant::now() + Duration::from_secs(3));
    assert!(
        tokio::time::timeout(Duration::from_secs(5), quiet.next())
            .await
            .is_err()
    );
}

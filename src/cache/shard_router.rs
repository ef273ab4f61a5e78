//! Shard routing: a `shardSelector` range is a routing trigger. A watcher that no (trigger,
//! value) routes but that has a shard selector is registered under its hash ranges, and an event
//! is offered only to the watchers whose ranges contain its object's hash, found by binary search:
//! a replica costs nothing for events outside its range (upstream evaluates every sharded
//! watcher's filter on every event).
//!
//! Per shard key (uid, namespace), the hash space `[0, 2^64)` is cut into segments at every
//! range bound of a registered watcher; each segment lists the watchers whose ranges cover it.
//! A hash's segment is a binary search over the segment starts.
//!
//! ## Invariants
//! - `starts[0] == 0`, `starts` is strictly increasing, and `members` is aligned with it: segment
//!   `i` is `[starts[i], starts[i + 1])` (the last one runs to 2^64).
//! - A watcher is in the members of exactly the segments its ranges cover. Its ranges are
//!   disjoint ([`ShardSelector::ranges`]), so a segment lists it at most once.
//! - Two neighbouring segments never have the same members after a removal (they are merged), so
//!   the number of segments stays at most twice the number of registered ranges, plus one.

use crate::cache::history::Event;
use crate::cache::members::Members;
use crate::model::{ShardKey, ShardSelector};

/// The segments of one shard key.
#[derive(Default)]
struct Segments {
    starts: Vec<u64>,
    members: Vec<Option<Members>>,
    watchers: u64,
}

impl Segments {
    fn new() -> Segments {
        Segments {
            starts: vec![0],
            members: vec![None],
            watchers: 0,
        }
    }

    /// The segment holding `hash`.
    fn find(&self, hash: u64) -> usize {
        // starts[0] == 0, so the point is at least 1.
        self.starts.partition_point(|s| *s <= hash) - 1
    }

    /// The index of the segment starting at `at` (2^64: one past the last), cutting one in two
    /// if needed.
    fn cut(&mut self, at: u128) -> usize {
        let Ok(at) = u64::try_from(at) else {
            return self.starts.len();
        };
        let i = self.find(at);
        if self.starts[i] == at {
            return i;
        }
        let copy = self.members[i].clone();
        self.starts.insert(i + 1, at);
        self.members.insert(i + 1, copy);
        i + 1
    }

    /// The index of the segment starting at `at` (2^64: one past the last); it exists.
    fn at(&self, at: u128) -> usize {
        u64::try_from(at).map_or(self.starts.len(), |at| self.find(at))
    }

    fn add(&mut self, id: u32, shard: &ShardSelector) {
        for r in shard.ranges() {
            let i = self.cut(u128::from(r.start));
            let j = self.cut(r.end);
            for m in &mut self.members[i..j] {
                match m {
                    Some(m) => m.insert(id),
                    None => *m = Some(Members::One(id)),
                }
            }
        }
        self.watchers += 1;
    }

    fn remove(&mut self, id: u32, shard: &ShardSelector) {
        // Higher ranges first: merging at one range's bounds leaves lower indexes as they were.
        for r in shard.ranges().iter().rev() {
            let i = self.at(u128::from(r.start));
            let j = self.at(r.end);
            for m in &mut self.members[i..j] {
                if m.as_mut().is_some_and(|s| s.remove(id)) {
                    *m = None;
                }
            }
            self.merge(j);
            self.merge(i);
        }
        self.watchers -= 1;
    }

    /// Merges segment `i` into the one before it when their members are the same.
    fn merge(&mut self, i: usize) {
        if i == 0 || i >= self.starts.len() {
            return;
        }
        if Members::same(self.members[i - 1].as_ref(), self.members[i].as_ref()) {
            self.starts.remove(i);
            self.members.remove(i);
        }
    }
}

/// The shard-routed watchers of one cache, per shard key.
pub(crate) struct ShardRouter {
    uid: Segments,
    namespace: Segments,
}

impl ShardRouter {
    pub fn new() -> ShardRouter {
        ShardRouter {
            uid: Segments::new(),
            namespace: Segments::new(),
        }
    }

    fn segments(&mut self, key: ShardKey) -> &mut Segments {
        match key {
            ShardKey::Uid => &mut self.uid,
            ShardKey::Namespace => &mut self.namespace,
        }
    }

    pub fn add(&mut self, id: u32, shard: &ShardSelector) {
        self.segments(shard.key()).add(id, shard);
    }

    pub fn remove(&mut self, id: u32, shard: &ShardSelector) {
        self.segments(shard.key()).remove(id, shard);
    }

    /// Calls `visit` once for every shard-routed watcher whose ranges hold the hash of the event's
    /// new or previous object. A uid can differ between the two (a resync replacing a recreated
    /// object); a watcher holding both hashes is visited once.
    pub fn for_each_candidate(&self, ev: &Event, visit: &mut impl FnMut(u32)) {
        for (key, segs) in [
            (ShardKey::Uid, &self.uid),
            (ShardKey::Namespace, &self.namespace),
        ] {
            if segs.watchers == 0 {
                continue;
            }
            let new = ev.object.as_ref().map(|o| o.shard_hash(key));
            let old = ev.prev.as_ref().map(|o| o.shard_hash(key));
            let new_members = new.and_then(|h| segs.members[segs.find(h)].as_ref());
            if let Some(m) = new_members {
                m.for_each(visit);
            }
            if let Some(old) = old
                && old != new.unwrap_or(!old)
                && let Some(m) = segs.members[segs.find(old)].as_ref()
            {
                m.for_each(&mut |id| {
                    if !new_members.is_some_and(|n| n.contains(id)) {
                        visit(id);
                    }
                });
            }
        }
    }

    /// Number of shard-routed watchers.
    pub fn count(&self) -> u64 {
        self.uid.watchers + self.namespace.watchers
    }

    /// Number of segments (for tests of the merge invariant).
    #[cfg(test)]
    fn segment_count(&self) -> usize {
        self.uid.starts.len() + self.namespace.starts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::testing::Fixture;
    use crate::model::Object;
    use std::time::Instant;

    fn sel(ranges: &[(u64, u128)]) -> ShardSelector {
        let text = ranges
            .iter()
            .map(|(s, e)| {
                let end = if *e == 1 << 64 {
                    "0x10000000000000000".to_owned()
                } else {
                    format!("0x{e:016x}")
                };
                format!("shardRange(object.metadata.uid, '0x{s:016x}', '{end}')")
            })
            .collect::<Vec<_>>()
            .join(" || ");
        ShardSelector::parse(&text).unwrap()
    }

    fn pod_with_uid(f: &Fixture, name: &str, uid: &str) -> Object {
        let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns","uid":"{uid}"}}}}"#);
        Object::decode(
            &f.schema,
            &format!("/registry/pods/ns/{name}"),
            json.as_bytes(),
            1,
        )
        .unwrap()
    }

    fn visited(r: &ShardRouter, ev: &Event) -> Vec<u32> {
        let mut out = Vec::new();
        r.for_each_candidate(ev, &mut |id| out.push(id));
        out.sort_unstable();
        out
    }

    /// Every watcher whose ranges hold the hash, once, and no other, against a linear check.
    #[test]
    fn events_reach_exactly_the_watchers_whose_ranges_hold_their_hash() {
        let f = Fixture::new();
        let mut r = ShardRouter::new();
        let half = 1u64 << 63;
        let sels = [
            sel(&[(0, u128::from(half))]),
            sel(&[(half, 1 << 64)]),
            sel(&[(0, 1 << 64)]),
            sel(&[(1 << 60, 1 << 61), (1 << 62, u128::from(half) + 5)]),
            sel(&[(0, u128::from(half))]),
        ];
        for (id, s) in sels.iter().enumerate() {
            r.add(id as u32, s);
        }
        assert_eq!(r.count(), 5);
        for i in 0..200 {
            let obj = pod_with_uid(&f, "p", &format!("uid-{i}"));
            let h = obj.shard_hash(ShardKey::Uid);
            let ev = Event::new(0, 1, Some(obj), None, Instant::now());
            let want: Vec<u32> = (0..sels.len() as u32)
                .filter(|id| sels[*id as usize].contains(h))
                .collect();
            assert_eq!(visited(&r, &ev), want, "hash {h:#x}");
        }
        // A recreated object (new uid) reaches both sides' watchers, each once.
        let a = pod_with_uid(&f, "p", "uid-0");
        let b = pod_with_uid(&f, "p", "uid-1");
        let (ha, hb) = (a.shard_hash(ShardKey::Uid), b.shard_hash(ShardKey::Uid));
        let ev = Event::new(0, 2, Some(a), Some(b), Instant::now());
        let want: Vec<u32> = (0..sels.len() as u32)
            .filter(|id| sels[*id as usize].contains(ha) || sels[*id as usize].contains(hb))
            .collect();
        assert_eq!(visited(&r, &ev), want);

        // Removing every watcher merges the segments back to one per key.
        for (id, s) in sels.iter().enumerate() {
            r.remove(id as u32, s);
        }
        assert_eq!(r.count(), 0);
        assert_eq!(r.segment_count(), 2);
        let obj = pod_with_uid(&f, "p", "x");
        assert!(visited(&r, &Event::new(0, 1, Some(obj), None, Instant::now())).is_empty());
    }

    #[test]
    fn segments_stay_bounded_under_churn() {
        let mut r = ShardRouter::new();
        let shards: Vec<ShardSelector> = (0..64u64)
            .map(|i| sel(&[(i << 58, u128::from(i + 1) << 58)]))
            .collect();
        for round in 0..3u32 {
            for (i, s) in shards.iter().enumerate() {
                r.add(round * 64 + i as u32, s);
            }
            for (i, s) in shards.iter().enumerate() {
                r.remove(round * 64 + i as u32, s);
            }
        }
        assert_eq!(r.segment_count(), 2);
    }
}

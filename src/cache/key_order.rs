//! The store's occupied slots in their objects' key order: a sorted sequence of 4-byte slot
//! numbers cut into chunks of at most [`CHUNK`], each with a copy of its first key, searched by
//! comparing keys that the caller reads from its slots.
//!
//! The copies of the chunks' first keys (one per 64–128 objects) let a search pick its chunk
//! without touching any object; within the chunk it compares about log2(CHUNK) objects' keys.
//!
//! Why not a `BTreeSet` of the objects (as before): an update had to find its entry and replace
//! it (the entry held the old state), two descents comparing one object per step, which was a
//! third of routed apply's time; and a `BTreeSet` orders by `Ord` alone, which cannot reach the
//! store's slots without `unsafe` (the crate forbids it). A slot keeps its key while occupied, so
//! an entry here never changes on update: only creations and deletions search, and the entry is
//! 4 bytes (design/performance.md, "The store's key order").
//!
//! ## Invariants
//! - The chunks, concatenated, are the occupied slots in strictly increasing key order (each
//!   key once); no chunk is empty; none is longer than `CHUNK`; `len` is their total.
//! - Each chunk's `first` is the key of its first slot.
//! - Every call gets the same `key_of` for the same slot numbers (the caller's slots), and a
//!   slot passed to `insert` already holds its object.

use std::ops::Bound;

/// A chunk's most entries. A creation or deletion moves at most this many 4-byte entries; a
/// search compares about log2(chunks) + log2(CHUNK) keys, as a balanced tree would.
const CHUNK: usize = 128;

/// The occupied slots in key order.
#[derive(Default)]
pub(crate) struct KeyOrder {
    chunks: Vec<Chunk>,
    len: usize,
}

struct Chunk {
    first: Box<str>,
    slots: Vec<u32>,
}

impl Chunk {
    fn new<'a>(slots: Vec<u32>, key_of: impl Fn(u32) -> &'a str) -> Chunk {
        Chunk {
            first: key_of(slots[0]).into(),
            slots,
        }
    }
}

/// Where a key is, or would go: chunk `c`, index `i`; `found` if a slot has exactly that key.
struct Pos {
    c: usize,
    i: usize,
    found: bool,
}

impl KeyOrder {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn position<'a>(&self, key: &str, key_of: impl Fn(u32) -> &'a str) -> Pos {
        // The last chunk whose first key is ≤ `key` (or the first chunk).
        let c = self
            .chunks
            .partition_point(|ch| &*ch.first <= key)
            .saturating_sub(1);
        match self.chunks.get(c) {
            None => Pos {
                c: 0,
                i: 0,
                found: false,
            },
            Some(ch) => match ch.slots.binary_search_by(|&s| key_of(s).cmp(key)) {
                Ok(i) => Pos { c, i, found: true },
                Err(i) => Pos { c, i, found: false },
            },
        }
    }

    /// Adds slot `s` (its object already in the caller's slots). False if its key is present.
    pub(super) fn insert<'a>(&mut self, s: u32, key_of: impl Fn(u32) -> &'a str) -> bool {
        let p = self.position(key_of(s), &key_of);
        if p.found {
            return false;
        }
        self.len += 1;
        let Some(ch) = self.chunks.get_mut(p.c) else {
            let mut slots = Vec::with_capacity(CHUNK);
            slots.push(s);
            self.chunks.push(Chunk::new(slots, key_of));
            return true;
        };
        ch.slots.insert(p.i, s);
        if p.i == 0 {
            ch.first = key_of(s).into();
        }
        if ch.slots.len() > CHUNK {
            let mut tail = Vec::with_capacity(CHUNK);
            tail.extend_from_slice(&ch.slots[CHUNK / 2..]);
            ch.slots.truncate(CHUNK / 2);
            self.chunks.insert(p.c + 1, Chunk::new(tail, key_of));
        }
        true
    }

    /// Removes slot `s`, whose object (still in the caller's slots) has `key`. False if it is
    /// not here. The chunk is found by its first key and the slot by its number: no object's
    /// key is read but the new first one's.
    pub(super) fn remove<'a>(
        &mut self,
        s: u32,
        key: &str,
        key_of: impl Fn(u32) -> &'a str,
    ) -> bool {
        let c = self
            .chunks
            .partition_point(|ch| &*ch.first <= key)
            .saturating_sub(1);
        let Some(i) = self
            .chunks
            .get(c)
            .and_then(|ch| ch.slots.iter().position(|&t| t == s))
        else {
            return false;
        };
        self.len -= 1;
        let ch = &mut self.chunks[c];
        ch.slots.remove(i);
        if ch.slots.is_empty() {
            self.chunks.remove(c);
            return true;
        }
        if i == 0 {
            ch.first = key_of(ch.slots[0]).into();
        }
        if let Some(next) = self.chunks.get(c + 1) {
            // Merge thin neighbours, so deletions do not leave many small chunks behind.
            if self.chunks[c].slots.len() + next.slots.len() <= CHUNK / 2 {
                let next = self.chunks.remove(c + 1);
                self.chunks[c].slots.extend_from_slice(&next.slots);
            }
        }
        true
    }

    /// The flat index of the first entry not before `bound` (a lower bound).
    fn lower<'a>(&self, bound: Bound<&str>, key_of: impl Fn(u32) -> &'a str) -> (usize, usize) {
        let (key, skip_equal) = match bound {
            Bound::Unbounded => return (0, 0),
            Bound::Included(k) => (k, false),
            Bound::Excluded(k) => (k, true),
        };
        self.after_position(self.position(key, key_of), skip_equal)
    }

    /// The flat index of the first entry after the range's end (an upper bound).
    fn upper<'a>(&self, bound: Bound<&str>, key_of: impl Fn(u32) -> &'a str) -> (usize, usize) {
        let (key, keep_equal) = match bound {
            Bound::Unbounded => return (self.chunks.len(), 0),
            Bound::Included(k) => (k, true),
            Bound::Excluded(k) => (k, false),
        };
        self.after_position(self.position(key, key_of), keep_equal)
    }

    /// `p` as (chunk, index), moved past the entry found there when `past_found`, and past the
    /// chunk's end onto the next chunk.
    fn after_position(&self, p: Pos, past_found: bool) -> (usize, usize) {
        let i = p.i + usize::from(p.found && past_found);
        match self.chunks.get(p.c) {
            Some(ch) if i >= ch.slots.len() => (p.c + 1, 0),
            Some(_) => (p.c, i),
            None => (self.chunks.len(), 0),
        }
    }

    /// The slots with keys within (`from`, `to`), in key order. The ends are found now; walking
    /// between them compares nothing.
    pub(super) fn range<'a, 'k>(
        &'a self,
        from: Bound<&str>,
        to: Bound<&str>,
        key_of: impl Fn(u32) -> &'k str,
    ) -> impl Iterator<Item = u32> + 'a {
        let start = self.lower(from, &key_of);
        let end = self.upper(to, &key_of);
        let end = end.max(start);
        self.chunks
            .iter()
            .enumerate()
            .skip(start.0)
            .take_while(move |(c, _)| *c < end.0 || (*c == end.0 && end.1 > 0))
            .flat_map(move |(c, ch)| {
                let lo = if c == start.0 { start.1 } else { 0 };
                let hi = if c == end.0 { end.1 } else { ch.slots.len() };
                ch.slots[lo..hi.max(lo)].iter().copied()
            })
    }

    /// Every slot, in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.chunks.iter().flat_map(|ch| ch.slots.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A model to check against: keys by slot, and the same set as a `BTreeMap`.
    struct Model {
        keys: Vec<String>,
    }

    impl Model {
        fn key_of<'a>(&'a self) -> impl Fn(u32) -> &'a str + 'a {
            |s| self.keys[s as usize].as_str()
        }
    }

    fn bound(b: u8, k: &str) -> Bound<&str> {
        match b % 3 {
            0 => Bound::Unbounded,
            1 => Bound::Included(k),
            _ => Bound::Excluded(k),
        }
    }

    #[test]
    fn agrees_with_a_btree_through_splits_merges_and_ranges() {
        // A deterministic walk of insertions and deletions over enough keys to split chunks
        // many times, checked against a BTreeMap after each phase, with ranges of every bound
        // kind at keys present and absent.
        let n = 5_000u32;
        let m = Model {
            keys: (0..n).map(|i| format!("k{:05}", (i * 7919) % n)).collect(),
        };
        let mut o = KeyOrder::default();
        let mut want: BTreeMap<&str, u32> = BTreeMap::new();
        let mut x = 12345u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..4 {
            for _ in 0..6_000 {
                let s = (rnd() % u64::from(n)) as u32;
                let k = m.keys[s as usize].as_str();
                // Rounds 0 and 1 mostly insert; 2 and 3 mostly delete.
                if rnd() % 4 < if round < 2 { 1 } else { 3 } {
                    let gone = want.remove(k).is_some();
                    assert_eq!(o.remove(s, k, m.key_of()), gone, "remove {k}");
                } else {
                    let fresh = !want.contains_key(k);
                    assert_eq!(o.insert(s, m.key_of()), fresh, "insert {k}");
                    want.insert(k, s);
                }
            }
            assert_eq!(o.len(), want.len());
            assert_eq!(
                o.iter().collect::<Vec<_>>(),
                want.values().copied().collect::<Vec<_>>()
            );
            assert!(o.chunks.iter().all(|c| !c.slots.is_empty()
                && c.slots.len() <= CHUNK
                && *c.first == *m.key_of()(c.slots[0])));
            for _ in 0..300 {
                let (a, b) = (rnd() % u64::from(n + 10), rnd() % u64::from(n + 10));
                let (ka, kb) = (format!("k{a:05}"), format!("k{b:05}"));
                let (fa, fb) = (bound(rnd() as u8, &ka), bound(rnd() as u8, &kb));
                let got: Vec<u32> = o.range(fa, fb, m.key_of()).collect();
                let lo_ok = |k: &str| match fa {
                    Bound::Unbounded => true,
                    Bound::Included(x) => k >= x,
                    Bound::Excluded(x) => k > x,
                };
                let hi_ok = |k: &str| match fb {
                    Bound::Unbounded => true,
                    Bound::Included(x) => k <= x,
                    Bound::Excluded(x) => k < x,
                };
                let exp: Vec<u32> = want
                    .iter()
                    .filter(|(k, _)| lo_ok(k) && hi_ok(k))
                    .map(|(_, s)| *s)
                    .collect();
                assert_eq!(got, exp, "range {fa:?} .. {fb:?}");
            }
        }
        for (k, s) in std::mem::take(&mut want) {
            assert!(o.remove(s, k, m.key_of()));
        }
        assert_eq!((o.len(), o.chunks.len()), (0, 0));
    }

    #[test]
    fn an_empty_order_has_no_ranges() {
        let m = Model { keys: vec![] };
        let o = KeyOrder::default();
        assert_eq!(
            o.range(Bound::Included("a"), Bound::Unbounded, m.key_of())
                .count(),
            0
        );
        assert_eq!(o.iter().count(), 0);
    }
}

//! The current state: objects in dense slots, ordered by key, with one roaring bitmap of slots per
//! (indexed attribute, value).
//!
//! ## Invariants
//! - `by_key` holds exactly the occupied slots, in their objects' key order (`key_order.rs`);
//!   free slots are `None` and listed in `free`. A slot keeps its key while occupied: an update
//!   puts the new state in the same slot and touches neither `by_key` nor `by_hash`.
//! - `by_hash` holds exactly the occupied slots, each at its object's key hash: the point lookups
//!   (get, update, delete) find a slot there; only creations and deletions search `by_key`.
//! - The indexes hold slot numbers, never objects: a slot is the only owner of an object's
//!   current state here, so a replaced state is kept alive by nothing in the store.
//! - For each index `i` and value `v`, `indexes[i][v]` holds exactly the slots whose object has
//!   attribute `schema.indexed[i]` equal to `v`. Empty bitmaps are removed.

use std::hash::BuildHasher;
use std::ops::Bound;

use hashbrown::hash_map::EntryRef;
use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use roaring::RoaringBitmap;

use crate::cache::key_order::KeyOrder;
use crate::cache::upstream::KeyRange;
use crate::model::Object;
use crate::model::Schema;
use crate::model::selector::Predicate;

#[derive(Default)]
pub(crate) struct Store {
    slots: Vec<Option<Object>>,
    free: Vec<u32>,
    /// The occupied slots in key order, for LIST and ranges.
    by_key: KeyOrder,
    /// Each occupied slot, by its object's key hash: a point lookup touches one object, where a
    /// search of `by_key` compares with an object's key per step (design/performance.md, "The
    /// store's key order").
    by_hash: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// `String` keys (not `Box<str>`): `entry_ref` finds or makes a value's bitmap from a `&str`
    /// in one hash and probe, which needs the key type to be `str`'s `ToOwned`.
    indexes: Vec<HashMap<String, RoaringBitmap>>,
    /// The sum of the objects' stored sizes (`Object::stored_len`), for metrics.
    bytes: usize,
}

/// Slot `s`'s key (every slot `by_key` and `by_hash` name is occupied).
fn key_in(slots: &[Option<Object>], s: u32) -> &str {
    slots[s as usize]
        .as_ref()
        .unwrap_or_else(|| unreachable!("slot {s} is indexed but empty"))
        .key()
}

impl Store {
    pub(super) fn new(schema: &Schema) -> Store {
        Store {
            indexes: vec![HashMap::new(); schema.indexed.len()],
            ..Store::default()
        }
    }

    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// The sum of the objects' stored sizes.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn get(&self, key: &str) -> Option<&Object> {
        self.find(key).map(|s| self.slot(s))
    }

    /// The slot of the object with `key`.
    fn find(&self, key: &str) -> Option<u32> {
        self.find_hashed(self.hasher.hash_one(key), key)
    }

    /// [`find`](Store::find) with the key's hash already made (an upsert that creates reuses it).
    fn find_hashed(&self, h: u64, key: &str) -> Option<u32> {
        let slots = &self.slots;
        self.by_hash.find(h, |&s| key_in(slots, s) == key).copied()
    }

    pub(super) fn slot(&self, s: u32) -> &Object {
        self.slots[s as usize]
            .as_ref()
            .unwrap_or_else(|| unreachable!("slot {s} is indexed but empty"))
    }

    /// Inserts or replaces an object; returns the previous state.
    pub(super) fn upsert(&mut self, schema: &Schema, obj: Object) -> Option<Object> {
        self.bytes += obj.stored_len();
        // Hashed once: a creation inserts at the hash its failed lookup made.
        let h = self.hasher.hash_one(obj.key());
        if let Some(s) = self.find_hashed(h, obj.key()) {
            let prev = self.slots[s as usize].replace(obj);
            let prev = prev.unwrap_or_else(|| unreachable!("slot {s} is keyed but empty"));
            self.bytes -= prev.stored_len();
            let cur = self.slots[s as usize]
                .as_ref()
                .unwrap_or_else(|| unreachable!());
            for (i, attr) in schema.indexed.iter().enumerate() {
                let (old, new) = (prev.attr_in(schema, *attr), cur.attr_in(schema, *attr));
                if old != new {
                    if let Some(v) = old {
                        remove_from(&mut self.indexes[i], v, s);
                    }
                    if let Some(v) = new {
                        bitmap_for(&mut self.indexes[i], v).insert(s);
                    }
                }
            }
            return Some(prev);
        }
        let s = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        for (i, attr) in schema.indexed.iter().enumerate() {
            if let Some(v) = obj.attr_in(schema, *attr) {
                bitmap_for(&mut self.indexes[i], v).insert(s);
            }
        }
        self.slots[s as usize] = Some(obj);
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_hash
            .insert_unique(h, s, |&t| hasher.hash_one(key_in(slots, t)));
        let fresh = self.by_key.insert(s, |t| key_in(slots, t));
        debug_assert!(fresh, "a key missing from by_hash is missing from by_key");
        None
    }

    /// Removes an object; returns its last state.
    pub(super) fn remove(&mut self, schema: &Schema, key: &str) -> Option<Object> {
        let slots = &self.slots;
        let Ok(entry) = self
            .by_hash
            .find_entry(self.hasher.hash_one(key), |&s| key_in(slots, s) == key)
        else {
            return None;
        };
        let s = entry.remove().0;
        let ordered = self.by_key.remove(s, key, |t| key_in(slots, t));
        debug_assert!(ordered, "by_key and by_hash hold the same slots");
        let prev = self.slots[s as usize]
            .take()
            .unwrap_or_else(|| unreachable!("slot {s} is indexed but empty"));
        self.bytes -= prev.stored_len();
        for (i, attr) in schema.indexed.iter().enumerate() {
            if let Some(v) = prev.attr_in(schema, *attr) {
                remove_from(&mut self.indexes[i], v, s);
            }
        }
        self.free.push(s);
        Some(prev)
    }

    /// Slots that can match the predicate, from its indexed equality terms; `None` when no index
    /// narrows it (every object is a candidate).
    pub(super) fn candidates(&self, schema: &Schema, pred: &Predicate) -> Option<RoaringBitmap> {
        let mut acc: Option<RoaringBitmap> = None;
        for (slot, values) in pred.index_terms(schema) {
            let mut term = RoaringBitmap::new();
            for v in values.values() {
                if let Some(bm) = self.indexes[slot].get(v) {
                    term |= bm;
                }
            }
            acc = Some(match acc {
                None => term,
                Some(a) => a & term,
            });
            if acc.as_ref().is_some_and(RoaringBitmap::is_empty) {
                break;
            }
        }
        acc
    }

    /// The objects with `value` in index `slot`, sorted by key.
    pub(super) fn lookup(&self, slot: usize, value: &str) -> Vec<Object> {
        let mut out: Vec<Object> = match self.indexes[slot].get(value) {
            Some(bm) => bm.iter().map(|s| self.slot(s).clone()).collect(),
            None => Vec::new(),
        };
        out.sort_unstable_by(|a, b| a.key().cmp(b.key()));
        out
    }

    /// Keys after `after` (exclusive), in order, with their slots.
    pub(super) fn range_after<'a>(
        &'a self,
        after: Option<&str>,
    ) -> impl Iterator<Item = (&'a str, u32)> + 'a {
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let slots = &self.slots;
        self.by_key
            .range(lower, Bound::Unbounded, |t| key_in(slots, t))
            .map(|s| (key_in(slots, s), s))
    }

    /// Every object, in key order.
    /// The keys in `range`, in key order.
    pub(super) fn keys_in<'a>(&'a self, range: &'a KeyRange) -> impl Iterator<Item = &'a str> + 'a {
        let from = range
            .from
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Included);
        let end = range
            .end
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Excluded);
        let slots = &self.slots;
        self.by_key
            .range(from, end, |t| key_in(slots, t))
            .map(|s| key_in(slots, s))
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Object> {
        self.by_key.iter().map(|s| self.slot(s))
    }

    /// Distinct values and sizes of one index, for tests and introspection.
    #[cfg(test)]
    pub(super) fn index_sizes(&self, slot: usize) -> std::collections::BTreeMap<String, u64> {
        self.indexes[slot]
            .iter()
            .map(|(k, v)| (k.to_string(), v.len()))
            .collect()
    }
}

/// The bitmap for `value`, created empty when missing (one hash and probe either way).
pub(crate) fn bitmap_for<'m>(
    map: &'m mut HashMap<String, RoaringBitmap>,
    value: &str,
) -> &'m mut RoaringBitmap {
    map.entry_ref(value).or_default()
}

/// Takes `slot` out of `value`'s bitmap, and the bitmap out of the index once empty (one hash and
/// probe).
pub(crate) fn remove_from(index: &mut HashMap<String, RoaringBitmap>, value: &str, slot: u32) {
    if let EntryRef::Occupied(mut e) = index.entry_ref(value) {
        e.get_mut().remove(slot);
        if e.get().is_empty() {
            e.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::definition::ResourceDef;
    use crate::model::selector::Selection;

    fn pod(s: &Schema, name: &str, node: &str, app: &str, rv: u64) -> Object {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","labels":{{"app":"{app}"}}}},"spec":{{"nodeName":"{node}"}}}}"#
        );
        Object::decode(s, &format!("/registry/pods/ns/{name}"), json.as_bytes(), rv).unwrap()
    }

    #[test]
    fn indexes_follow_updates_and_deletes() {
        let s = Schema::new(ResourceDef::builtin("pods").unwrap());
        let mut st = Store::new(&s);
        assert!(st.upsert(&s, pod(&s, "a", "n1", "web", 1)).is_none());
        st.upsert(&s, pod(&s, "b", "n1", "db", 2));
        let node_slot = s.index_by_name("spec.nodeName").unwrap().0;
        assert_eq!(st.index_sizes(node_slot).get("n1"), Some(&2));
        let prev = st.upsert(&s, pod(&s, "a", "n2", "web", 3)).unwrap();
        assert_eq!(prev.resource_version(), 1);
        assert_eq!(st.index_sizes(node_slot).get("n1"), Some(&1));
        assert_eq!(st.lookup(node_slot, "n2")[0].name(), "a");
        let p = Predicate::compile(
            &s,
            &Selection::parse(None, "spec.nodeName=n1", "app=db").unwrap(),
        );
        assert_eq!(st.candidates(&s, &p).unwrap().len(), 1);
        st.remove(&s, "/registry/pods/ns/b").unwrap();
        assert_eq!(
            st.index_sizes(node_slot).get("n1"),
            None,
            "empty bitmaps are dropped"
        );
        assert!(st.candidates(&s, &p).unwrap().is_empty());
        st.upsert(&s, pod(&s, "c", "n1", "db", 4));
        // The replaced state is held by nothing but `prev`.
        let prev = st.upsert(&s, pod(&s, "c", "n1", "db", 5)).unwrap();
        assert_eq!(prev.refs(), 1);
        assert_eq!(
            st.get("/registry/pods/ns/c").unwrap().refs(),
            1,
            "the slot alone: the indexes hold slot numbers"
        );
        assert_eq!(st.get("/registry/pods/ns/c").unwrap().resource_version(), 5);
        assert_eq!(st.len(), 2);
        assert_eq!(st.iter().map(|o| o.name()).collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn point_lookups_and_order_follow_growth_reuse_and_deletes() {
        // Enough keys for the hash table to grow several times and the key order to split,
        // deletions that free slots for reuse by other keys, and every key checked both ways.
        let s = Schema::new(ResourceDef::builtin("pods").unwrap());
        let mut st = Store::new(&s);
        let key = |i: usize| format!("/registry/pods/ns/p{i:04}");
        let check = |st: &Store, live: &dyn Fn(usize) -> bool| {
            for i in 0..2000 {
                let got = st.get(&key(i)).map(|o| o.name().to_string());
                assert_eq!(got, live(i).then(|| format!("p{i:04}")), "key {i}");
            }
            let want: Vec<String> = (0..2000).filter(|&i| live(i)).map(key).collect();
            let got: Vec<String> = st.iter().map(|o| o.key().to_string()).collect();
            assert_eq!((st.len(), &got), (want.len(), &want));
            let after = st
                .range_after(Some(&key(999)))
                .map(|(k, _)| k.to_string())
                .collect::<Vec<_>>();
            assert_eq!(
                after,
                want.iter()
                    .filter(|k| **k > key(999))
                    .cloned()
                    .collect::<Vec<_>>()
            );
        };
        for i in (0..1500).rev() {
            st.upsert(&s, pod(&s, &format!("p{i:04}"), "n1", "web", i as u64 + 1));
        }
        check(&st, &|i| i < 1500);
        for i in (0..1500).step_by(3) {
            assert!(st.remove(&s, &key(i)).is_some());
            assert!(st.remove(&s, &key(i)).is_none(), "removed once");
        }
        check(&st, &|i| i < 1500 && i % 3 != 0);
        // New keys take the freed slots.
        for i in 1500..2000 {
            st.upsert(&s, pod(&s, &format!("p{i:04}"), "n2", "db", i as u64 + 1));
        }
        assert_eq!(st.slots.len(), 1500, "freed slots were reused");
        check(&st, &|i| i % 3 != 0 || i >= 1500);
        let prev = st.upsert(&s, pod(&s, "p0001", "n3", "db", 9000)).unwrap();
        assert_eq!(prev.resource_version(), 2);
        assert_eq!(st.get(&key(1)).unwrap().resource_version(), 9000);
        check(&st, &|i| i % 3 != 0 || i >= 1500);
    }
}

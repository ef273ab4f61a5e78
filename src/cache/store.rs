//! The current state: objects in dense slots, ordered by key, with one roaring bitmap of slots per
//! (indexed attribute, value).
//!
//! ## Invariants
//! - `by_key[k] == s` iff `slots[s]` holds the object with key `k`; free slots are `None` and listed in
//!   `free`.
//! - `by_key`'s entry for a key is the object in its slot (an update replaces both), so the map
//!   keeps no earlier state alive.
//! - For each index `i` and value `v`, `indexes[i][v]` holds exactly the slots whose object has
//!   attribute `schema.indexed[i]` equal to `v`. Empty bitmaps are removed.

use std::collections::BTreeSet;
use std::ops::Bound;

use hashbrown::HashMap;
use roaring::RoaringBitmap;

use crate::cache::upstream::KeyRange;
use crate::model::Schema;
use crate::model::selector::Predicate;
use crate::model::{Object, ObjectKey};

#[derive(Default)]
pub(crate) struct Store {
    slots: Vec<Option<Object>>,
    free: Vec<u32>,
    /// Each object's slot, ordered by key. Keyed by the objects themselves: no second copy of
    /// each key. A set, so that an update can put the new state in place of the old
    /// ([`BTreeSet::replace`]): a key holding the old state would keep it alive.
    by_key: BTreeSet<Keyed>,
    indexes: Vec<HashMap<Box<str>, RoaringBitmap>>,
    /// The sum of the objects' stored sizes (`Object::stored_len`), for metrics.
    bytes: usize,
}

/// An entry of [`Store::by_key`]: an object's key (the object) and its slot.
struct Keyed {
    key: ObjectKey,
    slot: u32,
}

impl std::borrow::Borrow<str> for Keyed {
    fn borrow(&self) -> &str {
        &self.key
    }
}

impl PartialEq for Keyed {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Keyed {}

impl PartialOrd for Keyed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Keyed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl Store {
    pub fn new(schema: &Schema) -> Store {
        Store {
            indexes: vec![HashMap::new(); schema.indexed.len()],
            ..Store::default()
        }
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// The sum of the objects' stored sizes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn get(&self, key: &str) -> Option<&Object> {
        self.by_key.get(key).map(|e| self.slot(e.slot))
    }

    pub fn slot(&self, s: u32) -> &Object {
        self.slots[s as usize]
            .as_ref()
            .unwrap_or_else(|| unreachable!("slot {s} is indexed but empty"))
    }

    /// Inserts or replaces an object; returns the previous state.
    pub fn upsert(&mut self, schema: &Schema, obj: Object) -> Option<Object> {
        self.bytes += obj.stored_len();
        if let Some(s) = self.by_key.get(obj.key()).map(|e| e.slot) {
            self.by_key.replace(Keyed {
                key: obj.key_owned(),
                slot: s,
            });
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
        self.by_key.insert(Keyed {
            key: obj.key_owned(),
            slot: s,
        });
        self.slots[s as usize] = Some(obj);
        None
    }

    /// Removes an object; returns its last state.
    pub fn remove(&mut self, schema: &Schema, key: &str) -> Option<Object> {
        let s = self.by_key.take(key)?.slot;
        let prev = self.slots[s as usize].take()?;
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
    pub fn candidates(&self, pred: &Predicate) -> Option<RoaringBitmap> {
        let mut acc: Option<RoaringBitmap> = None;
        for (slot, values) in pred.index_terms() {
            let mut term = RoaringBitmap::new();
            for v in values {
                if let Some(bm) = self.indexes[slot].get(v.as_str()) {
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
    pub fn lookup(&self, slot: usize, value: &str) -> Vec<Object> {
        let mut out: Vec<Object> = match self.indexes[slot].get(value) {
            Some(bm) => bm.iter().map(|s| self.slot(s).clone()).collect(),
            None => Vec::new(),
        };
        out.sort_unstable_by(|a, b| a.key().cmp(b.key()));
        out
    }

    /// Keys after `after` (exclusive), in order, with their slots.
    pub fn range_after<'a>(
        &'a self,
        after: Option<&str>,
    ) -> impl Iterator<Item = (&'a ObjectKey, u32)> + 'a {
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        self.by_key
            .range::<str, _>((lower, Bound::Unbounded))
            .map(|e| (&e.key, e.slot))
    }

    /// Every object, in key order.
    /// The keys in `range`, in key order.
    pub fn keys_in<'a>(&'a self, range: &'a KeyRange) -> impl Iterator<Item = &'a str> + 'a {
        let from = range
            .from
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Included);
        let end = range
            .end
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Excluded);
        self.by_key.range::<str, _>((from, end)).map(|e| &*e.key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Object> {
        self.by_key.iter().map(|e| self.slot(e.slot))
    }

    /// Distinct values and sizes of one index, for tests and introspection.
    #[cfg(test)]
    pub fn index_sizes(&self, slot: usize) -> std::collections::BTreeMap<String, u64> {
        self.indexes[slot]
            .iter()
            .map(|(k, v)| (k.to_string(), v.len()))
            .collect()
    }
}

/// The bitmap for `value`, created empty when missing. (Looks up twice on a miss so that the common
/// hit allocates no owned key.)
pub(crate) fn bitmap_for<'m>(
    map: &'m mut HashMap<Box<str>, RoaringBitmap>,
    value: &str,
) -> &'m mut RoaringBitmap {
    if !map.contains_key(value) {
        map.insert(value.into(), RoaringBitmap::new());
    }
    map.get_mut(value)
        .unwrap_or_else(|| unreachable!("inserted above"))
}

pub(crate) fn remove_from(index: &mut HashMap<Box<str>, RoaringBitmap>, value: &str, slot: u32) {
    if let Some(bm) = index.get_mut(value) {
        bm.remove(slot);
        if bm.is_empty() {
            index.remove(value);
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
        assert_eq!(st.candidates(&p).unwrap().len(), 1);
        st.remove(&s, "/registry/pods/ns/b").unwrap();
        assert_eq!(
            st.index_sizes(node_slot).get("n1"),
            None,
            "empty bitmaps are dropped"
        );
        assert!(st.candidates(&p).unwrap().is_empty());
        st.upsert(&s, pod(&s, "c", "n1", "db", 4));
        // The map's entry follows the update: the replaced state is held by nothing but `prev`.
        let prev = st.upsert(&s, pod(&s, "c", "n1", "db", 5)).unwrap();
        assert_eq!(prev.refs(), 1);
        assert_eq!(
            st.get("/registry/pods/ns/c").unwrap().refs(),
            2,
            "slot and map"
        );
        assert_eq!(st.get("/registry/pods/ns/c").unwrap().resource_version(), 5);
        assert_eq!(st.len(), 2);
        assert_eq!(st.iter().map(|o| o.name()).collect::<Vec<_>>(), ["a", "c"]);
    }
}

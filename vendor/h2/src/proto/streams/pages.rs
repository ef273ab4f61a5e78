//! watchcache: the stream store's slots, in pages that never move.
//!
//! Upstream keeps a connection's streams in one `slab::Slab`, a `Vec` that is reallocated (and
//! copied) as the connection's streams grow. Each reallocation frees the old block, of a size no
//! other allocation asks for: with thousands of connections opening their watches together
//! (kubelets after a restart), the freed blocks stay resident as holes in the allocator's pages,
//! about 0.3 KB for every further watch stream. Here slots come in pages of [`PAGE`] that are
//! allocated once and never moved; a free list threads the vacant slots; every page is freed
//! when the last stream goes.
//!
//! The same operations as the slab's that `store.rs` uses: `insert` gives a key, `get`,
//! `get_mut` and `remove` take it, and `remove` of a vacant key panics as the slab's does.

/// Slots per page: six of ≤ 170 bytes (a stream's slot is 168), one allocation of at most 1 KiB
/// (a whole size class of mimalloc's and glibc's; five of the 200-byte slots before, four of
/// the 256-byte ones before that).
pub(super) const PAGE: usize = 6;

/// No next vacant slot.
const NONE: u32 = u32::MAX;

#[derive(Debug)]
enum Entry<T> {
    /// Free, with the next free slot (`NONE` at the end of the list).
    Vacant(u32),
    Occupied(T),
}

/// Slots in fixed pages, keyed by `usize` like a slab.
#[derive(Debug)]
pub(super) struct Pages<T> {
    pages: Vec<Box<[Entry<T>]>>,
    /// The first free slot (`NONE`: every slot is occupied).
    free: u32,
    len: usize,
}

impl<T> Pages<T> {
    pub fn new() -> Self {
        Pages {
            pages: Vec::new(),
            free: NONE,
            len: 0,
        }
    }

    // Read by the `unstable` feature's checks and the tests.
    #[cfg_attr(not(any(test, feature = "unstable")), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg_attr(not(any(test, feature = "unstable")), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots allocated, occupied or not.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.pages.len() * PAGE
    }

    fn entry(&self, key: usize) -> Option<&Entry<T>> {
        self.pages.get(key / PAGE).map(|p| &p[key % PAGE])
    }

    fn entry_mut(&mut self, key: usize) -> Option<&mut Entry<T>> {
        self.pages.get_mut(key / PAGE).map(|p| &mut p[key % PAGE])
    }

    pub fn get(&self, key: usize) -> Option<&T> {
        match self.entry(key) {
            Some(Entry::Occupied(v)) => Some(v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: usize) -> Option<&mut T> {
        match self.entry_mut(key) {
            Some(Entry::Occupied(v)) => Some(v),
            _ => None,
        }
    }

    /// Stores `val` in a free slot (a new page when there is none) and returns its key.
    pub fn insert(&mut self, val: T) -> usize {
        if self.free == NONE {
            let base = self.pages.len() * PAGE;
            // Keys are `u32` in the store's keys; a connection never holds 2^32 streams (its
            // stream ids are 31 bits).
            assert!(base + PAGE < NONE as usize, "stream store full");
            let page: Box<[Entry<T>]> = (0..PAGE)
                .map(|i| {
                    Entry::Vacant(if i + 1 < PAGE {
                        (base + i + 1) as u32
                    } else {
                        NONE
                    })
                })
                .collect();
            self.pages.push(page);
            self.free = base as u32;
        }
        let key = self.free as usize;
        let slot = self.entry_mut(key).expect("a free slot is in a page");
        match std::mem::replace(slot, Entry::Occupied(val)) {
            Entry::Vacant(next) => self.free = next,
            Entry::Occupied(_) => unreachable!("the free list holds an occupied slot"),
        }
        self.len += 1;
        key
    }

    /// Takes the value out of its slot. Panics if the key is vacant, as the slab does.
    pub fn remove(&mut self, key: usize) -> T {
        let free = self.free;
        let slot = match self.entry_mut(key) {
            Some(slot @ Entry::Occupied(_)) => slot,
            _ => panic!("invalid key"),
        };
        let Entry::Occupied(val) = std::mem::replace(slot, Entry::Vacant(free)) else {
            unreachable!()
        };
        self.free = key as u32;
        self.len -= 1;
        if self.len == 0 {
            // The connection's last stream: give every page back.
            self.pages = Vec::new();
            self.free = NONE;
        }
        val
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_slots_are_reused() {
        let mut p = Pages::new();
        let keys: Vec<usize> = (0..10).map(|i| p.insert(i)).collect();
        assert_eq!(p.len(), 10);
        assert_eq!(p.capacity(), 10_usize.next_multiple_of(PAGE));
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(p.get(*k), Some(&i));
        }
        assert_eq!(p.remove(keys[3]), 3);
        assert_eq!(p.get(keys[3]), None);
        *p.get_mut(keys[4]).unwrap() += 100;
        // The freed slot is the next one used: no new page.
        let k = p.insert(42);
        assert_eq!(k, keys[3]);
        assert_eq!(p.capacity(), 10_usize.next_multiple_of(PAGE));
        assert_eq!(p.get(keys[4]), Some(&104));
        for k in keys {
            p.remove(k);
        }
        // Every page is given back with the last stream.
        assert!(p.is_empty());
        assert_eq!(p.capacity(), 0);
        assert_eq!(p.get(0), None);
        assert_eq!(p.insert(7), 0);
    }

    #[test]
    #[should_panic(expected = "invalid key")]
    fn removing_a_vacant_key_panics_as_the_slab_does() {
        let mut p = Pages::new();
        let k = p.insert(1);
        p.insert(2);
        p.remove(k);
        p.remove(k);
    }
}

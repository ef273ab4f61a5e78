use super::pages::Pages;
use super::*;

use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;
use std::ops;

/// Storage for streams
#[derive(Debug)]
pub(super) struct Store {
    /// watchcache: pages that never move instead of `slab::Slab` (see `pages.rs`).
    slab: Pages<Stream>,
    /// watchcache: the open streams' ids, sorted, with their slots: 8 bytes a stream (an
    /// `IndexMap` took 16 in its entries, 8 in its table and its growth's slack, ~38 in all). A
    /// peer opens streams with increasing ids, so an insert is a push; a lookup is a binary
    /// search over one connection's streams. Removal shifts the later entries down, which keeps
    /// them in order: `try_for_each` relies on only the visited entry leaving.
    ids: Ids,
}

/// watchcache: the open streams' ids in order (see `Store::ids`).
#[derive(Debug, Default)]
struct Ids(Vec<(StreamId, SlabIndex)>);

impl Ids {
    fn position(&self, id: &StreamId) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.cmp(id))
    }

    fn get(&self, id: &StreamId) -> Option<&SlabIndex> {
        self.position(id).ok().map(|i| &self.0[i].1)
    }

    fn contains_key(&self, id: &StreamId) -> bool {
        self.position(id).is_ok()
    }

    /// Inserts `id` (which must be absent) at `at`, its place in the order.
    fn insert_at(&mut self, at: usize, id: StreamId, index: SlabIndex) {
        self.0.insert(at, (id, index));
    }

    fn remove(&mut self, id: &StreamId) {
        if let Ok(i) = self.position(id) {
            self.0.remove(i);
            // An emptied connection (or a burst over) gives its room back.
            if self.0.capacity() > 2 * self.0.len() + 8 {
                self.0.shrink_to(self.0.len() + self.0.len() / 4);
            }
        }
    }

    fn get_index(&self, i: usize) -> Option<(&StreamId, &SlabIndex)> {
        self.0.get(i).map(|(k, v)| (k, v))
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// "Pointer" to an entry in the store
pub(super) struct Ptr<'a> {
    key: Key,
    store: &'a mut Store,
}

/// References an entry in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    index: SlabIndex,
    /// Keep the stream ID in the key as an ABA guard, since slab indices
    /// could be re-used with a new stream.
    stream_id: StreamId,
}

// We can never have more than `StreamId::MAX` streams in the store,
// so we can save a smaller index (u32 vs usize).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlabIndex(std::num::NonZeroU32);

// watchcache: the slot's index plus one, so that `Option<Key>` (five in every stream's slot) is
// 8 bytes, not 12.
impl SlabIndex {
    fn new(index: usize) -> SlabIndex {
        let plus_one = u32::try_from(index)
            .ok()
            .and_then(|i| i.checked_add(1))
            .and_then(std::num::NonZeroU32::new)
            .expect("fewer than u32::MAX streams");
        SlabIndex(plus_one)
    }

    fn get(self) -> usize {
        self.0.get() as usize - 1
    }
}

pub(super) struct Queue<N> {
    indices: Option<store::Indices>,
    _p: PhantomData<N>,
}

pub(super) trait Next {
    fn next(stream: &Stream) -> Option<Key>;

    fn set_next(stream: &mut Stream, key: Option<Key>);

    fn take_next(stream: &mut Stream) -> Option<Key>;

    fn is_queued(stream: &Stream) -> bool;

    fn set_queued(stream: &mut Stream, val: bool);
}

/// A linked list
#[derive(Debug, Clone, Copy)]
struct Indices {
    pub head: Key,
    pub tail: Key,
}

pub(super) enum Entry<'a> {
    Occupied(OccupiedEntry<'a>),
    Vacant(VacantEntry<'a>),
}

pub(super) struct OccupiedEntry<'a> {
    key: Key,
    _store: PhantomData<&'a mut Store>,
}

pub(super) struct VacantEntry<'a> {
    ids: &'a mut Ids,
    /// Where the id goes in `ids`.
    at: usize,
    slab: &'a mut Pages<Stream>,
}

pub(super) trait Resolve {
    fn resolve(&mut self, key: Key) -> Ptr<'_>;
}

// ===== impl Store =====

impl Store {
    pub fn new() -> Self {
        Store {
            slab: Pages::new(),
            ids: Ids::default(),
        }
    }

    pub fn find_mut(&mut self, id: &StreamId) -> Option<Ptr<'_>> {
        let index = {
            let key = self.ids.get(id)?;
            *key
        };

        Some(Ptr {
            key: Key {
                index,
                stream_id: *id,
            },
            store: self,
        })
    }

    pub fn insert(&mut self, id: StreamId, val: Stream) -> Ptr<'_> {
        let at = self
            .ids
            .position(&id)
            .expect_err("a stream id is inserted once");
        let index = SlabIndex::new(self.slab.insert(val));
        self.ids.insert_at(at, id, index);

        Ptr {
            key: Key {
                index,
                stream_id: id,
            },
            store: self,
        }
    }

    pub fn find_entry(&mut self, id: StreamId) -> Entry<'_> {
        match self.ids.position(&id) {
            Ok(i) => Entry::Occupied(OccupiedEntry {
                key: Key {
                    index: self.ids.0[i].1,
                    stream_id: id,
                },
                _store: PhantomData,
            }),
            Err(at) => Entry::Vacant(VacantEntry {
                ids: &mut self.ids,
                at,
                slab: &mut self.slab,
            }),
        }
    }

    #[allow(clippy::blocks_in_conditions)]
    pub(crate) fn for_each<F>(&mut self, mut f: F)
    where
        F: FnMut(Ptr),
    {
        match self.try_for_each(|ptr| {
            f(ptr);
            Ok::<_, Infallible>(())
        }) {
            Ok(()) => (),
            #[allow(unused)]
            Err(infallible) => match infallible {},
        }
    }

    pub fn try_for_each<F, E>(&mut self, mut f: F) -> Result<(), E>
    where
        F: FnMut(Ptr) -> Result<(), E>,
    {
        let mut len = self.ids.len();
        let mut i = 0;

        while i < len {
            // Get the key by index, this makes the borrow checker happy
            let (stream_id, index) = {
                let entry = self.ids.get_index(i).unwrap();
                (*entry.0, *entry.1)
            };

            f(Ptr {
                key: Key { index, stream_id },
                store: self,
            })?;

            // TODO: This logic probably could be better...
            let new_len = self.ids.len();

            if new_len < len {
                debug_assert!(new_len == len - 1);
                len -= 1;
            } else {
                i += 1;
            }
        }

        Ok(())
    }
}

impl Resolve for Store {
    fn resolve(&mut self, key: Key) -> Ptr<'_> {
        Ptr { key, store: self }
    }
}

impl ops::Index<Key> for Store {
    type Output = Stream;

    fn index(&self, key: Key) -> &Self::Output {
        self.slab
            .get(key.index.get())
            .filter(|s| s.id == key.stream_id)
            .unwrap_or_else(|| {
                panic!("dangling store key for stream_id={:?}", key.stream_id);
            })
    }
}

impl ops::IndexMut<Key> for Store {
    fn index_mut(&mut self, key: Key) -> &mut Self::Output {
        self.slab
            .get_mut(key.index.get())
            .filter(|s| s.id == key.stream_id)
            .unwrap_or_else(|| {
                panic!("dangling store key for stream_id={:?}", key.stream_id);
            })
    }
}

impl Store {
    #[cfg(feature = "unstable")]
    pub fn num_active_streams(&self) -> usize {
        self.ids.len()
    }

    #[cfg(feature = "unstable")]
    pub fn num_wired_streams(&self) -> usize {
        self.slab.len()
    }
}

// While running h2 unit/integration tests, enable this debug assertion.
//
// In practice, we don't need to ensure this. But the integration tests
// help to make sure we've cleaned up in cases where we could (like, the
// runtime isn't suddenly dropping the task for unknown reasons).
#[cfg(feature = "unstable")]
impl Drop for Store {
    fn drop(&mut self) {
        use std::thread;

        if !thread::panicking() {
            debug_assert!(self.slab.is_empty());
        }
    }
}

// ===== impl Queue =====

impl<N> Queue<N>
where
    N: Next,
{
    pub fn new() -> Self {
        Queue {
            indices: None,
            _p: PhantomData,
        }
    }

    pub fn take(&mut self) -> Self {
        Queue {
            indices: self.indices.take(),
            _p: PhantomData,
        }
    }

    /// Queue the stream.
    ///
    /// If the stream is already contained by the list, return `false`.
    pub fn push(&mut self, stream: &mut store::Ptr) -> bool {
        tracing::trace!("Queue::push_back");

        if N::is_queued(stream) {
            tracing::trace!(" -> already queued");
            return false;
        }

        N::set_queued(stream, true);

        // The next pointer shouldn't be set
        debug_assert!(N::next(stream).is_none());

        // Queue the stream
        match self.indices {
            Some(ref mut idxs) => {
                tracing::trace!(" -> existing entries");

                // Update the current tail node to point to `stream`
                let key = stream.key();
                N::set_next(&mut stream.resolve(idxs.tail), Some(key));

                // Update the tail pointer
                idxs.tail = stream.key();
            }
            None => {
                tracing::trace!(" -> first entry");
                self.indices = Some(store::Indices {
                    head: stream.key(),
                    tail: stream.key(),
                });
            }
        }

        true
    }

    /// Queue the stream
    ///
    /// If the stream is already contained by the list, return `false`.
    pub fn push_front(&mut self, stream: &mut store::Ptr) -> bool {
        tracing::trace!("Queue::push_front");

        if N::is_queued(stream) {
            tracing::trace!(" -> already queued");
            return false;
        }

        N::set_queued(stream, true);

        // The next pointer shouldn't be set
        debug_assert!(N::next(stream).is_none());

        // Queue the stream
        match self.indices {
            Some(ref mut idxs) => {
                tracing::trace!(" -> existing entries");

                // Update the provided stream to point to the head node
                let head_key = stream.resolve(idxs.head).key();
                N::set_next(stream, Some(head_key));

                // Update the head pointer
                idxs.head = stream.key();
            }
            None => {
                tracing::trace!(" -> first entry");
                self.indices = Some(store::Indices {
                    head: stream.key(),
                    tail: stream.key(),
                });
            }
        }

        true
    }

    pub fn pop<'a, R>(&mut self, store: &'a mut R) -> Option<store::Ptr<'a>>
    where
        R: Resolve,
    {
        if let Some(mut idxs) = self.indices {
            let mut stream = store.resolve(idxs.head);

            if idxs.head == idxs.tail {
                assert!(N::next(&stream).is_none());
                self.indices = None;
            } else {
                idxs.head = N::take_next(&mut stream).unwrap();
                self.indices = Some(idxs);
            }

            debug_assert!(N::is_queued(&stream));
            N::set_queued(&mut stream, false);

            return Some(stream);
        }

        None
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_none()
    }

    pub fn pop_if<'a, R, F>(&mut self, store: &'a mut R, f: F) -> Option<store::Ptr<'a>>
    where
        R: Resolve,
        F: Fn(&Stream) -> bool,
    {
        if let Some(idxs) = self.indices {
            let should_pop = f(&store.resolve(idxs.head));
            if should_pop {
                return self.pop(store);
            }
        }

        None
    }
}

impl<N> fmt::Debug for Queue<N> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("Queue")
            .field("indices", &self.indices)
            // skip phantom data
            .finish()
    }
}

// ===== impl Ptr =====

impl<'a> Ptr<'a> {
    /// Returns the Key associated with the stream
    pub fn key(&self) -> Key {
        self.key
    }

    pub fn store_mut(&mut self) -> &mut Store {
        self.store
    }

    /// Remove the stream from the store
    pub fn remove(self) -> StreamId {
        // The stream must have been unlinked before this point
        debug_assert!(!self.store.ids.contains_key(&self.key.stream_id));

        // Remove the stream state
        let stream = self.store.slab.remove(self.key.index.get());
        assert_eq!(stream.id, self.key.stream_id);
        stream.id
    }

    /// Remove the StreamId -> stream state association.
    ///
    /// This will effectively remove the stream as far as the H2 protocol is
    /// concerned.
    pub fn unlink(&mut self) {
        let id = self.key.stream_id;
        self.store.ids.remove(&id);
    }
}

impl<'a> Resolve for Ptr<'a> {
    fn resolve(&mut self, key: Key) -> Ptr<'_> {
        Ptr {
            key,
            store: &mut *self.store,
        }
    }
}

impl<'a> ops::Deref for Ptr<'a> {
    type Target = Stream;

    fn deref(&self) -> &Stream {
        &self.store[self.key]
    }
}

impl<'a> ops::DerefMut for Ptr<'a> {
    fn deref_mut(&mut self) -> &mut Stream {
        &mut self.store[self.key]
    }
}

impl<'a> fmt::Debug for Ptr<'a> {
    fn fmt(&self, fmt: &mut fmt::Formatter) -> fmt::Result {
        (**self).fmt(fmt)
    }
}

// ===== impl OccupiedEntry =====

impl<'a> OccupiedEntry<'a> {
    pub fn key(&self) -> Key {
        self.key
    }
}

// ===== impl VacantEntry =====

impl<'a> VacantEntry<'a> {
    pub fn insert(self, value: Stream) -> Key {
        // Insert the value in the slab
        let stream_id = value.id;
        let index = SlabIndex::new(self.slab.insert(value));

        // Insert the handle in the ID map
        self.ids.insert_at(self.at, stream_id, index);

        Key { index, stream_id }
    }
}

/// watchcache: the store's pages leave few slots empty and are freed with the last stream.
#[cfg(test)]
mod watchcache_tests {
    use super::*;

    #[test]
    fn the_store_leaves_few_slots_empty() {
        let mut store = Store::new();
        for n in 0..200u32 {
            let id = StreamId::from(2 * n + 1);
            store.insert(id, Stream::new(id, 65_535, 65_535));
            let (len, cap) = (store.slab.len(), store.slab.capacity());
            assert!(
                cap < len + super::super::pages::PAGE,
                "{len} streams, {cap} slots"
            );
        }
        // Every stream is found, and removed (the `unstable` feature asserts an empty store on
        // drop).
        for n in 0..200u32 {
            let id = StreamId::from(2 * n + 1);
            let mut ptr = store.find_mut(&id).expect("stored");
            ptr.unlink();
            assert_eq!(ptr.remove(), id);
        }
        assert_eq!(store.slab.capacity(), 0);
    }

    /// The ids stay sorted whatever leaves, `try_for_each` visits each stream once while the
    /// visited one leaves, and the room goes back when the streams do.
    #[test]
    fn the_ids_stay_in_order_and_each_is_visited_once() {
        let mut store = Store::new();
        for n in 0..100u32 {
            let id = StreamId::from(2 * n + 1);
            match store.find_entry(id) {
                Entry::Vacant(v) => {
                    v.insert(Stream::new(id, 65_535, 65_535));
                }
                Entry::Occupied(_) => panic!("{id:?} is new"),
            }
        }
        assert!(
            matches!(store.find_entry(StreamId::from(7)), Entry::Occupied(e) if e.key().stream_id == StreamId::from(7))
        );
        // Every third stream leaves as it is visited.
        let mut seen = Vec::new();
        let mut gone = Vec::new();
        store.for_each(|mut ptr| {
            let id = ptr.id;
            seen.push(u32::from(id));
            if u32::from(id) % 3 == 0 {
                ptr.unlink();
                gone.push(ptr.remove());
            }
        });
        assert_eq!(seen, (0..100u32).map(|n| 2 * n + 1).collect::<Vec<_>>());
        assert!(store.ids.0.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(store.ids.len(), 100 - gone.len());
        for id in &gone {
            assert!(store.find_mut(id).is_none());
        }
        // A stream id below the highest goes in its place (a server's pushed streams are even).
        store.insert(
            StreamId::from(4),
            Stream::new(StreamId::from(4), 65_535, 65_535),
        );
        assert!(store.ids.0.windows(2).all(|w| w[0].0 < w[1].0));
        let ids: Vec<StreamId> = store.ids.0.iter().map(|(k, _)| *k).collect();
        for id in ids {
            let mut ptr = store.find_mut(&id).expect("stored");
            ptr.unlink();
            ptr.remove();
        }
        assert_eq!(store.ids.len(), 0);
        assert!(store.ids.0.capacity() <= 8, "{}", store.ids.0.capacity());
    }
}

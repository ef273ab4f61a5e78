use slab::Slab;

/// Buffers frames for multiple streams.
#[derive(Debug)]
pub struct Buffer<T> {
    slab: Slab<Slot<T>>,
}

/// A sequence of frames in a `Buffer`
#[derive(Debug)]
pub struct Deque {
    indices: Option<Indices>,
}

/// Tracks the head & tail for a sequence of frames in a `Buffer`.
///
/// watchcache: `u32` slab keys, not `usize`, the head's plus one (a niche for the `Option`).
/// Every stream holds two `Deque`s in its slot of the stream store (24 -> 8 bytes each); a
/// connection's buffer never holds 2^32 - 1 frames (the slab's memory would run out long
/// before).
#[derive(Debug, Copy, Clone)]
struct Indices {
    head_plus_one: std::num::NonZeroU32,
    tail: u32,
}

impl Indices {
    fn one(key: u32) -> Indices {
        Indices {
            head_plus_one: plus_one(key),
            tail: key,
        }
    }

    fn head(&self) -> u32 {
        self.head_plus_one.get() - 1
    }

    fn set_head(&mut self, key: u32) {
        self.head_plus_one = plus_one(key);
    }
}

fn plus_one(key: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(key.wrapping_add(1)).expect("frame buffer full")
}

#[derive(Debug)]
struct Slot<T> {
    value: T,
    next: Option<u32>,
}

/// watchcache: a slab key as stored in `Indices` and `Slot::next`.
fn key32(key: usize) -> u32 {
    debug_assert!(key <= u32::MAX as usize);
    key as u32
}

impl<T> Buffer<T> {
    pub fn new() -> Self {
        Buffer { slab: Slab::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }
}

impl Deque {
    pub fn new() -> Self {
        Deque { indices: None }
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_none()
    }

    pub fn push_back<T>(&mut self, buf: &mut Buffer<T>, value: T) {
        let key = key32(buf.slab.insert(Slot { value, next: None }));

        match self.indices {
            Some(ref mut idxs) => {
                buf.slab[idxs.tail as usize].next = Some(key);
                idxs.tail = key;
            }
            None => {
                self.indices = Some(Indices::one(key));
            }
        }
    }

    pub fn push_front<T>(&mut self, buf: &mut Buffer<T>, value: T) {
        let key = key32(buf.slab.insert(Slot { value, next: None }));

        match self.indices {
            Some(ref mut idxs) => {
                buf.slab[key as usize].next = Some(idxs.head());
                idxs.set_head(key);
            }
            None => {
                self.indices = Some(Indices::one(key));
            }
        }
    }

    pub fn pop_front<T>(&mut self, buf: &mut Buffer<T>) -> Option<T> {
        match self.indices {
            Some(mut idxs) => {
                let mut slot = buf.slab.remove(idxs.head() as usize);
                // watchcache: an emptied buffer gives its storage back. A connection's frames
                // are queued in bursts (a watch event, the headers of streams opened together)
                // and the slab would otherwise keep its largest burst's slots for the
                // connection's life: a `Frame` slot is over 100 bytes.
                if buf.slab.is_empty() && buf.slab.capacity() > 0 {
                    buf.slab = Slab::new();
                }

                if idxs.head() == idxs.tail {
                    assert!(slot.next.is_none());
                    self.indices = None;
                } else {
                    idxs.set_head(slot.next.take().unwrap());
                    self.indices = Some(idxs);
                }

                Some(slot.value)
            }
            None => None,
        }
    }
}

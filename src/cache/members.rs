//! A set of watcher ids under one routing key: one (trigger, value) of `cache/router.rs`, or one
//! hash segment of `cache/shard_router.rs`.

use roaring::RoaringBitmap;

/// The watchers registered under one (trigger, value), or one shard segment
/// (`cache/shard_router.rs`). Most values have one watcher (a kubelet per node), which is kept
/// inline: no heap bitmap to chase on the hot path. The bitmap is boxed: inline, it made every
/// routing table's entry 16 B larger (32 B of `Members` for a 4-byte id), each table bucket
/// paying it, for the few values with more than one watcher.
#[derive(Clone)]
pub(crate) enum Members {
    One(u32),
    Many(Box<RoaringBitmap>),
}

impl Members {
    pub(crate) fn insert(&mut self, id: u32) {
        match self {
            Members::One(x) if *x == id => {}
            Members::One(x) => *self = Members::Many(Box::new(RoaringBitmap::from_iter([*x, id]))),
            Members::Many(bm) => {
                bm.insert(id);
            }
        }
    }

    /// Removes `id`; returns whether the set is now empty.
    pub(crate) fn remove(&mut self, id: u32) -> bool {
        match self {
            Members::One(x) => *x == id,
            Members::Many(bm) => {
                bm.remove(id);
                if bm.len() == 1 {
                    let last = bm.min().unwrap_or_else(|| unreachable!("len is 1"));
                    *self = Members::One(last);
                }
                bm_is_empty(self)
            }
        }
    }

    pub(crate) fn for_each(&self, visit: &mut impl FnMut(u32)) {
        match self {
            Members::One(x) => visit(*x),
            Members::Many(bm) => bm.iter().for_each(visit),
        }
    }

    pub(crate) fn contains(&self, id: u32) -> bool {
        match self {
            Members::One(x) => *x == id,
            Members::Many(bm) => bm.contains(id),
        }
    }

    /// Whether two sets (`None`: empty) hold the same watchers.
    pub(crate) fn same(a: Option<&Members>, b: Option<&Members>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(Members::One(x)), Some(Members::One(y))) => x == y,
            (Some(Members::Many(x)), Some(Members::Many(y))) => x == y,
            _ => false,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        match self {
            Members::One(_) => 1,
            Members::Many(bm) => bm.len(),
        }
    }
}

fn bm_is_empty(m: &Members) -> bool {
    matches!(m, Members::Many(bm) if bm.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_go_from_one_to_many_and_back() {
        let mut m = Members::One(3);
        m.insert(3);
        assert_eq!(m.len(), 1);
        m.insert(9);
        assert_eq!(m.len(), 2);
        assert!(!m.remove(3));
        assert!(matches!(m, Members::One(9)));
        assert!(m.remove(9));
        let mut seen = Vec::new();
        Members::Many(Box::new(RoaringBitmap::from_iter([1, 2]))).for_each(&mut |x| seen.push(x));
        assert_eq!(seen, [1, 2]);
        assert_eq!(std::mem::size_of::<Members>(), 16);
    }
}

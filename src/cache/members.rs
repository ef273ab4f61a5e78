//! A set of watcher ids under one routing key: one (trigger, value) of the registry's router (`cache/registry.rs`).
//!
//! Invariant: the variant follows from the number of members alone (one `One`, two `Two`, up to
//! [`FEW`] `Few`, more `Many`), and the ids in `Two` and `Few` are sorted without repeats: two
//! sets with the same members have the same representation.

use roaring::RoaringBitmap;

/// The most members kept in a sorted vector; more go in a roaring bitmap.
const FEW: usize = 32;

/// The watchers registered under one (trigger, value). Most values have one watcher (a kubelet
/// per node), and a few have a handful (the node's other agents: a CNI daemon, kube-proxy, a CSI
/// node plugin watch the same node's pods): two are kept inline, up to [`FEW`] in a sorted vector of exactly their
/// number, so a second watcher on a value costs nothing and a third 48 bytes (a roaring bitmap's
/// box, container vector and array took 176 bytes for two). The bitmap is boxed: inline, it made
/// every routing table's entry 16 B larger, each table bucket paying it, for the few values with
/// many watchers.
#[derive(Clone)]
pub(crate) enum Members {
    One(u32),
    Two([u32; 2]),
    /// Sorted, exactly as long as it needs (a boxed `Vec`: a boxed slice's length would make
    /// every `Members` 24 bytes, and each routing table's bucket with it).
    #[allow(clippy::box_collection)]
    Few(Box<Vec<u32>>),
    Many(Box<RoaringBitmap>),
}

impl Members {
    pub(crate) fn insert(&mut self, id: u32) {
        match self {
            Members::One(x) if *x == id => {}
            Members::One(x) => *self = Members::Two(sorted2(*x, id)),
            Members::Two(p) if p.contains(&id) => {}
            Members::Two(p) => {
                let mut v = Vec::with_capacity(3);
                v.extend_from_slice(p);
                v.insert(v.partition_point(|&x| x < id), id);
                *self = Members::Few(Box::new(v));
            }
            Members::Few(s) => {
                let Err(at) = s.binary_search(&id) else {
                    return;
                };
                if s.len() < FEW {
                    s.reserve_exact(1);
                    s.insert(at, id);
                } else {
                    let mut bm = RoaringBitmap::from_sorted_iter(s.iter().copied())
                        .unwrap_or_else(|_| unreachable!("Few is sorted"));
                    bm.insert(id);
                    *self = Members::Many(Box::new(bm));
                }
            }
            Members::Many(bm) => {
                bm.insert(id);
            }
        }
    }

    /// Removes `id`; returns whether the set is now empty.
    pub(crate) fn remove(&mut self, id: u32) -> bool {
        match self {
            Members::One(x) => *x == id,
            Members::Two([a, b]) => {
                if *a == id {
                    *self = Members::One(*b);
                } else if *b == id {
                    *self = Members::One(*a);
                }
                false
            }
            Members::Few(s) => {
                if let Ok(at) = s.binary_search(&id) {
                    s.remove(at);
                    if let [a, b] = s[..] {
                        *self = Members::Two([a, b]);
                    } else {
                        s.shrink_to_fit();
                    }
                }
                false
            }
            Members::Many(bm) => {
                if bm.remove(id) && bm.len() as usize <= FEW {
                    *self = Members::Few(Box::new(bm.iter().collect()));
                }
                false
            }
        }
    }

    pub(crate) fn for_each(&self, visit: &mut impl FnMut(u32)) {
        match self {
            Members::One(x) => visit(*x),
            Members::Two([a, b]) => {
                visit(*a);
                visit(*b);
            }
            Members::Few(s) => s.iter().copied().for_each(visit),
            Members::Many(bm) => bm.iter().for_each(visit),
        }
    }

    /// Whether `id` is a member (the tests' check against a model set).
    #[cfg(test)]
    pub(crate) fn contains(&self, id: u32) -> bool {
        match self {
            Members::One(x) => *x == id,
            Members::Two(p) => p.contains(&id),
            Members::Few(s) => s.binary_search(&id).is_ok(),
            Members::Many(bm) => bm.contains(id),
        }
    }

    /// Whether two sets (`None`: empty) hold the same watchers: a comparison of variants, which
    /// the tests use to check the canonical form.
    #[cfg(test)]
    pub(crate) fn same(a: Option<&Members>, b: Option<&Members>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(Members::One(x)), Some(Members::One(y))) => x == y,
            (Some(Members::Two(x)), Some(Members::Two(y))) => x == y,
            (Some(Members::Few(x)), Some(Members::Few(y))) => x == y,
            (Some(Members::Many(x)), Some(Members::Many(y))) => x == y,
            _ => false,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        match self {
            Members::One(_) => 1,
            Members::Two(_) => 2,
            Members::Few(s) => s.len() as u64,
            Members::Many(bm) => bm.len(),
        }
    }
}

fn sorted2(a: u32, b: u32) -> [u32; 2] {
    if a < b { [a, b] } else { [b, a] }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ids(m: &Members) -> Vec<u32> {
        let mut seen = Vec::new();
        m.for_each(&mut |x| seen.push(x));
        seen.sort_unstable();
        seen
    }

    /// The variant a set of `n` members must have.
    fn canonical(m: &Members) -> bool {
        match m {
            Members::One(_) => true,
            Members::Two([a, b]) => a < b,
            Members::Few(s) => (3..=FEW).contains(&s.len()) && s.windows(2).all(|w| w[0] < w[1]),
            Members::Many(bm) => bm.len() as usize > FEW,
        }
    }

    #[test]
    fn members_go_from_one_to_many_and_back() {
        let mut m = Members::One(3);
        m.insert(3);
        assert_eq!(m.len(), 1);
        m.insert(9);
        assert_eq!(m.len(), 2);
        assert!(matches!(m, Members::Two([3, 9])));
        assert!(!m.remove(3));
        assert!(matches!(m, Members::One(9)));
        assert!(m.remove(9));
        // The caller drops an emptied set; a new one starts with one member.
        let mut m = Members::One(7);
        for n in 2..=FEW as u32 + 2 {
            m.insert(n * 7);
        }
        assert!(matches!(m, Members::Many(_)));
        assert!(!m.remove(7));
        assert!(matches!(m, Members::Many(_)));
        assert!(!m.remove(14));
        assert!(matches!(&m, Members::Few(s) if s.len() == FEW));
        assert_eq!(std::mem::size_of::<Members>(), 16);
    }

    proptest! {
        /// Any sequence of inserts and removals leaves the set a `BTreeSet` would hold, in its
        /// canonical variant, so `same` is equality.
        #[test]
        fn members_are_a_set(ops in proptest::collection::vec((any::<bool>(), 0u32..48), 1..300)) {
            let mut m: Option<Members> = None;
            let mut model = std::collections::BTreeSet::new();
            for (add, id) in ops {
                if add {
                    model.insert(id);
                    match &mut m {
                        Some(m) => m.insert(id),
                        None => m = Some(Members::One(id)),
                    }
                } else {
                    model.remove(&id);
                    if m.as_mut().is_some_and(|s| s.remove(id)) {
                        m = None;
                    }
                }
                let want: Vec<u32> = model.iter().copied().collect();
                prop_assert_eq!(m.as_ref().map(ids).unwrap_or_default(), want.clone());
                prop_assert_eq!(m.as_ref().map_or(0, Members::len), want.len() as u64);
                prop_assert!(m.as_ref().is_none_or(canonical));
                for id in 0..48 {
                    prop_assert_eq!(m.as_ref().is_some_and(|s| s.contains(id)), model.contains(&id));
                }
                // The same members built in order compare the same.
                let mut rebuilt: Option<Members> = None;
                for &id in &want {
                    match &mut rebuilt {
                        Some(r) => r.insert(id),
                        None => rebuilt = Some(Members::One(id)),
                    }
                }
                prop_assert!(Members::same(m.as_ref(), rebuilt.as_ref()));
            }
        }
    }
}

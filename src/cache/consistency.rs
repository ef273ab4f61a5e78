//! The cache's half of the periodic consistency check against its upstream (upstream's
//! `DetectCacheInconsistency`, kube-apiserver 1.34+): the cache's objects at a revision N as
//! (key, revision) pairs, read in pages under the lock, and their comparison with the upstream's
//! at N. The follower's side (when, the upstream read, what a mismatch does) is
//! `crates/follow/src/check.rs`.
//!
//! What is compared is what upstream hashes: each object's namespace, name and resourceVersion
//! (here its key and the revision it was written at), not its content. Upstream compares a
//! 64-bit FNV hash of them; this comparison is exact (a merge of two key-ordered sequences), so
//! no collision can hide a difference, and it names the differing keys.
//!
//! ## Invariants
//! - [`Comparison`] is fed the upstream's keys in strictly increasing order, as etcd and a
//!   paged LIST return them; the cache's side is in the same (byte) order.
//! - It holds the cache's pairs only (an `Arc` key and a revision each, no object), and at most
//!   `SAMPLES` differences.

use std::sync::Arc;

/// Objects per page of the cache's side: one page is one read-lock hold.
pub(crate) const PAGE: usize = 10_000;

/// Differences a check keeps to name in its log.
pub(crate) const SAMPLES: usize = 5;

/// An object as the check compares it: its key and the revision it was written at.
pub(crate) type Entry = (Arc<str>, u64);

/// One difference between the cache and the upstream at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    /// The upstream has the object; the cache does not.
    Missing {
        /// The object's key.
        key: String,
        /// Its revision upstream.
        upstream: u64,
    },
    /// Both have it, at different revisions.
    Stale {
        /// The object's key.
        key: String,
        /// Its revision in the cache.
        cached: u64,
        /// Its revision upstream.
        upstream: u64,
    },
    /// The cache has an object the upstream does not.
    Ghost {
        /// The object's key.
        key: String,
        /// Its revision in the cache.
        cached: u64,
    },
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Difference::Missing { key, upstream } => {
                write!(f, "{key}: missing (upstream at {upstream})")
            }
            Difference::Stale {
                key,
                cached,
                upstream,
            } => write!(f, "{key}: cached at {cached}, upstream at {upstream}"),
            Difference::Ghost { key, cached } => {
                write!(f, "{key}: cached at {cached}, not upstream")
            }
        }
    }
}

/// What one upstream entry was to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The cache holds it at the same revision.
    Same,
    /// The cache holds it at another revision (counted).
    Stale,
    /// The cache does not hold it: the caller says whether that is a difference
    /// ([`Comparison::missing`]) or a value the cache would skip too ([`Comparison::skipped`]).
    Absent,
}

/// The outcome of one comparison.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compared {
    /// Objects the upstream has at the revision (undecodable ones included).
    pub upstream: u64,
    /// Objects the cache has at the revision.
    pub cached: u64,
    /// Upstream objects the cache lacks.
    pub missing: u64,
    /// Objects at another revision in the cache.
    pub stale: u64,
    /// Cached objects the upstream lacks.
    pub ghosts: u64,
    /// Upstream values the cache skips as it does when following (undecodable): no difference.
    pub skipped: u64,
    /// The first differences, in key order, at most five.
    pub samples: Vec<Difference>,
}

impl Compared {
    /// Whether the cache equals the upstream.
    pub fn consistent(&self) -> bool {
        self.missing == 0 && self.stale == 0 && self.ghosts == 0
    }
}

/// A merge of the cache's (key, revision) pairs with the upstream's, fed in key order.
#[derive(Debug)]
pub struct Comparison {
    cached: Vec<Entry>,
    next: usize,
    out: Compared,
}

impl Comparison {
    /// A comparison against the cache's pairs at the revision, in key order.
    pub fn new(cached: Vec<Entry>) -> Comparison {
        let out = Compared {
            cached: cached.len() as u64,
            ..Compared::default()
        };
        Comparison {
            cached,
            next: 0,
            out,
        }
    }

    fn sample(&mut self, d: impl FnOnce() -> Difference) {
        if self.out.samples.len() < SAMPLES {
            self.out.samples.push(d());
        }
    }

    /// The next upstream object, after the previous one in key order.
    pub fn upstream(&mut self, key: &str, rv: u64) -> Seen {
        self.out.upstream += 1;
        // Cached keys before this one: the upstream has none of them.
        while let Some((k, cached)) = self.cached.get(self.next).filter(|(k, _)| &**k < key) {
            let (k, cached) = (k.to_string(), *cached);
            self.next += 1;
            self.out.ghosts += 1;
            self.sample(|| Difference::Ghost { key: k, cached });
        }
        match self.cached.get(self.next) {
            Some((k, cached)) if &**k == key => {
                let cached = *cached;
                self.next += 1;
                if cached == rv {
                    Seen::Same
                } else {
                    self.out.stale += 1;
                    self.sample(|| Difference::Stale {
                        key: key.to_owned(),
                        cached,
                        upstream: rv,
                    });
                    Seen::Stale
                }
            }
            _ => Seen::Absent,
        }
    }

    /// An [`Seen::Absent`] object is a difference.
    pub fn missing(&mut self, key: &str, rv: u64) {
        self.out.missing += 1;
        self.sample(|| Difference::Missing {
            key: key.to_owned(),
            upstream: rv,
        });
    }

    /// An [`Seen::Absent`] object is a value the cache skips (it does not decode).
    pub fn skipped(&mut self) {
        self.out.skipped += 1;
    }

    /// The outcome, once every upstream object was fed: cached keys past the last are ghosts.
    pub fn finish(mut self) -> Compared {
        while let Some((k, cached)) = self.cached.get(self.next) {
            let (k, cached) = (k.to_string(), *cached);
            self.next += 1;
            self.out.ghosts += 1;
            self.sample(|| Difference::Ghost { key: k, cached });
        }
        self.out
    }
}

/// How the test hook corrupts a cache (feature `test-hooks`; never in a shipped binary): what a
/// bug or a lost event would leave behind, for tests of the consistency check.
#[cfg(any(test, feature = "test-hooks"))]
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Corruption {
    /// The next change of this key is dropped (store, history and watchers never see it): a
    /// missed create leaves the object missing, a missed update a stale version, a missed delete
    /// a ghost.
    MissNext(String),
    /// The object with this key leaves the store silently.
    Forget(String),
    /// The object enters the store silently (a stale version or a ghost).
    Plant(crate::model::Object),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(entries: &[(&str, u64)]) -> Vec<Entry> {
        entries.iter().map(|(k, v)| (Arc::from(*k), *v)).collect()
    }

    #[test]
    fn equal_sides_are_consistent() {
        let mut c = Comparison::new(cached(&[("/a", 1), ("/b", 2)]));
        assert_eq!(c.upstream("/a", 1), Seen::Same);
        assert_eq!(c.upstream("/b", 2), Seen::Same);
        let out = c.finish();
        assert!(out.consistent());
        assert_eq!((out.upstream, out.cached), (2, 2));
        assert!(out.samples.is_empty());
    }

    #[test]
    fn missing_stale_and_ghost_objects_are_named_in_key_order() {
        let mut c = Comparison::new(cached(&[("/a", 1), ("/b", 2), ("/d", 4), ("/f", 6)]));
        assert_eq!(c.upstream("/b", 3), Seen::Stale);
        assert_eq!(c.upstream("/c", 3), Seen::Absent);
        c.missing("/c", 3);
        assert_eq!(c.upstream("/d", 4), Seen::Same);
        assert_eq!(c.upstream("/e", 5), Seen::Absent);
        c.skipped();
        let out = c.finish();
        assert!(!out.consistent());
        assert_eq!(
            (out.missing, out.stale, out.ghosts, out.skipped),
            (1, 1, 2, 1)
        );
        assert_eq!(
            out.samples,
            [
                Difference::Ghost {
                    key: "/a".into(),
                    cached: 1
                },
                Difference::Stale {
                    key: "/b".into(),
                    cached: 2,
                    upstream: 3
                },
                Difference::Missing {
                    key: "/c".into(),
                    upstream: 3
                },
                Difference::Ghost {
                    key: "/f".into(),
                    cached: 6
                },
            ]
        );
        assert_eq!(out.samples[1].to_string(), "/b: cached at 2, upstream at 3");
    }

    #[test]
    fn samples_are_bounded_and_counts_are_not() {
        let keys: Vec<String> = (0..100).map(|i| format!("/k{i:03}")).collect();
        let mut c = Comparison::new(keys.iter().map(|k| (Arc::from(k.as_str()), 1)).collect());
        for k in &keys {
            assert_eq!(c.upstream(k, 2), Seen::Stale);
        }
        let out = c.finish();
        assert_eq!(out.stale, 100);
        assert_eq!(out.samples.len(), SAMPLES);
    }

    #[test]
    fn an_empty_upstream_makes_every_cached_object_a_ghost() {
        let out = Comparison::new(cached(&[("/a", 1), ("/b", 1)])).finish();
        assert_eq!((out.upstream, out.ghosts), (0, 2));
        let out = Comparison::new(Vec::new()).finish();
        assert!(out.consistent());
    }
}

//! LIST: options, results, and paging over a consistent view of the store.
//!
//! A page at revision R is read from the current store with every key changed after R rolled back to
//! its state at R, taken from the history window ([`Rollback`]). So continuation pages stay consistent
//! with the first page without keeping snapshots, and a list or continuation from before the window
//! is 410 Expired.
//!
//! Candidates come from intersecting the index bitmaps of every indexed equality term; the rest of the
//! predicate is evaluated on those candidates only.

use std::collections::BTreeMap;
use std::ops::Bound;

use roaring::RoaringBitmap;

use crate::cache::history::{Evicted, History};
use crate::cache::store::Store;
use crate::model::selector::Predicate;
use crate::model::{Object, ObjectKey, ResourceVersion, RvMatch, Schema, Selection};

/// Options of a LIST, with the upstream meaning of each parameter.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Which objects.
    pub selection: Selection,
    /// `resourceVersion`: unset is a consistent read, `0` any, `N` not older than N.
    pub resource_version: ResourceVersion,
    /// `resourceVersionMatch`.
    pub rv_match: Option<RvMatch>,
    /// `limit`: at most this many items (0 or `None`: no limit).
    pub limit: Option<usize>,
    /// `continue`: the token of the previous page.
    pub continue_token: Option<String>,
}

impl ListOptions {
    /// Everything, consistent.
    pub fn all() -> Self {
        Self::default()
    }

    /// Selects with `selection`.
    #[must_use]
    pub fn select(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    /// Sets the page size.
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Continues a previous page.
    #[must_use]
    pub fn continue_from(mut self, token: impl Into<String>) -> Self {
        self.continue_token = Some(token.into());
        self
    }

    /// Sets the resourceVersion semantics.
    #[must_use]
    pub fn at(mut self, rv: ResourceVersion, rv_match: Option<RvMatch>) -> Self {
        self.resource_version = rv;
        self.rv_match = rv_match;
        self
    }
}

/// Keys changed after a snapshot point, with their state at that point (`None`: did not exist).
#[derive(Default)]
pub(crate) struct Rollback {
    keys: BTreeMap<ObjectKey, Option<Object>>,
}

impl Rollback {
    /// The rollback from the current state to the state before history sequence number `seq`.
    ///
    /// # Errors
    /// [`Evicted`] when events from `seq` on were evicted.
    // `ObjectKey` orders by the object's key, which never changes (the lazily made parts do).
    #[allow(clippy::mutable_key_type)]
    pub(super) fn since(history: &History, seq: u64) -> Result<Rollback, Evicted> {
        history.check_seq(seq)?;
        let mut keys = BTreeMap::new();
        for ev in history.since(seq) {
            keys.entry(ev.subject().key_owned())
                .or_insert_with(|| ev.prev.clone());
        }
        Ok(Rollback { keys })
    }
}

/// A page of objects: items, whether more match, and how many more when known.
pub(crate) struct Page {
    pub items: Vec<Object>,
    pub more: bool,
    pub remaining: Option<u64>,
}

/// Reads one page of the view (store rolled back by `rollback`), after key `after`.
pub(crate) fn page(
    schema: &Schema,
    store: &Store,
    rollback: &Rollback,
    pred: &Predicate,
    after: Option<&str>,
    limit: Option<usize>,
) -> Page {
    let cands = store.candidates(schema, pred);
    match (&cands, limit) {
        (Some(c), None) => gather(schema, store, rollback, pred, c, after, None),
        (Some(c), Some(l))
            if c.len() <= (l as u64).saturating_mul(4).saturating_add(1024)
                || c.len() * 16 <= store.len() as u64 =>
        {
            gather(schema, store, rollback, pred, c, after, Some(l))
        }
        _ => scan(schema, store, rollback, pred, cands.as_ref(), after, limit),
    }
}

/// Materializes the candidates, filters, sorts by key and cuts the page: best when the candidate set
/// is small (an index hit).
fn gather(
    schema: &Schema,
    store: &Store,
    rollback: &Rollback,
    pred: &Predicate,
    cands: &RoaringBitmap,
    after: Option<&str>,
    limit: Option<usize>,
) -> Page {
    let after_ok = |o: &Object| after.is_none_or(|a| o.key() > a);
    let mut items: Vec<Object> = cands
        .iter()
        .map(|s| store.slot(s))
        .filter(|o| !rollback.keys.contains_key(o.key()))
        .chain(rollback.keys.values().flatten())
        .filter(|o| after_ok(o) && pred.matches(schema, o))
        .cloned()
        .collect();
    items.sort_unstable_by(|a, b| a.key().cmp(b.key()));
    match limit {
        Some(l) if items.len() > l => {
            let remaining = (items.len() - l) as u64;
            items.truncate(l);
            Page {
                items,
                more: true,
                remaining: Some(remaining),
            }
        }
        _ => Page {
            items,
            more: false,
            remaining: None,
        },
    }
}

/// Walks keys in order, merging in the rollback, until the page is full: best for large candidate
/// sets with a limit (stops early).
fn scan(
    schema: &Schema,
    store: &Store,
    rollback: &Rollback,
    pred: &Predicate,
    cands: Option<&RoaringBitmap>,
    after: Option<&str>,
    limit: Option<usize>,
) -> Page {
    let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut cur = store.range_after(after).peekable();
    let mut rb = rollback
        .keys
        .range::<str, _>((lower, Bound::Unbounded))
        .peekable();
    let mut items = Vec::new();
    let mut more = false;
    loop {
        let ck: Option<&str> = cur.peek().map(|(k, _)| -> &str { k });
        let rk: Option<&str> = rb.peek().map(|(k, _)| -> &str { k });
        let take_rollback = match (ck, rk) {
            (None, None) => break,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(c), Some(r)) => {
                if c == r {
                    // The rolled-back state replaces the current one.
                    cur.next();
                }
                r <= c
            }
        };
        let candidate = if take_rollback {
            rb.next().and_then(|(_, o)| o.as_ref())
        } else {
            cur.next()
                .and_then(|(_, s)| cands.is_none_or(|c| c.contains(s)).then(|| store.slot(s)))
        };
        let Some(obj) = candidate else { continue };
        if !pred.matches(schema, obj) {
            continue;
        }
        if limit.is_some_and(|l| items.len() >= l) {
            more = true;
            break;
        }
        items.push(obj.clone());
    }
    // Counting the rest would cost the walk that stopping early saves.
    Page {
        items,
        more,
        remaining: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::testing::{Fixture, on_node};

    fn names(p: &Page) -> Vec<(&str, u64)> {
        p.items
            .iter()
            .map(|o| (o.name(), o.resource_version()))
            .collect()
    }

    #[test]
    fn a_rolled_back_view_is_the_state_at_the_snapshot() {
        let mut f = Fixture::new();
        for (name, node) in [("a", "n1"), ("b", "n1"), ("c", "n2")] {
            f.put(name, node);
        }
        let snapshot = f.history.end_seq();
        f.put("a", "n2"); // moved away
        f.delete("b");
        f.put("d", "n1"); // created
        let all = Predicate::compile(&f.schema, &Selection::all());
        let n1 = f.predicate(&on_node("n1"));
        let now = Rollback::default();
        let then = Rollback::since(&f.history, snapshot).unwrap();
        let read = |rb: &Rollback, pred: &Predicate, after, limit| {
            page(&f.schema, &f.store, rb, pred, after, limit)
        };
        assert_eq!(names(&read(&now, &n1, None, None)), [("d", 6)]);
        assert_eq!(
            names(&read(&then, &n1, None, None)),
            [("a", 1), ("b", 2)],
            "the state before the snapshot, from the index plus the rolled-back keys"
        );
        // Paging in key order over the rolled-back view, both by gathering and by walking.
        let first = read(&then, &all, None, Some(2));
        assert_eq!(names(&first), [("a", 1), ("b", 2)]);
        assert!(first.more);
        let next = read(&then, &all, Some("/registry/pods/ns/b"), Some(2));
        assert_eq!(names(&next), [("c", 3)]);
        assert!(!next.more);
    }

    #[test]
    fn index_hits_count_what_remains_and_walks_stop_early() {
        let mut f = Fixture::new();
        for i in 0..10 {
            f.put(&format!("p{i}"), if i % 2 == 0 { "n1" } else { "n2" });
        }
        let rb = Rollback::default();
        let by_index = page(
            &f.schema,
            &f.store,
            &rb,
            &f.predicate(&on_node("n1")),
            None,
            Some(2),
        );
        assert_eq!(by_index.items.len(), 2);
        assert_eq!(by_index.remaining, Some(3));
        let walk = page(
            &f.schema,
            &f.store,
            &rb,
            &f.predicate(&Selection::all()),
            None,
            Some(2),
        );
        assert!(walk.more);
        assert_eq!(
            walk.remaining, None,
            "a walk that stopped early does not count the rest"
        );
    }

    #[test]
    fn a_huge_limit_is_no_limit() {
        let mut f = Fixture::new();
        for i in 0..3 {
            f.put(&format!("p{i}"), "n1");
        }
        let rb = Rollback::default();
        for pred in [f.predicate(&on_node("n1")), f.predicate(&Selection::all())] {
            for limit in [usize::MAX, i64::MAX as usize, 1 << 62] {
                let p = page(&f.schema, &f.store, &rb, &pred, None, Some(limit));
                assert_eq!(p.items.len(), 3);
                assert!(!p.more);
            }
        }
    }

    #[test]
    fn a_snapshot_before_the_window_is_evicted() {
        let mut f = Fixture::with_history(crate::model::HistoryConfig {
            min_events: 2,
            max_events: 2,
            window: std::time::Duration::ZERO,
            max_bytes: None,
        });
        for _ in 0..4 {
            f.put("a", "n1");
        }
        assert_eq!(
            Rollback::since(&f.history, 1).err(),
            Some(Evicted { oldest: 2 })
        );
    }
}

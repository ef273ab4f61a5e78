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
use std::sync::Arc;

use roaring::RoaringBitmap;

use crate::history::History;
use crate::object::Object;
use crate::resource_version::{ResourceVersion, RvMatch};
use crate::schema::Schema;
use crate::selector::{Predicate, Selection};
use crate::store::Store;

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

/// One page of a LIST.
#[derive(Debug, Clone)]
pub struct ObjectList {
    /// The revision the page is consistent at.
    pub resource_version: u64,
    /// The objects, sorted by key.
    pub items: Vec<Object>,
    /// The token for the next page, when there is one.
    pub continue_token: Option<String>,
    /// How many more items match after this page, when known.
    pub remaining_item_count: Option<u64>,
}

/// Keys changed after a snapshot point, with their state at that point (`None`: did not exist).
#[derive(Default)]
pub(crate) struct Rollback {
    keys: BTreeMap<Arc<str>, Option<Object>>,
}

impl Rollback {
    /// The rollback from the current state to the state before history sequence number `seq`.
    /// `Err(floor_rv)` when events from `seq` on were evicted.
    pub fn since(history: &History, seq: u64) -> Result<Rollback, u64> {
        if seq < history.start_seq() {
            return Err(history.floor_rv());
        }
        let mut keys = BTreeMap::new();
        for ev in history.since(seq) {
            keys.entry(Arc::clone(ev.key()))
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
    let cands = store.candidates(pred);
    match (&cands, limit) {
        (Some(c), None) => gather(schema, store, rollback, pred, c, after, None),
        (Some(c), Some(l))
            if c.len() <= (4 * l as u64 + 1024) || c.len() * 16 <= store.len() as u64 =>
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

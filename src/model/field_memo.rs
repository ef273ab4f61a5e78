//! Values of field paths that no definition declares, read from an object (its JSON, or its protobuf
//! bytes) at most once per
//! (object, path) and shared by every selector that asks.
//!
//! Field selectors may name any path. A declared path is extracted at decode; an undeclared one
//! would be read from the JSON for each watcher and each event, under the cache's write lock
//! (watchers × object size). Instead the cache extracts the undeclared paths that live selectors
//! use when it decodes an object, outside any lock ([`FieldMemo::extract`]), and evaluation reads
//! the memo. Only an object decoded before a path came into use reads it later, once, during
//! dispatch. One-off reads (a LIST's scan, initial events) do not fill the memo, so an ad hoc
//! selector never leaves an entry on every object it scanned.
//!
//! ## Lock order
//! The memo's mutex is a leaf: nothing else is locked while it is held, and extraction (parsing
//! the JSON) runs outside it.
// Reads outside input (requests or stored values): no panicking access (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

use std::sync::Arc;

use crate::model::field_path::FieldPath;
use parking_lot::Mutex;

/// Values read so far: (path, value; `None` when the object has no value there).
type Values = Vec<(FieldPath, Option<Arc<str>>)>;

/// The memo of one object: 16 bytes, and no allocation until a path is kept.
#[derive(Default)]
pub(crate) struct FieldMemo(Mutex<Option<Box<Values>>>);

impl FieldMemo {
    /// The value at `path`: from the memo, or `read` (and kept in the memo when `keep`).
    pub(crate) fn get(
        &self,
        path: &FieldPath,
        keep: bool,
        read: impl FnOnce() -> Option<Arc<str>>,
    ) -> Option<Arc<str>> {
        if let Some(v) = self.lookup(path) {
            return v;
        }
        let v = read();
        if keep {
            self.store(path, v.clone());
        }
        v
    }

    /// Reads every path of `paths` not read yet.
    pub(crate) fn extract(
        &self,
        paths: &[FieldPath],
        read: impl Fn(&FieldPath) -> Option<Arc<str>>,
    ) {
        for p in paths {
            if self.lookup(p).is_none() {
                self.store(p, read(p));
            }
        }
    }

    fn lookup(&self, path: &FieldPath) -> Option<Option<Arc<str>>> {
        self.0
            .lock()
            .as_deref()?
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, v)| v.clone())
    }

    fn store(&self, path: &FieldPath, v: Option<Arc<str>>) {
        let mut memo = self.0.lock();
        let memo = memo.get_or_insert_default();
        if !memo.iter().any(|(p, _)| p == path) {
            memo.push((path.clone(), v));
        }
    }
}

#[cfg(test)]
thread_local! {
    /// JSON reads on this thread, for tests that count them.
    pub(crate) static READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_is_read_once() {
        let (a, b) = (
            FieldPath::parse("spec.a").unwrap(),
            FieldPath::parse("spec.b").unwrap(),
        );
        let reads = std::cell::Cell::new(0);
        let read = |p: &FieldPath| {
            reads.set(reads.get() + 1);
            Some(Arc::from(if p.as_str() == "spec.a" { "x" } else { "2" }))
        };
        let memo = FieldMemo::default();
        memo.extract(std::slice::from_ref(&a), read);
        assert_eq!(memo.get(&a, true, || read(&a)).as_deref(), Some("x"));
        assert_eq!(memo.get(&a, false, || read(&a)).as_deref(), Some("x"));
        assert_eq!(memo.get(&b, false, || read(&b)).as_deref(), Some("2"));
        assert_eq!(reads.get(), 2);
        assert_eq!(
            memo.get(&b, true, || read(&b)).as_deref(),
            Some("2"),
            "read again, kept"
        );
        memo.extract(&[a, b.clone()], read);
        assert_eq!(memo.get(&b, false, || read(&b)).as_deref(), Some("2"));
        assert_eq!(reads.get(), 3);
    }
}

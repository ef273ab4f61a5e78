//! Values of field paths that no definition declares, read from an object's JSON at most once per
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

use parking_lot::Mutex;
use serde_json::value::RawValue;

use crate::model::field_path::{self, FieldPath};

/// Values read so far: (path, value; `None` when the object has no value there).
type Values = Vec<(FieldPath, Option<Arc<str>>)>;

/// The memo of one object: 16 bytes, and no allocation until a path is kept.
#[derive(Default)]
pub(crate) struct FieldMemo(Mutex<Option<Box<Values>>>);

impl FieldMemo {
    /// The value at `path` in `json`: from the memo, or read (and kept in the memo when `keep`).
    pub fn get(&self, json: &[u8], path: &FieldPath, keep: bool) -> Option<Arc<str>> {
        if let Some(v) = self.lookup(path) {
            return v;
        }
        let v = read(json, path);
        if keep {
            self.store(path, v.clone());
        }
        v
    }

    /// Reads every path of `paths` not read yet.
    pub fn extract(&self, json: &[u8], paths: &[FieldPath]) {
        for p in paths {
            if self.lookup(p).is_none() {
                self.store(p, read(json, p));
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

fn read(json: &[u8], path: &FieldPath) -> Option<Arc<str>> {
    #[cfg(test)]
    READS.with(|r| r.set(r.get() + 1));
    let raw: &RawValue = serde_json::from_slice(json).ok()?;
    field_path::extract(raw, path).map(Arc::from)
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
        let json = br#"{"spec":{"a":"x","b":2}}"#;
        let (a, b) = (
            FieldPath::parse("spec.a").unwrap(),
            FieldPath::parse("spec.b").unwrap(),
        );
        let memo = FieldMemo::default();
        let before = READS.with(std::cell::Cell::get);
        memo.extract(json, std::slice::from_ref(&a));
        assert_eq!(memo.get(json, &a, true).as_deref(), Some("x"));
        assert_eq!(memo.get(json, &a, false).as_deref(), Some("x"));
        assert_eq!(memo.get(json, &b, false).as_deref(), Some("2"));
        assert_eq!(READS.with(std::cell::Cell::get) - before, 2);
        assert_eq!(
            memo.get(json, &b, true).as_deref(),
            Some("2"),
            "read again, kept"
        );
        memo.extract(json, &[a, b.clone()]);
        assert_eq!(memo.get(json, &b, false).as_deref(), Some("2"));
        assert_eq!(READS.with(std::cell::Cell::get) - before, 3);
    }
}

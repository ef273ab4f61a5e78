//! An object's short strings in one allocation: its key, its labels' keys and values, and its
//! declared fields' values, with one table of end offsets beside them.
//!
//! Each cached object used to hold these as separately boxed strings: the key in an `Arc<str>`,
//! a boxed slice of label pairs (two boxes per label), a boxed slice of field values (one box
//! each). For a 400-byte object the boxes' headers and pointers were about a quarter of its cost
//! (design/performance.md, "Per cached object against its JSON"). Packed, an object holds two
//! allocations whatever its label and field counts, and none for the table when it has neither.
//!
//! ## Invariants
//! - `text` is the key (`..key_len`), then for each label its key and its value, sorted by label
//!   key with no repeats, then each declared field's value in slot order.
//! - `ends[j]` is where string `j` after the key ends; string `j` starts at `ends[j - 1]` (the key's
//!   end for `j = 0`). `ends` is non-decreasing and its values are char boundaries of `text`.
// Reads outside input (labels and fields of stored values): no panicking access
// (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice,
        clippy::panic
    )
)]

/// The key, labels and declared field values of one object (40 bytes inline, two allocations at
/// most).
pub(crate) struct Packed {
    text: Box<str>,
    ends: Box<[u32]>,
    key_len: u32,
    labels: u32,
}

impl Packed {
    /// Packs `key`, `labels` (sorted by key, no repeats) and `fields` (by slot).
    ///
    /// # Errors
    /// More than 4 GiB of text (a stored value is far smaller; never seen).
    pub(super) fn new<'a>(
        key: &str,
        labels: impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
        fields: impl ExactSizeIterator<Item = &'a str> + Clone,
    ) -> Result<Packed, String> {
        let too_long = |_| "the key, labels and fields exceed 4 GiB".to_string();
        let len = key.len()
            + labels
                .clone()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + fields.clone().map(str::len).sum::<usize>();
        u32::try_from(len).map_err(too_long)?;
        let mut text = String::with_capacity(len);
        let mut ends = Vec::with_capacity(2 * labels.len() + fields.len());
        text.push_str(key);
        let n_labels = labels.len();
        let mut push = |s: &str| {
            text.push_str(s);
            // Fits: the total was checked above.
            ends.push(text.len() as u32);
        };
        for (k, v) in labels {
            push(k);
            push(v);
        }
        for f in fields {
            push(f);
        }
        Ok(Packed {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            key_len: key.len() as u32,
            labels: u32::try_from(n_labels).map_err(too_long)?,
        })
    }

    /// The key.
    pub(super) fn key(&self) -> &str {
        self.text.get(..self.key_len as usize).unwrap_or_default()
    }

    /// String `j` after the key.
    fn at(&self, j: usize) -> &str {
        let start = match j.checked_sub(1) {
            None => self.key_len,
            Some(p) => self.ends.get(p).copied().unwrap_or(0),
        };
        let end = self.ends.get(j).copied().unwrap_or(0);
        self.text
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }

    /// A label's value.
    pub(super) fn label(&self, key: &str) -> Option<&str> {
        // Binary search over the label pairs, by key.
        let (mut lo, mut hi) = (0, self.labels as usize);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.at(2 * mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.at(2 * mid + 1)),
            }
        }
        None
    }

    /// All labels, sorted by key.
    pub(super) fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.labels as usize).map(|i| (self.at(2 * i), self.at(2 * i + 1)))
    }

    /// The value of declared field `i`.
    pub(super) fn field(&self, i: usize) -> Option<&str> {
        let j = 2 * self.labels as usize + i;
        (j < self.ends.len()).then(|| self.at(j))
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.text.len() + 4 * self.ends.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_was_packed() {
        let labels = [("app", "web"), ("tier", ""), ("z", "é")];
        let fields = ["n1", "", "Running"];
        let p = Packed::new(
            "/registry/pods/ns/a",
            labels.iter().copied(),
            fields.iter().copied(),
        )
        .unwrap();
        assert_eq!(p.key(), "/registry/pods/ns/a");
        assert_eq!(p.labels().collect::<Vec<_>>(), labels);
        for (k, v) in labels {
            assert_eq!(p.label(k), Some(v));
        }
        for missing in ["", "a", "apq", "tiers", "zz"] {
            assert_eq!(p.label(missing), None, "{missing}");
        }
        assert_eq!(
            (0..4).map(|i| p.field(i)).collect::<Vec<_>>(),
            [Some("n1"), Some(""), Some("Running"), None]
        );
        assert_eq!(p.heap_bytes(), 19 + 3 + 3 + 4 + 1 + 2 + 2 + 7 + 4 * 9);
    }

    #[test]
    fn nothing_but_a_key_allocates_no_table() {
        let p = Packed::new("k", std::iter::empty(), std::iter::empty()).unwrap();
        assert_eq!((p.key(), p.label("k"), p.field(0)), ("k", None, None));
        assert_eq!(p.labels().count(), 0);
        assert_eq!(p.heap_bytes(), 1);
        assert_eq!(std::mem::size_of::<Packed>(), 40);
    }
}

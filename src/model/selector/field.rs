//! Field selectors in the Kubernetes syntax: `a=b`, `a==b`, `a!=b`, comma for AND, and `\` escaping of
//! `\`, `,` and `=` in values, as in `k8s.io/apimachinery/pkg/fields/selector.go`.
//!
//! Unlike upstream, any field path is accepted: indexed paths are answered by index, the others by
//! evaluation on the candidates.
// Reads outside input (requests or stored values): it must not panic on any of it
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

use std::fmt;

use crate::model::FieldPath;
use crate::model::selector::SelectorError;

/// The operator of one field requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOp {
    /// `a=b`.
    Equals,
    /// `a==b`.
    DoubleEquals,
    /// `a!=b`.
    NotEquals,
}

/// One `path op value` term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    path: FieldPath,
    op: FieldOp,
    /// Boxed, not a `String`: a watcher's compiled selector keeps its terms for the watch's life.
    value: Box<str>,
}

impl FieldRequirement {
    /// The field path.
    pub fn path(&self) -> &FieldPath {
        &self.path
    }

    /// The same term on `path`, an equal path shared with whoever holds it.
    pub(crate) fn with_path(&self, path: FieldPath) -> FieldRequirement {
        debug_assert_eq!(path, self.path);
        FieldRequirement {
            path,
            op: self.op,
            value: self.value.clone(),
        }
    }

    /// The operator.
    pub fn op(&self) -> FieldOp {
        self.op
    }

    /// The value, unescaped.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Whether the term requires equality (and so can be answered by an index).
    pub fn is_equality(&self) -> bool {
        self.op != FieldOp::NotEquals
    }

    /// Whether a field value satisfies this term.
    pub fn matches(&self, field_value: &str) -> bool {
        (field_value == &*self.value) == self.is_equality()
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Equals => "=",
            FieldOp::DoubleEquals => "==",
            FieldOp::NotEquals => "!=",
        };
        write!(f, "{}{}{}", self.path, op, escape(&self.value))
    }
}

/// A parsed field selector: the AND of its terms. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses the Kubernetes field selector syntax.
    ///
    /// # Errors
    /// [`SelectorError`] naming the byte position and what was expected.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (start, term) in split_terms(text) {
            if term.is_empty() {
                continue;
            }
            let Some((op_at, op, op_len)) = find_operator(term) else {
                return Err(SelectorError::field(
                    text,
                    start,
                    format!("can't understand '{term}': expected an operator '=', '==' or '!='"),
                ));
            };
            // The operator is ASCII, so both sides end and start on character boundaries.
            let (lhs, rhs) = (
                term.get(..op_at).unwrap_or_default(),
                term.get(op_at + op_len..).unwrap_or_default(),
            );
            let path = FieldPath::parse(lhs).map_err(|m| SelectorError::field(text, start, m))?;
            let rhs_at = start + op_at + op_len;
            let value =
                unescape(rhs).map_err(|(off, m)| SelectorError::field(text, rhs_at + off, m))?;
            requirements.push(FieldRequirement {
                path,
                op,
                value: value.into(),
            });
        }
        // Upstream sorts terms for a deterministic form.
        requirements.sort_by_key(ToString::to_string);
        Ok(FieldSelector { requirements })
    }

    /// The selector with one more `path=value` term, built without parsing: `value` may hold any
    /// character (a watch on an object's own path pins its name this way, whatever the name).
    #[must_use]
    pub fn and_equals(mut self, path: FieldPath, value: impl Into<String>) -> Self {
        self.requirements.push(FieldRequirement {
            path,
            op: FieldOp::Equals,
            value: value.into().into(),
        });
        self.requirements.sort_by_key(ToString::to_string);
        self
    }

    /// The same selector with each term's path replaced by `f`'s (upstream's field label
    /// conversion), or `f`'s first error.
    ///
    /// # Errors
    /// The first error `f` returns.
    pub fn map_paths<E>(
        &self,
        mut f: impl FnMut(&FieldPath) -> Result<FieldPath, E>,
    ) -> Result<FieldSelector, E> {
        let mut requirements = Vec::with_capacity(self.requirements.len());
        for r in &self.requirements {
            requirements.push(FieldRequirement {
                path: f(&r.path)?,
                op: r.op,
                value: r.value.clone(),
            });
        }
        requirements.sort_by_key(ToString::to_string);
        Ok(FieldSelector { requirements })
    }

    /// The terms.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value this selector requires `path` to equal, if any term pins it.
    pub fn required_value(&self, path: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.is_equality() && r.path.as_str() == path)
            .map(|r| &*r.value)
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, SelectorError> {
        Self::parse(s)
    }
}

/// Splits on commas not preceded by an escaping backslash, keeping each term's byte offset.
fn split_terms(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b',' {
            out.push((start, s.get(start..i).unwrap_or_default()));
            start = i + 1;
        }
    }
    out.push((start, s.get(start..).unwrap_or_default()));
    out
}

/// The first position at which `!=`, `==` or `=` starts, trying them in that order at each position.
fn find_operator(term: &str) -> Option<(usize, FieldOp, usize)> {
    let b = term.as_bytes();
    (0..b.len()).find_map(|i| {
        let rest = b.get(i..).unwrap_or_default();
        if rest.starts_with(b"!=") {
            Some((i, FieldOp::NotEquals, 2))
        } else if rest.starts_with(b"==") {
            Some((i, FieldOp::DoubleEquals, 2))
        } else if rest.starts_with(b"=") {
            Some((i, FieldOp::Equals, 1))
        } else {
            None
        }
    })
}

fn unescape(s: &str) -> Result<String, (usize, String)> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e @ ('\\' | ',' | '='))) => out.push(e),
                Some((_, e)) => {
                    return Err((
                        i,
                        format!("invalid escape sequence '\\{e}': expected '\\\\', '\\,' or '\\='"),
                    ));
                }
                None => return Err((i, "invalid escape sequence: trailing '\\'".into())),
            },
            ',' | '=' => return Err((i, format!("unescaped '{c}' in value: write it as '\\{c}'"))),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

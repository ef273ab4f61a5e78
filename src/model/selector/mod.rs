//! Field and label selectors, and the predicate a LIST or WATCH evaluates on objects.
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

mod field;
mod label;
mod predicate;

pub use crate::model::labels::validate_key as validate_label_key;
pub use field::{FieldOp, FieldRequirement, FieldSelector};
pub use label::{LabelOp, LabelRequirement, LabelSelector};
pub(crate) use predicate::Predicate;

use std::fmt;

use crate::error::Error;
use crate::model::shard::ShardSelector;

/// A selector that did not parse: which kind, the input, the byte position and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError {
    kind: &'static str,
    input: String,
    position: usize,
    message: String,
}

impl SelectorError {
    fn label(input: &str, position: usize, message: String) -> Self {
        SelectorError {
            kind: "label",
            input: input.to_owned(),
            position,
            message,
        }
    }

    fn field(input: &str, position: usize, message: String) -> Self {
        SelectorError {
            kind: "field",
            input: input.to_owned(),
            position,
            message,
        }
    }

    /// The byte offset in the input where the problem is.
    pub fn position(&self) -> usize {
        self.position
    }

    /// What was wrong or expected there.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unable to parse {} selector \"{}\": at position {}: {}",
            self.kind, self.input, self.position, self.message
        )
    }
}

impl std::error::Error for SelectorError {}

impl From<SelectorError> for Error {
    fn from(e: SelectorError) -> Self {
        Error::bad_request_from(e)
    }
}

/// What a LIST or WATCH selects: an optional namespace plus field and label selectors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only objects in this namespace (the request path's namespace).
    pub namespace: Option<String>,
    /// The field selector.
    pub fields: FieldSelector,
    /// The label selector.
    pub labels: LabelSelector,
    /// The `shardSelector`: only objects whose hashed field falls in one of its ranges.
    pub shard: Option<ShardSelector>,
}

impl Selection {
    /// Everything in the resource.
    pub fn all() -> Self {
        Self::default()
    }

    /// Parses both selectors from their wire form (empty strings select everything).
    ///
    /// # Errors
    /// [`Error::BadRequest`] naming the selector, the position and what was expected.
    pub fn parse(
        namespace: Option<&str>,
        field_selector: &str,
        label_selector: &str,
    ) -> Result<Self, Error> {
        Ok(Selection {
            namespace: namespace.map(str::to_owned),
            fields: FieldSelector::parse(field_selector)?,
            labels: LabelSelector::parse(label_selector)?,
            shard: None,
        })
    }

    /// Restricts to one namespace.
    #[must_use]
    pub fn in_namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// Sets the field selector from its wire form.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when it does not parse.
    pub fn with_fields(mut self, field_selector: &str) -> Result<Self, Error> {
        self.fields = FieldSelector::parse(field_selector)?;
        Ok(self)
    }

    /// Sets the `shardSelector` from its wire form (KEP-5866; see [`ShardSelector`]).
    ///
    /// # Errors
    /// [`Error::BadRequest`] naming the position, in upstream's words.
    pub fn with_shard(mut self, shard_selector: &str) -> Result<Self, Error> {
        self.shard = Some(ShardSelector::parse(shard_selector)?);
        Ok(self)
    }

    /// Sets the label selector from its wire form.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when it does not parse.
    pub fn with_labels(mut self, label_selector: &str) -> Result<Self, Error> {
        self.labels = LabelSelector::parse(label_selector)?;
        Ok(self)
    }
}

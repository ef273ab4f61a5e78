//! The model layer: what a resource and its objects are, independent of caching, storage and
//! serving. Resource definitions and their compiled schema, decoded objects, field paths, label
//! syntax, selectors, resourceVersions and event types. Pure code: no I/O, no tasks, and no lock but
//! the leaf mutex of an object's field memo (`field_memo.rs`).
//!
//! ## Dependencies
//! This layer depends on nothing else in the crate but [`crate::error`]; every other layer depends
//! on it.

pub mod columns;
pub(crate) mod crd;
mod crd_storage;
pub mod definition;
mod event_type;
pub(crate) mod field_labels;
pub(crate) mod field_memo;
pub(crate) mod field_path;
pub(crate) mod labels;
pub(crate) mod members;
pub mod names;
mod object;
mod packed;
pub(crate) mod printers;
pub mod protobuf;
mod quantity;
mod resource_version;
pub(crate) mod schema;
pub mod selector;
pub(crate) mod shard;
pub(crate) mod structural;

pub use columns::{Computed, PrinterColumn};
pub use crd::CrdServing;
pub use definition::{
    DefinitionError, FieldLabels, HistoryConfig, IndexDef, IndexKey, ResourceDef,
};
pub use event_type::EventType;
pub use field_path::FieldPath;
pub(crate) use object::ObjectKey;
pub use object::{DecodeError, Decoder, EncodeCounts, EncodeError, Object, encode_counts};
pub use quantity::Quantity;

/// The annotation of the bookmark that ends a WatchList's initial events (`"true"`).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";
pub use resource_version::{ResourceVersion, RvMatch};
pub(crate) use schema::{Attr, Schema};
pub use selector::{FieldSelector, LabelSelector, Selection, SelectorError};
pub use shard::{ShardKey, ShardRange, ShardSelector, ShardSelectorError};

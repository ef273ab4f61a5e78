//! Wire encoding: everything the cache and the server write, in every format. Objects are
//! encoded once, on ingest, by the model (their JSON, their stored protobuf); this layer puts
//! them in what goes out (watch frames, list bodies, `Status`, the conversions a client can ask
//! for) and makes each variant of an object at most once per event.
//!
//! It sits between the model and the cache (`model ← wire ← cache ← server`): the cache keeps
//! an event's [`EventMemo`] beside the event without reading it, and its streams yield events
//! that a watch's [`Encoder`] frames; the server's negotiation (`server/http/negotiate.rs`)
//! picks a [`format::Format`] per request, and a watch's encoder.
//!
//! | File | What |
//! |---|---|
//! | `body.rs` | a GET's or a LIST's body in its negotiated `Variant` |
//! | `encoder.rs` | a watch's `Encoder` per format and variant, the per-event `EventMemo` they share, the `Frame` they make; the stored formats' (JSON, protobuf, with its frame heads); a watch's `Wire` (a stored format in a byte) or `WatchEncoder`; bookmarks |
//! | `format.rs` | the variants: `Format`, `Fields` (all, or without managed fields) |
//! | `list.rs` | a LIST page (`ObjectList`) as pieces, JSON and protobuf |
//! | `protobuf.rs` | protobuf list envelopes and `Status`, as kube-apiserver |
//! | `status.rs` | `Status`, the body of every error, JSON and protobuf |
//! | `managed_fields.rs` | an object's JSON and protobuf without `metadata.managedFields` |
//! | `partial.rs` | `PartialObjectMetadata` in protobuf and JSON |
//! | `convert.rs` | Table, PartialObjectMetadata and variants for LIST, GET and WATCH (a watch's `WatchConverter` encoder) |
//! | `go_json.rs` | JSON as Go's encoding/json writes it |
//! | `version.rs` | a custom resource's JSON at another served version of its CRD (conversion `None`) |
//!
//! Adding a format: its encoder (an [`Encoder`] for watches, in a file of its own), its
//! [`format::Format`] variant with its GET and LIST arms (`format.rs`, `body.rs`), and the media
//! range that selects it in `server/http/negotiate.rs`, which also hands watches its encoder.
//! Nothing in the cache changes: it keeps each event's [`EventMemo`], and never reads it.

pub mod body;
pub mod convert;
pub mod encoder;
pub mod format;
pub(crate) mod go_json;
mod list;
pub mod managed_fields;
pub(crate) mod partial;
pub(crate) mod protobuf;
pub mod status;
pub mod version;

pub(crate) use encoder::bookmark_object;
pub use encoder::{
    Encoder, EncoderId, Event, EventMemo, Frame, JSON, JsonFrames, PROTOBUF, ProtobufFrames,
};
pub use list::{
    ObjectList, list_parts, list_parts_protobuf, list_parts_protobuf_with, list_parts_with,
};

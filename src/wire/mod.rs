//! Wire encoding: everything the cache and the server write, in every format. Objects are
//! encoded once, on ingest, by the model (their JSON, their stored protobuf); this layer puts
//! them in what goes out (watch frames, list bodies, `Status`, the conversions a client can ask
//! for) and makes each variant of an object at most once per event.
//!
//! It sits between the model and the cache (`model ← wire ← cache ← server`): the cache keeps
//! an event's encodings beside the event and frames what its streams yield with [`Frame`]; the
//! server's negotiation (`server/http/negotiate.rs`) picks a [`format::Format`] per request and
//! hands it here.
//!
//! | File | What |
//! |---|---|
//! | `encoder.rs` | a watch's `Encoder` per format and variant, the per-event `EventMemo` they share; JSON's |
//! | `format.rs` | the variants: `Format`, `Fields` (all, or without managed fields) |
//! | `frame.rs` | a watch event's frame as three shared pieces; bookmarks |
//! | `list.rs` | a LIST page (`ObjectList`) as pieces, JSON and protobuf |
//! | `protobuf.rs` | the protobuf watch encoder; frame heads, list envelopes and `Status`, as kube-apiserver |
//! | `status.rs` | `Status`, the body of every error, JSON and protobuf |
//! | `managed_fields.rs` | an object's JSON and protobuf without `metadata.managedFields` |
//! | `partial.rs` | `PartialObjectMetadata` in protobuf and JSON |
//! | `convert.rs` | Table, PartialObjectMetadata and variants for LIST, GET and WATCH (a watch's `WatchConverter` encoder) |
//! | `go_json.rs` | JSON as Go's encoding/json writes it |
//! | `version.rs` | a custom resource's JSON at another served version of its CRD (conversion `None`) |
//!
//! Adding a format: a [`format::Format`] variant, its encoding here (a file when it is more
//! than a few lines), its arm in `convert.rs` (LIST, GET, a watch event) and the media range
//! that selects it in `server/http/negotiate.rs`. Nothing in the cache changes.

pub mod convert;
pub mod encoder;
pub mod format;
mod frame;
pub(crate) mod go_json;
mod list;
pub mod managed_fields;
pub(crate) mod partial;
pub(crate) mod protobuf;
pub mod status;
pub mod version;

pub use encoder::{Encoder, EncoderId, Event, EventMemo, JSON, JsonFrames};
pub use frame::Frame;
pub(crate) use frame::bookmark_object;
pub use list::{
    ObjectList, list_parts, list_parts_protobuf, list_parts_protobuf_with, list_parts_with,
};
pub use protobuf::{PROTOBUF, ProtobufFrames};

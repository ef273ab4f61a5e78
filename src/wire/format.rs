//! The wire variants: what an answer is encoded as ([`Format`], and a watch's frames as [`Wire`])
//! and which of an object's fields it keeps ([`Fields`]). The server's negotiation picks one per
//! request (`server/http/negotiate.rs`); everything else in this folder encodes it.

use crate::model::EncodeError;
use crate::wire::encoder::{Encoder, Event, JsonFrames};
use crate::wire::frame::Frame;
use crate::wire::protobuf::ProtobufFrames;
use crate::wire::status::Status;

/// What a request is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// The resource's own JSON (`application/json`).
    Json,
    /// A `meta.k8s.io` Table (kubectl's human-readable output).
    Table(MetaVersion),
    /// `PartialObjectMetadata` (single objects and watch events) or `PartialObjectMetadataList`
    /// (lists): metadata only (client-go's metadata client).
    Metadata(MetaVersion),
    /// Aggregated discovery, `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`.
    AggregatedDiscovery,
    /// Kubernetes protobuf (`application/vnd.kubernetes.protobuf`): built-in kinds only.
    Protobuf,
    /// `meta.k8s.io/v1` `PartialObjectMetadata` (or its List) in protobuf: what client-go's
    /// metadata client asks for first, for every resource (custom ones too, as upstream).
    MetadataProtobuf,
}

/// Which of an object's fields an answer carries: all, or all but `metadata.managedFields`
/// (`drop=metadata.managedFields`, KEP-5958). JSON and protobuf objects, lists and watch events,
/// and PartialObjectMetadata, honour it; a Table's rows are left as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fields {
    /// The object as stored.
    #[default]
    All,
    /// Without `metadata.managedFields`.
    WithoutManaged,
}

impl Fields {
    /// The label of this variant in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Fields::All => "all",
            Fields::WithoutManaged => "without-managed-fields",
        }
    }
}

/// The `meta.k8s.io` version a Table or PartialObjectMetadata is asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaVersion {
    /// `meta.k8s.io/v1`.
    V1,
    /// `meta.k8s.io/v1beta1`.
    V1beta1,
}

impl MetaVersion {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub(crate) fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }

    /// `v1` or `v1beta1` (an `as=` range's `v=`).
    pub fn parse(v: &str) -> Option<MetaVersion> {
        match v {
            "v1" => Some(MetaVersion::V1),
            "v1beta1" => Some(MetaVersion::V1beta1),
            _ => None,
        }
    }
}

/// A watch's frames in one of the stored formats: the object's own JSON or protobuf, as
/// [`JsonFrames`] and [`ProtobufFrames`] make them, chosen in a byte (a watch holds it for its
/// life, and nearly every watch is one of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// One `{"type":...,"object":...}` line per event (`application/json`).
    Json,
    /// Length-prefixed `metav1.WatchEvent` messages
    /// (`application/vnd.kubernetes.protobuf;stream=watch`).
    Protobuf,
}

impl Wire {
    /// The response's Content-Type.
    pub fn content_type(self) -> &'static str {
        match self {
            Wire::Json => JsonFrames.content_type(),
            Wire::Protobuf => ProtobufFrames.content_type(),
        }
    }

    /// The event's frame.
    ///
    /// # Errors
    /// As [`Encoder::frame`].
    pub fn frame(self, ev: &dyn Event) -> Result<Frame, EncodeError> {
        match self {
            Wire::Json => JsonFrames.frame(ev),
            Wire::Protobuf => ProtobufFrames.frame(ev),
        }
    }

    /// The frame of an ERROR event carrying this error's `Status`.
    pub fn error_frame(self, status: &Status) -> Frame {
        match self {
            Wire::Json => JsonFrames.error_frame(status),
            Wire::Protobuf => ProtobufFrames.error_frame(status),
        }
    }
}

/// The encoder a watch was negotiated: a stored format, or one of its own (a conversion, another
/// format), which the watch keeps boxed.
pub enum WatchEncoder {
    /// The object's own JSON or protobuf.
    Stored(Wire),
    /// Any other [`Encoder`].
    Own(Box<dyn Encoder>),
}

impl WatchEncoder {
    /// The response's Content-Type.
    pub fn content_type(&self) -> &'static str {
        match self {
            WatchEncoder::Stored(w) => w.content_type(),
            WatchEncoder::Own(e) => e.content_type(),
        }
    }

    /// The frame of an ERROR event carrying this error's `Status`.
    pub fn error_frame(&self, status: &Status) -> Frame {
        match self {
            WatchEncoder::Stored(w) => w.error_frame(status),
            WatchEncoder::Own(e) => e.error_frame(status),
        }
    }
}

impl std::fmt::Debug for WatchEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchEncoder::Stored(w) => f.debug_tuple("Stored").field(w).finish(),
            WatchEncoder::Own(e) => f.debug_tuple("Own").field(&e.id().as_str()).finish(),
        }
    }
}

/// A watch's frames: their format and the fields their objects keep.
pub type WatchWire = (Wire, Fields);

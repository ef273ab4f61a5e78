//! The wire variants: what an answer is encoded as ([`Format`]) and which of an object's fields it
//! keeps ([`Fields`]). The server's negotiation picks one per
//! request (`server/http/negotiate.rs`); everything else in this folder encodes it.

pub use crate::wire::encoder::{WatchEncoder, Wire};

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

impl Format {
    /// The label of this format in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Protobuf => "protobuf",
            Format::Table(_) => "table",
            Format::Metadata(_) => "metadata",
            Format::MetadataProtobuf => "metadata-protobuf",
            Format::AggregatedDiscovery => "discovery",
        }
    }
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

/// A watch's frames: their format and the fields their objects keep.
pub type WatchWire = (Wire, Fields);

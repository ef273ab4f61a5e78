//! Content negotiation: which output format an `Accept` header asks for, among those this server
//! can produce for the request. Upstream never answers a format the client did not accept: it
//! converts (Table, PartialObjectMetadata) or answers 406 NotAcceptable. So does this.
//!
//! Media ranges are tried by decreasing `q` (stable for equal `q`, so the client's order decides),
//! and the first one this server can serve wins. A range with an `as=` target this server cannot
//! produce for this request (a list target on a single object, an unknown group or version, a
//! protobuf or YAML type) is skipped, as upstream skips it; if none is left, 406.
//!
//! New wire formats (protobuf) are one more [`Format`] variant and one more arm in
//! [`Format::from_range`].

use axum::http::{HeaderMap, header};

use crate::server::status::ApiError;

/// What a request is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Format {
    /// The resource's own JSON (`application/json`).
    Json,
    /// A `meta.k8s.io` Table (kubectl's human-readable output).
    Table(MetaVersion),
    /// `PartialObjectMetadata` (single objects and watch events) or `PartialObjectMetadataList`
    /// (lists): metadata only (client-go's metadata client).
    Metadata(MetaVersion),
    /// Aggregated discovery, `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`.
    AggregatedDiscovery,
}

/// The `meta.k8s.io` version a Table or PartialObjectMetadata is asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum MetaVersion {
    V1,
    V1beta1,
}

impl MetaVersion {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }

    fn parse(v: &str) -> Option<MetaVersion> {
        match v {
            "v1" => Some(MetaVersion::V1),
            "v1beta1" => Some(MetaVersion::V1beta1),
            _ => None,
        }
    }
}

/// What is being answered: the targets an `as=` parameter may name depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A LIST of a resource.
    List,
    /// A GET of one object, or a WATCH (whose events each carry one object).
    Object,
    /// A discovery document (`/api`, `/apis`).
    Discovery,
    /// A write's answer, or any other document: JSON only.
    Plain,
}

/// One media range of an Accept header.
struct Range<'a> {
    essence: &'a str,
    q: f32,
    as_: Option<&'a str>,
    g: Option<&'a str>,
    v: Option<&'a str>,
}

fn parse_range(text: &str) -> Option<Range<'_>> {
    let mut parts = text.split(';');
    let essence = parts.next()?.trim();
    if essence.is_empty() {
        return None;
    }
    let mut r = Range {
        essence,
        q: 1.0,
        as_: None,
        g: None,
        v: None,
    };
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"');
        match k.trim() {
            "q" => r.q = v.parse().unwrap_or(0.0),
            "as" => r.as_ = Some(v),
            "g" => r.g = Some(v),
            "v" => r.v = Some(v),
            _ => {}
        }
    }
    Some(r)
}

impl Format {
    /// The format one media range asks for, if this server can produce it for `answer`.
    fn from_range(r: &Range<'_>, answer: Answer) -> Option<Format> {
        let json = r.essence.eq_ignore_ascii_case("application/json");
        let any = r.essence == "*/*" || r.essence.eq_ignore_ascii_case("application/*");
        if !(json || any) {
            return None;
        }
        let Some(target) = r.as_ else {
            return Some(Format::Json);
        };
        if !json {
            return None;
        }
        match (target, r.g, answer) {
            ("Table", Some("meta.k8s.io"), Answer::List | Answer::Object) => {
                MetaVersion::parse(r.v?).map(Format::Table)
            }
            ("PartialObjectMetadataList", Some("meta.k8s.io"), Answer::List)
            | ("PartialObjectMetadata", Some("meta.k8s.io"), Answer::Object) => {
                MetaVersion::parse(r.v?).map(Format::Metadata)
            }
            ("APIGroupDiscoveryList", Some("apidiscovery.k8s.io"), Answer::Discovery)
                if r.v == Some("v2") =>
            {
                Some(Format::AggregatedDiscovery)
            }
            _ => None,
        }
    }

    /// The format the request's `Accept` header asks for.
    ///
    /// # Errors
    /// 406 NotAcceptable when no media range of the header can be served for this answer.
    pub fn negotiate(headers: &HeaderMap, answer: Answer) -> Result<Format, ApiError> {
        let values: Vec<&str> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let text = values.join(",");
        Self::negotiate_text(&text, answer)
    }

    /// Whether a watch with this Accept header is answered in plain JSON (the fast path's only
    /// format).
    pub fn is_plain_json(accept: &str) -> bool {
        matches!(
            Self::negotiate_text(accept, Answer::Object),
            Ok(Format::Json)
        )
    }

    fn negotiate_text(accept: &str, answer: Answer) -> Result<Format, ApiError> {
        let mut ranges: Vec<Range<'_>> = accept.split(',').filter_map(parse_range).collect();
        if ranges.is_empty() {
            return Ok(Format::Json);
        }
        // Stable: equal q keeps the client's order.
        ranges.sort_by(|a, b| b.q.total_cmp(&a.q));
        ranges
            .iter()
            .filter(|r| r.q > 0.0)
            .find_map(|r| Self::from_range(r, answer))
            .ok_or_else(|| not_acceptable(accept))
    }

    /// The Content-Type a response in this format carries.
    pub fn content_type(self, answer: Answer) -> String {
        match (self, answer) {
            (Format::Json, _) => "application/json".into(),
            (Format::Table(v), _) => {
                format!("application/json;as=Table;v={};g=meta.k8s.io", version(v))
            }
            (Format::Metadata(v), Answer::List) => format!(
                "application/json;as=PartialObjectMetadataList;v={};g=meta.k8s.io",
                version(v)
            ),
            (Format::Metadata(v), _) => format!(
                "application/json;as=PartialObjectMetadata;v={};g=meta.k8s.io",
                version(v)
            ),
            (Format::AggregatedDiscovery, _) => {
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList".into()
            }
        }
    }
}

fn version(v: MetaVersion) -> &'static str {
    match v {
        MetaVersion::V1 => "v1",
        MetaVersion::V1beta1 => "v1beta1",
    }
}

/// Upstream's answer when nothing in Accept can be served (`NewNotAcceptableError`).
fn not_acceptable(accept: &str) -> ApiError {
    ApiError::new(
        406,
        "NotAcceptable",
        format!(
            "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io (asked for: {accept})"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn neg(accept: &str, answer: Answer) -> Result<Format, u16> {
        Format::negotiate_text(accept, answer).map_err(|e| e.code())
    }

    #[test]
    fn kubectl_gets_a_table_and_plain_clients_json() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            neg(kubectl, Answer::List),
            Ok(Format::Table(MetaVersion::V1))
        );
        assert_eq!(
            neg(kubectl, Answer::Object),
            Ok(Format::Table(MetaVersion::V1))
        );
        // A write's answer is never a Table: the JSON fallback is taken.
        assert_eq!(neg(kubectl, Answer::Plain), Ok(Format::Json));
        assert_eq!(neg("", Answer::List), Ok(Format::Json));
        assert_eq!(neg("*/*", Answer::List), Ok(Format::Json));
        assert_eq!(
            neg("application/json, */*", Answer::Object),
            Ok(Format::Json)
        );
        assert_eq!(
            neg(
                "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
                Answer::List
            ),
            Ok(Format::Table(MetaVersion::V1beta1))
        );
    }

    #[test]
    fn metadata_clients_get_metadata_or_406_never_a_full_list() {
        let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(
            neg(list, Answer::List),
            Ok(Format::Metadata(MetaVersion::V1))
        );
        // The single-object target does not serve a list, and nothing else was accepted.
        assert_eq!(
            neg(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
                Answer::List
            ),
            Err(406)
        );
        let informer = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            neg(informer, Answer::Object),
            Ok(Format::Metadata(MetaVersion::V1))
        );
        for bad in [
            "application/json;as=Table;g=meta.k8s.io;v=v2",
            "application/json;as=Unknown;g=meta.k8s.io;v=v1",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
            "text/html",
            "application/json;q=0",
        ] {
            assert_eq!(neg(bad, Answer::List), Err(406), "{bad}");
        }
    }

    #[test]
    fn q_values_order_the_ranges() {
        assert_eq!(
            neg(
                "application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io",
                Answer::List
            ),
            Ok(Format::Table(MetaVersion::V1))
        );
        assert_eq!(
            neg(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
                Answer::Discovery
            ),
            Ok(Format::AggregatedDiscovery)
        );
        assert_eq!(
            neg(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
                Answer::List
            ),
            Ok(Format::Json)
        );
    }
}

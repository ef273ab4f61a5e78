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
//!
//! A range's `drop=` parameter (KEP-5958) names fields to leave out, joined by `+`: the chosen
//! range's `metadata.managedFields` makes the answer [`Fields::WithoutManaged`]. Other targets
//! are ignored, as upstream ignores them (forward compatible: never 406).

use axum::http::{HeaderMap, header};

use crate::http::status::ApiError;
use watchcache::ResourceDef;
pub(crate) use watchcache::wire::convert::IncludeObject;
use watchcache::wire::convert::{MadeCounter, WatchConverter};
pub(crate) use watchcache::wire::format::{
    Fields, Format, MetaVersion, WatchEncoder, WatchWire, Wire,
};

/// The encoder of a watch of `def` negotiated as `format` with `fields` (`other_version`: `def`
/// is another served version of a CRD than its cache's): the object's own frames when nothing is
/// converted, else a converter of its own. `made` counts the conversions the watch makes.
///
/// A new watch format is its [`Encoder`](watchcache::wire::Encoder) (its own file in `wire/`) and
/// its arm here, from the media range [`Format::from_range`] read.
pub(crate) fn watch_encoder(
    def: &ResourceDef,
    format: Format,
    include: IncludeObject,
    fields: Fields,
    other_version: bool,
    made: impl FnOnce() -> MadeCounter,
) -> WatchEncoder {
    match WatchConverter::new(def, format, include, fields, other_version, made) {
        Some(c) => WatchEncoder::Own(Box::new(c)),
        None => match format {
            Format::Protobuf | Format::MetadataProtobuf => WatchEncoder::Stored(Wire::Protobuf),
            _ => WatchEncoder::Stored(Wire::Json),
        },
    }
}

/// The `drop=` target that leaves managed fields out.
const DROP_MANAGED_FIELDS: &str = "metadata.managedFields";

/// The protobuf media type.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// `includeObject` read from a query string (an extension of the core's [`IncludeObject`]).
pub(crate) trait FromQuery: Sized {
    /// Reads `includeObject` from a query string.
    ///
    /// # Errors
    /// 400 for a value other than None, Metadata or Object (upstream's message).
    fn from_query(query: Option<&str>) -> Result<IncludeObject, ApiError>;
}

impl FromQuery for IncludeObject {
    fn from_query(query: Option<&str>) -> Result<IncludeObject, ApiError> {
        let mut out = IncludeObject::default();
        for (k, v) in crate::http::params::query_pairs(query) {
            if k == "includeObject" {
                out = match &*v {
                    "None" => IncludeObject::None,
                    "Metadata" | "" => IncludeObject::Metadata,
                    "Object" => IncludeObject::Object,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "includeObject: Unsupported value: \"{other}\": supported values: \"Metadata\", \"None\", \"Object\""
                        )));
                    }
                };
            }
        }
        Ok(out)
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
    /// A write's answer (the object, a `Status`, or a deleted collection) or an error's
    /// `Status`: JSON, or protobuf for built-ins; never converted (upstream's
    /// `DefaultEndpointRestrictions` skip `as=` targets there).
    Written,
    /// A write's answer, or any other document: JSON only.
    Plain,
}

/// One media range of an Accept header.
pub(crate) struct Range<'a> {
    essence: &'a str,
    q: f32,
    as_: Option<&'a str>,
    g: Option<&'a str>,
    v: Option<&'a str>,
    /// `drop=` names `metadata.managedFields`.
    drop_managed: bool,
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
        drop_managed: false,
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
            "drop" => r.drop_managed = v.split('+').any(|t| t == DROP_MANAGED_FIELDS),
            _ => {}
        }
    }
    Some(r)
}

/// Content negotiation of a core [`Format`]: which one a request's `Accept` asks for, and the
/// Content-Type it answers with.
pub(crate) trait Negotiate: Sized {
    /// The format one media range asks for, if this server can produce it for `answer`
    /// (`protobuf`: the resource is a built-in kind, which upstream also serves in protobuf).
    fn from_range(r: &Range<'_>, answer: Answer, protobuf: bool) -> Option<Format>;

    /// The format the request's `Accept` header asks for.
    ///
    /// # Errors
    /// 406 NotAcceptable when no media range of the header can be served for this answer.
    fn negotiate(headers: &HeaderMap, answer: Answer) -> Result<Format, ApiError>;

    /// [`negotiate`](Format::negotiate) for a resource that is served in protobuf too
    /// (`protobuf`: a built-in kind; custom resources are JSON only, as upstream's).
    ///
    /// # Errors
    /// 406 NotAcceptable when no media range of the header can be served for this answer.
    fn negotiate_for(
        headers: &HeaderMap,
        answer: Answer,
        protobuf: bool,
    ) -> Result<Format, ApiError>;

    /// The frames of a watch with this Accept header, when the fast path can serve it: for a
    /// built-in resource, and for a custom one (`None`: hyper negotiates, converts or answers
    /// 406). `None` overall: hyper serves the watch whatever the resource.
    fn watch_wire(accept: &str) -> Option<(WatchWire, Option<WatchWire>)>;

    /// [`negotiate_for`](Format::negotiate_for), with the fields the chosen range keeps.
    ///
    /// # Errors
    /// 406 NotAcceptable when no media range of the header can be served for this answer.
    fn negotiate_fields(
        headers: &HeaderMap,
        answer: Answer,
        protobuf: bool,
    ) -> Result<(Format, Fields), ApiError>;

    #[cfg(test)]
    fn negotiate_text(accept: &str, answer: Answer) -> Result<Format, ApiError>;

    fn negotiate_text_for(accept: &str, answer: Answer, protobuf: bool)
    -> Result<Format, ApiError>;

    fn negotiate_fields_text(
        accept: &str,
        answer: Answer,
        protobuf: bool,
    ) -> Result<(Format, Fields), ApiError>;

    /// The Content-Type a response in this format carries: kube-apiserver names the media type
    /// it serialized with, without the conversion's `as=` parameters (a Table or a
    /// PartialObjectMetadata is `application/json`); aggregated discovery keeps them.
    fn content_type(self, _answer: Answer) -> String;
}

impl Negotiate for Format {
    fn from_range(r: &Range<'_>, answer: Answer, protobuf: bool) -> Option<Format> {
        if r.essence.eq_ignore_ascii_case(PROTOBUF) {
            // PartialObjectMetadata (v1) is served in protobuf for every resource, as upstream
            // does; a Table has no protobuf form (upstream's is JSON only) and is skipped for the
            // client's JSON alternative.
            return match (r.as_, r.g, r.v, answer) {
                (None, _, _, Answer::List | Answer::Object | Answer::Written) if protobuf => {
                    Some(Format::Protobuf)
                }
                (
                    Some("PartialObjectMetadataList"),
                    Some("meta.k8s.io"),
                    Some("v1"),
                    Answer::List,
                )
                | (
                    Some("PartialObjectMetadata"),
                    Some("meta.k8s.io"),
                    Some("v1"),
                    Answer::Object,
                ) => Some(Format::MetadataProtobuf),
                _ => None,
            };
        }
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

    fn negotiate(headers: &HeaderMap, answer: Answer) -> Result<Format, ApiError> {
        Self::negotiate_for(headers, answer, false)
    }

    fn negotiate_for(
        headers: &HeaderMap,
        answer: Answer,
        protobuf: bool,
    ) -> Result<Format, ApiError> {
        let values: Vec<&str> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let text = values.join(",");
        Self::negotiate_text_for(&text, answer, protobuf)
    }

    fn watch_wire(accept: &str) -> Option<(WatchWire, Option<WatchWire>)> {
        let wire = |protobuf| match Self::negotiate_fields_text(accept, Answer::Object, protobuf) {
            Ok((Format::Json, f)) => Some((Wire::Json, f)),
            Ok((Format::Protobuf, f)) => Some((Wire::Protobuf, f)),
            _ => None,
        };
        Some((wire(true)?, wire(false)))
    }

    fn negotiate_fields(
        headers: &HeaderMap,
        answer: Answer,
        protobuf: bool,
    ) -> Result<(Format, Fields), ApiError> {
        let values: Vec<&str> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        Self::negotiate_fields_text(&values.join(","), answer, protobuf)
    }

    #[cfg(test)]
    fn negotiate_text(accept: &str, answer: Answer) -> Result<Format, ApiError> {
        Self::negotiate_text_for(accept, answer, false)
    }

    fn negotiate_text_for(
        accept: &str,
        answer: Answer,
        protobuf: bool,
    ) -> Result<Format, ApiError> {
        Self::negotiate_fields_text(accept, answer, protobuf).map(|(f, _)| f)
    }

    fn negotiate_fields_text(
        accept: &str,
        answer: Answer,
        protobuf: bool,
    ) -> Result<(Format, Fields), ApiError> {
        let mut ranges: Vec<Range<'_>> = accept.split(',').filter_map(parse_range).collect();
        if ranges.is_empty() {
            return Ok((Format::Json, Fields::All));
        }
        // Stable: equal q keeps the client's order.
        ranges.sort_by(|a, b| b.q.total_cmp(&a.q));
        ranges
            .iter()
            .filter(|r| r.q > 0.0)
            .find_map(|r| {
                let format = Self::from_range(r, answer, protobuf)?;
                let fields = match format {
                    Format::Json
                    | Format::Protobuf
                    | Format::Metadata(_)
                    | Format::MetadataProtobuf
                        if r.drop_managed =>
                    {
                        Fields::WithoutManaged
                    }
                    _ => Fields::All,
                };
                Some((format, fields))
            })
            .ok_or_else(|| not_acceptable(accept, protobuf))
    }

    fn content_type(self, _answer: Answer) -> String {
        match self {
            Format::Json | Format::Table(_) | Format::Metadata(_) => "application/json".into(),
            Format::AggregatedDiscovery => {
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList".into()
            }
            Format::Protobuf | Format::MetadataProtobuf => PROTOBUF.into(),
        }
    }
}

/// Upstream's answer when nothing in Accept can be served (`NewNotAcceptableError`).
fn not_acceptable(accept: &str, protobuf: bool) -> ApiError {
    let pb = if protobuf {
        ", application/vnd.kubernetes.protobuf"
    } else {
        ""
    };
    ApiError::new(
        406,
        "NotAcceptable",
        format!(
            "only the following media types are accepted: application/json{pb}, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io (asked for: {accept})"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_object_values() {
        assert_eq!(
            IncludeObject::from_query(None).unwrap(),
            IncludeObject::Metadata
        );
        assert_eq!(
            IncludeObject::from_query(Some("includeObject=Object")).unwrap(),
            IncludeObject::Object
        );
        assert_eq!(
            IncludeObject::from_query(Some("includeObject=None")).unwrap(),
            IncludeObject::None
        );
        assert_eq!(
            IncludeObject::from_query(Some("includeObject=All"))
                .unwrap_err()
                .code(),
            400
        );
    }

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
        let informer =
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
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

    fn neg_pb(accept: &str, answer: Answer) -> Result<Format, u16> {
        Format::negotiate_text_for(accept, answer, true).map_err(|e| e.code())
    }

    #[test]
    fn protobuf_is_served_for_built_ins_only() {
        let pb = "application/vnd.kubernetes.protobuf";
        let kubelet = "application/vnd.kubernetes.protobuf, */*";
        let client_go = "application/vnd.kubernetes.protobuf,application/json";
        for a in [
            pb,
            kubelet,
            client_go,
            "application/vnd.kubernetes.protobuf;stream=watch",
        ] {
            assert_eq!(neg_pb(a, Answer::Object), Ok(Format::Protobuf), "{a}");
            assert_eq!(neg_pb(a, Answer::List), Ok(Format::Protobuf), "{a}");
        }
        // Custom resources: JSON when JSON is acceptable, else 406.
        assert_eq!(neg(kubelet, Answer::Object), Ok(Format::Json));
        assert_eq!(neg(client_go, Answer::List), Ok(Format::Json));
        assert_eq!(neg(pb, Answer::Object), Err(406));
        // q-values and wildcards: `*/*` is JSON, the first of upstream's serializers.
        assert_eq!(neg_pb("*/*", Answer::List), Ok(Format::Json));
        assert_eq!(
            neg_pb(
                "application/vnd.kubernetes.protobuf;q=0.5,application/json",
                Answer::List
            ),
            Ok(Format::Json)
        );
        assert_eq!(
            neg_pb(
                "application/json;q=0.5,application/vnd.kubernetes.protobuf",
                Answer::List
            ),
            Ok(Format::Protobuf)
        );
        assert_eq!(
            neg_pb("application/vnd.kubernetes.protobuf;q=0", Answer::List),
            Err(406)
        );
        // Metadata is served in protobuf (custom resources too); Tables in protobuf are
        // skipped for their JSON alternative.
        let informer = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            neg_pb(informer, Answer::Object),
            Ok(Format::MetadataProtobuf)
        );
        assert_eq!(neg(informer, Answer::Object), Ok(Format::MetadataProtobuf));
        assert_eq!(
            neg_pb(
                "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json",
                Answer::List
            ),
            Ok(Format::Json)
        );
        // Discovery stays JSON; writes' answers and errors are protobuf for protobuf clients,
        // and never a conversion.
        assert_eq!(neg_pb(client_go, Answer::Plain), Ok(Format::Json));
        assert_eq!(neg_pb(pb, Answer::Plain), Err(406));
        assert_eq!(neg_pb(client_go, Answer::Written), Ok(Format::Protobuf));
        assert_eq!(neg_pb(informer, Answer::Written), Ok(Format::Json));
        assert_eq!(neg(client_go, Answer::Written), Ok(Format::Json));
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
        assert_eq!(neg_pb(kubectl, Answer::Written), Ok(Format::Json));
    }

    #[test]
    fn the_fast_path_knows_which_watches_it_serves() {
        let all = |w| (w, Fields::All);
        assert_eq!(
            Format::watch_wire(""),
            Some((all(Wire::Json), Some(all(Wire::Json))))
        );
        assert_eq!(
            Format::watch_wire("application/vnd.kubernetes.protobuf, */*"),
            Some((all(Wire::Protobuf), Some(all(Wire::Json))))
        );
        assert_eq!(
            Format::watch_wire("application/vnd.kubernetes.protobuf"),
            Some((all(Wire::Protobuf), None))
        );
        assert_eq!(
            Format::watch_wire("application/json;as=Table;v=v1;g=meta.k8s.io"),
            None
        );
        // Each resource's range brings its own `drop=`.
        assert_eq!(
            Format::watch_wire(
                "application/vnd.kubernetes.protobuf;drop=metadata.managedFields, application/json"
            ),
            Some((
                (Wire::Protobuf, Fields::WithoutManaged),
                Some(all(Wire::Json))
            ))
        );
    }

    fn fields(accept: &str, answer: Answer) -> Result<(Format, Fields), u16> {
        Format::negotiate_fields_text(accept, answer, true).map_err(|e| e.code())
    }

    #[test]
    fn drop_managed_fields_is_a_parameter_of_the_chosen_range() {
        let drop = Fields::WithoutManaged;
        for (accept, want) in [
            (
                "application/json;drop=metadata.managedFields",
                (Format::Json, drop),
            ),
            (
                "application/json; drop=metadata.managedFields",
                (Format::Json, drop),
            ),
            (
                "application/vnd.kubernetes.protobuf;drop=metadata.managedFields",
                (Format::Protobuf, drop),
            ),
            (
                "application/vnd.kubernetes.protobuf;stream=watch;drop=metadata.managedFields",
                (Format::Protobuf, drop),
            ),
            // `+` joins targets; unknown ones are ignored, alone or beside it (never 406).
            (
                "application/json;drop=spec.someFutureField+metadata.managedFields",
                (Format::Json, drop),
            ),
            (
                "application/json;drop=spec.someFutureField",
                (Format::Json, Fields::All),
            ),
            ("application/json;drop=", (Format::Json, Fields::All)),
            ("*/*;drop=metadata.managedFields", (Format::Json, drop)),
            // Only the chosen range's parameter counts.
            (
                "application/vnd.kubernetes.protobuf,application/json;drop=metadata.managedFields",
                (Format::Protobuf, Fields::All),
            ),
            (
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;drop=metadata.managedFields",
                (Format::Metadata(MetaVersion::V1), drop),
            ),
            (
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;drop=metadata.managedFields",
                (Format::MetadataProtobuf, drop),
            ),
            // A Table's rows are left as they are.
            (
                "application/json;as=Table;g=meta.k8s.io;v=v1;drop=metadata.managedFields",
                (Format::Table(MetaVersion::V1), Fields::All),
            ),
        ] {
            assert_eq!(fields(accept, Answer::Object), Ok(want), "{accept}");
        }
    }
}

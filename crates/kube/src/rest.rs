//! The REST calls of one resource on a Kubernetes API server, over kube-rs's client: LIST pages,
//! watch streams read frame by frame, and `Status` errors. Objects stay raw JSON bytes here: the
//! cache decodes them once ([`Cache::decode`](watchcache::Cache::decode)), so nothing on the event path
//! goes through typed structs.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::{debug, warn};

use watchcache::Cause;
use watchcache::protobuf as pb;
use watchcache::{ResourceDef, Selection};
use watchcache_follow::backoff::{Throttle, WARN_EVERY};

use watchcache::INITIAL_EVENTS_END;

/// A failed call: what the API server said, or why there was no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RestError {
    /// The API server answered with an error `Status` (or an HTTP error without one).
    #[error("{code} {reason}: {message}")]
    Status {
        /// The HTTP status code.
        code: u16,
        /// The `Status` reason, e.g. `Expired`.
        reason: String,
        /// The `Status` message.
        message: String,
    },
    /// The request could not be sent, or its answer not read.
    #[error("transport: {message}")]
    Transport {
        /// What failed, with the cause's text.
        message: String,
        /// The client's error.
        #[source]
        cause: Option<Cause>,
    },
    /// The answer was not what the API defines.
    #[error("malformed response: {message}")]
    Malformed {
        /// What is wrong, with the decoder's text.
        message: String,
        /// The decoder's error, when there is one.
        #[source]
        cause: Option<Cause>,
    },
    /// A resourceVersion was not a decimal integer: watchcache needs comparable resourceVersions
    /// (GA in Kubernetes 1.35), which etcd-backed servers and watchcache itself provide.
    #[error(
        "resourceVersion \"{0}\" is not a decimal integer; watchcache needs comparable resourceVersions"
    )]
    NonNumericResourceVersion(String),
    /// No answer in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

impl RestError {
    fn transport(
        context: impl std::fmt::Display,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let (message, cause) = Cause::with_context(context, e);
        RestError::Transport {
            message,
            cause: Some(cause),
        }
    }

    pub(crate) fn malformed(message: impl Into<String>) -> Self {
        RestError::Malformed {
            message: message.into(),
            cause: None,
        }
    }

    fn malformed_from(
        context: impl std::fmt::Display,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let (message, cause) = Cause::with_context(context, e);
        RestError::Malformed {
            message,
            cause: Some(cause),
        }
    }

    /// Whether this is 410 Expired / Gone: the position left the server's window.
    pub fn is_expired(&self) -> bool {
        matches!(self, RestError::Status { code: 410, .. })
    }

    /// The HTTP code, when the server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            RestError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// A Kubernetes `Status` body, as much as we use of it.
#[derive(Deserialize)]
struct StatusBody<'a> {
    #[serde(default)]
    code: u16,
    #[serde(default, borrow)]
    reason: Cow<'a, str>,
    #[serde(default, borrow)]
    message: Cow<'a, str>,
}

/// The error a `Status` stands for; one without a code has the answer's.
fn status_of(answer: StatusCode, code: u16, reason: String, message: String) -> RestError {
    RestError::Status {
        code: if code == 0 { answer.as_u16() } else { code },
        reason,
        message,
    }
}

/// The error for an HTTP error answer: its `Status` (JSON, or protobuf to a request that accepted
/// it), or the raw body when it is none.
pub(crate) fn status_error(code: StatusCode, body: &[u8]) -> RestError {
    if body.starts_with(pb::MAGIC)
        && let Ok(s) = pb::stream::status(body)
    {
        return status_of(code, s.code, s.reason, s.message);
    }
    match serde_json::from_slice::<StatusBody>(body) {
        Ok(s) => status_of(code, s.code, s.reason.into_owned(), s.message.into_owned()),
        Err(_) => RestError::Status {
            code: code.as_u16(),
            reason: code.canonical_reason().unwrap_or("").to_owned(),
            message: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
        },
    }
}

/// Parses a resourceVersion: a decimal u64, or a clear error.
pub(crate) fn parse_rv(s: &str) -> Result<u64, RestError> {
    s.parse::<u64>()
        .map_err(|_| RestError::NonNumericResourceVersion(s.to_owned()))
}

/// What the follower reads of a bookmark's or a list's metadata.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    #[serde(default, borrow)]
    resource_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    annotations: Option<HashMap<Cow<'a, str>, Cow<'a, str>>>,
    #[serde(default, borrow, rename = "continue")]
    continue_token: Option<Cow<'a, str>>,
}

/// An object's identity as the cache keys it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The cache key (`prefix[ns/]name`).
    pub key: String,
    /// The object's resourceVersion.
    pub rv: u64,
}

/// What identifies an object in its metadata.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdMeta<'a> {
    #[serde(default, borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    resource_version: Option<Cow<'a, str>>,
}

/// A top-level member's name, as far as identity goes (no allocation for the others).
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum TopMember {
    Metadata,
    #[serde(other)]
    Other,
}

/// An object's metadata, read without reading past it. The cache decodes the whole object right
/// after (spec and status: most of its bytes, validated there); reading them here as well made
/// this the leaf's largest ingest cost after the decode itself.
fn metadata_first(raw: &[u8]) -> Result<IdMeta<'_>, serde_json::Error> {
    use serde::de::{Error as _, IgnoredAny, MapAccess, Visitor};
    /// What the visitor returns to leave the map unread once metadata is found; serde_json then
    /// fails the call, and the caller takes the metadata instead.
    const FOUND: &str = "metadata found";
    struct Visit<'de, 'r>(&'r mut Option<IdMeta<'de>>);
    impl<'de> Visitor<'de> for Visit<'de, '_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(k) = map.next_key::<TopMember>()? {
                match k {
                    TopMember::Metadata => {
                        *self.0 = Some(map.next_value()?);
                        return Err(A::Error::custom(FOUND));
                    }
                    TopMember::Other => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(raw);
    let read = serde::Deserializer::deserialize_map(&mut de, Visit(&mut found));
    match (found, read) {
        (Some(m), _) => Ok(m),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Err(serde_json::Error::missing_field("metadata")),
    }
}

/// The key and resourceVersion of a raw object of `def`, JSON or protobuf (`k8s\0` + envelope).
pub(crate) fn identity(def: &ResourceDef, raw: &[u8]) -> Result<Identity, RestError> {
    let json;
    // (name, namespace, resourceVersion); protobuf leaves an empty string out.
    let (name, namespace, rv) = if raw.starts_with(pb::MAGIC) {
        let m = pb::stream::identity(raw).map_err(RestError::malformed)?;
        (
            m.name,
            Some(m.namespace).filter(|s| !s.is_empty()),
            Some(m.resource_version).filter(|s| !s.is_empty()),
        )
    } else {
        json = metadata_first(raw)
            .map_err(|e| RestError::malformed_from("an object's metadata", e))?;
        (
            &*json.name,
            json.namespace.as_deref(),
            json.resource_version.as_deref(),
        )
    };
    if name.is_empty() {
        return Err(RestError::malformed("an object without metadata.name"));
    }
    let Some(rv) = rv else {
        return Err(RestError::malformed(format!(
            "object {name} has no metadata.resourceVersion"
        )));
    };
    Ok(Identity {
        key: def.key_for(namespace, name),
        rv: parse_rv(rv)?,
    })
}

/// One page of a LIST.
#[derive(Debug)]
pub(crate) struct ListPage {
    /// The list's resourceVersion (the same on every page of one list).
    pub rv: u64,
    /// The continue token of the next page, if any.
    pub continue_token: Option<String>,
    /// The raw items: JSON objects, or protobuf ones in their `k8s\0` + envelope, as a watch
    /// frame carries them.
    pub items: Vec<Bytes>,
    /// The answer's `X-Watchcache-Origin` (see [`Cache::origin`](watchcache::Cache::origin)).
    pub origin: Option<u64>,
}

#[derive(Deserialize)]
struct ListBody<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
    /// `null` in an empty `PartialObjectMetadataList` (Go's nil slice), `[]` in typed lists.
    #[serde(default, borrow)]
    items: Option<Vec<&'a RawValue>>,
}

/// Whether a JSON object names its `kind` or `apiVersion` at its top level.
fn has_type(raw: &str) -> bool {
    #[derive(Deserialize)]
    struct TypeKeys {
        kind: Option<serde::de::IgnoredAny>,
        #[serde(rename = "apiVersion")]
        api_version: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<TypeKeys>(raw).is_ok_and(|t| t.kind.is_some() || t.api_version.is_some())
}

/// `item` with `type_meta` (`"kind":…,"apiVersion":…`) put first, as a watch event's object and
/// a GET carry it.
fn with_type(type_meta: &str, item: &str) -> Bytes {
    let rest = item.strip_prefix('{').unwrap_or(item);
    let sep = if rest.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    let mut out = Vec::with_capacity(item.len() + type_meta.len() + 1);
    out.push(b'{');
    out.extend_from_slice(type_meta.as_bytes());
    out.extend_from_slice(sep.as_bytes());
    out.extend_from_slice(rest.as_bytes());
    Bytes::from(out)
}

/// Parses a JSON LIST body. Typed lists leave their items' `kind` and `apiVersion` out
/// (kube-apiserver's, and ours); an item without them gets `type_meta` (the resource's
/// `"kind":…,"apiVersion":…`), so that a listed object is stored, and served, as a watched one
/// is. Empty `type_meta` keeps items as they are.
pub(crate) fn parse_list(body: &Bytes, type_meta: &str) -> Result<ListPage, RestError> {
    let list: ListBody =
        serde_json::from_slice(body).map_err(|e| RestError::malformed_from("a list", e))?;
    let rv = match list.metadata.resource_version.as_deref() {
        Some(s) => parse_rv(s)?,
        None => {
            return Err(RestError::malformed("a list without a resourceVersion"));
        }
    };
    let items = list
        .items
        .iter()
        .flatten()
        .map(|raw| {
            if type_meta.is_empty() || has_type(raw.get()) {
                body.slice_ref(raw.get().as_bytes())
            } else {
                with_type(type_meta, raw.get())
            }
        })
        .collect();
    Ok(ListPage {
        origin: None,
        rv,
        continue_token: list
            .metadata
            .continue_token
            .filter(|c| !c.is_empty())
            .map(Cow::into_owned),
        items,
    })
}

/// Parses a protobuf LIST body of `item_type`'s (apiVersion, kind) objects. Each item becomes
/// the object a protobuf watch frame carries (`k8s\0` + `runtime.Unknown` {apiVersion, kind}
/// around the item's message, as kube-apiserver's serializer writes an object), so that a listed
/// object is stored as a watched one is. The items of a page share one buffer: the body's size
/// and, per item, the envelope's few bytes.
pub(crate) fn parse_protobuf_list(
    item_type: (&str, &str),
    body: &[u8],
) -> Result<ListPage, RestError> {
    let list = pb::stream::list(body).map_err(|e| RestError::malformed(format!("a list: {e}")))?;
    let (api_version, kind) = item_type;
    if list.api_version != api_version || list.kind.strip_suffix("List") != Some(kind) {
        return Err(RestError::malformed(format!(
            "a list of {} {}, not of {api_version} {kind}",
            list.api_version, list.kind
        )));
    }
    if list.resource_version.is_empty() {
        return Err(RestError::malformed("a list without a resourceVersion"));
    }
    let rv = parse_rv(list.resource_version)?;
    let per_item = ENVELOPE_OVERHEAD + api_version.len() + kind.len();
    let mut buf = Vec::with_capacity(body.len() + list.items.len() * per_item);
    let mut at = Vec::with_capacity(list.items.len());
    for item in &list.items {
        let start = buf.len();
        pb::envelope_into(&mut buf, api_version, kind, item);
        at.push(start..buf.len());
    }
    let buf = Bytes::from(buf);
    Ok(ListPage {
        origin: None,
        rv,
        continue_token: Some(list.continue_token)
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
        items: at.into_iter().map(|r| buf.slice(r)).collect(),
    })
}

/// An envelope's bytes besides its message and type strings (a capacity hint): the magic; the
/// tags and lengths of typeMeta, apiVersion and kind; raw's tag and length (up to 256 MiB in 4
/// bytes); the empty contentEncoding and contentType.
const ENVELOPE_OVERHEAD: usize = 4 + 2 + 2 + 2 + 1 + 4 + 4;

/// One frame of a watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// ADDED or MODIFIED: the object's raw bytes.
    Put(Bytes),
    /// DELETED: the object's last state.
    Delete(Bytes),
    /// BOOKMARK at this resourceVersion; `initial_end` for the end of a WatchList's initial events.
    Bookmark {
        /// The bookmark's resourceVersion.
        rv: u64,
        /// Whether it carries `k8s.io/initial-events-end: "true"`.
        initial_end: bool,
    },
    /// ERROR: the `Status` it carries.
    Error(RestError),
}

#[derive(Deserialize)]
struct FrameBody<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// Parses one frame of a protobuf watch stream (without its 4-byte length).
pub(crate) fn parse_protobuf_frame(frame: &Bytes) -> Result<Frame, RestError> {
    let f = pb::stream::watch_frame(frame).map_err(RestError::malformed)?;
    let object = || frame.slice_ref(f.object);
    match f.kind {
        "ADDED" | "MODIFIED" => Ok(Frame::Put(object())),
        "DELETED" => Ok(Frame::Delete(object())),
        "BOOKMARK" => {
            let id = pb::stream::identity(f.object).map_err(RestError::malformed)?;
            Ok(Frame::Bookmark {
                rv: parse_rv(id.resource_version)?,
                initial_end: id.initial_events_end,
            })
        }
        "ERROR" if f.object.starts_with(pb::MAGIC) => {
            let s = pb::stream::status(f.object).map_err(RestError::malformed)?;
            Ok(Frame::Error(status_of(
                StatusCode::INTERNAL_SERVER_ERROR,
                s.code,
                s.reason,
                s.message,
            )))
        }
        "ERROR" => Ok(Frame::Error(status_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            f.object,
        ))),
        other => Err(RestError::malformed(format!(
            "a watch frame of unknown type \"{other}\""
        ))),
    }
}

/// Parses one line of a watch stream (without its newline).
pub(crate) fn parse_frame(line: &Bytes) -> Result<Frame, RestError> {
    let f: FrameBody =
        serde_json::from_slice(line).map_err(|e| RestError::malformed_from("a watch frame", e))?;
    let object = || line.slice_ref(f.object.get().as_bytes());
    match &*f.kind {
        "ADDED" | "MODIFIED" => Ok(Frame::Put(object())),
        "DELETED" => Ok(Frame::Delete(object())),
        "BOOKMARK" => {
            let env: Envelope = serde_json::from_str(f.object.get())
                .map_err(|e| RestError::malformed_from("a bookmark", e))?;
            let rv = parse_rv(env.metadata.resource_version.as_deref().unwrap_or(""))?;
            let initial_end = env
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INITIAL_EVENTS_END))
                .is_some_and(|v| v == "true");
            Ok(Frame::Bookmark { rv, initial_end })
        }
        "ERROR" => Ok(Frame::Error(status_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            f.object.get().as_bytes(),
        ))),
        other => Err(RestError::malformed(format!(
            "a watch frame of unknown type \"{other}\""
        ))),
    }
}

/// Whether an upstream's watches and LISTs are read in protobuf: decided once per upstream from
/// its `/version`, shared by the `Rest` of each of its resources.
///
/// Protobuf is read only from a server whose Kubernetes version is at most the one whose messages
/// this build knows ([`pb::TABLES_MINOR`]): the JSON that watchcache makes from a protobuf object
/// holds only the fields its tables know, so a newer server's new fields would be missing from
/// it, where its JSON would carry them.
#[derive(Clone)]
pub(crate) struct WireChoice(Arc<(tokio::sync::OnceCell<bool>, Mutex<Throttle>)>);

impl Default for WireChoice {
    fn default() -> Self {
        WireChoice(Arc::new((
            tokio::sync::OnceCell::new(),
            Mutex::new(Throttle::new(WARN_EVERY)),
        )))
    }
}

/// kube-apiserver's `/version`, as much as the choice needs.
#[derive(Deserialize)]
struct Version<'a> {
    #[serde(borrow, default)]
    major: Cow<'a, str>,
    #[serde(borrow, default)]
    minor: Cow<'a, str>,
}

impl WireChoice {
    /// Whether to ask `rest`'s server for protobuf; asked once, then remembered. A failed
    /// `/version` is not remembered: that watch or LIST is read as JSON and the next one asks
    /// again.
    async fn protobuf(&self, rest: &Rest) -> bool {
        let asked = self
            .0
            .0
            .get_or_try_init(|| async {
                let body = rest.get_ok("/version").await?;
                let v: Version = serde_json::from_slice(&body)
                    .map_err(|e| RestError::malformed_from("/version", e))?;
                // "35+" on some distributions.
                let minor = v.minor.trim_end_matches(|c: char| !c.is_ascii_digit());
                let known = v.major == "1" && minor.parse::<u32>().is_ok_and(|m| m <= pb::TABLES_MINOR);
                debug!(major = %v.major, minor = %v.minor, protobuf = known, "upstream version: watches and LISTs read in protobuf when it is not newer than this build's messages");
                Ok::<bool, RestError>(known)
            })
            .await;
        match asked {
            Ok(b) => *b,
            Err(e) => {
                // Asked before every watch and LIST of every resource while it fails: throttled
                // for the whole upstream (the followers log their own failures).
                let admitted = self.0.1.lock().admit(std::time::Instant::now());
                if let Some(n) = admitted {
                    warn!(error = %e, failures = n, "upstream /version unreadable; this watch or LIST is read as JSON (logged once per 10 s)");
                }
                false
            }
        }
    }
}

/// The protobuf side of one resource's reads: the upstream's choice, and the type its objects
/// are enveloped with (a protobuf list's items carry none).
#[derive(Clone)]
pub(crate) struct ProtobufReads {
    choice: WireChoice,
    api_version: String,
    kind: String,
}

/// client-go's `Accept` in protobuf: a server that has no protobuf form of the kind answers JSON,
/// and the answer's `Content-Type` says which.
const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// A LIST of the objects' metadata alone (`PartialObjectMetadataList`), as metadata informers
/// ask for it.
const ACCEPT_METADATA: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

/// Whether an answer is protobuf, by its `Content-Type` (a watch's has `;stream=watch`).
fn is_protobuf(headers: &http::HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|t| {
        t.as_bytes()
            .starts_with(b"application/vnd.kubernetes.protobuf")
    })
}

/// An answer read whole.
struct Answer {
    status: StatusCode,
    /// Whether its `Content-Type` is protobuf.
    protobuf: bool,
    origin: Option<u64>,
    body: Bytes,
}

/// An answer's origin, when it says one.
fn origin_of(headers: &http::HeaderMap) -> Option<u64> {
    let v = headers.get(watchcache::ORIGIN_HEADER)?.to_str().ok()?;
    u64::from_str_radix(v, 16).ok().filter(|o| *o != 0)
}

/// The REST client of one resource.
#[derive(Clone)]
pub(crate) struct Rest {
    pub client: kube::Client,
    /// `/api/v1/pods` or `/apis/{group}/{version}/{plural}`: the resource across namespaces.
    pub collection: String,
    /// How long a plain request may take.
    pub timeout: Duration,
    /// Watches and LISTs in protobuf where the server allows it: `None` for a kind without a
    /// protobuf message (custom resources) or when configured off.
    pub protobuf: Option<ProtobufReads>,
    /// `"kind":"Pod","apiVersion":"v1"`: what a JSON list's items lack (empty: leave them).
    pub type_meta: Arc<str>,
}

impl Rest {
    pub(crate) fn new(
        client: kube::Client,
        def: &ResourceDef,
        timeout: Duration,
        protobuf: Option<WireChoice>,
    ) -> Rest {
        let api_version = def.api_version();
        let protobuf = protobuf
            .filter(|_| pb::has_message(&api_version, &def.kind))
            .map(|choice| ProtobufReads {
                choice,
                api_version,
                kind: def.kind.clone(),
            });
        let quote = |s: &str| serde_json::Value::from(s).to_string();
        let type_meta = format!(
            "\"kind\":{},\"apiVersion\":{}",
            quote(&def.kind),
            quote(&def.api_version())
        );
        Rest {
            client,
            collection: collection_path(def, None),
            timeout,
            protobuf,
            type_meta: type_meta.into(),
        }
    }

    /// Whether this read asks for protobuf (the upstream's `/version` asked once).
    async fn asks_protobuf(&self) -> bool {
        match &self.protobuf {
            Some(p) => p.choice.protobuf(self).await,
            None => false,
        }
    }

    /// Sends a request with a body and reads the whole answer.
    pub(crate) async fn call(
        &self,
        method: Method,
        uri: &str,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), RestError> {
        let a = self.exchange(method, uri, body, "application/json").await?;
        Ok((a.status, a.body))
    }

    /// Sends a request, accepting `accept`, and reads the whole answer in time.
    async fn exchange(
        &self,
        method: Method,
        uri: &str,
        body: Option<Bytes>,
        accept: &'static str,
    ) -> Result<Answer, RestError> {
        let mut req = Request::builder().method(method).uri(uri);
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .header(http::header::ACCEPT, accept)
            .body(body.map_or_else(Body::empty, Body::from))
            .map_err(|e| RestError::transport(uri, e))?;
        let call = async {
            let res = self
                .client
                .send(req)
                .await
                .map_err(|e| RestError::transport(uri, e))?;
            let status = res.status();
            let protobuf = is_protobuf(res.headers());
            let origin = origin_of(res.headers());
            let body =
                res.into_body().collect_bytes().await.map_err(|e| {
                    RestError::transport(format_args!("{uri}: reading the answer"), e)
                })?;
            Ok(Answer {
                status,
                protobuf,
                origin,
                body,
            })
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| RestError::Timeout(self.timeout))?
    }

    /// One LIST page at `uri`: asked in protobuf under the watches' rule, parsed as its
    /// `Content-Type` says.
    async fn list(&self, uri: &str) -> Result<ListPage, RestError> {
        let accept = if self.asks_protobuf().await {
            ACCEPT_PROTOBUF
        } else {
            "application/json"
        };
        let a = self.exchange(Method::GET, uri, None, accept).await?;
        if !a.status.is_success() {
            return Err(status_error(a.status, &a.body));
        }
        let mut page = match (&self.protobuf, a.protobuf) {
            (_, false) => parse_list(&a.body, &self.type_meta),
            (Some(p), true) => parse_protobuf_list((&p.api_version, &p.kind), &a.body),
            (None, true) => Err(RestError::malformed(
                "a protobuf list of a kind without a protobuf message",
            )),
        }?;
        page.origin = a.origin;
        Ok(page)
    }

    /// GETs `uri`; any non-2xx answer is its `Status` error.
    pub(crate) async fn get_ok(&self, uri: &str) -> Result<Bytes, RestError> {
        let (status, body) = self.call(Method::GET, uri, None).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(status_error(status, &body))
        }
    }

    /// One LIST page: consistent (`resourceVersion` unset) for the first page, then continued.
    pub(crate) async fn list_page(
        &self,
        limit: usize,
        continue_token: Option<&str>,
    ) -> Result<ListPage, RestError> {
        let uri = {
            // The serializer is not Send: finish it before any await.
            let mut q = form_query();
            q.append_pair("limit", &limit.to_string());
            if let Some(c) = continue_token {
                q.append_pair("continue", c);
            }
            format!("{}?{}", self.collection, q.finish())
        };
        self.list(&uri).await
    }

    /// Whether the API server has compacted `revision` away: a LIST of one object at exactly
    /// that revision answered 410 (kube-apiserver refuses it once its storage has); any other
    /// error is the error.
    pub(crate) async fn compacted(&self, revision: u64) -> Result<bool, RestError> {
        let uri = {
            let mut q = form_query();
            q.append_pair("limit", "1");
            q.append_pair("resourceVersion", &revision.to_string());
            q.append_pair("resourceVersionMatch", "Exact");
            format!("{}?{}", self.collection, q.finish())
        };
        match self.get_ok(&uri).await {
            Ok(_) => Ok(false),
            Err(e) if e.code() == Some(410) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// One page of a consistent LIST of the `PartialObjectMetadata` of what `selection` selects
    /// (its namespace, field and label selectors; not its shard), then continued: a freshness
    /// proof's read.
    pub(crate) async fn list_metadata(
        &self,
        def: &ResourceDef,
        selection: &Selection,
        limit: usize,
        continue_token: Option<&str>,
    ) -> Result<ListPage, RestError> {
        let uri = {
            let mut q = form_query();
            q.append_pair("limit", &limit.to_string());
            let (fields, labels) = (selection.fields.to_string(), selection.labels.to_string());
            if !fields.is_empty() {
                q.append_pair("fieldSelector", &fields);
            }
            if !labels.is_empty() {
                q.append_pair("labelSelector", &labels);
            }
            if let Some(c) = continue_token {
                q.append_pair("continue", c);
            }
            let path = collection_path(def, selection.namespace.as_deref());
            format!("{path}?{}", q.finish())
        };
        let a = self
            .exchange(Method::GET, &uri, None, ACCEPT_METADATA)
            .await?;
        if !a.status.is_success() {
            return Err(status_error(a.status, &a.body));
        }
        parse_list(&a.body, "")
    }

    /// One page of a LIST at exactly resourceVersion `rv` (`resourceVersionMatch=Exact`), then
    /// continued: the consistency check's read.
    pub(crate) async fn list_exact(
        &self,
        rv: u64,
        limit: usize,
        continue_token: Option<&str>,
    ) -> Result<ListPage, RestError> {
        let uri = {
            let mut q = form_query();
            q.append_pair("limit", &limit.to_string());
            match continue_token {
                Some(c) => {
                    q.append_pair("continue", c);
                }
                None => {
                    q.append_pair("resourceVersion", &rv.to_string());
                    q.append_pair("resourceVersionMatch", "Exact");
                }
            }
            format!("{}?{}", self.collection, q.finish())
        };
        self.list(&uri).await
    }

    /// Opens a watch. `from`: resume after this resourceVersion; `None` with `initial_events`: a
    /// WatchList (the current state as ADDED events, then the initial-events-end bookmark).
    pub(crate) async fn watch(
        &self,
        from: Option<u64>,
        initial_events: bool,
        timeout_secs: u64,
    ) -> Result<WatchFrames, RestError> {
        let protobuf = self.asks_protobuf().await;
        let uri = {
            let mut q = form_query();
            q.append_pair("watch", "true");
            q.append_pair("allowWatchBookmarks", "true");
            q.append_pair("timeoutSeconds", &timeout_secs.to_string());
            if initial_events {
                q.append_pair("sendInitialEvents", "true");
                q.append_pair("resourceVersionMatch", "NotOlderThan");
            }
            if let Some(rv) = from {
                q.append_pair("resourceVersion", &rv.to_string());
            }
            format!("{}?{}", self.collection, q.finish())
        };
        let req = Request::builder()
            .method(Method::GET)
            .uri(&uri)
            .header(
                http::header::ACCEPT,
                if protobuf {
                    ACCEPT_PROTOBUF
                } else {
                    "application/json"
                },
            )
            // One event per frame, flushed as it comes: no compression to wait for.
            .header(http::header::ACCEPT_ENCODING, "identity")
            .body(Body::empty())
            .map_err(|e| RestError::transport(&uri, e))?;
        let res = tokio::time::timeout(self.timeout, self.client.send(req))
            .await
            .map_err(|_| RestError::Timeout(self.timeout))?
            .map_err(|e| RestError::transport(&uri, e))?;
        let status = res.status();
        if !status.is_success() {
            let body = tokio::time::timeout(self.timeout, res.into_body().collect_bytes())
                .await
                .map_err(|_| RestError::Timeout(self.timeout))?
                .map_err(|e| RestError::transport(&uri, e))?;
            return Err(status_error(status, &body));
        }
        let framing = if is_protobuf(res.headers()) {
            Framing::Lengths(LenBuf::default())
        } else {
            Framing::Lines(LineBuf::default())
        };
        Ok(WatchFrames {
            origin: origin_of(res.headers()),
            body: res.into_body(),
            framing,
            ended: false,
        })
    }
}

fn form_query() -> form_urlencoded::Serializer<'static, String> {
    form_urlencoded::Serializer::new(String::new())
}

/// The path of the resource's collection, across namespaces (`namespace` `None`) or in one.
pub(crate) fn collection_path(def: &ResourceDef, namespace: Option<&str>) -> String {
    let base = if def.group.is_empty() {
        format!("/api/{}", def.version)
    } else {
        format!("/apis/{}/{}", def.group, def.version)
    };
    match namespace {
        Some(ns) if def.namespaced => format!("{base}/namespaces/{ns}/{}", def.plural),
        _ => format!("{base}/{}", def.plural),
    }
}

/// A watch response body, cut into frames and parsed.
pub(crate) struct WatchFrames {
    /// The answer's `X-Watchcache-Origin`.
    pub origin: Option<u64>,
    body: Body,
    framing: Framing,
    ended: bool,
}

/// How a watch response is cut: JSON one event per line, protobuf a 4-byte big-endian length
/// before each event.
enum Framing {
    Lines(LineBuf),
    Lengths(LenBuf),
}

impl Framing {
    fn push(&mut self, data: &[u8]) {
        match self {
            Framing::Lines(l) => l.push(data),
            Framing::Lengths(l) => l.push(data),
        }
    }

    /// Moves every complete frame to `out` (at the end of the stream, `ended`, the rest too).
    fn take(&mut self, out: &mut Vec<Bytes>, ended: bool) -> Result<(), RestError> {
        match self {
            Framing::Lines(l) => {
                l.take(out, ended);
                Ok(())
            }
            Framing::Lengths(l) => l.take(out, ended),
        }
    }

    /// Parses one frame as `take` cut it.
    fn parse(&self, frame: &Bytes) -> Result<Frame, RestError> {
        match self {
            Framing::Lines(_) => parse_frame(frame),
            Framing::Lengths(_) => parse_protobuf_frame(frame),
        }
    }
}

/// Bytes cut into lines as they arrive.
#[derive(Default)]
struct LineBuf {
    buf: BytesMut,
    /// How much of `buf` is known to hold no newline (the start of a line still arriving), so a
    /// long line is scanned once, not once per chunk.
    scanned: usize,
}

impl LineBuf {
    fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Moves every complete non-blank line (without its newline) to `out`; at the end of the
    /// stream (`ended`), the rest too.
    fn take(&mut self, out: &mut Vec<Bytes>, ended: bool) {
        while let Some(i) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
            let i = self.scanned + i;
            self.scanned = 0;
            let mut line = self.buf.split_to(i + 1).freeze();
            line.truncate(i);
            if !line.iter().all(u8::is_ascii_whitespace) {
                out.push(line);
            }
        }
        self.scanned = self.buf.len();
        if ended && !self.buf.iter().all(u8::is_ascii_whitespace) {
            out.push(self.buf.split().freeze());
        }
        if ended {
            self.buf.clear();
            self.scanned = 0;
        }
    }
}

/// The largest protobuf watch frame taken: far above any object etcd stores (1.5 MiB by
/// default), and a bound on what a broken length can make the follower buffer.
const MAX_FRAME: usize = 64 << 20;

/// Bytes cut into length-prefixed frames as they arrive.
#[derive(Default)]
struct LenBuf {
    buf: BytesMut,
}

impl LenBuf {
    fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Moves every complete frame (without its length) to `out`. A frame longer than
    /// [`MAX_FRAME`], or a partial one at the end of the stream, is an error.
    fn take(&mut self, out: &mut Vec<Bytes>, ended: bool) -> Result<(), RestError> {
        while let Some(head) = self.buf.first_chunk::<4>() {
            let len = u32::from_be_bytes(*head) as usize;
            if len > MAX_FRAME {
                return Err(RestError::malformed(format!(
                    "a protobuf watch frame of {len} bytes (at most {MAX_FRAME})"
                )));
            }
            if self.buf.len() < 4 + len {
                // Room for the rest of the frame once, not by doubling as it arrives.
                self.buf.reserve(4 + len - self.buf.len());
                break;
            }
            let _ = self.buf.split_to(4);
            out.push(self.buf.split_to(len).freeze());
        }
        if ended && !self.buf.is_empty() {
            return Err(RestError::malformed(format!(
                "the watch ended inside a protobuf frame ({} bytes of it)",
                self.buf.len()
            )));
        }
        Ok(())
    }
}

impl WatchFrames {
    /// Every complete frame that has arrived, parsed: waits for at least one, then takes whatever
    /// else is already there without waiting, so that the frames of one upstream commit (several
    /// events at one resourceVersion) are usually seen together. An empty result: the stream
    /// ended.
    pub(crate) async fn next_frames(&mut self) -> Result<Vec<Frame>, RestError> {
        let mut raw = Vec::new();
        loop {
            self.framing.take(&mut raw, self.ended)?;
            if self.ended {
                break;
            }
            let chunk = if raw.is_empty() {
                self.body.frame().await
            } else {
                match self.body.frame().now_or_never() {
                    Some(c) => c,
                    None => break,
                }
            };
            match chunk {
                None => self.ended = true,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.framing.push(&data);
                    }
                }
                Some(Err(e)) => return Err(RestError::transport("watch", e)),
            }
        }
        raw.iter().map(|f| self.framing.parse(f)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protobuf vector made by Kubernetes' own serializers (tests/data/kubernetes-protobuf).
    fn vector(name: &str) -> Vec<u8> {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/kubernetes-protobuf/"
        );
        std::fs::read(format!("{dir}{name}")).unwrap()
    }

    #[test]
    fn an_empty_metadata_list_has_null_items_and_parses_as_empty() {
        // kube-apiserver 1.35's answer to a metadata LIST of an empty namespace.
        let body = Bytes::from_static(
            br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"306"},"items":null}"#,
        );
        let page = parse_list(&body, "").unwrap();
        assert_eq!((page.rv, page.items.len()), (306, 0));
    }

    #[test]
    fn identity_reads_metadata_wherever_it_is_and_nothing_after_it() {
        let d = pods();
        let id = identity(
            &d,
            br#"{"kind":"Pod","metadata":{"name":"a","namespace":"n\u0073","resourceVersion":"7","labels":{"x":"y"}},"spec":{}}"#,
        )
        .unwrap();
        assert_eq!((id.key.as_str(), id.rv), ("/registry/pods/ns/a", 7));
        // Members before metadata are skipped, escapes and all; what follows it is not read
        // here (the cache's decode validates the whole object).
        let id = identity(
            &d,
            br#"{"spec":{"s":"\"}{"},"metadata":{"name":"b","namespace":"ns","resourceVersion":"8"},"status":"#,
        )
        .unwrap();
        assert_eq!((id.key.as_str(), id.rv), ("/registry/pods/ns/b", 8));
        for bad in [
            &br#"{"kind":"Pod"}"#[..],
            br#"{"metadata":{"name":"a","resourceVersion":"7""#,
            br#"{"spec":{"#,
            br#"[1]"#,
        ] {
            assert!(
                identity(&d, bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let no_rv = identity(&d, br#"{"metadata":{"name":"a","namespace":"ns"}}"#).unwrap_err();
        assert!(
            no_rv.to_string().contains("no metadata.resourceVersion"),
            "{no_rv}"
        );
    }

    #[test]
    fn lines_are_cut_across_chunks_and_blank_ones_dropped() {
        let mut b = LineBuf::default();
        let mut out = Vec::new();
        b.push(b"{\"a\":1}\n{\"b\":");
        b.take(&mut out, false);
        assert_eq!(out, [Bytes::from_static(b"{\"a\":1}")]);
        // The partial line is not scanned again from its start, and still found whole.
        assert_eq!(b.scanned, 5);
        b.push(b"2}\n\n  \n{\"c\"");
        b.take(&mut out, false);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], Bytes::from_static(b"{\"b\":2}"));
        b.push(b":3}");
        b.take(&mut out, true);
        assert_eq!(out[2], Bytes::from_static(b"{\"c\":3}"));
        assert_eq!((b.buf.len(), b.scanned), (0, 0));
    }

    #[test]
    fn protobuf_frames_are_cut_across_chunks_and_bounded() {
        let stream = vector("pods-watch.pb-stream");
        // Every cut of kube-apiserver's stream gives its five frames.
        for cut in [1, 3, 4, 5, 100, stream.len() - 1] {
            let mut b = LenBuf::default();
            let mut out = Vec::new();
            b.push(&stream[..cut]);
            b.take(&mut out, false).unwrap();
            b.push(&stream[cut..]);
            b.take(&mut out, true).unwrap();
            assert_eq!(out.len(), 5, "cut at {cut}");
            assert_eq!(out.iter().map(|f| f.len() + 4).sum::<usize>(), stream.len());
        }
        // A stream ending inside a frame, and a length past the bound, are errors.
        let mut b = LenBuf::default();
        b.push(&stream[..10]);
        assert!(b.take(&mut Vec::new(), true).is_err());
        let mut b = LenBuf::default();
        b.push(&[0xff, 0xff, 0xff, 0xff, 0]);
        assert!(b.take(&mut Vec::new(), false).is_err());
    }

    /// kube-apiserver 1.35's protobuf watch stream parses into the frames of its JSON one, with
    /// the same identities.
    #[test]
    fn protobuf_frames_parse_as_the_json_ones() {
        let stream = vector("pods-watch.pb-stream");
        let json = vector("pods-watch.json-stream");
        let mut b = LenBuf::default();
        let mut frames = Vec::new();
        b.push(&stream);
        b.take(&mut frames, true).unwrap();
        let mut l = LineBuf::default();
        let mut lines = Vec::new();
        l.push(&json);
        l.take(&mut lines, true);
        assert_eq!(frames.len(), lines.len());
        for (f, l) in frames.iter().zip(&lines) {
            let (from_pb, from_json) = (parse_protobuf_frame(f).unwrap(), parse_frame(l).unwrap());
            match (&from_pb, &from_json) {
                (Frame::Put(a), Frame::Put(b)) | (Frame::Delete(a), Frame::Delete(b)) => {
                    assert!(a.starts_with(pb::MAGIC));
                    assert_eq!(identity(&pods(), a).unwrap(), identity(&pods(), b).unwrap());
                }
                _ => assert_eq!(from_pb, from_json),
            }
        }
    }

    #[test]
    fn a_protobuf_error_frame_is_its_status() {
        let mut status = Vec::new();
        pb::put_len(&mut status, 3, b"too old resource version: 5 (9)");
        pb::put_len(&mut status, 4, b"Expired");
        pb::tag(&mut status, 6, 0);
        pb::varint(&mut status, 410);
        let mut unknown = pb::MAGIC.to_vec();
        pb::put_len(&mut unknown, 2, &status);
        let mut ext = Vec::new();
        pb::put_len(&mut ext, 1, &unknown);
        let mut frame = Vec::new();
        pb::put_len(&mut frame, 1, b"ERROR");
        pb::put_len(&mut frame, 2, &ext);
        let Frame::Error(e) = parse_protobuf_frame(&Bytes::from(frame)).unwrap() else {
            panic!("not an error frame");
        };
        assert!(e.is_expired(), "{e}");
    }

    fn pods() -> ResourceDef {
        ResourceDef::builtin("pods").unwrap()
    }

    #[test]
    fn frames_parse_with_their_objects_as_slices() {
        let line = Bytes::from_static(
            br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","namespace":"ns","resourceVersion":"12"}}}"#,
        );
        let Frame::Put(obj) = parse_frame(&line).unwrap() else {
            panic!("a put")
        };
        assert_eq!(
            identity(&pods(), &obj).unwrap(),
            Identity {
                key: "/registry/pods/ns/a".into(),
                rv: 12
            }
        );
        let bm = Bytes::from_static(
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"40","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
        );
        assert_eq!(
            parse_frame(&bm).unwrap(),
            Frame::Bookmark {
                rv: 40,
                initial_end: true
            }
        );
        let err = Bytes::from_static(
            br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}"#,
        );
        let Frame::Error(e) = parse_frame(&err).unwrap() else {
            panic!("an error")
        };
        assert!(e.is_expired());
    }

    #[test]
    fn a_non_numeric_resource_version_is_a_clear_error() {
        let obj = br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"abc"}}"#;
        let err = identity(&pods(), obj).unwrap_err();
        assert_eq!(err, RestError::NonNumericResourceVersion("abc".into()));
        assert!(err.to_string().contains("comparable resourceVersions"));
        let list = Bytes::from_static(br#"{"metadata":{"resourceVersion":"x1"},"items":[]}"#);
        assert!(matches!(
            parse_list(&list, ""),
            Err(RestError::NonNumericResourceVersion(_))
        ));
    }

    #[test]
    fn lists_parse_with_continue_tokens() {
        let list = Bytes::from_static(
            br#"{"kind":"PodList","metadata":{"resourceVersion":"7","continue":"abc"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#,
        );
        let page = parse_list(&list, "").unwrap();
        assert_eq!(page.rv, 7);
        assert_eq!(page.continue_token.as_deref(), Some("abc"));
        assert_eq!(page.items.len(), 2);
        assert_eq!(&page.items[1][..], br#"{"metadata":{"name":"b"}}"#);
    }

    #[test]
    fn a_json_lists_items_get_the_type_a_watch_event_carries() {
        let list = Bytes::from_static(
            br#"{"kind":"PodList","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a"}},{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"}},{ }]}"#,
        );
        let rest_type = r#""kind":"Pod","apiVersion":"v1""#;
        let page = parse_list(&list, rest_type).unwrap();
        assert_eq!(
            &page.items[0][..],
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#
        );
        assert_eq!(
            &page.items[1][..],
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"}}"#,
            "an item that names its type is kept as it came"
        );
        assert_eq!(&page.items[2][..], br#"{"kind":"Pod","apiVersion":"v1" }"#);
        // kube-apiserver's own list: its items become its GET's object.
        let twin = parse_list(&Bytes::from(vector("pods-list.json")), rest_type).unwrap();
        let pod: serde_json::Value = serde_json::from_slice(&vector("pod.json")).unwrap();
        assert!(twin.items.iter().all(|i| {
            let v: serde_json::Value = serde_json::from_slice(i).unwrap();
            v["kind"] == pod["kind"] && v["apiVersion"] == pod["apiVersion"]
        }));
    }

    /// kube-apiserver 1.35's protobuf LIST answer is its JSON twin: the same resourceVersion,
    /// continue token and items, each item the object a protobuf watch frame carries (stored as
    /// protobuf, its envelope kept as it came) whose JSON is the twin's item byte for byte.
    #[test]
    fn kube_apiservers_protobuf_list_is_its_json_twin() {
        let pb_body = vector("pods-list.pb");
        let page = parse_protobuf_list(("v1", "Pod"), &pb_body).unwrap();
        let twin = parse_list(&Bytes::from(vector("pods-list.json")), "").unwrap();
        assert_eq!(
            (page.rv, &page.continue_token),
            (twin.rv, &twin.continue_token)
        );
        assert_eq!((page.rv, page.items.len()), (12345, twin.items.len()));
        assert!(!page.items.is_empty());
        let (cache, _writer) = watchcache::Cache::new(pods(), watchcache::CacheConfig::default());
        for (item, want) in page.items.iter().zip(&twin.items) {
            let id = identity(&pods(), item).unwrap();
            assert_eq!(id, identity(&pods(), want).unwrap());
            let o = cache.decode(&id.key, item, id.rv).unwrap();
            // Stored as protobuf, as kube-apiserver's watch sends it: the envelope as it came.
            assert_eq!(o.protobuf(), Some(item));
            assert_eq!(o.protobuf_wire().unwrap(), item);
            // The object's JSON is the twin's item with the type that typed lists leave out.
            let mut twin_item: serde_json::Value = serde_json::from_slice(want).unwrap();
            twin_item["kind"] = "Pod".into();
            twin_item["apiVersion"] = "v1".into();
            let got: serde_json::Value = serde_json::from_slice(o.json()).unwrap();
            assert_eq!(got, twin_item, "{}", id.key);
            let mut as_item = b"{".to_vec();
            as_item.extend_from_slice(&o.list_item_tail().unwrap());
            assert_eq!(
                String::from_utf8_lossy(&as_item),
                String::from_utf8_lossy(want),
                "{}: the list item's JSON",
                id.key
            );
        }
        // The page's items share one buffer.
        let first = page.items[0].as_ptr() as usize;
        let last = page.items[page.items.len() - 1].as_ptr() as usize;
        assert!(last - first < pb_body.len() + 64 * page.items.len());
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        pb::envelope_into(&mut out, api_version, kind, raw);
        out
    }

    /// A protobuf list with `metadata` {resourceVersion 2, continue 3} and `items`.
    fn pb_list(kind: &str, rv: &str, cont: &str, items: &[&[u8]]) -> Vec<u8> {
        let mut meta = Vec::new();
        pb::put_len(&mut meta, 2, rv.as_bytes());
        pb::put_len(&mut meta, 3, cont.as_bytes());
        let mut list = Vec::new();
        pb::put_len(&mut list, 1, &meta);
        for i in items {
            pb::put_len(&mut list, 2, i);
        }
        envelope("v1", kind, &list)
    }

    #[test]
    fn protobuf_lists_carry_their_continue_token_and_type() {
        let mut meta = Vec::new();
        pb::put_len(&mut meta, 1, b"a");
        pb::put_len(&mut meta, 3, b"ns");
        pb::put_len(&mut meta, 6, b"5");
        let mut pod = Vec::new();
        pb::put_len(&mut pod, 1, &meta);
        let body = pb_list("PodList", "7", "abc", &[&pod, &pod]);
        let page = parse_protobuf_list(("v1", "Pod"), &body).unwrap();
        assert_eq!((page.rv, page.continue_token.as_deref()), (7, Some("abc")));
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.items[1], envelope("v1", "Pod", &pod));
        let id = identity(&pods(), &page.items[0]).unwrap();
        assert_eq!((id.key.as_str(), id.rv), ("/registry/pods/ns/a", 5));
        // An empty list; no continue token.
        let page = parse_protobuf_list(("v1", "Pod"), &pb_list("PodList", "9", "", &[])).unwrap();
        assert_eq!(
            (page.rv, page.continue_token, page.items.len()),
            (9, None, 0)
        );
        // Another kind's list, no or a non-numeric resourceVersion: clear errors.
        let other = parse_protobuf_list(("v1", "Pod"), &pb_list("NodeList", "7", "", &[&pod]));
        assert!(
            matches!(&other, Err(RestError::Malformed { message, .. }) if message.contains("NodeList")),
            "{other:?}"
        );
        for rv in ["", "x"] {
            assert!(
                parse_protobuf_list(("v1", "Pod"), &pb_list("PodList", rv, "", &[])).is_err(),
                "{rv:?}"
            );
        }
        assert_eq!(
            parse_protobuf_list(("v1", "Pod"), &pb_list("PodList", "x", "", &[])).unwrap_err(),
            RestError::NonNumericResourceVersion("x".into())
        );
    }

    /// Every truncation of kube-apiserver's list is a clear error, never a panic, until only its
    /// empty trailing fields (contentEncoding, contentType) are missing; so is a garbled one.
    #[test]
    fn malformed_and_truncated_protobuf_lists_are_errors() {
        let body = vector("pods-list.pb");
        let whole = parse_protobuf_list(("v1", "Pod"), &body).unwrap();
        for cut in 0..body.len() {
            let got = parse_protobuf_list(("v1", "Pod"), &body[..cut]);
            // Cut between fields: before contentEncoding, or before contentType.
            if cut == body.len() - 4 || cut == body.len() - 2 {
                let page = got.unwrap();
                assert_eq!((page.rv, page.items), (whole.rv, whole.items.clone()));
            } else {
                assert!(
                    matches!(got, Err(RestError::Malformed { .. })),
                    "cut at {cut}: {got:?}"
                );
            }
        }
        let mut garbled = body.clone();
        // The list's length prefix made larger than the body.
        let at = garbled.windows(2).position(|w| w == [0x12, 0xf9]).unwrap();
        garbled[at + 1] = 0xff;
        assert!(parse_protobuf_list(("v1", "Pod"), &garbled).is_err());
        assert!(parse_protobuf_list(("v1", "Pod"), b"{\"items\":[]}").is_err());
    }

    #[test]
    fn a_protobuf_status_answer_is_its_code_and_reason() {
        let mut status = Vec::new();
        pb::put_len(&mut status, 3, b"pods is forbidden");
        pb::put_len(&mut status, 4, b"Forbidden");
        pb::tag(&mut status, 6, 0);
        pb::varint(&mut status, 403);
        let body = envelope("v1", "Status", &status);
        assert_eq!(
            status_error(StatusCode::FORBIDDEN, &body),
            RestError::Status {
                code: 403,
                reason: "Forbidden".into(),
                message: "pods is forbidden".into()
            }
        );
    }

    #[test]
    fn error_answers_become_statuses() {
        let e = status_error(
            StatusCode::CONFLICT,
            br#"{"kind":"Status","code":409,"reason":"Conflict","message":"changed"}"#,
        );
        assert_eq!(e.code(), Some(409));
        let e = status_error(StatusCode::BAD_GATEWAY, b"<html>");
        assert_eq!(
            e,
            RestError::Status {
                code: 502,
                reason: "Bad Gateway".into(),
                message: "<html>".into()
            }
        );
        assert_eq!(
            collection_path(&pods(), Some("x")),
            "/api/v1/namespaces/x/pods"
        );
    }
}

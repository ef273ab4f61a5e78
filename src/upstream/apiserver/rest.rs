//! The REST calls of one resource on a Kubernetes API server, over kube-rs's client: LIST pages,
//! watch streams read frame by frame, and `Status` errors. Objects stay raw JSON bytes here: the
//! cache decodes them once ([`Cache::decode`](crate::Cache::decode)), so nothing on the event path
//! goes through typed structs.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::Cause;
use crate::model::ResourceDef;

/// The annotation of the bookmark that ends a WatchList's initial events.
pub(crate) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

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

/// The error for an HTTP error answer: its `Status`, or the raw body when it is none.
pub(crate) fn status_error(code: StatusCode, body: &[u8]) -> RestError {
    match serde_json::from_slice::<StatusBody>(body) {
        Ok(s) => RestError::Status {
            code: if s.code == 0 { code.as_u16() } else { s.code },
            reason: s.reason.into_owned(),
            message: s.message.into_owned(),
        },
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

/// The key and resourceVersion of a raw object of `def`.
pub(crate) fn identity(def: &ResourceDef, raw: &[u8]) -> Result<Identity, RestError> {
    let m =
        metadata_first(raw).map_err(|e| RestError::malformed_from("an object's metadata", e))?;
    if m.name.is_empty() {
        return Err(RestError::malformed("an object without metadata.name"));
    }
    let rv = match m.resource_version.as_deref() {
        Some(s) => parse_rv(s)?,
        None => {
            return Err(RestError::malformed(format!(
                "object {} has no metadata.resourceVersion",
                m.name
            )));
        }
    };
    Ok(Identity {
        key: def.key_for(m.namespace.as_deref(), &m.name),
        rv,
    })
}

/// One page of a LIST.
#[derive(Debug)]
pub(crate) struct ListPage {
    /// The list's resourceVersion (the same on every page of one list).
    pub rv: u64,
    /// The continue token of the next page, if any.
    pub continue_token: Option<String>,
    /// The raw items.
    pub items: Vec<Bytes>,
}

#[derive(Deserialize)]
struct ListBody<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
    #[serde(default, borrow)]
    items: Vec<&'a RawValue>,
}

/// Parses a LIST body.
pub(crate) fn parse_list(body: &Bytes) -> Result<ListPage, RestError> {
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
        .map(|raw| body.slice_ref(raw.get().as_bytes()))
        .collect();
    Ok(ListPage {
        rv,
        continue_token: list
            .metadata
            .continue_token
            .filter(|c| !c.is_empty())
            .map(Cow::into_owned),
        items,
    })
}

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

/// The REST client of one resource.
#[derive(Clone)]
pub(crate) struct Rest {
    pub client: kube::Client,
    /// `/api/v1/pods` or `/apis/{group}/{version}/{plural}`: the resource across namespaces.
    pub collection: String,
    /// How long a plain request may take.
    pub timeout: Duration,
}

impl Rest {
    pub fn new(client: kube::Client, def: &ResourceDef, timeout: Duration) -> Rest {
        Rest {
            client,
            collection: collection_path(def, None),
            timeout,
        }
    }

    /// Sends a request with a body and reads the whole answer.
    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), RestError> {
        let mut req = Request::builder().method(method).uri(uri);
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .header(http::header::ACCEPT, "application/json")
            .body(body.map_or_else(Body::empty, Body::from))
            .map_err(|e| RestError::transport(uri, e))?;
        let call = async {
            let res = self
                .client
                .send(req)
                .await
                .map_err(|e| RestError::transport(uri, e))?;
            let status = res.status();
            let bytes =
                res.into_body().collect_bytes().await.map_err(|e| {
                    RestError::transport(format_args!("{uri}: reading the answer"), e)
                })?;
            Ok((status, bytes))
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| RestError::Timeout(self.timeout))?
    }

    /// GETs `uri`; any non-2xx answer is its `Status` error.
    pub async fn get_ok(&self, uri: &str) -> Result<Bytes, RestError> {
        let (status, body) = self.call(Method::GET, uri, None).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(status_error(status, &body))
        }
    }

    /// One LIST page: consistent (`resourceVersion` unset) for the first page, then continued.
    pub async fn list_page(
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
        parse_list(&self.get_ok(&uri).await?)
    }

    /// One page of a LIST at exactly resourceVersion `rv` (`resourceVersionMatch=Exact`), then
    /// continued: the consistency check's read.
    pub async fn list_exact(
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
        parse_list(&self.get_ok(&uri).await?)
    }

    /// Opens a watch. `from`: resume after this resourceVersion; `None` with `initial_events`: a
    /// WatchList (the current state as ADDED events, then the initial-events-end bookmark).
    pub async fn watch(
        &self,
        from: Option<u64>,
        initial_events: bool,
        timeout_secs: u64,
    ) -> Result<WatchLines, RestError> {
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
            .header(http::header::ACCEPT, "application/json")
            // One event per line, flushed as it comes: no compression to wait for.
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
        Ok(WatchLines {
            body: res.into_body(),
            lines: LineBuf::default(),
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

/// A watch response body, cut into lines.
pub(crate) struct WatchLines {
    body: Body,
    lines: LineBuf,
    ended: bool,
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

impl WatchLines {
    /// Every complete line that has arrived: waits for at least one, then takes whatever else is
    /// already there without waiting, so that the frames of one upstream commit (several events at
    /// one resourceVersion) are usually seen together. An empty result: the stream ended.
    pub async fn next_lines(&mut self) -> Result<Vec<Bytes>, RestError> {
        let mut lines = Vec::new();
        loop {
            self.take_lines(&mut lines);
            if self.ended {
                return Ok(lines);
            }
            let chunk = if lines.is_empty() {
                self.body.frame().await
            } else {
                match self.body.frame().now_or_never() {
                    Some(c) => c,
                    None => return Ok(lines),
                }
            };
            match chunk {
                None => self.ended = true,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.lines.push(&data);
                    }
                }
                Some(Err(e)) => return Err(RestError::transport("watch", e)),
            }
        }
    }

    fn take_lines(&mut self, out: &mut Vec<Bytes>) {
        self.lines.take(out, self.ended);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            parse_list(&list),
            Err(RestError::NonNumericResourceVersion(_))
        ));
    }

    #[test]
    fn lists_parse_with_continue_tokens() {
        let list = Bytes::from_static(
            br#"{"kind":"PodList","metadata":{"resourceVersion":"7","continue":"abc"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#,
        );
        let page = parse_list(&list).unwrap();
        assert_eq!(page.rv, 7);
        assert_eq!(page.continue_token.as_deref(), Some("abc"));
        assert_eq!(page.items.len(), 2);
        assert_eq!(&page.items[1][..], br#"{"metadata":{"name":"b"}}"#);
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

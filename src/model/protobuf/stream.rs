//! What a follower reads off a protobuf watch stream
//! (`application/vnd.kubernetes.protobuf;stream=watch`), as kube-apiserver and watchcache write it:
//! each frame a `metav1.WatchEvent` {type 1, object 2 = `RawExtension` {raw 1}}, whose raw is the
//! object in its `k8s\0` + `runtime.Unknown` envelope. Of an object only its metadata's identity
//! is read here (name, namespace, resourceVersion, one annotation): the cache's decode reads the
//! rest once, right after. A protobuf LIST answer (`application/vnd.kubernetes.protobuf`) is read
//! here too, as far as its metadata and where each item is.
//!
//! Everything here reads untrusted bytes: malformed input is an error, never a panic.

use super::wire::{Fields, Value};
use super::{Unknown, last_len, utf8};

/// One frame of a protobuf watch stream: the event type and the object's envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchFrame<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub kind: &'a str,
    /// The object, `k8s\0` + `runtime.Unknown` (an ERROR's `Status`, a BOOKMARK's bare object).
    pub object: &'a [u8],
}

/// Reads one frame (without its 4-byte length).
///
/// # Errors
/// Malformed protobuf, a type that is not UTF-8, or no object.
pub fn watch_frame(frame: &[u8]) -> Result<WatchFrame<'_>, String> {
    let kind = utf8(
        last_len("a watch event", frame, 1)?.unwrap_or_default(),
        "a watch event's type",
    )?;
    let ext = last_len("a watch event", frame, 2)?.ok_or("a watch event without an object")?;
    let object = last_len("a watch event's object", ext, 1)?.unwrap_or_default();
    Ok(WatchFrame { kind, object })
}

/// The message inside an object's `k8s\0` + `runtime.Unknown` envelope.
fn message(value: &[u8]) -> Result<&[u8], String> {
    Unknown::parse(value).map(|u| u.raw)
}

/// A LIST answer in protobuf: `k8s\0` + `runtime.Unknown` {typeMeta {apiVersion, `{Kind}List`},
/// raw = the list's message {metadata 1 = `ListMeta` {resourceVersion 2, continue 3}, items 2}},
/// each item an object's message without an envelope (as kube-apiserver and watchcache write it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List<'a> {
    /// The list's apiVersion (`v1`).
    pub api_version: &'a str,
    /// The list's kind (`PodList`).
    pub kind: &'a str,
    /// `metadata.resourceVersion`: the revision the list was read at.
    pub resource_version: &'a str,
    /// `metadata.continue`: where the next page starts (empty: the last page).
    pub continue_token: &'a str,
    /// Each item's message, in order.
    pub items: Vec<&'a [u8]>,
}

/// Reads a LIST answer. Nothing of an item is read here: the caller reads its identity, the
/// cache's decode the rest.
///
/// # Errors
/// No [`MAGIC`](super::MAGIC), malformed protobuf in the envelope, the list or its metadata, or text that is
/// not UTF-8.
pub fn list(body: &[u8]) -> Result<List<'_>, String> {
    let u = Unknown::parse(body)?;
    let mut list = List {
        api_version: u.api_version,
        kind: u.kind,
        resource_version: "",
        continue_token: "",
        items: Vec::new(),
    };
    let mut meta: &[u8] = &[];
    for e in Fields::new(u.raw) {
        match e.map_err(|e| format!("a list: {e}"))? {
            (1, Value::Len(b)) => meta = b,
            (2, Value::Len(b)) => list.items.push(b),
            (1 | 2, _) => return Err("a list: wrong wire type".into()),
            _ => {}
        }
    }
    for e in Fields::new(meta) {
        match e.map_err(|e| format!("a list's metadata: {e}"))? {
            (2, Value::Len(b)) => {
                list.resource_version = utf8(b, "a list's metadata.resourceVersion")?;
            }
            (3, Value::Len(b)) => list.continue_token = utf8(b, "a list's metadata.continue")?,
            (2 | 3, _) => return Err("a list's metadata: wrong wire type".into()),
            _ => {}
        }
    }
    Ok(list)
}

/// An object's identity, read from its `metadata` (`ObjectMeta`, field 1 of every top-level
/// kind's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identity<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.namespace` (empty: cluster-scoped).
    pub namespace: &'a str,
    /// `metadata.resourceVersion`.
    pub resource_version: &'a str,
    /// Whether `metadata.annotations` has `k8s.io/initial-events-end: "true"` (a WatchList's
    /// last bookmark).
    pub initial_events_end: bool,
}

/// Reads the identity of an object in its envelope.
///
/// # Errors
/// Malformed protobuf in the envelope or the metadata, or text that is not UTF-8.
pub fn identity(value: &[u8]) -> Result<Identity<'_>, String> {
    let meta = last_len("an object", message(value)?, 1)?.unwrap_or_default();
    let mut id = Identity::default();
    for e in Fields::new(meta) {
        match e.map_err(|e| format!("metadata: {e}"))? {
            (1, Value::Len(b)) => id.name = utf8(b, "metadata.name")?,
            (3, Value::Len(b)) => id.namespace = utf8(b, "metadata.namespace")?,
            (6, Value::Len(b)) => id.resource_version = utf8(b, "metadata.resourceVersion")?,
            (12, Value::Len(entry)) => {
                let k = last_len("metadata.annotations", entry, 1)?.unwrap_or_default();
                if k == crate::model::INITIAL_EVENTS_END.as_bytes() {
                    let v = last_len("metadata.annotations", entry, 2)?.unwrap_or_default();
                    id.initial_events_end = v == b"true";
                }
            }
            (1 | 3 | 6 | 12, _) => return Err("metadata: wrong wire type".into()),
            _ => {}
        }
    }
    Ok(id)
}

/// A `metav1.Status` in its envelope: code, reason and message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// `code`: the HTTP status.
    pub code: u16,
    /// `reason` (`Expired`, `NotFound`, ...).
    pub reason: String,
    /// `message`.
    pub message: String,
}

/// Reads a `Status` (message 3, reason 4, code 6).
///
/// # Errors
/// Malformed protobuf.
pub fn status(value: &[u8]) -> Result<Status, String> {
    let mut s = Status::default();
    for e in Fields::new(message(value)?) {
        match e.map_err(|e| format!("a Status: {e}"))? {
            (3, Value::Len(b)) => s.message = String::from_utf8_lossy(b).into_owned(),
            (4, Value::Len(b)) => s.reason = String::from_utf8_lossy(b).into_owned(),
            (6, Value::Varint(c)) => s.code = u16::try_from(c).unwrap_or(500),
            _ => {}
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::protobuf::MAGIC;
    use crate::model::protobuf::tests::vector;

    /// kube-apiserver 1.35's own protobuf watch stream, read against its JSON one.
    #[test]
    fn kube_apiservers_watch_stream_reads_as_its_json_one() {
        let stream = vector("pods-watch.pb-stream");
        let lines = vector("pods-watch.json-stream");
        let mut lines = lines.split(|&b| b == b'\n').filter(|l| !l.is_empty());
        let mut rest = &stream[..];
        let mut n = 0;
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let f = watch_frame(&rest[4..4 + len]).unwrap();
            rest = &rest[4 + len..];
            let want: serde_json::Value = serde_json::from_slice(lines.next().unwrap()).unwrap();
            assert_eq!(f.kind, want["type"]);
            let id = identity(f.object).unwrap();
            let meta = &want["object"]["metadata"];
            assert_eq!(id.name, meta["name"].as_str().unwrap_or(""));
            assert_eq!(id.namespace, meta["namespace"].as_str().unwrap_or(""));
            assert_eq!(id.resource_version, meta["resourceVersion"]);
            assert_eq!(
                id.initial_events_end,
                meta["annotations"]["k8s.io/initial-events-end"] == "true"
            );
            n += 1;
        }
        assert_eq!(n, 5);
    }

    /// kube-apiserver 1.35's own protobuf LIST, read against its JSON one.
    #[test]
    fn kube_apiservers_list_reads_as_its_json_one() {
        let body = vector("pods-list.pb");
        let want: serde_json::Value = serde_json::from_slice(&vector("pods-list.json")).unwrap();
        let l = list(&body).unwrap();
        assert_eq!((l.api_version, l.kind), ("v1", "PodList"));
        assert_eq!(l.resource_version, want["metadata"]["resourceVersion"]);
        assert_eq!(l.continue_token, "");
        let items = want["items"].as_array().unwrap();
        assert_eq!(l.items.len(), items.len());
        for (item, want) in l.items.iter().zip(items) {
            // An item is a message without an envelope: its metadata is field 1.
            let meta = last_len("an item", item, 1).unwrap().unwrap();
            let name = last_len("metadata", meta, 1).unwrap().unwrap();
            assert_eq!(name, want["metadata"]["name"].as_str().unwrap().as_bytes());
        }
        assert!(list(b"k8s\0\x12\x03\x0a\x05a").is_err());
        assert!(list(b"{}").is_err());
    }

    #[test]
    fn a_status_reads_its_code_reason_and_message() {
        use crate::model::protobuf::{put_len, tag, varint as put_var};
        let mut msg = Vec::new();
        put_len(&mut msg, 3, b"too old resource version: 1 (5)");
        put_len(&mut msg, 4, b"Expired");
        tag(&mut msg, 6, 0);
        put_var(&mut msg, 410);
        let mut value = MAGIC.to_vec();
        put_len(&mut value, 2, &msg);
        let s = status(&value).unwrap();
        assert_eq!(
            s,
            Status {
                code: 410,
                reason: "Expired".into(),
                message: "too old resource version: 1 (5)".into()
            }
        );
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        for bad in [
            &b"\x0a"[..],
            b"\x0a\x05AD",
            b"\x12\x02\x0a\x7f",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ] {
            assert!(watch_frame(bad).is_err(), "{bad:?}");
        }
        assert!(identity(b"k8s\0\x12\x03\x0a\x05a").is_err());
        assert!(identity(b"{\"json\":1}").is_err());
        // No object at all is an error; an empty one is an identity without a name.
        assert!(watch_frame(b"\x0a\x05ADDED").is_err());
    }
}

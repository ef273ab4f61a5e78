//! Protobuf request bodies (`Content-Type: application/vnd.kubernetes.protobuf`), as typed
//! client-go clients and kubectl send them for creates, updates and deletes of built-in kinds:
//! read into the JSON the same object would have been sent as, so that they take exactly the
//! path JSON bodies take (validation, defaulting, 4xx answers).

use serde_json::{Map, Value as Json, json};

use super::wire::{Fields, Value};
use super::{Envelope, MAGIC};

/// Why a protobuf request body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RequestBodyError {
    /// Not a protobuf body of a type this server reads, or malformed (400).
    Malformed(String),
    /// Its JSON would be longer than this many bytes (413). Protobuf is denser than JSON, and
    /// an empty repeated message is 2 bytes: a 2 MB body of a million empty containers stood for
    /// 27 MB of JSON and 5 CPU-seconds of decoding and validation (issue 20, item 15).
    TooLarge(usize),
}

impl From<String> for RequestBodyError {
    fn from(e: String) -> RequestBodyError {
        RequestBodyError::Malformed(e)
    }
}

impl From<&str> for RequestBodyError {
    fn from(e: &str) -> RequestBodyError {
        RequestBodyError::Malformed(e.to_owned())
    }
}

/// The JSON of a protobuf request body: an object of a built-in kind (its own
/// `metadata.resourceVersion` kept, as the client sent it, for preconditions), or
/// `metav1.DeleteOptions`; at most `max_json` bytes of it, the reading stopped there.
///
/// # Errors
/// Not the `k8s\0` envelope, malformed protobuf, or a type this server does not read; JSON
/// longer than `max_json`.
pub(crate) fn request_json(body: &[u8], max_json: usize) -> Result<Vec<u8>, RequestBodyError> {
    if !body.starts_with(MAGIC) {
        return Err("not a Kubernetes protobuf body (no k8s\\0 prefix)".into());
    }
    let (api_version, kind, raw) = envelope_parts(body)?;
    if kind == "DeleteOptions" {
        let v = delete_options(api_version, raw)?;
        let json = serde_json::to_vec(&v).map_err(|e| e.to_string())?;
        return if json.len() > max_json {
            Err(RequestBodyError::TooLarge(max_json))
        } else {
            Ok(json)
        };
    }
    let env = Envelope::parse(body)?;
    env.validate()?;
    env.encode_json_as_sent(max_json)
}

/// `apiVersion`, `kind` and `raw` of an envelope, whatever type it names.
fn envelope_parts(body: &[u8]) -> Result<(&str, &str, &[u8]), String> {
    let bad = |e: super::wire::WireError| format!("protobuf envelope: {e}");
    let (mut av, mut kind, mut raw) = (&b""[..], &b""[..], &b""[..]);
    for e in Fields::new(&body[MAGIC.len()..]) {
        match e.map_err(bad)? {
            (1, Value::Len(tm)) => {
                for e in Fields::new(tm) {
                    match e.map_err(bad)? {
                        (1, Value::Len(b)) => av = b,
                        (2, Value::Len(b)) => kind = b,
                        _ => {}
                    }
                }
            }
            (2, Value::Len(b)) => raw = b,
            (3, Value::Len(b)) if !b.is_empty() => {
                return Err(format!(
                    "protobuf envelope has content encoding {:?}",
                    String::from_utf8_lossy(b)
                ));
            }
            _ => {}
        }
    }
    let av = std::str::from_utf8(av).map_err(|_| "apiVersion is not UTF-8")?;
    let kind = std::str::from_utf8(kind).map_err(|_| "kind is not UTF-8")?;
    Ok((av, kind, raw))
}

/// `metav1.DeleteOptions`, numbered as in apimachinery's `generated.proto` (a metav1 type,
/// outside the generated tables, which hold the served kinds): gracePeriodSeconds = 1,
/// preconditions = 2 {uid = 1, resourceVersion = 2}, orphanDependents = 3,
/// propagationPolicy = 4, dryRun = 5, ignoreStoreReadErrorWithClusterBreakingPotential = 6.
fn delete_options(api_version: &str, raw: &[u8]) -> Result<Json, String> {
    let wrong = |f: &str| format!("DeleteOptions.{f}: wrong wire type");
    let text = |b: &[u8], f: &str| {
        std::str::from_utf8(b)
            .map(|s| Json::String(s.to_owned()))
            .map_err(|_| format!("DeleteOptions.{f} is not UTF-8"))
    };
    let mut out = Map::new();
    out.insert("kind".into(), "DeleteOptions".into());
    out.insert(
        "apiVersion".into(),
        if api_version.is_empty() {
            "v1"
        } else {
            api_version
        }
        .into(),
    );
    let mut dry_run = Vec::new();
    for e in Fields::new(raw) {
        match e.map_err(|e| format!("DeleteOptions: {e}"))? {
            (1, Value::Varint(x)) => {
                out.insert("gracePeriodSeconds".into(), json!(x as i64));
            }
            (2, Value::Len(b)) => {
                let mut p = Map::new();
                for e in Fields::new(b) {
                    match e.map_err(|e| format!("DeleteOptions.preconditions: {e}"))? {
                        (1, Value::Len(x)) => {
                            p.insert("uid".into(), text(x, "preconditions.uid")?);
                        }
                        (2, Value::Len(x)) => {
                            p.insert(
                                "resourceVersion".into(),
                                text(x, "preconditions.resourceVersion")?,
                            );
                        }
                        (1 | 2, _) => return Err(wrong("preconditions")),
                        _ => {}
                    }
                }
                out.insert("preconditions".into(), Json::Object(p));
            }
            (3, Value::Varint(x)) => {
                out.insert("orphanDependents".into(), json!(x != 0));
            }
            (4, Value::Len(b)) => {
                out.insert("propagationPolicy".into(), text(b, "propagationPolicy")?);
            }
            (5, Value::Len(b)) => dry_run.push(text(b, "dryRun")?),
            (6, Value::Varint(x)) => {
                out.insert(
                    "ignoreStoreReadErrorWithClusterBreakingPotential".into(),
                    json!(x != 0),
                );
            }
            (n @ 1..=6, _) => return Err(wrong(&n.to_string())),
            _ => {}
        }
    }
    if !dry_run.is_empty() {
        out.insert("dryRun".into(), Json::Array(dry_run));
    }
    Ok(Json::Object(out))
}

#[cfg(test)]
mod tests {
    use super::super::encode::{envelope, put_len};
    use super::*;

    #[test]
    fn objects_read_as_the_json_they_would_be_sent_as() {
        let sent = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "d", "resourceVersion": "77"},
            "data": {"k": "v"}});
        let body = super::super::encode_json(&sent).unwrap();
        let got: Json = serde_json::from_slice(&request_json(&body, usize::MAX).unwrap()).unwrap();
        assert_eq!(got["metadata"]["resourceVersion"], "77");
        assert_eq!(got["data"], sent["data"]);
        assert_eq!(
            (got["kind"].as_str(), got["apiVersion"].as_str()),
            (Some("ConfigMap"), Some("v1"))
        );
        // No resourceVersion sent: none read.
        let mut plain = sent.clone();
        plain["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        let body = super::super::encode_json(&plain).unwrap();
        let got: Json = serde_json::from_slice(&request_json(&body, usize::MAX).unwrap()).unwrap();
        assert!(got["metadata"].get("resourceVersion").is_none(), "{got}");
    }

    #[test]
    fn delete_options_are_read() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&[0x08, 0x05]);
        let mut pre = Vec::new();
        put_len(&mut pre, 2, b"42");
        put_len(&mut raw, 2, &pre);
        put_len(&mut raw, 4, b"Foreground");
        put_len(&mut raw, 5, b"All");
        let body = envelope("v1", "DeleteOptions", &raw);
        let got: Json = serde_json::from_slice(&request_json(&body, usize::MAX).unwrap()).unwrap();
        assert_eq!(
            got,
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 5,
                "preconditions": {"resourceVersion": "42"}, "propagationPolicy": "Foreground",
                "dryRun": ["All"]})
        );
    }

    /// Issue 20, item 15: a 2 MB body of a million empty containers stood for 27 MB of JSON.
    /// Its reading stops at the limit; so does a DeleteOptions of a million `dryRun` entries.
    #[test]
    fn json_longer_than_the_limit_is_refused_as_it_is_written() {
        let mut meta = Vec::new();
        put_len(&mut meta, 1, b"p");
        let mut spec = Vec::new();
        for _ in 0..1_000_000 {
            spec.extend_from_slice(&[0x12, 0x00]);
        }
        let mut raw = Vec::new();
        put_len(&mut raw, 1, &meta);
        put_len(&mut raw, 2, &spec);
        let body = envelope("v1", "Pod", &raw);
        assert_eq!(
            request_json(&body, 6 << 20),
            Err(RequestBodyError::TooLarge(6 << 20))
        );
        // Within the limit, the same shape reads (it is the JSON path's to refuse).
        let mut raw = Vec::new();
        put_len(&mut raw, 1, &meta);
        put_len(&mut raw, 2, &[0x12, 0x00, 0x12, 0x00]);
        let got: Json =
            serde_json::from_slice(&request_json(&envelope("v1", "Pod", &raw), 6 << 20).unwrap())
                .unwrap();
        assert_eq!(got["spec"]["containers"].as_array().map(Vec::len), Some(2));
        let mut raw = Vec::new();
        for _ in 0..1_000_000 {
            put_len(&mut raw, 5, b"All");
        }
        assert_eq!(
            request_json(&envelope("v1", "DeleteOptions", &raw), 1 << 20),
            Err(RequestBodyError::TooLarge(1 << 20))
        );
    }

    #[test]
    fn garbage_is_an_error() {
        for bad in [
            &b""[..],
            b"{}",
            b"k8s\0\x0a\xff",
            b"k8s\0\x0a\x0c\x0a\x02v1\x12\x06Widget\x12\x00",
            b"k8s\0\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x03\x0a\x05a",
        ] {
            assert!(request_json(bad, usize::MAX).is_err(), "{bad:?}");
        }
    }
}

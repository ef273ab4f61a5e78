//! An object's encodings without `metadata.managedFields`: what kube-apiserver answers to
//! `Accept: ...;drop=metadata.managedFields` (KEP-5958), made from the encodings the cache already
//! holds, never from a decoded object.
//!
//! - JSON: the `managedFields` member is cut out of `metadata` with the comma that joined it; every
//!   other byte is kept, so Go's member order and escaping stay as they were. That is what
//!   encoding/json writes for the same object with `ManagedFields` nil (`omitempty`).
//! - Protobuf: `ObjectMeta`'s field 17 is left out and the length prefixes around it (the object's
//!   field 1, the envelope's `raw`) rewritten; every other byte is copied. That is what gogo writes
//!   for the same Go value with `ManagedFields` nil.
//!
//! Each returns `None` when the object has no managed fields: the caller then shares the bytes it
//! has instead of copying them.
// Reads stored objects: it must not panic on any of them (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice,
        clippy::panic
    )
)]

use crate::model::members::{find, members};
use crate::model::protobuf::{MAGIC, WireValue as Value, put_len, spans};

/// The member's key as compact JSON writes it.
const KEY: &str = "\"managedFields\":";
/// The same after another member.
const COMMA_KEY: &str = ",\"managedFields\":";

/// A JSON object without `metadata.managedFields`, or `None` when it has none.
///
/// # Errors
/// Bytes that are not a JSON object.
pub fn json_without(json: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let text = std::str::from_utf8(json).map_err(|e| e.to_string())?;
    let top = members(text).map_err(|e| e.to_string())?;
    let Some(meta) = find(&top, "metadata").map(|m| m.get()) else {
        return Ok(None);
    };
    if !meta.starts_with('{') {
        return Ok(None);
    }
    let fields = members(meta).map_err(|e| e.to_string())?;
    let Some(i) = fields.iter().position(|(k, _)| k == "managedFields") else {
        return Ok(None);
    };
    let meta_at = offset(text, meta);
    // The bytes to cut, inside `meta`: `,"managedFields":V` after another member, or
    // `"managedFields":V,` first of several, or `"managedFields":V` alone.
    let value = fields.get(i).map(|(_, v)| v.get()).unwrap_or_default();
    let value_end = offset(meta, value) + value.len();
    // Once only: a repeated member (the last one counts) is left to the slow path.
    let once = meta.matches(KEY).count() == 1;
    let cut = match i
        .checked_sub(1)
        .and_then(|p| fields.get(p))
        .filter(|_| once)
    {
        _ if !once => None,
        Some((_, prev)) => {
            let at = offset(meta, prev.get()) + prev.get().len();
            (meta.get(at..offset(meta, value)) == Some(COMMA_KEY)).then_some(at..value_end)
        }
        None => {
            let after = usize::from(fields.len() > 1);
            (meta.get(1..offset(meta, value)) == Some(KEY)
                && (after == 0 || meta.as_bytes().get(value_end) == Some(&b',')))
            .then_some(1..value_end + after)
        }
    };
    let mut out = Vec::with_capacity(json.len());
    match cut {
        Some(cut) => {
            out.extend_from_slice(json.get(..meta_at + cut.start).unwrap_or_default());
            out.extend_from_slice(json.get(meta_at + cut.end..).unwrap_or_default());
        }
        // Not compact JSON (whitespace, an escaped key, a repeated member): `metadata` is written
        // again from its members, the others' bytes kept.
        None => {
            out.extend_from_slice(json.get(..meta_at).unwrap_or_default());
            out.push(b'{');
            let mut first = true;
            for (k, v) in fields.iter().filter(|(k, _)| k != "managedFields") {
                if !first {
                    out.push(b',');
                }
                first = false;
                crate::model::protobuf::write_json_str(&mut out, k);
                out.push(b':');
                out.extend_from_slice(v.get().as_bytes());
            }
            out.push(b'}');
            out.extend_from_slice(json.get(meta_at + meta.len()..).unwrap_or_default());
        }
    }
    Ok(Some(out))
}

/// Where `inner` (a slice of `outer`) starts in `outer`.
fn offset(outer: &str, inner: &str) -> usize {
    (inner.as_ptr() as usize).saturating_sub(outer.as_ptr() as usize)
}

/// An object's protobuf envelope (`k8s\0` + `runtime.Unknown`) without `metadata.managedFields`,
/// or `None` when it has none.
///
/// # Errors
/// A value that is not a well-formed envelope.
pub fn protobuf_without(envelope: &[u8]) -> Result<Option<Vec<u8>>, String> {
    envelope_without_managed_fields(envelope)
}

/// An object's message (a list item: the `raw` of its envelope) without
/// `metadata.managedFields`, or `None` when it has none.
///
/// # Errors
/// Bytes that are not a message.
pub fn message_without(raw: &[u8]) -> Result<Option<Vec<u8>>, String> {
    object_without_managed_fields(raw)
}

/// An `ObjectMeta` message without `managedFields` (field 17), or `None` when it has none.
///
/// # Errors
/// Bytes that are not a message.
pub fn meta_message_without(meta: &[u8]) -> Result<Option<Vec<u8>>, String> {
    meta_without_managed_fields(meta)
}

/// `ObjectMeta`'s field number of `managedFields`.
const MANAGED_FIELDS: u32 = 17;

/// An `ObjectMeta` message without its `managedFields` (field 17), every other byte as it was:
/// what gogo writes for the same Go value with `ManagedFields` nil. `None` when it has none.
///
/// # Errors
/// Bytes that are not a message.
fn meta_without_managed_fields(meta: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut found = false;
    for e in spans(meta) {
        found |= e?.0 == MANAGED_FIELDS;
    }
    if !found {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(meta.len());
    for e in spans(meta) {
        let (n, _, span) = e?;
        if n != MANAGED_FIELDS {
            out.extend_from_slice(meta.get(span).ok_or("a field past the message")?);
        }
    }
    Ok(Some(out))
}

/// Rewrites each length-delimited field `num` of `msg` with `inner`; `None` when `inner` changed
/// none of them (the message is then used as it is).
fn rewrite_field(
    msg: &[u8],
    num: u32,
    inner: impl Fn(&[u8]) -> Result<Option<Vec<u8>>, String>,
) -> Result<Option<Vec<u8>>, String> {
    let mut out: Option<Vec<u8>> = None;
    for e in spans(msg) {
        let (n, v, span) = e?;
        let new = match (n, v) {
            (n, Value::Len(b)) if n == num => inner(b)?,
            _ => None,
        };
        match (new, &mut out) {
            (None, None) => {}
            (None, Some(o)) => {
                o.extend_from_slice(msg.get(span).ok_or("a field past the message")?)
            }
            (Some(b), o) => {
                let o = match o {
                    Some(o) => o,
                    None => {
                        let mut first = Vec::with_capacity(msg.len());
                        first.extend_from_slice(
                            msg.get(..span.start).ok_or("a field past the message")?,
                        );
                        o.insert(first)
                    }
                };
                put_len(o, num, &b);
            }
        }
    }
    Ok(out)
}

/// An object's message (a list item) without `metadata.managedFields`; `None` when it has none.
///
/// # Errors
/// Bytes that are not a message.
fn object_without_managed_fields(raw: &[u8]) -> Result<Option<Vec<u8>>, String> {
    rewrite_field(raw, 1, meta_without_managed_fields)
}

/// An object's envelope (`k8s\0` + `runtime.Unknown`) without `metadata.managedFields`, the
/// length prefixes around it rewritten; `None` when it has none.
///
/// # Errors
/// A value that is not a well-formed envelope.
fn envelope_without_managed_fields(value: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let body = value.strip_prefix(MAGIC).ok_or("no k8s protobuf prefix")?;
    Ok(
        rewrite_field(body, 2, object_without_managed_fields)?.map(|b| {
            let mut out = Vec::with_capacity(MAGIC.len() + b.len());
            out.extend_from_slice(MAGIC);
            out.extend_from_slice(&b);
            out
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(s: &str) -> Option<String> {
        json_without(s.as_bytes())
            .unwrap()
            .map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn the_member_is_cut_with_its_comma_wherever_it_is() {
        let mf = r#""managedFields":[{"manager":"m","fieldsV1":{"f:metadata":{}}}]"#;
        assert_eq!(
            strip(&format!(
                r#"{{"kind":"Pod","metadata":{{"name":"a",{mf},"x":1}},"spec":{{}}}}"#
            ))
            .as_deref(),
            Some(r#"{"kind":"Pod","metadata":{"name":"a","x":1},"spec":{}}"#)
        );
        assert_eq!(
            strip(&format!(r#"{{"metadata":{{"name":"a",{mf}}}}}"#)).as_deref(),
            Some(r#"{"metadata":{"name":"a"}}"#)
        );
        assert_eq!(
            strip(&format!(r#"{{"metadata":{{{mf},"name":"a"}}}}"#)).as_deref(),
            Some(r#"{"metadata":{"name":"a"}}"#)
        );
        assert_eq!(
            strip(&format!(r#"{{"metadata":{{{mf}}}}}"#)).as_deref(),
            Some(r#"{"metadata":{}}"#)
        );
        // Elsewhere than in metadata it stays.
        assert_eq!(strip(&format!(r#"{{"spec":{{{mf}}}}}"#)), None);
        assert_eq!(strip(r#"{"metadata":{"name":"a"}}"#), None);
        assert_eq!(strip(r#"{"metadata":null}"#), None);
        assert!(json_without(b"[1]").is_err());
    }

    #[test]
    fn json_that_is_not_compact_is_rewritten_member_by_member() {
        assert_eq!(
            strip(r#"{"metadata": {"name": "a", "managedFields": [], "uid": "u"}, "b": 1}"#)
                .as_deref(),
            Some(r#"{"metadata": {"name":"a","uid":"u"}, "b": 1}"#)
        );
        // A repeated member: the last one counts, as for the decoder.
        assert_eq!(
            strip(r#"{"metadata":{"managedFields":[1],"name":"a","managedFields":[2]}}"#)
                .as_deref(),
            Some(r#"{"metadata":{"name":"a"}}"#)
        );
    }

    #[test]
    fn protobuf_loses_field_17_and_its_lengths_are_rewritten() {
        fn put_varint(out: &mut Vec<u8>, mut v: u64) {
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
        // ObjectMeta {name = 1 "a", managedFields = 17 {...} x2, labels-ish = 11 ...}.
        let mut meta = vec![0x0a, 1, b'a'];
        for _ in 0..2 {
            // Field 17, wire type 2: tag varint 138 = 0x8a 0x01.
            meta.extend_from_slice(&[0x8a, 0x01]);
            let entry = vec![0x0a; 200];
            put_varint(&mut meta, entry.len() as u64);
            meta.extend_from_slice(&entry);
        }
        meta.extend_from_slice(&[0x2a, 1, b'u']);
        let mut raw = Vec::new();
        raw.push(0x0a);
        put_varint(&mut raw, meta.len() as u64);
        raw.extend_from_slice(&meta);
        raw.extend_from_slice(&[0x12, 2, 0x08, 0x01]);
        let env = crate::model::protobuf::encode_json(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}
        }))
        .unwrap();
        let range = crate::model::protobuf::raw_range(&env).unwrap();
        let mut with = env[..range.start - 2].to_vec();
        with.push(0x12);
        put_varint(&mut with, raw.len() as u64);
        with.extend_from_slice(&raw);
        with.extend_from_slice(&env[range.end..]);

        let out = protobuf_without(&with).unwrap().unwrap();
        let want_meta = [0x0a, 1, b'a', 0x2a, 1, b'u'];
        let mut want_raw = vec![0x0a, want_meta.len() as u8];
        want_raw.extend_from_slice(&want_meta);
        want_raw.extend_from_slice(&[0x12, 2, 0x08, 0x01]);
        assert_eq!(
            &out[crate::model::protobuf::raw_range(&out).unwrap()],
            &want_raw[..]
        );
        assert_eq!(message_without(&raw).unwrap().unwrap(), want_raw);
        assert_eq!(meta_message_without(&meta).unwrap().unwrap(), want_meta);
        // Nothing to leave out: None, the bytes are shared as they are.
        assert_eq!(protobuf_without(&env).unwrap(), None);
        assert_eq!(message_without(&want_raw).unwrap(), None);
        assert!(protobuf_without(b"not protobuf").is_err());
    }
}

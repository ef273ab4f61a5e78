//! Kubernetes protobuf, written: the `k8s\0` + `runtime.Unknown` envelope, a JSON object encoded
//! to its message with the generated tables (`tables.rs`), and a stored value's
//! `metadata.resourceVersion` set by splicing.
//!
//! Go's generated (gogo) marshallers fix the bytes, so this writes exactly what kube-apiserver
//! writes for the same Go value (checked byte for byte against the upstream vectors):
//! - fields in field-number order;
//! - every value field (`Card::One`) written even when zero: empty strings, 0, false, a zero
//!   `Time` as an empty Timestamp, zero structs as their own always-written fields;
//! - nil pointers, nil or empty slices and maps left out;
//! - repeated scalars unpacked (proto2), one tag per element;
//! - map entries `{key = 1, value = 2}` in sorted key order (gogo sorts keys), both always
//!   written;
//! - `Quantity` as `{string = 1}`, `IntOrString` as `{type = 1, intVal = 2, strVal = 3}` with all
//!   three written, `Timestamp` as `{seconds = 1, nanos = 2}` both written, `RawExtension` and
//!   `FieldsV1` as `{raw = 1}` when non-nil.
//!
//! JSON members the message does not have are ignored, as Go's decoder ignores them.
//! A JSON quantity is written as given (kube-apiserver would canonicalize `"0.5"` to
//! `"500m"` on decode; the JSON a client reads back is given as written too).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value as Json};

use super::MAGIC;
use super::catalog::{kind_message, message};
use super::json::GO_ZERO_UNIX;
use super::schema::{Card, Field, Kind, Message};
use super::wire::{Fields, Value};

/// The deepest nesting encoded (the decoder's limit too).
const MAX_DEPTH: u32 = 64;

/// Appends a varint.
pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a field's tag: its number and wire type.
pub fn tag(out: &mut Vec<u8>, num: u32, wire_type: u8) {
    varint(out, (u64::from(num) << 3) | u64::from(wire_type));
}

/// Appends a length-delimited field.
pub fn put_len(out: &mut Vec<u8>, num: u32, bytes: &[u8]) {
    tag(out, num, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

pub(crate) fn put_varint(out: &mut Vec<u8>, num: u32, v: u64) {
    tag(out, num, 0);
    varint(out, v);
}

/// Appends a fixed64 field (a `double`).
fn put_f64(out: &mut Vec<u8>, num: u32, v: f64) {
    tag(out, num, 1);
    out.extend_from_slice(&v.to_bits().to_le_bytes());
}

/// Writes a nested message under `num`: its length is only known once it is written, so it is
/// written after a placeholder and moved when the length takes more than one byte.
pub(crate) fn nested<E>(
    out: &mut Vec<u8>,
    num: u32,
    f: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    tag(out, num, 2);
    let at = out.len();
    out.push(0);
    f(out)?;
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(5);
        varint(&mut prefix, len as u64);
        out.splice(at..at + 1, prefix);
    }
    Ok(())
}

/// The `k8s\0` + `runtime.Unknown` {typeMeta {apiVersion, kind}, raw, contentEncoding "",
/// contentType ""} encoding of a message, as kube-apiserver stores and serves it.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + api_version.len() + kind.len() + 24);
    envelope_into(&mut out, api_version, kind, raw);
    out
}

/// `envelope`, appended to `out` (a protobuf list's items, one buffer for a page).
pub fn envelope_into(out: &mut Vec<u8>, api_version: &str, kind: &str, raw: &[u8]) {
    out.extend_from_slice(MAGIC);
    let _ = nested::<()>(out, 1, |out| {
        put_len(out, 1, api_version.as_bytes());
        put_len(out, 2, kind.as_bytes());
        Ok(())
    });
    put_len(out, 2, raw);
    put_len(out, 3, b"");
    put_len(out, 4, b"");
}

/// The envelope of a JSON object of a built-in kind (named by its own `apiVersion` and `kind`).
///
/// # Errors
/// Not an object, a kind without a protobuf message, or a member of the wrong JSON type.
pub(crate) fn encode_json(value: &Json) -> Result<Vec<u8>, String> {
    let obj = value.as_object().ok_or("not a JSON object")?;
    let av = obj.get("apiVersion").and_then(Json::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Json::as_str).unwrap_or("");
    let msg =
        kind_message(av, kind).ok_or_else(|| format!("{av} {kind} has no protobuf encoding"))?;
    let mut raw = Vec::with_capacity(1024);
    write_message(&mut raw, msg, obj, 0)?;
    Ok(envelope(av, kind, &raw))
}

/// A message's bytes from a JSON object (a nested type's, such as `ObjectMeta`).
///
/// # Errors
/// A member of the wrong JSON type.
pub(crate) fn encode_message(
    msg: &'static Message,
    obj: &Map<String, Json>,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(512);
    write_message(&mut out, msg, obj, 0)?;
    Ok(out)
}

/// Writes the fields of `msg` from a JSON object, in field-number order.
fn write_message(
    out: &mut Vec<u8>,
    msg: &'static Message,
    obj: &Map<String, Json>,
    depth: u32,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("{}: nested too deeply", msg.name));
    }
    // `by_num` is indexed by field number: walking it visits the fields in number order.
    for &i in msg.by_num {
        if i == 0 {
            continue;
        }
        let f = &msg.fields[i as usize - 1];
        if f.json.is_empty() {
            // Inline: the nested message's members are this object's own.
            let Kind::Msg(m) = f.kind else {
                return Err(format!(
                    "{}: inline field {} is not a struct",
                    msg.name, f.num
                ));
            };
            let m = message(m);
            if f.card == Card::Ptr && !m.fields.iter().any(|g| obj.contains_key(g.json)) {
                continue;
            }
            nested(out, f.num, |out| write_message(out, m, obj, depth + 1))?;
            continue;
        }
        let v = obj.get(f.json).filter(|v| !v.is_null());
        write_field(out, msg, f, v, depth).map_err(|e| {
            if e.contains(": ") {
                e
            } else {
                format!("{}.{}: {e}", msg.name, f.json)
            }
        })?;
    }
    Ok(())
}

fn write_field(
    out: &mut Vec<u8>,
    msg: &'static Message,
    f: &Field,
    v: Option<&Json>,
    depth: u32,
) -> Result<(), String> {
    match (f.card, v) {
        (Card::Rep, None) | (Card::Map(_), None) | (Card::Ptr, None) => Ok(()),
        (Card::One, None) => write_zero(out, f, depth),
        (Card::One | Card::Ptr, Some(v)) => write_value(out, f.num, f.kind, v, depth),
        (Card::Rep, Some(v)) => {
            let items = v.as_array().ok_or("expected an array")?;
            for item in items {
                if item.is_null() {
                    // A null element is the element type's zero value in Go.
                    write_zero(out, f, depth)?;
                } else {
                    write_value(out, f.num, f.kind, item, depth)?;
                }
            }
            Ok(())
        }
        (Card::Map(_), Some(v)) => {
            let map = v.as_object().ok_or("expected an object")?;
            // Sorted here, whatever order the JSON map keeps (gogo sorts keys).
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            for k in keys {
                let val = &map[k];
                nested(out, f.num, |out| {
                    put_len(out, 1, k.as_bytes());
                    match (f.kind, val) {
                        (Kind::Bytes, Json::Null) => Ok(()),
                        (Kind::Str, Json::Null) => {
                            put_len(out, 2, b"");
                            Ok(())
                        }
                        (_, Json::Null) => write_zero(out, &Field { num: 2, ..*f }, depth),
                        _ => write_value(out, 2, f.kind, val, depth),
                    }
                })
                .map_err(|e| format!("{}.{}[{k}]: {e}", msg.name, f.json))?;
            }
            Ok(())
        }
    }
}

/// Go's zero value of a value field, as gogo writes it.
fn write_zero(out: &mut Vec<u8>, f: &Field, depth: u32) -> Result<(), String> {
    match f.kind {
        Kind::Str | Kind::Time | Kind::MicroTime => put_len(out, f.num, b""),
        Kind::Bool | Kind::I32 | Kind::I64 => put_varint(out, f.num, 0),
        // A nil []byte is left out.
        Kind::Bytes => {}
        Kind::Msg(m) => {
            let empty = Map::new();
            nested(out, f.num, |out| {
                write_message(out, message(m), &empty, depth + 1)
            })?;
        }
        // A zero Quantity's String() is "0".
        Kind::Quantity => nested::<()>(out, f.num, |out| {
            put_len(out, 1, b"0");
            Ok(())
        })
        .unwrap_or(()),
        Kind::IntOrString => nested::<()>(out, f.num, |out| {
            put_varint(out, 1, 0);
            put_varint(out, 2, 0);
            put_len(out, 3, b"");
            Ok(())
        })
        .unwrap_or(()),
        // A nil raw inside an empty message; a nil string list or either-or, an empty wrapper.
        Kind::Raw | Kind::StrList | Kind::OrArray(_) | Kind::OrBool(_) | Kind::OrStrings(_) => {
            put_len(out, f.num, b"");
        }
        Kind::F64 => put_f64(out, f.num, 0.0),
    }
    Ok(())
}

fn integer(v: &Json) -> Result<i64, String> {
    if let Some(i) = v.as_i64() {
        return Ok(i);
    }
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 9.2e18 => Ok(x as i64),
        _ => Err(format!("expected an integer, got {v}")),
    }
}

fn write_value(
    out: &mut Vec<u8>,
    num: u32,
    kind: Kind,
    v: &Json,
    depth: u32,
) -> Result<(), String> {
    let text = |v: &Json| -> Result<String, String> {
        match v {
            Json::String(s) => Ok(s.clone()),
            _ => Err(format!("expected a string, got {v}")),
        }
    };
    match kind {
        Kind::Str => put_len(out, num, text(v)?.as_bytes()),
        Kind::Bytes => {
            let b = STANDARD
                .decode(text(v)?)
                .map_err(|e| format!("base64: {e}"))?;
            put_len(out, num, &b);
        }
        Kind::Bool => put_varint(
            out,
            num,
            u64::from(v.as_bool().ok_or("expected a boolean")?),
        ),
        Kind::I32 => {
            let i = integer(v)?;
            let i = i32::try_from(i).map_err(|_| format!("{i} does not fit 32 bits"))?;
            put_varint(out, num, i64::from(i) as u64);
        }
        Kind::I64 => put_varint(out, num, integer(v)? as u64),
        Kind::Msg(m) => {
            let obj = v.as_object().ok_or("expected an object")?;
            nested(out, num, |out| {
                write_message(out, message(m), obj, depth + 1)
            })?;
        }
        Kind::Time | Kind::MicroTime => {
            let (secs, nanos) = parse_time(&text(v)?)?;
            // Time keeps whole seconds on the wire as upstream reads it; a zero time is empty.
            let nanos = if kind == Kind::Time {
                0
            } else {
                nanos / 1000 * 1000
            };
            if secs == GO_ZERO_UNIX && nanos == 0 {
                put_len(out, num, b"");
            } else {
                nested::<()>(out, num, |out| {
                    put_varint(out, 1, secs as u64);
                    put_varint(out, 2, i64::from(nanos) as u64);
                    Ok(())
                })
                .unwrap_or(());
            }
        }
        Kind::Quantity => {
            let s = match v {
                Json::String(s) => s.clone(),
                Json::Number(n) => n.to_string(),
                _ => return Err(format!("a quantity must be a string or a number, got {v}")),
            };
            nested::<()>(out, num, |out| {
                put_len(out, 1, s.as_bytes());
                Ok(())
            })
            .unwrap_or(());
        }
        Kind::IntOrString => {
            let (ty, int, s) = match v {
                Json::String(s) => (1, 0, s.as_str()),
                Json::Number(_) => {
                    let i = integer(v)?;
                    let i = i32::try_from(i).map_err(|_| format!("{i} does not fit 32 bits"))?;
                    (0, i, "")
                }
                _ => return Err(format!("expected an integer or a string, got {v}")),
            };
            nested::<()>(out, num, |out| {
                put_varint(out, 1, ty);
                put_varint(out, 2, i64::from(int) as u64);
                put_len(out, 3, s.as_bytes());
                Ok(())
            })
            .unwrap_or(());
        }
        Kind::F64 => put_f64(out, num, v.as_f64().ok_or("expected a number")?),
        // apiextensions' either-or wrappers, as their `UnmarshalJSON` reads them, in gogo's
        // field order.
        Kind::OrArray(m) | Kind::OrBool(m) | Kind::OrStrings(m) => {
            let props = message(m);
            let schema = |out: &mut Vec<u8>, n: u32, o: &Json| -> Result<(), String> {
                let o = o.as_object().ok_or("expected a JSON schema object")?;
                nested(out, n, |out| write_message(out, props, o, depth + 1))
            };
            nested(out, num, |out| match (kind, v) {
                (Kind::OrBool(_), Json::Bool(b)) => {
                    put_varint(out, 1, u64::from(*b));
                    Ok(())
                }
                (Kind::OrBool(_), Json::Object(_)) => {
                    put_varint(out, 1, 1);
                    schema(out, 2, v)
                }
                (Kind::OrBool(_), _) => Err("boolean or JSON schema expected".into()),
                (_, Json::Object(_)) => schema(out, 1, v),
                (Kind::OrArray(_), Json::Array(items)) => {
                    for item in items {
                        schema(out, 2, item)?;
                    }
                    Ok(())
                }
                (Kind::OrStrings(_), Json::Array(items)) => {
                    for item in items {
                        put_len(out, 2, text(item)?.as_bytes());
                    }
                    Ok(())
                }
                (_, Json::Null) => Ok(()),
                _ => Err(format!("expected a JSON schema or an array, got {v}")),
            })?;
        }
        Kind::StrList => {
            let items = v.as_array().ok_or("expected an array of strings")?;
            nested(out, num, |out| {
                for item in items {
                    put_len(out, 1, text(item)?.as_bytes());
                }
                Ok::<(), String>(())
            })?;
        }
        Kind::Raw => {
            let json = serde_json::to_vec(v).map_err(|e| e.to_string())?;
            nested::<()>(out, num, |out| {
                put_len(out, 1, &json);
                Ok(())
            })
            .unwrap_or(());
        }
    }
    Ok(())
}

/// Seconds since 1970 and nanoseconds of an RFC 3339 time (`Z` or a numeric offset).
pub(crate) fn parse_time(s: &str) -> Result<(i64, i32), String> {
    let bad = || format!("{s:?} is not an RFC 3339 time");
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = b.get(r).ok_or_else(bad)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        Ok(part.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0')))
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return Err(bad());
    }
    let mut i = 19;
    let mut nanos = 0i64;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start || i - start > 9 {
            return Err(bad());
        }
        nanos = num(start..i)? * 10i64.pow(9 - (i - start) as u32);
    }
    let offset = match b.get(i..) {
        Some(b"Z" | b"z") => 0,
        Some([sign @ (b'+' | b'-'), _, _, b':', _, _]) => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return Err(bad()),
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset;
    Ok((secs, nanos as i32))
}

/// Days from 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One field of a message with the span of bytes it takes (tag included).
pub(crate) fn spans(
    buf: &[u8],
) -> impl Iterator<Item = Result<(u32, Value<'_>, std::ops::Range<usize>), String>> {
    let mut it = Fields::new(buf);
    std::iter::from_fn(move || {
        let start = it.pos();
        let item = it.next()?;
        Some(
            item.map(|(n, v)| (n, v, start..it.pos()))
                .map_err(|e| e.to_string()),
        )
    })
}

/// A stored value (`k8s\0` + envelope) with `metadata.resourceVersion` (ObjectMeta field 6) set to
/// `rv`, and where the object's message is in the result. Only the metadata's field and the
/// length prefixes around it change; every other byte is copied as stored.
///
/// # Errors
/// A value that is not a well-formed envelope around a message with metadata.
pub(crate) fn with_resource_version(
    value: &[u8],
    rv: u64,
) -> Result<(Vec<u8>, std::ops::Range<usize>), String> {
    let body = value.strip_prefix(MAGIC).ok_or("no k8s protobuf prefix")?;
    let mut digits = itoa::Buffer::new();
    let digits = if rv == 0 { "" } else { digits.format(rv) };
    let mut out = Vec::with_capacity(value.len() + 16);
    out.extend_from_slice(MAGIC);
    // A repeated `raw`: the last one is the object, as the decoder reads it (earlier ones are
    // left out, unread).
    let mut last_raw = None;
    for (i, e) in spans(body).enumerate() {
        if let (2, Value::Len(_), _) = e? {
            last_raw = Some(i);
        }
    }
    let mut raw_at = None;
    for (i, e) in spans(body).enumerate() {
        let (n, v, span) = e?;
        match (n, v) {
            (2, Value::Len(_)) if Some(i) != last_raw => {}
            (2, Value::Len(raw)) => {
                let mut obj = Vec::with_capacity(raw.len() + 16);
                splice_object(&mut obj, raw, digits)?;
                tag(&mut out, 2, 2);
                varint(&mut out, obj.len() as u64);
                let at = out.len();
                out.extend_from_slice(&obj);
                raw_at = Some(at..out.len());
            }
            _ => out.extend_from_slice(&body[span]),
        }
    }
    let raw_at = raw_at.ok_or("envelope: no raw message")?;
    Ok((out, raw_at))
}

/// The object's message with its metadata's field 6 replaced.
fn splice_object(out: &mut Vec<u8>, raw: &[u8], digits: &str) -> Result<(), String> {
    let mut done = false;
    for e in spans(raw) {
        let (n, v, span) = e?;
        match (n, v) {
            (1, Value::Len(meta)) if !done => {
                done = true;
                nested(out, 1, |out| splice_meta(out, meta, digits))?;
            }
            _ => out.extend_from_slice(&raw[span]),
        }
    }
    if !done {
        return Err("object: no metadata".into());
    }
    Ok(())
}

fn splice_meta(out: &mut Vec<u8>, meta: &[u8], digits: &str) -> Result<(), String> {
    let mut written = false;
    for e in spans(meta) {
        let (n, _, span) = e?;
        if n == 6 {
            if !written {
                put_len(out, 6, digits.as_bytes());
                written = true;
            }
            continue;
        }
        if n > 6 && !written {
            put_len(out, 6, digits.as_bytes());
            written = true;
        }
        out.extend_from_slice(&meta[span]);
    }
    if !written {
        put_len(out, 6, digits.as_bytes());
    }
    Ok(())
}

/// Where the object's message is in an envelope.
pub(crate) fn raw_range(value: &[u8]) -> Option<std::ops::Range<usize>> {
    let body = value.strip_prefix(MAGIC)?;
    let mut found = None;
    for e in spans(body) {
        let (n, v, _) = e.ok()?;
        if let (2, Value::Len(raw)) = (n, v) {
            let at = raw.as_ptr() as usize - value.as_ptr() as usize;
            found = Some(at..at + raw.len());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_rfc3339() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok((0, 0)));
        assert_eq!(parse_time("0001-01-01T00:00:00Z"), Ok((GO_ZERO_UNIX, 0)));
        assert_eq!(
            parse_time("2024-03-01T12:30:45.123456Z"),
            Ok((1_709_296_245, 123_456_000))
        );
        assert_eq!(
            parse_time("2024-03-01T14:30:45+02:00"),
            Ok((1_709_296_245, 0))
        );
        for bad in [
            "",
            "2024-03-01",
            "2024-13-01T00:00:00Z",
            "2024-03-01T00:00:00",
            "2024-03-01T00:00:00.Z",
            "x024-03-01T00:00:00Z",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn long_nested_messages_get_multi_byte_lengths() {
        let mut out = Vec::new();
        nested::<()>(&mut out, 1, |o| {
            o.extend_from_slice(&[7; 300]);
            Ok(())
        })
        .unwrap();
        assert_eq!(&out[..3], &[0x0a, 0xac, 0x02]);
        assert_eq!(out.len(), 303);
    }

    #[test]
    fn resource_version_is_spliced_without_touching_the_rest() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "b", "uid": "u"}, "spec": {"nodeName": "n"}});
        let stored = encode_json(&pod).unwrap();
        let (out, raw) = with_resource_version(&stored, 1_234_567).unwrap();
        let mut with_rv = pod.clone();
        with_rv["metadata"]["resourceVersion"] = "1234567".into();
        assert_eq!(out, encode_json(&with_rv).unwrap());
        let env = super::super::Envelope::parse(&out).unwrap();
        assert_eq!(env.raw, &out[raw]);
        // Back to empty: the stored bytes again.
        assert_eq!(with_resource_version(&out, 0).unwrap().0, stored);
        assert!(with_resource_version(b"k8s\0\x12\x05abc", 1).is_err());
        // A repeated raw: the last one is the object, as the decoder reads it.
        let at = super::super::raw_range(&stored).unwrap();
        let field_at = at.start - if at.len() < 0x80 { 2 } else { 3 };
        let mut twice = stored[..field_at].to_vec();
        twice.extend_from_slice(&[0x12, 3, 0xff, 0xff, 0xff]);
        twice.extend_from_slice(&stored[field_at..]);
        assert_eq!(with_resource_version(&twice, 1_234_567).unwrap().0, out);
        assert!(with_resource_version(b"{}", 1).is_err());
    }
}

//! Fuzz targets: every reader of outside input, each a function of raw bytes that panics when an
//! invariant breaks. `tests/core/fuzz.rs` drives them with a mutating fuzzer over the corpus in
//! `tests/fuzz-corpus/` (bounded time in CI, longer by `FUZZ_SECONDS`). Behind the `fuzzing`
//! feature: not part of the library's API.
//!
//! Every target is total: any input is either accepted or answered with a typed error, never a
//! panic, and what is accepted is what a strict client can read back.

use crate::model::{FieldSelector, LabelSelector, ResourceDef};
use crate::{Cache, CacheConfig};

/// The field selector parser: errors are typed; an accepted selector's canonical form parses to
/// the same selector.
pub fn field_selector(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = FieldSelector::parse(text) {
        let again = FieldSelector::parse(&sel.to_string())
            .unwrap_or_else(|e| panic!("canonical form {sel} does not parse: {e}"));
        assert_eq!(again.to_string(), sel.to_string());
    }
}

/// The label selector parser, likewise.
pub fn label_selector(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = LabelSelector::parse(text) {
        let again = LabelSelector::parse(&sel.to_string())
            .unwrap_or_else(|e| panic!("canonical form {sel} does not parse: {e}"));
        assert_eq!(again.to_string(), sel.to_string());
    }
}

thread_local! {
    // Decoding needs no writer.
    static PODS: Cache = Cache::new(
        ResourceDef::builtin("pods").unwrap_or_else(|| panic!("pods is built in")),
        CacheConfig::default(),
    ).0;
}

/// The object decoder, on a value stored under `/registry/pods/default/web`: what it accepts is
/// served, so its JSON (and the JSON of a DELETED event made from it) must be valid JSON that
/// serde_json reads back, naming the key's object, with the revision spliced in.
pub fn object(data: &[u8]) {
    PODS.with(|cache| {
        let Ok(obj) = cache.decode("/registry/pods/default/web", data, 41) else {
            return;
        };
        assert_eq!((obj.namespace(), obj.name()), (Some("default"), "web"));
        for (json, rv) in [(obj.json().clone(), 41), (obj.json_at(12345), 12345)] {
            let v: serde_json::Value = serde_json::from_slice(&json).unwrap_or_else(|e| {
                panic!(
                    "served JSON is invalid ({e}): {}",
                    String::from_utf8_lossy(&json)
                )
            });
            assert_eq!(v["metadata"]["name"], "web");
            assert_eq!(v["metadata"]["resourceVersion"], rv.to_string());
            assert!(
                !json.contains(&b'\n'),
                "one event per line needs compact JSON"
            );
        }
        protobuf_round_trip(cache, &obj);
    });
}

/// The protobuf encoder and decoder agree: an accepted object's protobuf (its stored bytes with
/// the revision spliced in, or its JSON encoded) decodes back, its JSON encodes to the canonical
/// form of the same object, and that form is a fixed point; a JSON object a built-in message
/// cannot hold is a typed error.
fn protobuf_round_trip(cache: &Cache, obj: &crate::Object) {
    let key = "/registry/pods/default/web";
    let pb = match obj.protobuf_wire() {
        Ok(pb) => pb.clone(),
        Err(e) => {
            assert!(
                obj.protobuf().is_none(),
                "a stored protobuf object always re-encodes: {e}"
            );
            return;
        }
    };
    let back = cache
        .decode(key, &pb, 41)
        .unwrap_or_else(|e| panic!("served protobuf does not decode: {e}"));
    assert_eq!(back.protobuf_wire().ok(), Some(&pb), "splice is stable");
    let from_json = cache
        .decode(key, back.json(), 41)
        .unwrap_or_else(|e| panic!("the JSON of served protobuf does not decode: {e}"));
    let again = from_json
        .protobuf_wire()
        .unwrap_or_else(|e| panic!("the JSON of served protobuf does not encode: {e}"));
    // Canonical protobuf (what kube-apiserver writes, and every upstream vector, checked in
    // `model/protobuf/tests.rs`) comes back byte for byte. Other accepted bytes (unknown fields,
    // which are served as stored, as are repeats and strings that are not UTF-8, U+FFFD in
    // JSON) come back in their canonical form, which is then a fixed point: its JSON is the same
    // object, and it encodes to itself.
    // (A member that is `null` reads as absent: a pointer present but zero, such as an empty
    // `deletionTimestamp`, is JSON `null`, and `null` reads back as a nil pointer, as in Go.)
    let value = |b: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(b)
            .ok()
            .map(without_nulls)
    };
    let twice = cache
        .decode(key, again, 41)
        .unwrap_or_else(|e| panic!("re-encoded protobuf does not decode: {e}"));
    assert_eq!(
        value(twice.json()),
        value(back.json()),
        "protobuf → JSON → protobuf → JSON changed the object"
    );
    let thrice = cache
        .decode(key, twice.json(), 41)
        .unwrap_or_else(|e| panic!("canonical JSON does not decode: {e}"));
    assert!(
        thrice.protobuf_wire().ok() == Some(again),
        "canonical protobuf is not a fixed point: {}",
        String::from_utf8_lossy(back.json())
    );
}

/// A JSON value with its `null` members left out, at every depth.
fn without_nulls(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => m
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k, without_nulls(v)))
            .collect(),
        serde_json::Value::Array(a) => a.into_iter().map(without_nulls).collect(),
        v => v,
    }
}

/// Continue tokens: errors are typed; an accepted token re-encodes to an equal token.
pub fn continue_token(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((rv, key)) = crate::cache::continue_token::decode(text) {
        let again = match rv {
            Some(rv) => crate::cache::continue_token::encode(rv, &key),
            None => crate::cache::continue_token::encode_latest(&key),
        };
        let decoded = crate::cache::continue_token::decode(&again)
            .unwrap_or_else(|e| panic!("re-encoded token {again} does not decode: {e:?}"));
        assert_eq!(decoded, (rv, key));
    }
}

//! `meta.k8s.io/v1` `PartialObjectMetadata` (what client-go's metadata client and informers ask
//! for): an object's `ObjectMeta`, in protobuf and in JSON exactly as kube-apiserver writes it.
//!
//! An object stored as protobuf carries its `ObjectMeta` message as field 1 of its own message:
//! it is taken as it is (with the served resourceVersion already spliced in). An object stored
//! as JSON (a custom resource) has its `metadata` encoded with the `ObjectMeta` table; its JSON
//! is then written from that message, so the members come in the Go struct's order with its
//! omission rules, as upstream's conversion through `metav1.ObjectMeta` writes them.

use serde_json::{Map, Value as Json};

use crate::model::protobuf::catalog::object_meta;
use crate::model::protobuf::{
    WireFields as Fields, WireValue as Value, encode_message, envelope, put_len, raw_range,
    write_message_json,
};

/// The API version of the `PartialObjectMetadata` served here.
pub(crate) const META_V1: &str = "meta.k8s.io/v1";

/// The `ObjectMeta` message of an object's envelope (field 1 of its message).
pub(crate) fn envelope_meta(envelope: &[u8]) -> Option<&[u8]> {
    let raw = envelope.get(raw_range(envelope)?)?;
    let mut found = None;
    for f in Fields::new(raw) {
        if let Ok((1, Value::Len(b))) = f {
            found = Some(b);
        }
    }
    found
}

/// The `ObjectMeta` message of a JSON object's `metadata`.
///
/// # Errors
/// A member of the wrong JSON type.
pub(crate) fn encode_meta(meta: &Map<String, Json>) -> Result<Vec<u8>, String> {
    encode_message(object_meta(), meta)
}

/// The JSON of an `ObjectMeta` message, as encoding/json writes `metav1.ObjectMeta`.
///
/// # Errors
/// Bytes that are not an `ObjectMeta`.
pub(crate) fn meta_json(out: &mut Vec<u8>, meta: &[u8]) -> Result<(), String> {
    write_message_json(out, object_meta(), meta)
}

/// A `PartialObjectMetadata` message {metadata = 1}.
pub(crate) fn partial_message(meta: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(meta.len() + 8);
    put_len(&mut out, 1, meta);
    out
}

/// A `PartialObjectMetadata` in its envelope (a GET's body, a watch event's object).
pub(crate) fn partial_envelope(meta: &[u8]) -> Vec<u8> {
    envelope(META_V1, "PartialObjectMetadata", &partial_message(meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_in_go_order() {
        let meta: Map<String, Json> = serde_json::from_str(
            r#"{"uid":"u","name":"w","namespace":"a","resourceVersion":"7","labels":{"b":"2","a":"1"},
            "managedFields":[{"time":"2026-01-02T03:04:05Z","manager":"m","operation":"Update","apiVersion":"example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}],
            "creationTimestamp":"2026-01-02T03:04:05Z","generation":2,"unknown":"dropped"}"#,
        )
        .unwrap();
        let pb = encode_meta(&meta).unwrap();
        let mut out = Vec::new();
        meta_json(&mut out, &pb).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"name":"w","namespace":"a","uid":"u","resourceVersion":"7","generation":2,"creationTimestamp":"2026-01-02T03:04:05Z","labels":{"a":"1","b":"2"},"managedFields":[{"manager":"m","operation":"Update","apiVersion":"example.com/v1","time":"2026-01-02T03:04:05Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]}"#
        );
        let env = partial_envelope(&pb);
        assert!(env.starts_with(crate::model::protobuf::MAGIC));
        // PartialObjectMetadata's metadata is field 1, as every object's.
        assert_eq!(envelope_meta(&env), Some(pb.as_slice()));
        let inner = raw_range(&env).unwrap();
        assert_eq!(&env[inner], partial_message(&pb).as_slice());
    }
}

//! JSON as Go's encoding/json writes kube-apiserver's types, for the documents this server builds
//! itself (Tables, PartialObjectMetadata): struct members in their declaration order, maps sorted
//! by key, strings escaped as Go escapes them (HTML characters included).

use serde_json::Value;

/// A string.
pub(crate) fn string(out: &mut Vec<u8>, s: &str) {
    crate::model::protobuf::write_json_str(out, s);
}

/// Any value, as Go writes it from `interface{}`: objects as maps (keys sorted), strings
/// Go-escaped, floats in Go's form.
pub(crate) fn value(out: &mut Vec<u8>, v: &Value) {
    crate::model::protobuf::write_json_value(out, v);
}

/// An object as a Go struct: the members named in `order`, in that order, those it lacks left
/// out (members not named are not written).
pub(crate) fn fields(out: &mut Vec<u8>, v: &Value, order: &[&str]) {
    out.push(b'{');
    let mut first = true;
    for k in order {
        let Some(x) = v.get(*k) else {
            continue;
        };
        if !first {
            out.push(b',');
        }
        first = false;
        string(out, k);
        out.push(b':');
        value(out, x);
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structs_keep_their_order_and_strings_are_escaped_as_go_does() {
        let mut out = Vec::new();
        fields(
            &mut out,
            &json!({"priority": 0, "name": "<none>", "type": "string", "extra": 1}),
            &["name", "type", "format", "priority"],
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"name":"\u003cnone\u003e","type":"string","priority":0}"#
        );
        let mut out = Vec::new();
        value(&mut out, &json!({"b": [1, "&"], "a": null}));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":null,"b":[1,"\u0026"]}"#
        );
    }
}

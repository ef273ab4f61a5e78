//! Server-side field validation (`fieldValidation`): the fields of a JSON object that its type does
//! not declare, found with the same tables the protobuf codec uses, so a built-in kind is checked
//! against exactly its Go struct (case-sensitively, like kube-apiserver's strict decoder). Custom
//! resources have no table: only their `metadata` (always an `ObjectMeta`) is checked.
//!
//! Paths are written as upstream's strict decoder writes them: dotted field names from the root,
//! `[i]` for list elements (`spec.containers[0].foo`); a map's keys are not part of the path.

use serde_json::{Map, Value};

use super::catalog::{kind_message, message, object_meta};
use super::schema::{Card, Kind, Message};

/// How deep the walk goes: the JSON decoder already refuses nesting beyond 100 levels, this only
/// keeps the recursion bounded whatever the caller hands in.
const MAX_DEPTH: u32 = 128;

/// The top-level members every object may carry besides its type's fields (`TypeMeta`, inline).
const TYPE_META: [&str; 2] = ["apiVersion", "kind"];

/// The undeclared fields of `obj`, an object of `api_version`/`kind`, in path order; with `prune`,
/// they are also removed, as decoding into the Go type drops them.
pub(crate) fn unknown_fields(
    api_version: &str,
    kind: &str,
    obj: &mut Map<String, Value>,
    prune: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut path = String::new();
    match kind_message(api_version, kind) {
        Some(msg) => walk_object(msg, obj, prune, &mut path, &mut out, 0, true),
        None => {
            if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
                path.push_str("metadata");
                walk_object(object_meta(), meta, prune, &mut path, &mut out, 1, false);
            }
        }
    }
    out
}

fn push_segment(path: &mut String, name: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
}

fn walk_object(
    msg: &'static Message,
    obj: &mut Map<String, Value>,
    prune: bool,
    path: &mut String,
    out: &mut Vec<String>,
    depth: u32,
    top: bool,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut unknown: Vec<String> = Vec::new();
    for (name, value) in obj.iter_mut() {
        let at = path.len();
        push_segment(path, name);
        match msg.json_field(name) {
            Some((field, _)) => walk_value(field.kind, field.card, value, prune, path, out, depth),
            None if top && TYPE_META.contains(&name.as_str()) => {}
            None => {
                out.push(path.clone());
                if prune {
                    unknown.push(name.clone());
                }
            }
        }
        path.truncate(at);
    }
    for name in unknown {
        obj.remove(&name);
    }
}

fn walk_value(
    kind: Kind,
    card: Card,
    value: &mut Value,
    prune: bool,
    path: &mut String,
    out: &mut Vec<String>,
    depth: u32,
) {
    let Kind::Msg(i) = kind else {
        // Scalars, quantities, times, int-or-string, and raw JSON (RawExtension, FieldsV1) have
        // no fields to check.
        return;
    };
    let msg = message(i);
    match (card, value) {
        (Card::One | Card::Ptr, Value::Object(o)) => {
            walk_object(msg, o, prune, path, out, depth + 1, false);
        }
        (Card::Rep, Value::Array(items)) => {
            for (n, item) in items.iter_mut().enumerate() {
                if let Value::Object(o) = item {
                    let at = path.len();
                    path.push('[');
                    path.push_str(itoa::Buffer::new().format(n));
                    path.push(']');
                    walk_object(msg, o, prune, path, out, depth + 1, false);
                    path.truncate(at);
                }
            }
        }
        (Card::Map(_), Value::Object(entries)) => {
            for entry in entries.values_mut() {
                if let Value::Object(o) = entry {
                    walk_object(msg, o, prune, path, out, depth + 1, false);
                }
            }
        }
        // A value of the wrong JSON type is the decoder's error to report, not an unknown field.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(api_version: &str, kind: &str, v: Value, prune: bool) -> (Vec<String>, Value) {
        let Value::Object(mut m) = v else {
            panic!("not an object")
        };
        let found = unknown_fields(api_version, kind, &mut m, prune);
        (found, Value::Object(m))
    }

    #[test]
    fn a_valid_pod_has_no_unknown_fields() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                     "resources": {"limits": {"cpu": "1"}}, "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": null}]}
        });
        let (found, _) = check("v1", "Pod", pod, false);
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn unknown_fields_are_named_by_path_and_pruned() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "colour": "red"},
            "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d", "image": "i", "lifecycle": {"preStart": {}}}],
                     "NodeName": "case matters"},
            "extra": 1
        });
        let (found, pruned) = check("v1", "Pod", pod, true);
        assert_eq!(
            found,
            [
                "extra",
                "metadata.colour",
                "spec.NodeName",
                "spec.containers[1].lifecycle.preStart"
            ]
        );
        assert_eq!(
            pruned,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d", "image": "i", "lifecycle": {}}]}})
        );
    }

    #[test]
    fn without_prune_the_object_is_untouched() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}, "date": {}});
        let (found, kept) = check("v1", "ConfigMap", cm.clone(), false);
        assert_eq!(found, ["date"]);
        assert_eq!(kept, cm);
    }

    #[test]
    fn raw_extensions_and_map_values_accept_anything_their_type_allows() {
        let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e",
            "managedFields": [{"manager": "m", "fieldsV1": {"f:anything": {}}}]},
            "involvedObject": {"kind": "Pod"}});
        assert_eq!(check("v1", "Event", event, false).0, Vec::<String>::new());
    }

    #[test]
    fn custom_resources_check_only_their_metadata() {
        let cr = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "lables": {}}, "spec": {"anything": [1, 2]}});
        let (found, _) = check("example.com/v1", "Widget", cr, false);
        assert_eq!(found, ["metadata.lables"]);
    }
}

//! OpenAPI v3: `/openapi/v3` (the index of group-version documents) and `/openapi/v3/api/v1`,
//! `/openapi/v3/apis/{group}/{version}` (one document each), as kube-apiserver serves them, so that
//! kubectl's default validation, `apply` and `explain` work.
//!
//! No definition declares a schema yet: each kind gets a permissive one (`apiVersion`, `kind`,
//! `metadata`, `spec`, `status`, anything else preserved), tagged with its group-version-kind.
//! Each object path's PATCH operation lists the `fieldValidation` query parameter, which is how
//! kubectl learns that the server validates fields itself (it then sends
//! `fieldValidation=Strict` instead of validating client-side).
//!
//! `/openapi/v2` is not served (404): kubectl asks for it only in protobuf, and only when v3 is
//! missing.

use serde_json::{Map, Value, json};

use crate::model::ResourceDef;
use crate::server::discovery::{Entry, KUBERNETES_MINOR};

/// The schema name of a kind, as upstream names them (`io.k8s.api.core.v1.Pod` for the core
/// group; the group's labels reversed otherwise: `com.example.v1alpha1.Widget`).
fn schema_name(d: &ResourceDef) -> String {
    if d.group.is_empty() {
        format!("io.k8s.api.core.{}.{}", d.version, d.kind)
    } else {
        let rev: Vec<&str> = d.group.split('.').rev().collect();
        format!("{}.{}.{}", rev.join("."), d.version, d.kind)
    }
}

fn gvk(d: &ResourceDef) -> Value {
    json!({"group": d.group, "version": d.version, "kind": d.kind})
}

/// The path of a group version's document, relative to the server (`api/v1`, `apis/g/v`).
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: one entry per group version served. The `hash` lets clients cache a document
/// for as long as what it describes is unchanged (it changes with the definitions).
pub fn index(entries: &[Entry<'_>]) -> Value {
    let mut paths = Map::new();
    for e in entries {
        let p = gv_path(&e.def.group, &e.def.version);
        if !paths.contains_key(&p) {
            let doc = group_version(entries, &e.def.group, &e.def.version)
                .map(|d| d.to_string())
                .unwrap_or_default();
            let url = format!("/openapi/v3/{p}?hash={:016X}", fnv1a(doc.as_bytes()));
            paths.insert(p, json!({ "serverRelativeURL": url }));
        }
    }
    json!({ "paths": paths })
}

/// FNV-1a: a stable content hash for the documents' cache-busting `hash` (not security).
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn query_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": "string", "uniqueItems": true},
    })
}

fn operation(d: &ResourceDef, action: &str, writes: bool) -> Value {
    let reference = json!({"$ref": format!("#/components/schemas/{}", schema_name(d))});
    let mut op = json!({
        "operationId": format!("{action}{}", d.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(d),
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
    });
    if writes {
        op["parameters"] = json!([
            query_param(
                "dryRun",
                "When present, indicates that modifications should not be persisted. The only valid value is All."
            ),
            query_param(
                "fieldManager",
                "A name associated with the actor or entity that is making these changes."
            ),
            query_param(
                "fieldValidation",
                "Ignore, Warn or Strict: what to do with unknown or duplicate fields."
            ),
        ]);
        op["requestBody"] =
            json!({"content": {"application/json": {"schema": reference}}, "required": true});
    }
    op
}

/// One group version's document, if any resource is served in it.
pub fn group_version(entries: &[Entry<'_>], group: &str, version: &str) -> Option<Value> {
    let here: Vec<&Entry<'_>> = entries
        .iter()
        .filter(|e| e.def.group == group && e.def.version == version)
        .collect();
    if here.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let base = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    for e in here {
        let d = e.def;
        let scope = if d.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", d.plural)
        } else {
            format!("{base}/{}", d.plural)
        };
        let mut collection = json!({"get": operation(d, "list", false)});
        let mut item = json!({"get": operation(d, "get", false)});
        if e.writable {
            collection["post"] = operation(d, "post", true);
            item["put"] = operation(d, "put", true);
            item["patch"] = operation(d, "patch", true);
            item["delete"] = operation(d, "delete", false);
        }
        paths.insert(scope.clone(), collection);
        paths.insert(format!("{scope}/{{name}}"), item);
        let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        schemas.insert(
            schema_name(d),
            json!({
                "description": format!(
                    "{} ({}). No schema is declared for this resource: any field is accepted and kept.",
                    d.kind, d.plural
                ),
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
                    "kind": {"type": "string", "description": "The REST resource this object represents."},
                    "metadata": {"type": "object", "description": "Standard object metadata.", "x-kubernetes-preserve-unknown-fields": true},
                    "spec": open.clone(),
                    "status": open,
                },
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": [gvk(d)],
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (watchcache)", "version": format!("v1.{KUBERNETES_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_name_each_kind_and_offer_field_validation_on_patch() {
        let defs = ResourceDef::builtins();
        let entries: Vec<Entry<'_>> = defs
            .iter()
            .map(|def| Entry {
                def,
                writable: true,
            })
            .collect();
        let idx = index(&entries);
        let url = idx["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
        assert!(idx["paths"]["apis/example.com/v1alpha1"].is_object());
        let doc = group_version(&entries, "", "v1").unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Pod");
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());
        let w = group_version(&entries, "example.com", "v1alpha1").unwrap();
        assert!(w["components"]["schemas"]["com.example.v1alpha1.Widget"].is_object());
        assert!(group_version(&entries, "nope", "v1").is_none());
    }
}

//! OpenAPI: `/openapi/v3` (the index of group-version documents), `/openapi/v3/api/v1`,
//! `/openapi/v3/apis/{group}/{version}` (one document each) and `/openapi/v2` (one Swagger 2.0
//! document for everything), as kube-apiserver serves them, so that kubectl's default validation,
//! `apply` and `explain` work.
//!
//! A built-in kind's schema is its Go type's, generated from the same tables the protobuf codec
//! uses (`model::protobuf::schema`): every field with its JSON name and type, nested types as
//! `$ref`s named as upstream names them (`io.k8s.api.core.v1.PodSpec`), so `kubectl explain
//! pods.spec.containers` walks the real structure. Other kinds (custom resources) get a permissive
//! schema (`apiVersion`, `kind`, `metadata`, `spec`, `status`, anything else preserved). Every
//! kind's schema is tagged with its group-version-kind. Only reads are described: writes are
//! kube-apiserver's, and with a proxy set the documents are its own (forwarded).
//!
//! The documents depend only on what is served, so they are built once per server
//! ([`Documents`]) and answered as shared bytes.
//!
//! `/openapi/v2` is served in JSON; kubectl asks for it in protobuf only (and only when v3 is
//! missing, or for `explain --output plaintext-openapiv2`), and gets 406 for that.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::endpoints::discovery::{Entry, KUBERNETES_MINOR};
use watchcache::ResourceDef;
use watchcache::protobuf::catalog::{kind_message, message, object_meta};
use watchcache::protobuf::schema::{Card, Kind, Message};

/// The schema name of a kind, as upstream names them (`io.k8s.api.core.v1.Pod` for the core
/// group; the group's labels reversed otherwise: `com.example.v1alpha1.Widget`).
fn schema_name(d: &ResourceDef) -> String {
    if let Some(m) = kind_message(&d.api_version(), &d.kind) {
        return message_schema_name(m);
    }
    if d.group.is_empty() {
        format!("io.k8s.api.core.{}.{}", d.version, d.kind)
    } else {
        let rev: Vec<&str> = d.group.split('.').rev().collect();
        format!("{}.{}.{}", rev.join("."), d.version, d.kind)
    }
}

/// The schema name of a generated message, as kube-openapi names Go types: its package path under
/// `k8s.io`, dotted (`api/core/v1.PodSpec` → `io.k8s.api.core.v1.PodSpec`).
fn message_schema_name(m: &Message) -> String {
    format!("io.k8s.{}", m.name.replace('/', "."))
}

/// Which OpenAPI a document is written in: where `$ref`s point and how a few types are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    V2,
    V3,
}

impl Dialect {
    fn reference(self, name: &str) -> Value {
        match self {
            Dialect::V2 => json!({ "$ref": format!("#/definitions/{name}") }),
            Dialect::V3 => json!({ "$ref": format!("#/components/schemas/{name}") }),
        }
    }
}

/// The schema of one value of `kind` (not yet its cardinality).
fn value_schema(kind: Kind, dialect: Dialect, out: &mut BTreeMap<String, Value>) -> Value {
    match kind {
        Kind::Str => json!({"type": "string"}),
        Kind::Bytes => json!({"type": "string", "format": "byte"}),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::I32 => json!({"type": "integer", "format": "int32"}),
        Kind::I64 => json!({"type": "integer", "format": "int64"}),
        Kind::Time | Kind::MicroTime => json!({"type": "string", "format": "date-time"}),
        // kube-openapi: a string in v2; a string or a number in v3.
        Kind::Quantity => match dialect {
            Dialect::V2 => json!({"type": "string"}),
            Dialect::V3 => json!({"oneOf": [{"type": "string"}, {"type": "number"}]}),
        },
        Kind::IntOrString => match dialect {
            Dialect::V2 => json!({"type": "string", "format": "int-or-string"}),
            Dialect::V3 => json!({"x-kubernetes-int-or-string": true,
                "anyOf": [{"type": "integer"}, {"type": "string"}]}),
        },
        Kind::Raw => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        Kind::StrList => json!({"type": "array", "items": {"type": "string"}}),
        Kind::F64 => json!({"type": "number", "format": "double"}),
        // A schema, a list of schemas, a boolean or a list of strings: anything is accepted.
        Kind::OrArray(_) | Kind::OrBool(_) | Kind::OrStrings(_) => json!({}),
        Kind::Msg(i) => {
            let m = message(i);
            let name = message_schema_name(m);
            add_message(m, &name, dialect, out);
            dialect.reference(&name)
        }
    }
}

/// Adds `m` (as `name`) and every message it reaches to `out`.
fn add_message(
    m: &'static Message,
    name: &str,
    dialect: Dialect,
    out: &mut BTreeMap<String, Value>,
) {
    if out.contains_key(name) {
        return;
    }
    // Placed first: a message that (indirectly) contains itself refers to it instead of looping.
    out.insert(name.to_owned(), Value::Null);
    let mut properties = Map::new();
    add_fields(m, dialect, &mut properties, out);
    out.insert(
        name.to_owned(),
        json!({"type": "object", "properties": properties}),
    );
}

fn add_fields(
    m: &'static Message,
    dialect: Dialect,
    properties: &mut Map<String, Value>,
    out: &mut BTreeMap<String, Value>,
) {
    for f in m.fields {
        if f.json.is_empty() {
            // An inline (embedded) struct: its fields are this object's.
            if let Kind::Msg(i) = f.kind {
                add_fields(message(i), dialect, properties, out);
            }
            continue;
        }
        let one = value_schema(f.kind, dialect, out);
        let schema = match f.card {
            Card::One | Card::Ptr => one,
            Card::Rep => json!({"type": "array", "items": one}),
            Card::Map(_) => json!({"type": "object", "additionalProperties": one}),
        };
        properties.insert(f.json.to_owned(), schema);
    }
}

/// The schemas of one kind: its own (named [`schema_name`]) and every type it refers to.
fn kind_schemas(d: &ResourceDef, dialect: Dialect, out: &mut BTreeMap<String, Value>) {
    let name = schema_name(d);
    let description;
    let mut own = match kind_message(&d.api_version(), &d.kind) {
        Some(m) => {
            add_message(m, &name, dialect, out);
            description = format!(
                "{} ({}): the fields of the Kubernetes type.",
                d.kind, d.plural
            );
            out.remove(&name).unwrap_or(Value::Null)
        }
        None => {
            let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
            let meta = message_schema_name(object_meta());
            add_message(object_meta(), &meta, dialect, out);
            description = format!(
                "{} ({}). No schema is declared for this resource: any field is accepted and kept.",
                d.kind, d.plural
            );
            json!({
                "type": "object",
                "properties": {"metadata": dialect.reference(&meta), "spec": open.clone(), "status": open},
                "x-kubernetes-preserve-unknown-fields": true,
            })
        }
    };
    if let Some(props) = own.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            "apiVersion".into(),
            json!({"type": "string",
            "description": "The versioned schema of this representation of an object."}),
        );
        props.insert(
            "kind".into(),
            json!({"type": "string",
            "description": "The REST resource this object represents."}),
        );
    }
    own["description"] = Value::String(description);
    own["x-kubernetes-group-version-kind"] = json!([gvk(d)]);
    out.insert(name, own);
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

/// FNV-1a: a stable content hash for the documents' cache-busting `hash` (not security).
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn operation(d: &ResourceDef, action: &str, dialect: Dialect) -> Value {
    let reference = dialect.reference(&schema_name(d));
    let response = match dialect {
        Dialect::V2 => json!({"description": "OK", "schema": reference}),
        Dialect::V3 => {
            json!({"description": "OK", "content": {"application/json": {"schema": reference}}})
        }
    };
    let op = json!({
        "operationId": format!("{action}{}", d.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(d),
        "responses": {"200": response},
    });
    op
}

/// The paths of the resources in `entries` (all of them, or one group version's).
fn add_paths<'a>(
    entries: impl Iterator<Item = &'a Entry<'a>>,
    dialect: Dialect,
    paths: &mut Map<String, Value>,
    schemas: &mut BTreeMap<String, Value>,
) {
    for e in entries {
        let d = e.def;
        let base = if d.group.is_empty() {
            format!("/api/{}", d.version)
        } else {
            format!("/apis/{}/{}", d.group, d.version)
        };
        let scope = if d.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", d.plural)
        } else {
            format!("{base}/{}", d.plural)
        };
        let collection = json!({"get": operation(d, "list", dialect)});
        let item = json!({"get": operation(d, "get", dialect)});
        paths.insert(scope.clone(), collection);
        paths.insert(format!("{scope}/{{name}}"), item);
        kind_schemas(d, dialect, schemas);
    }
}

/// One group version's document, if any resource is served in it.
pub(super) fn group_version(entries: &[Entry<'_>], group: &str, version: &str) -> Option<Value> {
    let mut here = entries
        .iter()
        .filter(|e| e.def.group == group && e.def.version == version)
        .peekable();
    here.peek()?;
    let mut paths = Map::new();
    let mut schemas = BTreeMap::new();
    add_paths(here, Dialect::V3, &mut paths, &mut schemas);
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (watchcache)", "version": format!("v1.{KUBERNETES_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `/openapi/v2`: one Swagger 2.0 document for every served resource.
pub(super) fn v2(entries: &[Entry<'_>]) -> Value {
    let mut paths = Map::new();
    let mut definitions = BTreeMap::new();
    add_paths(entries.iter(), Dialect::V2, &mut paths, &mut definitions);
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes (watchcache)", "version": format!("v1.{KUBERNETES_MINOR}.0")},
        "paths": paths,
        "definitions": definitions,
    })
}

/// Every OpenAPI document of one server, built once (what is served does not change while it
/// runs) and answered as shared bytes.
#[derive(Debug)]
pub(crate) struct Documents {
    /// `/openapi/v3`.
    pub v3_index: Bytes,
    /// `/openapi/v3/{api/v1 | apis/g/v}`, by that relative path.
    pub v3: HashMap<String, Bytes>,
    /// `/openapi/v2`.
    pub v2: Bytes,
}

impl Documents {
    /// The documents of what `entries` serve.
    pub(crate) fn build(entries: &[Entry<'_>]) -> Documents {
        let mut v3 = HashMap::new();
        let mut index_paths = Map::new();
        for e in entries {
            let p = gv_path(&e.def.group, &e.def.version);
            if v3.contains_key(&p) {
                continue;
            }
            let doc = group_version(entries, &e.def.group, &e.def.version)
                .map(|d| d.to_string())
                .unwrap_or_default();
            let url = format!("/openapi/v3/{p}?hash={:016X}", fnv1a(doc.as_bytes()));
            index_paths.insert(p.clone(), json!({ "serverRelativeURL": url }));
            v3.insert(p, Bytes::from(doc));
        }
        Documents {
            v3_index: Bytes::from(json!({ "paths": index_paths }).to_string()),
            v3,
            v2: Bytes::from(v2(entries).to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_name_each_kind_and_describe_reads_only() {
        let defs = ResourceDef::builtins();
        let entries: Vec<Entry<'_>> = defs.iter().map(|def| Entry { def }).collect();
        let docs = Documents::build(&entries);
        let idx: Value = serde_json::from_slice(&docs.v3_index).unwrap();
        let url = idx["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
        assert!(idx["paths"]["apis/example.com/v1alpha1"].is_object());
        let doc = group_version(&entries, "", "v1").unwrap();
        let item = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
        assert_eq!(
            item["get"]["x-kubernetes-group-version-kind"]["kind"],
            "Pod"
        );
        assert_eq!(item.as_object().unwrap().len(), 1, "{item}");
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());
        let w = group_version(&entries, "example.com", "v1alpha1").unwrap();
        assert!(w["components"]["schemas"]["com.example.v1alpha1.Widget"].is_object());
        assert!(group_version(&entries, "nope", "v1").is_none());
        let served: Value = serde_json::from_slice(&docs.v3["api/v1"]).unwrap();
        assert_eq!(served, doc);
    }

    #[test]
    fn built_in_kinds_have_their_go_types_schema() {
        let defs = ResourceDef::builtins();
        let entries: Vec<Entry<'_>> = defs.iter().map(|def| Entry { def }).collect();
        let doc = group_version(&entries, "", "v1").unwrap();
        let schemas = &doc["components"]["schemas"];
        let pod = &schemas["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["properties"]["spec"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        assert_eq!(pod["properties"]["kind"]["type"], "string");
        assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
        let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["type"], "array");
        assert_eq!(
            containers["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Container"
        );
        let port = &schemas["io.k8s.api.core.v1.ContainerPort"]["properties"]["containerPort"];
        assert_eq!(port, &json!({"type": "integer", "format": "int32"}));
        let meta = &schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"];
        assert_eq!(meta["labels"]["additionalProperties"]["type"], "string");
        assert_eq!(meta["creationTimestamp"]["format"], "date-time");
        // Every reference resolves inside the document.
        let text = doc.to_string();
        for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &r[..r.find('"').unwrap()];
            assert!(schemas[name].is_object(), "dangling $ref {name}");
        }
        // A custom resource stays permissive, with a real ObjectMeta.
        let w = group_version(&entries, "example.com", "v1alpha1").unwrap();
        let widget = &w["components"]["schemas"]["com.example.v1alpha1.Widget"];
        assert_eq!(widget["x-kubernetes-preserve-unknown-fields"], true);
        assert!(
            w["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
                .is_object()
        );
        // v2: the same types under definitions.
        let v2 = v2(&entries);
        assert_eq!(v2["swagger"], "2.0");
        assert_eq!(
            v2["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.PodSpec"
        );
        let pods = &v2["paths"]["/api/v1/namespaces/{namespace}/pods"];
        assert_eq!(pods["get"]["operationId"], "listPod");
        assert!(pods["post"].is_null());
        let text = v2.to_string();
        for r in text.split("\"$ref\":\"#/definitions/").skip(1) {
            let name = &r[..r.find('"').unwrap()];
            assert!(v2["definitions"][name].is_object(), "dangling $ref {name}");
        }
    }
}

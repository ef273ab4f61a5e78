//! A custom resource read from storage as apiextensions-apiserver 1.35 reads it: pruned and
//! defaulted by its CRD's structural schema, every time it is decoded, so that a schema that
//! changed after an object was written (a new `default`, a field removed) shows in what is read.
//!
//! kube-apiserver decodes a stored custom resource through `schemaCoercingDecoder`, its
//! `unstructuredDefaulter` and `schemaCoercingConverter` (`customresource_handler.go`). For an
//! object stored at version `v` and read at the storage version `s`, that is, in order:
//! 1. unless the CRD preserves unknown fields, prune by `v`'s schema (`pruning.Prune`, the root's
//!    `apiVersion`, `kind` and `metadata` kept) and drop non-nullable nulls without a default
//!    (`PruneNonNullableNullsWithoutDefaults`);
//! 2. apply `v`'s defaults (`defaulting.Default`);
//! 3. convert to `s` (conversion `None`: the apiVersion changes) and, unless unknown fields are
//!    preserved, prune and drop nulls again by `s`'s schema.
//!
//! [`StoredSchemas`] holds only what those steps read of each version's schema (properties,
//! `items`, `additionalProperties`, `nullable`, `default`, `x-kubernetes-preserve-unknown-fields`,
//! `x-kubernetes-embedded-resource`), so that a CRD whose description alone changes compares
//! equal and keeps its cache, while one whose defaults or fields change does not.
//!
//! Not done here: the ObjectMeta coercion of embedded resources and `metadata.generation` repair
//! of CRs written before 1.11; kube-apiserver did both when it wrote what etcd holds.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// What reading a stored object needs of one version's `openAPIV3Schema` (upstream's
/// `structuralschema.Structural`, cut to pruning and defaulting).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Structural {
    properties: BTreeMap<String, Structural>,
    /// `additionalProperties`: `Some(Some(s))` a schema, `Some(None)` a bare boolean.
    additional: Option<Option<Box<Structural>>>,
    items: Option<Box<Structural>>,
    nullable: bool,
    default: Option<Value>,
    preserve_unknown: bool,
    embedded: bool,
}

/// A CRD's schemas by version, and whether it keeps unknown fields: how its stored objects are
/// read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredSchemas {
    /// `spec.preserveUnknownFields` (only ever true for CRDs made as v1beta1): no pruning.
    preserve_unknown_fields: bool,
    by_version: BTreeMap<String, Structural>,
}

/// The root's members pruning keeps whatever the schema says (`pruning.metaFields`).
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

impl Structural {
    /// The structural parts of one `openAPIV3Schema` (as the CRD cache holds it, v1).
    pub fn read(schema: &Value) -> Structural {
        let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
        Structural {
            properties: schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| {
                    p.iter()
                        .map(|(k, s)| (k.clone(), Structural::read(s)))
                        .collect()
                })
                .unwrap_or_default(),
            additional: match schema.get("additionalProperties") {
                Some(Value::Object(s)) => {
                    Some(Some(Box::new(Structural::read(&Value::Object(s.clone())))))
                }
                Some(Value::Bool(_)) => Some(None),
                _ => None,
            },
            items: schema
                .get("items")
                .filter(|s| s.is_object())
                .map(|s| Box::new(Structural::read(s))),
            nullable: flag("nullable"),
            default: schema.get("default").cloned(),
            preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
            embedded: flag("x-kubernetes-embedded-resource"),
        }
    }
}

impl StoredSchemas {
    /// Every version's schema of the CRD whose spec is `spec`.
    pub fn read(spec: &Value) -> StoredSchemas {
        let by_version = spec
            .get("versions")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| {
                        let name = v.get("name")?.as_str()?;
                        let schema = v.pointer("/schema/openAPIV3Schema")?;
                        Some((name.to_owned(), Structural::read(schema)))
                    })
                    .collect()
            })
            .unwrap_or_default();
        StoredSchemas {
            preserve_unknown_fields: spec.get("preserveUnknownFields").and_then(Value::as_bool)
                == Some(true),
            by_version,
        }
    }

    /// Reads `obj`, stored at `stored` (a version of the CRD) as the version `served` (the
    /// storage version): pruned, nulls dropped and defaulted as kube-apiserver decodes it, its
    /// apiVersion set to `api_version`. Whether anything but the apiVersion changed.
    pub fn read_stored(
        &self,
        obj: &mut Map<String, Value>,
        stored: &str,
        served: &str,
        api_version: &str,
    ) -> bool {
        let mut changed = false;
        // A version the CRD no longer lists has no schema: upstream prunes by an empty one. (Its
        // validation keeps every version of `status.storedVersions`, so this is not expected.)
        let empty = Structural::default();
        let at = self.by_version.get(stored).unwrap_or(&empty);
        changed |= self.coerce(obj, at);
        changed |= default_map(obj, at);
        if obj.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
            obj.insert("apiVersion".into(), Value::String(api_version.to_owned()));
        }
        if stored != served {
            let at = self.by_version.get(served).unwrap_or(&empty);
            changed |= self.coerce(obj, at);
        }
        changed
    }

    /// Pruning and null-dropping at the root, unless the CRD preserves unknown fields.
    fn coerce(&self, obj: &mut Map<String, Value>, s: &Structural) -> bool {
        if self.preserve_unknown_fields {
            return false;
        }
        prune_map(obj, Some(s), true) | prune_nulls_map(obj, Some(s))
    }
}

impl Structural {
    /// The schema of the member `k` of an object of this schema (`getSchemaForField`).
    fn member(&self, k: &str) -> Option<&Structural> {
        self.properties
            .get(k)
            .or_else(|| self.additional.as_ref().and_then(|a| a.as_deref()))
    }
}

/// `pruning.prune`: drops the members no schema describes. Whether anything was dropped.
fn prune(x: &mut Value, s: Option<&Structural>) -> bool {
    match x {
        Value::Object(m) => prune_map(m, s, false),
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            let mut changed = false;
            for v in a {
                changed |= match s {
                    Some(s) if s.preserve_unknown => skip_prune(v, items),
                    _ => prune(v, items),
                };
            }
            changed
        }
        _ => false,
    }
}

/// `root`: the object itself, whose meta fields are kept as an embedded resource's are.
fn prune_map(m: &mut Map<String, Value>, s: Option<&Structural>, root: bool) -> bool {
    let Some(s) = s else {
        if root {
            let before = m.len();
            m.retain(|k, _| META_FIELDS.contains(&k.as_str()));
            return m.len() != before;
        }
        let changed = !m.is_empty();
        m.clear();
        return changed;
    };
    if s.preserve_unknown {
        return skip_prune_map(m, s, root);
    }
    let before = m.len();
    let mut changed = false;
    m.retain(|k, v| {
        if (root || s.embedded) && META_FIELDS.contains(&k.as_str()) {
            return true;
        }
        if let Some(p) = s.properties.get(k) {
            changed |= prune(v, Some(p));
            true
        } else if let Some(a) = &s.additional {
            changed |= prune(v, a.as_deref());
            true
        } else {
            false
        }
    });
    changed || m.len() != before
}

/// `pruning.skipPrune`: under `x-kubernetes-preserve-unknown-fields`, unknown members stay and
/// known ones are pruned by their schema.
fn skip_prune(x: &mut Value, s: Option<&Structural>) -> bool {
    let Some(s) = s else { return false };
    match x {
        Value::Object(m) => skip_prune_map(m, s, false),
        Value::Array(a) => {
            let mut changed = false;
            for v in a {
                changed |= skip_prune(v, s.items.as_deref());
            }
            changed
        }
        _ => false,
    }
}

fn skip_prune_map(m: &mut Map<String, Value>, s: &Structural, root: bool) -> bool {
    let mut changed = false;
    for (k, v) in m.iter_mut() {
        if (root || s.embedded) && META_FIELDS.contains(&k.as_str()) {
            continue;
        }
        if let Some(p) = s.properties.get(k) {
            changed |= prune(v, Some(p));
        } else if let Some(a) = &s.additional {
            changed |= prune(v, a.as_deref());
        }
    }
    changed
}

/// A null that its schema neither allows nor defaults.
fn non_nullable_null_without_default(v: &Value, s: Option<&Structural>) -> bool {
    v.is_null() && s.is_some_and(|s| !s.nullable && s.default.is_none())
}

/// `defaulting.PruneNonNullableNullsWithoutDefaults`.
fn prune_nulls(x: &mut Value, s: Option<&Structural>) -> bool {
    match x {
        Value::Object(m) => prune_nulls_map(m, s),
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            let mut changed = false;
            for v in a {
                changed |= prune_nulls(v, items);
            }
            changed
        }
        _ => false,
    }
}

fn prune_nulls_map(m: &mut Map<String, Value>, s: Option<&Structural>) -> bool {
    let before = m.len();
    let mut changed = false;
    m.retain(|k, v| {
        let member = s.and_then(|s| s.member(k));
        if non_nullable_null_without_default(v, member) {
            return false;
        }
        changed |= prune_nulls(v, member);
        true
    });
    changed || m.len() != before
}

/// A null its schema does not allow (and so defaults, when it has a default).
fn non_nullable_null(v: &Value, s: Option<&Structural>) -> bool {
    v.is_null() && s.is_some_and(|s| !s.nullable)
}

/// `defaulting.Default`: a missing member, or a null one its schema does not allow, gets a copy
/// of its default; then every member is defaulted by its own schema.
fn default(x: &mut Value, s: &Structural) -> bool {
    match x {
        Value::Object(m) => default_map(m, s),
        Value::Array(a) => {
            let Some(items) = s.items.as_deref() else {
                return false;
            };
            let mut changed = false;
            for v in a {
                if non_nullable_null(v, Some(items)) {
                    let d = items.default.clone().unwrap_or(Value::Null);
                    changed |= *v != d;
                    *v = d;
                }
                changed |= default(v, items);
            }
            changed
        }
        _ => false,
    }
}

fn default_map(m: &mut Map<String, Value>, s: &Structural) -> bool {
    let mut changed = false;
    for (k, p) in &s.properties {
        let Some(d) = &p.default else { continue };
        match m.get_mut(k) {
            None => {
                m.insert(k.clone(), d.clone());
                changed = true;
            }
            Some(v) if non_nullable_null(v, Some(p)) => {
                *v = d.clone();
                changed = true;
            }
            Some(_) => {}
        }
    }
    for (k, v) in m.iter_mut() {
        if let Some(p) = s.properties.get(k) {
            changed |= default(v, p);
        } else if let Some(Some(a)) = &s.additional {
            if non_nullable_null(v, Some(a)) {
                let d = a.default.clone().unwrap_or(Value::Null);
                changed |= *v != d;
                *v = d;
            }
            changed |= default(v, a);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schemas(v1: Value) -> StoredSchemas {
        StoredSchemas::read(&json!({
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema": v1}}]
        }))
    }

    fn read(s: &StoredSchemas, obj: Value) -> (Value, bool) {
        let Value::Object(mut m) = obj else {
            panic!("not an object")
        };
        let changed = s.read_stored(&mut m, "v1", "v1", "g/v1");
        (Value::Object(m), changed)
    }

    /// The cases of upstream's `TestDefault` that a stored object can meet.
    #[test]
    fn defaults_fill_missing_and_non_nullable_null_members_at_every_depth() {
        let s = schemas(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "a": {"type": "string", "default": "A"},
                    "b": {"type": "string", "default": "B", "nullable": true},
                    "c": {"type": "object", "default": {"x": 1}, "properties": {
                        "x": {"type": "integer"},
                        "y": {"type": "string", "default": "Y"}}},
                    "list": {"type": "array", "items": {"type": "object", "properties": {
                        "n": {"type": "integer", "default": 7}}}},
                    "map": {"type": "object", "additionalProperties": {
                        "type": "object", "properties": {"z": {"type": "boolean", "default": true}}}}
                }}
            }
        }));
        let (out, changed) = read(
            &s,
            json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "n"},
                   "spec": {"a": null, "b": null, "list": [{}, {"n": 1}], "map": {"k": {}}}}),
        );
        assert!(changed);
        assert_eq!(
            out["spec"],
            json!({"a": "A", "b": null, "c": {"x": 1, "y": "Y"},
                   "list": [{"n": 7}, {"n": 1}], "map": {"k": {"z": true}}})
        );
        // Read again: nothing left to do.
        let (again, changed) = read(&s, out.clone());
        assert!(!changed);
        assert_eq!(again, out);
    }

    /// The cases of upstream's `TestPrune` and `TestPruneNonNullableNullsWithoutDefaults`.
    #[test]
    fn unknown_members_and_disallowed_nulls_are_dropped_below_the_root_meta_fields() {
        let s = schemas(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "kept": {"type": "string"},
                    "nullable": {"type": "string", "nullable": true},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                             "properties": {"typed": {"type": "object", "properties": {
                                 "t": {"type": "string"}}}}},
                    "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                                 "properties": {"spec": {"type": "object"}}}
                }}
            }
        }));
        let (out, changed) = read(
            &s,
            json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}},
                   "status": {"gone": true},
                   "spec": {"kept": null, "nullable": null, "removed": 1,
                            "free": {"anything": {"deep": 1}, "typed": {"t": "x", "u": "y"}},
                            "embedded": {"apiVersion": "v1", "kind": "Pod",
                                         "metadata": {"name": "p"}, "spec": {"x": 1}, "other": 2}}}),
        );
        assert!(changed);
        assert_eq!(
            out,
            json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}},
                   "spec": {"nullable": null,
                            "free": {"anything": {"deep": 1}, "typed": {"t": "x"}},
                            "embedded": {"apiVersion": "v1", "kind": "Pod",
                                         "metadata": {"name": "p"}, "spec": {}}}})
        );
        assert!(!read(&s, out).1);
    }

    #[test]
    fn a_crd_preserving_unknown_fields_prunes_nothing_but_still_defaults() {
        let mut s = schemas(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string", "default": "A"}}}}}));
        s.preserve_unknown_fields = true;
        let (out, changed) = read(
            &s,
            json!({"apiVersion": "g/v1", "kind": "K", "metadata": {}, "extra": 1, "spec": {}}),
        );
        assert!(changed);
        assert_eq!(out["extra"], 1);
        assert_eq!(out["spec"], json!({"a": "A"}));
    }

    #[test]
    fn an_object_stored_at_another_version_is_read_by_that_versions_defaults_then_the_storage_versions_fields()
     {
        let s = StoredSchemas::read(&json!({"versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"a": {"type": "string"}}}}}}},
            {"name": "v1beta1", "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "a": {"type": "string", "default": "A"},
                    "b": {"type": "string", "default": "B"}}}}}}}
        ]}));
        let Value::Object(mut m) =
            json!({"apiVersion": "g/v1beta1", "kind": "K", "metadata": {}, "spec": {}})
        else {
            unreachable!()
        };
        assert!(s.read_stored(&mut m, "v1beta1", "v1", "g/v1"));
        assert_eq!(
            Value::Object(m),
            json!({"apiVersion": "g/v1", "kind": "K", "metadata": {}, "spec": {"a": "A"}})
        );
    }

    #[test]
    fn a_description_change_compares_equal_and_a_new_default_does_not() {
        let base = json!({"type": "object", "description": "one", "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}}}});
        let mut described = base.clone();
        described["description"] = json!("two");
        let mut defaulted = base.clone();
        defaulted["properties"]["spec"]["properties"]["a"]["default"] = json!("A");
        assert_eq!(schemas(base.clone()), schemas(described));
        assert_ne!(schemas(base), schemas(defaulted));
    }
}

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
pub(crate) struct Structural {
    properties: BTreeMap<String, Structural>,
    /// `additionalProperties`: `Some(Some(s))` a schema, `Some(None)` a bare boolean.
    additional: Option<Option<Box<Structural>>>,
    items: Option<Box<Structural>>,
    nullable: bool,
    default: Option<Value>,
    preserve_unknown: bool,
    embedded: bool,
    /// How many of `properties` have a default (for the check pass, which counts them).
    defaulted: usize,
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
    pub(crate) fn read(schema: &Value) -> Structural {
        let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
        let properties: BTreeMap<String, Structural> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .map(|(k, s)| (k.clone(), Structural::read(s)))
                    .collect()
            })
            .unwrap_or_default();
        Structural {
            defaulted: properties.values().filter(|p| p.default.is_some()).count(),
            properties,
            additional: match schema.get("additionalProperties") {
                Some(s @ Value::Object(_)) => Some(Some(Box::new(Structural::read(s)))),
                Some(Value::Bool(_)) => Some(None),
                _ => None,
            },
            items: schema
                .get("items")
                .filter(|s| s.is_object())
                .map(|s| Box::new(Structural::read(s))),
            nullable: flag("nullable"),
            // `default: null` is no default (upstream's `Default.Object` is nil).
            default: schema.get("default").filter(|d| !d.is_null()).cloned(),
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

    /// Whether [`read_stored`](StoredSchemas::read_stored) would change anything but the
    /// apiVersion of `text` (a stored object, JSON) stored at `stored` and read at `served`:
    /// one pass over the text that builds nothing, so the common case (nothing to prune or
    /// default) costs a scan, not a parse into a tree and a write back.
    ///
    /// # Errors
    /// The text is not a JSON object.
    pub fn changes(&self, text: &str, stored: &str, served: &str) -> Result<bool, String> {
        let Some(at) = self.by_version.get(stored).filter(|_| stored == served) else {
            // Read at another version, or by no schema: rare; the full read decides.
            return Ok(true);
        };
        let prune = !self.preserve_unknown_fields;
        let check = Check {
            s: Some(at),
            prune: if prune { Prune::On } else { Prune::Off },
            nulls: prune,
            root: true,
            null_changes: false,
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let changed =
            serde::de::DeserializeSeed::deserialize(check, &mut de).map_err(|e| e.to_string())?;
        de.end().map_err(|e| e.to_string())?;
        Ok(changed)
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

/// A list element or a map value (an item or an additional property): a null its schema `s`
/// does not allow becomes a copy of the default, if there is one; then it is defaulted by `s`.
fn default_element(v: &mut Value, s: &Structural) -> bool {
    let mut changed = false;
    if let (true, Some(d)) = (non_nullable_null(v, Some(s)), &s.default) {
        *v = d.clone();
        changed = true;
    }
    changed | default(v, s)
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
                changed |= default_element(v, items);
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
            changed |= default_element(v, a);
        }
    }
    changed
}

/// Whether structural pruning acts on a subtree (`pruning.prune` or `skipPrune`), or not (the
/// root's meta fields, a CRD preserving unknown fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prune {
    Off,
    /// `prune`: members no schema describes are dropped.
    On,
    /// `skipPrune` (under `x-kubernetes-preserve-unknown-fields`): they stay.
    Skip,
}

/// One value of the check pass, with what applies to it: whether reading would change it.
/// Mirrors `read_stored`'s three walks (prune, drop nulls, default) at once.
#[derive(Clone, Copy)]
struct Check<'a> {
    /// Its schema (for pruning, dropping nulls and defaulting alike).
    s: Option<&'a Structural>,
    prune: Prune,
    /// Whether non-nullable nulls without a default are dropped (the CRD prunes).
    nulls: bool,
    /// The object itself (its meta fields are not pruned).
    root: bool,
    /// What a null here means: a member or an element that reading drops or defaults.
    null_changes: bool,
}

impl Check<'_> {
    /// The pruning that applies at this node: `skipPrune` under preserve-unknown-fields, and
    /// nothing for `skipPrune` without a schema.
    fn prune_here(&self) -> Prune {
        match (self.prune, self.s) {
            (Prune::On, Some(s)) if s.preserve_unknown => Prune::Skip,
            (Prune::Skip, None) => Prune::Off,
            (p, _) => p,
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Check<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Check<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(self.null_changes)
    }

    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let items = self.s.and_then(|s| s.items.as_deref());
        let element = Check {
            s: items,
            prune: self.prune_here(),
            nulls: self.nulls,
            root: false,
            // Nulls are never dropped from a list; one is replaced by the items' default.
            null_changes: items.is_some_and(|i| !i.nullable && i.default.is_some()),
        };
        let mut changed = false;
        while let Some(c) = seq.next_element_seed(element)? {
            changed |= c;
        }
        Ok(changed)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        use serde::de::IgnoredAny;
        let prune = self.prune_here();
        let Some(s) = self.s else {
            // Pruned by no schema: every member goes. Otherwise nothing applies below.
            let mut any = false;
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                any = true;
            }
            return Ok(any && prune == Prune::On);
        };
        let mut changed = false;
        let mut defaulted = 0;
        while let Some(key) = map.next_key_seed(Key)? {
            if changed {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let meta = (self.root || s.embedded) && META_FIELDS.contains(&key.as_ref());
            let property = s.properties.get(key.as_ref());
            let Some(schema) = property
                .map(Some)
                .or_else(|| s.additional.as_ref().map(|a| a.as_deref()))
            else {
                // Described by nothing: dropped when pruned, else left as it is.
                changed = prune == Prune::On && !meta;
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if property.is_some_and(|p| p.default.is_some()) {
                defaulted += 1;
            }
            let child = Check {
                s: schema,
                prune: if meta || prune == Prune::Off {
                    Prune::Off
                } else {
                    Prune::On
                },
                nulls: self.nulls,
                root: false,
                null_changes: schema
                    .is_some_and(|m| !m.nullable && (self.nulls || m.default.is_some())),
            };
            changed = map.next_value_seed(child)?;
        }
        Ok(changed || defaulted < s.defaulted)
    }
}

/// A member's name, borrowed from the text when it has no escapes.
struct Key;

impl<'de> serde::de::DeserializeSeed<'de> for Key {
    type Value = std::borrow::Cow<'de, str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Key {
    type Value = std::borrow::Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v.to_owned()))
    }
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

    /// The object read, and whether it changed; the check pass must say the same.
    fn read(s: &StoredSchemas, obj: Value) -> (Value, bool) {
        let checked = s.changes(&obj.to_string(), "v1", "v1").unwrap();
        let Value::Object(mut m) = obj else {
            panic!("not an object")
        };
        let changed = s.read_stored(&mut m, "v1", "v1", "g/v1");
        assert_eq!(checked, changed, "the check pass and the read disagree");
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

    /// Any value, its members named from a few names so that they meet the schemas'.
    fn value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let names = prop::sample::select(vec!["a", "b", "c", "apiVersion", "metadata"]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-3i64..3).prop_map(Value::from),
            Just(Value::from("s")),
        ];
        leaf.prop_recursive(4, 24, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(names.clone().prop_map(str::to_owned), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Any schema of those names, with every keyword pruning and defaulting read.
    fn schema() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let names = prop::sample::select(vec!["a", "b", "c", "metadata"]);
        let flags = (any::<bool>(), any::<bool>(), any::<bool>(), 0..6u8);
        let leaf = (flags.clone(), value()).prop_map(|((n, p, e, d), v)| {
            let mut s = json!({"nullable": n, "x-kubernetes-preserve-unknown-fields": p,
                               "x-kubernetes-embedded-resource": e});
            if d == 0 {
                s["default"] = v;
            }
            s
        });
        leaf.prop_recursive(4, 24, 3, move |inner| {
            (
                prop::collection::btree_map(
                    names.clone().prop_map(str::to_owned),
                    inner.clone(),
                    0..3,
                ),
                prop_oneof![
                    Just(None),
                    Just(Some(json!(true))),
                    inner.clone().prop_map(Some)
                ],
                prop::option::of(inner),
                flags.clone(),
                value(),
            )
                .prop_map(|(props, additional, items, (n, p, e, d), v)| {
                    let mut s = json!({"nullable": n, "x-kubernetes-preserve-unknown-fields": p,
                                       "x-kubernetes-embedded-resource": e});
                    if !props.is_empty() {
                        s["properties"] = Value::Object(props.into_iter().collect());
                    } else if let Some(a) = additional {
                        s["additionalProperties"] = a;
                    }
                    if let Some(i) = items {
                        s["items"] = i;
                    }
                    if d == 0 {
                        s["default"] = v;
                    }
                    s
                })
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// The check pass says "changes" exactly when the read changes the object, for any
        /// schema and object, and again for the object read. (A second read may change it
        /// again: a default the schema would prune is pruned then, and CRD validation refuses
        /// such defaults.)
        #[test]
        fn the_check_pass_agrees_with_the_read(
            root in schema(),
            obj in value(),
            preserve in proptest::prelude::any::<bool>(),
        ) {
            let Value::Object(_) = obj else { return Ok(()) };
            let mut s = schemas(root);
            s.preserve_unknown_fields = preserve;
            let (once, _) = read(&s, obj);
            read(&s, once);
        }
    }
}

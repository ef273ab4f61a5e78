//! A CustomResourceDefinition read as the definition of the resource it declares: what
//! apiextensions-apiserver serves for it, in the terms of a [`ResourceDef`].
//!
//! [`CrdServing::of`] reads a CRD's JSON (as the cache holds it, `apiextensions.k8s.io/v1`) and
//! says whether its custom resources can be cached, and with which definition:
//! - only once the CRD is `Established` (before that kube-apiserver answers 404 for them);
//! - at the storage version, which must be served: objects are read from etcd under
//!   `/registry/{group}/{plural}/`;
//! - with `conversion: None`, an object stored at another version is read with the storage
//!   version's apiVersion, as apiextensions' nop converter does (`rewrite_api_version`);
//! - every stored object is pruned and defaulted by the CRD's schemas as kube-apiserver decodes
//!   it (`stored_schemas`, `model/structural.rs`), so a CRD whose schema changes gets a new
//!   cache, read again from the upstream;
//! - with webhook conversion, not at all: converting needs the webhook, which is kube-apiserver's
//!   to call, so every request for the resource goes to kube-apiserver;
//! - each other served version from the same cache ([`ResourceDef::other_versions`]), the object
//!   at it differing only by its apiVersion, when the storage version's cache answers it as
//!   kube-apiserver does: not deprecated (kube-apiserver adds a `Warning`), the storage version's
//!   schema (it prunes and defaults by the requested version's), and no selectable field the
//!   storage version lacks (no index for it). Any other is left to kube-apiserver.
//!
//! The rest follows apiextensions-apiserver 1.35 exactly:
//! - `selectableFields` become field selectors, each an index and a watch trigger; an absent
//!   field reads `""` (`customResourceStrategy.selectableFields`);
//! - `metadata.namespace` is a field selector only for a namespaced resource, and any other
//!   label is refused with `field label not supported: {label}` (`crConverter.ConvertFieldLabel`);
//! - `additionalPrinterColumns` are the Table's columns after NAME, or `Age` when there are none
//!   (`serveDefaultColumnsIfEmpty`); a column without a description is described by its JSONPath,
//!   and cells follow the table convertor ([`Computed::CrdCell`]).

use serde_json::{Value, json};

use crate::model::columns::{Computed, RawColumn};
use crate::model::definition::{CREATION_TIMESTAMP_DOC, HistoryConfig, IndexDef, IndexKey};
use crate::model::structural::StoredSchemas;
use crate::model::{FieldLabels, FieldPath, ResourceDef};

/// What watchcache does with the custom resources of one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrdServing {
    /// Cached with this definition (at the CRD's storage version).
    Cached(Box<ResourceDef>),
    /// Not cached: every request for the resource goes to kube-apiserver, for this reason.
    Forwarded(String),
}

/// Most selectable fields a CRD version may declare (apiextensions' validation allows 8).
const MAX_SELECTABLE: usize = crate::model::definition::MAX_INDEXES;

impl CrdServing {
    /// How the CRD `crd` (its JSON) is served.
    pub fn of(crd: &Value) -> CrdServing {
        match cached(crd) {
            Ok(def) => CrdServing::Cached(Box::new(def)),
            Err(why) => CrdServing::Forwarded(why),
        }
    }

    /// The definition, when cached.
    pub fn definition(&self) -> Option<&ResourceDef> {
        match self {
            CrdServing::Cached(d) => Some(d),
            CrdServing::Forwarded(_) => None,
        }
    }
}

/// The string at a dotted path, if there is one.
fn str_at<'a>(v: &'a Value, dotted: &str) -> Option<&'a str> {
    crate::model::printers::get(v, dotted).and_then(Value::as_str)
}

/// Whether a condition of the CRD's status is `True`.
fn condition(crd: &Value, kind: &str) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

fn cached(crd: &Value) -> Result<ResourceDef, String> {
    let name = str_at(crd, "metadata.name").unwrap_or("");
    if !condition(crd, "Established") {
        return Err("not Established".into());
    }
    let spec = crd.get("spec").ok_or("no spec")?;
    let group = str_at(spec, "group").ok_or("no spec.group")?;
    let plural = str_at(spec, "names.plural").ok_or("no spec.names.plural")?;
    let kind = str_at(spec, "names.kind").ok_or("no spec.names.kind")?;
    if format!("{plural}.{group}") != name {
        return Err(format!("its name is not {plural}.{group}"));
    }
    let strategy = str_at(spec, "conversion.strategy").unwrap_or("None");
    if strategy != "None" {
        return Err(format!(
            "conversion {strategy}: kube-apiserver converts its objects"
        ));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("no spec.versions")?;
    let storage = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .ok_or("no storage version")?;
    let version = str_at(storage, "name").ok_or("a version without a name")?;
    if storage.get("served").and_then(Value::as_bool) != Some(true) {
        return Err(format!("its storage version {version} is not served"));
    }
    let namespaced = match str_at(spec, "scope") {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => return Err(format!("scope {other:?}")),
    };
    let names = |key: &str| -> Vec<String> {
        spec.pointer(&format!("/names/{key}"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };

    let at_storage = Version::read(spec, storage, namespaced)?;
    let mut def = ResourceDef {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
        prefix: format!("/registry/{group}/{plural}/"),
        namespaced,
        indexes: at_storage.indexes,
        history: HistoryConfig::default(),
        consistency_check_period: None,
        route_shards: true,
        singular: str_at(spec, "names.singular")
            .filter(|s| !s.is_empty())
            .map_or_else(|| kind.to_lowercase(), str::to_owned),
        short_names: names("shortNames"),
        categories: names("categories"),
        columns: at_storage.columns,
        strategic_merge_patch: false,
        merge_lists: Vec::new(),
        status_subresource: at_storage.status_subresource,
        field_labels: Some(at_storage.field_labels),
        rewrite_api_version: true,
        stored_schemas: Some(std::sync::Arc::new(StoredSchemas::read(spec))),
        other_versions: Vec::new(),
    };
    // The other served versions, each served from this cache when reading it there is what
    // kube-apiserver answers; any other is left to kube-apiserver.
    for v in versions {
        let Some(name) = str_at(v, "name") else {
            continue;
        };
        if name == version || v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        if let Ok(view) = other_version(&def, spec, storage, v, namespaced) {
            def.other_versions.push(view);
        }
    }
    Ok(def)
}

/// `def` (the storage version's) at the served version `v`, if this cache can serve it as
/// kube-apiserver does; else why not (the version is then forwarded).
fn other_version(
    def: &ResourceDef,
    spec: &Value,
    storage: &Value,
    v: &Value,
    namespaced: bool,
) -> Result<ResourceDef, String> {
    let name = str_at(v, "name").ok_or("a version without a name")?;
    // kube-apiserver answers a deprecated version with a `Warning` header (its
    // deprecationWarning, or one naming a newer version).
    if v.get("deprecated").and_then(Value::as_bool) == Some(true) {
        return Err(format!("{name} is deprecated"));
    }
    // An object read at a version is pruned and defaulted by that version's schema
    // (`unstructuredSchemaCoercer`): with the storage version's schema, the same as at storage.
    if v.get("schema") != storage.get("schema") {
        return Err(format!("{name}'s schema is not the storage version's"));
    }
    let at = Version::read(spec, v, namespaced)?;
    // Its field selectors are checked against its own labels first; one the storage version
    // does not select on would have no index, trigger or label there.
    let storage_fields = def.field_labels.as_ref().map_or(&[][..], |l| &l.fields[..]);
    if let Some(f) = at
        .field_labels
        .fields
        .iter()
        .find(|f| !storage_fields.contains(f))
    {
        return Err(format!(
            "{name} selects on {f}, which the storage version does not"
        ));
    }
    Ok(ResourceDef {
        version: name.to_owned(),
        columns: at.columns,
        status_subresource: at.status_subresource,
        field_labels: Some(at.field_labels),
        other_versions: Vec::new(),
        ..def.clone()
    })
}

/// What a CRD declares per version.
struct Version {
    field_labels: FieldLabels,
    /// An index and a trigger per selectable field.
    indexes: Vec<IndexDef>,
    columns: Vec<crate::model::PrinterColumn>,
    status_subresource: bool,
}

impl Version {
    /// The version `v` of the CRD whose spec is `spec`.
    fn read(spec: &Value, v: &Value, namespaced: bool) -> Result<Version, String> {
        // Field selectors: metadata.name, metadata.namespace when namespaced, the selectable fields.
        let mut fields = vec!["metadata.name".to_owned()];
        if namespaced {
            fields.push("metadata.namespace".into());
        }
        let mut indexes = Vec::new();
        let mut defaults = Vec::new();
        let selectable = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        if selectable.len() > MAX_SELECTABLE {
            return Err(format!(
                "{} selectable fields (at most {MAX_SELECTABLE} are indexed)",
                selectable.len()
            ));
        }
        for sf in selectable {
            let path = sf
                .get("jsonPath")
                .and_then(Value::as_str)
                .ok_or("a selectable field without jsonPath")?;
            let field = path.strip_prefix('.').unwrap_or(path);
            let parsed =
                FieldPath::parse(field).map_err(|m| format!("selectable field {path}: {m}"))?;
            if fields.iter().any(|f| f == field) {
                continue;
            }
            fields.push(field.to_owned());
            // An absent field reads "" (fmt.Sprint of nothing is not used: the set says "").
            defaults.push((field.to_owned(), String::new()));
            indexes.push(IndexDef {
                key: IndexKey::Field(parsed),
                trigger: true,
            });
        }
        let field_labels = FieldLabels {
            fields,
            aliases: Vec::new(),
            defaults,
            fallbacks: Vec::new(),
            error: "field label not supported: {label}".into(),
        };

        // Per-version columns, or the top-level ones of an older CRD, or Age.
        let declared = v
            .get("additionalPrinterColumns")
            .or_else(|| spec.get("additionalPrinterColumns"))
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty());
        let mut columns = Vec::new();
        match declared {
            Some(cols) => {
                for c in cols {
                    let col_name = str_at(c, "name").unwrap_or_default();
                    let path = str_at(c, "jsonPath").unwrap_or_default();
                    let description = match str_at(c, "description") {
                        Some(d) if !d.is_empty() => d.to_owned(),
                        _ => format!(
                            "Custom resource definition column (in JSONPath format): {path}"
                        ),
                    };
                    let raw: RawColumn = serde_json::from_value(json!({
                        "name": col_name,
                        "type": str_at(c, "type").unwrap_or("string"),
                        "format": str_at(c, "format").unwrap_or_default(),
                        "description": description,
                        "priority": c.get("priority").and_then(Value::as_u64).unwrap_or(0),
                        "json_path": path,
                        "computed": "crd-cell",
                    }))
                    .map_err(|e| format!("column {col_name}: {e}"))?;
                    columns.push(raw.compile()?);
                }
            }
            None => {
                let raw: RawColumn = serde_json::from_value(json!({
                    "name": "Age",
                    "type": "date",
                    "description": CREATION_TIMESTAMP_DOC,
                    "json_path": ".metadata.creationTimestamp",
                    "computed": "crd-cell",
                }))
                .map_err(|e| format!("column Age: {e}"))?;
                columns.push(raw.compile()?);
            }
        }
        debug_assert!(
            columns
                .iter()
                .all(|c| c.computed == Some(Computed::CrdCell))
        );

        let status_subresource = v
            .pointer("/subresources/status")
            .or_else(|| spec.pointer("/subresources/status"))
            .is_some_and(|s| !s.is_null());
        Ok(Version {
            field_labels,
            indexes,
            columns,
            status_subresource,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(extra: Value) -> Value {
        let mut v = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "shirts.stable.example.com"},
            "spec": {
                "group": "stable.example.com",
                "scope": "Namespaced",
                "names": {"plural": "shirts", "singular": "shirt", "kind": "Shirt",
                          "shortNames": ["sh"], "categories": ["all"]},
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}},
                     "selectableFields": [{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.size"}],
                     "additionalPrinterColumns": [
                        {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                        {"name": "Made", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                         "description": "when", "priority": 1}
                     ]}
                ]
            },
            "status": {"conditions": [
                {"type": "NamesAccepted", "status": "True"},
                {"type": "Established", "status": "True"}
            ]}
        });
        merge(&mut v, extra);
        v
    }

    fn merge(into: &mut Value, from: Value) {
        match (into, from) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    #[test]
    fn an_established_crd_is_cached_at_its_storage_version_with_its_selectable_fields() {
        let served = CrdServing::of(&crd(json!({})));
        let def = served.definition().expect("cached");
        assert_eq!(def.api_version(), "stable.example.com/v1");
        assert_eq!(def.prefix, "/registry/stable.example.com/shirts/");
        assert!(def.namespaced && def.status_subresource && def.rewrite_api_version);
        assert_eq!(def.resource_name(), "shirts.stable.example.com");
        assert_eq!(def.short_names, ["sh"]);
        assert_eq!(def.categories, ["all"]);
        let triggers: Vec<String> = def
            .indexes
            .iter()
            .filter(|i| i.trigger)
            .map(|i| i.key.to_string())
            .collect();
        assert_eq!(triggers, ["spec.color", "spec.size"]);
        let labels = def.field_labels.as_ref().unwrap();
        for f in [
            "metadata.name",
            "metadata.namespace",
            "spec.color",
            "spec.size",
        ] {
            assert!(labels.accepts(f), "{f}");
        }
        assert!(!labels.accepts("spec.weight"));
        assert_eq!(
            labels.error.replace("{label}", "spec.weight"),
            "field label not supported: spec.weight"
        );
        let cols: Vec<(&str, &str, u32)> = def
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.description.as_str(), c.priority))
            .collect();
        assert_eq!(
            cols,
            [
                (
                    "Color",
                    "Custom resource definition column (in JSONPath format): .spec.color",
                    0
                ),
                ("Made", "when", 1)
            ]
        );
    }

    #[test]
    fn a_cluster_scoped_crd_accepts_no_namespace_selector_and_defaults_to_an_age_column() {
        let mut v = crd(json!({"spec": {"scope": "Cluster"}}));
        v["spec"]["versions"][1]
            .as_object_mut()
            .unwrap()
            .remove("additionalPrinterColumns");
        let def = CrdServing::of(&v).definition().cloned().expect("cached");
        assert!(!def.namespaced);
        assert!(
            !def.field_labels
                .as_ref()
                .unwrap()
                .accepts("metadata.namespace")
        );
        assert_eq!(def.columns.len(), 1);
        assert_eq!(
            (def.columns[0].name.as_str(), def.columns[0].type_.as_str()),
            ("Age", "date")
        );
        assert_eq!(def.columns[0].description, CREATION_TIMESTAMP_DOC);
    }

    #[test]
    fn what_kube_apiserver_must_answer_is_forwarded() {
        let not_established = crd(json!({"status": {"conditions": [
            {"type": "Established", "status": "False"}]}}));
        let webhook = crd(json!({"spec": {"conversion": {"strategy": "Webhook"}}}));
        let mut unserved = crd(json!({}));
        unserved["spec"]["versions"][1]["served"] = json!(false);
        for (v, why) in [
            (not_established, "not Established"),
            (webhook, "conversion Webhook"),
            (unserved, "storage version v1 is not served"),
        ] {
            match CrdServing::of(&v) {
                CrdServing::Forwarded(w) => assert!(w.contains(why), "{w}"),
                other => panic!("{why}: {other:?}"),
            }
        }
    }

    #[test]
    fn another_served_version_is_the_storage_definition_with_its_own_columns_and_selectors() {
        let mut v = crd(json!({}));
        // v1beta1: the same schema (none), its own columns, a subset of the selectable fields,
        // no status subresource.
        v["spec"]["versions"][0]["additionalPrinterColumns"] =
            json!([{"name": "Size", "type": "string", "jsonPath": ".spec.size"}]);
        v["spec"]["versions"][0]["selectableFields"] = json!([{"jsonPath": ".spec.size"}]);
        let def = CrdServing::of(&v).definition().cloned().expect("cached");
        assert_eq!(def.version, "v1");
        let beta = def
            .at_version("v1beta1")
            .expect("v1beta1 served from the cache");
        assert_eq!(beta.api_version(), "stable.example.com/v1beta1");
        assert_eq!(
            (
                beta.prefix.as_str(),
                beta.kind.as_str(),
                beta.plural.as_str()
            ),
            ("/registry/stable.example.com/shirts/", "Shirt", "shirts")
        );
        assert!(beta.rewrite_api_version && !beta.status_subresource);
        assert!(beta.other_versions.is_empty());
        // The cache's indexes are the storage version's.
        assert_eq!(beta.indexes, def.indexes);
        let cols: Vec<&str> = beta.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(cols, ["Size"]);
        let labels = beta.field_labels.as_ref().unwrap();
        assert!(labels.accepts("spec.size") && labels.accepts("metadata.namespace"));
        assert!(!labels.accepts("spec.color"), "declared at v1 only");
        assert!(std::ptr::eq(def.at_version("v1").unwrap(), &def));
        assert!(def.at_version("v2").is_none());
    }

    #[test]
    fn a_version_the_cache_cannot_answer_as_kube_apiserver_is_left_to_it() {
        let with = |version: Value| {
            let mut v = crd(json!({}));
            v["spec"]["versions"][0] = version;
            CrdServing::of(&v)
                .definition()
                .map(|d| d.other_versions.len())
        };
        // Served with nothing to tell it apart: served from the cache.
        assert_eq!(
            with(json!({"name": "v1beta1", "served": true, "storage": false})),
            Some(1)
        );
        for (why, version) in [
            (
                "not served: 404, as kube-apiserver",
                json!({"name": "v1beta1", "served": false, "storage": false}),
            ),
            (
                "deprecated: kube-apiserver adds its Warning header",
                json!({"name": "v1beta1", "served": true, "storage": false, "deprecated": true}),
            ),
            (
                "another schema: kube-apiserver prunes and defaults by it",
                json!({"name": "v1beta1", "served": true, "storage": false,
                       "schema": {"openAPIV3Schema": {"type": "object"}}}),
            ),
            (
                "a field the storage version does not select on",
                json!({"name": "v1beta1", "served": true, "storage": false,
                       "selectableFields": [{"jsonPath": ".spec.weight"}]}),
            ),
        ] {
            assert_eq!(with(version), Some(0), "{why}");
        }
    }

    #[test]
    fn crd_cells_follow_the_table_convertor() {
        let def = CrdServing::of(&crd(json!({})))
            .definition()
            .cloned()
            .unwrap();
        let now = std::time::SystemTime::now();
        let obj = json!({"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"},
                         "spec": {"color": 3}});
        // A string column prints a number as text; a date column shows the age.
        assert_eq!(def.columns[0].cell(&obj, now), json!("3"));
        let age = def.columns[1].cell(&obj, now);
        assert!(age.is_string() && age != json!("<invalid>"), "{age}");
        let bare = json!({"metadata": {"creationTimestamp": "yesterday"}});
        assert_eq!(def.columns[0].cell(&bare, now), Value::Null);
        assert_eq!(def.columns[1].cell(&bare, now), json!("<invalid>"));
    }
}

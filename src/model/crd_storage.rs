//! CustomResourceDefinitions as kube-apiserver 1.35 stores them: JSON in
//! `apiextensions.k8s.io/v1beta1`, its storage version. Read as v1, as kube-apiserver serves them:
//! the v1beta1 defaults its decoder applies (`SetDefaults_CustomResourceDefinitionSpec`), then the
//! conversion to the internal type and from it to v1 (`Convert_apiextensions_*_To_v1_*`): the
//! deprecated `spec.version` dropped, the top-level `validation`, `subresources`,
//! `additionalPrinterColumns` and `selectableFields` copied into every version, `JSONPath` renamed
//! `jsonPath`, the webhook conversion's settings gathered under `webhook`, and the JSON values of
//! schemas (`default`, `example`, `enum`) re-marshalled from Go's `interface{}` (object keys
//! sorted). Members are written in the v1 Go types' order, as encoding/json writes them.
//!
//! A CRD already stored in v1 (written by watchcache, or by a later kube-apiserver) is read as
//! it is.

use serde_json::value::RawValue;

use crate::model::members::{Members, members};

/// The stored `apiVersion` this module reads.
pub(crate) const V1BETA1: &str = "apiextensions.k8s.io/v1beta1";

type Out = Vec<u8>;

fn find<'a>(m: &Members<'a>, key: &str) -> Option<&'a RawValue> {
    m.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
        .filter(|v| v.get() != "null")
}

fn obj(raw: &RawValue) -> Result<Members<'_>, String> {
    members(raw.get()).map_err(|e| format!("not a JSON object: {e}"))
}

fn string(raw: Option<&RawValue>) -> Result<Option<String>, String> {
    raw.map(|r| serde_json::from_str::<String>(r.get()).map_err(|e| e.to_string()))
        .transpose()
}

fn array(raw: Option<&RawValue>) -> Result<Vec<&RawValue>, String> {
    match raw {
        None => Ok(Vec::new()),
        Some(r) => serde_json::from_str::<Vec<&RawValue>>(r.get()).map_err(|e| e.to_string()),
    }
}

/// An object being written member by member.
struct Writer {
    out: Out,
    first: bool,
}

impl Writer {
    fn new() -> Writer {
        Writer {
            out: vec![b'{'],
            first: true,
        }
    }

    fn key(&mut self, k: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        crate::model::protobuf::write_json_str(&mut self.out, k);
        self.out.push(b':');
    }

    fn raw(&mut self, k: &str, v: &[u8]) {
        self.key(k);
        self.out.extend_from_slice(v);
    }

    /// The member as it is, if present.
    fn copy(&mut self, m: &Members<'_>, k: &str) {
        if let Some(v) = find(m, k) {
            self.raw(k, v.get().as_bytes());
        }
    }

    fn str(&mut self, k: &str, v: &str) {
        self.key(k);
        crate::model::protobuf::write_json_str(&mut self.out, v);
    }

    fn end(mut self) -> Out {
        self.out.push(b'}');
        self.out
    }
}

/// A stored v1beta1 CRD (its JSON text) as kube-apiserver serves it in v1.
///
/// # Errors
/// JSON that is not a CRD's shape (members of the wrong type).
pub(crate) fn v1beta1_to_v1(text: &str) -> Result<Vec<u8>, String> {
    let top = members(text).map_err(|e| format!("not a JSON object: {e}"))?;
    let mut w = Writer::new();
    w.str("kind", "CustomResourceDefinition");
    w.str("apiVersion", "apiextensions.k8s.io/v1");
    w.copy(&top, "metadata");
    let spec = match find(&top, "spec") {
        Some(s) => obj(s)?,
        None => Vec::new(),
    };
    w.raw("spec", &spec_v1(&spec)?);
    w.raw("status", &status_v1(find(&top, "status"), &spec)?);
    Ok(w.end())
}

fn spec_v1(spec: &Members<'_>) -> Result<Out, String> {
    let mut w = Writer::new();
    w.raw(
        "group",
        find(spec, "group").map_or(b"\"\"".as_slice(), |g| g.get().as_bytes()),
    );
    w.raw("names", &names_v1(find(spec, "names"))?);
    let scope = string(find(spec, "scope"))?.filter(|s| !s.is_empty());
    w.str("scope", scope.as_deref().unwrap_or("Namespaced"));
    // Versions: the deprecated single version when there is no list.
    let mut versions = array(find(spec, "versions"))?;
    let single;
    if versions.is_empty()
        && let Some(v) = string(find(spec, "version"))?.filter(|v| !v.is_empty())
    {
        let mut one = Writer::new();
        one.str("name", &v);
        one.raw("served", b"true");
        one.raw("storage", b"true");
        single = RawValue::from_string(String::from_utf8(one.end()).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        versions.push(&single);
    }
    w.key("versions");
    if versions.is_empty() {
        // A nil slice without omitempty.
        w.out.extend_from_slice(b"null");
    } else {
        w.out.push(b'[');
        for (i, v) in versions.iter().enumerate() {
            if i > 0 {
                w.out.push(b',');
            }
            w.out.extend_from_slice(&version_v1(&obj(v)?, spec)?);
        }
        w.out.push(b']');
    }
    w.raw("conversion", &conversion_v1(find(spec, "conversion"))?);
    // A nil *bool defaults to true in v1beta1; v1 writes it only when true.
    if find(spec, "preserveUnknownFields").is_none_or(|p| p.get() == "true") {
        w.raw("preserveUnknownFields", b"true");
    }
    Ok(w.end())
}

fn names_v1(names: Option<&RawValue>) -> Result<Out, String> {
    let m = match names {
        Some(n) => obj(n)?,
        None => Vec::new(),
    };
    let kind = string(find(&m, "kind"))?.unwrap_or_default();
    let mut w = Writer::new();
    w.str("plural", &string(find(&m, "plural"))?.unwrap_or_default());
    let singular = string(find(&m, "singular"))?
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| kind.to_lowercase());
    if !singular.is_empty() {
        w.str("singular", &singular);
    }
    if !array(find(&m, "shortNames"))?.is_empty() {
        w.copy(&m, "shortNames");
    }
    w.str("kind", &kind);
    let list_kind = string(find(&m, "listKind"))?.filter(|s| !s.is_empty());
    match list_kind {
        Some(l) => w.str("listKind", &l),
        None if !kind.is_empty() => w.str("listKind", &format!("{kind}List")),
        None => {}
    }
    if !array(find(&m, "categories"))?.is_empty() {
        w.copy(&m, "categories");
    }
    Ok(w.end())
}

fn version_v1(v: &Members<'_>, spec: &Members<'_>) -> Result<Out, String> {
    let mut w = Writer::new();
    w.raw(
        "name",
        find(v, "name").map_or(b"\"\"".as_slice(), |n| n.get().as_bytes()),
    );
    w.raw(
        "served",
        find(v, "served").map_or(b"false".as_slice(), |n| n.get().as_bytes()),
    );
    w.raw(
        "storage",
        find(v, "storage").map_or(b"false".as_slice(), |n| n.get().as_bytes()),
    );
    if find(v, "deprecated").is_some_and(|d| d.get() == "true") {
        w.raw("deprecated", b"true");
    }
    w.copy(v, "deprecationWarning");
    // The top-level settings, when set, are every version's (the conversion overwrites).
    let pick = |top: &str, own: &str| find(spec, top).or_else(|| find(v, own));
    if let Some(schema) = pick("validation", "schema") {
        w.raw("schema", &schema_holder(schema)?);
    }
    if let Some(s) = pick("subresources", "subresources") {
        w.raw("subresources", s.get().as_bytes());
    }
    let columns = array(pick("additionalPrinterColumns", "additionalPrinterColumns"))?;
    if !columns.is_empty() {
        w.key("additionalPrinterColumns");
        w.out.push(b'[');
        for (i, c) in columns.iter().enumerate() {
            if i > 0 {
                w.out.push(b',');
            }
            let c = obj(c)?;
            let mut cw = Writer::new();
            for k in ["name", "type", "format", "description", "priority"] {
                cw.copy(&c, k);
            }
            if let Some(p) = find(&c, "JSONPath").or_else(|| find(&c, "jsonPath")) {
                cw.raw("jsonPath", p.get().as_bytes());
            } else {
                cw.raw("jsonPath", b"\"\"");
            }
            w.out.extend_from_slice(&cw.end());
        }
        w.out.push(b']');
    }
    if !array(pick("selectableFields", "selectableFields"))?.is_empty() {
        w.raw(
            "selectableFields",
            pick("selectableFields", "selectableFields")
                .map_or(b"null".as_slice(), |s| s.get().as_bytes()),
        );
    }
    Ok(w.end())
}

/// `{"openAPIV3Schema": ...}` with the schema's JSON values as Go re-marshals them.
fn schema_holder(raw: &RawValue) -> Result<Out, String> {
    let m = obj(raw)?;
    let mut w = Writer::new();
    if let Some(s) = find(&m, "openAPIV3Schema") {
        w.raw("openAPIV3Schema", &schema(s, 0)?);
    }
    Ok(w.end())
}

/// A `JSONSchemaProps`: its members as they are, but `default`, `example` and `enum` values
/// re-marshalled (keys sorted, a null default dropped), through nested schemas.
fn schema(raw: &RawValue, depth: u32) -> Result<Out, String> {
    if depth > 64 {
        return Err("schema nested too deeply".into());
    }
    let Ok(m) = members(raw.get()) else {
        // `items` may be an array of schemas, `additionalProperties` a boolean.
        return match serde_json::from_str::<Vec<&RawValue>>(raw.get()) {
            Ok(list) => {
                let mut out = vec![b'['];
                for (i, s) in list.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(&schema(s, depth + 1)?);
                }
                out.push(b']');
                Ok(out)
            }
            Err(_) => Ok(raw.get().as_bytes().to_vec()),
        };
    };
    let mut w = Writer::new();
    for (k, v) in &m {
        match &**k {
            "default" | "example" => {
                if v.get() != "null" {
                    w.raw(k, &go_json(v)?);
                }
            }
            "enum" => {
                let items = array(Some(v))?;
                let mut out = vec![b'['];
                for (i, e) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(&go_json(e)?);
                }
                out.push(b']');
                w.raw(k, &out);
            }
            "items" | "not" | "additionalProperties" | "additionalItems" => {
                w.raw(k, &schema(v, depth + 1)?);
            }
            "allOf" | "oneOf" | "anyOf" => {
                w.raw(k, &schema(v, depth + 1)?);
            }
            "properties" | "patternProperties" | "definitions" | "dependencies" => {
                let map = obj(v)?;
                let mut mw = Writer::new();
                for (name, s) in &map {
                    mw.raw(name, &schema(s, depth + 1)?);
                }
                w.raw(k, &mw.end());
            }
            _ => w.raw(k, v.get().as_bytes()),
        }
    }
    Ok(w.end())
}

/// A JSON value as Go writes it back from `interface{}`: object keys sorted, compact.
fn go_json(raw: &RawValue) -> Result<Out, String> {
    let v: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
    serde_json::to_vec(&v).map_err(|e| e.to_string())
}

fn conversion_v1(raw: Option<&RawValue>) -> Result<Out, String> {
    let m = match raw {
        Some(c) => obj(c)?,
        None => Vec::new(),
    };
    let strategy = string(find(&m, "strategy"))?.unwrap_or_else(|| "None".into());
    let mut w = Writer::new();
    w.str("strategy", &strategy);
    let config = find(&m, "webhookClientConfig");
    let mut versions = find(&m, "conversionReviewVersions").map(|v| v.get().to_owned());
    if strategy == "Webhook" && array(find(&m, "conversionReviewVersions"))?.is_empty() {
        versions = Some("[\"v1beta1\"]".into());
    }
    if config.is_some() || versions.is_some() {
        let mut hw = Writer::new();
        if let Some(c) = config {
            hw.raw("clientConfig", &client_config(c)?);
        }
        hw.raw(
            "conversionReviewVersions",
            versions.as_deref().unwrap_or("null").as_bytes(),
        );
        w.raw("webhook", &hw.end());
    }
    Ok(w.end())
}

/// A `WebhookClientConfig`, its service's port defaulted to 443.
fn client_config(raw: &RawValue) -> Result<Out, String> {
    let m = obj(raw)?;
    let mut w = Writer::new();
    w.copy(&m, "url");
    if let Some(s) = find(&m, "service") {
        let s = obj(s)?;
        let mut sw = Writer::new();
        sw.copy(&s, "namespace");
        sw.copy(&s, "name");
        sw.copy(&s, "path");
        match find(&s, "port") {
            Some(p) => sw.raw("port", p.get().as_bytes()),
            None => sw.raw("port", b"443"),
        }
        w.raw("service", &sw.end());
    }
    w.copy(&m, "caBundle");
    Ok(w.end())
}

fn status_v1(raw: Option<&RawValue>, spec: &Members<'_>) -> Result<Out, String> {
    let m = match raw {
        Some(s) => obj(s)?,
        None => Vec::new(),
    };
    let mut w = Writer::new();
    if !array(find(&m, "conditions"))?.is_empty() {
        w.copy(&m, "conditions");
    }
    match find(&m, "acceptedNames") {
        Some(n) => w.raw("acceptedNames", n.get().as_bytes()),
        None => w.raw("acceptedNames", b"{\"plural\":\"\",\"kind\":\"\"}"),
    }
    // Defaulted to the storage version when empty.
    if array(find(&m, "storedVersions"))?.is_empty() {
        let storage = array(find(spec, "versions"))?
            .into_iter()
            .filter_map(|v| obj(v).ok())
            .find(|v| find(v, "storage").is_some_and(|s| s.get() == "true"))
            .and_then(|v| find(&v, "name").map(|n| n.get().to_owned()))
            .or_else(|| find(spec, "version").map(|n| n.get().to_owned()));
        match storage {
            Some(name) => w.raw("storedVersions", format!("[{name}]").as_bytes()),
            None => w.raw("storedVersions", b"null"),
        }
    } else {
        w.copy(&m, "storedVersions");
    }
    Ok(w.end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(text: &str) -> serde_json::Value {
        let out = v1beta1_to_v1(text).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn top_level_settings_move_into_every_version() {
        let crd = convert(
            r#"{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1",
            "metadata":{"name":"ws.example.com"},
            "spec":{"group":"example.com","version":"v1","names":{"plural":"ws","kind":"W"},
              "validation":{"openAPIV3Schema":{"type":"object","properties":{"a":{"type":"string","default":{"z":1,"b":2}}}}},
              "subresources":{"status":{}},
              "additionalPrinterColumns":[{"name":"A","type":"string","JSONPath":".spec.a"}],
              "versions":[{"name":"v1","served":true,"storage":true},{"name":"v2","served":true,"storage":false}],
              "conversion":{"strategy":"Webhook","webhookClientConfig":{"service":{"namespace":"n","name":"s"}}}},
            "status":{"acceptedNames":{"plural":"ws","kind":"W"},"storedVersions":["v1"]}}"#,
        );
        let spec = &crd["spec"];
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert!(spec.get("version").is_none() && spec.get("validation").is_none());
        for v in spec["versions"].as_array().unwrap() {
            assert_eq!(v["schema"]["openAPIV3Schema"]["type"], "object");
            assert_eq!(v["subresources"]["status"], serde_json::json!({}));
            assert_eq!(v["additionalPrinterColumns"][0]["jsonPath"], ".spec.a");
        }
        assert_eq!(spec["names"]["listKind"], "WList");
        assert_eq!(spec["names"]["singular"], "w");
        assert_eq!(spec["scope"], "Namespaced");
        assert_eq!(spec["preserveUnknownFields"], true);
        assert_eq!(
            spec["conversion"],
            serde_json::json!({"strategy": "Webhook", "webhook": {
                "clientConfig": {"service": {"namespace": "n", "name": "s", "port": 443}},
                "conversionReviewVersions": ["v1beta1"]}})
        );
        // Go re-marshals default values with sorted keys.
        let out = String::from_utf8(v1beta1_to_v1(&serde_json::to_string(&serde_json::json!({
            "spec": {"validation": {"openAPIV3Schema": {"default": {"z": 1, "b": 2}, "type": "object"}},
                     "versions": [{"name": "v1", "served": true, "storage": true}]}}))
            .unwrap())
        .unwrap())
        .unwrap();
        assert!(
            out.contains(r#""default":{"b":2,"z":1},"type":"object""#),
            "{out}"
        );
    }

    #[test]
    fn the_single_version_becomes_a_list() {
        let crd = convert(
            r#"{"spec":{"group":"g","version":"v1","names":{"plural":"xs","kind":"X"},"preserveUnknownFields":false}}"#,
        );
        assert_eq!(
            crd["spec"]["versions"],
            serde_json::json!([{"name": "v1", "served": true, "storage": true}])
        );
        assert!(crd["spec"].get("preserveUnknownFields").is_none());
        assert_eq!(
            crd["spec"]["conversion"],
            serde_json::json!({"strategy": "None"})
        );
        assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));
        assert!(v1beta1_to_v1(r#"{"spec":[]}"#).is_err());
    }
}

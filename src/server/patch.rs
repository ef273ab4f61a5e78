//! PATCH bodies: which kind of patch a Content-Type names, and applying it to an object's JSON.
//!
//! - `application/json-patch+json` (RFC 6902) and `application/merge-patch+json` (RFC 7386): the
//!   `json-patch` crate.
//! - `application/strategic-merge-patch+json`: ours (no crate implements Kubernetes' strategic
//!   merge). A merge patch whose lists declared in the definition (`[[merge_list]]`, e.g.
//!   `spec.containers` by `name`) are merged element by element on their key instead of replaced,
//!   with the directives kubectl sends: `$patch: delete|replace|merge` on maps and list elements,
//!   `$deleteFromPrimitiveList/<field>`, `$retainKeys`, and `$setElementOrder/<field>` (the merged
//!   list is put in the patch's order, elements only the server has kept where they were relative
//!   to the others, as upstream's `normalizeElementOrder` does). Lists not declared are
//!   replaced, as upstream replaces lists without a patch strategy. Only definitions that declare
//!   `strategic_merge_patch = true` (the built-ins) accept it; custom resources get 415, as upstream.
//! - `application/apply-patch+yaml` (server-side apply): 415, with a message saying so.

use serde_json::{Map, Value};

use crate::model::ResourceDef;
use crate::model::definition::MergeList;
use crate::server::status::ApiError;

/// The kind of patch a request body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    /// RFC 6902 operations.
    Json,
    /// RFC 7386 merge patch.
    Merge,
    /// Kubernetes' strategic merge patch.
    Strategic,
}

impl PatchKind {
    /// The patch kind a Content-Type names, for this resource.
    ///
    /// # Errors
    /// 415 UnsupportedMediaType for any other type, for server-side apply, and for a strategic
    /// merge patch on a resource that does not support it (custom resources).
    pub fn from_content_type(ct: Option<&str>, def: &ResourceDef) -> Result<PatchKind, ApiError> {
        let text = ct.unwrap_or_default();
        let essence = text.split(';').next().unwrap_or_default().trim();
        match essence.to_ascii_lowercase().as_str() {
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/strategic-merge-patch+json" if def.strategic_merge_patch => {
                Ok(PatchKind::Strategic)
            }
            "application/strategic-merge-patch+json" => Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json (strategic merge patch is not supported for {}.{}, as for every custom resource)",
                    def.plural, def.group
                ),
            )),
            "application/apply-patch+yaml" => Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                "server-side apply (application/apply-patch+yaml) is not supported by this server: use client-side apply (kubectl apply without --server-side), or a json-patch, merge-patch or strategic-merge-patch",
            )),
            _ => Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got \"{text}\")"
                ),
            )),
        }
    }

    /// Applies a patch body to an object.
    ///
    /// # Errors
    /// 400 for a body that is not a valid patch of its kind, 422 for a JSON patch whose operation
    /// cannot apply (a failed `test`, a missing path), as upstream answers.
    pub fn apply(self, def: &ResourceDef, target: &mut Value, body: &[u8]) -> Result<(), ApiError> {
        let bad = |e: &dyn std::fmt::Display| {
            ApiError::bad_request(format!("the patch body is not valid: {e}"))
        };
        match self {
            PatchKind::Json => {
                let p: json_patch::Patch = serde_json::from_slice(body).map_err(|e| bad(&e))?;
                json_patch::patch(target, &p).map_err(|e| {
                    ApiError::new(422, "Invalid", format!("the JSON patch cannot apply: {e}"))
                })
            }
            PatchKind::Merge => {
                let p: Value = serde_json::from_slice(body).map_err(|e| bad(&e))?;
                if !p.is_object() {
                    return Err(bad(&"a merge patch must be a JSON object"));
                }
                json_patch::merge(target, &p);
                Ok(())
            }
            PatchKind::Strategic => {
                let p: Value = serde_json::from_slice(body).map_err(|e| bad(&e))?;
                let Value::Object(p) = p else {
                    return Err(bad(&"a strategic merge patch must be a JSON object"));
                };
                if !target.is_object() {
                    *target = Value::Object(Map::new());
                }
                strategic(target, &p, "", &def.merge_lists).map_err(|m| bad(&m))
            }
        }
    }
}

fn child(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_owned()
    } else {
        format!("{path}.{k}")
    }
}

/// A value with every `$` directive removed (what gets stored for a new element or field).
fn strip(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
        v => v.clone(),
    }
}

/// Merges a strategic patch map into `target` (an object) at `path`.
fn strategic(
    target: &mut Value,
    patch: &Map<String, Value>,
    path: &str,
    lists: &[MergeList],
) -> Result<(), String> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = strip(&Value::Object(patch.clone()));
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown $patch directive \"{other}\" at {path}")),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        unreachable!("made an object above")
    };
    // The stored order of each list the patch orders, taken before the merge changes it.
    let mut orders = Vec::new();
    for (k, v) in patch {
        if let (Some(field), Value::Array(order)) = (k.strip_prefix("$setElementOrder/"), v) {
            let p = child(path, field);
            if let Some(list) = lists.iter().find(|l| l.path == p) {
                let key = list.key.as_deref();
                let stored = match t.get(field) {
                    Some(Value::Array(items)) => {
                        items.iter().filter_map(|i| merge_key(i, key)).collect()
                    }
                    _ => Vec::new(),
                };
                orders.push((field, key, order, stored));
            }
        }
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = v.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = t.get_mut(field) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if k.starts_with("$setElementOrder/") || k == "$patch" || k == "$retainKeys" {
            continue;
        }
        if k.starts_with('$') {
            return Err(format!("unknown directive \"{k}\" at {path}"));
        }
        let p = child(path, k);
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(pm) if pm.get("$patch").and_then(Value::as_str) == Some("delete") => {
                t.remove(k);
            }
            Value::Object(pm) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                strategic(slot, pm, &p, lists)?;
            }
            Value::Array(items) => match lists.iter().find(|l| l.path == p) {
                Some(list) => {
                    let slot = t.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                    merge_list(slot, items, list, &p, lists)?;
                }
                None => {
                    t.insert(k.clone(), strip(v));
                }
            },
            v => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
    for (field, key, order, stored) in orders {
        if let Some(Value::Array(items)) = t.get_mut(field) {
            let merged = std::mem::take(items);
            *items = set_element_order(merged, order, &stored, key);
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        t.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    Ok(())
}

/// What identifies a list element: its merge key's value, or (a list of primitives) itself.
fn merge_key(item: &Value, key: Option<&str>) -> Option<Value> {
    match key {
        Some(k) => item.get(k).cloned(),
        None => Some(item.clone()),
    }
}

/// Puts a merged list in the order `$setElementOrder` gives, as upstream's
/// `normalizeElementOrder`: the elements the order names, in its order; the others (only the
/// server has them), in their stored order; the two interleaved so that where both were stored,
/// the stored order between them holds, and otherwise the patch's element comes first.
fn set_element_order(
    merged: Vec<Value>,
    order: &[Value],
    stored: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let wanted: Vec<Value> = order.iter().filter_map(|o| merge_key(o, key)).collect();
    let position = |list: &[Value], item: &Value| {
        merge_key(item, key).and_then(|k| list.iter().position(|x| *x == k))
    };
    let (mut ordered, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|item| position(&wanted, item).is_some());
    ordered.sort_by_key(|item| position(&wanted, item));
    server_only.sort_by_key(|item| position(stored, item).unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(ordered.len() + server_only.len());
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        ordered.into_iter().peekable(),
    );
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (position(stored, l), position(stored, r)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

/// Merges a patch list into a declared list: by key for lists of objects, as a set for primitives.
fn merge_list(
    target: &mut Value,
    items: &[Value],
    list: &MergeList,
    path: &str,
    lists: &[MergeList],
) -> Result<(), String> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *target = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(strip)
                .collect(),
        );
        return Ok(());
    }
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Value::Array(t) = target else {
        unreachable!("made an array above")
    };
    let Some(key) = &list.key else {
        for i in items {
            if !t.contains(i) {
                t.push(i.clone());
            }
        }
        return Ok(());
    };
    for item in items {
        let Value::Object(pm) = item else {
            return Err(format!(
                "{path}: elements must be objects merged on \"{key}\""
            ));
        };
        let Some(kv) = pm.get(key) else {
            return Err(format!("{path}: an element lacks its merge key \"{key}\""));
        };
        let at = t.iter().position(|e| e.get(key) == Some(kv));
        match (pm.get("$patch").and_then(Value::as_str), at) {
            (Some("delete"), Some(i)) => {
                t.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => strategic(&mut t[i], pm, path, lists)?,
            (_, None) => t.push(strip(item)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_element_order_puts_the_list_in_the_patch_order() {
        let names = |v: &Value| -> Vec<String> {
            v["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let stored = json!({"spec": {"containers": [
            {"name": "a", "image": "1"}, {"name": "s", "image": "1"}, {"name": "b", "image": "1"}]}});
        // kubectl apply reordering b before a and adding c at the front; s is only the server's
        // and stays before b, where it was stored (upstream's result for the same patch).
        let got = smp(
            stored.clone(),
            json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}],
                            "containers": [{"name": "c", "image": "2"}]}}),
        );
        assert_eq!(names(&got), ["c", "s", "b", "a"]);
        // Without the directive, the stored order stays and new elements come last.
        let got = smp(
            stored.clone(),
            json!({"spec": {"containers": [{"name": "c", "image": "2"}]}}),
        );
        assert_eq!(names(&got), ["a", "s", "b", "c"]);
        // The order keeps a server-only element between the ones it was stored between.
        let got = smp(
            stored,
            json!({"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                            "containers": [{"name": "b", "image": "2"}]}}),
        );
        assert_eq!(names(&got), ["a", "s", "b"]);
        assert_eq!(got["spec"]["containers"][2]["image"], "2");
    }

    fn pods() -> ResourceDef {
        ResourceDef::builtin("pods").unwrap()
    }

    fn smp(mut target: Value, patch: Value) -> Value {
        PatchKind::Strategic
            .apply(&pods(), &mut target, patch.to_string().as_bytes())
            .unwrap();
        target
    }

    #[test]
    fn containers_merge_by_name_and_their_lists_by_their_keys() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "ports": [{"containerPort": 80, "name": "http"}],
             "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]}});
        let out = smp(
            pod,
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                "containers": [
                    {"name": "a", "image": "a:2", "ports": [{"containerPort": 443}],
                     "env": [{"name": "X", "$patch": "delete"}, {"name": "Y", "value": "2"}]},
                    {"name": "c", "image": "c:1"}]}}),
        );
        let cs = out["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 3);
        assert_eq!(cs[0]["image"], "a:2");
        assert_eq!(
            cs[0]["ports"],
            json!([{"containerPort": 80, "name": "http"}, {"containerPort": 443}])
        );
        assert_eq!(cs[0]["env"], json!([{"name": "Y", "value": "2"}]));
        assert_eq!(cs[1]["image"], "b:1");
        assert_eq!(cs[2], json!({"name": "c", "image": "c:1"}));
    }

    #[test]
    fn directives_and_undeclared_lists() {
        let obj = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
            "spec": {"tolerations": [{"key": "k"}], "nodeSelector": {"a": "b"}}});
        let out = smp(
            obj,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"],
                                "finalizers": ["c"], "labels": {"x": null}},
                   "spec": {"tolerations": [{"key": "z"}],
                            "nodeSelector": {"$patch": "replace", "c": "d"}}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "c"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        // Undeclared list: replaced, as upstream does for lists without a strategy.
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "z"}]));
        assert_eq!(out["spec"]["nodeSelector"], json!({"c": "d"}));
        let bad = PatchKind::Strategic.apply(
            &pods(),
            &mut json!({}),
            br#"{"spec":{"containers":[{"image":"x"}]}}"#,
        );
        assert_eq!(bad.unwrap_err().code(), 400);
    }

    #[test]
    fn content_types_and_custom_resources() {
        let widgets = ResourceDef::builtin("widgets").unwrap();
        let kind = |ct: &str, d: &ResourceDef| {
            PatchKind::from_content_type(Some(ct), d).map_err(|e| e.code())
        };
        assert_eq!(
            kind("application/merge-patch+json", &widgets),
            Ok(PatchKind::Merge)
        );
        assert_eq!(
            kind("application/json-patch+json; charset=utf-8", &pods()),
            Ok(PatchKind::Json)
        );
        assert_eq!(
            kind("application/strategic-merge-patch+json", &pods()),
            Ok(PatchKind::Strategic)
        );
        assert_eq!(
            kind("application/strategic-merge-patch+json", &widgets),
            Err(415)
        );
        assert_eq!(kind("application/apply-patch+yaml", &pods()), Err(415));
        assert_eq!(kind("application/json", &pods()), Err(415));
        let mut v = json!({"a": 1});
        let e = PatchKind::Json
            .apply(&pods(), &mut v, br#"[{"op":"test","path":"/a","value":2}]"#)
            .unwrap_err();
        assert_eq!(e.code(), 422);
        PatchKind::Json
            .apply(
                &pods(),
                &mut v,
                br#"[{"op":"replace","path":"/a","value":3}]"#,
            )
            .unwrap();
        assert_eq!(v, json!({"a": 3}));
    }
}

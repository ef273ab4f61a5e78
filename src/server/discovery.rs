//! Discovery documents: `/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::model::ResourceDef;

fn resource(def: &ResourceDef) -> Value {
    json!({
        "name": def.plural,
        "singularName": def.kind.to_lowercase(),
        "namespaced": def.namespaced,
        "kind": def.kind,
        "verbs": ["create", "delete", "get", "list", "update", "watch"],
    })
}

/// `/api`: the core group's versions.
pub fn core_versions(defs: &[&ResourceDef]) -> Value {
    let versions: Vec<&str> = {
        let mut v: Vec<&str> = defs
            .iter()
            .filter(|d| d.group.is_empty())
            .map(|d| d.version.as_str())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    json!({"kind": "APIVersions", "versions": versions, "serverAddressByClientCIDRs": []})
}

/// `/apis`: the named groups.
pub fn groups(defs: &[&ResourceDef]) -> Value {
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for d in defs.iter().filter(|d| !d.group.is_empty()) {
        let v = by_group.entry(&d.group).or_default();
        if !v.contains(&d.version.as_str()) {
            v.push(&d.version);
        }
    }
    let groups: Vec<Value> = by_group
        .into_iter()
        .map(|(g, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": vs, "preferredVersion": vs[0].clone()})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/api/v1` or `/apis/{group}/{version}`: the resources of one group version, if it has any.
pub fn resources(defs: &[&ResourceDef], group: &str, version: &str) -> Option<Value> {
    let list: Vec<Value> = defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .map(|d| resource(d))
        .collect();
    if list.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    )
}

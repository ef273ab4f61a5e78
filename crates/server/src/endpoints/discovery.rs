//! Discovery documents: `/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`, aggregated discovery
//! (`apidiscovery.k8s.io/v2`, which kubectl asks for first) and `/version`.
//!
//! Each resource advertises what its definition declares (singular name, short names, categories)
//! and the verbs served here: reads. Writes are kube-apiserver's; with a proxy set, discovery is
//! its own (forwarded), with its verbs.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use watchcache::ResourceDef;

/// A served resource as discovery sees it: one version of it.
#[derive(Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub def: &'a ResourceDef,
}

/// The entries of a served definition: one per version served from its cache (a CRD's other
/// served versions too, [`ResourceDef::other_versions`]).
pub(crate) fn entries_of(def: &ResourceDef) -> impl Iterator<Item = Entry<'_>> {
    std::iter::once(def)
        .chain(&def.other_versions)
        .map(|def| Entry { def })
}

/// apimachinery's `CompareKubeAwareVersionStrings`: `Greater` when `a` comes first (GA, then
/// beta, then alpha, each by major then minor number, highest first; then any other version,
/// in ascending text order).
pub(crate) fn kube_aware_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    /// (major, kind: 0 alpha, 1 beta, 2 GA, minor) of `v{major}[(alpha|beta){minor}]`.
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (major, tail) = rest.split_at(digits);
        let major: u64 = major.parse().ok()?;
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (kind, minor) = if let Some(m) = tail.strip_prefix("alpha") {
            (0, m)
        } else {
            (1, tail.strip_prefix("beta")?)
        };
        if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((major, kind, minor.parse().ok()?))
    }
    if a == b {
        return Ordering::Equal;
    }
    match (parse(a), parse(b)) {
        (None, None) => b.cmp(a),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some((am, ak, an)), Some((bm, bk, bn))) => (ak, am, an).cmp(&(bk, bm, bn)),
    }
}

/// The Kubernetes version this server reports on `/version`: the one whose wire format and
/// semantics it follows (the test vectors in testdata come from 1.35).
pub(crate) const KUBERNETES_MINOR: &str = "35";

/// The verbs served for a resource: the reads, sorted as upstream lists them.
const VERBS: [&str; 3] = ["get", "list", "watch"];

/// Verbs of the `/status` subresource, served beside the resources that have one.
const STATUS_VERBS: [&str; 1] = ["get"];

fn status_resource(e: Entry<'_>) -> Value {
    json!({
        "name": format!("{}/status", e.def.plural),
        "singularName": "",
        "namespaced": e.def.namespaced,
        "kind": e.def.kind,
        "verbs": STATUS_VERBS,
    })
}

fn resource(e: Entry<'_>) -> Value {
    let d = e.def;
    let mut r = json!({
        "name": d.plural,
        "singularName": d.singular,
        "namespaced": d.namespaced,
        "kind": d.kind,
        "verbs": VERBS,
    });
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    r
}

/// `/api`: the core group's versions.
pub(super) fn core_versions(entries: &[Entry<'_>]) -> Value {
    let mut v: Vec<&str> = entries
        .iter()
        .filter(|e| e.def.group.is_empty())
        .map(|e| e.def.version.as_str())
        .collect();
    v.sort();
    v.dedup();
    json!({"kind": "APIVersions", "versions": v, "serverAddressByClientCIDRs": []})
}

/// Versions of each named group, in first-seen order; a group of custom resources only in
/// kube-aware order, highest first (the first is its preferred version), as apiextensions'
/// discovery controller sorts them.
fn named_groups<'a>(entries: &[Entry<'a>]) -> BTreeMap<&'a str, Vec<&'a str>> {
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut built_in: BTreeMap<&str, bool> = BTreeMap::new();
    for e in entries.iter().filter(|e| !e.def.group.is_empty()) {
        let v = by_group.entry(&e.def.group).or_default();
        if !v.contains(&e.def.version.as_str()) {
            v.push(&e.def.version);
        }
        *built_in.entry(&e.def.group).or_default() |= !e.def.rewrite_api_version;
    }
    for (g, vs) in &mut by_group {
        if built_in.get(g) == Some(&false) {
            vs.sort_by(|a, b| kube_aware_order(b, a));
        }
    }
    by_group
}

/// `/apis`: the named groups.
pub(super) fn groups(entries: &[Entry<'_>]) -> Value {
    let groups: Vec<Value> = named_groups(entries)
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
pub(super) fn resources(entries: &[Entry<'_>], group: &str, version: &str) -> Option<Value> {
    let mut list: Vec<Value> = Vec::new();
    for e in entries
        .iter()
        .filter(|e| e.def.group == group && e.def.version == version)
    {
        list.push(resource(*e));
        if e.def.status_subresource {
            list.push(status_resource(*e));
        }
    }
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

fn aggregated_resource(e: Entry<'_>) -> Value {
    let d = e.def;
    let kind = json!({"group": d.group, "version": d.version, "kind": d.kind});
    let mut r = json!({
        "resource": d.plural,
        "responseKind": kind,
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular,
        "verbs": VERBS,
    });
    if d.status_subresource {
        r["subresources"] = json!([{
            "subresource": "status",
            "responseKind": kind,
            "verbs": STATUS_VERBS,
        }]);
    }
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    r
}

fn aggregated_group(entries: &[Entry<'_>], group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let rs: Vec<Value> = entries
                .iter()
                .filter(|e| e.def.group == group && e.def.version == *v)
                .map(|e| aggregated_resource(*e))
                .collect();
            json!({"version": v, "resources": rs, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": vs})
}

/// Aggregated discovery (`APIGroupDiscoveryList`, `apidiscovery.k8s.io/v2`): on `/api`, the core
/// group; on `/apis`, the named groups.
pub(super) fn aggregated(entries: &[Entry<'_>], core: bool) -> Value {
    let items: Vec<Value> = if core {
        let mut v: Vec<&str> = entries
            .iter()
            .filter(|e| e.def.group.is_empty())
            .map(|e| e.def.version.as_str())
            .collect();
        v.sort();
        v.dedup();
        if v.is_empty() {
            Vec::new()
        } else {
            vec![aggregated_group(entries, "", &v)]
        }
    } else {
        named_groups(entries)
            .iter()
            .map(|(g, vs)| aggregated_group(entries, g, vs))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `/version`: the Kubernetes version whose API this server follows, and this server's own.
pub(super) fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBERNETES_MINOR,
        "gitVersion": format!("v1.{KUBERNETES_MINOR}.0-watchcache.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_as_kube_aware_strings() {
        let mut vs = vec![
            "v1alpha1",
            "foo",
            "v2beta1",
            "v1",
            "v11alpha2",
            "v1beta2",
            "v12",
            "bar",
            "v1beta10",
            "v3alpha",
            "v2",
        ];
        vs.sort_by(|a, b| kube_aware_order(b, a));
        // GA, beta, alpha, each by major then minor, then the rest by text.
        assert_eq!(
            vs,
            [
                "v12",
                "v2",
                "v1",
                "v2beta1",
                "v1beta10",
                "v1beta2",
                "v11alpha2",
                "v1alpha1",
                "bar",
                "foo",
                "v3alpha"
            ]
        );
    }

    #[test]
    fn a_crds_other_versions_are_discovered_beside_its_storage_version() {
        let crd: serde_json::Value = serde_json::json!({
            "metadata": {"name": "shirts.stable.example.com"},
            "spec": {"group": "stable.example.com", "scope": "Namespaced",
                     "names": {"plural": "shirts", "kind": "Shirt"},
                     "versions": [
                        {"name": "v1beta1", "served": true, "storage": true},
                        {"name": "v1", "served": true, "storage": false},
                        {"name": "v1alpha1", "served": false, "storage": false}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]}
        });
        let def = watchcache::CrdServing::of(&crd)
            .definition()
            .cloned()
            .unwrap();
        let entries: Vec<Entry<'_>> = entries_of(&def).collect();
        let groups = groups(&entries);
        let g = &groups["groups"][0];
        assert_eq!(g["preferredVersion"]["version"], "v1", "{g}");
        assert_eq!(g["versions"][1]["version"], "v1beta1");
        assert_eq!(g["versions"].as_array().map(Vec::len), Some(2));
        for v in ["v1", "v1beta1"] {
            let r = resources(&entries, "stable.example.com", v).unwrap();
            assert_eq!(r["resources"][0]["name"], "shirts", "{v}");
        }
        assert!(resources(&entries, "stable.example.com", "v1alpha1").is_none());
        let agg = aggregated(&entries, false);
        let versions: Vec<&Value> = agg["items"][0]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| &v["version"])
            .collect();
        assert_eq!(versions, ["v1", "v1beta1"]);
    }

    #[test]
    fn resources_advertise_names_categories_and_served_verbs() {
        let defs = ResourceDef::builtins();
        let entries: Vec<Entry<'_>> = defs.iter().map(|def| Entry { def }).collect();
        let core = resources(&entries, "", "v1").unwrap();
        let find = |name: &str| {
            core["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == name)
                .cloned()
                .unwrap()
        };
        let pods = find("pods");
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["singularName"], "pod");
        assert_eq!(pods["categories"], json!(["all"]));
        assert_eq!(pods["verbs"], json!(["get", "list", "watch"]));
        assert_eq!(find("nodes")["verbs"], json!(["get", "list", "watch"]));
        assert_eq!(find("pods/status")["verbs"], json!(["get"]));
        let agg = aggregated(&entries, true);
        assert_eq!(agg["items"][0]["metadata"]["name"], "");
        let rs = agg["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap();
        let cm = rs.iter().find(|r| r["resource"] == "configmaps").unwrap();
        assert_eq!(cm["shortNames"], json!(["cm"]));
        assert_eq!(cm["scope"], "Namespaced");
        let named = aggregated(&entries, false);
        assert!(
            named["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| g["metadata"]["name"] != "")
        );
    }
}

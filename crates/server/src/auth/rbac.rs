//! The RBAC authorizer: `rbac.authorization.k8s.io/v1` Roles, ClusterRoles, RoleBindings and
//! ClusterRoleBindings, compiled into an index by subject (user or group) so a decision is a
//! few hash lookups and a scan of that subject's rules.
//!
//! The objects come from the cache's own resources (they live in etcd) and from a bootstrap
//! directory of YAML or JSON files (`--authorization-rbac-dir`); the cache's objects replace a
//! bootstrap object of the same kind, namespace and name. [`Rbac::follow`] rebuilds the index
//! whenever one of the four caches sends an event (debounced by [`DEBOUNCE`]), so a change takes
//! effect well within a second, with no restart.
//!
//! Aggregated ClusterRoles (`aggregationRule.clusterRoleSelectors`) get the union of the rules of
//! every ClusterRole a selector matches, plus their own (upstream's controller writes that union
//! into the object; computing it here means it holds whether or not a controller runs).
//!
//! Lock order: only `index` (a `RwLock` held for a pointer swap or an `Arc` clone, never across
//! an await).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::RwLock;
use serde::Deserialize;

use watchcache::{Cache, ListOptions, WatchOptions};
use watchcache::{ResourceVersion, Selection};

use super::attributes::{Attributes, Decision};

/// How long the follower waits after an event for more before rebuilding.
pub(super) const DEBOUNCE: Duration = Duration::from_millis(20);

/// A list or map that may be written `null` (Go's encoding of a nil slice, as kube-apiserver
/// stores an aggregated ClusterRole's `rules` before the controller fills them): empty.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The API group of the RBAC resources.
pub(super) const GROUP: &str = "rbac.authorization.k8s.io";

/// One rule of a role, as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// Verbs, or `*`.
    #[serde(default, deserialize_with = "nullable")]
    pub verbs: Vec<String>,
    /// API groups, or `*`.
    #[serde(default, deserialize_with = "nullable")]
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/status`, `*/status`), or `*`.
    #[serde(default, deserialize_with = "nullable")]
    pub resources: Vec<String>,
    /// Object names; empty: all.
    #[serde(default, deserialize_with = "nullable")]
    pub resource_names: Vec<String>,
    /// Non-resource paths (`/metrics`, `/api*`), or `*`.
    #[serde(default, rename = "nonResourceURLs", deserialize_with = "nullable")]
    pub non_resource_urls: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default, deserialize_with = "nullable")]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoleObj {
    #[serde(default)]
    metadata: Meta,
    #[serde(default, deserialize_with = "nullable")]
    rules: Vec<PolicyRule>,
    #[serde(default)]
    aggregation_rule: Option<AggregationRule>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AggregationRule {
    #[serde(default, deserialize_with = "nullable")]
    cluster_role_selectors: Vec<LabelSelectorSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LabelSelectorSpec {
    #[serde(default, deserialize_with = "nullable")]
    match_labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    match_expressions: Vec<Requirement>,
}

#[derive(Debug, Clone, Deserialize)]
struct Requirement {
    key: String,
    operator: String,
    #[serde(default, deserialize_with = "nullable")]
    values: Vec<String>,
}

impl LabelSelectorSpec {
    /// metav1.LabelSelector semantics; an empty selector matches everything, as upstream's
    /// `LabelSelectorAsSelector` (an unknown operator matches nothing).
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let have = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => have.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => have.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => have.is_some(),
                    "DoesNotExist" => have.is_none(),
                    _ => false,
                }
            })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BindingObj {
    #[serde(default)]
    metadata: Meta,
    #[serde(default, deserialize_with = "nullable")]
    subjects: Vec<Subject>,
    role_ref: RoleRef,
}

#[derive(Debug, Clone, Deserialize)]
struct Subject {
    kind: String,
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Debug, Clone, Deserialize)]
struct RoleRef {
    kind: String,
    name: String,
}

/// The four kinds, by what the objects say they are.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    roles: BTreeMap<(String, String), RoleObj>,
    cluster_roles: BTreeMap<String, RoleObj>,
    role_bindings: BTreeMap<(String, String), BindingObj>,
    cluster_role_bindings: BTreeMap<String, BindingObj>,
}

impl Objects {
    /// Adds one object (`kind` is Role, ClusterRole, RoleBinding, ClusterRoleBinding or List);
    /// the last one of a kind, namespace and name wins.
    ///
    /// # Errors
    /// An object of another kind, or one that does not have the kind's shape.
    pub fn add(&mut self, v: serde_json::Value) -> Result<(), String> {
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_owned();
        let bad = |e: serde_json::Error| format!("{kind}: {e}");
        match kind.as_str() {
            "Role" => {
                let r: RoleObj = serde_json::from_value(v).map_err(bad)?;
                self.roles
                    .insert((r.metadata.namespace.clone(), r.metadata.name.clone()), r);
            }
            "ClusterRole" => {
                let r: RoleObj = serde_json::from_value(v).map_err(bad)?;
                self.cluster_roles.insert(r.metadata.name.clone(), r);
            }
            "RoleBinding" => {
                let b: BindingObj = serde_json::from_value(v).map_err(bad)?;
                self.role_bindings
                    .insert((b.metadata.namespace.clone(), b.metadata.name.clone()), b);
            }
            "ClusterRoleBinding" => {
                let b: BindingObj = serde_json::from_value(v).map_err(bad)?;
                self.cluster_role_bindings
                    .insert(b.metadata.name.clone(), b);
            }
            "List"
            | "RoleList"
            | "ClusterRoleList"
            | "RoleBindingList"
            | "ClusterRoleBindingList" => {
                let items = match v {
                    serde_json::Value::Object(mut m) => m.remove("items"),
                    _ => None,
                };
                let item_kind = kind.trim_end_matches("List");
                for mut item in items
                    .and_then(|i| match i {
                        serde_json::Value::Array(a) => Some(a),
                        _ => None,
                    })
                    .unwrap_or_default()
                {
                    // Items of a typed list may leave their kind out.
                    if item.get("kind").is_none() && !item_kind.is_empty() {
                        item["kind"] = serde_json::Value::String(item_kind.to_owned());
                    }
                    self.add(item)?;
                }
            }
            other => return Err(format!("not an RBAC object: kind {other:?}")),
        }
        Ok(())
    }

    /// Every YAML (`.yaml`, `.yml`, several documents each) and JSON file of a directory.
    ///
    /// # Errors
    /// The first file that cannot be read or holds something else than RBAC objects, named.
    pub fn load_dir(dir: &Path) -> Result<Objects, String> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
            })
            .collect();
        files.sort();
        let mut out = Objects::default();
        for f in files {
            let name = f.display().to_string();
            let text = std::fs::read_to_string(&f).map_err(|e| format!("{name}: {e}"))?;
            let docs: Vec<serde_json::Value> = if f.extension().is_some_and(|x| x == "json") {
                vec![serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?]
            } else {
                serde_saphyr::from_multiple(&text).map_err(|e| format!("{name}: {e}"))?
            };
            for d in docs.into_iter().filter(|d| !d.is_null()) {
                out.add(d).map_err(|e| format!("{name}: {e}"))?;
            }
        }
        Ok(out)
    }

    /// Compiles the index.
    pub fn compile(&self) -> Index {
        let mut ix = Index::default();
        let cluster_rules: HashMap<&str, Arc<[PolicyRule]>> = self
            .cluster_roles
            .iter()
            .map(|(name, r)| (name.as_str(), self.effective_rules(r)))
            .collect();
        // The roles themselves, for what a binding would grant (the escalation check).
        ix.cluster_roles = cluster_rules
            .iter()
            .map(|(name, rules)| ((*name).to_owned(), Arc::clone(rules)))
            .collect();
        ix.roles = self
            .roles
            .iter()
            .map(|(key, r)| (key.clone(), Arc::from(r.rules.clone())))
            .collect();
        let mut grant =
            |subjects: &[Subject], binding_ns: Option<&str>, rules: Arc<[PolicyRule]>| {
                for s in subjects {
                    let g = Grant {
                        namespace: binding_ns.map(Arc::from),
                        rules: Arc::clone(&rules),
                    };
                    match s.kind.as_str() {
                        "User" => ix.users.entry(s.name.clone()).or_default().push(g),
                        "Group" => ix.groups.entry(s.name.clone()).or_default().push(g),
                        "ServiceAccount" => {
                            // A RoleBinding's service account without a namespace is in the
                            // binding's namespace (upstream's defaulting).
                            let ns = if s.namespace.is_empty() {
                                binding_ns.unwrap_or_default()
                            } else {
                                &s.namespace
                            };
                            ix.users
                                .entry(format!("system:serviceaccount:{ns}:{}", s.name))
                                .or_default()
                                .push(g);
                        }
                        _ => {}
                    }
                }
            };
        for b in self.cluster_role_bindings.values() {
            if b.role_ref.kind == "ClusterRole"
                && let Some(rules) = cluster_rules.get(b.role_ref.name.as_str())
            {
                grant(&b.subjects, None, Arc::clone(rules));
            }
        }
        for ((ns, _), b) in &self.role_bindings {
            let rules = match b.role_ref.kind.as_str() {
                "ClusterRole" => cluster_rules.get(b.role_ref.name.as_str()).cloned(),
                "Role" => self
                    .roles
                    .get(&(ns.clone(), b.role_ref.name.clone()))
                    .map(|r| Arc::from(r.rules.clone())),
                _ => None,
            };
            if let Some(rules) = rules {
                grant(&b.subjects, Some(ns), rules);
            }
        }
        ix
    }

    /// A ClusterRole's rules, with those of the roles its aggregation rule selects.
    fn effective_rules(&self, role: &RoleObj) -> Arc<[PolicyRule]> {
        let mut rules = role.rules.clone();
        if let Some(agg) = &role.aggregation_rule {
            for (name, other) in &self.cluster_roles {
                if *name != role.metadata.name
                    && agg
                        .cluster_role_selectors
                        .iter()
                        .any(|s| s.matches(&other.metadata.labels))
                {
                    for r in &other.rules {
                        if !rules.contains(r) {
                            rules.push(r.clone());
                        }
                    }
                }
            }
        }
        Arc::from(rules)
    }
}

/// Rules granted to a subject, in a namespace (a RoleBinding) or everywhere (a
/// ClusterRoleBinding).
#[derive(Debug, Clone)]
struct Grant {
    namespace: Option<Arc<str>>,
    rules: Arc<[PolicyRule]>,
}

/// The compiled rules, by subject; and the rules of each role, by name.
#[derive(Debug, Default)]
pub struct Index {
    users: HashMap<String, Vec<Grant>>,
    groups: HashMap<String, Vec<Grant>>,
    /// Each ClusterRole's rules (aggregated ones with their members').
    cluster_roles: HashMap<String, Arc<[PolicyRule]>>,
    /// Each Role's rules, by (namespace, name).
    roles: HashMap<(String, String), Arc<[PolicyRule]>>,
}

impl Index {
    /// Every rule granted to the user (by name or group) in `namespace`: those of its
    /// ClusterRoleBindings, and, for a namespace, of its RoleBindings there (upstream's
    /// `RulesFor`; an empty namespace is the cluster scope).
    pub fn rules_for(&self, user: &super::user::User, namespace: &str) -> Vec<PolicyRule> {
        self.users
            .get(&user.name)
            .into_iter()
            .chain(user.groups.iter().filter_map(|g| self.groups.get(g)))
            .flatten()
            .filter(|g| match &g.namespace {
                None => true,
                Some(ns) => !namespace.is_empty() && **ns == *namespace,
            })
            .flat_map(|g| g.rules.iter().cloned())
            .collect()
    }

    /// The rules a role reference names, as a binding in `namespace` would grant them
    /// (upstream's `GetRoleReferenceRules`): a ClusterRole's, or a Role's in that namespace.
    /// `None` when the role does not exist.
    pub fn role_ref_rules(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Option<Arc<[PolicyRule]>> {
        match kind {
            "ClusterRole" => self.cluster_roles.get(name).cloned(),
            "Role" => self
                .roles
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned(),
            _ => None,
        }
    }

    /// Whether some rule granted to the user or one of its groups allows the request.
    pub fn allows(&self, a: &Attributes<'_>) -> bool {
        let grants = self
            .users
            .get(&a.user.name)
            .into_iter()
            .chain(a.user.groups.iter().filter_map(|g| self.groups.get(g)))
            .flatten();
        for g in grants {
            let applies = match (&g.namespace, &a.info.resource) {
                (None, _) => true,
                (Some(ns), Some(r)) => !r.namespace.is_empty() && **ns == *r.namespace,
                (Some(_), None) => false,
            };
            if applies && g.rules.iter().any(|rule| rule_allows(rule, a)) {
                return true;
            }
        }
        false
    }
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

/// Upstream's `RuleAllows` (rbac/v1 helpers).
pub(super) fn rule_allows(rule: &PolicyRule, a: &Attributes<'_>) -> bool {
    if !has(&rule.verbs, &a.info.verb) {
        return false;
    }
    let Some(r) = &a.info.resource else {
        let path = a.info.path.as_str();
        return rule.non_resource_urls.iter().any(|u| {
            u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p))
        });
    };
    if !has(&rule.api_groups, &r.group) {
        return false;
    }
    let resource_ok = rule.resources.iter().any(|x| {
        if x == "*" {
            return true;
        }
        if r.subresource.is_empty() {
            return *x == r.resource;
        }
        x.strip_suffix(r.subresource.as_str())
            .and_then(|head| head.strip_suffix('/'))
            .is_some_and(|head| head == "*" || head == r.resource)
    });
    resource_ok && (rule.resource_names.is_empty() || rule.resource_names.contains(&r.name))
}

/// The RBAC authorizer: the current index, rebuilt from its sources.
pub struct Rbac {
    bootstrap: Objects,
    index: RwLock<Arc<Index>>,
    /// Whether the index holds the caches' objects (a first rebuild succeeded): until then
    /// `/readyz` says not ready, as upstream's RBAC post-start hook.
    synced: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Rbac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rbac").finish_non_exhaustive()
    }
}

impl Rbac {
    /// An authorizer with these bootstrap objects (and whatever the caches will hold).
    pub fn new(bootstrap: Objects) -> Rbac {
        let index = RwLock::new(Arc::new(bootstrap.compile()));
        Rbac {
            bootstrap,
            index,
            synced: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the caches' RBAC objects are in the index.
    pub fn synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The current index (an `Arc` clone: the lock is not held after).
    pub fn index(&self) -> Arc<Index> {
        Arc::clone(&self.index.read())
    }

    /// Allows what a rule grants; otherwise no opinion (the next mode decides).
    pub fn authorize(&self, a: &Attributes<'_>) -> Decision {
        if self.index.read().allows(a) {
            Decision::Allow
        } else {
            Decision::NoOpinion(String::new())
        }
    }

    /// Rebuilds the index from the bootstrap objects and the caches' current objects.
    ///
    /// # Errors
    /// A cache that cannot be listed (not ready yet).
    pub async fn rebuild(&self, caches: &[Cache]) -> Result<(), watchcache::Error> {
        let mut objects = self.bootstrap.clone();
        for c in caches {
            let list = c
                .list(&ListOptions::all().at(ResourceVersion::Any, None))
                .await?;
            let kind = c.definition().kind.clone();
            for o in &list.items {
                match serde_json::from_slice::<serde_json::Value>(&o.json_unkept()) {
                    Ok(mut v) => {
                        if v.get("kind").is_none() {
                            v["kind"] = serde_json::Value::String(kind.clone());
                        }
                        if let Err(e) = objects.add(v) {
                            tracing::warn!(key = o.key(), error = %e, "RBAC object ignored");
                        }
                    }
                    Err(e) => tracing::warn!(key = o.key(), error = %e, "RBAC object ignored"),
                }
            }
        }
        *self.index.write() = Arc::new(objects.compile());
        self.synced
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Follows the caches: rebuilds after every burst of events, until the process ends.
    pub async fn follow(self: Arc<Self>, caches: Vec<Cache>) {
        loop {
            for c in &caches {
                while !c.is_ready() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            let mut streams = Vec::new();
            for c in &caches {
                match c
                    .watch(WatchOptions::new(Selection::all(), ResourceVersion::Any))
                    .await
                {
                    Ok(s) => streams.push(s),
                    Err(e) => tracing::debug!(error = %e, "RBAC follower: watch failed"),
                }
            }
            if streams.len() != caches.len() {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            if let Err(e) = self.rebuild(&caches).await {
                tracing::warn!(error = %e, "RBAC index not rebuilt");
            }
            let mut all = futures_util::stream::select_all(streams);
            // Each burst of events: wait for the burst to end, then rebuild once.
            while let Some(ev) = all.next().await {
                if ev.is_err() {
                    break;
                }
                while let Ok(Some(Ok(_))) = tokio::time::timeout(DEBOUNCE, all.next()).await {}
                if let Err(e) = self.rebuild(&caches).await {
                    tracing::warn!(error = %e, "RBAC index not rebuilt");
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::attributes::RequestInfo;
    use crate::auth::user::User;
    use serde_json::json;

    fn objects(items: serde_json::Value) -> Objects {
        let mut o = Objects::default();
        o.add(json!({"kind": "List", "items": items})).unwrap();
        o
    }

    fn allowed(ix: &Index, user: &User, method: &str, path: &str) -> bool {
        let info = RequestInfo::new(method, path, false);
        ix.allows(&Attributes {
            user,
            info: &info,
            selection: None,
        })
    }

    fn world() -> Index {
        objects(json!([
            {"kind": "Role", "metadata": {"name": "pod-reader", "namespace": "a"},
             "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]}]},
            {"kind": "RoleBinding", "metadata": {"name": "alice-reads", "namespace": "a"},
             "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "bot"}],
             "roleRef": {"kind": "Role", "name": "pod-reader", "apiGroup": GROUP}},
            {"kind": "ClusterRole", "metadata": {"name": "one-secret"},
             "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"]},
                       {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/status"]}]},
            {"kind": "RoleBinding", "metadata": {"name": "ops-secret", "namespace": "b"},
             "subjects": [{"kind": "Group", "name": "ops"}],
             "roleRef": {"kind": "ClusterRole", "name": "one-secret"}},
            {"kind": "ClusterRole", "metadata": {"name": "metrics"},
             "rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics", "/api*"]}]},
            {"kind": "ClusterRole", "metadata": {"name": "view"},
             "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg/view": "true"}}]}},
            {"kind": "ClusterRole", "metadata": {"name": "view-nodes", "labels": {"agg/view": "true"}},
             "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["nodes"]}]},
            {"kind": "ClusterRole", "metadata": {"name": "view-leases", "labels": {"agg/view": "false"}},
             "rules": [{"verbs": ["get"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}]},
            {"kind": "ClusterRoleBinding", "metadata": {"name": "mon"},
             "subjects": [{"kind": "User", "name": "prom"}, {"kind": "Group", "name": "viewers"}],
             "roleRef": {"kind": "ClusterRole", "name": "metrics"}},
            {"kind": "ClusterRoleBinding", "metadata": {"name": "viewers"},
             "subjects": [{"kind": "Group", "name": "viewers"}],
             "roleRef": {"kind": "ClusterRole", "name": "view"}},
            {"kind": "ClusterRoleBinding", "metadata": {"name": "dangling"},
             "subjects": [{"kind": "User", "name": "alice"}],
             "roleRef": {"kind": "ClusterRole", "name": "does-not-exist"}},
        ]))
        .compile()
    }

    #[test]
    fn roles_in_their_namespace_verbs_and_subresources() {
        let ix = world();
        let alice = User::authenticated("alice", "", vec![]);
        assert!(allowed(&ix, &alice, "GET", "/api/v1/namespaces/a/pods"));
        assert!(allowed(&ix, &alice, "GET", "/api/v1/namespaces/a/pods/p1"));
        assert!(allowed(
            &ix,
            &alice,
            "GET",
            "/api/v1/namespaces/a/pods/p1/log"
        ));
        assert!(!allowed(
            &ix,
            &alice,
            "GET",
            "/api/v1/namespaces/a/pods/p1/exec"
        ));
        assert!(!allowed(
            &ix,
            &alice,
            "DELETE",
            "/api/v1/namespaces/a/pods/p1"
        ));
        assert!(!allowed(&ix, &alice, "GET", "/api/v1/namespaces/b/pods"));
        assert!(
            !allowed(&ix, &alice, "GET", "/api/v1/pods"),
            "cluster-wide list"
        );
        assert!(
            !allowed(&ix, &alice, "GET", "/apis/apps/v1/namespaces/a/pods"),
            "other group"
        );
        let bot = User::authenticated("system:serviceaccount:a:bot", "", vec![]);
        assert!(allowed(&ix, &bot, "GET", "/api/v1/namespaces/a/pods"));
        let nobody = User::authenticated("nobody", "", vec![]);
        assert!(!allowed(&ix, &nobody, "GET", "/api/v1/namespaces/a/pods"));
    }

    #[test]
    fn resource_names_wildcards_and_cluster_roles_bound_in_a_namespace() {
        let ix = world();
        let op = User::authenticated("op", "", vec!["ops".into()]);
        assert!(allowed(&ix, &op, "GET", "/api/v1/namespaces/b/secrets/s1"));
        assert!(!allowed(&ix, &op, "GET", "/api/v1/namespaces/b/secrets/s2"));
        assert!(
            !allowed(&ix, &op, "GET", "/api/v1/namespaces/b/secrets"),
            "list has no name"
        );
        assert!(!allowed(&ix, &op, "GET", "/api/v1/namespaces/c/secrets/s1"));
        assert!(allowed(
            &ix,
            &op,
            "PUT",
            "/apis/apps/v1/namespaces/b/deployments/d/status"
        ));
        assert!(!allowed(
            &ix,
            &op,
            "PUT",
            "/apis/apps/v1/namespaces/b/deployments/d"
        ));
        assert!(
            !allowed(&ix, &op, "PUT", "/api/v1/nodes/n1/status"),
            "cluster scope"
        );
    }

    #[test]
    fn non_resource_urls_with_prefix_wildcards() {
        let ix = world();
        let prom = User::authenticated("prom", "", vec![]);
        assert!(allowed(&ix, &prom, "GET", "/metrics"));
        assert!(allowed(&ix, &prom, "GET", "/api"));
        assert!(allowed(&ix, &prom, "GET", "/apis/apps/v1"));
        assert!(!allowed(&ix, &prom, "GET", "/readyz"));
        assert!(!allowed(&ix, &prom, "POST", "/metrics"));
        assert!(
            !allowed(&ix, &prom, "GET", "/api/v1/pods"),
            "a resource, not a path"
        );
    }

    #[test]
    fn aggregated_cluster_roles_take_the_selected_roles_rules() {
        let ix = world();
        let v = User::authenticated("v", "", vec!["viewers".into()]);
        assert!(allowed(&ix, &v, "GET", "/api/v1/nodes"));
        assert!(allowed(&ix, &v, "GET", "/api/v1/nodes/n1"));
        assert!(!allowed(
            &ix,
            &v,
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/l"
        ));
        let sel = LabelSelectorSpec {
            match_labels: BTreeMap::new(),
            match_expressions: vec![Requirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: vec!["x".into()],
            }],
        };
        assert!(sel.matches(&BTreeMap::new()));
        assert!(!sel.matches(&BTreeMap::from([("tier".into(), "x".into())])));
    }

    #[tokio::test]
    async fn synced_once_a_rebuild_from_the_caches_succeeded() {
        let (cache, writer) = Cache::new(
            watchcache::ResourceDef::builtin("clusterroles").unwrap(),
            watchcache::CacheConfig::default(),
        );
        let rbac = Rbac::new(Objects::default());
        assert!(!rbac.synced());
        // A cache that is not ready cannot be read: still not synced.
        assert!(rbac.rebuild(std::slice::from_ref(&cache)).await.is_err());
        assert!(!rbac.synced());
        let _src = watchcache::MemorySource::new(writer, 1, []);
        rbac.rebuild(&[cache]).await.unwrap();
        assert!(rbac.synced());
    }

    #[test]
    fn null_lists_are_empty_as_go_writes_nil_slices() {
        let mut o = Objects::default();
        o.add(json!({"kind": "ClusterRole", "metadata": {"name": "view", "labels": null},
            "rules": null, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}, "matchExpressions": null}]}}))
            .unwrap();
        o.add(json!({"kind": "ClusterRole", "metadata": {"name": "member", "labels": {"a": "b"}},
            "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"], "resourceNames": null, "nonResourceURLs": null}]}))
            .unwrap();
        o.add(
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"}, "subjects": null,
            "roleRef": {"kind": "ClusterRole", "name": "view"}}),
        )
        .unwrap();
        o.add(json!({"kind": "ClusterRoleBinding", "metadata": {"name": "c"},
            "subjects": [{"kind": "User", "name": "u"}], "roleRef": {"kind": "ClusterRole", "name": "view"}}))
            .unwrap();
        let u = User::authenticated("u", "", vec![]);
        assert!(allowed(&o.compile(), &u, "GET", "/api/v1/nodes/n1"));
    }

    #[test]
    fn loads_yaml_and_json_directories_and_refuses_other_kinds() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.yaml"),
            "kind: ClusterRole\nmetadata: {name: r}\nrules:\n- verbs: [get]\n  nonResourceURLs: [/readyz]\n---\nkind: ClusterRoleBinding\nmetadata: {name: b}\nsubjects: [{kind: User, name: u}]\nroleRef: {kind: ClusterRole, name: r}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.json"),
            r#"{"kind":"RoleBindingList","items":[]}"#,
        )
        .unwrap();
        let ix = Objects::load_dir(dir.path()).unwrap().compile();
        let u = User::authenticated("u", "", vec![]);
        assert!(allowed(&ix, &u, "GET", "/readyz"));
        std::fs::write(
            dir.path().join("c.yaml"),
            "kind: Pod\nmetadata: {name: p}\n",
        )
        .unwrap();
        let e = Objects::load_dir(dir.path()).unwrap_err();
        assert!(
            e.contains("c.yaml") && e.contains("not an RBAC object"),
            "{e}"
        );
    }
}

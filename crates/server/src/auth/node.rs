//! The Node authorizer: what a kubelet (`system:node:<name>` in `system:nodes`) may do, as
//! upstream's (plugin/pkg/auth/authorizer/node, Kubernetes 1.35 with its default feature gates),
//! decided from the caches' own indexes instead of upstream's graph.
//!
//! - secrets, configmaps: get, list and watch of one object (by name, or `metadata.name` pinned)
//!   that a pod bound to the node references; serviceaccounts likewise (get), and their `token`
//!   subresource (create);
//! - persistentvolumeclaims (get; `status` update and patch), persistentvolumes (get: bound to a
//!   referenced claim), resourceclaims (get), volumeattachments (get: attached to the node);
//! - pods: list and watch with `spec.nodeName` pinned to the node; get, list and watch of one pod
//!   bound to it; create, delete, `status` and `eviction` (NodeRestriction admission narrows
//!   those at the API server);
//! - nodes: create, update and patch; get, list and watch of its own Node; `status`;
//! - its Lease in `kube-node-lease`, its CSINode; resourceslices of the node;
//! - everything else by upstream's static node rules (`bootstrappolicy.NodeRules`): services,
//!   events, CSRs, csidrivers, runtimeclasses, endpoints, tokenreviews, subjectaccessreviews...
//!
//! Anything it does not allow is "no opinion", so the next mode (RBAC) decides, as upstream's
//! `Node,RBAC`.
//!
//! The references of a node's pods ([`RefSet`]) are computed from the pods cache's
//! `spec.nodeName` index (the node's pods only, never a walk over all pods) and remembered per
//! node with what they were computed from: the node's pods (key and revision of each) and the
//! claims cache's revision. A pod written on another node changes neither, so a kubelet's reads
//! are not re-decided from its pods' JSON after every pod write in the cluster; a pod's JSON
//! read here is not kept with it ([`Object::json_unkept`]). Lock order: `refs` only, never
//! across an await.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use watchcache::Cache;
use watchcache::Object;

use super::attributes::{Attributes, Decision};
use super::rbac::{PolicyRule, rule_allows};

/// The objects the pods of one node reference, by (namespace, name).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RefSet {
    /// Pods bound to the node.
    pub pods: HashSet<(String, String)>,
    /// Secrets (volumes, projected volumes, env, envFrom, imagePullSecrets).
    pub secrets: HashSet<(String, String)>,
    /// ConfigMaps (volumes, projected volumes, env, envFrom).
    pub configmaps: HashSet<(String, String)>,
    /// PersistentVolumeClaims (volumes).
    pub pvcs: HashSet<(String, String)>,
    /// Service accounts the pods run as.
    pub service_accounts: HashSet<(String, String)>,
    /// ResourceClaims (`spec.resourceClaims`, and those generated from templates, by status).
    pub resource_claims: HashSet<(String, String)>,
    /// PersistentVolumes bound to the claims (by name; cluster-scoped).
    pub pvs: HashSet<String>,
}

impl RefSet {
    /// Adds what one pod (its JSON) references, as upstream's graph adds a pod
    /// (`graph.AddPod`): the secrets and configmaps `VisitPodSecretNames` and
    /// `VisitPodConfigmapNames` visit, its service account, its claims (an ephemeral volume's
    /// is `<pod>-<volume>`), its resource claims.
    pub fn add_pod(&mut self, pod: &Value) {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        self.pods.insert((ns.clone(), name.to_owned()));
        let spec = &pod["spec"];
        let put = |set: &mut HashSet<(String, String)>, v: &Value| {
            if let Some(n) = v.as_str().filter(|n| !n.is_empty()) {
                set.insert((ns.clone(), n.to_owned()));
            }
        };
        pod_secret_names(spec, |n| {
            self.secrets.insert((ns.clone(), n.to_owned()));
        });
        pod_configmap_names(spec, |n| {
            self.configmaps.insert((ns.clone(), n.to_owned()));
        });
        put(&mut self.service_accounts, &spec["serviceAccountName"]);
        for c in arr(&spec["resourceClaims"]) {
            put(&mut self.resource_claims, &c["resourceClaimName"]);
        }
        for c in arr(&pod["status"]["resourceClaimStatuses"]) {
            put(&mut self.resource_claims, &c["resourceClaimName"]);
        }
        for v in arr(&spec["volumes"]) {
            put(&mut self.pvcs, &v["persistentVolumeClaim"]["claimName"]);
            if !v["ephemeral"].is_null()
                && let Some(vol) = v["name"].as_str()
            {
                // `ephemeral.VolumeClaimName`: the claim the ephemeral controller makes.
                self.pvcs.insert((ns.clone(), format!("{name}-{vol}")));
            }
        }
    }
}

/// Calls `f` with each non-empty name at `path` within `v`.
fn name_at<'a>(v: &'a Value, path: &[&str], f: &mut impl FnMut(&'a str)) {
    let mut at = v;
    for k in path {
        at = &at[*k];
    }
    if let Some(n) = at.as_str().filter(|n| !n.is_empty()) {
        f(n);
    }
}

fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(|l| arr(&spec[l]))
}

/// Volume sources whose `secretRef.name` names a Secret (upstream's `VisitPodSecretNames`).
const SECRET_REF_VOLUMES: &[&str] = &[
    "cephfs",
    "cinder",
    "flexVolume",
    "rbd",
    "scaleIO",
    "iscsi",
    "storageos",
];

/// Every Secret name a pod spec references (empty names skipped), as upstream's
/// `VisitPodSecretNames` visits them: pull secrets; each container's `envFrom` and `env`; and
/// each volume's: `azureFile.secretName`, the `secretRef` of the plugins that have one,
/// `projected` sources' `secret`, `secret.secretName`, `csi.nodePublishSecretRef`: what the Node
/// authorizer's graph lets a node read (upstream's NodeRestriction, kube-apiserver's, uses the
/// same visitor for what a node may not create pods to reach).
pub(crate) fn pod_secret_names<'a>(spec: &'a Value, mut f: impl FnMut(&'a str)) {
    for r in arr(&spec["imagePullSecrets"]) {
        name_at(r, &["name"], &mut f);
    }
    for c in containers(spec) {
        for e in arr(&c["envFrom"]) {
            name_at(e, &["secretRef", "name"], &mut f);
        }
        for e in arr(&c["env"]) {
            name_at(e, &["valueFrom", "secretKeyRef", "name"], &mut f);
        }
    }
    for v in arr(&spec["volumes"]) {
        name_at(v, &["azureFile", "secretName"], &mut f);
        for k in SECRET_REF_VOLUMES {
            name_at(v, &[k, "secretRef", "name"], &mut f);
        }
        for s in arr(&v["projected"]["sources"]) {
            name_at(s, &["secret", "name"], &mut f);
        }
        name_at(v, &["secret", "secretName"], &mut f);
        name_at(v, &["csi", "nodePublishSecretRef", "name"], &mut f);
    }
}

/// Every ConfigMap name a pod spec references (empty names skipped), as upstream's
/// `VisitPodConfigmapNames`: each container's `envFrom` and `env`, `projected` sources'
/// `configMap`, and `configMap` volumes.
pub(crate) fn pod_configmap_names<'a>(spec: &'a Value, mut f: impl FnMut(&'a str)) {
    for c in containers(spec) {
        for e in arr(&c["envFrom"]) {
            name_at(e, &["configMapRef", "name"], &mut f);
        }
        for e in arr(&c["env"]) {
            name_at(e, &["valueFrom", "configMapKeyRef", "name"], &mut f);
        }
    }
    for v in arr(&spec["volumes"]) {
        for s in arr(&v["projected"]["sources"]) {
            name_at(s, &["configMap", "name"], &mut f);
        }
        name_at(v, &["configMap", "name"], &mut f);
    }
}

/// Every Secret a PersistentVolume lets its node read, as (namespace, name): upstream's
/// `VisitPVSecretNames` with `kubeletVisible` (`graph.AddPV` adds only those; a CSI volume's
/// controller secrets are not the node's). Where a reference has no namespace, cephfs,
/// flexVolume, rbd, scaleIO, iscsi and azureFile take the claim's (`spec.claimRef`), as
/// persisted volumes did; cinder, storageos and csi take theirs as written.
fn pv_secret_names(pv: &Value, mut f: impl FnMut(String, String)) {
    let spec = &pv["spec"];
    let claim_ns = spec["claimRef"]["namespace"].as_str().unwrap_or_default();
    let mut put = |ns: &Value, name: &Value, fallback: bool| {
        if let Some(n) = name.as_str().filter(|n| !n.is_empty()) {
            let ns = ns.as_str().filter(|n| !n.is_empty() || !fallback);
            f(ns.unwrap_or(claim_ns).to_owned(), n.to_owned());
        }
    };
    let az = &spec["azureFile"];
    put(&az["secretNamespace"], &az["secretName"], true);
    for (k, fallback) in [
        ("cephfs", true),
        ("cinder", false),
        ("flexVolume", true),
        ("rbd", true),
        ("scaleIO", true),
        ("iscsi", true),
        ("storageos", false),
    ] {
        let r = &spec[k]["secretRef"];
        put(&r["namespace"], &r["name"], fallback);
    }
    let csi = &spec["csi"];
    for r in [
        "nodePublishSecretRef",
        "nodeStageSecretRef",
        "nodeExpandSecretRef",
    ] {
        put(&csi[r]["namespace"], &csi[r]["name"], false);
    }
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// The caches the Node authorizer reads relationships from; a missing one means no relationship
/// through it is known (those requests get no opinion).
#[derive(Debug, Default, Clone)]
pub struct NodeCaches {
    /// Pods, with a `spec.nodeName` index.
    pub pods: Option<Cache>,
    /// PersistentVolumeClaims: which volume each referenced claim is bound to.
    pub pvcs: Option<Cache>,
    /// PersistentVolumes: the secrets a referenced claim's volume names.
    pub pvs: Option<Cache>,
    /// VolumeAttachments: the node each is attached to.
    pub volume_attachments: Option<Cache>,
    /// ResourceSlices: the node each belongs to.
    pub resource_slices: Option<Cache>,
}

/// Upstream's static node rules (Kubernetes 1.35 `bootstrappolicy.NodeRules` with its default
/// feature gates: DynamicResourceAllocation on; ClusterTrustBundle and PodCertificateRequest off),
/// as (verbs, groups, resources): for the resources the authorizer does not subdivide.
const NODE_RULES: &[(&[&str], &[&str], &[&str])] = &[
    (&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
    (
        &["create"],
        &["authorization.k8s.io"],
        &["subjectaccessreviews", "localsubjectaccessreviews"],
    ),
    (&["get", "list", "watch"], &[""], &["services"]),
    (&["create", "get", "list", "watch"], &[""], &["nodes"]),
    (&["update", "patch"], &[""], &["nodes/status"]),
    (&["update", "patch"], &[""], &["nodes"]),
    (
        &["create", "update", "patch"],
        &["", "events.k8s.io"],
        &["events"],
    ),
    (&["get", "list", "watch"], &[""], &["pods"]),
    (&["create", "delete"], &[""], &["pods"]),
    (&["update", "patch"], &[""], &["pods/status"]),
    (&["create"], &[""], &["pods/eviction"]),
    (&["get", "list", "watch"], &[""], &["secrets", "configmaps"]),
    (
        &["get"],
        &[""],
        &["persistentvolumeclaims", "persistentvolumes"],
    ),
    (&["get"], &[""], &["endpoints"]),
    (
        &["create", "get", "list", "watch"],
        &["certificates.k8s.io"],
        &["certificatesigningrequests"],
    ),
    (
        &["get", "create", "update", "patch", "delete"],
        &["coordination.k8s.io"],
        &["leases"],
    ),
    (&["get"], &["storage.k8s.io"], &["volumeattachments"]),
    (&["create"], &[""], &["serviceaccounts/token"]),
    (
        &["get", "update", "patch"],
        &[""],
        &["persistentvolumeclaims/status"],
    ),
    (
        &["get", "watch", "list"],
        &["storage.k8s.io"],
        &["csidrivers"],
    ),
    (
        &["get", "create", "update", "patch", "delete"],
        &["storage.k8s.io"],
        &["csinodes"],
    ),
    (
        &["get", "list", "watch"],
        &["node.k8s.io"],
        &["runtimeclasses"],
    ),
    (&["get"], &["resource.k8s.io"], &["resourceclaims"]),
    (
        &["deletecollection"],
        &["resource.k8s.io"],
        &["resourceslices"],
    ),
    // KubeletServiceAccountTokenForCredentialProviders (beta, on in 1.35).
    (&["get"], &[""], &["serviceaccounts"]),
];

/// The static node rules as RBAC rules, made once.
fn node_rules() -> &'static [PolicyRule] {
    static RULES: std::sync::OnceLock<Vec<PolicyRule>> = std::sync::OnceLock::new();
    RULES.get_or_init(|| {
        let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
        NODE_RULES
            .iter()
            .map(|(verbs, groups, resources)| PolicyRule {
                verbs: owned(verbs),
                api_groups: owned(groups),
                resources: owned(resources),
                ..PolicyRule::default()
            })
            .collect()
    })
}

/// What a node's [`RefSet`] was computed from: its pods (key and revision, in the index's key
/// order) and the claims' and volumes' caches' revisions (summed).
#[derive(Debug)]
struct Basis {
    pods: Vec<(Box<str>, u64)>,
    claims: u64,
}

impl Basis {
    fn of(bound: &[Object], claims: u64) -> Basis {
        Basis {
            pods: bound
                .iter()
                .map(|p| (p.key().into(), p.resource_version()))
                .collect(),
            claims,
        }
    }

    /// Whether `bound` (and the claims at `claims`) are what this was computed from.
    fn holds_for(&self, bound: &[Object], claims: u64) -> bool {
        self.claims == claims
            && self.pods.len() == bound.len()
            && self
                .pods
                .iter()
                .zip(bound)
                .all(|((key, rv), p)| *rv == p.resource_version() && **key == *p.key())
    }
}

/// The Node authorizer.
pub struct NodeAuthorizer {
    caches: NodeCaches,
    /// Per node: what the set was computed from, and the set.
    refs: Mutex<HashMap<String, (Basis, Arc<RefSet>)>>,
}

impl std::fmt::Debug for NodeAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAuthorizer")
            .field("pods", &self.caches.pods.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a request gets no opinion, in upstream's words.
fn no(why: impl Into<String>) -> Decision {
    Decision::NoOpinion(why.into())
}

impl NodeAuthorizer {
    /// An authorizer reading relationships from `caches` (without pods, only requests needing
    /// no relationship are allowed).
    pub fn new(caches: NodeCaches) -> NodeAuthorizer {
        NodeAuthorizer {
            caches,
            refs: Mutex::new(HashMap::new()),
        }
    }

    /// What the pods bound to `node` reference now.
    pub fn refs(&self, node: &str) -> Arc<RefSet> {
        let Some(pods) = &self.caches.pods else {
            return Arc::default();
        };
        // Both only grow, so their sum changes whenever either does.
        let claims = [&self.caches.pvcs, &self.caches.pvs]
            .iter()
            .filter_map(|c| c.as_ref())
            .map(Cache::resource_version)
            .fold(0u64, u64::wrapping_add);
        let bound = match pods.lookup("spec.nodeName", node) {
            Ok(bound) => bound,
            // Not ready (or no such index): nothing is known to be referenced.
            Err(e) => {
                tracing::debug!(error = %e, "node references unknown");
                return Arc::default();
            }
        };
        if let Some((basis, set)) = self.refs.lock().get(node)
            && basis.holds_for(&bound, claims)
        {
            return Arc::clone(set);
        }
        let mut set = RefSet::default();
        for p in &bound {
            match serde_json::from_slice::<Value>(&p.json_unkept()) {
                Ok(v) => set.add_pod(&v),
                Err(e) => tracing::debug!(key = p.key(), error = %e, "pod not read"),
            }
        }
        // node <- pod <- pvc <- pv: the volumes the referenced claims are bound to, and the
        // secrets those volumes name (node <- pod <- pvc <- pv <- secret).
        if let Some(pvcs) = &self.caches.pvcs {
            let mut pvs = HashSet::new();
            for (ns, name) in &set.pvcs {
                if let Some(claim) = pvcs.peek(Some(ns), name)
                    && let Ok(v) = serde_json::from_slice::<Value>(&claim.json_unkept())
                    && let Some(pv) = v["spec"]["volumeName"].as_str().filter(|n| !n.is_empty())
                {
                    pvs.insert(pv.to_owned());
                }
            }
            if let Some(cache) = &self.caches.pvs {
                for name in &pvs {
                    if let Some(pv) = cache.peek(None, name)
                        && let Ok(v) = serde_json::from_slice::<Value>(&pv.json_unkept())
                    {
                        pv_secret_names(&v, |ns, n| {
                            set.secrets.insert((ns, n));
                        });
                    }
                }
            }
            set.pvs = pvs;
        }
        let set = Arc::new(set);
        let mut refs = self.refs.lock();
        // Nodes come and go: a stale entry costs a set; bound the map anyway.
        if refs.len() > 100_000 {
            refs.clear();
        }
        refs.insert(
            node.to_owned(),
            (Basis::of(&bound, claims), Arc::clone(&set)),
        );
        set
    }

    /// Whether the cluster-scoped object `name` of `cache` names `node` in `spec.nodeName`
    /// (volumeattachments, resourceslices).
    fn on_node(cache: Option<&Cache>, name: &str, node: &str) -> bool {
        cache.is_some_and(|c| {
            c.peek(None, name)
                .and_then(|o| serde_json::from_slice::<Value>(&o.json_unkept()).ok())
                .is_some_and(|v| v["spec"]["nodeName"].as_str() == Some(node))
        })
    }

    /// Decides for node identities; no opinion for anyone else.
    pub fn authorize(&self, a: &Attributes<'_>) -> Decision {
        let Some(node) = a.user.node_name() else {
            if a.user.in_group(super::user::NODES) && a.user.name == super::user::NODE_PREFIX {
                return no(format!("unknown node for user \"{}\"", a.user.name));
            }
            return no("");
        };
        let verb = a.info.verb.as_str();
        if let Some(r) = &a.info.resource {
            // A list or watch of one object by `metadata.name` names it, as upstream's
            // RequestInfo does.
            let pinned = |field: &str| a.selection.and_then(|s| s.fields.required_value(field));
            let name = if r.name.is_empty() && matches!(verb, "list" | "watch") {
                pinned("metadata.name").unwrap_or_default()
            } else {
                r.name.as_str()
            };
            let sub = r.subresource.as_str();
            let related = |found: bool| {
                if name.is_empty() {
                    no("No Object name found")
                } else if found {
                    Decision::Allow
                } else {
                    no(format!(
                        "no relationship found between node '{node}' and this object"
                    ))
                }
            };
            let key = || (r.namespace.clone(), name.to_owned());
            // authorizeGet: one object, get only, no subresource.
            let get_only = |found: &dyn Fn() -> bool| {
                if verb != "get" {
                    no("can only get individual resources of this type")
                } else if !sub.is_empty() {
                    no("cannot get subresource")
                } else {
                    related(!name.is_empty() && found())
                }
            };
            // authorizeReadNamespacedObject: get, list or watch of one namespaced object.
            let read_one = |found: &dyn Fn() -> bool| {
                if !matches!(verb, "get" | "list" | "watch") {
                    no("can only read resources of this type")
                } else if !sub.is_empty() {
                    no("cannot read subresource")
                } else if r.namespace.is_empty() {
                    no("can only read namespaced object of this type")
                } else {
                    related(!name.is_empty() && found())
                }
            };
            match (r.group.as_str(), r.resource.as_str()) {
                ("", "secrets") => return read_one(&|| self.refs(node).secrets.contains(&key())),
                ("", "configmaps") => {
                    return read_one(&|| self.refs(node).configmaps.contains(&key()));
                }
                ("", "persistentvolumeclaims") if sub == "status" => {
                    return if !matches!(verb, "update" | "patch") {
                        no("can only get/update/patch this type")
                    } else {
                        related(self.refs(node).pvcs.contains(&key()))
                    };
                }
                ("", "persistentvolumeclaims") => {
                    return get_only(&|| self.refs(node).pvcs.contains(&key()));
                }
                ("", "persistentvolumes") => {
                    return get_only(&|| self.refs(node).pvs.contains(name));
                }
                ("resource.k8s.io", "resourceclaims") => {
                    return get_only(&|| self.refs(node).resource_claims.contains(&key()));
                }
                ("storage.k8s.io", "volumeattachments") => {
                    return get_only(&|| {
                        Self::on_node(self.caches.volume_attachments.as_ref(), name, node)
                    });
                }
                ("", "serviceaccounts") if verb == "get" && sub.is_empty() => {
                    return read_one(&|| self.refs(node).service_accounts.contains(&key()));
                }
                ("", "serviceaccounts") => {
                    return if verb != "create" || name.is_empty() {
                        no("can only create tokens for individual service accounts")
                    } else if sub != "token" {
                        no("can only create token subresource of serviceaccount")
                    } else {
                        related(self.refs(node).service_accounts.contains(&key()))
                    };
                }
                ("coordination.k8s.io", "leases") => {
                    return if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
                        no("can only get, create, update, patch, or delete a node lease")
                    } else if r.namespace != "kube-node-lease" {
                        no("can only access leases in the \"kube-node-lease\" system namespace")
                    } else if verb != "create" && name != node {
                        no("can only access node lease with the same name as the requesting node")
                    } else {
                        Decision::Allow
                    };
                }
                ("storage.k8s.io", "csinodes") => {
                    return if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
                        no("can only get, create, update, patch, or delete a CSINode")
                    } else if !sub.is_empty() {
                        no("cannot authorize CSINode subresources")
                    } else if verb != "create" && name != node {
                        no("can only access CSINode with the same name as the requesting node")
                    } else {
                        Decision::Allow
                    };
                }
                ("resource.k8s.io", "resourceslices") => {
                    return if !sub.is_empty() {
                        no("cannot authorize ResourceSlice subresources")
                    } else {
                        match verb {
                            "create" => Decision::Allow,
                            "get" | "update" | "patch" | "delete" => related(Self::on_node(
                                self.caches.resource_slices.as_ref(),
                                name,
                                node,
                            )),
                            "watch" | "list" | "deletecollection" => {
                                if pinned("spec.nodeName") == Some(node) {
                                    Decision::Allow
                                } else {
                                    no(
                                        "can only list/watch/deletecollection resourceslices with nodeName field selector",
                                    )
                                }
                            }
                            _ => no(
                                "only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection",
                            ),
                        }
                    };
                }
                ("", "nodes") => {
                    return match (sub, verb) {
                        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => {
                            Decision::Allow
                        }
                        ("", "get" | "list" | "watch") if name == node => Decision::Allow,
                        ("", "get" | "list" | "watch") if name.is_empty() => no(format!(
                            "node '{node}' cannot read all nodes, only its own Node object"
                        )),
                        ("", "get" | "list" | "watch") => no(format!(
                            "node '{node}' cannot read '{name}', only its own Node object"
                        )),
                        _ => no(""),
                    };
                }
                ("", "pods") => {
                    return match (sub, verb) {
                        ("", "get") => get_only(&|| self.refs(node).pods.contains(&key())),
                        ("", "list" | "watch") if pinned("spec.nodeName") == Some(node) => {
                            Decision::Allow
                        }
                        ("", "list" | "watch") if !name.is_empty() => {
                            related(self.refs(node).pods.contains(&key()))
                        }
                        ("", "list" | "watch") => {
                            no("can only list/watch pods with spec.nodeName field selector")
                        }
                        ("", "create" | "delete")
                        | ("status", "update" | "patch")
                        | ("eviction", "create") => Decision::Allow,
                        _ => no(""),
                    };
                }
                _ => {}
            }
        }
        if node_rules().iter().any(|rule| rule_allows(rule, a)) {
            Decision::Allow
        } else {
            no("")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::attributes::RequestInfo;
    use crate::auth::user::User;
    use serde_json::json;
    use watchcache::Selection;
    use watchcache::{CacheConfig, MemorySource, ResourceDef};

    fn pod(ns: &str, name: &str, node: &str, secret: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": ns, "name": name},
            "spec": {"nodeName": node,
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [{"name": "v", "secret": {"secretName": secret}},
                            {"name": "c", "configMap": {"name": "cm"}},
                            {"name": "p", "persistentVolumeClaim": {"claimName": "data"}},
                            {"name": "pr", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "projcm"}}]}}],
                "containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "envsecret", "key": "k"}}}],
                                "envFrom": [{"configMapRef": {"name": "envcm"}}]}]}})
    }

    #[test]
    fn reference_sets_cover_volumes_env_and_pull_secrets() {
        let mut set = RefSet::default();
        set.add_pod(&pod("a", "p1", "n1", "s1"));
        let has =
            |s: &HashSet<(String, String)>, n: &str| s.contains(&("a".to_owned(), n.to_owned()));
        for n in ["s1", "pull", "proj", "envsecret"] {
            assert!(has(&set.secrets, n), "{n}");
        }
        for n in ["cm", "projcm", "envcm"] {
            assert!(has(&set.configmaps, n), "{n}");
        }
        assert!(has(&set.pvcs, "data"));
        assert!(has(&set.pods, "p1"));
        assert!(!has(&set.secrets, "cm"));
    }

    /// The graph has every volume source upstream's has (`VisitPodSecretNames`, ephemeral
    /// claims, `VisitPVSecretNames` with what the kubelet sees); it lacked the plugins' secret
    /// references, azureFile, ephemeral claims and volumes' secrets before issue 35.
    #[test]
    fn reference_sets_cover_every_volume_source_as_upstreams_graph() {
        let mut set = RefSet::default();
        set.add_pod(&json!({"metadata": {"namespace": "a", "name": "p1"},
            "spec": {"nodeName": "n1", "volumes": [
                {"name": "az", "azureFile": {"secretName": "azs", "shareName": "x"}},
                {"name": "ci", "cinder": {"volumeID": "v", "secretRef": {"name": "cis"}}},
                {"name": "ce", "cephfs": {"monitors": [], "secretRef": {"name": "ces"}}},
                {"name": "fl", "flexVolume": {"driver": "d", "secretRef": {"name": "fls"}}},
                {"name": "rb", "rbd": {"image": "i", "secretRef": {"name": "rbs"}}},
                {"name": "sc", "scaleIO": {"system": "s", "secretRef": {"name": "scs"}}},
                {"name": "is", "iscsi": {"iqn": "q", "secretRef": {"name": "iss"}}},
                {"name": "so", "storageos": {"secretRef": {"name": "sos"}}},
                {"name": "cs", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "css"}}},
                {"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}],
                "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "inits"}}]}],
                "ephemeralContainers": [{"name": "e", "env": [{"name": "E",
                    "valueFrom": {"configMapKeyRef": {"name": "ephcm", "key": "k"}}}]}]}}));
        let has =
            |s: &HashSet<(String, String)>, n: &str| s.contains(&("a".to_owned(), n.to_owned()));
        for n in [
            "azs", "cis", "ces", "fls", "rbs", "scs", "iss", "sos", "css", "inits",
        ] {
            assert!(has(&set.secrets, n), "{n}");
        }
        assert!(has(&set.configmaps, "ephcm"));
        assert!(has(&set.pvcs, "p1-eph"), "{:?}", set.pvcs);
        let mut pv = Vec::new();
        pv_secret_names(
            &json!({"spec": {"claimRef": {"namespace": "a"},
                "csi": {"driver": "d",
                    "nodeStageSecretRef": {"name": "stage", "namespace": "infra"},
                    "controllerPublishSecretRef": {"name": "ctl", "namespace": "infra"}}}}),
            |ns, n| pv.push((ns, n)),
        );
        assert_eq!(pv, [("infra".to_owned(), "stage".to_owned())]);
        pv.clear();
        pv_secret_names(
            &json!({"spec": {"claimRef": {"namespace": "a"}, "rbd": {"image": "i",
                "secretRef": {"name": "r"}}}}),
            |ns, n| pv.push((ns, n)),
        );
        assert_eq!(pv, [("a".to_owned(), "r".to_owned())]);
    }

    /// A node's references are computed again when its own pods change, and only then: a pod
    /// written on another node leaves them as they were (the same set, not re-read).
    #[test]
    fn a_nodes_references_follow_its_own_pods_only() {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = MemorySource::new(writer, 1, []);
        let put = |name: &str, node: &str, secret: &str| {
            src.put(
                &format!("/registry/pods/a/{name}"),
                pod("a", name, node, secret).to_string(),
            )
            .unwrap();
        };
        put("p1", "n1", "s1");
        put("p2", "n2", "s2");
        let authz = NodeAuthorizer::new(NodeCaches {
            pods: Some(cache.clone()),
            ..NodeCaches::default()
        });
        let secret = |n: &str| ("a".to_owned(), n.to_owned());
        let first = authz.refs("n1");
        assert!(first.secrets.contains(&secret("s1")));
        put("p2", "n2", "s9");
        put("p4", "n3", "s8");
        assert!(
            Arc::ptr_eq(&first, &authz.refs("n1")),
            "other nodes' pods changed, not n1's"
        );
        put("p1", "n1", "s3");
        let after = authz.refs("n1");
        assert!(after.secrets.contains(&secret("s3")) && !after.secrets.contains(&secret("s1")));
        put("p3", "n1", "s4");
        assert!(authz.refs("n1").secrets.contains(&secret("s4")));
        src.delete("/registry/pods/a/p1").unwrap();
        src.delete("/registry/pods/a/p3").unwrap();
        let gone = authz.refs("n1");
        assert!(gone.secrets.is_empty() && gone.pods.is_empty(), "{gone:?}");
        // A pod moved onto the node (same key, new revision) is read again.
        put("p2", "n1", "s5");
        assert!(authz.refs("n1").secrets.contains(&secret("s5")));
    }

    #[tokio::test]
    async fn nodes_read_their_own_pods_node_and_referenced_objects_only() {
        let (cache, writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = MemorySource::new(writer, 1, []);
        src.put(
            "/registry/pods/a/p1",
            pod("a", "p1", "n1", "s1").to_string(),
        )
        .unwrap();
        src.put(
            "/registry/pods/a/p2",
            pod("a", "p2", "n2", "s2").to_string(),
        )
        .unwrap();
        let authz = NodeAuthorizer::new(NodeCaches {
            pods: Some(cache.clone()),
            ..NodeCaches::default()
        });
        let n1 = User::authenticated("system:node:n1", "", vec!["system:nodes".into()]);
        let ask = |method: &str, path: &str, watch: bool, sel: Option<&Selection>| {
            let info = RequestInfo::new(method, path, watch);
            authz.authorize(&Attributes {
                user: &n1,
                info: &info,
                selection: sel,
            })
        };
        let own = Selection::parse(None, "spec.nodeName=n1", "").unwrap();
        let other = Selection::parse(None, "spec.nodeName=n2", "").unwrap();
        let all = Selection::all();
        assert_eq!(
            ask("GET", "/api/v1/pods", true, Some(&own)),
            Decision::Allow
        );
        assert_eq!(
            ask("GET", "/api/v1/pods", false, Some(&own)),
            Decision::Allow
        );
        assert!(matches!(
            ask("GET", "/api/v1/pods", true, Some(&other)),
            Decision::NoOpinion(_)
        ));
        assert!(matches!(
            ask("GET", "/api/v1/pods", false, Some(&all)),
            Decision::NoOpinion(_)
        ));
        assert_eq!(
            ask("GET", "/api/v1/namespaces/a/pods/p1", false, None),
            Decision::Allow
        );
        assert!(matches!(
            ask("GET", "/api/v1/namespaces/a/pods/p2", false, None),
            Decision::NoOpinion(_)
        ));
        assert_eq!(
            ask("GET", "/api/v1/namespaces/a/secrets/s1", false, None),
            Decision::Allow
        );
        assert_eq!(
            ask("GET", "/api/v1/namespaces/a/configmaps/cm", false, None),
            Decision::Allow
        );
        assert_eq!(
            ask(
                "GET",
                "/api/v1/namespaces/a/persistentvolumeclaims/data",
                false,
                None
            ),
            Decision::Allow
        );
        let denied = ask("GET", "/api/v1/namespaces/a/secrets/s2", false, None);
        assert_eq!(
            denied,
            Decision::NoOpinion("no relationship found between node 'n1' and this object".into())
        );
        assert!(matches!(
            ask("GET", "/api/v1/namespaces/a/secrets", false, None),
            Decision::NoOpinion(_)
        ));
        assert_eq!(ask("GET", "/api/v1/nodes/n1", false, None), Decision::Allow);
        assert_eq!(
            ask("PATCH", "/api/v1/namespaces/a/pods/p1/status", false, None),
            Decision::Allow
        );
        // As upstream: pod status, mirror pods, deletions and evictions are allowed here and
        // narrowed to the node's own pods by NodeRestriction admission (the API server's, or
        // watchcache's own for the writes it applies itself).
        for (method, path) in [
            ("PATCH", "/api/v1/namespaces/a/pods/p2/status"),
            ("POST", "/api/v1/namespaces/a/pods"),
            ("DELETE", "/api/v1/namespaces/a/pods/p2"),
            ("POST", "/api/v1/namespaces/a/pods/p2/eviction"),
        ] {
            assert_eq!(
                ask(method, path, false, None),
                Decision::Allow,
                "{method} {path}"
            );
        }
        // Static node rules: services, events, runtimeclasses, csidrivers; not other kinds.
        for (method, path) in [
            ("GET", "/api/v1/services"),
            ("POST", "/api/v1/namespaces/a/events"),
            ("GET", "/apis/node.k8s.io/v1/runtimeclasses"),
            ("GET", "/apis/storage.k8s.io/v1/csidrivers"),
            ("POST", "/api/v1/nodes"),
        ] {
            assert_eq!(
                ask(method, path, false, None),
                Decision::Allow,
                "{method} {path}"
            );
        }
        assert!(matches!(
            ask("GET", "/apis/apps/v1/deployments", false, None),
            Decision::NoOpinion(_)
        ));
        // One secret by name through a watch (kubelets watch each referenced secret this way).
        let one = Selection::parse(Some("a"), "metadata.name=s1", "").unwrap();
        assert_eq!(
            ask("GET", "/api/v1/namespaces/a/secrets", true, Some(&one)),
            Decision::Allow
        );
        let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
        assert_eq!(
            ask("PUT", &format!("{lease}/n1"), false, None),
            Decision::Allow
        );
        assert!(matches!(
            ask("PUT", &format!("{lease}/n2"), false, None),
            Decision::NoOpinion(_)
        ));
        assert!(matches!(
            ask("GET", lease, false, None),
            Decision::NoOpinion(_)
        ));
        assert_eq!(
            ask("PATCH", "/api/v1/nodes/n1/status", false, None),
            Decision::Allow
        );
        assert_eq!(
            ask("GET", "/api/v1/nodes/n2", false, None),
            Decision::NoOpinion("node 'n1' cannot read 'n2', only its own Node object".into())
        );
        assert_eq!(
            ask("GET", "/api/v1/nodes", false, Some(&all)),
            Decision::NoOpinion("node 'n1' cannot read all nodes, only its own Node object".into())
        );
        assert_eq!(
            ask("GET", "/api/v1/namespaces/a/pods/p1", true, None),
            Decision::Allow
        );
        assert!(matches!(
            ask("GET", "/api/v1/namespaces/a/pods/p2", true, None),
            Decision::NoOpinion(_)
        ));
        let by_name = Selection::parse(None, "metadata.name=n1", "").unwrap();
        assert_eq!(
            ask("GET", "/api/v1/nodes", true, Some(&by_name)),
            Decision::Allow
        );
        // The pod moves: the reference set follows the cache.
        src.delete("/registry/pods/a/p1").unwrap();
        assert!(matches!(
            ask("GET", "/api/v1/namespaces/a/secrets/s1", false, None),
            Decision::NoOpinion(_)
        ));
        // Not a node: no opinion.
        let info = RequestInfo::new("GET", "/api/v1/namespaces/a/secrets/s1", false);
        let alice = User::authenticated("alice", "", vec![]);
        assert!(matches!(
            authz.authorize(&Attributes {
                user: &alice,
                info: &info,
                selection: None
            }),
            Decision::NoOpinion(_)
        ));
    }
}

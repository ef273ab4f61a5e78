//! The Node authorizer: what a kubelet (`system:node:<name>` in `system:nodes`) may read, decided
//! from the cache's own indexes instead of upstream's graph.
//!
//! - pods: list and watch only with a field selector pinning `spec.nodeName` to its own name
//!   (read from the request's already-parsed selection); get, watch by name, delete and status
//!   updates of a pod bound to it;
//! - its Lease in `kube-node-lease` (heartbeats);
//! - its own Node: get, list and watch (by name or with `metadata.name` pinned), and updates of
//!   its status;
//! - get of the secrets, configmaps and persistentvolumeclaims the pods bound to it reference.
//!
//! Everything else is "no opinion", so the next mode (RBAC) decides, as upstream's `Node,RBAC`.
//!
//! The references of a node's pods ([`RefSet`]) are computed from the pods cache's
//! `spec.nodeName` index (the node's pods only, never a walk over all pods) and remembered per
//! node until the pods cache's revision moves. Lock order: `refs` only, never across an await.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use crate::cache::Cache;

use super::attributes::{Attributes, Decision};

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
}

impl RefSet {
    /// Adds what one pod (its JSON) references.
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
        for s in arr(&spec["imagePullSecrets"]) {
            put(&mut self.secrets, &s["name"]);
        }
        for v in arr(&spec["volumes"]) {
            put(&mut self.secrets, &v["secret"]["secretName"]);
            put(&mut self.configmaps, &v["configMap"]["name"]);
            put(&mut self.pvcs, &v["persistentVolumeClaim"]["claimName"]);
            // CSI and other plugins' secret references.
            put(&mut self.secrets, &v["csi"]["nodePublishSecretRef"]["name"]);
            for src in arr(&v["projected"]["sources"]) {
                put(&mut self.secrets, &src["secret"]["name"]);
                put(&mut self.configmaps, &src["configMap"]["name"]);
            }
        }
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            for c in arr(&spec[list]) {
                for e in arr(&c["env"]) {
                    put(&mut self.secrets, &e["valueFrom"]["secretKeyRef"]["name"]);
                    put(
                        &mut self.configmaps,
                        &e["valueFrom"]["configMapKeyRef"]["name"],
                    );
                }
                for e in arr(&c["envFrom"]) {
                    put(&mut self.secrets, &e["secretRef"]["name"]);
                    put(&mut self.configmaps, &e["configMapRef"]["name"]);
                }
            }
        }
    }
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// The Node authorizer.
pub struct NodeAuthorizer {
    pods: Option<Cache>,
    /// Per node: the pods cache's revision the set was computed at, and the set.
    refs: Mutex<HashMap<String, (u64, Arc<RefSet>)>>,
}

impl std::fmt::Debug for NodeAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAuthorizer")
            .field("pods", &self.pods.is_some())
            .finish_non_exhaustive()
    }
}

impl NodeAuthorizer {
    /// An authorizer reading pods from `pods` (without it, only the node's own Node and pods
    /// by field selector are allowed).
    pub fn new(pods: Option<Cache>) -> NodeAuthorizer {
        NodeAuthorizer {
            pods,
            refs: Mutex::new(HashMap::new()),
        }
    }

    /// What the pods bound to `node` reference now.
    pub fn refs(&self, node: &str) -> Arc<RefSet> {
        let Some(pods) = &self.pods else {
            return Arc::default();
        };
        let rv = pods.resource_version();
        if let Some((at, set)) = self.refs.lock().get(node)
            && *at == rv
        {
            return Arc::clone(set);
        }
        let mut set = RefSet::default();
        match pods.lookup("spec.nodeName", node) {
            Ok(bound) => {
                for p in bound {
                    match serde_json::from_slice::<Value>(p.json()) {
                        Ok(v) => set.add_pod(&v),
                        Err(e) => tracing::debug!(key = p.key(), error = %e, "pod not read"),
                    }
                }
            }
            // Not ready (or no such index): nothing is known to be referenced.
            Err(e) => {
                tracing::debug!(error = %e, "node references unknown");
                return Arc::default();
            }
        }
        let set = Arc::new(set);
        let mut refs = self.refs.lock();
        // Nodes come and go: a stale entry costs a set; bound the map anyway.
        if refs.len() > 100_000 {
            refs.clear();
        }
        refs.insert(node.to_owned(), (rv, Arc::clone(&set)));
        set
    }

    /// Decides for node identities; no opinion for anyone else.
    pub fn authorize(&self, a: &Attributes<'_>) -> Decision {
        let Some(node) = a.user.node_name() else {
            return Decision::NoOpinion(String::new());
        };
        let Some(r) = &a.info.resource else {
            return Decision::NoOpinion(String::new());
        };
        let verb = a.info.verb.as_str();
        // Its heartbeat: the Lease named after it in kube-node-lease (upstream's node lease rule).
        if r.group == "coordination.k8s.io" && r.resource == "leases" && r.subresource.is_empty() {
            return if r.namespace == "kube-node-lease"
                && r.name == node
                && matches!(verb, "get" | "create" | "update" | "patch" | "delete")
            {
                Decision::Allow
            } else {
                Decision::NoOpinion(String::new())
            };
        }
        if !r.group.is_empty() {
            return Decision::NoOpinion(String::new());
        }
        let read = matches!(verb, "get" | "list" | "watch");
        let pinned = |field: &str| {
            a.selection
                .and_then(|s| s.fields.required_value(field))
                .is_some_and(|v| v == node)
        };
        let no_relationship = || {
            Decision::NoOpinion(format!(
                "no relationship found between node '{node}' and this object"
            ))
        };
        match (r.resource.as_str(), r.subresource.as_str()) {
            ("pods", "") if (verb == "list" || verb == "watch") && r.name.is_empty() => {
                if pinned("spec.nodeName") {
                    Decision::Allow
                } else {
                    Decision::NoOpinion(
                        "can only list/watch pods with spec.nodeName field selector".into(),
                    )
                }
            }
            // One pod by name (a get, a watch on its path, a delete; its status written): one
            // bound to the node. (Creating mirror pods needs upstream's NodeRestriction
            // admission, which is not here: no opinion.)
            ("pods", "") | ("pods", "status")
                if matches!(
                    (r.subresource.as_str(), verb),
                    ("", "get" | "list" | "watch" | "delete")
                        | ("status", "get" | "update" | "patch")
                ) =>
            {
                if self
                    .refs(node)
                    .pods
                    .contains(&(r.namespace.clone(), r.name.clone()))
                {
                    Decision::Allow
                } else {
                    no_relationship()
                }
            }
            ("nodes", "") if read => {
                if r.name == node || (r.name.is_empty() && pinned("metadata.name")) {
                    Decision::Allow
                } else if r.name.is_empty() {
                    Decision::NoOpinion(format!(
                        "node '{node}' cannot read all nodes, only its own Node object"
                    ))
                } else {
                    Decision::NoOpinion(format!(
                        "node '{node}' cannot read '{}', only its own Node object",
                        r.name
                    ))
                }
            }
            ("nodes", "status") if matches!(verb, "get" | "update" | "patch") && r.name == node => {
                Decision::Allow
            }
            (kind @ ("secrets" | "configmaps" | "persistentvolumeclaims"), "") if verb == "get" => {
                let refs = self.refs(node);
                let set = match kind {
                    "secrets" => &refs.secrets,
                    "configmaps" => &refs.configmaps,
                    _ => &refs.pvcs,
                };
                if set.contains(&(r.namespace.clone(), r.name.clone())) {
                    Decision::Allow
                } else {
                    no_relationship()
                }
            }
            _ => Decision::NoOpinion(String::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Selection;
    use crate::server::auth::attributes::RequestInfo;
    use crate::server::auth::user::User;
    use crate::{CacheConfig, MemorySource, ResourceDef};
    use serde_json::json;

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

    #[tokio::test]
    async fn nodes_read_their_own_pods_node_and_referenced_objects_only() {
        let cache = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        let src = MemorySource::new(cache.clone(), 1, []);
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
        let authz = NodeAuthorizer::new(Some(cache.clone()));
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
        assert!(matches!(
            ask("PATCH", "/api/v1/namespaces/a/pods/p2/status", false, None),
            Decision::NoOpinion(_)
        ));
        assert!(matches!(
            ask("POST", "/api/v1/namespaces/a/pods", false, None),
            Decision::NoOpinion(_)
        ));
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

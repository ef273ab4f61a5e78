//! NodeRestriction admission, for the writes this server applies itself: what a kubelet
//! (`system:node:<name>` in `system:nodes`) may write, as kube-apiserver's plugin
//! (plugin/pkg/admission/noderestriction, 1.35) narrows what the Node authorizer allowed. Writes
//! forwarded to kube-apiserver (proxy mode, `--apiserver-kubeconfig`) are narrowed there.
//!
//! - pods: create only mirror pods bound to itself, owned by its own Node (uid checked), that
//!   reference no API object (service account, secrets, configmaps, claims, CSI, PVCs); delete
//!   and update the status only of pods bound to itself, without changing their labels;
//! - nodes: write only its own Node; on create no `configSource` and no restricted labels; on
//!   update no new `configSource`, and its taints, owner references and restricted labels as they
//!   were;
//! - leases in `kube-node-lease` and CSINodes: only the ones named after itself.
//!
//! Refusals are 403 `<resource> "<name>" is forbidden: <reason>`, upstream's words.

use serde_json::{Map, Value};

use crate::model::ResourceDef;
use crate::server::auth::node::{pod_configmap_names, pod_secret_names};
use crate::server::auth::{RequestInfo, User};
use crate::server::status::ApiError;

/// The mirror pod annotation (`api.MirrorPodAnnotationKey`).
pub(crate) const MIRROR: &str = "kubernetes.io/config.mirror";

/// Labels a kubelet may set on its own Node (k8s.io/kubelet `kubeletLabels`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// Label namespaces a kubelet may set (`kubeletLabelNamespaces`).
const KUBELET_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

fn within(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|head| head.ends_with('.'))
}

/// Labels among `changed` a kubelet may not add, remove or modify (`getForbiddenLabels`), sorted.
fn forbidden_labels<'a>(changed: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = changed
        .into_iter()
        .filter(|label| {
            let ns = label_namespace(label);
            let kubelet =
                KUBELET_LABELS.contains(label) || KUBELET_NAMESPACES.iter().any(|k| within(ns, k));
            within(ns, "node-restriction.kubernetes.io")
                || ((within(ns, "kubernetes.io") || within(ns, "k8s.io")) && !kubelet)
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn labels(obj: Option<&Map<String, Value>>) -> Map<String, Value> {
    obj.and_then(|o| o.get("metadata")?.get("labels")?.as_object().cloned())
        .unwrap_or_default()
}

/// The label keys whose values differ between `a` and `b` (either side missing included).
fn changed_labels<'a>(a: &'a Map<String, Value>, b: &'a Map<String, Value>) -> Vec<&'a str> {
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .chain(b.iter().filter(|(k, v)| a.get(*k) != Some(*v)))
        .map(|(k, _)| k.as_str())
        .collect()
}

fn field<'a>(obj: &'a Map<String, Value>, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    rest.iter()
        .try_fold(obj.get(*first)?, |v, k| v.get(*k))
        .filter(|v| !v.is_null())
}

fn name_of(obj: &Map<String, Value>) -> String {
    field(obj, &["metadata", "name"])
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Equal as upstream's semantic equality sees it: absent, `null` and empty lists or maps alike.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    let norm = |v: Option<&Value>| {
        v.filter(|v| match v {
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            _ => true,
        })
        .cloned()
    };
    norm(a) == norm(b)
}

fn arr(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Whether a pod names any Secret (`VisitPodSecretNames`, shared with the Node authorizer).
fn references_secrets(spec: &Value) -> bool {
    let mut any = false;
    pod_secret_names(spec, |_| any = true);
    any
}

/// Whether a pod names any ConfigMap (`VisitPodConfigmapNames`, shared likewise).
fn references_configmaps(spec: &Value) -> bool {
    let mut any = false;
    pod_configmap_names(spec, |_| any = true);
    any
}

/// Volume sources that need nothing from the API (upstream's list in `HasAPIObjectReference`).
const LOCAL_VOLUMES: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "cephfs",
    "cinder",
    "downwardAPI",
    "emptyDir",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "hostPath",
    "image",
    "iscsi",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

/// The first API object a pod references, as upstream's `HasAPIObjectReference` names it, or
/// upstream's error for a volume (or projection) of a kind it does not know: a node may create
/// only pods that need nothing from the API, so what is not known to need nothing is refused.
fn api_reference(pod: &Map<String, Value>) -> Result<Option<&'static str>, String> {
    let Some(spec) = pod.get("spec") else {
        return Ok(None);
    };
    if spec["serviceAccountName"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        return Ok(Some("serviceaccounts"));
    }
    if references_secrets(spec) {
        return Ok(Some("secrets"));
    }
    if references_configmaps(spec) {
        return Ok(Some("configmaps"));
    }
    if !arr(spec.get("resourceClaims")).is_empty() {
        return Ok(Some("resourceclaims"));
    }
    for v in arr(spec.get("volumes")) {
        let vname = v["name"].as_str().unwrap_or_default();
        let has = |k: &str| v.get(k).is_some_and(|s| !s.is_null());
        if LOCAL_VOLUMES.iter().any(|k| has(k)) {
            continue;
        }
        let what = [
            ("configMap", "configmaps (via configmap volumes)"),
            ("secret", "secrets (via secret volumes)"),
            ("csi", "csidrivers (via CSI volumes)"),
            ("glusterfs", "endpoints (via glusterFS volumes)"),
            ("persistentVolumeClaim", "persistentvolumeclaims"),
            (
                "ephemeral",
                "persistentvolumeclaims (via ephemeral volumes)",
            ),
            ("azureFile", "secrets (via azureFile volumes)"),
        ]
        .iter()
        .find(|(k, _)| has(k));
        if let Some((_, what)) = what {
            return Ok(Some(what));
        }
        if !has("projected") {
            return Err(format!("unknown volume type for volume  {vname:?}"));
        }
        for s in arr(v["projected"].get("sources")) {
            let has = |k: &str| s.get(k).is_some_and(|s| !s.is_null());
            let what = [
                ("configMap", "configmaps (via projected volumes)"),
                ("secret", "secrets (via projected volumes)"),
                (
                    "serviceAccountToken",
                    "serviceaccounts (via projected volumes)",
                ),
                ("clusterTrustBundle", "clustertrustbundles"),
                ("podCertificate", "podcertificates"),
            ]
            .iter()
            .find(|(k, _)| has(k));
            if let Some((_, what)) = what {
                return Ok(Some(what));
            }
            if !has("downwardAPI") {
                return Err(format!("unknown source for projected volume {vname:?}"));
            }
        }
    }
    Ok(None)
}

/// The write of `obj` (over `old`, for an update) by `user`, when that user is a node. `node_uid`
/// gives the uid of the node's own Node object (a mirror pod's owner), when it exists.
///
/// # Errors
/// 403 with upstream's reason.
pub(crate) fn admit(
    user: &User,
    info: &RequestInfo,
    def: &ResourceDef,
    obj: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
    node_uid: impl FnOnce() -> Option<String>,
) -> Result<(), ApiError> {
    let Some(node) = user.node_name() else {
        return Ok(());
    };
    let Some(r) = &info.resource else {
        return Ok(());
    };
    let name = if r.name.is_empty() {
        name_of(obj)
    } else {
        r.name.clone()
    };
    let forbid = |why: String| {
        Err(ApiError::forbidden(
            format!("{} \"{name}\" is forbidden: {why}", qualified(def)),
            def.group.clone(),
            def.plural.clone(),
            name.clone(),
        ))
    };
    match (
        def.group.as_str(),
        def.plural.as_str(),
        r.subresource.as_str(),
    ) {
        ("", "pods", "") if old.is_none() => {
            let annotations = field(obj, &["metadata", "annotations"]).and_then(Value::as_object);
            if !annotations.is_some_and(|a| a.contains_key(MIRROR)) {
                return forbid(format!(
                    "pod does not have \"{MIRROR}\" annotation, node \"{node}\" can only create mirror pods"
                ));
            }
            if field(obj, &["spec", "nodeName"]).and_then(Value::as_str) != Some(node) {
                return forbid(format!(
                    "node \"{node}\" can only create pods with spec.nodeName set to itself"
                ));
            }
            let owners = arr(field(obj, &["metadata", "ownerReferences"]));
            let [owner] = owners else {
                return forbid(if owners.is_empty() {
                    format!(
                        "node \"{node}\" can only create pods with an owner reference set to itself"
                    )
                } else {
                    format!(
                        "node \"{node}\" can only create pods with a single owner reference set to itself"
                    )
                });
            };
            if owner["apiVersion"] != "v1" || owner["kind"] != "Node" || owner["name"] != node {
                return forbid(format!(
                    "node \"{node}\" can only create pods with an owner reference set to itself"
                ));
            }
            if owner["controller"] != true {
                return forbid(format!(
                    "node \"{node}\" can only create pods with a controller owner reference set to itself"
                ));
            }
            if owner["blockOwnerDeletion"] == true {
                return forbid(format!(
                    "node \"{node}\" must not set blockOwnerDeletion on an owner reference"
                ));
            }
            let uid = owner["uid"].as_str().unwrap_or_default();
            match node_uid() {
                Some(want) if want == uid => {}
                Some(want) => {
                    return forbid(format!(
                        "node {node} UID mismatch: expected {uid} got {want}"
                    ));
                }
                None => {
                    return forbid(format!(
                        "error looking up node {node} to verify uid: nodes \"{node}\" not found"
                    ));
                }
            }
            match api_reference(obj) {
                Ok(None) => {}
                Ok(Some(what)) => {
                    return forbid(format!(
                        "node \"{node}\" can not create pods that reference {what}"
                    ));
                }
                Err(why) => return forbid(why),
            }
            Ok(())
        }
        ("", "pods", "") => forbid(format!(
            "unexpected operation \"UPDATE\", node \"{node}\" can only create and delete mirror pods"
        )),
        ("", "pods", "status") => {
            let bound = old
                .and_then(|o| field(o, &["spec", "nodeName"]))
                .and_then(Value::as_str);
            if bound != Some(node) {
                return forbid(format!(
                    "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                ));
            }
            if labels(Some(obj)) != labels(old) {
                return forbid(format!(
                    "node \"{node}\" cannot update labels through pod status"
                ));
            }
            if !same(
                field(obj, &["status", "resourceClaimStatuses"]),
                old.and_then(|o| field(o, &["status", "resourceClaimStatuses"])),
            ) {
                return forbid(format!(
                    "node \"{node}\" cannot update resource claim statues"
                ));
            }
            Ok(())
        }
        ("", "nodes", _) => {
            if name != node {
                return forbid(format!(
                    "node \"{node}\" is not allowed to modify node \"{name}\""
                ));
            }
            let config = field(obj, &["spec", "configSource"]);
            let (new_labels, old_labels) = (labels(Some(obj)), labels(old));
            match old {
                None => {
                    if config.is_some() {
                        return forbid(format!(
                            "node \"{node}\" is not allowed to create pods with a non-nil configSource"
                        ));
                    }
                    let bad = forbidden_labels(new_labels.keys().map(String::as_str));
                    if !bad.is_empty() {
                        return forbid(format!(
                            "node \"{node}\" is not allowed to set the following labels: {}",
                            bad.join(", ")
                        ));
                    }
                }
                Some(old) => {
                    if config.is_some() && !same(config, field(old, &["spec", "configSource"])) {
                        return forbid(format!(
                            "node \"{node}\" is not allowed to update configSource to a new non-nil configSource"
                        ));
                    }
                    if !same(
                        field(obj, &["spec", "taints"]),
                        field(old, &["spec", "taints"]),
                    ) {
                        return forbid(format!("node \"{node}\" is not allowed to modify taints"));
                    }
                    if !same(
                        field(obj, &["metadata", "ownerReferences"]),
                        field(old, &["metadata", "ownerReferences"]),
                    ) {
                        return forbid(format!(
                            "node \"{node}\" is not allowed to modify ownerReferences"
                        ));
                    }
                    let bad = forbidden_labels(changed_labels(&new_labels, &old_labels));
                    if !bad.is_empty() {
                        return forbid(format!(
                            "is not allowed to modify labels: {}",
                            bad.join(", ")
                        ));
                    }
                }
            }
            Ok(())
        }
        ("coordination.k8s.io", "leases", _) => {
            if r.namespace != "kube-node-lease" {
                forbid("can only access leases in the \"kube-node-lease\" system namespace".into())
            } else if name != node {
                forbid(
                    "can only access node lease with the same name as the requesting node".into(),
                )
            } else {
                Ok(())
            }
        }
        ("storage.k8s.io", "csinodes", _) if name != node => {
            forbid("can only access CSINode with the same name as the requesting node".into())
        }
        _ => Ok(()),
    }
}

/// A node's DELETE of a pod (`bound`: the pod's `spec.nodeName`).
///
/// # Errors
/// 403 unless the pod is bound to the node.
pub(crate) fn admit_pod_delete(
    user: &User,
    def: &ResourceDef,
    name: &str,
    bound: Option<&str>,
) -> Result<(), ApiError> {
    match user.node_name() {
        Some(node) if def.group.is_empty() && def.plural == "pods" && bound != Some(node) => {
            Err(ApiError::forbidden(
                format!(
                    "pods \"{name}\" is forbidden: node \"{node}\" can only delete pods with spec.nodeName set to itself"
                ),
                String::new(),
                "pods".into(),
                name.to_owned(),
            ))
        }
        _ => Ok(()),
    }
}

fn qualified(def: &ResourceDef) -> String {
    if def.group.is_empty() {
        def.plural.clone()
    } else {
        format!("{}.{}", def.plural, def.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> User {
        User::authenticated("system:node:n1", "", vec!["system:nodes".into()])
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn pods() -> ResourceDef {
        ResourceDef::builtin("pods").unwrap()
    }

    fn mirror(extra: Value) -> Map<String, Value> {
        let mut p = json!({"metadata": {"name": "static-n1", "namespace": "kube-system",
            "annotations": {MIRROR: "hash"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}});
        if let (Some(p), Some(extra)) = (p["spec"].as_object_mut(), extra.as_object()) {
            p.extend(extra.clone());
        }
        obj(p)
    }

    fn create(user: &User, def: &ResourceDef, o: &Map<String, Value>) -> Result<(), ApiError> {
        let path = format!("/api/v1/namespaces/kube-system/{}", def.plural);
        let info = RequestInfo::new("POST", &path, false);
        admit(user, &info, def, o, None, || Some("u1".into()))
    }

    fn reason(r: Result<(), ApiError>) -> String {
        r.unwrap_err().message().to_owned()
    }

    #[test]
    fn nodes_create_only_their_own_mirror_pods_that_reference_nothing() {
        let n = node();
        assert!(create(&n, &pods(), &mirror(json!({}))).is_ok());
        let mut plain = mirror(json!({}));
        plain["metadata"]["annotations"] = json!({});
        assert_eq!(
            reason(create(&n, &pods(), &plain)),
            "pods \"static-n1\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
        );
        assert!(
            reason(create(&n, &pods(), &mirror(json!({"nodeName": "n2"}))))
                .ends_with("node \"n1\" can only create pods with spec.nodeName set to itself")
        );
        assert!(
            reason(create(
                &n,
                &pods(),
                &mirror(json!({"serviceAccountName": "default"}))
            ))
            .ends_with("node \"n1\" can not create pods that reference serviceaccounts")
        );
        assert!(
            reason(create(
                &n,
                &pods(),
                &mirror(json!({"volumes": [{"name": "s", "secret": {"secretName": "x"}}]}))
            ))
            .ends_with("can not create pods that reference secrets")
        );
        let info = RequestInfo::new("POST", "/api/v1/namespaces/kube-system/pods", false);
        let wrong_uid = admit(&n, &info, &pods(), &mirror(json!({})), None, || {
            Some("other".into())
        });
        assert!(reason(wrong_uid).ends_with("node n1 UID mismatch: expected u1 got other"));
        // Anyone else is not restricted here.
        let alice = User::authenticated("alice", "", vec![]);
        assert!(create(&alice, &pods(), &plain).is_ok());
    }

    /// Issue 35, A-MIRROR: node-1 created a mirror pod whose projected volume named a Secret and
    /// a ConfigMap (201), and the Node authorizer then let it read both. Every reference
    /// upstream's `HasAPIObjectReference` refuses is refused, with its words.
    #[test]
    fn mirror_pods_that_reference_anything_from_the_api_are_refused_as_upstream() {
        let n = node();
        let refused = |spec: Value| reason(create(&n, &pods(), &mirror(spec)));
        let vol = |v: Value| json!({"volumes": [v]});
        let cases = [
            (
                vol(json!({"name": "p", "projected": {"sources": [{"secret": {"name": "s"}}]}})),
                "reference secrets",
            ),
            (
                vol(json!({"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}]}})),
                "reference configmaps",
            ),
            (
                vol(json!({"name": "p", "projected": {"sources": [
                    {"downwardAPI": {"items": []}},
                    {"serviceAccountToken": {"path": "t"}}]}})),
                "reference serviceaccounts (via projected volumes)",
            ),
            (
                vol(
                    json!({"name": "p", "projected": {"sources": [{"clusterTrustBundle": {"path": "b"}}]}}),
                ),
                "reference clustertrustbundles",
            ),
            (
                vol(
                    json!({"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s"}}}),
                ),
                "reference secrets",
            ),
            (
                vol(json!({"name": "c", "csi": {"driver": "d"}})),
                "reference csidrivers (via CSI volumes)",
            ),
            (
                vol(json!({"name": "c", "cinder": {"volumeID": "v", "secretRef": {"name": "s"}}})),
                "reference secrets",
            ),
            (
                vol(json!({"name": "c", "configMap": {"name": "c"}})),
                "reference configmaps",
            ),
            (
                vol(json!({"name": "v", "persistentVolumeClaim": {"claimName": "c"}})),
                "reference persistentvolumeclaims",
            ),
            (
                vol(json!({"name": "v", "ephemeral": {"volumeClaimTemplate": {}}})),
                "reference persistentvolumeclaims (via ephemeral volumes)",
            ),
            (
                json!({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "c"}}]}]}),
                "reference configmaps",
            ),
            (
                json!({"ephemeralContainers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}),
                "reference secrets",
            ),
            (
                json!({"imagePullSecrets": [{"name": "pull"}]}),
                "reference secrets",
            ),
            (
                json!({"resourceClaims": [{"name": "r"}]}),
                "reference resourceclaims",
            ),
            (
                vol(json!({"name": "x", "somethingNew": {}})),
                "unknown volume type for volume  \"x\"",
            ),
            (
                vol(json!({"name": "x", "projected": {"sources": [{"somethingNew": {}}]}})),
                "unknown source for projected volume \"x\"",
            ),
        ];
        for (spec, want) in cases {
            let got = refused(spec.clone());
            assert!(got.ends_with(want), "{spec}: {got}");
        }
        // What needs nothing from the API is still allowed.
        for spec in [
            vol(json!({"name": "h", "hostPath": {"path": "/etc/kubernetes"}})),
            vol(json!({"name": "p", "projected": {"sources": [{"downwardAPI": {"items": []}}]}})),
            vol(json!({"name": "e", "emptyDir": {}})),
            // An empty name references nothing (upstream's skipEmptyNames).
            json!({"imagePullSecrets": [{"name": ""}]}),
        ] {
            assert!(create(&n, &pods(), &mirror(spec.clone())).is_ok(), "{spec}");
        }
    }

    #[test]
    fn pod_status_and_deletion_only_for_pods_bound_to_the_node() {
        let n = node();
        let info = RequestInfo::new("PATCH", "/api/v1/namespaces/a/pods/p/status", false);
        let bound = obj(
            json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"nodeName": "n1"}}),
        );
        let other = obj(json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n2"}}));
        assert!(admit(&n, &info, &pods(), &bound, Some(&bound), || None).is_ok());
        assert!(
            reason(admit(&n, &info, &pods(), &other, Some(&other), || None))
                .ends_with("can only update pod status for pods with spec.nodeName set to itself")
        );
        let relabelled = obj(
            json!({"metadata": {"name": "p", "labels": {"a": "2"}}, "spec": {"nodeName": "n1"}}),
        );
        assert!(
            reason(admit(&n, &info, &pods(), &relabelled, Some(&bound), || {
                None
            }))
            .ends_with("node \"n1\" cannot update labels through pod status")
        );
        assert!(admit_pod_delete(&n, &pods(), "p", Some("n1")).is_ok());
        assert_eq!(
            reason(admit_pod_delete(&n, &pods(), "p", Some("n2"))),
            "pods \"p\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself"
        );
    }

    #[test]
    fn nodes_write_only_their_own_node_and_no_restricted_labels_or_taints() {
        let n = node();
        let nodes = ResourceDef::builtin("nodes").unwrap();
        let info = RequestInfo::new("POST", "/api/v1/nodes", false);
        let own = obj(
            json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "node.kubernetes.io/instance-type": "x", "team": "a"}}}),
        );
        assert!(admit(&n, &info, &nodes, &own, None, || None).is_ok());
        let other = obj(json!({"metadata": {"name": "n2"}}));
        assert!(
            reason(admit(&n, &info, &nodes, &other, None, || None))
                .ends_with("node \"n1\" is not allowed to modify node \"n2\"")
        );
        let steering = obj(
            json!({"metadata": {"name": "n1", "labels": {"node-restriction.kubernetes.io/pci": "yes", "kubernetes.io/role": "master"}}}),
        );
        assert_eq!(
            reason(admit(&n, &info, &nodes, &steering, None, || None)),
            "nodes \"n1\" is forbidden: node \"n1\" is not allowed to set the following labels: kubernetes.io/role, node-restriction.kubernetes.io/pci"
        );
        let info = RequestInfo::new("PUT", "/api/v1/nodes/n1", false);
        let tainted = obj(
            json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "node.kubernetes.io/instance-type": "x", "team": "a"}}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
        );
        assert!(
            reason(admit(&n, &info, &nodes, &tainted, Some(&own), || None))
                .ends_with("node \"n1\" is not allowed to modify taints")
        );
    }
}

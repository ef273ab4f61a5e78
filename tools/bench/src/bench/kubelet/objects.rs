//! What the kubelet model puts in etcd before the servers start, in the JSON storage form both
//! servers decode (kube-apiserver's storage decoder recognizes JSON as well as its `k8s\0`
//! protobuf envelope), and the watches each simulated node opens.
//!
//! Per node N (namespace `bench-{N % 16}`): Node `node-N`, Lease `node-N` in `kube-node-lease`, a
//! pod `static-N` bound to it that never changes and references its ConfigMaps `cm-N-k` and
//! Secrets `sec-N-k` (volumes) and `kube-root-ca.crt` (a projected volume): the Node authorizer
//! lets a node read only what a pod bound to it references. Shared: the namespaces, Services,
//! Endpoints, EndpointSlices, a NetworkPolicy, a RuntimeClass, a CSIDriver, the ClusterRole and
//! binding that give `system:nodes` what kube-proxy's role gives it (endpoints, endpointslices,
//! namespaces, networkpolicies), and, for the label-routed path, listing pods in the bench
//! namespaces (RoleBindings, not a ClusterRoleBinding: a node still may not list pods across the
//! cluster, so its watch of another node's pods stays 403).

use etcd_client::{Client, Txn, TxnOp};
use indicatif::ProgressBar;

use crate::bench::pods;

/// Namespaces of the bench's pods (as `pods::key`).
pub(super) const NAMESPACES: usize = 16;
/// Services (and their Endpoints and EndpointSlices) in `bench-0`.
const SERVICES: usize = 10;

/// Which stream a watch is, for the verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Path {
    /// `fieldSelector=spec.nodeName=node-N`: upstream's one trigger.
    NodePods,
    /// `labelSelector=app=app-N` in namespace `bench-{N % 16}`: each churned pod carries
    /// `app=app-{id % nodes}` and lives in `bench-{id % 16}`.
    LabelPods,
    /// Everything else a kubelet and kube-proxy watch: opened, authorized, idle during the churn.
    Other,
}

/// One watch of node `n`: its path (with query, without the resourceVersion) and what it is.
pub(super) struct Watch {
    pub path: String,
    pub what: Path,
}

/// The ConfigMap watches among the first `count` of [`watches`] other than `kube-root-ca.crt`:
/// how many ConfigMaps each node's static pod references.
pub(super) fn configmaps_per_node(count: usize) -> usize {
    kinds(count).filter(|k| *k == Kind::ConfigMap).count()
}

fn secrets_per_node(count: usize) -> usize {
    kinds(count).filter(|k| *k == Kind::Secret).count()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NodePods,
    LabelPods,
    Node,
    RootCa,
    ConfigMap,
    Secret,
    Services,
    RuntimeClasses,
    CsiDrivers,
    EndpointSlices,
    Endpoints,
    Namespaces,
    NetworkPolicies,
}

/// k8s-1m's 18 watches per kubelet and kube-proxy pair (4 configmaps; 2 each of pods, secrets,
/// services, nodes; 1 each of namespaces, endpoints, csidrivers, runtimeclasses, endpointslices,
/// networkpolicies), the measured ones first so that a smaller count keeps them; past 18, more
/// referenced ConfigMaps.
const ORDER: [Kind; 18] = [
    Kind::NodePods,
    Kind::LabelPods,
    Kind::Node,
    Kind::RootCa,
    Kind::Secret,
    Kind::ConfigMap,
    Kind::Services,
    Kind::RuntimeClasses,
    Kind::CsiDrivers,
    Kind::ConfigMap,
    Kind::Secret,
    Kind::ConfigMap,
    Kind::Node,
    Kind::Services,
    Kind::EndpointSlices,
    Kind::Endpoints,
    Kind::Namespaces,
    Kind::NetworkPolicies,
];

fn kinds(count: usize) -> impl Iterator<Item = Kind> {
    (0..count).map(|i| ORDER.get(i).copied().unwrap_or(Kind::ConfigMap))
}

/// The first `count` watches of node `n`.
pub(super) fn watches(n: usize, count: usize) -> Vec<Watch> {
    let ns = format!("bench-{}", n % NAMESPACES);
    let (mut cm, mut sec) = (0, 0);
    kinds(count)
        .map(|k| {
            let (path, what) = match k {
                Kind::NodePods => (
                    format!("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-{n}"),
                    Path::NodePods,
                ),
                Kind::LabelPods => (
                    format!("/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dapp-{n}"),
                    Path::LabelPods,
                ),
                Kind::Node => (
                    format!("/api/v1/nodes?fieldSelector=metadata.name%3Dnode-{n}"),
                    Path::Other,
                ),
                Kind::RootCa => (
                    format!(
                        "/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3Dkube-root-ca.crt"
                    ),
                    Path::Other,
                ),
                Kind::ConfigMap => {
                    cm += 1;
                    (
                        format!(
                            "/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3Dcm-{n}-{}",
                            cm - 1
                        ),
                        Path::Other,
                    )
                }
                Kind::Secret => {
                    sec += 1;
                    (
                        format!(
                            "/api/v1/namespaces/{ns}/secrets?fieldSelector=metadata.name%3Dsec-{n}-{}",
                            sec - 1
                        ),
                        Path::Other,
                    )
                }
                Kind::Services => ("/api/v1/services?".to_owned(), Path::Other),
                Kind::RuntimeClasses => (
                    "/apis/node.k8s.io/v1/runtimeclasses?".to_owned(),
                    Path::Other,
                ),
                Kind::CsiDrivers => ("/apis/storage.k8s.io/v1/csidrivers?".to_owned(), Path::Other),
                Kind::EndpointSlices => (
                    "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name".to_owned(),
                    Path::Other,
                ),
                Kind::Endpoints => ("/api/v1/endpoints?".to_owned(), Path::Other),
                Kind::Namespaces => ("/api/v1/namespaces?".to_owned(), Path::Other),
                Kind::NetworkPolicies => (
                    "/apis/networking.k8s.io/v1/networkpolicies?".to_owned(),
                    Path::Other,
                ),
            };
            Watch { path, what }
        })
        .collect()
}

const UID: &str = "00000000-0000-4000-8000";
const CREATED: &str = "2026-11-24T00:00:00Z";

fn meta(name: &str, ns: Option<&str>, uid: usize) -> String {
    let ns = ns.map_or(String::new(), |ns| format!(r#""namespace":"{ns}","#));
    format!(
        r#""metadata":{{"name":"{name}",{ns}"uid":"{UID}-{uid:012}","creationTimestamp":"{CREATED}"}}"#
    )
}

/// A Lease of node `n` renewed at `renew_us` (µs since the epoch).
pub(super) fn lease(n: usize, renew_us: u64) -> String {
    let secs = renew_us / 1_000_000;
    let micros = renew_us % 1_000_000;
    let (d, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil(d as i64);
    format!(
        r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",{},"spec":{{"holderIdentity":"node-{n}","leaseDurationSeconds":40,"renewTime":"{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z"}}}}"#,
        meta(&format!("node-{n}"), Some("kube-node-lease"), 3_000_000 + n),
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
    )
}

/// Days since 1970-01-01 as (year, month, day) (Howard Hinnant's algorithm).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The etcd key of node `n`'s Lease.
pub(super) fn lease_key(n: usize) -> String {
    format!("/registry/leases/kube-node-lease/node-{n}")
}

/// Everything seeded for node `n` with `count` watches: (key, value).
fn node_objects(n: usize, count: usize) -> Vec<(String, String)> {
    let ns = format!("bench-{}", n % NAMESPACES);
    let (cms, secs) = (configmaps_per_node(count), secrets_per_node(count));
    let mut out = vec![
        (
            format!("/registry/minions/node-{n}"),
            format!(
                r#"{{"apiVersion":"v1","kind":"Node",{},"spec":{{"podCIDR":"10.244.0.0/24"}},"status":{{"capacity":{{"cpu":"8","memory":"32Gi","pods":"110"}},"conditions":[{{"type":"Ready","status":"True","lastHeartbeatTime":"{CREATED}","lastTransitionTime":"{CREATED}","reason":"KubeletReady","message":"kubelet is posting ready status"}}]}}}}"#,
                meta(&format!("node-{n}"), None, 1_000_000 + n)
            ),
        ),
        (lease_key(n), lease(n, pods::now_us())),
    ];
    let mut volumes = vec![
        r#"{"name":"kube-api-access","projected":{"sources":[{"serviceAccountToken":{"path":"token","expirationSeconds":3607}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}}]}}"#.to_owned(),
    ];
    for k in 0..cms {
        out.push((
            format!("/registry/configmaps/{ns}/cm-{n}-{k}"),
            format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap",{},"data":{{"app.properties":"node={n}\nindex={k}\n"}}}}"#,
                meta(&format!("cm-{n}-{k}"), Some(&ns), 4_000_000 + n * 64 + k)
            ),
        ));
        volumes.push(format!(
            r#"{{"name":"cm-{k}","configMap":{{"name":"cm-{n}-{k}"}}}}"#
        ));
    }
    for k in 0..secs {
        out.push((
            format!("/registry/secrets/{ns}/sec-{n}-{k}"),
            format!(
                r#"{{"apiVersion":"v1","kind":"Secret",{},"type":"Opaque","data":{{"password":"c2VjcmV0"}}}}"#,
                meta(&format!("sec-{n}-{k}"), Some(&ns), 5_000_000 + n * 64 + k)
            ),
        ));
        volumes.push(format!(
            r#"{{"name":"sec-{k}","secret":{{"secretName":"sec-{n}-{k}"}}}}"#
        ));
    }
    out.push((
        format!("/registry/pods/{ns}/static-{n}"),
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod",{},"spec":{{"nodeName":"node-{n}","serviceAccountName":"default","volumes":[{}],"containers":[{{"name":"app","image":"registry.example/app:1"}}]}},"status":{{"phase":"Running"}}}}"#,
            meta(&format!("static-{n}"), Some(&ns), 2_000_000 + n),
            volumes.join(",")
        ),
    ));
    out
}

/// The shared objects: namespaces, root CA ConfigMaps, Services with their Endpoints and
/// EndpointSlices, a NetworkPolicy, a RuntimeClass, a CSIDriver, and the nodes' extra role.
fn shared_objects() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for ns in (0..NAMESPACES)
        .map(|i| format!("bench-{i}"))
        .chain(["kube-node-lease".to_owned()])
    {
        out.push((
            format!("/registry/namespaces/{ns}"),
            format!(
                r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{ns}","uid":"{UID}-{:012}","creationTimestamp":"{CREATED}","labels":{{"kubernetes.io/metadata.name":"{ns}"}}}},"spec":{{"finalizers":["kubernetes"]}},"status":{{"phase":"Active"}}}}"#,
                6_000_000 + out.len()
            ),
        ));
        out.push((
            format!("/registry/configmaps/{ns}/kube-root-ca.crt"),
            format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap",{},"data":{{"ca.crt":"-----BEGIN CERTIFICATE-----\nbench\n-----END CERTIFICATE-----\n"}}}}"#,
                meta("kube-root-ca.crt", Some(&ns), 7_000_000 + out.len())
            ),
        ));
    }
    for s in 0..SERVICES {
        let name = format!("svc-{s}");
        out.push((
            format!("/registry/services/specs/bench-0/{name}"),
            format!(
                r#"{{"apiVersion":"v1","kind":"Service",{},"spec":{{"clusterIP":"10.96.0.{ip}","clusterIPs":["10.96.0.{ip}"],"ports":[{{"name":"http","protocol":"TCP","port":80,"targetPort":8080}}],"selector":{{"app":"{name}"}},"type":"ClusterIP","sessionAffinity":"None","ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack","internalTrafficPolicy":"Cluster"}},"status":{{"loadBalancer":{{}}}}}}"#,
                meta(&name, Some("bench-0"), 8_000_000 + s),
                ip = 10 + s
            ),
        ));
        out.push((
            format!("/registry/services/endpoints/bench-0/{name}"),
            format!(
                r#"{{"apiVersion":"v1","kind":"Endpoints",{},"subsets":[{{"addresses":[{{"ip":"10.244.0.{ip}"}}],"ports":[{{"name":"http","port":8080,"protocol":"TCP"}}]}}]}}"#,
                meta(&name, Some("bench-0"), 8_100_000 + s),
                ip = 10 + s
            ),
        ));
        out.push((
            format!("/registry/endpointslices/bench-0/{name}-abcde"),
            format!(
                r#"{{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{{"name":"{name}-abcde","namespace":"bench-0","uid":"{UID}-{:012}","creationTimestamp":"{CREATED}","labels":{{"kubernetes.io/service-name":"{name}","endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io"}}}},"addressType":"IPv4","endpoints":[{{"addresses":["10.244.0.{ip}"],"conditions":{{"ready":true}}}}],"ports":[{{"name":"http","port":8080,"protocol":"TCP"}}]}}"#,
                8_200_000 + s,
                ip = 10 + s
            ),
        ));
    }
    out.push((
        "/registry/networkpolicies/bench-0/default-deny".to_owned(),
        format!(
            r#"{{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy",{},"spec":{{"podSelector":{{}},"policyTypes":["Ingress"]}}}}"#,
            meta("default-deny", Some("bench-0"), 8_300_000)
        ),
    ));
    out.push((
        "/registry/runtimeclasses/runc".to_owned(),
        format!(
            r#"{{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass",{},"handler":"runc"}}"#,
            meta("runc", None, 8_400_000)
        ),
    ));
    out.push((
        "/registry/csidrivers/csi.example.com".to_owned(),
        format!(
            r#"{{"apiVersion":"storage.k8s.io/v1","kind":"CSIDriver",{},"spec":{{"attachRequired":true,"podInfoOnMount":false,"volumeLifecycleModes":["Persistent"],"fsGroupPolicy":"ReadWriteOnceWithFSType","storageCapacity":false,"requiresRepublish":false,"seLinuxMount":false}}}}"#,
            meta("csi.example.com", None, 8_500_000)
        ),
    ));
    out.push((
        "/registry/clusterroles/bench:node-extras".to_owned(),
        format!(
            r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",{},"rules":[{{"verbs":["list","watch"],"apiGroups":[""],"resources":["endpoints","namespaces"]}},{{"verbs":["list","watch"],"apiGroups":["discovery.k8s.io"],"resources":["endpointslices"]}},{{"verbs":["list","watch"],"apiGroups":["networking.k8s.io"],"resources":["networkpolicies"]}}]}}"#,
            meta("bench:node-extras", None, 8_600_000)
        ),
    ));
    out.push((
        "/registry/clusterrolebindings/bench:node-extras".to_owned(),
        format!(
            r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",{},"roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"bench:node-extras"}},"subjects":[{{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:nodes"}}]}}"#,
            meta("bench:node-extras", None, 8_700_000)
        ),
    ));
    // kube-apiserver's bootstrap policy: health checks for everyone, a load balancer's too.
    out.push((
        "/registry/clusterroles/system:public-info-viewer".to_owned(),
        format!(
            r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",{},"rules":[{{"verbs":["get"],"nonResourceURLs":["/healthz","/livez","/readyz","/version","/version/"]}}]}}"#,
            meta("system:public-info-viewer", None, 8_650_000)
        ),
    ));
    out.push((
        "/registry/clusterrolebindings/system:public-info-viewer".to_owned(),
        format!(
            r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",{},"roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:public-info-viewer"}},"subjects":[{{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:authenticated"}},{{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:unauthenticated"}}]}}"#,
            meta("system:public-info-viewer", None, 8_660_000)
        ),
    ));
    out.push((
        "/registry/clusterroles/bench:pods-by-label".to_owned(),
        format!(
            r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",{},"rules":[{{"verbs":["list","watch"],"apiGroups":[""],"resources":["pods"]}}]}}"#,
            meta("bench:pods-by-label", None, 8_800_000)
        ),
    ));
    for i in 0..NAMESPACES {
        let ns = format!("bench-{i}");
        out.push((
            format!("/registry/rolebindings/{ns}/bench:pods-by-label"),
            format!(
                r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",{},"roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"bench:pods-by-label"}},"subjects":[{{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:nodes"}}]}}"#,
                meta("bench:pods-by-label", Some(&ns), 8_900_000 + i)
            ),
        ));
    }
    out
}

/// Writes the shared objects and every node's, in transactions of 100; returns the revision.
pub(super) async fn seed(
    client: &Client,
    nodes: usize,
    count: usize,
    bar: &ProgressBar,
) -> Result<u64, String> {
    let mut all = shared_objects();
    for n in 0..nodes {
        all.extend(node_objects(n, count));
    }
    bar.set_length(all.len() as u64);
    let mut rev = 0;
    let mut kv = client.kv_client();
    // Sequential: at most ~10^5 small objects, and etcd batches them well in big transactions.
    for chunk in all.chunks(100) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|(k, v)| TxnOp::put(k.as_str(), v.as_str(), None))
            .collect();
        let r = kv
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(|e| format!("seeding: {e}"))?;
        rev = r.header().map_or(rev, |h| h.revision() as u64);
        bar.inc(chunk.len() as u64);
    }
    Ok(rev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_json_and_the_static_pod_references_what_its_node_watches() {
        for (k, v) in shared_objects().into_iter().chain(node_objects(7, 18)) {
            let _: serde_json::Value =
                serde_json::from_str(&v).unwrap_or_else(|e| panic!("{k}: {e}: {v}"));
        }
        let pod = node_objects(7, 18).pop().unwrap().1;
        for name in ["cm-7-0", "cm-7-2", "sec-7-1", "kube-root-ca.crt"] {
            assert!(pod.contains(&format!("\"{name}\"")), "{name} in {pod}");
        }
        let w = watches(7, 18);
        assert_eq!(w.len(), 18);
        assert_eq!(w.iter().filter(|w| w.what == Path::NodePods).count(), 1);
        assert_eq!(w.iter().filter(|w| w.what == Path::LabelPods).count(), 1);
        assert_eq!(
            w.iter().filter(|w| w.path.contains("configmaps")).count(),
            4
        );
        assert_eq!(configmaps_per_node(20), 5, "past 18, more ConfigMaps");
        assert_eq!(watches(7, 10).len(), 10);
        assert!(
            lease(1, 1_764_000_000_123_456)
                .contains("\"renewTime\":\"2025-11-24T16:00:00.123456Z\"")
        );
    }
}

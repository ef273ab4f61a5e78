//! An authorization decision for a routed kubelet watch (issue 10's floor: at most 5 µs): the
//! request's attributes read from its path, then `Node,RBAC` asked, with an RBAC index of 2 000
//! bindings. Also: a service account's watch that only RBAC allows, and a node's get of a
//! secret its pods reference (the per-node reference set remembered).

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::json;
use watchcache::{Cache, CacheConfig, MemorySource, ResourceDef, Selection};
use watchcache_server::auth::{
    Attributes, Authorizer, Decision, Mode, NodeAuthorizer, NodeCaches, Rbac, RbacObjects,
    RequestInfo, ServiceAccounts, User,
};

fn rbac() -> Rbac {
    let mut o = RbacObjects::default();
    for i in 0..1000 {
        let ns = format!("ns-{i}");
        o.add(json!({"kind": "Role", "metadata": {"name": "reader", "namespace": ns},
            "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["configmaps", "secrets"]}]}))
            .unwrap();
        o.add(
            json!({"kind": "RoleBinding", "metadata": {"name": "reader", "namespace": ns},
            "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": ns}],
            "roleRef": {"kind": "Role", "name": "reader"}}),
        )
        .unwrap();
        o.add(
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": format!("crb-{i}")},
            "subjects": [{"kind": "User", "name": format!("user-{i}")}],
            "roleRef": {"kind": "ClusterRole", "name": "view"}}),
        )
        .unwrap();
    }
    o.add(json!({"kind": "ClusterRole", "metadata": {"name": "view"},
        "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": ["*"], "resources": ["*"]}]}))
        .unwrap();
    Rbac::new(o)
}

fn bench(c: &mut Criterion) {
    let (pods, pods_writer) = Cache::new(
        ResourceDef::builtin("pods").unwrap(),
        CacheConfig::default(),
    );
    let src = MemorySource::new(pods_writer, 1, []);
    for i in 0..10_000 {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "namespace": "ns"},
            "spec": {"nodeName": format!("node-{}", i % 1000),
                     "volumes": [{"name": "s", "secret": {"secretName": format!("s{i}")}}]}});
        src.put(&format!("/registry/pods/ns/p{i}"), pod.to_string())
            .unwrap();
    }
    let authz = Authorizer::new(
        vec![Mode::Node, Mode::Rbac],
        Some(Arc::new(rbac())),
        Some(NodeAuthorizer::new(NodeCaches {
            pods: Some(pods.clone()),
            ..NodeCaches::default()
        })),
    );
    let kubelet = User::authenticated("system:node:node-7", "", vec!["system:nodes".into()]);
    let selection = Selection::all()
        .with_fields("spec.nodeName=node-7")
        .unwrap();
    let sa = User::authenticated(
        "system:serviceaccount:ns-500:app",
        "",
        vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:ns-500".into(),
        ],
    );
    let decide = |user: &User, path: &str, watch: bool, sel: Option<&Selection>| {
        let info = RequestInfo::new("GET", path, watch);
        authz.authorize(&Attributes {
            user,
            info: &info,
            selection: sel,
        })
    };
    assert_eq!(
        decide(&kubelet, "/api/v1/pods", true, Some(&selection)),
        Decision::Allow
    );
    assert_eq!(
        decide(&sa, "/api/v1/namespaces/ns-500/configmaps", true, None),
        Decision::Allow
    );
    assert_eq!(
        decide(&kubelet, "/api/v1/namespaces/ns/secrets/s7", false, None),
        Decision::Allow
    );
    let mut g = c.benchmark_group("authz");
    g.bench_function("kubelet_watch_node_rbac", |b| {
        b.iter(|| decide(&kubelet, "/api/v1/pods", true, Some(&selection)))
    });
    g.bench_function("service_account_watch_rbac", |b| {
        b.iter(|| decide(&sa, "/api/v1/namespaces/ns-500/configmaps", true, None))
    });
    g.bench_function("node_get_referenced_secret", |b| {
        b.iter(|| decide(&kubelet, "/api/v1/namespaces/ns/secrets/s7", false, None))
    });
    // Authentication of a service-account token: the first verification (RS256), and the
    // next ones, answered from the 10 s memo.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("sa.pub");
    let testdata = concat!(env!("CARGO_MANIFEST_DIR"), "/src/auth/testdata");
    std::fs::copy(format!("{testdata}/sa-rsa.pub"), &key).unwrap();
    let private = std::fs::read(format!("{testdata}/sa-rsa.key")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &json!({"iss": "https://issuer", "aud": ["https://issuer"], "exp": now + 3600, "nbf": now,
                "sub": "system:serviceaccount:ns-500:app",
                "kubernetes.io": {"namespace": "ns-500", "serviceaccount": {"name": "app", "uid": "u"}}}),
        &jsonwebtoken::EncodingKey::from_rsa_pem(&private).unwrap(),
    )
    .unwrap();
    let load = || ServiceAccounts::load(&[&key], vec!["https://issuer".into()], vec![]).unwrap();
    let warm = load();
    warm.verify(&token).unwrap();
    g.bench_function("service_account_token_first_verify", |b| {
        b.iter_batched(load, |sa| sa.verify(&token).unwrap(), BatchSize::SmallInput)
    });
    g.bench_function("service_account_token_remembered", |b| {
        b.iter(|| warm.verify(&token).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

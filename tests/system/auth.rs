//! Authentication, authorization (RBAC from etcd, Node), limits and the audit log, against a
//! server over a real etcd, with real clients (reqwest, the official Python client).

use crate::support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use support::TestPod;
use support::server::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use watchcache::{CacheConfig, ResourceDef};
use watchcache_server::ServerConfig;
use watchcache_server::auth::{
    AuthConfig, Authenticator, Mode, RbacObjects, ServiceAccounts, TokenFile,
};

/// Keys made for the unit tests of service-account tokens.
/// The service-account keys of the server's own tests.
fn testdata() -> std::path::PathBuf {
    support::repo().join("crates/server/src/auth/testdata")
}

/// A projected service-account token for `ns`/`name`, signed with the test RSA or EC key.
fn sa_token(ns: &str, name: &str, iss: &str, exp_in: i64, ec: bool) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = json!({"iss": iss, "aud": [iss], "exp": now + exp_in, "iat": now, "nbf": now,
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": "uid-1"}}});
    let (alg, key) = if ec {
        let pem = std::fs::read(testdata().join("sa-ec.key")).unwrap();
        (
            jsonwebtoken::Algorithm::ES256,
            jsonwebtoken::EncodingKey::from_ec_pem(&pem).unwrap(),
        )
    } else {
        let pem = std::fs::read(testdata().join("sa-rsa.key")).unwrap();
        (
            jsonwebtoken::Algorithm::RS256,
            jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap(),
        )
    };
    jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), &claims, &key).unwrap()
}

const TOKENS: &str = "\
admin-token,admin,0,system:masters
alice-token,alice,1
n1-token,system:node:n1,2,system:nodes
n2-token,system:node:n2,3,system:nodes
prom-token,prom,4
viewer-token,vera,5,viewers
rita-token,rita,6
";

fn auth_config(anonymous: bool) -> AuthConfig {
    let mut bootstrap = RbacObjects::default();
    bootstrap
        .add(
            json!({"kind": "ClusterRole", "metadata": {"name": "metrics-reader"},
            "rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}),
        )
        .unwrap();
    bootstrap
        .add(
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "prom-metrics"},
            "subjects": [{"kind": "User", "name": "prom"}],
            "roleRef": {"kind": "ClusterRole", "name": "metrics-reader"}}),
        )
        .unwrap();
    AuthConfig {
        authenticator: Authenticator {
            client_certs: true,
            tokens: Some(TokenFile::parse("tokens.csv", TOKENS).unwrap()),
            service_accounts: Some(
                ServiceAccounts::load(
                    &[testdata().join("sa-rsa.pub"), testdata().join("sa-ec.pub")],
                    vec!["https://issuer.test".into()],
                    vec![],
                )
                .unwrap(),
            ),
            anonymous,
        },
        modes: vec![Mode::Node, Mode::Rbac],
        rbac_bootstrap: bootstrap,
    }
}

async fn server(config: ServerConfig) -> TestServer {
    let s = TestServer::start_with_server(
        config,
        |_| {},
        ResourceDef::builtins(),
        |s| s.with_auth(auth_config(false)),
    )
    .await;
    // Not before the authorizer has read RBAC (until then a request is 429, retry).
    s.wait_ready_as(Some("admin-token")).await;
    s
}

async fn call(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    // A new client per request: its first request opens a connection (the fast path's case
    // for watches).
    let c = Client::new();
    let mut r = c.request(method, url);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(b) = body {
        r = r.json(b);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status();
    // A whole answer: a watch that should have been refused streams instead, and fails here.
    let text = tokio::time::timeout(Duration::from_secs(10), resp.text())
        .await
        .expect("a whole answer within 10 s")
        .unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(url: &str, token: Option<&str>) -> (StatusCode, Value) {
    call(reqwest::Method::GET, url, token, None).await
}

/// Polls until `url` answers `want` for `token`; the time it took.
async fn until_status(url: &str, token: &str, want: StatusCode) -> Duration {
    let started = Instant::now();
    loop {
        let (s, v) = get(url, Some(token)).await;
        if s == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{url}: still {s}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_and_bad_tokens_are_401_and_unbound_users_403() {
    let s = server(ServerConfig::default()).await;
    let (code, v) = get(&format!("{}/api/v1/namespaces/ns/pods", s.url), None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{v}");
    assert_eq!(
        v,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
    let (code, _) = get(
        &format!("{}/api/v1/namespaces/ns/pods", s.url),
        Some("wrong"),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    // The fast path too.
    let (code, _) = get(&format!("{}/api/v1/pods?watch=true", s.url), None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    // /livez stays open; /readyz is a non-resource URL.
    assert_eq!(
        get(&format!("{}/livez", s.url), None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        get(&format!("{}/readyz", s.url), None).await.0,
        StatusCode::UNAUTHORIZED
    );

    let (code, v) = get(
        &format!("{}/api/v1/namespaces/ns/pods", s.url),
        Some("alice-token"),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(
        v,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns\"",
               "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403})
    );
    let (code, v) = get(
        &format!(
            "{}/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
            s.url
        ),
        Some("alice-token"),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        v["message"],
        "clusterroles.rbac.authorization.k8s.io \"admin\" is forbidden: User \"alice\" cannot get resource \"clusterroles\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
    );
    assert_eq!(
        v["details"],
        json!({"name": "admin", "group": "rbac.authorization.k8s.io", "kind": "clusterroles"})
    );
    let (code, v) = get(&format!("{}/api", s.url), Some("alice-token")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        v["message"],
        "forbidden: User \"alice\" cannot get path \"/api\""
    );
    // The fast path answers 403 with the same message.
    let (code, v) = get(
        &format!("{}/api/v1/namespaces/ns/pods?watch=1", s.url),
        Some("alice-token"),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        v["message"],
        "pods is forbidden: User \"alice\" cannot watch resource \"pods\" in API group \"\" in the namespace \"ns\""
    );
    // /readyz once RBAC has read its caches (the test server waits for the caches only).
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(&format!("{}/readyz", s.url), Some("admin-token"))
        .await
        .0
        != StatusCode::OK
    {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // system:masters may do anything.
    assert_eq!(
        get(
            &format!("{}/api/v1/namespaces/ns/pods", s.url),
            Some("admin-token")
        )
        .await
        .0,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_grants_from_etcd_take_effect_and_are_revoked_within_a_second() {
    let s = server(ServerConfig::default()).await;
    let mut etcd = support::etcd::client(&[s.etcd.server.url()]).await;
    let url = format!("{}/api/v1/namespaces/team/configmaps", s.url);
    assert_eq!(
        get(&url, Some("alice-token")).await.0,
        StatusCode::FORBIDDEN
    );
    // A Role and RoleBinding written straight into etcd.
    etcd.put(
        "/registry/roles/team/cm-reader",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "cm-reader", "namespace": "team"},
               "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["configmaps"]}]})
        .to_string(),
        None,
    )
    .await
    .unwrap();
    etcd.put(
        "/registry/rolebindings/team/alice-cm",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "alice-cm", "namespace": "team"},
               "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "Role", "name": "cm-reader", "apiGroup": "rbac.authorization.k8s.io"}})
        .to_string(),
        None,
    )
    .await
    .unwrap();
    let took = until_status(&url, "alice-token", StatusCode::OK).await;
    assert!(took < Duration::from_secs(1), "granted after {took:?}");
    // Still only in its namespace and for its verbs.
    assert_eq!(
        get(
            &format!("{}/api/v1/namespaces/other/configmaps", s.url),
            Some("alice-token")
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(
            reqwest::Method::DELETE,
            &format!("{url}/x"),
            Some("alice-token"),
            None
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    etcd.delete("/registry/rolebindings/team/alice-cm", None)
        .await
        .unwrap();
    let took = until_status(&url, "alice-token", StatusCode::FORBIDDEN).await;
    assert!(took < Duration::from_secs(1), "revoked after {took:?}");

    // A ClusterRoleBinding to an aggregated ClusterRole, written as kube-apiserver writes them:
    // vera (group viewers) may list nodes once both exist.
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    let nodes = format!("{}/api/v1/nodes", s.url);
    assert_eq!(
        get(&nodes, Some("viewer-token")).await.0,
        StatusCode::FORBIDDEN
    );
    s.seed(&format!("{rbac}/clusterroles"), &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "view"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-view": "true"}}]},
        "rules": []})).await;
    s.seed(&format!("{rbac}/clusterrolebindings"), &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "viewers"},
        "subjects": [{"kind": "Group", "name": "viewers", "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io"}})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        get(&nodes, Some("viewer-token")).await.0,
        StatusCode::FORBIDDEN,
        "the aggregate is empty"
    );
    s.seed(
        &format!("{rbac}/clusterroles"),
        &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "view-nodes", "labels": {"example.com/aggregate-to-view": "true"}},
        "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["nodes"]}]}),
    )
    .await;
    let took = until_status(&nodes, "viewer-token", StatusCode::OK).await;
    assert!(took < Duration::from_secs(1), "aggregated after {took:?}");
    assert_eq!(
        get(&format!("{nodes}/n1"), Some("viewer-token")).await.0,
        StatusCode::FORBIDDEN,
        "list only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_read_their_own_pods_and_referenced_secrets_only() {
    let s = server(ServerConfig::default()).await;
    let base = &s.url;
    s.seed(
        "/api/v1/namespaces/a/pods",
        &TestPod::new("a", "p1")
            .node("n1")
            .container("c", "busybox")
            .secret_volume("s", "s1")
            .value(),
    )
    .await;
    s.seed(
        "/api/v1/namespaces/a/pods",
        &TestPod::new("a", "p2")
            .node("n2")
            .container("c", "busybox")
            .secret_volume("s", "s2")
            .value(),
    )
    .await;
    for name in ["s1", "s2"] {
        s.seed(
            "/api/v1/namespaces/a/secrets",
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {}}),
        )
        .await;
    }
    // Lists: only with spec.nodeName pinned to its own name.
    let (code, v) = get(
        &format!("{base}/api/v1/pods?fieldSelector=spec.nodeName%3Dn2"),
        Some("n1-token"),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(
        v["message"],
        "pods is forbidden: User \"system:node:n1\" cannot list resource \"pods\" in API group \"\" at the cluster scope: can only list/watch pods with spec.nodeName field selector"
    );
    assert_eq!(
        get(&format!("{base}/api/v1/pods"), Some("n1-token"))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    let (code, v) = get(
        &format!("{base}/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"),
        Some("n1-token"),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    let names: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["p1"]);
    // Watches through the fast path: its own pods stream, another node's are 403.
    assert_eq!(
        watch_status(base, "n1-token", "n2").await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(watch_status(base, "n2-token", "n2").await, StatusCode::OK);
    let resp = Client::new()
        .get(format!(
            "{base}/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn1&resourceVersion=0"
        ))
        .bearer_auth("n1-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.bytes_stream();
    let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let ev: Value = serde_json::from_slice(chunk.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("p1"))
    );
    // Secrets: the one its pod mounts, not the other node's.
    assert_eq!(
        get(
            &format!("{base}/api/v1/namespaces/a/secrets/s1"),
            Some("n1-token")
        )
        .await
        .0,
        StatusCode::OK
    );
    let (code, v) = get(
        &format!("{base}/api/v1/namespaces/a/secrets/s2"),
        Some("n1-token"),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        v["message"],
        "secrets \"s2\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"a\": no relationship found between node 'n1' and this object"
    );
    assert_eq!(
        get(
            &format!("{base}/api/v1/namespaces/a/secrets/s2"),
            Some("n2-token")
        )
        .await
        .0,
        StatusCode::OK
    );
    assert_eq!(
        get(
            &format!("{base}/api/v1/namespaces/a/secrets"),
            Some("n1-token")
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    // Its own Node: allowed to ask (404: no such node yet); another node's: 403.
    assert_eq!(
        get(&format!("{base}/api/v1/nodes/n1"), Some("n1-token"))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&format!("{base}/api/v1/nodes/n2"), Some("n1-token"))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_caps_inflight_limits_metrics_rules_and_the_audit_file() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let s = server(ServerConfig {
        max_watches_per_user: 2,
        max_requests_inflight: 1,
        // A request over the in-flight limit waits a quarter of this for a place: 500 ms.
        request_timeout: Duration::from_secs(2),
        audit_log_path: Some(audit.clone()),
        ..ServerConfig::default()
    })
    .await;
    let base = &s.url;
    // Two watches of n1 are open...
    let watch = |accept: &'static str| {
        let url = format!("{base}/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn1");
        async move {
            let resp = Client::new()
                .get(url)
                .header("Accept", accept)
                .bearer_auth("n1-token")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            resp
        }
    };
    let _w1 = watch("application/json").await;
    let _w2 = watch("application/json").await;
    // ... so a third is 429 with Retry-After.
    let resp = Client::new()
        .get(format!(
            "{base}/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn1"
        ))
        .bearer_auth("n1-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["retry-after"], "1");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["reason"], "TooManyRequests");
    // Another user is not counted against n1's cap.
    assert_eq!(watch_status(base, "n2-token", "n2").await, StatusCode::OK);

    // Non-resource URL rules: prom may read /metrics (bootstrap RBAC), alice may not.
    assert_eq!(
        get(&format!("{base}/metrics"), Some("prom-token")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        get(&format!("{base}/metrics"), Some("alice-token")).await.0,
        StatusCode::FORBIDDEN
    );

    // --max-requests-inflight 1: a POST whose body is still coming holds no slot (issue 20,
    // item 4: the permit is taken once the body has arrived) ...
    let addr = base.trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-token\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n1_pods = format!("{base}/api/v1/pods?fieldSelector=spec.nodeName%3Dn1");
    assert_eq!(get(&n1_pods, Some("n1-token")).await.0, StatusCode::OK);
    drop(slow);
    // ... a read that waits for a resourceVersion the cache has not reached does: the node's
    // next request waits for the place and, none freeing up in time, is 429 with Retry-After;
    // system:masters is still served. The waiting read is the node's own, so it queues for the
    // place rather than being served without one (as system:masters would be), and a read of
    // the node's that comes first only delays it.
    let started = Instant::now();
    let waiting = tokio::spawn({
        let url = format!("{n1_pods}&resourceVersion=999999999&resourceVersionMatch=NotOlderThan");
        async move { get(&url, Some("n1-token")).await.0 }
    });
    // The waiting read holds the place for its whole 2 s; one read of the node's within its
    // first 1.5 s waits the 500 ms queue wait and is refused. Earlier ones (the waiting read
    // not yet arrived, on a loaded machine) are served.
    let refused = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let resp = Client::new()
            .get(&n1_pods)
            .bearer_auth("n1-token")
            .send()
            .await
            .unwrap();
        if resp.status() != StatusCode::OK {
            break resp;
        }
        assert!(
            !waiting.is_finished() && started.elapsed() < Duration::from_secs(10),
            "no read of the node's was refused while its waiting read held the place"
        );
    };
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(
        get(
            &format!("{base}/api/v1/namespaces/a/configmaps"),
            Some("admin-token")
        )
        .await
        .0,
        StatusCode::OK
    );
    assert_eq!(waiting.await.unwrap(), StatusCode::GATEWAY_TIMEOUT);
    // A write, authorized and refused: this server is read-only (writes are kube-apiserver's).
    let (code, v) = call(
        reqwest::Method::POST,
        &format!("{base}/api/v1/namespaces/a/configmaps"),
        Some("admin-token"),
        Some(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "audited"}})),
    )
    .await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{v}");
    assert_eq!(
        get(&format!("{base}/api/v1/pods"), None).await.0,
        StatusCode::UNAUTHORIZED
    );

    // The audit file has the write, the denials and the 429s, as JSON lines.
    let deadline = Instant::now() + Duration::from_secs(5);
    let lines: Vec<Value> = loop {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // The anonymous list is the last request; the readiness probes' 401s come first.
        let last = lines
            .iter()
            .any(|l| l["code"] == 401 && l["verb"] == "list");
        if last || Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let has = |user: &str, verb: &str, code: u16| {
        lines
            .iter()
            .any(|l| l["user"] == user && l["verb"] == verb && l["code"] == code)
    };
    assert!(has("system:node:n1", "watch", 429), "{lines:?}");
    assert!(has("alice", "get", 403), "{lines:?}");
    assert!(has("system:node:n1", "list", 429), "{lines:?}");
    assert!(has("admin", "create", 405), "{lines:?}");
    assert!(has("", "list", 401), "{lines:?}");
    let created = lines
        .iter()
        .find(|l| l["code"] == 405)
        .expect("the write is audited");
    assert_eq!(
        (
            &created["user"],
            &created["groups"],
            &created["resource"],
            &created["namespace"],
            &created["name"]
        ),
        (
            &json!("admin"),
            &json!(["system:masters", "system:authenticated"]),
            &json!("configmaps"),
            &json!("a"),
            &json!("")
        )
    );
    assert!(created["latencyMs"].as_f64().unwrap() > 0.0);
    assert!(
        !lines.iter().any(|l| l["code"] == 200),
        "reads that pass are not audited: {lines:?}"
    );
}

async fn watch_status(base: &str, token: &str, node: &str) -> StatusCode {
    watch_at(
        base,
        token,
        &format!("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3D{node}"),
    )
    .await
}

/// The status of a watch sent as the first request of a new connection (the fast path's).
async fn watch_at(base: &str, token: &str, target: &str) -> StatusCode {
    let mut tcp = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!("GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let line = String::from_utf8_lossy(&buf[..n]);
    let code: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
    StatusCode::from_u16(code).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_are_verified_and_bound_by_rbac() {
    let s = server(ServerConfig::default()).await;
    let mut etcd = support::etcd::client(&[s.etcd.server.url()]).await;
    let url = format!("{}/api/v1/namespaces/team/configmaps", s.url);
    let rs = sa_token("team", "builder", "https://issuer.test", 600, false);
    let es = sa_token("team", "builder", "https://issuer.test", 600, true);
    // The account does not exist (yet): its tokens are refused (`--service-account-lookup`).
    assert_eq!(get(&url, Some(&rs)).await.0, StatusCode::UNAUTHORIZED);
    // The service account, as kube-apiserver stored it, with the uid the tokens name.
    etcd.put(
        "/registry/serviceaccounts/team/builder",
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "builder", "namespace": "team", "uid": "uid-1"}})
        .to_string(),
        None,
    )
    .await
    .unwrap();
    until_status(&url, &rs, StatusCode::FORBIDDEN).await;
    let (code, v) = get(&url, Some(&rs)).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        v["message"],
        "configmaps is forbidden: User \"system:serviceaccount:team:builder\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""
    );
    // A binding to the service account's group (every service account of the namespace).
    etcd.put(
        "/registry/rolebindings/team/sa-view",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "sa-view", "namespace": "team"},
               "subjects": [{"kind": "Group", "name": "system:serviceaccounts:team"}],
               "roleRef": {"kind": "ClusterRole", "name": "cm-view"}})
        .to_string(),
        None,
    )
    .await
    .unwrap();
    etcd.put(
        "/registry/clusterroles/cm-view",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "cm-view"},
               "rules": [{"verbs": ["list", "watch"], "apiGroups": [""], "resources": ["configmaps"]}]})
        .to_string(),
        None,
    )
    .await
    .unwrap();
    until_status(&url, &rs, StatusCode::OK).await;
    assert_eq!(get(&url, Some(&es)).await.0, StatusCode::OK, "ES256");
    // The fast path authenticates the same token.
    assert_eq!(
        watch_at(&s.url, &rs, "/api/v1/namespaces/team/configmaps?watch=1").await,
        StatusCode::OK
    );
    for bad in [
        sa_token("team", "builder", "https://issuer.test", -3600, false),
        sa_token("team", "builder", "https://other.test", 600, false),
        format!("{rs}x"),
    ] {
        assert_eq!(get(&url, Some(&bad)).await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(
            watch_at(&s.url, &bad, "/api/v1/namespaces/team/configmaps?watch=1").await,
            StatusCode::UNAUTHORIZED
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_uses_a_token_kubeconfig() {
    let root = support::repo();
    let venv: PathBuf = support::venv::venv();
    let s = server(ServerConfig::default()).await;
    s.seed(
        "/api/v1/namespaces/default/configmaps",
        &json!({"metadata": {"name": "cm1"}}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = |name: &str, token: &str| {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{}\"}}\nusers:\n- name: u\n  user: {{token: {token}}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
                s.url
            ),
        )
        .unwrap();
        p
    };
    let good = kubeconfig("good", "admin-token");
    let bad = kubeconfig("bad", "not-a-token");
    let script = root.join("tests/python/auth_test.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(venv.join("bin/python"))
            .arg(script)
            .arg(good)
            .arg(bad)
            .output()
    })
    .await
    .unwrap()
    .expect("run the Python auth test");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "python auth test failed:\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.trim(), "OK");
}

/// Proxy mode's upstream for the test: another watchcache server, reached with reqwest.
struct ToServer {
    base: String,
}

impl watchcache_server::Proxy for ToServer {
    fn forward(
        &self,
        req: http::Request<bytes::Bytes>,
    ) -> watchcache::BoxFuture<'static, Result<http::Response<watchcache_server::ProxyBody>, String>>
    {
        use http_body_util::BodyExt;
        let url = format!("{}{}", self.base, req.uri());
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let mut out = Client::new().request(parts.method, url).body(body);
            for (k, v) in &parts.headers {
                out = out.header(k, v);
            }
            let resp = out.send().await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
            let body = http_body_util::Full::new(bytes)
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { match e {} })
                .boxed_unsync();
            let mut r = http::Response::new(body);
            *r.status_mut() = status;
            Ok(r)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_authorizes_before_forwarding() {
    // The upstream: an open server holding a configmap.
    let root = TestServer::start(ServerConfig::default()).await;
    root.seed(
        "/api/v1/namespaces/a/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "up"}}),
    )
    .await;
    // The leaf caches pods only and forwards the rest, with authentication and Node,RBAC.
    let root_url = root.url.clone();
    let leaf = TestServer::start_with_server(
        ServerConfig::default(),
        |_| {},
        vec![ResourceDef::builtin("pods").unwrap()],
        move |s| {
            s.with_proxy(std::sync::Arc::new(ToServer { base: root_url }))
                .with_auth(auth_config(false))
        },
    )
    .await;
    let url = format!("{}/api/v1/namespaces/a/configmaps", leaf.url);
    let (code, v) = get(&url, Some("admin-token")).await;
    assert_eq!(code, StatusCode::OK, "forwarded: {v}");
    assert_eq!(v["items"][0]["metadata"]["name"], "up");
    // The upstream would answer anyone: the leaf refuses first.
    let (code, v) = get(&url, Some("alice-token")).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(
        v["message"],
        "configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"a\""
    );
    assert_eq!(get(&url, None).await.0, StatusCode::UNAUTHORIZED);
    // A watch of a forwarded resource leaves the fast path and is authorized too.
    assert_eq!(
        watch_at(
            &leaf.url,
            "alice-token",
            "/api/v1/namespaces/a/configmaps?watch=1"
        )
        .await,
        StatusCode::FORBIDDEN
    );
}

/// Issue 20, item 14: a forwarding leaf passed its client's `X-Remote-User`, `X-Remote-Group`
/// and `X-Remote-Extra-*` headers on, which an upstream trusting the leaf as a front proxy takes
/// as the requester's identity. They are dropped; the identity goes up as impersonation only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_drops_front_proxy_identity_headers() {
    // The upstream: a socket that records the request heads it gets and answers an empty list.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", upstream.local_addr().unwrap());
    let (heads, mut got) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = upstream.accept().await.unwrap();
            let heads = heads.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let _ = heads.send(String::from_utf8_lossy(&head).to_lowercase());
                let body = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[]}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(answer.as_bytes()).await;
            });
        }
    });
    let leaf = TestServer::start_with_server(
        ServerConfig::default(),
        |_| {},
        vec![ResourceDef::builtin("pods").unwrap()],
        move |s| {
            s.with_proxy(std::sync::Arc::new(ToServer { base }))
                .with_auth(auth_config(false))
        },
    )
    .await;
    let resp = Client::new()
        .get(format!("{}/api/v1/namespaces/a/configmaps", leaf.url))
        .bearer_auth("viewer-token")
        .header("X-Remote-User", "admin")
        .header("X-Remote-Group", "system:masters")
        .header("X-Remote-Extra-Scopes", "everything")
        .header("X-Remote-Extra-", "x")
        .send()
        .await
        .unwrap();
    // vera has no grant on configmaps at the leaf: 403, nothing forwarded.
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let resp = Client::new()
        .get(format!("{}/api/v1/namespaces/a/configmaps", leaf.url))
        .bearer_auth("admin-token")
        .header("X-Remote-User", "mallory")
        .header("X-Remote-Group", "system:masters")
        .header("X-Remote-Extra-Scopes", "everything")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let head = tokio::time::timeout(Duration::from_secs(10), got.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        head.starts_with("get /api/v1/namespaces/a/configmaps"),
        "{head}"
    );
    assert!(head.contains("impersonate-user: admin\r\n"), "{head}");
    assert!(!head.contains("x-remote-"), "{head}");
    assert!(!head.contains("mallory"), "{head}");
    assert!(got.try_recv().is_err(), "one request forwarded");
}

/// One watch event as the test reads it, whatever the format: its type, the kind of its object,
/// the name of the object it is about (a Table's row's), its resourceVersion, and whether it
/// carries `k8s.io/initial-events-end: "true"` where a client reads it (the object's metadata;
/// a Table row's object's).
#[derive(Debug)]
struct Seen {
    kind: String,
    object_kind: String,
    name: String,
    rv: u64,
    initial_end: bool,
}

/// The length-delimited fields of a protobuf message (other wire types skipped).
fn proto_fields(mut b: &[u8]) -> Vec<(u64, &[u8])> {
    fn varint(b: &mut &[u8]) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let byte = b[0];
            *b = &b[1..];
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        match key & 7 {
            0 => {
                varint(&mut b);
            }
            2 => {
                let n = varint(&mut b) as usize;
                out.push((key >> 3, &b[..n]));
                b = &b[n..];
            }
            1 => b = &b[8..],
            5 => b = &b[4..],
            t => panic!("wire type {t}"),
        }
    }
    out
}

fn proto_field(b: &[u8], n: u64) -> Option<&[u8]> {
    proto_fields(b)
        .into_iter()
        .find(|(f, _)| *f == n)
        .map(|(_, v)| v)
}

/// A protobuf watch frame (`metav1.WatchEvent` {type, RawExtension {raw: `k8s\0` +
/// `runtime.Unknown` {TypeMeta, raw}}}): the object's kind and its `ObjectMeta` (field 1 of a
/// kind's message and of PartialObjectMetadata alike).
fn seen_protobuf(frame: &[u8]) -> Seen {
    let text = |b: Option<&[u8]>| String::from_utf8(b.unwrap_or_default().to_vec()).unwrap();
    let envelope = proto_field(proto_field(frame, 2).unwrap(), 1).unwrap();
    assert_eq!(&envelope[..4], b"k8s\0");
    let unknown = &envelope[4..];
    let object_kind = text(proto_field(proto_field(unknown, 1).unwrap(), 2));
    let meta = proto_field(proto_field(unknown, 2).unwrap(), 1).unwrap_or_default();
    let initial_end = proto_fields(meta)
        .into_iter()
        .filter(|(f, _)| *f == 12)
        .any(|(_, e)| {
            text(proto_field(e, 1)) == "k8s.io/initial-events-end"
                && text(proto_field(e, 2)) == "true"
        });
    Seen {
        kind: text(proto_field(frame, 1)),
        object_kind,
        name: text(proto_field(meta, 1)),
        rv: text(proto_field(meta, 6)).parse().unwrap(),
        initial_end,
    }
}

/// A JSON watch line. A Table event's object is a one-row Table: the row's object (its
/// PartialObjectMetadata) names the object and carries a bookmark's annotation, as
/// kube-apiserver sends it; the Table's own metadata (a ListMeta) has no annotations.
fn seen_json(line: &[u8]) -> Seen {
    let ev: Value = serde_json::from_slice(line).unwrap();
    let o = &ev["object"];
    let meta = if o["kind"] == "Table" {
        let rows = o["rows"].as_array().unwrap_or_else(|| panic!("{ev}"));
        assert_eq!(rows.len(), 1, "one row per Table event: {ev}");
        assert!(o["metadata"].get("annotations").is_none(), "{ev}");
        assert_eq!(
            o["metadata"]["resourceVersion"], rows[0]["object"]["metadata"]["resourceVersion"],
            "{ev}"
        );
        &rows[0]["object"]["metadata"]
    } else {
        &o["metadata"]
    };
    Seen {
        kind: ev["type"].as_str().unwrap().to_owned(),
        object_kind: o["kind"].as_str().unwrap().to_owned(),
        name: meta["name"].as_str().unwrap_or_default().to_owned(),
        rv: meta["resourceVersion"].as_str().unwrap().parse().unwrap(),
        initial_end: meta["annotations"]["k8s.io/initial-events-end"] == "true",
    }
}

/// A watch's events as they arrive, JSON lines or length-prefixed protobuf frames.
struct Events {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
    protobuf: bool,
}

impl Events {
    /// The next event within `within`; panics naming `what` otherwise.
    async fn next(&mut self, within: Duration, what: &str) -> Seen {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.protobuf && self.buf.len() >= 4 {
                let n = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + n {
                    let frame: Vec<u8> = self.buf.drain(..4 + n).skip(4).collect();
                    return seen_protobuf(&frame);
                }
            }
            if !self.protobuf
                && let Some(i) = self.buf.iter().position(|b| *b == b'\n')
            {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return seen_json(&line);
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .unwrap_or_else(|_| panic!("{what}: no event within {within:?}"))
                .unwrap_or_else(|| panic!("{what}: the watch ended"))
                .unwrap();
            self.buf.extend_from_slice(&chunk);
        }
    }
}

/// Bookmarks pass every filter (issue 39, item 3). Teleport's per-object RBAC filter dropped
/// BOOKMARK events (they name no object) and every client-go >= 0.35 informer hung
/// (teleport#64188, k9s#4186). Here every kind of narrowed or converted WatchList — a node's
/// (Node authorizer), a user bound to one namespace, a user with only `watch` on one
/// ConfigMap by name, label-, field- and shard-selected, PartialObjectMetadata (JSON and
/// protobuf) and Table — gets its initial events, then exactly one BOOKMARK annotated
/// `k8s.io/initial-events-end`, in its format's shape (kube-apiserver 1.35's: for a Table, on
/// the row's PartialObjectMetadata), then a periodic BOOKMARK without the annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_reach_every_authorized_selected_and_converted_watchlist() {
    let every = Duration::from_secs(2);
    let s = TestServer::start_cached(
        ServerConfig::default(),
        CacheConfig::default().bookmark_interval(every),
        |_| {},
        ResourceDef::builtins(),
        None,
        |s| s.with_auth(auth_config(false)),
    )
    .await;
    let base = &s.url;
    let pod = |name: &str, node: &str, secret: &str, cm: &str| {
        TestPod::new("a", name)
            .node(node)
            .container("c", "busybox")
            .secret_volume("s", secret)
            .config_map_volume("c", cm)
            .value()
    };
    s.seed("/api/v1/namespaces/a/pods", &pod("p1", "n1", "s1", "cm1"))
        .await;
    s.seed("/api/v1/namespaces/a/pods", &pod("p2", "n2", "s2", "cm2"))
        .await;
    for (kind, plural, ns, name, tier) in [
        ("Secret", "secrets", "a", "s1", ""),
        ("Secret", "secrets", "a", "s2", ""),
        ("ConfigMap", "configmaps", "a", "cm1", ""),
        ("ConfigMap", "configmaps", "a", "cm2", ""),
        ("ConfigMap", "configmaps", "team", "cm-one", "web"),
        ("ConfigMap", "configmaps", "team", "cm-two", "db"),
        ("ConfigMap", "configmaps", "other", "cm-x", "web"),
    ] {
        s.seed(
            &format!("/api/v1/namespaces/{ns}/{plural}"),
            &json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"name": name, "labels": {"tier": tier}}}),
        )
        .await;
    }
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/team";
    for (role, verbs, names, user) in [
        ("cm-reader", json!(["list", "watch"]), json!([]), "alice"),
        (
            "cm-one-watcher",
            json!(["watch"]),
            json!(["cm-one"]),
            "rita",
        ),
    ] {
        s.seed(&format!("{rbac}/roles"), &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": role},
            "rules": [{"verbs": verbs, "apiGroups": [""], "resources": ["configmaps"],
                       "resourceNames": names}]}))
        .await;
        s.seed(&format!("{rbac}/rolebindings"), &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": role},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"kind": "Role", "name": role, "apiGroup": "rbac.authorization.k8s.io"}}))
        .await;
    }
    let team = format!("{base}/api/v1/namespaces/team/configmaps");
    until_status(&team, "alice-token", StatusCode::OK).await;
    let one = "fieldSelector=metadata.name%3Dcm-one";
    until_status(
        &format!("{team}?watch=1&{one}&timeoutSeconds=1"),
        "rita-token",
        StatusCode::OK,
    )
    .await;
    // Each identity is narrowed: what it watches below is all it may watch.
    for (token, path) in [
        ("alice-token", "/api/v1/namespaces/other/configmaps"),
        ("alice-token", "/api/v1/configmaps"),
        (
            "rita-token",
            "/api/v1/namespaces/team/configmaps?fieldSelector=metadata.name%3Dcm-two",
        ),
        ("rita-token", "/api/v1/namespaces/team/configmaps"),
        ("n1-token", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2"),
        (
            "n1-token",
            "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Ds2",
        ),
        ("n1-token", "/api/v1/namespaces/a/configmaps"),
    ] {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = format!(
            "{base}{path}{sep}watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        );
        assert_eq!(
            get(&url, Some(token)).await.0,
            StatusCode::FORBIDDEN,
            "{token} {path}"
        );
    }
    // The shard's pods, as a LIST with the same selector answers them.
    let shard = form_urlencoded::byte_serialize(
        b"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
    )
    .collect::<String>();
    let (code, listed) = get(
        &format!("{base}/api/v1/pods?shardSelector={shard}"),
        Some("admin-token"),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{listed}");
    let in_shard: Vec<String> = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    let in_shard: Vec<&str> = in_shard.iter().map(String::as_str).collect();

    const JSON: &str = "application/json";
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    const META_PROTOBUF: &str =
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    const TABLE: &str = "application/json;as=Table;g=meta.k8s.io;v=v1";
    let node_pods = "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1";
    let cases: Vec<(&str, &str, String, &str, Vec<&str>)> = vec![
        (
            "node, its pods",
            "n1-token",
            node_pods.into(),
            JSON,
            vec!["p1"],
        ),
        (
            "node, its pods, protobuf",
            "n1-token",
            node_pods.into(),
            PROTOBUF,
            vec!["p1"],
        ),
        (
            "node, its pods, metadata",
            "n1-token",
            node_pods.into(),
            META,
            vec!["p1"],
        ),
        (
            "node, its pods, metadata protobuf",
            "n1-token",
            node_pods.into(),
            META_PROTOBUF,
            vec!["p1"],
        ),
        (
            "node, its pods, Table",
            "n1-token",
            node_pods.into(),
            TABLE,
            vec!["p1"],
        ),
        (
            "node, its secret by name",
            "n1-token",
            "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Ds1".into(),
            PROTOBUF,
            vec!["s1"],
        ),
        (
            "node, its configmap by name",
            "n1-token",
            "/api/v1/namespaces/a/configmaps?fieldSelector=metadata.name%3Dcm1".into(),
            JSON,
            vec!["cm1"],
        ),
        (
            "one namespace",
            "alice-token",
            "/api/v1/namespaces/team/configmaps".into(),
            JSON,
            vec!["cm-one", "cm-two"],
        ),
        (
            "one namespace, metadata",
            "alice-token",
            "/api/v1/namespaces/team/configmaps".into(),
            META,
            vec!["cm-one", "cm-two"],
        ),
        (
            "one namespace, Table",
            "alice-token",
            "/api/v1/namespaces/team/configmaps".into(),
            TABLE,
            vec!["cm-one", "cm-two"],
        ),
        (
            "one namespace, label-selected, protobuf",
            "alice-token",
            "/api/v1/namespaces/team/configmaps?labelSelector=tier%3Dweb".into(),
            PROTOBUF,
            vec!["cm-one"],
        ),
        (
            "watch only, one name",
            "rita-token",
            format!("/api/v1/namespaces/team/configmaps?{one}"),
            JSON,
            vec!["cm-one"],
        ),
        (
            "watch only, one name, Table",
            "rita-token",
            format!("/api/v1/namespaces/team/configmaps?{one}"),
            TABLE,
            vec!["cm-one"],
        ),
        (
            "label-selected",
            "admin-token",
            "/api/v1/configmaps?labelSelector=tier%3Dweb".into(),
            JSON,
            vec!["cm-one", "cm-x"],
        ),
        (
            "field-selected, metadata protobuf",
            "admin-token",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2".into(),
            META_PROTOBUF,
            vec!["p2"],
        ),
        (
            "field-selected, nothing matches, Table",
            "admin-token",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn9".into(),
            TABLE,
            vec![],
        ),
        (
            "shard-selected",
            "admin-token",
            format!("/api/v1/pods?shardSelector={shard}"),
            JSON,
            in_shard.clone(),
        ),
        (
            "shard-selected, protobuf",
            "admin-token",
            format!("/api/v1/pods?shardSelector={shard}"),
            PROTOBUF,
            in_shard,
        ),
    ];
    let runs = cases.into_iter().map(|(case, token, path, accept, want)| async move {
        let sep = if path.contains('?') { '&' } else { '?' };
        // A new client per watch: its first request, so plain JSON and protobuf are served by
        // the fast path and conversions by hyper, each as in production.
        let resp = Client::new()
            .get(format!("{base}{path}{sep}watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"))
            .bearer_auth(token)
            .header("Accept", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{case}");
        let mut events = Events {
            body: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
            protobuf: accept.starts_with(PROTOBUF),
        };
        let object_kind = |kind: &str| match accept {
            META | META_PROTOBUF => "PartialObjectMetadata".to_owned(),
            TABLE => "Table".to_owned(),
            _ => kind.to_owned(),
        };
        let kind = if path.contains("/pods") {
            "Pod"
        } else if path.contains("/secrets") {
            "Secret"
        } else {
            "ConfigMap"
        };
        let mut initial = Vec::new();
        let end = loop {
            let ev = events.next(Duration::from_secs(5), case).await;
            if ev.kind != "ADDED" {
                break ev;
            }
            assert_eq!(ev.object_kind, object_kind(kind), "{case}: {ev:?}");
            initial.push(ev.name);
        };
        initial.sort();
        assert_eq!(initial, want, "{case}: the initial events");
        assert_eq!(
            (end.kind.as_str(), end.initial_end, end.object_kind.as_str()),
            ("BOOKMARK", true, object_kind(kind).as_str()),
            "{case}: the initial events end with the annotated bookmark: {end:?}"
        );
        // Nothing changes meanwhile: the next event is a periodic bookmark, a period later
        // (at most a 1 s tick late), not annotated.
        let periodic = events.next(every + Duration::from_secs(2), case).await;
        assert_eq!(
            (periodic.kind.as_str(), periodic.initial_end, periodic.object_kind.as_str()),
            ("BOOKMARK", false, object_kind(kind).as_str()),
            "{case}: a periodic bookmark: {periodic:?}"
        );
        assert!(periodic.rv >= end.rv, "{case}: {periodic:?} after {end:?}");
    });
    futures_util::future::join_all(runs).await;
}

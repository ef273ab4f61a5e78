//! Authentication over TLS with real clients: the official Python client with client-certificate
//! kubeconfigs (CN the user, O the groups, verified against the client CA) and with a bearer
//! token, RBAC deciding what each may do, and a client without credentials refused.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use serde_json::Value;
use support::pki::{Ca, Issued};
use support::server::TestServer;
use watchcache::ResourceDef;
use watchcache_server::auth::{AuthConfig, Authenticator, Mode, RbacObjects, TokenFile};
use watchcache_server::{ServerConfig, TlsConfig};

fn b64(p: &Path) -> String {
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap())
}

/// A kubeconfig for `url` trusting `ca`, as `user` (a client certificate or a token).
fn kubeconfig(dir: &Path, name: &str, url: &str, ca: &Path, user: &str) -> PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            b64(ca)
        ),
    )
    .unwrap();
    path
}

fn cert_user(issued: &Issued) -> String {
    format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(&issued.cert_file),
        b64(&issued.key_file)
    )
}

/// Runs a Python snippet with the official client loaded from `kubeconfig`; prints JSON lines.
/// Each call is `python -c SCRIPT KUBECONFIG ACTION`; the script answers the HTTP status.
const SCRIPT: &str = r#"
import json, sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
action = sys.argv[2]
try:
    if action == "list-secrets":
        items = core.list_namespaced_secret("default").items
        print(json.dumps({"status": 200, "names": sorted(s.metadata.name for s in items)}))
    elif action == "create-secret":
        core.create_namespaced_secret("default", client.V1Secret(
            metadata=client.V1ObjectMeta(name="db"), string_data={"password": "x"}))
        print(json.dumps({"status": 201}))
    elif action == "list-pods":
        items = core.list_namespaced_pod("default").items
        print(json.dumps({"status": 200, "names": [p.metadata.name for p in items]}))
except ApiException as e:
    body = json.loads(e.body) if e.body else {}
    print(json.dumps({"status": e.status, "reason": body.get("reason"), "message": body.get("message")}))
"#;

fn python(kubeconfig: &Path, action: &str) -> Value {
    let out = Command::new(support::venv::bin("python"))
        .arg("-c")
        .arg(SCRIPT)
        .arg(kubeconfig)
        .arg(action)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{action}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{action}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_authenticates_with_certificates_and_tokens_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let serving = ca.server("serving");
    let admin = ca.client("admin", "kubernetes-admin", &["system:masters"]);
    let alice = ca.client("alice", "alice", &["devs"]);
    // Issue 20, item 11: X.509 v1 certificates (`openssl x509 -req`) failed the handshake.
    let carol_v1 = ca.client_v1("carol", "carol", &["devs"]);
    let stranger_v1 =
        Ca::new(dir.path(), "stranger-v1-ca").client_v1("eve", "eve", &["system:masters"]);
    // Signed by a CA the server does not trust: the handshake refuses it.
    let stranger =
        Ca::new(dir.path(), "stranger-ca").client("mallory", "mallory", &["system:masters"]);
    let tls = TlsConfig::new(&serving.cert_file, &serving.key_file).with_client_ca(&ca.cert_file);
    let auth = AuthConfig {
        authenticator: Authenticator {
            client_certs: true,
            tokens: Some(TokenFile::parse("tokens.csv", "bob-token,bob,7,devs\n").unwrap()),
            service_accounts: None,
            anonymous: false,
        },
        modes: vec![Mode::Node, Mode::Rbac],
        rbac_bootstrap: RbacObjects::default(),
    };
    let s = TestServer::start_full(
        ServerConfig::default(),
        |_| {},
        ResourceDef::builtins(),
        Some(tls),
        |server| server.with_auth(auth),
    )
    .await;
    assert!(s.url.starts_with("https://"), "{}", s.url);
    let d = dir.path();
    let as_admin = kubeconfig(d, "admin", &s.url, &ca.cert_file, &cert_user(&admin));
    let as_alice = kubeconfig(d, "alice", &s.url, &ca.cert_file, &cert_user(&alice));
    let as_bob = kubeconfig(d, "bob", &s.url, &ca.cert_file, "    token: bob-token\n");
    let nobody = kubeconfig(d, "nobody", &s.url, &ca.cert_file, "    {}\n");
    let as_stranger = kubeconfig(d, "stranger", &s.url, &ca.cert_file, &cert_user(&stranger));
    let as_carol_v1 = kubeconfig(d, "carol", &s.url, &ca.cert_file, &cert_user(&carol_v1));
    let as_stranger_v1 = kubeconfig(d, "eve", &s.url, &ca.cert_file, &cert_user(&stranger_v1));

    // No credentials: 401 with a Status.
    let v = python(&nobody, "list-pods");
    assert_eq!(v["status"], 401, "{v}");
    assert_eq!(v["reason"], "Unauthorized", "{v}");
    // The admin certificate (O=system:masters) may do everything: its write is authorized, and
    // refused by this read-only server (writes are kube-apiserver's).
    let v = python(&as_admin, "create-secret");
    assert_eq!(
        (v["status"].as_u64(), v["reason"].as_str()),
        (Some(405), Some("MethodNotAllowed")),
        "{v}"
    );
    s.seed(
        "/api/v1/namespaces/default/secrets",
        &serde_json::json!({"metadata": {"name": "db"}, "data": {"password": "eA=="}}),
    )
    .await;
    // alice (CN=alice, O=devs) is authenticated, but no rule grants her secrets: 403 with
    // upstream's message naming her.
    let v = python(&as_alice, "list-secrets");
    assert_eq!(v["status"], 403, "{v}");
    assert_eq!(
        v["message"],
        r#"secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "default""#
    );
    assert_eq!(python(&as_bob, "list-secrets")["status"], 403);
    // The group devs is granted read access to secrets in etcd (as kube-apiserver stores it),
    // read back by the RBAC authorizer from the cache.
    s.seed(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &serde_json::json!({"metadata": {"name": "secret-reader"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]}),
    )
    .await;
    s.seed(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        &serde_json::json!({"metadata": {"name": "devs-read-secrets"},
            "subjects": [{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"kind": "ClusterRole", "name": "secret-reader",
                "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
    let started = std::time::Instant::now();
    loop {
        let v = python(&as_alice, "list-secrets");
        if v["status"] == 200 {
            assert_eq!(v["names"], serde_json::json!(["db"]));
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "the grant never took effect: {v}"
        );
    }
    // The same group through a token, and through a v1 certificate (verified by the same rules
    // as kube-apiserver's: the chain to the client CA, the validity period).
    assert_eq!(python(&as_bob, "list-secrets")["status"], 200);
    let v = python(&as_carol_v1, "list-secrets");
    assert_eq!(v["status"], 200, "{v}");
    let v = python(&as_carol_v1, "list-pods");
    assert_eq!(v["status"], 403, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains(r#"User "carol""#),
        "{v}"
    );
    // A certificate from another CA fails the handshake, v3 or v1: the client never gets an
    // answer.
    for (who, kubeconfig) in [("v3", &as_stranger), ("v1", &as_stranger_v1)] {
        let out = Command::new(support::venv::bin("python"))
            .arg("-c")
            .arg(SCRIPT)
            .arg(kubeconfig)
            .arg("list-pods")
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "a stranger's {who} certificate was accepted: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

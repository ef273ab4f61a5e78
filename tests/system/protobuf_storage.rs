//! Real Kubernetes data through the real binary: every upstream vector (bytes written by Kubernetes
//! 1.35's own storage codec, tests/data/kubernetes-protobuf) is put into a real etcd under the key
//! kube-apiserver uses, including secrets encrypted at rest with aescbc, aesgcm and secretbox;
//! `watchcache serve --etcd ... --encryption-provider-config ...` serves them, and LIST, GET and
//! WATCH answer exactly upstream's JSON (with resourceVersion = the etcd revision).

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::Client;
use serde_json::Value;
use watchcache_etcd::free_port;

/// Bytes made by Kubernetes' own serializers.
fn data(name: &str) -> String {
    let dir = support::repo().join("tests/data/kubernetes-protobuf");
    dir.join(name).display().to_string()
}

/// (vector, API path of the collection, namespace, name, etcd key) as the vectors' README lists them.
const STORED: &[(&str, &str, Option<&str>, &str, &str)] = &[
    (
        "pod",
        "/api/v1/pods",
        Some("default"),
        "web-7d4b9c-x2k8p",
        "/registry/pods/default/web-7d4b9c-x2k8p",
    ),
    (
        "node",
        "/api/v1/nodes",
        None,
        "node-1",
        "/registry/minions/node-1",
    ),
    (
        "namespace",
        "/api/v1/namespaces",
        None,
        "team-a",
        "/registry/namespaces/team-a",
    ),
    (
        "service",
        "/api/v1/services",
        Some("default"),
        "web",
        "/registry/services/specs/default/web",
    ),
    (
        "endpointslice",
        "/apis/discovery.k8s.io/v1/endpointslices",
        Some("default"),
        "web-x7k2q",
        "/registry/endpointslices/default/web-x7k2q",
    ),
    (
        "lease",
        "/apis/coordination.k8s.io/v1/leases",
        Some("kube-node-lease"),
        "node-1",
        "/registry/leases/kube-node-lease/node-1",
    ),
    (
        "event",
        "/api/v1/events",
        Some("default"),
        "web-7d4b9c-x2k8p.18a9f3c2d4e5b6a7",
        "/registry/events/default/web-7d4b9c-x2k8p.18a9f3c2d4e5b6a7",
    ),
    (
        "configmap",
        "/api/v1/configmaps",
        Some("default"),
        "web-config",
        "/registry/configmaps/default/web-config",
    ),
    (
        "zero-pod",
        "/api/v1/pods",
        Some("default"),
        "zero",
        "/registry/pods/default/zero",
    ),
];

const SECRET_KEY: &str = "/registry/secrets/default/db-credentials";

fn read(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).unwrap()
}

/// Upstream's JSON for a vector, at revision `rv`.
fn expected(name: &str, rv: i64) -> Value {
    let mut v: Value = serde_json::from_slice(&read(&format!("{name}.json"))).unwrap();
    v["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    v
}

/// The same object as an item of a typed list: upstream leaves kind and apiVersion out.
fn as_item(mut v: Value) -> Value {
    let m = v.as_object_mut().unwrap();
    m.remove("kind");
    m.remove("apiVersion");
    v
}

/// `/api/v1/namespaces/default/pods` for `/api/v1/pods` in namespace default.
fn collection(path: &str, ns: Option<&str>) -> String {
    match ns {
        None => path.to_owned(),
        Some(ns) => {
            let (base, plural) = path.rsplit_once('/').unwrap();
            format!("{base}/namespaces/{ns}/{plural}")
        }
    }
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn serve(etcd_url: &str, dir: &std::path::Path) -> (Serve, String) {
    serve_with(etcd_url, dir, &data("encryption-config.yaml")).await
}

async fn serve_with(etcd_url: &str, dir: &std::path::Path, config: &str) -> (Serve, String) {
    let port = free_port().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .args([
            "serve",
            "--etcd",
            etcd_url,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--data-dir")
        .arg(dir)
        .arg("--encryption-provider-config")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let child = Serve(child);
    let base = format!("http://127.0.0.1:{port}");
    let c = Client::new();
    for _ in 0..300 {
        if let Ok(r) = c.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return (child, base);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("watchcache serve did not become ready");
}

async fn get(c: &Client, url: &str) -> Value {
    let r = c.get(url).send().await.unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.json().await.unwrap()
}

/// The first `n` events of a watch, as JSON lines.
async fn watch(c: &Client, url: &str, n: usize) -> Vec<Value> {
    use futures_util::StreamExt;
    let r = c.get(url).send().await.unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    let mut body = r.bytes_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while out.len() < n {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .unwrap_or_else(|_| panic!("{url}: {} of {n} events", out.len()))
            .unwrap_or_else(|| {
                panic!(
                    "{url}: stream ended after {out:?} {}",
                    String::from_utf8_lossy(&buf)
                )
            })
            .unwrap();
        buf.extend_from_slice(&chunk);
        // The first `n` lines: one chunk can carry more (the fast path writes the events that
        // are ready together).
        while let Some(i) = buf.iter().position(|&b| b == b'\n')
            && out.len() < n
        {
            let line: Vec<u8> = buf.drain(..=i).collect();
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}

async fn decode_errors(c: &Client, base: &str, resource: &str) -> u64 {
    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.contains("decode_errors") && l.contains(&format!("resource=\"{resource}\"")))
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_protobuf_and_encrypted_values_are_served_as_upstreams_json() {
    let etcd = support::etcd::etcd().await;
    let url = etcd.server.url();
    let mut kv = support::etcd::client(std::slice::from_ref(&url)).await;
    let mut revs = Vec::new();
    for (name, _, _, _, key) in STORED {
        let r = kv
            .put(*key, read(&format!("{name}.etcd.bin")), None)
            .await
            .unwrap();
        revs.push(r.header().unwrap().revision());
    }
    let r = kv
        .put(SECRET_KEY, read("secret.aescbc.etcd.bin"), None)
        .await
        .unwrap();
    let secret_rev = r.header().unwrap().revision();
    // Bad values: counted decode errors, the rest is served.
    kv.put(
        "/registry/configmaps/default/garbage",
        b"k8s\0\x0a\xff\x01".to_vec(),
        None,
    )
    .await
    .unwrap();
    let mut cr = b"k8s\0\x0a\x18\x0a\x0eexample.com/v1\x12\x06Widget\x12\x07".to_vec();
    cr.extend_from_slice(b"{\"a\":1}");
    kv.put("/registry/configmaps/default/json-behind-prefix", cr, None)
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = serve(&url, dir.path()).await;
    let c = Client::new();

    for ((name, path, ns, obj, _), rev) in STORED.iter().zip(&revs) {
        let want = expected(name, *rev);
        let coll = collection(path, *ns);
        assert_eq!(
            get(&c, &format!("{base}{coll}/{obj}")).await,
            want,
            "GET {name}"
        );
        let list = get(
            &c,
            &format!("{base}{coll}?fieldSelector=metadata.name={obj}"),
        )
        .await;
        assert_eq!(
            list["items"],
            Value::Array(vec![as_item(want)]),
            "LIST {name}"
        );
    }
    let secret = format!("{base}/api/v1/namespaces/default/secrets/db-credentials");
    assert_eq!(
        get(&c, &secret).await,
        expected("secret", secret_rev),
        "GET aescbc secret"
    );

    // Indexes, selectors and triggers work on protobuf objects as on JSON ones.
    let pods = get(
        &c,
        &format!("{base}/api/v1/pods?fieldSelector=spec.nodeName=node-1,status.phase=Running&labelSelector=tier=frontend"),
    )
    .await;
    let names: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web-7d4b9c-x2k8p"]);
    let unscheduled = get(
        &c,
        &format!("{base}/api/v1/pods?fieldSelector=spec.nodeName="),
    )
    .await;
    assert_eq!(unscheduled["items"][0]["metadata"]["name"], "zero");
    let opaque = get(
        &c,
        &format!("{base}/api/v1/secrets?fieldSelector=type=Opaque"),
    )
    .await;
    assert_eq!(opaque["items"].as_array().unwrap().len(), 1);

    // WATCH: the initial state, then the secret re-encrypted by each provider in turn (aesgcm binds
    // the key, so it is read back under the right one), all as upstream's JSON.
    let initial = watch(
        &c,
        &format!("{base}/api/v1/namespaces/default/pods?watch=1&resourceVersion=0"),
        2,
    )
    .await;
    let mut got: Vec<Value> = initial.iter().map(|e| e["object"].clone()).collect();
    got.sort_by_key(|o| o["metadata"]["name"].as_str().unwrap().to_owned());
    assert_eq!(
        got,
        [expected("pod", revs[0]), expected("zero-pod", revs[8])]
    );
    assert!(initial.iter().all(|e| e["type"] == "ADDED"));

    let from = get(&c, &format!("{base}/api/v1/secrets")).await["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watcher = {
        let c = c.clone();
        let url =
            format!("{base}/api/v1/namespaces/default/secrets?watch=1&resourceVersion={from}");
        tokio::spawn(async move { watch(&c, &url, 3).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut secret_revs = Vec::new();
    for p in ["aesgcm", "secretbox", "aescbc"] {
        let r = kv
            .put(SECRET_KEY, read(&format!("secret.{p}.etcd.bin")), None)
            .await
            .unwrap();
        secret_revs.push(r.header().unwrap().revision());
    }
    let events = watcher.await.unwrap();
    for (e, rev) in events.iter().zip(&secret_revs) {
        assert_eq!(e["type"], "MODIFIED");
        assert_eq!(e["object"], expected("secret", *rev));
    }

    // Undecodable values are counted per resource, never served and never fatal.
    // (Each read that meets them counts them: consistent LISTs on this etcd read etcd itself.)
    assert!(decode_errors(&c, &base, "configmaps").await >= 2);
    let cms = get(&c, &format!("{base}/api/v1/configmaps")).await;
    assert_eq!(cms["items"].as_array().unwrap().len(), 1);
    // A value no configured key decrypts (here: encrypted under another etcd key, which aesgcm
    // authenticates) is one more.
    let before = decode_errors(&c, &base, "secrets").await;
    kv.put(
        "/registry/secrets/default/moved",
        read("secret.aesgcm.etcd.bin"),
        None,
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while decode_errors(&c, &base, "secrets").await == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no decode error counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_secret_is_a_decode_error_when_identity_is_not_configured() {
    let etcd = support::etcd::etcd().await;
    let url = etcd.server.url();
    let mut kv = support::etcd::client(std::slice::from_ref(&url)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("enc.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - secretbox:\n          keys:\n            - name: key3\n              secret: QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=\n",
    )
    .unwrap();
    let (_server, base) = serve_with(&url, dir.path(), config.to_str().unwrap()).await;
    let c = Client::new();
    // The upstream's plain secret is refused by these providers: a counted decode error.
    kv.put(SECRET_KEY, read("secret.etcd.bin"), None)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while decode_errors(&c, &base, "secrets").await == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no decode error counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn kms_providers_are_a_start_up_error_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("enc.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - kms:\n          apiVersion: v2\n          name: my-kms\n          endpoint: unix:///tmp/kms.sock\n      - identity: {}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .args([
            "serve",
            "--etcd",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--encryption-provider-config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("KMS") && err.contains("my-kms"), "{err}");
}

//! Every built-in resource kube-apiserver 1.35 stores, served by default over a real etcd:
//! discovery as kube-apiserver's own (its aggregated discovery, recorded in
//! tests/data/kube-apiserver-1.35), the objects it wrote read and shown as its Tables, field
//! selectors accepted and refused as its field label conversion, and events.k8s.io/v1 served
//! from the core events both APIs share.

use crate::support;

use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use support::etcd::{client, put_rev};
use support::server::TestServer;
use watchcache_server::ServerConfig;

/// What kube-apiserver 1.35 wrote to etcd, and its answers.
fn dir() -> std::path::PathBuf {
    support::repo().join("tests/data/kube-apiserver-1.35")
}

fn data(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap()
}

fn json_data(name: &str) -> Value {
    serde_json::from_slice(&data(name)).unwrap()
}

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

async fn get(c: &Client, url: &str, accept: &str) -> (StatusCode, Value) {
    let r = c.get(url).header("accept", accept).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

/// Every resource of a discovery document: (group, version, resource) → its entry.
fn resources(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for g in doc["items"].as_array().unwrap() {
        let group = g["metadata"]["name"].as_str().unwrap_or("").to_owned();
        for v in g["versions"].as_array().unwrap() {
            for r in v["resources"].as_array().unwrap() {
                out.push((
                    group.clone(),
                    v["version"].as_str().unwrap().to_owned(),
                    r.clone(),
                ));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_every_stored_resource_as_kube_apiserver_does() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = Client::new();
    let mut ours = Vec::new();
    for path in ["/api", "/apis"] {
        let (st, doc) = get(&c, &format!("{}{path}", s.url), AGGREGATED).await;
        assert_eq!(st, StatusCode::OK);
        ours.extend(resources(&doc));
    }
    let mut upstream = resources(&json_data("discovery-api.json"));
    upstream.extend(resources(&json_data("discovery-apis.json")));
    let mut checked = 0;
    for (group, version, want) in &upstream {
        let name = want["resource"].as_str().unwrap();
        let stored = want["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "watch");
        let found = ours
            .iter()
            .find(|(g, v, r)| g == group && v == version && r["resource"] == want["resource"]);
        if !stored {
            // Not stored in etcd (bindings, reviews, componentstatuses): not cached.
            assert!(
                found.is_none(),
                "{group}/{version} {name} is not stored upstream"
            );
            continue;
        }
        if group == "autoscaling" && version == "v1" {
            // Only the preferred version, v2, is served (design/semantics.md).
            assert!(found.is_none());
            continue;
        }
        let (_, _, got) = found.unwrap_or_else(|| panic!("{group}/{version} {name} is not served"));
        for field in [
            "responseKind",
            "scope",
            "singularResource",
            "shortNames",
            "categories",
        ] {
            let want_field = if field == "responseKind" {
                json!(want[field]["kind"])
            } else {
                want[field].clone()
            };
            let got_field = if field == "responseKind" {
                json!(got[field]["kind"])
            } else {
                got[field].clone()
            };
            assert_eq!(got_field, want_field, "{group}/{version} {name}: {field}");
        }
        checked += 1;
    }
    assert_eq!(checked, 57);
    // The legacy documents list them too.
    let (_, core) = get(&c, &format!("{}/api/v1", s.url), "application/json").await;
    let core: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .filter(|n| !n.contains('/'))
        .collect();
    for want in [
        "configmaps",
        "endpoints",
        "events",
        "limitranges",
        "namespaces",
        "nodes",
        "persistentvolumeclaims",
        "persistentvolumes",
        "pods",
        "podtemplates",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "serviceaccounts",
        "services",
    ] {
        assert!(core.contains(&want), "/api/v1 lacks {want}: {core:?}");
    }
    let (_, apps) = get(&c, &format!("{}/apis/apps/v1", s.url), "application/json").await;
    let apps: Vec<&str> = apps["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .filter(|n| !n.contains('/'))
        .collect();
    for want in [
        "controllerrevisions",
        "daemonsets",
        "deployments",
        "replicasets",
        "statefulsets",
    ] {
        assert!(apps.contains(&want), "/apis/apps/v1 lacks {want}: {apps:?}");
    }
}

/// Every object of tests/data/kube-apiserver-1.35 put into etcd as kube-apiserver wrote it.
async fn seeded() -> (TestServer, Vec<(String, String, String, u64)>) {
    let s = TestServer::start(ServerConfig::default()).await;
    let mut etcd = client(&[s.etcd.server.url()]).await;
    let mut objects = Vec::new();
    for line in String::from_utf8(data("objects.txt")).unwrap().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let rev = put_rev(&mut etcd, f[1], data(&format!("{}.etcd.bin", f[0]))).await;
        let obj = json_data(&format!("{}.json", f[0]));
        // `NAME-more` is another object of resource NAME.
        let path = object_path(f[0].split('-').next().unwrap_or_default(), &obj);
        objects.push((f[0].to_owned(), f[1].to_owned(), path, rev));
    }
    (s, objects)
}

/// The URL path of an object, from its resource name and its JSON.
fn object_path(resource: &str, obj: &Value) -> String {
    let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
    let av = obj["apiVersion"].as_str().unwrap();
    let base = if group.is_empty() {
        format!("/api/{av}")
    } else {
        format!("/apis/{av}")
    };
    let name = obj["metadata"]["name"].as_str().unwrap();
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}/{name}"),
        None => format!("{base}/{plural}/{name}"),
    }
}

/// Cells that are durations until now: equal when computed at the same time.
fn is_duration(column: &str) -> bool {
    matches!(
        column,
        "Age" | "Last Seen" | "First Seen" | "Duration" | "Last Schedule"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_kube_apiserver_wrote_are_shown_as_its_tables() {
    let (s, objects) = seeded().await;
    let c = Client::new();
    for (name, _, path, rev) in &objects {
        let url = format!("{}{path}?includeObject=None&resourceVersion={rev}", s.url);
        // The cache holds the object once it reached that revision (a consistent read waits).
        let (st, got) = get(&c, &url, TABLE).await;
        assert_eq!(st, StatusCode::OK, "{name}: {got}");
        let want = json_data(&format!("{name}.table.json"));
        assert_eq!(
            got["columnDefinitions"], want["columnDefinitions"],
            "{name}: columns"
        );
        let cols = want["columnDefinitions"].as_array().unwrap();
        // kube-apiserver's IPAddress printer writes an age cell it declares no column for;
        // watchcache too (a hidden column).
        let (gc, wc) = (&got["rows"][0]["cells"], &want["rows"][0]["cells"]);
        assert_eq!(
            gc.as_array().map(Vec::len),
            wc.as_array().map(Vec::len),
            "{name}: {gc} vs {wc}"
        );
        for (i, col) in cols.iter().enumerate() {
            let col = col["name"].as_str().unwrap();
            if (name.as_str(), col) == ("persistentvolumeclaims", "Status") {
                // kube-apiserver defaults status.phase (Pending) when it reads the stored claim,
                // which lacks it; watchcache shows what is stored (design/semantics.md).
                assert_eq!((&gc[i], &wc[i]), (&json!(""), &json!("Pending")));
                continue;
            }
            if is_duration(col)
                && wc[i]
                    .as_str()
                    .is_some_and(|w| w.ends_with(['s', 'm', 'h', 'd', 'y']))
            {
                // Computed when kube-apiserver served it; here a duration since the same
                // timestamp, now.
                let cell = gc[i].as_str().unwrap();
                assert!(
                    cell.ends_with(['s', 'm', 'h', 'd', 'y'])
                        && cell.starts_with(|c: char| c.is_ascii_digit()),
                    "{name}: {col} = {cell}"
                );
                continue;
            }
            assert_eq!(gc[i], wc[i], "{name}: column {col}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_are_kube_apiservers() {
    let (s, objects) = seeded().await;
    let c = Client::new();
    // Consistent reads (no resourceVersion): every seeded object is there.
    assert!(!objects.is_empty());
    let list = |path: &str| format!("{}{path}", s.url);
    // Refused as kube-apiserver refuses them, with its message.
    for (path, message) in [
        (
            "/api/v1/configmaps?fieldSelector=data.a%3D1",
            r#""data.a" is not a known field selector: only "metadata.name", "metadata.namespace""#,
        ),
        (
            "/api/v1/nodes?fieldSelector=metadata.namespace%3Dx",
            "field label not supported: metadata.namespace",
        ),
        (
            "/apis/batch/v1/jobs?fieldSelector=status.foo%3D1",
            r#"field label "status.foo" not supported for Job"#,
        ),
        (
            "/apis/events.k8s.io/v1/events?fieldSelector=source%3Dx",
            "field label not supported: source",
        ),
        (
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.pool%3Dp",
            "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool",
        ),
        (
            "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-1,spec.foo%3D1",
            "field label not supported: spec.foo",
        ),
    ] {
        let (st, body) = get(&c, &list(path), "application/json").await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["reason"], "BadRequest", "{path}");
        assert_eq!(body["message"], message, "{path}");
    }
    // Accepted, with kube-apiserver's renames and the values of absent fields.
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for (path, want) in [
        (
            "/api/v1/pods?fieldSelector=spec.host%3Dnode-1",
            vec!["pod1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.hostNetwork%3Dfalse",
            vec!["pod1"],
        ),
        (
            "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse",
            vec!["node-1"],
        ),
        (
            "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue",
            vec![],
        ),
        (
            "/apis/batch/v1/jobs?fieldSelector=status.successful%3D0",
            vec!["job1"],
        ),
        (
            "/api/v1/replicationcontrollers?fieldSelector=status.replicas%3D0",
            vec!["rc1"],
        ),
        (
            "/apis/events.k8s.io/v1/events?fieldSelector=regarding.name%3Dpod1,reportingController%3Dexample.com/ctl",
            vec!["ev2"],
        ),
        (
            "/api/v1/events?fieldSelector=involvedObject.name%3Dpod1,reportingComponent%3Dexample.com/ctl",
            vec!["ev2"],
        ),
        (
            "/api/v1/namespaces/demo/events?fieldSelector=source%3Dkubelet",
            vec!["ev1"],
        ),
        (
            "/apis/certificates.k8s.io/v1/certificatesigningrequests?fieldSelector=spec.signerName%3Dexample.com/signer",
            vec!["csr1"],
        ),
        (
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-1",
            vec!["slice1"],
        ),
    ] {
        let (st, body) = get(&c, &list(path), "application/json").await;
        assert_eq!(st, StatusCode::OK, "{path}: {body}");
        assert_eq!(names(&body), want, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_k8s_io_serves_the_core_events_both_apis_share() {
    let (s, objects) = seeded().await;
    let c = Client::new();
    // The events cache's revision is its last event's (ev2's) until a progress notification.
    let last = objects
        .iter()
        .filter(|o| o.0 == "events.events.k8s.io")
        .map(|o| o.3)
        .max()
        .unwrap();
    // The core event kube-apiserver wrote, read through events.k8s.io: converted field by field.
    let url = format!(
        "{}/apis/events.k8s.io/v1/namespaces/demo/events/ev1?resourceVersion={last}",
        s.url
    );
    let (st, ev1) = get(&c, &url, "application/json").await;
    assert_eq!(st, StatusCode::OK, "{ev1}");
    let core = json_data("events.json");
    assert_eq!(ev1["apiVersion"], "events.k8s.io/v1");
    assert_eq!(ev1["regarding"], core["involvedObject"]);
    assert_eq!(ev1["note"], core["message"]);
    assert_eq!(ev1["deprecatedSource"], core["source"]);
    assert_eq!(ev1["deprecatedCount"], core["count"]);
    // A write through events.k8s.io is stored as a core Event (as kube-apiserver stores it)
    // and read by both APIs; a watcher of each sees it.
    let watch = |api: &str| {
        format!(
            "{}/{api}/namespaces/demo/events?watch=1&resourceVersion={last}&fieldSelector=metadata.name%3Dev3&timeoutSeconds=5",
            s.url
        )
    };
    let core_watch = c.get(watch("api/v1")).send();
    let new_watch = c.get(watch("apis/events.k8s.io/v1")).send();
    let (core_watch, new_watch) = tokio::join!(core_watch, new_watch);
    let ev3 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "ev3", "namespace": "demo"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "Scheduled", "note": "placed",
        "type": "Normal", "action": "Binding", "reportingController": "scheduler",
        "reportingInstance": "s-1", "regarding": {"kind": "Pod", "name": "pod1", "namespace": "demo"}});
    // Put into etcd as kube-apiserver stores it (a core v1 Event in protobuf).
    let created = s
        .seed("/apis/events.k8s.io/v1/namespaces/demo/events", &ev3)
        .await;
    assert_eq!(created["note"], "placed");
    let mut etcd = client(&[s.etcd.server.url()]).await;
    let stored = etcd
        .get("/registry/events/demo/ev3", None)
        .await
        .unwrap()
        .kvs()[0]
        .value()
        .to_vec();
    assert!(
        stored.starts_with(b"k8s\0\n\x0b\n\x02v1\x12\x05Event"),
        "{stored:?}"
    );
    for (api, resp) in [("core", core_watch), ("events.k8s.io", new_watch)] {
        let body = tokio::time::timeout(Duration::from_secs(10), resp.unwrap().text())
            .await
            .unwrap()
            .unwrap();
        let first: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
        assert_eq!(first["type"], "ADDED", "{api}");
        let obj = &first["object"];
        if api == "core" {
            assert_eq!(obj["message"], "placed");
            assert_eq!(obj["involvedObject"]["name"], "pod1");
            assert_eq!(obj["reportingComponent"], "scheduler");
        } else {
            assert_eq!(obj["note"], "placed");
            assert_eq!(obj["regarding"]["name"], "pod1");
        }
    }
}

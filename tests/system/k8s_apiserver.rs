//! Real Kubernetes, unchanged, beside watchcache: kube-apiserver 1.35 (built from its Go modules by
//! scripts/k8s-peers) on a real etcd, with encryption at rest and `Node,RBAC`. kubectl works
//! through it, and the client-go conformance program (tests/k8s/conformance) passes against it
//! on both etcd versions: that proves the program right before it judges watchcache. Then
//! `watchcache serve` on the same etcd reads what kube-apiserver wrote, encrypted values too, and
//! a leaf reads kube-apiserver's own LIST and watch in protobuf. And in proxy mode, a node's
//! mirror pod that kube-apiserver's NodeRestriction refuses grants that node nothing in
//! watchcache's Node authorizer (issue 35, A-MIRROR).

use crate::support;

use serde_json::Value;
use support::etcd::{EtcdVersion, etcd_version};
use support::kube::{KubeApiserver, Watchcache, condition, conformance, https_get, wait_items};
use support::kubectl::{Kubectl, must};

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_on_etcd_3_4_serves_kubectl_and_passes_the_conformance_program() {
    let etcd = etcd_version(EtcdVersion::Debian34).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    let ns = json(&k.ok(&["get", "namespaces", "-o", "json"]).await);
    let mut names: Vec<&str> = ns["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );

    // etcd 3.4.23 has no working progress requests (kube-apiserver wants 3.4.31+): kube-apiserver
    // refuses WatchList, and client-go falls back to LIST then WATCH.
    let c = conformance(&kas.admin_kubeconfig, &["--watchlist=optional"]).await;
    c.assert_passed("kube-apiserver on etcd 3.4.23");
    let refused = &c.check("watch/watchlist/initial-events-end").detail;
    assert!(
        refused.starts_with("refused") && refused.contains("RequestWatchProgress is disabled"),
        "{refused}"
    );
    for kind in ["typed", "metadata", "dynamic"] {
        let d = &c.check(&format!("informer/{kind}/watchlist=true")).detail;
        assert!(
            d.starts_with("WatchList refused, client-go fell back"),
            "{d}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_on_etcd_3_6_passes_the_conformance_program_with_watchlist() {
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let c = conformance(&kas.admin_kubeconfig, &["--watchlist=required"]).await;
    c.assert_passed("kube-apiserver on etcd 3.6");
    for kind in ["typed", "metadata", "dynamic"] {
        let d = &c.check(&format!("informer/{kind}/watchlist=true")).detail;
        assert!(d.starts_with("WatchList: "), "{d}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchcache_on_kube_apiservers_etcd_reads_what_it_wrote() {
    let etcd = etcd_version(EtcdVersion::Debian34).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    // A secret (stored with aescbc) and a configmap (secretbox), written by kube-apiserver.
    must(
        &k.run(&[
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=password=hunter2",
        ])
        .await,
        "create secret",
    );
    must(
        &k.run(&["create", "configmap", "c1", "--from-literal=k=v"])
            .await,
        "create configmap",
    );

    let wc = Watchcache::on_etcd(&kas.pki, &etcd.server.url(), &[]).await;
    let ca = &kas.pki.ca.cert_file;
    for path in [
        "/api/v1/namespaces/default",
        "/api/v1/namespaces/default/secrets/s1",
        "/api/v1/namespaces/default/configmaps/c1",
    ] {
        let (code, body) = https_get(&wc.url, ca, Some(&kas.pki.admin), path)
            .await
            .unwrap();
        assert_eq!(code, 200, "GET {path} from watchcache: {body}");
        let (kcode, kbody) = kas.get(path).await;
        assert_eq!(kcode, 200, "GET {path} from kube-apiserver: {kbody}");
        let (ours, theirs) = (json(&body), json(&kbody));
        for field in ["uid", "resourceVersion", "name", "creationTimestamp"] {
            assert_eq!(
                ours["metadata"][field], theirs["metadata"][field],
                "{path}: metadata.{field}"
            );
        }
        assert_eq!(ours["data"], theirs["data"], "{path}: data");
        assert_eq!(ours["spec"], theirs["spec"], "{path}: spec");
    }
    // kubectl through watchcache, with the same admin certificate.
    let kw = Kubectl::with_kubeconfig(&wc.admin_kubeconfig);
    let got = json(&kw.ok(&["get", "secret", "s1", "-o", "json"]).await);
    assert_eq!(got["data"]["password"], "aHVudGVyMg==");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_control_plane_runs_a_deployment_on_hollow_nodes() {
    use support::kube::{Target, controller_manager, hollow_nodes, scheduler};
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let target = Target {
        url: &kas.url,
        ca: &kas.pki.ca.cert_file,
    };
    let dir = kas.dir.path();
    let mut kcm = controller_manager(&kas.pki, target, dir);
    let mut sched = scheduler(&kas.pki, target, dir);
    let mut nodes = hollow_nodes(&kas.pki, target, dir, "hollow", 2);
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    let limit = std::time::Duration::from_secs(120);
    let mut procs: Vec<&mut support::kube::Proc> = vec![&mut kcm, &mut sched];
    procs.extend(nodes.iter_mut());

    let ready = wait_items(
        &k,
        &["get", "nodes", "-o", "json"],
        limit,
        &mut procs,
        |items| items.len() == 2 && items.iter().all(|n| condition(n, "Ready")),
    )
    .await;
    let mut names: Vec<&str> = ready
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["hollow-0", "hollow-1"]);

    must(
        &k.run(&[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "--replicas=3",
        ])
        .await,
        "create deployment",
    );
    let pods = wait_items(
        &k,
        &["get", "pods", "-l", "app=web", "-o", "json"],
        limit,
        &mut procs,
        |items| {
            items.len() == 3
                && items
                    .iter()
                    .all(|p| p["status"]["phase"] == "Running" && condition(p, "Ready"))
        },
    )
    .await;
    for p in &pods {
        let node = p["spec"]["nodeName"].as_str().unwrap();
        assert!(names.contains(&node), "{node}");
    }
}

/// A leaf of kube-apiserver 1.35 lists it (`InitialList::List`) and watches it in protobuf:
/// listed and watched objects alike are stored as kube-apiserver's protobuf, and their JSON is
/// kube-apiserver's. With protobuf off, the same objects are read and stored as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_lists_and_watches_kube_apiserver_in_protobuf() {
    use std::time::Duration;
    use watchcache::ResourceDef;
    use watchcache_kube::{ApiServerCaches, ApiServerConfig, InitialList, client_from_kubeconfig};
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    must(
        &k.run(&["create", "configmap", "listed", "--from-literal=k=v"])
            .await,
        "create configmap",
    );
    let client = client_from_kubeconfig(&kas.admin_kubeconfig, None)
        .await
        .unwrap();
    for protobuf in [true, false] {
        let caches = ApiServerCaches::connect(
            client.clone(),
            ApiServerConfig {
                initial_list: InitialList::List,
                page_size: 500,
                protobuf_watch: protobuf,
                ..ApiServerConfig::default()
            },
            vec![
                ResourceDef::builtin("configmaps").unwrap(),
                ResourceDef::builtin("namespaces").unwrap(),
            ],
            watchcache::CacheConfig::default(),
        )
        .unwrap();
        let (cms, nss) = (
            caches.cache("configmaps").unwrap().clone(),
            caches.cache("namespaces").unwrap().clone(),
        );
        for c in [&cms, &nss] {
            tokio::time::timeout(Duration::from_secs(30), c.wait_ready())
                .await
                .expect("ready in time")
                .unwrap();
        }
        let watched = format!("watched-{protobuf}");
        must(
            &k.run(&["create", "configmap", &watched, "--from-literal=k=w"])
                .await,
            "create configmap",
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while cms.peek(Some("default"), &watched).is_none() {
            assert!(tokio::time::Instant::now() < deadline, "{watched} watched");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // (cache, namespace, name, path, whether it came by LIST).
        for (cache, ns, name, path, by_list) in [
            (
                &cms,
                Some("default"),
                "listed",
                "/api/v1/namespaces/default/configmaps/listed".to_owned(),
                true,
            ),
            (
                &cms,
                Some("default"),
                watched.as_str(),
                format!("/api/v1/namespaces/default/configmaps/{watched}"),
                false,
            ),
            (
                &nss,
                None,
                "kube-system",
                "/api/v1/namespaces/kube-system".to_owned(),
                true,
            ),
        ] {
            let o = cache
                .peek(ns, name)
                .unwrap_or_else(|| panic!("{path} cached"));
            assert_eq!(
                o.protobuf().is_some(),
                protobuf,
                "{path}: stored as protobuf"
            );
            let (code, body) = kas.get(&path).await;
            assert_eq!(code, 200, "{path}: {body}");
            // Listed in JSON too: a typed list's items carry no kind and apiVersion, and the
            // leaf puts them back as kube-apiserver's GET has them.
            let want = json(&body);
            let got: Value = serde_json::from_slice(o.json()).unwrap();
            assert_eq!(
                got, want,
                "{path} (by LIST: {by_list}): the leaf's JSON is kube-apiserver's"
            );
        }
        // The Writes contract's forwarding implementation: an embedder's writes in code are
        // kube-apiserver's (POST; PUT with the precondition; DELETE), and reach the cache by its
        // watch, as every other change.
        use watchcache::{WriteError, Writes};
        let writes = caches.writes();
        let name = format!("written-{protobuf}");
        let key = format!("/registry/configmaps/default/{name}");
        let body = |v: &str| {
            bytes::Bytes::from(
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "default"}, "data": {"k": v}})
                .to_string(),
            )
        };
        let rev = writes.create(&key, body("1")).await.unwrap();
        assert_eq!(
            writes.create(&key, body("1")).await,
            Err(WriteError::AlreadyExists)
        );
        let (code, got) = kas
            .get(&format!("/api/v1/namespaces/default/configmaps/{name}"))
            .await;
        assert_eq!((code, json(&got)["data"]["k"].clone()), (200, "1".into()));
        assert_eq!(
            writes.replace(&key, body("2"), rev + 1_000_000).await,
            Err(WriteError::Conflict)
        );
        let rev = writes.replace(&key, body("2"), rev).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), cms.wait_for(rev))
            .await
            .expect("the cache sees the write")
            .unwrap();
        let o = cms.peek(Some("default"), &name).unwrap();
        let cached: Value = serde_json::from_slice(o.json()).unwrap();
        assert_eq!(cached["data"]["k"], "2");
        writes.delete(&key, Some(rev)).await.unwrap();
        assert_eq!(writes.get(&key).await, Ok(None));
        caches.shutdown().await;
    }
}

/// Issue 35, A-MIRROR, where writes go to kube-apiserver (proxy mode): node n1 tries to reach a
/// Secret and a ConfigMap by creating a mirror pod whose projected volume names them. Through
/// watchcache the create is kube-apiserver's to refuse, and it does (its NodeRestriction, with
/// its words); the pod never reaches the cache, so watchcache's Node authorizer grants n1
/// neither object, before and after the watch has brought everything written since. The graph is
/// not merely empty: from a pod kube-apiserver admitted (bound to n1 by the admin, naming
/// Secrets through azureFile and flexVolume volumes) it grants what kube-apiserver's grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_pod_kube_apiserver_refused_grants_its_node_nothing_through_watchcache() {
    use std::time::Duration;
    use support::kube::https_request;
    use support::pki::Issued;
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let wc = Watchcache::proxy(&kas.pki, &kas.admin_kubeconfig, &[]).await;
    let ca = &kas.pki.ca.cert_file;
    let admin = &kas.pki.admin;
    let n1 = kas.pki.client("n1", "system:node:n1", &["system:nodes"]);
    let call = async |url: &str, who: &Issued, method: &str, path: &str, body: Option<Value>| {
        let body = body.map(|b| b.to_string());
        let (code, text) = https_request(url, ca, Some(who), method, path, body.as_deref())
            .await
            .unwrap_or_else(|e| panic!("{method} {url}{path}: {e}"));
        (code, json(&text))
    };
    let ns = "/api/v1/namespaces/default";

    let (code, node) = call(
        &wc.url,
        &n1,
        "POST",
        "/api/v1/nodes",
        Some(serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})),
    )
    .await;
    assert_eq!(code, 201, "{node}");
    for (kind, name) in [
        // Its service account: no controller manager makes it here.
        ("ServiceAccount", "default"),
        ("Secret", "s2"),
        ("ConfigMap", "cm"),
        ("Secret", "s-az"),
        ("Secret", "s-flex"),
    ] {
        let path = format!("{ns}/{}s", kind.to_ascii_lowercase());
        let mut body =
            serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}});
        if kind != "ServiceAccount" {
            body["data"] = serde_json::json!({"k": "dg=="});
        }
        let (code, v) = call(&wc.url, admin, "POST", &path, Some(body)).await;
        assert_eq!(code, 201, "{kind} {name}: {v}");
    }
    let mirror = |name: &str, volumes: Value| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"kubernetes.io/config.mirror": "x"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1",
                    "uid": node["metadata"]["uid"], "controller": true}]},
            "spec": {"nodeName": "n1", "volumes": volumes,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    };
    // A mirror pod that needs nothing from the API is n1's to create. Until kube-apiserver's
    // NodeRestriction has seen the Node (an informer), it answers 404 for the owner's uid.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (code, v) = call(
            &wc.url,
            &n1,
            "POST",
            &format!("{ns}/pods"),
            Some(mirror("static-ok", serde_json::json!([]))),
        )
        .await;
        if code == 201 {
            break;
        }
        assert!(
            code == 404 && tokio::time::Instant::now() < deadline,
            "{code}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The attempts, each refused by kube-apiserver's admission (its metric counts the refusal
    // by that plugin) and answered through watchcache with kube-apiserver's Status. With a
    // Secret named, ServiceAccount admission refuses first: it runs before NodeRestriction and
    // refuses any mirror pod naming a Secret, whoever creates it. With a ConfigMap only,
    // NodeRestriction does.
    for (name, sources, plugin, message) in [
        (
            "static-n1",
            serde_json::json!([{"secret": {"name": "s2"}}, {"configMap": {"name": "cm"}}]),
            "ServiceAccount",
            "pods \"static-n1\" is forbidden: a mirror pod may not reference secrets",
        ),
        (
            "static-n1-cm",
            serde_json::json!([{"configMap": {"name": "cm"}}]),
            "NodeRestriction",
            "pods \"static-n1-cm\" is forbidden: node \"n1\" can not create pods that reference configmaps",
        ),
    ] {
        let by = format!("name=\"{plugin}\"");
        let labels = [by.as_str(), r#"rejected="true""#];
        let refusals = || {
            kas.metric(
                "apiserver_admission_controller_admission_duration_seconds_count",
                &labels,
            )
        };
        let before = refusals().await;
        let volumes = serde_json::json!([{"name": "p", "projected": {"sources": sources}}]);
        let (code, v) = call(
            &wc.url,
            &n1,
            "POST",
            &format!("{ns}/pods"),
            Some(mirror(name, volumes)),
        )
        .await;
        assert_eq!(code, 403, "{v}");
        assert_eq!(v["reason"], "Forbidden", "{v}");
        assert_eq!(v["message"], message, "{v}");
        assert_eq!(
            refusals().await,
            before + 1.0,
            "kube-apiserver's {plugin} refused {name}"
        );
    }

    // n1 reads neither: through watchcache, from its cache (`resourceVersion=0`, watchcache's
    // own Node authorizer) and consistently; and from kube-apiserver itself, with the same
    // Status.
    let refused = async || {
        for path in [format!("{ns}/secrets/s2"), format!("{ns}/configmaps/cm")] {
            let (code, theirs) = call(&kas.url, &n1, "GET", &path, None).await;
            assert_eq!(code, 403, "GET {path} from kube-apiserver: {theirs}");
            for query in ["?resourceVersion=0", ""] {
                let (code, ours) = call(&wc.url, &n1, "GET", &format!("{path}{query}"), None).await;
                assert_eq!(code, 403, "GET {path}{query} through watchcache: {ours}");
                assert_eq!(ours, theirs, "GET {path}{query}: kube-apiserver's Status");
            }
        }
    };
    refused().await;

    // A pod kube-apiserver admits, written after the refused one: once watchcache's cache shows
    // it, every earlier pod write has reached the cache too (one watch, in order).
    let (code, v) = call(
        &wc.url,
        admin,
        "POST",
        &format!("{ns}/pods"),
        Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "admitted"},
            "spec": {"nodeName": "n1", "automountServiceAccountToken": false,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                "volumes": [
                    {"name": "az", "azureFile": {"secretName": "s-az", "shareName": "x"}},
                    {"name": "fl", "flexVolume": {"driver": "example.com/d",
                        "secretRef": {"name": "s-flex"}}}]}})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (code, list) = call(
            &wc.url,
            &n1,
            "GET",
            &format!("{ns}/pods?resourceVersion=0&fieldSelector=spec.nodeName%3Dn1"),
            None,
        )
        .await;
        assert_eq!(code, 200, "{list}");
        let mut names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        if names == ["admitted", "static-ok"] {
            break;
        }
        assert!(
            !names.iter().any(|n| n.starts_with("static-n1"))
                && tokio::time::Instant::now() < deadline,
            "n1's pods in watchcache's cache: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    refused().await;

    // What the admitted pod names is n1's to read, as kube-apiserver's graph has it (its graph
    // follows an informer: wait for it there).
    for path in [format!("{ns}/secrets/s-az"), format!("{ns}/secrets/s-flex")] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (code, v) = call(&kas.url, &n1, "GET", &path, None).await;
            if code == 200 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "GET {path} from kube-apiserver: {v}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for query in ["?resourceVersion=0", ""] {
            let (code, v) = call(&wc.url, &n1, "GET", &format!("{path}{query}"), None).await;
            assert_eq!(code, 200, "GET {path}{query} through watchcache: {v}");
        }
    }
}

/// A consistent LIST through proxy mode is proven fresh by one read of the objects' metadata
/// with the request's own selectors (issue 39, item 4), never by waiting for kube-apiserver's
/// bookmarks (about one a minute; a short probe watch gets one after a second or two).
/// - Quiet: configmaps no one writes, while a secret written every 20 ms moves etcd's revision
///   on. Every LIST is proven by selection (watchcache's metrics), and answers what
///   kube-apiserver answers. The latencies, interleaved with the direct LIST's, are printed; the figures of
///   record come from `watchcache-bench --model consistent-list` (design/performance.md).
/// - Busy: a writer changes configmaps through kube-apiserver all along. Each LIST through
///   watchcache begins after a direct LIST ended, and holds every object of it at that
///   revision or a later one: never older than kube-apiserver's own read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_lists_through_proxy_mode_wait_for_no_event_and_are_never_older() {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use watchcache_kube::client_from_kubeconfig;

    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let wc = Watchcache::proxy(&kas.pki, &kas.admin_kubeconfig, &[]).await;
    let direct = client_from_kubeconfig(&kas.admin_kubeconfig, None)
        .await
        .unwrap();
    let through = client_from_kubeconfig(&wc.admin_kubeconfig, None)
        .await
        .unwrap();
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    for ns in ["quiet", "busy"] {
        must(
            &k.run(&["create", "namespace", ns]).await,
            "create namespace",
        );
    }
    let quiet: Api<ConfigMap> = Api::namespaced(direct.clone(), "quiet");
    for i in 0..20 {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("q{i}"));
        cm.data = Some([("k".to_owned(), "v".repeat(200))].into());
        quiet.create(&PostParams::default(), &cm).await.unwrap();
    }
    // (name → resourceVersion, list resourceVersion) of a consistent LIST, and its time.
    let list = |client: kube::Client, path: String| async move {
        let started = Instant::now();
        let req = http::Request::get(&path).body(Vec::new()).unwrap();
        let text = client.request_text(req).await.unwrap();
        let took = started.elapsed();
        let v = json(&text);
        let items: BTreeMap<String, u64> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let m = &o["metadata"];
                let rv = m["resourceVersion"].as_str().unwrap().parse().unwrap();
                (m["name"].as_str().unwrap().to_owned(), rv)
            })
            .collect();
        (items, took)
    };
    let quiet_path = "/api/v1/namespaces/quiet/configmaps".to_owned();
    let going = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    // Served from the cache once it holds them all.
    let deadline = Instant::now() + Duration::from_secs(30);
    while list(through.clone(), quiet_path.clone()).await.0.len() < 20 {
        assert!(Instant::now() < deadline, "watchcache never listed the 20");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let proven = |client: kube::Client| async move {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(req).await.unwrap();
        support::sum_samples(
            &text,
            "watchcache_fresh_by_selection_total",
            &["resource=\"configmaps\""],
        ) as u64
    };
    // Secrets written all along move etcd's revision past the configmaps' cache, as a
    // cluster's other resources do: each LIST needs a proof.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(direct.clone(), "busy");
    let mut s = k8s_openapi::api::core::v1::Secret::default();
    s.metadata.name = Some("moves".into());
    secrets.create(&PostParams::default(), &s).await.unwrap();
    // A writer of the secret until `going` is false; its number of writes.
    let moving = |going: std::sync::Arc<std::sync::atomic::AtomicBool>| {
        let secrets = secrets.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while going.load(std::sync::atomic::Ordering::Relaxed) {
                let patch = serde_json::json!({"metadata": {"labels": {"n": n.to_string()}}});
                secrets
                    .patch(
                        "moves",
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(patch),
                    )
                    .await
                    .unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            n
        })
    };
    let others = moving(going.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = proven(through.clone()).await;
    let rounds = 200;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Each first in turn: the second finds kube-apiserver's cache fresh already.
        let ((a, t), (b, o)) = if round % 2 == 0 {
            let a = list(direct.clone(), quiet_path.clone()).await;
            (a, list(through.clone(), quiet_path.clone()).await)
        } else {
            let b = list(through.clone(), quiet_path.clone()).await;
            (list(direct.clone(), quiet_path.clone()).await, b)
        };
        theirs.push(t);
        ours.push(o);
        assert_eq!(a, b, "the same configmaps at the same revisions");
    }
    let p99 = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() * 99 / 100 - 1]
    };
    let (ours99, theirs99) = (p99(&mut ours), p99(&mut theirs));
    eprintln!(
        "quiet consistent LIST p99: through watchcache {ours99:?}, direct {theirs99:?} \
         (medians {:?}, {:?})",
        ours[rounds / 2],
        theirs[rounds / 2]
    );
    going.store(false, std::sync::atomic::Ordering::Relaxed);
    let moved = others.await.unwrap();
    // Each LIST was proven by selection, at once. A bookmark of kube-apiserver's (about one a
    // minute) may put the cache at the upstream's revision for a moment: the LIST then right
    // after it is proven by revision, as fresh and as quick.
    let by_selection = proven(through.clone()).await - before;
    assert!(
        by_selection + 2 >= rounds as u64 && moved > 20,
        "{by_selection} of {rounds} quiet LISTs proven by selection ({moved} secret writes)"
    );

    // Quiet and empty: kube-apiserver answers `"items":null` for an empty metadata list (was:
    // refused as malformed, so each LIST of an empty namespace waited for the cache to reach the
    // upstream's revision, a second or more; namespace deletion, which lists every resource of
    // the namespace, took 40 s through proxy mode).
    going.store(true, std::sync::atomic::Ordering::Relaxed);
    let others = moving(going.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = proven(through.clone()).await;
    let empty_path = "/api/v1/namespaces/busy/configmaps".to_owned();
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let (items, took) = list(through.clone(), empty_path.clone()).await;
        assert!(items.is_empty());
        slowest = slowest.max(took);
    }
    going.store(false, std::sync::atomic::Ordering::Relaxed);
    others.await.unwrap();
    let by_selection = proven(through.clone()).await - before;
    assert!(
        by_selection + 2 >= 20,
        "{by_selection} of 20 LISTs of an empty namespace proven by selection (slowest {slowest:?})"
    );

    // Busy: a writer all along.
    let busy: Api<ConfigMap> = Api::namespaced(direct.clone(), "busy");
    going.store(true, std::sync::atomic::Ordering::Relaxed);
    let writer = {
        let (busy, going) = (busy.clone(), going.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while going.load(std::sync::atomic::Ordering::Relaxed) {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(format!("b{}", n % 10));
                cm.data = Some([("n".to_owned(), n.to_string())].into());
                if n < 10 {
                    busy.create(&PostParams::default(), &cm).await.unwrap();
                } else {
                    let json = serde_json::to_value(&cm).unwrap();
                    busy.patch(
                        &format!("b{}", n % 10),
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(json),
                    )
                    .await
                    .unwrap();
                }
                n += 1;
            }
            n
        })
    };
    let busy_path = "/api/v1/namespaces/busy/configmaps".to_owned();
    let started = Instant::now();
    let mut checked = 0;
    while started.elapsed() < Duration::from_secs(10) {
        let (before, _) = list(direct.clone(), busy_path.clone()).await;
        let (after, took) = list(through.clone(), busy_path.clone()).await;
        for (name, rv) in &before {
            let got = after.get(name).copied().unwrap_or_default();
            assert!(
                got >= *rv,
                "{name} at {rv} in kube-apiserver's read, at {got} in the later one through watchcache"
            );
        }
        assert!(took < Duration::from_secs(1), "a busy LIST took {took:?}");
        checked += 1;
    }
    going.store(false, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.await.unwrap();
    eprintln!("busy: {checked} pairs of LISTs checked against {writes} writes");
    assert!(
        writes > 50 && checked > 20,
        "{writes} writes, {checked} checks"
    );
}

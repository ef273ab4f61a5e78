//! A real control plane through watchcache (issue 19, items 5 and 8): kube-apiserver 1.35 on etcd
//! 3.6, and behind watchcache, unchanged, kube-controller-manager, kube-scheduler and 50 kubemark
//! hollow nodes (the real kubelet with a fake runtime), each node with its own client certificate,
//! authorized by watchcache's `Node,RBAC`. kubectl, through watchcache, runs Deployments on them:
//! scale, roll out, a namespace deleted with everything in it, and watchcache killed with `kill -9`
//! in the middle of a rollout. kube-apiserver's own metrics say what it served.
//!
//! Two set-ups: proxy mode (watchcache follows kube-apiserver, one watch per resource), and the
//! recommended one in front of a real cluster (watchcache reads the cluster's etcd, writes and
//! everything uncached go to kube-apiserver).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::etcd::{EtcdVersion, etcd_version};
use support::kube::{
    KubeApiserver, Proc, Target, Watchcache, condition, controller_manager, hollow_nodes,
    scheduler, wait_items,
};
use support::kubectl::{Kubectl, must};

/// The hollow nodes of the proxy-mode run (the issue's floor).
const NODES: usize = 50;

/// Watches kube-apiserver holds open on `resource` lastingly: the fewest in five samples a
/// second apart (watchcache's progress probes are 3-second watches of their own).
async fn lasting_watches_on(kas: &KubeApiserver, resource: &str) -> f64 {
    let mut fewest = f64::MAX;
    for _ in 0..5 {
        fewest = fewest.min(watches_on(kas, resource).await);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    fewest
}

/// Watches kube-apiserver holds open on `resource` (core group), from anyone.
async fn watches_on(kas: &KubeApiserver, resource: &str) -> f64 {
    let resource = format!("resource=\"{resource}\"");
    kas.metric(
        "apiserver_longrunning_requests",
        &[&resource, "verb=\"WATCH\"", "group=\"\""],
    )
    .await
}

/// LIST requests kube-apiserver has served, all resources.
async fn lists_served(kas: &KubeApiserver) -> f64 {
    kas.metric("apiserver_request_total", &["verb=\"LIST\""])
        .await
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Every pod of `app` in `ns` Running and Ready, `n` of them, on known nodes, each with `image`
/// (when given); the pods returned.
async fn wait_pods(
    k: &Kubectl,
    ns: &str,
    app: &str,
    n: usize,
    image: Option<&str>,
    limit: Duration,
    procs: &mut [&mut Proc],
) -> Vec<Value> {
    let selector = format!("app={app}");
    wait_items(
        k,
        &["get", "pods", "-n", ns, "-l", &selector, "-o", "json"],
        limit,
        procs,
        |items| {
            items.len() == n
                && items.iter().all(|p| {
                    p["status"]["phase"] == "Running"
                        && condition(p, "Ready")
                        && p["metadata"]["deletionTimestamp"].is_null()
                        && image.is_none_or(|i| p["spec"]["containers"][0]["image"] == i)
                })
        },
    )
    .await
}

/// A namespace `team` with a Deployment `api` of `replicas` pods, all Running and Ready.
async fn team_deployment(k: &Kubectl, replicas: usize, limit: Duration, procs: &mut [&mut Proc]) {
    must(
        &k.run(&["create", "namespace", "team"]).await,
        "create namespace",
    );
    must(
        &k.run(&[
            "create",
            "deployment",
            "api",
            "-n",
            "team",
            "--image=registry.k8s.io/pause:3.10",
            &format!("--replicas={replicas}"),
        ])
        .await,
        "create deployment in team",
    );
    wait_pods(k, "team", "api", replicas, None, limit, procs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_and_50_kubelets_run_through_watchcache_in_proxy_mode() {
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    // kube-apiserver watches some resources itself (its Node authorizer's graph: pods, nodes...).
    let (own_pods, own_nodes) = (
        watches_on(&kas, "pods").await,
        watches_on(&kas, "nodes").await,
    );
    let mut wc = Watchcache::proxy(&kas.pki, &kas.admin_kubeconfig, &[]).await;
    let target = Target {
        url: &wc.url,
        ca: &kas.pki.ca.cert_file,
    };
    let dir = kas.dir.path();
    let mut kcm = controller_manager(&kas.pki, target, dir);
    let mut sched = scheduler(&kas.pki, target, dir);
    let mut nodes = hollow_nodes(&kas.pki, target, dir, "hollow", NODES);
    let k = Kubectl::with_kubeconfig(&wc.admin_kubeconfig);
    let limit = Duration::from_secs(300);
    let started = Instant::now();
    {
        let mut procs: Vec<&mut Proc> = vec![&mut kcm, &mut sched, &mut wc.proc];
        procs.extend(nodes.iter_mut());
        wait_items(
            &k,
            &["get", "nodes", "-o", "json"],
            limit,
            &mut procs,
            |items| items.len() == NODES && items.iter().all(|n| condition(n, "Ready")),
        )
        .await;
    }
    eprintln!(
        "{NODES} hollow nodes Ready through watchcache after {:?}",
        started.elapsed()
    );

    // kubelets watch their pods by spec.nodeName, through watchcache: kube-apiserver holds
    // watchcache's one watch on pods, not one per kubelet.
    let pod_watches = lasting_watches_on(&kas, "pods").await - own_pods;
    assert_eq!(
        pod_watches, 1.0,
        "kube-apiserver holds {pod_watches} watches on pods (besides its own {own_pods}) for {NODES} kubelets, a scheduler and a controller manager"
    );
    let node_watches = lasting_watches_on(&kas, "nodes").await - own_nodes;
    assert_eq!(node_watches, 1.0, "{node_watches} watches on nodes");

    must(
        &k.run(&[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "--replicas=100",
        ])
        .await,
        "create deployment",
    );
    let mut procs: Vec<&mut Proc> = vec![&mut kcm, &mut sched];
    procs.extend(nodes.iter_mut());
    let pods = wait_pods(&k, "default", "web", 100, None, limit, &mut procs).await;
    let on: std::collections::HashSet<&str> = pods
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap())
        .collect();
    assert!(on.len() > NODES / 2, "spread over {} nodes", on.len());

    // Scale up and down.
    must(
        &k.run(&["scale", "deployment/web", "--replicas=150"]).await,
        "scale up",
    );
    wait_pods(&k, "default", "web", 150, None, limit, &mut procs).await;
    must(
        &k.run(&["scale", "deployment/web", "--replicas=60"]).await,
        "scale down",
    );
    wait_pods(&k, "default", "web", 60, None, limit, &mut procs).await;

    // A rollout, and watchcache killed with -9 in its middle: every component reconnects, the
    // rollout completes, no pod is lost or doubled, and kube-apiserver sees no relist storm.
    let lists_before = lists_served(&kas).await;
    must(
        &k.run(&[
            "set",
            "image",
            "deployment/web",
            "pause=registry.k8s.io/pause:3.9",
        ])
        .await,
        "roll out",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    wc.restart(&kas.pki).await;
    let lists_after_restart = lists_served(&kas).await;
    let rolled = wait_pods(
        &k,
        "default",
        "web",
        60,
        Some("registry.k8s.io/pause:3.9"),
        limit,
        &mut procs,
    )
    .await;
    must(
        &k.run(&["rollout", "status", "deployment/web", "--timeout=120s"])
            .await,
        "rollout status",
    );
    let mut names: Vec<&str> = rolled
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 60, "no pod doubled");
    let rs = json(&k.run(&["get", "rs", "-l", "app=web", "-o", "json"]).await);
    let replicas: Vec<i64> = rs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"]["replicas"].as_i64().unwrap_or(0))
        .collect();
    assert_eq!(replicas.iter().sum::<i64>(), 60, "{replicas:?}");
    // Through kube-apiserver itself: exactly the 60 pods exist, none lost, none extra.
    let direct = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    let all = json(
        &direct
            .run(&["get", "pods", "-l", "app=web", "-o", "json"])
            .await,
    );
    assert_eq!(all["items"].as_array().unwrap().len(), 60);
    // The restart relisted each resource once at kube-apiserver (a WatchList counts as a watch,
    // not a LIST), not once per client: 50 kubelets, the scheduler and the controller manager
    // reconnected to watchcache.
    let relists = lists_after_restart - lists_before;
    assert!(
        relists < 120.0,
        "kube-apiserver served {relists} LISTs around watchcache's restart"
    );
    eprintln!("LISTs at kube-apiserver around the restart: {relists}");

    // A namespace with a Deployment, deleted: its pods go (gracefully, by their kubelets), its
    // ReplicaSet and Deployment by the garbage collector, and the namespace itself.
    team_deployment(&k, 10, limit, &mut procs).await;
    must(
        &k.run(&["delete", "namespace", "team", "--wait=false"])
            .await,
        "delete namespace",
    );
    let start = Instant::now();
    loop {
        let out = k.run(&["get", "namespace", "team", "-o", "json"]).await;
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound") {
            break;
        }
        assert!(
            start.elapsed() < limit,
            "namespace team still there: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for p in procs.iter_mut() {
            p.assert_running();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let left = json(
        &direct
            .run(&["get", "pods,rs,deploy", "-n", "team", "-o", "json"])
            .await,
    );
    assert!(left["items"].as_array().unwrap().is_empty(), "{left}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recommended_set_up_reads_the_clusters_etcd_and_forwards_writes() {
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let own_pods = watches_on(&kas, "pods").await;
    let kc = kas.admin_kubeconfig.display().to_string();
    let mut wc = Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &["--apiserver-kubeconfig", &kc],
    )
    .await;
    let target = Target {
        url: &wc.url,
        ca: &kas.pki.ca.cert_file,
    };
    let dir = kas.dir.path();
    let mut kcm = controller_manager(&kas.pki, target, dir);
    let mut sched = scheduler(&kas.pki, target, dir);
    let mut nodes = hollow_nodes(&kas.pki, target, dir, "direct", 10);
    let k = Kubectl::with_kubeconfig(&wc.admin_kubeconfig);
    let limit = Duration::from_secs(300);
    let mut procs: Vec<&mut Proc> = vec![&mut kcm, &mut sched, &mut wc.proc];
    procs.extend(nodes.iter_mut());
    wait_items(
        &k,
        &["get", "nodes", "-o", "json"],
        limit,
        &mut procs,
        |items| items.len() == 10 && items.iter().all(|n| condition(n, "Ready")),
    )
    .await;
    // Nothing but kube-apiserver itself watches pods there: watchcache reads etcd.
    assert_eq!(lasting_watches_on(&kas, "pods").await, own_pods);

    // A write through watchcache is kube-apiserver's: admission and defaulting apply (a
    // Deployment gets its default strategy, a pod its default service account).
    must(
        &k.run(&[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "--replicas=20",
        ])
        .await,
        "create deployment",
    );
    let d = json(&k.run(&["get", "deployment", "web", "-o", "json"]).await);
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate", "{d}");
    let pods = wait_pods(&k, "default", "web", 20, None, limit, &mut procs).await;
    assert!(
        pods.iter()
            .all(|p| p["spec"]["serviceAccountName"] == "default")
    );
    // A write kube-apiserver's admission refuses is refused through watchcache, with its Status.
    let out = k
        .run(&[
            "run",
            "bad",
            "--image=registry.k8s.io/pause:3.10",
            "-n",
            "no-such-namespace",
        ])
        .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("namespaces \"no-such-namespace\" not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    must(
        &k.run(&["scale", "deployment/web", "--replicas=5"]).await,
        "scale down",
    );
    wait_pods(&k, "default", "web", 5, None, limit, &mut procs).await;
    team_deployment(&k, 3, limit, &mut procs).await;
    must(
        &k.run(&["delete", "namespace", "team", "--timeout=240s"])
            .await,
        "delete namespace",
    );
    let out = k.run(&["get", "namespace", "team"]).await;
    assert!(!out.status.success(), "namespace team is gone");
}

/// The shirts' spec as first defined.
const SHIRT_SPEC: &str = r#""color": {"type": "string"}, "size": {"type": "string"},
    "weight": {"type": "integer"}"#;

/// The shirts' spec redefined: `size` gone, `fit` defaulted, and `cuffs` defaulted to an object
/// whose own member `n` has a default (a float), its string with characters Go escapes.
const SHIRT_SPEC_REDEFINED: &str = r#""color": {"type": "string"},
    "weight": {"type": "integer"}, "fit": {"type": "string", "default": "regular"},
    "cuffs": {"type": "object", "default": {"style": "<french> & \"double\""},
              "properties": {"style": {"type": "string"}, "n": {"type": "number", "default": 0.5}}}"#;

/// A CRD with two served versions (`storage` stored) of the spec `spec`, selectable fields
/// and printer columns.
fn shirts_crd(storage: &str, selectable: &[&str], spec: &str) -> String {
    let fields: Vec<String> = selectable
        .iter()
        .map(|f| format!(r#"{{"jsonPath": ".spec.{f}"}}"#))
        .collect();
    let version = |name: &str| {
        format!(
            r#"{{"name": "{name}", "served": true, "storage": {storage},
                "schema": {{"openAPIV3Schema": {{"type": "object", "properties": {{
                    "spec": {{"type": "object", "properties": {{{spec}}}}}}}}}}},
                "selectableFields": [{fields}],
                "additionalPrinterColumns": [
                    {{"name": "Color", "type": "string", "jsonPath": ".spec.color"}},
                    {{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight"}},
                    {{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}}]}}"#,
            storage = name == storage,
            fields = fields.join(",")
        )
    };
    format!(
        r#"{{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {{"name": "shirts.stable.example.com"}},
            "spec": {{"group": "stable.example.com", "scope": "Namespaced",
                "names": {{"plural": "shirts", "singular": "shirt", "kind": "Shirt",
                           "shortNames": ["sh"]}},
                "versions": [{}, {}]}}}}"#,
        version("v1"),
        version("v1beta1")
    )
}

fn shirt(name: &str, color: &str, weight: u32) -> String {
    format!(
        r#"{{"apiVersion": "stable.example.com/v1", "kind": "Shirt",
            "metadata": {{"name": "{name}", "namespace": "default"}},
            "spec": {{"color": "{color}", "size": "M", "weight": {weight}}}}}"#
    )
}

/// How many times watchcache logged that it serves the shirts from a cache of `version`.
fn shirts_served(wc: &Watchcache, version: &str) -> usize {
    let log = std::fs::read_to_string(&wc.proc.log).unwrap_or_default();
    log.lines()
        .filter(|l| {
            l.contains("custom resource served from its cache")
                && l.contains("shirts.stable.example.com")
                && l.contains(&format!("version={version}"))
        })
        .count()
}

async fn wait_until(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// kubectl's lines of a `get -w` run so far (its log), and whether it has ended.
fn watch_lines(p: &mut Proc) -> (Vec<String>, bool) {
    let ended = p.exited().is_some();
    let text = std::fs::read_to_string(&p.log).unwrap_or_default();
    (text.lines().map(str::to_owned).collect(), ended)
}

/// Issue 36, item 3: every CRD is cached as soon as it is Established, with no definition file
/// and no restart; its selectable fields are watch triggers, its printer columns the Table's;
/// a CRD that changes is redefined live and one that goes is dropped, their watches ended as
/// kube-apiserver ends them. kubectl, unchanged, against the recommended set-up, and the same
/// requests straight to kube-apiserver for the answers to compare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_are_cached_live_with_their_selectable_fields_as_triggers() {
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let kc = kas.admin_kubeconfig.display().to_string();
    let wc = Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &["--apiserver-kubeconfig", &kc],
    )
    .await;
    let k = Kubectl::with_kubeconfig(&wc.admin_kubeconfig);
    let direct = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    let limit = Duration::from_secs(60);
    let metrics = async || {
        support::kube::https_get(
            &wc.url,
            &kas.pki.ca.cert_file,
            Some(&kas.pki.admin),
            "/metrics",
        )
        .await
        .map(|(_, t)| t)
        .unwrap_or_default()
    };

    // The CRD, through watchcache (a write: kube-apiserver's), then its objects.
    must(
        &k.with_stdin(
            &["apply", "-f", "-"],
            &shirts_crd("v1", &["color"], SHIRT_SPEC),
        )
        .await,
        "apply the CRD",
    );
    wait_until("the shirts cached", limit, async || {
        shirts_served(&wc, "v1") == 1
    })
    .await;
    assert!(
        metrics()
            .await
            .contains(r#"watchcache_events_received_total{resource="shirts"}"#)
    );
    for (name, color, weight) in [
        ("red", "red", 1),
        ("blue-1", "blue", 2),
        ("blue-2", "blue", 3),
    ] {
        must(
            &k.with_stdin(&["apply", "-f", "-"], &shirt(name, color, weight))
                .await,
            "apply a shirt",
        );
    }
    // A consistent LIST through watchcache sees every write made before it.
    let names = k
        .ok(&[
            "get",
            "shirts",
            "--field-selector",
            "spec.color=blue",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "shirt.stable.example.com/blue-1",
            "shirt.stable.example.com/blue-2"
        ]
    );
    // The Table: the CRD's columns, as kube-apiserver shows them (AGE aside, which moves).
    let table = |out: String| -> Vec<String> {
        out.lines()
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert_eq!(
        table(k.ok(&["get", "sh"]).await),
        table(direct.ok(&["get", "sh"]).await)
    );
    assert_eq!(
        table(k.ok(&["get", "sh"]).await),
        [
            "NAME COLOR WEIGHT",
            "blue-1 blue 2",
            "blue-2 blue 3",
            "red red 1"
        ]
    );
    // A field kube-apiserver does not select on is refused with its words.
    let refused = |out: std::process::Output| {
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let args = ["get", "shirts", "--field-selector", "spec.size=M"];
    assert_eq!(
        refused(k.run(&args).await),
        refused(direct.run(&args).await)
    );
    // v1beta1 is served too, from the same cache (it holds v1), at v1beta1.
    let beta = json(
        &k.run(&[
            "get",
            "shirts.v1beta1.stable.example.com",
            "red",
            "-o",
            "json",
        ])
        .await,
    );
    assert_eq!(beta["apiVersion"], "stable.example.com/v1beta1", "{beta}");

    // `kubectl get -w` of `resource` on `selector`, once watchcache routes it by the field.
    let routed_watch = async |resource: &str, selector: &str, log: &str| {
        let watch = Proc::spawn(
            "kubectl-watch",
            k.command(&[
                "get",
                resource,
                "--field-selector",
                selector,
                "--watch-only",
                "-o",
                "name",
            ]),
            kas.dir.path().join(log),
        );
        wait_until(&format!("the {selector} watch routed"), limit, async || {
            metrics()
                .await
                .lines()
                .any(|l| l == r#"watchcache_watchers{resource="shirts",routing="routed"} 1"#)
        })
        .await;
        watch
    };

    // A watch on the selectable field is routed by it, and sees the transitions.
    let mut watch = routed_watch("shirts", "spec.color=blue", "watch-blue.log").await;
    must(
        &k.with_stdin(&["apply", "-f", "-"], &shirt("red", "blue", 1))
            .await,
        "red turns blue",
    );
    must(
        &k.with_stdin(&["apply", "-f", "-"], &shirt("green", "green", 4))
            .await,
        "a green shirt",
    );
    wait_until("the blue watch sees red turn blue", limit, async || {
        watch_lines(&mut watch).0 == ["shirt.stable.example.com/red"]
    })
    .await;

    // The CRD changes (v1beta1 stored, weight selectable): redefined live, its watch ended.
    must(
        &k.with_stdin(
            &["apply", "-f", "-"],
            &shirts_crd("v1beta1", &["color", "weight"], SHIRT_SPEC_REDEFINED),
        )
        .await,
        "change the CRD",
    );
    wait_until("the old watch ended", limit, async || {
        watch_lines(&mut watch).1
    })
    .await;
    assert_eq!(watch_lines(&mut watch).0, ["shirt.stable.example.com/red"]);
    wait_until("the shirts cached at v1beta1", limit, async || {
        shirts_served(&wc, "v1beta1") == 1
    })
    .await;
    // Objects stored as v1 are read as v1beta1 (conversion None), pruned and defaulted by the
    // new schema (issue 39, item 2: k/k's "custom resource defaulting for requests and from
    // storage" spec), as kube-apiserver reads them.
    let get = ["get", "shirts.v1beta1.stable.example.com", "-o", "json"];
    let (ours, theirs) = (json(&k.run(&get).await), json(&direct.run(&get).await));
    assert_eq!(ours["items"], theirs["items"]);
    assert_eq!(ours["items"].as_array().map(Vec::len), Some(4));
    for item in ours["items"].as_array().into_iter().flatten() {
        assert_eq!(item["spec"]["fit"], "regular", "{item}");
        assert_eq!(item["spec"]["cuffs"]["n"], 0.5, "{item}");
        assert!(item["spec"].get("size").is_none(), "{item}");
    }
    // Byte for byte: the keys' order, Go's escapes and Go's float.
    let path = "/apis/stable.example.com/v1beta1/namespaces/default/shirts/red";
    let (ca, admin) = (&kas.pki.ca.cert_file, Some(&kas.pki.admin));
    let ours = support::kube::https_get(&wc.url, ca, admin, path).await;
    let theirs = support::kube::https_get(&kas.url, ca, admin, path).await;
    assert_eq!(
        ours.expect("GET through watchcache"),
        theirs.expect("GET direct")
    );
    let args = [
        "get",
        "shirts.v1beta1.stable.example.com",
        "--field-selector",
        "spec.weight=4",
        "-o",
        "name",
    ];
    assert_eq!(k.ok(&args).await, "shirt.stable.example.com/green\n");

    // The CRD goes: its objects go with it, the cache is dropped, the resource is unknown.
    let mut watch = routed_watch(
        "shirts.v1beta1.stable.example.com",
        "spec.weight=4",
        "watch-weight.log",
    )
    .await;
    must(
        &k.run(&[
            "delete",
            "crd",
            "shirts.stable.example.com",
            "--timeout=60s",
        ])
        .await,
        "delete the CRD",
    );
    wait_until("the weight watch ended", limit, async || {
        watch_lines(&mut watch).1
    })
    .await;
    // The cache's own figures are rendered for the caches served (request counts stay).
    wait_until("the shirts no longer served", limit, async || {
        !metrics()
            .await
            .contains(r#"watchcache_events_received_total{resource="shirts"}"#)
    })
    .await;
    let out = k.run(&["get", "shirts"]).await;
    assert!(!out.status.success());
}

/// The shirts at three versions, conversion None: v1 stored (color and weight selectable,
/// columns Color and Weight), v1beta1 served with the same schema and its own columns (Color,
/// Size) and selectable fields (color only), v1alpha1 not served (and of another schema).
fn three_version_shirts_crd() -> String {
    let version = |name: &str, storage: bool, served: bool, selectable: &str, columns: &str| {
        // v1alpha1's schema differs (its description): were every version's the same,
        // kube-apiserver would hold one schema for all, and refuse per-version selectableFields.
        let description = if name == "v1alpha1" { "old" } else { "" };
        format!(
            r#"{{"name": "{name}", "served": {served}, "storage": {storage},
                "schema": {{"openAPIV3Schema": {{"type": "object",
                    "description": "{description}", "properties": {{
                    "spec": {{"type": "object", "properties": {{{SHIRT_SPEC}}}}}}}}}}},
                "selectableFields": [{selectable}],
                "additionalPrinterColumns": [{columns}]}}"#
        )
    };
    let color = r#"{"name": "Color", "type": "string", "jsonPath": ".spec.color"}"#;
    format!(
        r#"{{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {{"name": "shirts.stable.example.com"}},
            "spec": {{"group": "stable.example.com", "scope": "Namespaced",
                "names": {{"plural": "shirts", "singular": "shirt", "kind": "Shirt",
                           "shortNames": ["sh"]}},
                "versions": [{}, {}, {}]}}}}"#,
        version(
            "v1",
            true,
            true,
            r#"{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.weight"}"#,
            &format!(
                r#"{color}, {{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight"}}"#
            ),
        ),
        version(
            "v1beta1",
            false,
            true,
            r#"{"jsonPath": ".spec.color"}"#,
            &format!(r#"{color}, {{"name": "Size", "type": "string", "jsonPath": ".spec.size"}}"#),
        ),
        version("v1alpha1", false, false, "", color),
    )
}

/// Issue 36: a CRD's other served version (conversion None) is read from the storage version's
/// cache, as kube-apiserver reads it with the nop converter: GET, LIST, Table, metadata and a
/// field-selected WATCH answer byte for byte as kube-apiserver's (the list's own
/// resourceVersion aside, each server's current one), with that version's columns and field
/// selectors; the request metrics name the version, as they do only for what is served here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crds_other_served_versions_are_read_from_its_cache() {
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let kc = kas.admin_kubeconfig.display().to_string();
    let wc = Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &["--apiserver-kubeconfig", &kc],
    )
    .await;
    let k = Kubectl::with_kubeconfig(&wc.admin_kubeconfig);
    let direct = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    let limit = Duration::from_secs(60);
    let ca = &kas.pki.ca.cert_file;
    let admin = Some(&kas.pki.admin);
    let get = async |url: &str, path: &str, accept: Option<&str>| {
        match accept {
            Some(a) => support::kube::https_get_as(url, ca, admin, path, a).await,
            None => support::kube::https_get(url, ca, admin, path).await,
        }
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    };
    let metrics = async || get(&wc.url, "/metrics", None).await.1;

    must(
        &k.with_stdin(&["apply", "-f", "-"], &three_version_shirts_crd())
            .await,
        "apply the CRD",
    );
    wait_until("the shirts cached", limit, async || {
        shirts_served(&wc, "v1") == 1
    })
    .await;
    for (name, color, weight) in [("red", "red", 1), ("blue", "blue", 2)] {
        must(
            &k.with_stdin(&["apply", "-f", "-"], &shirt(name, color, weight))
                .await,
            "apply a shirt",
        );
    }
    // A consistent LIST through watchcache sees every write made before it.
    let beta = "/apis/stable.example.com/v1beta1/namespaces/default/shirts";
    let (code, listed) = get(&wc.url, beta, None).await;
    assert_eq!(code, 200, "{listed}");

    // Both answers, the list's own resourceVersion (each server's current one) left out.
    let both = async |path: &str, accept: Option<&str>| {
        let mut out = Vec::new();
        for url in [&wc.url, &kas.url] {
            let (code, text) = get(url, path, accept).await;
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let rv = v["metadata"]["resourceVersion"].as_str().unwrap_or("-");
            let text = if v["items"].is_array() || v["kind"] == "Table" && path.ends_with("shirts")
            {
                text.replacen(
                    &format!(r#""resourceVersion":"{rv}""#),
                    r#""resourceVersion":"RV""#,
                    1,
                )
            } else {
                text
            };
            out.push((code, text));
        }
        let theirs = out.pop().unwrap();
        (out.pop().unwrap(), theirs)
    };
    const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
    const META: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";
    let one_meta = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
    for (path, accept) in [
        (format!("{beta}/red"), None),
        (beta.to_owned(), None),
        (format!("{beta}?fieldSelector=spec.color%3Dblue"), None),
        (beta.to_owned(), Some(TABLE)),
        (format!("{beta}?includeObject=Object"), Some(TABLE)),
        (format!("{beta}/red"), Some(TABLE)),
        (beta.to_owned(), Some(META)),
        (format!("{beta}/red"), Some(one_meta)),
    ] {
        let (ours, theirs) = both(&path, accept).await;
        assert_eq!(ours, theirs, "{path} {accept:?}");
        assert_eq!(ours.0, 200, "{path} {accept:?}: {}", ours.1);
    }
    let (ours, _) = both(&format!("{beta}/red"), None).await;
    assert!(
        ours.1
            .starts_with(r#"{"apiVersion":"stable.example.com/v1beta1","kind":"Shirt""#)
    );
    let (ours, _) = both(beta, Some(TABLE)).await;
    let table: Value = serde_json::from_str(&ours.1).unwrap();
    let columns: Vec<&Value> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["name"])
        .collect();
    assert_eq!(columns, ["Name", "Color", "Size"], "v1beta1's own columns");

    // v1 selects on weight; v1beta1 does not, and says so as kube-apiserver does.
    let (ours, theirs) = both(&format!("{beta}?fieldSelector=spec.weight%3D1"), None).await;
    assert_eq!(ours.0, 400, "{}", ours.1);
    let message = |t: &str| serde_json::from_str::<Value>(t).unwrap()["message"].clone();
    assert_eq!(message(&ours.1), message(&theirs.1));
    assert_eq!(message(&ours.1), "field label not supported: spec.weight");
    // A version not served is not found, as kube-apiserver has it.
    let alpha = "/apis/stable.example.com/v1alpha1/namespaces/default/shirts";
    let (ours, theirs) = both(alpha, None).await;
    assert_eq!((ours.0, theirs.0), (404, 404));

    // Served here: the request metrics name the version only for what is served here.
    let served = |text: &str, verb: &str| {
        text.lines().any(|l| {
            l.starts_with("apiserver_request_total{")
                && [
                    format!(r#"verb="{verb}""#),
                    r#"version="v1beta1""#.to_owned(),
                    r#"resource="shirts""#.to_owned(),
                ]
                .iter()
                .all(|w| l.contains(w.as_str()))
        })
    };
    let text = metrics().await;
    assert!(served(&text, "GET") && served(&text, "LIST"), "{text}");

    // A field-selected watch of v1beta1, routed by the storage version's trigger, sees red turn
    // blue at v1beta1, as kube-apiserver's watch of v1beta1 does.
    let template = r#"jsonpath={.apiVersion} {.metadata.name} {.spec.color}{"\n"}"#;
    let watch_args = [
        "get",
        "shirts.v1beta1.stable.example.com",
        "--field-selector",
        "spec.color=blue",
        "--watch-only",
        "-o",
        template,
    ];
    let mut ours = Proc::spawn(
        "kubectl-watch",
        k.command(&watch_args),
        kas.dir.path().join("watch-beta-ours.log"),
    );
    let mut theirs = Proc::spawn(
        "kubectl-watch",
        direct.command(&watch_args),
        kas.dir.path().join("watch-beta-theirs.log"),
    );
    wait_until("the v1beta1 watch routed", limit, async || {
        metrics()
            .await
            .lines()
            .any(|l| l == r#"watchcache_watchers{resource="shirts",routing="routed"} 1"#)
    })
    .await;
    // Give kube-apiserver's watch the time to start too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, before) = get(&wc.url, &format!("{beta}/red"), None).await;
    let before: Value = serde_json::from_str(&before).unwrap();
    let rv = before["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    must(
        &k.with_stdin(&["apply", "-f", "-"], &shirt("red", "blue", 1))
            .await,
        "red turns blue",
    );
    must(
        &k.with_stdin(&["apply", "-f", "-"], &shirt("green", "green", 4))
            .await,
        "a green shirt",
    );
    let want = ["stable.example.com/v1beta1 red blue"];
    wait_until("both watches see red turn blue", limit, async || {
        watch_lines(&mut ours).0 == want && watch_lines(&mut theirs).0 == want
    })
    .await;
    // The same watch's frames, from the revision before: byte for byte kube-apiserver's.
    let path = format!(
        "{beta}?watch=1&fieldSelector=spec.color%3Dblue&resourceVersion={rv}&timeoutSeconds=2"
    );
    let (ours_frames, theirs_frames) = both(&path, None).await;
    assert_eq!(ours_frames, theirs_frames);
    assert!(
        ours_frames
            .1
            .contains(r#""apiVersion":"stable.example.com/v1beta1""#),
        "{}",
        ours_frames.1
    );
    ours.stop();
    theirs.stop();
}

//! client-go's `metav1.ListOptions.ShardSelector` (KEP-5866), unchanged, against watchcache over
//! TLS (HTTP/2, as client-go connects), in JSON and in protobuf, in its recommended set-up (on
//! kube-apiserver's etcd, writes forwarded to it with `--apiserver-kubeconfig`): `wc-shards`
//! (tests/clientgo-shards, client-go v0.36.6, built by `scripts/k8s-peers clientgo`) lists,
//! watches and runs an informer (WatchList, the selector set by a tweak-list-options func as
//! kube-state-metrics does) with the ranges this test chooses. This test seeds the pods, then
//! checks every set the program reports against its own FNV-1a of the server's uids and
//! namespaces: the LISTs (uid, namespace, an OR of two ranges, each also composed with a label
//! selector), the echoed `shardInfo`, the WATCH events of the program's creates, updates and
//! deletes, the informer's initial set and events, and a bad selector as client-go's 400
//! BadRequest `StatusError` naming the position.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::etcd::{EtcdVersion, etcd_version};
use support::k8s_peers::clientgo_shards_bin;
use support::kube::{KubeApiserver, Watchcache};

/// FNV-1a 64, written here from its definition (offset basis 0xcbf29ce484222325, prime
/// 0x100000001b3), independently of the crate's and of Go's `hash/fnv`.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// A pod as the program's lines name it: namespace, name, uid.
type Item = (String, String, String);

/// A shard selector this test hands the program: a name, a path, ranges (end `None` is 2^64).
struct Shard {
    name: &'static str,
    path: &'static str,
    ranges: Vec<(u64, Option<u64>)>,
}

impl Shard {
    /// The program's `--shard` argument.
    fn arg(&self) -> String {
        let ranges: Vec<String> = self
            .ranges
            .iter()
            .map(|(s, e)| match e {
                Some(e) => format!("{s:016x}-{e:016x}"),
                None => format!("{s:016x}-10000000000000000"),
            })
            .collect();
        format!("{}={}:{}", self.name, self.path, ranges.join(","))
    }

    /// Upstream's canonical expression, as the server echoes it in `shardInfo`.
    fn expr(&self) -> String {
        self.ranges
            .iter()
            .map(|(s, e)| {
                let e = e.map_or("0x10000000000000000".to_owned(), |e| format!("0x{e:016x}"));
                format!("shardRange({}, '0x{s:016x}', '{e}')", self.path)
            })
            .collect::<Vec<_>>()
            .join(" || ")
    }

    fn selects(&self, (ns, _, uid): &Item) -> bool {
        let h = fnv(if self.path == "object.metadata.namespace" {
            ns
        } else {
            uid
        });
        self.ranges
            .iter()
            .any(|(s, e)| h >= *s && e.is_none_or(|e| h < e))
    }
}

fn item(v: &Value) -> Item {
    let s = |k: &str| {
        v[k].as_str()
            .unwrap_or_else(|| panic!("no {k} in {v}"))
            .to_owned()
    };
    (s("namespace"), s("name"), s("uid"))
}

fn items(v: &Value) -> BTreeSet<Item> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list of items: {v}"))
        .iter()
        .map(item)
        .collect()
}

fn events(v: &Value) -> Vec<(String, Item)> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|e| (e["type"].as_str().unwrap().to_owned(), item(e)))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_lists_watches_and_informs_by_shard_selector_in_json_and_protobuf() {
    // The program first: a failure to build it is the clearest message.
    let program = clientgo_shards_bin();
    let etcd = etcd_version(EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let upstream = kas.admin_kubeconfig.display().to_string();
    let wc = Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &["--apiserver-kubeconfig", &upstream],
    )
    .await;
    let kc = wc.admin_kubeconfig.clone();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kc).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();

    // 30 pods over three namespaces, half of them app=web, created through watchcache (which
    // forwards them to kube-apiserver). The namespaces and their service accounts first: no
    // controller manager runs here.
    let namespaces = ["a", "b", "other"];
    for ns in namespaces {
        let meta = |name: &str| json!({"metadata": {"name": name}});
        let n: Namespace = serde_json::from_value(meta(ns)).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &n)
            .await
            .unwrap();
        let sa: ServiceAccount = serde_json::from_value(meta("default")).unwrap();
        Api::<ServiceAccount>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &sa)
            .await
            .unwrap();
    }
    let mut web = BTreeSet::new();
    for i in 0..30 {
        let ns = namespaces[i % 3];
        let app = if i % 2 == 0 { "web" } else { "db" };
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}
        }))
        .unwrap();
        Api::<Pod>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        if app == "web" {
            web.insert((ns.to_owned(), format!("p{i}")));
        }
    }
    let seeds: BTreeSet<Item> = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            let m = &p.metadata;
            (
                m.namespace.clone().unwrap(),
                m.name.clone().unwrap(),
                m.uid.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(seeds.len(), 30);

    let half = 1u64 << 63;
    let quarter = 1u64 << 62;
    let ns_a = fnv("a");
    let shards = [
        Shard {
            name: "uid",
            path: "object.metadata.uid",
            ranges: vec![(0, Some(half))],
        },
        Shard {
            name: "namespace",
            path: "object.metadata.namespace",
            ranges: vec![(ns_a, ns_a.checked_add(1))],
        },
        Shard {
            name: "or",
            path: "object.metadata.uid",
            ranges: vec![(0, Some(quarter)), (3 * quarter, None)],
        },
    ];
    let shard = |name: &str| shards.iter().find(|s| s.name == name).unwrap();
    let bad = "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')";

    let mut cmd = tokio::process::Command::new(&program);
    cmd.arg(format!("--kubeconfig={}", kc.display()))
        .arg("--label-selector=app=web")
        .arg(format!("--bad={bad}"))
        .arg("--watch=uid,namespace")
        .arg("--informer=or")
        .arg("--namespaces=a,b,other")
        .arg("--pods=12")
        .arg("--timeout=20s")
        .kill_on_drop(true);
    for sh in &shards {
        cmd.arg(format!("--shard={}", sh.arg()));
    }
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .expect("wc-shards ends within 3 minutes")
        .expect("run wc-shards");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "wc-shards failed ({}):\n{stderr}\nstdout:\n{stdout}",
        out.status
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();

    let (mut uid_watched, mut unsharded) = (0, 0);
    for ct in ["json", "protobuf"] {
        let of = |kind: &str| -> Vec<&Value> {
            lines
                .iter()
                .filter(|l| l["ct"] == ct && l["kind"] == kind)
                .collect()
        };
        // The answer is in the content type asked for: the protobuf pass is protobuf on the wire.
        let media = if ct == "json" {
            "application/json"
        } else {
            "application/vnd.kubernetes.protobuf"
        };
        let wire = |l: &Value| {
            assert!(
                l["answer"].as_str().unwrap_or("").starts_with(media),
                "{ct}: answered in another type: {l}"
            );
        };

        // LIST: each selector alone and with the label selector, exactly the hashed sets.
        let lists = of("list");
        assert_eq!(lists.len(), 2 * shards.len(), "{ct}: {lists:?}");
        for l in lists {
            let name = l["name"].as_str().unwrap();
            let labelled = name.ends_with("+label");
            let sh = shard(name.trim_end_matches("+label"));
            let want: BTreeSet<Item> = seeds
                .iter()
                .filter(|i| {
                    sh.selects(i) && (!labelled || web.contains(&(i.0.clone(), i.1.clone())))
                })
                .cloned()
                .collect();
            assert!(
                !want.is_empty() && want.len() < seeds.len(),
                "{name}: the seeds split"
            );
            assert_eq!(items(&l["items"]), want, "{ct} list {name}");
            assert_eq!(
                l["sent"],
                sh.expr().as_str(),
                "{ct} list {name}: the parameter"
            );
            assert_eq!(
                l["shardInfo"],
                sh.expr().as_str(),
                "{ct} list {name}: the echo"
            );
            wire(l);
        }

        // A bad selector: client-go's StatusError, 400 BadRequest, naming the position.
        let errors = of("error");
        assert_eq!(errors.len(), 2, "{ct}: {errors:?}");
        for e in errors {
            assert_eq!(e["statusError"], true, "{ct}: {e}");
            assert_eq!(e["code"], 400, "{ct}: {e}");
            assert_eq!(e["reason"], "BadRequest", "{ct}: {e}");
            let m = e["message"].as_str().unwrap();
            assert!(
                m.contains("invalid shard selector") && m.contains("(at position 32)"),
                "{ct}: {e}"
            );
        }

        // What the program changed after its watchers started, as the server answered it.
        let made: Vec<(String, Item)> = of("mutation")
            .iter()
            .map(|m| (m["type"].as_str().unwrap().to_owned(), item(&m["object"])))
            .collect();
        assert_eq!(made.len(), 3 * 12, "{ct}: {made:?}");
        // The reference: a watch without a selector, opened beside the others, sees each of
        // them (and, as kube-apiserver, a MODIFIED with the deletionTimestamp before DELETED).
        let watches = of("watch");
        assert_eq!(watches.len(), 3, "{ct}: {watches:?}");
        let reference = watches.iter().find(|w| w["name"] == "all").unwrap();
        assert_eq!(reference["sent"], "", "{ct}: {reference}");
        let all = events(&reference["events"]);
        let mut rest = all.iter();
        for m in &made {
            assert!(
                rest.any(|e| e == m),
                "{ct}: {m:?} is not in the unsharded watch, in order: {all:?}"
            );
        }
        let uids: BTreeSet<&String> = made.iter().map(|(_, i)| &i.2).collect();
        assert!(
            all.iter().all(|(_, i)| uids.contains(&i.2)),
            "{ct}: {all:?}"
        );
        let expect = |sh: &Shard| -> Vec<(String, Item)> {
            all.iter().filter(|(_, i)| sh.selects(i)).cloned().collect()
        };

        // WATCH: only the changes of objects in range, each once, in order.
        for w in watches.iter().filter(|w| w["name"] != "all") {
            let sh = shard(w["name"].as_str().unwrap());
            assert_eq!(events(&w["events"]), expect(sh), "{ct} watch {}", sh.name);
            assert_eq!(w["sent"], sh.expr().as_str(), "{ct}: {w}");
            assert_eq!(w["watchList"], false, "{ct}: {w}");
            wire(w);
            if sh.name == "uid" {
                uid_watched += expect(sh).len();
                unsharded += all.len();
            }
        }
        // The namespace shard is a's: a third of the pods, whatever the uids.
        let in_a: BTreeSet<String> = expect(shard("namespace"))
            .into_iter()
            .map(|(_, i)| i.1)
            .collect();
        assert_eq!(in_a.len(), 4, "{ct}: {in_a:?}");

        // The informer: a WatchList with the selector, its initial set the shard's, then the
        // shard's changes.
        let informers = of("informer");
        assert_eq!(informers.len(), 1, "{ct}: {informers:?}");
        let inf = informers[0];
        let sh = shard("or");
        assert_eq!(inf["watchList"], true, "{ct}: {inf}");
        assert_eq!(inf["sent"], sh.expr().as_str(), "{ct}: {inf}");
        wire(inf);
        let want: BTreeSet<Item> = seeds.iter().filter(|i| sh.selects(i)).cloned().collect();
        assert_eq!(items(&inf["items"]), want, "{ct} informer: initial");
        assert_eq!(events(&inf["events"]), expect(sh), "{ct} informer: events");
    }
    // Over both passes (24 pods) the uid shard saw some changes and missed some.
    assert!(
        uid_watched > 0 && uid_watched < unsharded,
        "{uid_watched} of {unsharded}"
    );
}

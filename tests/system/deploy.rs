//! What an operator deploys, tried as they would: the OCI image `scripts/image` builds, pulled and
//! run by podman (Debian's, with runc: crun refuses this machine's hybrid cgroup layout) in front
//! of a real etcd; and the Helm chart in `deploy/helm/watchcache` and the static-pod manifest in
//! `deploy/static-pod`, linted by helm (built from the Go module proxy by `scripts/helm-peer`)
//! and accepted by a real kube-apiserver in a server-side dry run, with flags the binary takes.

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::etcd::{client, etcd, seed};
use support::kube::KubeApiserver;
use support::kubectl::{Kubectl, must};
use watchcache_etcd::free_port;

/// Runs a command to its end; panics with its output unless it succeeds.
fn ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A list's or an object's resourceVersion (`metadata` of `v`).
fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no resourceVersion: {v}"))
        .parse()
        .unwrap()
}

/// Adds a watch response's chunk to `buf` and takes out the events it completes.
fn events_in(buf: &mut Vec<u8>, chunk: &[u8]) -> Vec<Value> {
    buf.extend_from_slice(chunk);
    let mut events = Vec::new();
    while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = buf.drain(..=nl).collect();
        events.push(serde_json::from_slice(&line).unwrap());
    }
    events
}

/// Panics, naming the Debian package scripts/test installs, when `tool` is not on PATH.
fn require(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap()
        .status
        .success();
    assert!(
        found,
        "{tool} is missing: scripts/test installs it (Debian package {tool})"
    );
}

/// helm, built once per test process by scripts/helm-peer.
fn helm() -> Command {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    let bin = HELM.get_or_init(|| {
        let out =
            ok(Command::new(support::repo().join("scripts/helm-peer")).stderr(Stdio::inherit()));
        PathBuf::from(out.trim())
    });
    // Its caches and settings in a directory of this process's own, never the user's.
    let home = std::env::temp_dir().join(format!("wc-helm-{}", std::process::id()));
    let mut c = Command::new(bin);
    c.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    c
}

fn chart() -> String {
    support::repo()
        .join("deploy/helm/watchcache")
        .display()
        .to_string()
}

const ETCD_SET: &str = "etcd.endpoints={https://10.0.0.10:2379,https://10.0.0.11:2379}";

/// `helm template` of the chart in namespace `watchcache`, with these `--set` values.
fn render(sets: &[&str]) -> Output {
    let mut c = helm();
    c.args(["template", "wc", &chart(), "--namespace", "watchcache"]);
    for s in sets {
        c.args(["--set", s]);
    }
    output(&mut c)
}

fn rendered(sets: &[&str]) -> String {
    let out = render(sets);
    assert!(
        out.status.success(),
        "helm template {sets:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The objects of a List by kind.
fn of_kind<'a>(list: &'a Value, kind: &str) -> Vec<&'a Value> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == kind)
        .collect()
}

fn args_of(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// Runs the binary with a manifest's arguments: clap must take every flag (a usage error exits
/// 2); with the manifest's files absent here, the start then fails naming one of them.
fn flags_are_the_binarys(args: &[String], files_under: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("watchcache {args:?} neither failed nor refused its flags in 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_ne!(status.code(), Some(2), "usage error for {args:?}: {stderr}");
    assert!(!status.success(), "{args:?} started: {stderr}");
    assert!(
        stderr.contains(files_under),
        "the error names none of the manifest's files ({files_under}): {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_lints_renders_both_set_ups_and_kube_apiserver_accepts_them() {
    let c = chart();
    for mode in ["recommended", "proxy"] {
        let mode_set = format!("mode={mode}");
        let out = ok(helm().args([
            "lint", "--strict", &c, "--set", ETCD_SET, "--set", &mode_set,
        ]));
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{out}"
        );
    }
    // Values that cannot work are refused, naming the value.
    for (sets, names) in [
        (vec![], "etcd.endpoints"),
        (vec![ETCD_SET, "mode=bogus"], "mode: \"bogus\""),
        (vec![ETCD_SET, "antiAffinity=always"], "antiAffinity"),
    ] {
        let out = render(&sets);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sets:?} rendered");
        assert!(err.contains(names), "{sets:?}: {err}");
    }

    let etcd = etcd().await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let k = Kubectl::with_kubeconfig(&kas.admin_kubeconfig);
    k.ok(&["create", "namespace", "watchcache"]).await;
    let apply = |manifest: String| {
        let k = &k;
        async move {
            must(
                &k.with_stdin(
                    &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
                    &manifest,
                )
                .await,
                "kubectl apply --dry-run=server",
            )
        }
    };

    let list = json(&apply(rendered(&[ETCD_SET])).await);
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    let deployment = of_kind(&list, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args = args_of(deployment);
    for want in [
        "--etcd=https://10.0.0.10:2379",
        "--etcd=https://10.0.0.11:2379",
        "--apiserver-kubeconfig=/etc/watchcache/kubeconfig/kubeconfig",
        "--etcd-certfile=/etc/watchcache/etcd/tls.crt",
        "--tls-cert-file=/etc/watchcache/serving/tls.crt",
        "--anonymous-auth=true",
        "--shutdown-delay-duration=5s",
        "--shutdown-watch-termination-grace-period=30s",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
    }
    assert_eq!(pod["terminationGracePeriodSeconds"], 60);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    assert!(container["resources"]["requests"]["memory"].is_string());
    assert!(container["resources"]["limits"]["memory"].is_string());
    assert!(
        pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .is_array()
    );
    assert_eq!(
        of_kind(&list, "PodDisruptionBudget")[0]["spec"]["maxUnavailable"],
        1
    );
    let role = of_kind(&list, "ClusterRole")[0];
    let rules = role["rules"].to_string();
    for r in ["users", "groups", "serviceaccounts", "uids", "userextras/*"] {
        assert!(rules.contains(&format!("\"{r}\"")), "{r} not in {rules}");
    }
    assert!(rules.contains("impersonate"), "{rules}");
    assert!(
        !rules.contains("\"watch\""),
        "recommended reads etcd: {rules}"
    );
    let kubeconfig = of_kind(&list, "ConfigMap")[0]["data"]["kubeconfig"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(kubeconfig.contains("tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token"));
    flags_are_the_binarys(&args, "/etc/watchcache/");

    let list = json(&apply(rendered(&["mode=proxy", "replicaCount=2"])).await);
    let deployment = of_kind(&list, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let args = args_of(deployment);
    assert!(
        args.iter()
            .any(|a| a == "--upstream-kubeconfig=/etc/watchcache/kubeconfig/kubeconfig"),
        "{args:?}"
    );
    assert!(!args.iter().any(|a| a.starts_with("--etcd")), "{args:?}");
    let rules = of_kind(&list, "ClusterRole")[0]["rules"].to_string();
    assert!(
        rules.contains("\"list\"") && rules.contains("\"watch\""),
        "{rules}"
    );
    flags_are_the_binarys(&args, "/etc/watchcache/");

    // As kube-controller-manager would have made it: a pod's service account must exist.
    k.ok(&["create", "serviceaccount", "default", "-n", "kube-system"])
        .await;
    let manifest =
        std::fs::read_to_string(support::repo().join("deploy/static-pod/watchcache.yaml")).unwrap();
    let pod = json(&apply(manifest).await);
    assert_eq!(pod["kind"], "Pod");
    let args: Vec<String> = pod["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    flags_are_the_binarys(&args, "/etc/kubernetes/");
}

/// podman on a storage of its own (never the machine's), with runc.
struct Podman {
    /// Lowercase: podman names an image pulled from an OCI layout after the layout's path.
    dir: PathBuf,
}

impl Podman {
    fn new() -> Podman {
        for tool in ["podman", "runc", "umoci"] {
            require(tool);
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!("wc-image-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Podman { dir }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.dir.join("run"))
            .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"])
            .args(["--events-backend", "none"])
            .args(args);
        c
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Unmounts its overlays, so the directory can go.
        let _ = self.cmd(&["system", "reset", "--force"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_as_a_non_root_user_without_a_shell_and_serves_from_etcd() {
    let podman = Podman::new();
    let layout = podman.dir.join("oci");
    ok(Command::new(support::repo().join("scripts/image"))
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_watchcache"))
        .arg("--out")
        .arg(&layout)
        .args(["--tag", "test"]));

    // Nothing in the layer but the binary, the libraries it links, the CA bundle, the user's
    // files and its data directory.
    let index = json(&std::fs::read_to_string(layout.join("index.json")).unwrap());
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let manifest = json(
        &std::fs::read_to_string(blob(index["manifests"][0]["digest"].as_str().unwrap())).unwrap(),
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    let listing = ok(Command::new("tar")
        .arg("-tvzf")
        .arg(blob(layers[0]["digest"].as_str().unwrap())));
    let mut files = Vec::new();
    for line in listing.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (mode, owner, path) = (cols[0], cols[1], *cols.last().unwrap());
        let path = path.trim_start_matches("./").trim_end_matches('/');
        if path == "var/lib/watchcache" {
            assert_eq!(owner, "65532/65532", "{line}");
        }
        if mode.starts_with('-') {
            files.push(path.to_owned());
        }
    }
    for f in &files {
        let allowed = f == "usr/local/bin/watchcache"
            || f == "etc/passwd"
            || f == "etc/group"
            || f == "etc/ssl/certs/ca-certificates.crt"
            || f.starts_with("lib/x86_64-linux-gnu/lib")
            || f.starts_with("lib64/ld-linux");
        assert!(allowed, "{f} in the image: {files:?}");
    }
    for needed in [
        "etc/ssl/certs/ca-certificates.crt",
        "lib64/ld-linux",
        "usr/local/bin/watchcache",
    ] {
        assert!(
            files.iter().any(|f| f.starts_with(needed)),
            "no {needed} in the image: {files:?}"
        );
    }

    let pulled = ok(&mut podman.cmd(&["pull", "-q", &format!("oci:{}:test", layout.display())]));
    let image = pulled.trim().lines().last().unwrap().to_owned();
    let config = json(&ok(&mut podman.cmd(&[
        "image",
        "inspect",
        &image,
        "--format",
        "{{json .Config}}",
    ])));
    assert_eq!(config["User"], "65532:65532", "{config}");
    assert_eq!(
        config["Entrypoint"][0], "/usr/local/bin/watchcache",
        "{config}"
    );
    // The sandbox's hard limits are below podman's defaults, which it may not raise.
    let limits = [
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
    ];

    let mut run = vec!["run", "--rm", "--network", "host"];
    run.extend(limits);
    run.extend(["--entrypoint", "/bin/sh", &image, "-c", "true"]);
    let shell = output(&mut podman.cmd(&run));
    let err = String::from_utf8_lossy(&shell.stderr);
    assert!(
        !shell.status.success() && err.contains("/bin/sh: no such file or directory"),
        "the image has a shell, or did not run: {err}"
    );
    // While its own entrypoint runs.
    let mut run = vec!["run", "--rm", "--network", "host"];
    run.extend(limits);
    run.extend([image.as_str(), "--version"]);
    let version = ok(&mut podman.cmd(&run));
    assert_eq!(
        version.trim(),
        format!("watchcache {}", env!("CARGO_PKG_VERSION"))
    );

    let etcd = etcd().await;
    seed(&mut client(&[etcd.server.url()]).await, 3, 1).await;
    let port = free_port().unwrap();
    let listen = format!("127.0.0.1:{port}");
    let name = format!("wc-image-{}", std::process::id());
    let etcd_url = etcd.server.url();
    let mut run = vec!["run", "-d", "--name", &name, "--network", "host"];
    run.extend(limits);
    run.extend([
        image.as_str(),
        "serve",
        "--etcd",
        &etcd_url,
        "--listen",
        &listen,
        "--resources",
        "pods",
    ]);
    ok(&mut podman.cmd(&run));
    let base = format!("http://{listen}");
    let http = reqwest::Client::new();
    let start = Instant::now();
    loop {
        let ready = http.get(format!("{base}/readyz")).send().await;
        if matches!(&ready, Ok(r) if r.status() == 200) {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let logs = output(&mut podman.cmd(&["logs", &name]));
            panic!(
                "the image's server was not ready in 60 s: {ready:?}\n{}",
                String::from_utf8_lossy(&logs.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pods: Value = http
        .get(format!("{base}/api/v1/pods"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pods["items"].as_array().unwrap().len(), 3, "{pods}");
    // The server's process, seen from the host, runs as the image's user.
    let pid = ok(&mut podman.cmd(&["inspect", &name, "--format", "{{.State.Pid}}"]));
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid.split_whitespace().skip(1).all(|u| u == "65532"),
        "{uid}"
    );
    ok(&mut podman.cmd(&["rm", "--force", &name]));
}

/// The ConfigMaps of namespace `default`, which the drain and replica tests write and watch.
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Creates ConfigMaps `NAME-0`, `NAME-1`, ... in `default` through kube-apiserver, one every
/// 100 ms, `count` of them or until `going` is false; their resourceVersions, in order.
fn write_configmaps(
    kas: &KubeApiserver,
    name: &'static str,
    count: usize,
    going: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<u64>> {
    let (url, ca, admin) = (
        kas.url.clone(),
        kas.pki.ca.cert_file.clone(),
        kas.pki.admin.clone(),
    );
    tokio::spawn(async move {
        let mut written = Vec::new();
        while written.len() < count && going.load(std::sync::atomic::Ordering::Relaxed) {
            let body = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}-{}"}}}}"#,
                written.len()
            );
            let (code, out) = support::kube::https_request(
                &url,
                &ca,
                Some(&admin),
                "POST",
                CONFIGMAPS,
                Some(&body),
            )
            .await
            .unwrap();
            assert_eq!(code, 201, "{out}");
            written.push(rv_of(&json(&out)));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        written
    })
}

/// One watch's lines over plain HTTP: (type, resourceVersion) in order, and when the stream
/// ended.
type Watched = (Vec<(String, u64)>, Instant);

/// Reads a watch to its end, or until it shows `until` (a resourceVersion).
fn watch_from(url: String, until: Option<u64>) -> tokio::task::JoinHandle<Watched> {
    tokio::spawn(async move {
        let mut res = reqwest::get(&url).await.unwrap();
        assert_eq!(res.status(), 200, "{url}");
        let mut seen = Vec::new();
        let mut buf = Vec::new();
        while let Some(chunk) = res.chunk().await.unwrap() {
            for ev in events_in(&mut buf, &chunk) {
                let kind = ev["type"].as_str().unwrap().to_owned();
                assert_ne!(kind, "ERROR", "{url}: {ev}");
                let rv = rv_of(&ev["object"]);
                seen.push((kind, rv));
                if until.is_some_and(|u| rv >= u) {
                    return (seen, Instant::now());
                }
            }
        }
        (seen, Instant::now())
    })
}

/// The changes (bookmarks left out) of a watch, by resourceVersion.
fn changes(seen: &[(String, u64)]) -> Vec<u64> {
    seen.iter()
        .filter(|(k, _)| k != "BOOKMARK")
        .map(|&(_, rv)| rv)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_replica_ends_its_watches_spread_with_a_bookmark_to_resume_elsewhere() {
    let etcd = etcd().await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let (pa, pb) = (free_port().unwrap(), free_port().unwrap());
    let (la, lb) = (format!("127.0.0.1:{pa}"), format!("127.0.0.1:{pb}"));
    let mut a = support::kube::Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &[
            "--insecure-listen",
            &la,
            "--shutdown-delay-duration",
            "2s",
            "--shutdown-watch-termination-grace-period",
            "4s",
        ],
    )
    .await;
    let b = support::kube::Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &["--insecure-listen", &lb],
    )
    .await;
    let (base_a, base_b) = (format!("http://{la}"), format!("http://{lb}"));
    let cms = CONFIGMAPS;
    let list: Value = reqwest::get(format!("{base_b}{cms}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let start_rv = rv_of(&list);
    let watch = |base: &str, rv: u64, bookmarks: bool| {
        format!(
            "{base}{cms}?watch=1&resourceVersion={rv}&allowWatchBookmarks={bookmarks}&timeoutSeconds=600"
        )
    };

    // Writes through kube-apiserver, every 100 ms, for 10 s.
    let going = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = write_configmaps(&kas, "cm", 100, going);
    let drained: Vec<_> = (0..20)
        .map(|_| watch_from(watch(&base_a, start_rv, true), None))
        .collect();
    let no_bookmarks = watch_from(watch(&base_a, start_rv, false), None);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let term = Instant::now();
    a.proc.term();
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The delay: /readyz fails, and everything else is served.
    let ready = reqwest::get(format!("{base_a}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 500);
    assert_eq!(
        reqwest::get(format!("{base_a}{cms}"))
            .await
            .unwrap()
            .status(),
        200
    );

    let mut ends = Vec::new();
    let mut resumed = Vec::new();
    for w in drained {
        let (seen, ended) = tokio::time::timeout(Duration::from_secs(15), w)
            .await
            .expect("every watch ends within the delay, the grace period and a few ticks")
            .unwrap();
        let since = ended.duration_since(term);
        assert!(
            since >= Duration::from_millis(1900),
            "ended {since:?} after SIGTERM"
        );
        ends.push(since);
        // A last bookmark, as new as any change it was sent.
        let (kind, rv) = seen.last().unwrap().clone();
        assert_eq!(kind, "BOOKMARK", "{seen:?}");
        assert!(seen.iter().all(|&(_, r)| r <= rv), "{seen:?}");
        resumed.push((changes(&seen), rv));
    }
    ends.sort();
    let spread = *ends.last().unwrap() - ends[0];
    assert!(
        spread >= Duration::from_secs(2) && *ends.last().unwrap() <= Duration::from_secs(9),
        "ends {ends:?}: spread over the 4 s grace period, not at once"
    );
    let (seen, _) = no_bookmarks.await.unwrap();
    assert!(seen.iter().all(|(k, _)| k != "BOOKMARK"), "{seen:?}");
    // The replica exits cleanly once drained.
    let exit = Instant::now();
    let status = loop {
        if let Some(s) = a.proc.exited() {
            break s;
        }
        assert!(
            exit.elapsed() < Duration::from_secs(15),
            "still running after its drain"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");

    // Each watch resumes on the other replica from its bookmark: together, its changes are
    // the whole sequence's, each once, in order, none missing.
    let last = *writer.await.unwrap().last().unwrap();
    // Every change, from a watch on the other replica from the start.
    let (all, _) = tokio::time::timeout(
        Duration::from_secs(20),
        watch_from(watch(&base_b, start_rv, false), Some(last)),
    )
    .await
    .expect("a watch from the start reaches the last write")
    .unwrap();
    let all = changes(&all);
    assert_eq!(all.len(), 100, "{all:?}");
    for (before, from) in resumed {
        let (after, _) = tokio::time::timeout(
            Duration::from_secs(20),
            watch_from(watch(&base_b, from, true), Some(last)),
        )
        .await
        .expect("the resumed watch reaches the last write")
        .unwrap();
        let mut got = before;
        got.extend(changes(&after));
        assert_eq!(got, all, "resumed from {from}");
    }
    drop(b);
}

/// A watch of a quiet resource, drained from one replica, resumes on a replica restarted before
/// the drain began: its last bookmark is at or past that replica's start (whose window begins
/// there; older is 410), not at the resource's last change. The draining replica brings its
/// caches to etcd's revision first; a quiet resource's cache otherwise moves only with etcd's
/// progress notifications, seconds apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_drained_resumes_on_a_replica_restarted_before_the_drain() {
    // etcd 3.6, as clusters run: its progress notifications prove a revision (3.4.23's cannot,
    // and there a drained watch's last bookmark stays at its cache's own revision).
    let etcd = support::etcd::etcd_version(support::etcd::EtcdVersion::V36).await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let (la, lb) = (
        format!("127.0.0.1:{}", free_port().unwrap()),
        format!("127.0.0.1:{}", free_port().unwrap()),
    );
    let mut a = support::kube::Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &["--insecure-listen", &la],
    )
    .await;
    let b = support::kube::Watchcache::on_etcd(
        &kas.pki,
        &etcd.server.url(),
        &[
            "--insecure-listen",
            &lb,
            "--shutdown-watch-termination-grace-period",
            "1s",
        ],
    )
    .await;
    let (base_a, base_b) = (format!("http://{la}"), format!("http://{lb}"));
    const SECRETS: &str = "/api/v1/namespaces/default/secrets";
    let list = |base: String| async move {
        let r = reqwest::get(format!("{base}{SECRETS}")).await.unwrap();
        assert_eq!(r.status(), 200);
        rv_of(&r.json().await.unwrap())
    };
    let quiet_rv = list(base_b.clone()).await;
    let quiet = watch_from(
        format!(
            "{base_b}{SECRETS}?watch=1&resourceVersion={quiet_rv}&allowWatchBookmarks=true&timeoutSeconds=600"
        ),
        None,
    );
    // Changes elsewhere move etcd's revision past the secrets' last change.
    let going = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let written = write_configmaps(&kas, "quiet", 5, going).await.unwrap();
    a.restart(&kas.pki).await;
    let a_start = list(base_a.clone()).await;
    assert!(a_start >= *written.last().unwrap(), "{a_start} {written:?}");
    b.proc.term();
    let (seen, _) = tokio::time::timeout(Duration::from_secs(15), quiet)
        .await
        .expect("the drain ends the watch")
        .unwrap();
    let (kind, rv) = seen.last().unwrap().clone();
    assert_eq!(kind, "BOOKMARK", "{seen:?}");
    assert!(
        rv >= a_start,
        "the last bookmark ({rv}) predates the restarted replica's start ({a_start})"
    );
    let (code, line) = tokio::time::timeout(
        Duration::from_secs(10),
        expired_watch(format!(
            "{base_a}{SECRETS}?watch=1&resourceVersion={rv}&timeoutSeconds=1"
        )),
    )
    .await
    .expect("the resumed watch answers")
    .unwrap();
    assert_eq!(
        code, 0,
        "resumed from {rv} on the restarted replica: {line}"
    );
}

/// A watch's first ERROR event's code (0 when the stream ends without one), and its line.
fn expired_watch(url: String) -> tokio::task::JoinHandle<(i64, String)> {
    tokio::spawn(async move {
        let mut res = reqwest::get(&url).await.unwrap();
        assert_eq!(res.status(), 200, "{url}");
        let mut buf = Vec::new();
        while let Some(chunk) = res.chunk().await.unwrap() {
            for ev in events_in(&mut buf, &chunk) {
                if ev["type"] == "ERROR" {
                    return (ev["object"]["code"].as_i64().unwrap(), ev.to_string());
                }
            }
        }
        (0, String::new())
    })
}

/// A reflector's loop over plain HTTP, through a load balancer: watch from `rv`, resume from the
/// last resourceVersion seen (a change or a bookmark) whenever the stream ends or the connection
/// fails, relist on 410 (counted: the goal is none). Each attempt is a new connection, so the
/// balancer picks the replica. Returns the changes seen, the relists (each 410, described) and the
/// resumes.
async fn reflect(
    base: String,
    path: String,
    mut rv: u64,
    mut until: tokio::sync::watch::Receiver<u64>,
) -> (Vec<u64>, Vec<String>, usize) {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let (mut seen, mut relists, mut resumes) = (Vec::new(), Vec::new(), 0);
    let started = Instant::now();
    loop {
        let last = *until.borrow();
        if last > 0 && rv >= last {
            return (seen, relists, resumes);
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "stuck at {rv}"
        );
        let url = format!(
            "{base}{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=600"
        );
        let Ok(mut res) = http.get(&url).send().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if res.status() != 200 {
            // 429 from a draining replica, 503 while none is ready: retry, as client-go does.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let mut buf = Vec::new();
        'stream: loop {
            // The last write's resourceVersion, once known, ends an idle stream too.
            let chunk = tokio::select! {
                c = res.chunk() => c,
                _ = until.changed() => {
                    let last = *until.borrow();
                    if last > 0 && rv >= last {
                        return (seen, relists, resumes);
                    }
                    continue 'stream;
                }
            };
            let Ok(Some(chunk)) = chunk else {
                break 'stream;
            };
            for ev in events_in(&mut buf, &chunk) {
                if ev["type"] == "ERROR" {
                    assert_eq!(ev["object"]["code"], 410, "{ev}");
                    // What the failure names: when, from where, and the window it fell out of.
                    relists.push(format!(
                        "at {:.1} s, watching from {rv}: {}",
                        started.elapsed().as_secs_f64(),
                        ev["object"]["message"]
                    ));
                    let list: Value = http
                        .get(format!("{base}{path}"))
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    rv = rv_of(&list);
                    break 'stream;
                }
                let at = rv_of(&ev["object"]);
                if ev["type"] != "BOOKMARK" {
                    seen.push(at);
                }
                rv = at;
                let last = *until.borrow();
                if last > 0 && rv >= last {
                    return (seen, relists, resumes);
                }
            }
        }
        resumes += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_behind_haproxy_loses_nothing_and_relists_nothing() {
    let etcd = etcd().await;
    let kas = KubeApiserver::start(&etcd.server.url()).await;
    let drain = [
        "--shutdown-delay-duration",
        "2s",
        "--shutdown-watch-termination-grace-period",
        "3s",
    ];
    let mut replicas = Vec::new();
    let mut plain = Vec::new();
    for _ in 0..2 {
        let listen = format!("127.0.0.1:{}", free_port().unwrap());
        let mut args = vec!["--insecure-listen", &listen];
        args.extend(drain);
        replicas
            .push(support::kube::Watchcache::on_etcd(&kas.pki, &etcd.server.url(), &args).await);
        plain.push(listen);
    }
    // HAProxy (Debian's), TCP, taking a replica out when its /readyz fails.
    let dir = tempfile::tempdir().unwrap();
    let lb = format!("127.0.0.1:{}", free_port().unwrap());
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 1000\n\
             defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10m\n  timeout server 10m\n  retries 3\n  option redispatch\n\
             frontend fe\n  bind {lb}\n  default_backend be\n\
             backend be\n  balance roundrobin\n  option httpchk GET /readyz\n  http-check expect status 200\n  default-server inter 300ms fall 1 rise 2\n\
             server a {} check\n  server b {} check\n",
            plain[0], plain[1]
        ),
    )
    .unwrap();
    require("haproxy");
    let mut cmd = Command::new("haproxy");
    cmd.arg("-db").arg("-f").arg(&cfg);
    let _haproxy = support::kube::Proc::spawn("haproxy", cmd, dir.path().join("haproxy.log"));
    let base = format!("http://{lb}");
    let cms = CONFIGMAPS;
    // The clients start where both replicas can serve them: each replica's window starts at the
    // revision of its own first sync, and the two started at different moments (kube-apiserver
    // writes in between). What a client listed from one replica and watching on the other from
    // before that one's start gets is a 410, which is not what this test is about (semantics.md,
    // "History window").
    let mut start_rv = 0;
    for addr in &plain {
        start_rv = start_rv.max(loop {
            if let Ok(r) = reqwest::get(format!("http://{addr}{cms}")).await
                && r.status() == 200
            {
                break rv_of(&r.json().await.unwrap());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        });
    }
    // And through the balancer once both are in it.
    loop {
        if let Ok(r) = reqwest::get(format!("{base}{cms}")).await
            && r.status() == 200
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let t0 = Instant::now();
    let mut timeline = Vec::new();
    let (until_tx, until_rx) = tokio::sync::watch::channel(0u64);
    let clients: Vec<_> = (0..10)
        .map(|_| {
            tokio::spawn(reflect(
                base.clone(),
                cms.to_owned(),
                start_rv,
                until_rx.clone(),
            ))
        })
        .collect();
    // Writes through kube-apiserver every 100 ms while each replica in turn drains and restarts.
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = write_configmaps(&kas, "roll", usize::MAX, std::sync::Arc::clone(&writing));
    tokio::time::sleep(Duration::from_secs(1)).await;
    for r in replicas.iter_mut() {
        timeline.push(format!(
            "{:.1} s: a replica drains",
            t0.elapsed().as_secs_f64()
        ));
        r.proc.term();
        let exit = Instant::now();
        while r.proc.exited().is_none() {
            assert!(
                exit.elapsed() < Duration::from_secs(20),
                "a replica did not drain"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        timeline.push(format!("{:.1} s: it exited", t0.elapsed().as_secs_f64()));
        r.restart(&kas.pki).await;
        timeline.push(format!(
            "{:.1} s: it is ready again",
            t0.elapsed().as_secs_f64()
        ));
        // HAProxy takes it back after two passed checks.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.unwrap();
    until_tx.send(*written.last().unwrap()).unwrap();
    let mut total = 0;
    for c in clients {
        let (seen, relists, resumes) = tokio::time::timeout(Duration::from_secs(60), c)
            .await
            .expect("every client reaches the last write")
            .unwrap();
        assert!(
            relists.is_empty(),
            "relists: {relists:?}; the run: {timeline:?}"
        );
        assert_eq!(seen, written, "every change once, in order");
        // At least the second replica's drain ends each watch (all are on it by then).
        assert!(resumes >= 1, "{resumes}");
        total += resumes;
    }
    // And the first's, for the watches it held.
    assert!(total > 10, "{total} resumes");
    // A client whose resourceVersion predates a restarted replica's window (k/k#133810: a client
    // that reconnects to a replica whose cache starts later looped on "too old"): a 410 ERROR
    // event, then its relist succeeds, both ways client-go relists (at the last resourceVersion,
    // not older than it; and consistent), and a watch from the list's revision streams: once.
    for listen in &plain {
        let direct = format!("http://{listen}");
        let (seen, _) = tokio::time::timeout(
            Duration::from_secs(10),
            expired_watch(format!("{direct}{cms}?watch=1&resourceVersion={start_rv}")),
        )
        .await
        .expect("the stale watch answers at once")
        .unwrap();
        assert_eq!(seen, 410, "a watch before the restarted window");
        for query in [
            format!("resourceVersion={start_rv}&resourceVersionMatch=NotOlderThan"),
            String::new(),
        ] {
            let r = reqwest::get(format!("{direct}{cms}?{query}"))
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "relist ?{query}");
            let list: Value = r.json().await.unwrap();
            let rv = rv_of(&list);
            assert!(rv >= *written.last().unwrap(), "relist ?{query} at {rv}");
            assert_eq!(list["items"].as_array().unwrap().len(), written.len());
            let (code, _) = tokio::time::timeout(
                Duration::from_secs(10),
                expired_watch(format!(
                    "{direct}{cms}?watch=1&resourceVersion={rv}&timeoutSeconds=1"
                )),
            )
            .await
            .unwrap()
            .unwrap();
            assert_eq!(code, 0, "the watch after the relist streams");
        }
    }
    eprintln!(
        "10 clients through HAProxy, 2 replicas drained and restarted in turn: {} changes each, 0 relists, {total} resumes",
        written.len()
    );
}

//! The real binary as an operator runs it: the curl tour of README.md against `watchcache serve`
//! with its local etcd (so the README stays true), the local etcd's safety (a taken port fails
//! the start, `kill -9` leaves no etcd behind) and what the start and an etcd outage log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use watchcache::etcd::{LocalEtcd, free_port};

fn tour() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("<!-- tour:start -->")
        .expect("tour start marker");
    let end = readme.find("<!-- tour:end -->").expect("tour end marker");
    let block = &readme[start..end];
    let code = block
        .split("```sh")
        .nth(1)
        .expect("a sh block")
        .split("```")
        .next()
        .unwrap();
    code.to_owned()
}

fn start_server(dir: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .args([
            "serve",
            "--local-pki",
            "--listen",
            "127.0.0.1:8443",
            "--insecure-listen",
            "127.0.0.1:8080",
            "--local-etcd-port",
            "0",
        ])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..200 {
        let ok = Command::new("curl")
            .args(["-sf", "http://127.0.0.1:8080/readyz"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return child;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("watchcache did not become ready");
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "watchcache exits cleanly on SIGTERM: {status}"
    );
}

fn run(script: &str, dir: &Path) -> String {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tour failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn the_readme_tour_works() {
    let dir = tempfile::tempdir().unwrap();
    let script = tour();
    let server = start_server(dir.path());
    let out = run(&script, dir.path());
    stop(server);
    let list: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(list["kind"], "PodList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web-1", "web-4"], "node-1's pods");
    assert!(out.contains(r#"{"type":"ADDED","object":"#), "{out}");
    let tls_list = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "PodList")
        .nth(1)
        .unwrap_or_else(|| panic!("the list over TLS: {out}"));
    assert_eq!(
        tls_list["items"].as_array().unwrap().len(),
        3,
        "node-1's pods after the move: {out}"
    );
    assert!(out.contains(r#""nodeName":"node-1""#), "{out}");
    assert!(
        out.contains(r#"{"type":"BOOKMARK""#)
            && out.contains(r#""k8s.io/initial-events-end":"true""#),
        "{out}"
    );
    assert!(
        out.contains(r#""reason":"BadRequest""#) && out.contains("at position"),
        "{out}"
    );
    // After a restart the window starts at the current revision: the last line shows 410.
    let server = start_server(dir.path());
    let last = script.lines().rfind(|l| !l.trim().is_empty()).unwrap();
    let out = run(&format!("WC=http://127.0.0.1:8080\n{last}"), dir.path());
    stop(server);
    assert!(
        out.contains(r#"{"type":"ERROR","object":"#)
            && out.contains(r#""reason":"Expired""#)
            && out.contains(r#""code":410"#),
        "{out}"
    );
}

/// A free port whose neighbour 10 up is free too (the local etcd's client and peer ports).
fn free_etcd_port() -> u16 {
    loop {
        let p = free_port().unwrap();
        if p < 65_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10)).is_ok() {
            return p;
        }
    }
}

/// `watchcache serve` with its stdout and stderr in one file, in the order written.
struct Serve {
    child: Child,
    log: PathBuf,
}

impl Serve {
    fn start(log: &Path, args: &[&str]) -> Serve {
        let out = std::fs::File::create(log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
            .arg("serve")
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Serve {
            child,
            log: log.to_owned(),
        }
    }

    /// The output so far, without terminal colours.
    fn output(&self) -> String {
        strip_ansi(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// Waits until the output has `n` lines containing `needle`; the output.
    fn wait_for(&mut self, needle: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.output();
            if out.lines().filter(|l| l.contains(needle)).count() >= n {
                return out;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("watchcache exited ({status}) before {n} \"{needle}\":\n{out}");
            }
            assert!(
                Instant::now() < deadline,
                "no {n} \"{needle}\" within 60 s:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the process to exit by itself; its status and output.
    fn wait_exit(&mut self) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, self.output());
            }
            assert!(
                Instant::now() < deadline,
                "still running:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The number after `key=` in `line`.
fn field(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(&format!(" {key}="))? + key.len() + 2..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Whether process `pid` is gone (or a zombie: dead, holding nothing).
fn gone(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn curl(url: &str) -> std::process::Output {
    Command::new("curl")
        .args(["-sS", "-f", url])
        .output()
        .unwrap()
}

#[test]
fn a_taken_local_etcd_port_fails_the_start_naming_the_port_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (role, offset) in [("client", 0), ("peer", 10)] {
        let port = free_etcd_port();
        let held = std::net::TcpListener::bind(("127.0.0.1", port + offset)).unwrap();
        let data = dir.path().join(role);
        let listen = format!("127.0.0.1:{}", free_port().unwrap());
        let mut s = Serve::start(
            &dir.path().join(format!("{role}.log")),
            &[
                "--data-dir",
                data.to_str().unwrap(),
                "--local-etcd-port",
                &port.to_string(),
                "--listen",
                &listen,
            ],
        );
        let (status, out) = s.wait_exit();
        drop(held);
        assert!(!status.success(), "{out}");
        let addr = format!("127.0.0.1:{}", port + offset);
        assert!(
            out.contains(&format!("{role} port {addr} is in use"))
                && out.contains("--local-etcd-port"),
            "names the port and the flag: {out}"
        );
        assert!(!out.contains("listening"), "{out}");
    }
}

#[test]
fn kill_9_leaves_no_etcd_behind_and_the_start_logs_its_phases_then_the_hint() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_etcd_port();
    let listen = format!("127.0.0.1:{}", free_port().unwrap());
    let args = [
        "--local-pki",
        "--data-dir",
        data.to_str().unwrap(),
        "--local-etcd-port",
        &port.to_string(),
        "--listen",
        &listen,
        "--insecure-listen",
        &format!("127.0.0.1:{}", free_port().unwrap()),
    ];
    let mut s = Serve::start(&dir.path().join("1.log"), &args);
    s.wait_for("kubectl --kubeconfig", 1);
    // Give late lines a moment: the hint is to stay last of the start's.
    std::thread::sleep(Duration::from_secs(2));
    let out = s.output();
    let info: Vec<&str> = out.lines().filter(|l| l.contains(" INFO ")).collect();
    // The standalone write path creates the system namespaces (one line each); it is leaving.
    let phases: Vec<&str> = info
        .iter()
        .copied()
        .filter(|l| !l.contains("created the system namespace"))
        .collect();
    assert_eq!(phases.len(), 3, "{out}");
    for (line, what) in phases
        .iter()
        .zip(["local etcd started", "caches ready", "listening"])
    {
        assert!(line.contains(what), "{what}: {out}");
    }
    let caches = field(phases[1], "caches").unwrap();
    assert!(caches > 50, "the count of caches: {out}");
    assert!(
        phases[2].contains(&format!("https://{listen}")),
        "the URL: {out}"
    );
    assert!(info.len() <= 7, "{} INFO lines: {out}", info.len());
    let hint = out.find("kubectl --kubeconfig").unwrap();
    assert!(hint > out.find("listening").unwrap(), "{out}");
    assert!(
        out[hint..]
            .lines()
            .skip(1)
            .all(|l| l.contains("created the system namespace")),
        "the hint is last: {out}"
    );
    let etcd = field(phases[0], "pid").unwrap();
    let url = format!("http://127.0.0.1:{port}");
    // A value written to the local etcd, to be found after the restart.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([url.as_str()], None)
            .await
            .unwrap();
        let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept","namespace":"default","uid":"u-kept","creationTimestamp":"2026-01-01T00:00:00Z"},"data":{"k":"v"}}"#;
        c.put("/registry/configmaps/default/kept", cm, None)
            .await
            .unwrap();
    });
    // kill -9: the etcd child dies with it.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(etcd) {
        assert!(Instant::now() < deadline, "etcd {etcd} outlived kill -9");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The next start on the same ports and data starts cleanly, and serves the data.
    let mut s = Serve::start(&dir.path().join("2.log"), &args);
    let out = s.wait_for("listening", 1);
    let got = curl(&format!(
        "http://{}/api/v1/namespaces/default/configmaps/kept",
        args[8]
    ));
    assert!(
        got.status.success() && String::from_utf8_lossy(&got.stdout).contains("u-kept"),
        "{got:?}\n{out}"
    );
    let etcd2 = field(
        out.lines()
            .find(|l| l.contains("local etcd started"))
            .unwrap(),
        "pid",
    )
    .unwrap();
    assert_ne!(etcd, etcd2);
}

/// The outage of `upstream` ("etcd", "API server") as `out` logged it, for each resource: one
/// `unavailable; retrying` line at the first failure and at most one more 10 s later (the
/// outage is 12 s), every failure counted in them or in the recovery's line; no other warning
/// or error but `allowed`.
fn assert_outage_logged(out: &str, upstream: &str, resources: &[&str], allowed: &[&str]) {
    let retrying = format!("{upstream} unavailable; retrying");
    for r in resources {
        let mine = |l: &&str| l.contains(&format!(" resource={r} "));
        let lines: Vec<&str> = out
            .lines()
            .filter(mine)
            .filter(|l| l.contains(" WARN ") && l.contains(&retrying))
            .collect();
        assert!((1..=2).contains(&lines.len()), "{r}: {lines:#?}");
        let logged: u64 = lines.iter().map(|l| field(l, "failures").unwrap()).sum();
        let resumed = out
            .lines()
            .find(|l| l.contains(&format!("{upstream} watch resumed")) && mine(l))
            .unwrap();
        let unlogged = field(resumed, "unlogged_failures").unwrap();
        // Retried from 100 ms doubling to 5 s: at least 7 failures within 12 s, each counted.
        assert!(
            logged + unlogged >= 5,
            "{r}: {logged} + {unlogged} failures counted: {lines:#?}"
        );
    }
    let others: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .filter(|l| !l.contains(&retrying) && !allowed.iter().any(|a| l.contains(a)))
        .collect();
    assert!(others.is_empty(), "{others:#?}");
}

#[test]
fn an_etcd_outage_is_logged_once_per_resource_per_10_s_with_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut etcd = rt
        .block_on(LocalEtcd::start(&dir.path().join("etcd")))
        .unwrap();
    let resources = ["pods", "configmaps", "secrets"];
    let mut s = Serve::start(
        &dir.path().join("serve.log"),
        &[
            "--etcd",
            &etcd.url(),
            "--resources",
            &resources.join(","),
            "--listen",
            &format!("127.0.0.1:{}", free_port().unwrap()),
        ],
    );
    s.wait_for("caches ready", 1);
    etcd.kill9();
    let down = Duration::from_secs(12);
    std::thread::sleep(down);
    rt.block_on(etcd.restart()).unwrap();
    let out = s.wait_for("etcd watch resumed", resources.len());
    // Debian's etcd 3.4.23 is older than ordered progress notifications: said once at start.
    let old_etcd = ["predates", "consistent reads go to etcd"];
    assert_outage_logged(&out, "etcd", &resources, &old_etcd);
}

#[test]
fn an_upstream_api_server_outage_is_logged_once_per_resource_per_10_s_with_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let etcd = rt
        .block_on(LocalEtcd::start(&dir.path().join("etcd")))
        .unwrap();
    let resources = ["pods", "configmaps", "secrets"];
    let root_addr = format!("127.0.0.1:{}", free_port().unwrap());
    let root_args = [
        "--etcd",
        &etcd.url(),
        "--resources",
        &resources.join(","),
        "--listen",
        &root_addr,
    ];
    let mut root = Serve::start(&dir.path().join("root.log"), &root_args);
    root.wait_for("listening", 1);
    let kubeconfig = dir.path().join("root.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: root\n  cluster:\n    server: http://{root_addr}\ncontexts:\n- name: root\n  context:\n    cluster: root\n    user: anyone\nusers:\n- name: anyone\n  user: {{}}\ncurrent-context: root\n"
        ),
    )
    .unwrap();
    let mut leaf = Serve::start(
        &dir.path().join("leaf.log"),
        &[
            "--upstream-kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--resources",
            &resources.join(","),
            "--listen",
            &format!("127.0.0.1:{}", free_port().unwrap()),
        ],
    );
    leaf.wait_for("caches ready", 1);
    root.child.kill().unwrap();
    root.child.wait().unwrap();
    std::thread::sleep(Duration::from_secs(12));
    let mut root = Serve::start(&dir.path().join("root2.log"), &root_args);
    root.wait_for("listening", 1);
    let out = leaf.wait_for("API server watch resumed", resources.len());
    assert_outage_logged(&out, "API server", &resources, &[]);
}

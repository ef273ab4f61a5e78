//! Runs README.md's set-up examples against what `./scripts/run` starts (`watchcache up`: etcd
//! 3.6, kube-apiserver, kube-controller-manager, kube-scheduler, hollow nodes and watchcache in
//! front), so the README stays true: the curl tour, the kubectl block and the token example, each
//! as written but for the port (the README shows the documented 8443; here a free one, and the
//! data dir in a temporary directory). Then the launcher's promises: `kill -9` of it leaves no
//! process behind, a later start is ready with the data kept (and the tour's last line, a 410,
//! holds once the window starts after revision 1), and SIGINT stops everything cleanly.
//!
//! And `watchcache serve` with its own local etcd as an operator runs it: the local etcd's
//! safety (a taken port fails the start, `kill -9` leaves no etcd behind) and what the start and
//! an etcd or upstream outage log.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::k8s_peers::{etcd36_bin, k8s_bin};
use watchcache_etcd::{LocalEtcd, free_port};

/// The port the README's examples use.
const DOCUMENTED: &str = "127.0.0.1:8443";

fn readme() -> String {
    std::fs::read_to_string(support::repo().join("README.md")).unwrap()
}

/// The `sh` block between `<!-- NAME:start -->` and `<!-- NAME:end -->`.
fn block(readme: &str, name: &str) -> String {
    let start = readme
        .find(&format!("<!-- {name}:start -->"))
        .unwrap_or_else(|| panic!("{name} start marker"));
    let end = readme
        .find(&format!("<!-- {name}:end -->"))
        .unwrap_or_else(|| panic!("{name} end marker"));
    readme[start..end]
        .split("```sh")
        .nth(1)
        .expect("a sh block")
        .split("```")
        .next()
        .unwrap()
        .to_owned()
}

/// The launcher, killed (and with it, by PR_SET_PDEATHSIG, everything it started) on drop.
struct Up {
    child: Option<Child>,
    stderr: PathBuf,
    data: PathBuf,
}

impl Up {
    /// `watchcache up` in `dir` with `args`; returns once it prints that it is ready, and the time
    /// that took.
    fn start(dir: &Path, port: u16, args: &[String], n: usize) -> (Up, Duration) {
        let k8s = k8s_bin("kube-apiserver");
        let stderr = dir.join(format!("up-{n}.log"));
        let started = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
            .arg("up")
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--k8s-bin-dir")
            .arg(k8s.parent().unwrap())
            .arg("--etcd-bin")
            .arg(etcd36_bin())
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut up = Up {
            child: Some(child),
            stderr,
            data: dir.join("watchcache-data"),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if line.starts_with("ready in ") {
                    let _ = tx.send(line);
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(line) => {
                assert!(
                    line.contains(&format!("https://127.0.0.1:{port}")),
                    "{line}"
                );
                (up, started.elapsed())
            }
            Err(_) => panic!(
                "watchcache up not ready within 300 s ({:?}); its output:\n{}",
                up.child.as_mut().unwrap().try_wait(),
                up.diagnostics()
            ),
        }
    }

    /// The launcher's output and the end of each log.
    fn diagnostics(&self) -> String {
        let mut out = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        if let Ok(logs) = std::fs::read_dir(self.data.join("logs")) {
            for log in logs.flatten() {
                out.push_str(&format!(
                    "\n---- {} ----\n{}",
                    log.path().display(),
                    support::kube::tail(&log.path(), 15)
                ));
            }
        }
        out
    }

    fn signal(&mut self, sig: &str) -> Child {
        let child = self.child.take().unwrap();
        let ok = Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
        child
    }

    /// Runs `script` with bash in the launcher's directory: (success, stdout, stderr).
    fn sh(&self, script: &str) -> (bool, String, String) {
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(self.data.parent().unwrap())
            // kubectl's discovery cache: this server's, not the user's.
            .env("HOME", self.data.parent().unwrap())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// As [`Up::sh`], panicking with the output when it fails.
    fn must(&self, script: &str) -> String {
        let (ok, out, err) = self.sh(script);
        assert!(
            ok,
            "failed: {script}\nstdout: {out}\nstderr: {err}\n{}",
            self.diagnostics()
        );
        out
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- watchcache up ----\n{}", self.diagnostics());
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The processes whose command line names `dir` (what the launcher started there).
fn processes_in(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(cmdline);
        }
    }
    found
}

/// Waits up to 15 s until no process names `dir`.
fn assert_none_left(dir: &Path, after: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = processes_in(dir);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left running after {after}: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn at_port(script: &str, port: u16) -> String {
    assert!(
        script.contains(DOCUMENTED),
        "the README's example uses {DOCUMENTED}: {script}"
    );
    script.replace(DOCUMENTED, &format!("127.0.0.1:{port}"))
}

fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn names(list: &serde_json::Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect()
}

fn check_tour(out: &str) {
    let lines = json_lines(out);
    let list = &lines[0];
    assert_eq!(list["kind"], "PodList", "{out}");
    assert_eq!(names(list), ["web-1", "web-4"], "node-1's pods");
    // The node-1 watch's events: up to WatchList's BOOKMARK (its own events are grepped out).
    // On a first start the last line replays every pod's history from revision 1: not checked.
    let watched: Vec<(&str, &str)> = lines[1..]
        .iter()
        .take_while(|l| l["type"] != "BOOKMARK")
        .map(|l| {
            (
                l["type"].as_str().unwrap(),
                l["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    for pod in ["web-1", "web-4", "web-7"] {
        assert!(
            watched.contains(&("ADDED", pod)),
            "the kubelet-style watch sees {pod} added: {watched:?}"
        );
    }
    assert!(
        watched
            .iter()
            .all(|(_, name)| ["web-1", "web-4", "web-7"].contains(name)),
        "node-1's pods only: {watched:?}"
    );
    assert!(
        lines.iter().any(|l| l["type"] == "BOOKMARK"
            && l["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"),
        "WatchList's bookmark: {out}"
    );
    assert!(
        lines.iter().any(|l| l["kind"] == "Status"
            && l["reason"] == "BadRequest"
            && l["code"] == 400
            && l["message"].as_str().unwrap().contains("at position")),
        "{out}"
    );
}

fn check_expired(out: &str) {
    assert!(
        json_lines(out).iter().any(|l| l["type"] == "ERROR"
            && l["object"]["reason"] == "Expired"
            && l["object"]["code"] == 410),
        "a 410 Expired ERROR event: {out}"
    );
}

/// Runs each command line of the kubectl block (after its first, the set-up line, which each
/// runs with) and checks what it printed.
fn check_kubectl(up: &Up, block: &str) {
    let mut lines = block
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let setup = lines.next().expect("the set-up line");
    assert!(setup.contains("KUBECONFIG"), "{setup}");
    let mut expected: Vec<(&str, &[&str])> = vec![
        ("get po -o wide", &["NODE", "web-1", "node-1", "Running"]),
        ("get po -w", &["web-1", "web-4", "web-7"]),
        ("label pod web-1", &["pod/web-1 labeled"]),
        ("apply -f", &["configmap/tour created"]),
        ("create deployment", &["deployment.apps/hello created"]),
        ("rollout status", &["successfully rolled out"]),
        (
            "get deployments,rs",
            &["deployment.apps/hello", "3/3", "replicaset.apps/hello-"],
        ),
        (
            "explain pods",
            &[
                "KIND:       Pod",
                "service/kubernetes",
                "Server Version: v1.35",
            ],
        ),
    ];
    for line in lines {
        let i = expected
            .iter()
            .position(|(cmd, _)| line.contains(cmd))
            .unwrap_or_else(|| panic!("a check for: {line}"));
        let (_, wants) = expected.remove(i);
        let out = up.must(&format!("{setup}\n{line}"));
        for want in wants {
            assert!(out.contains(want), "{line}: {want:?} in\n{out}");
        }
        if line.contains("get po -w") {
            assert!(!out.contains("web-2"), "node-1's pods only: {out}");
        }
    }
    assert!(
        expected.is_empty(),
        "lines missing from README: {expected:?}"
    );
}

#[test]
fn the_readme_runs_on_the_control_plane() {
    let readme = readme();
    let dir = tempfile::tempdir().unwrap();
    // The README's paths are relative to the repository: kubectl in target/pyvenv.
    let pyvenv = support::kubectl::kubectl_bin()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    std::fs::create_dir(dir.path().join("target")).unwrap();
    std::os::unix::fs::symlink(&pyvenv, dir.path().join("target/pyvenv")).unwrap();
    let port = free_port().unwrap();

    // The token example: its file, then the launcher with its flags (and the tour's nodes).
    let token = block(&readme, "token");
    let mut token_lines = token.lines().filter(|l| !l.trim().is_empty());
    let (make_file, run, request) = (
        token_lines.next().unwrap(),
        token_lines.next().unwrap(),
        token_lines.next().unwrap(),
    );
    let mut args: Vec<String> = run
        .strip_prefix("./scripts/run ")
        .unwrap_or_else(|| panic!("the token example runs ./scripts/run: {run}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    // The tour's set-up: `./scripts/run --nodes 3`.
    assert!(readme.contains("`./scripts/run --nodes 3`"));
    args.extend(["--nodes".into(), "3".into()]);
    let out = Command::new("bash")
        .args(["-c", make_file])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(out.success());
    let (mut up, first) = Up::start(dir.path(), port, &args, 1);
    eprintln!("first start ready in {first:.1?}");

    let tour = at_port(&block(&readme, "tour"), port);
    let out = up.must(&tour);
    check_tour(&out);

    check_kubectl(&up, &block(&readme, "kubectl"));

    let request = at_port(request, port);
    let list = up.must(&request);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert!(names(&list).contains(&"web-1"), "{list}");
    // Without the token: no identity on TLS, 401.
    let anonymous = request.replace("-H 'Authorization: Bearer admin-token' ", "");
    assert_ne!(anonymous, request, "{request}");
    let refused = up.must(&anonymous);
    assert!(refused.contains(r#""code":401"#), "{refused}");

    // kill -9 of the launcher takes everything with it.
    let mut child = up.signal("-KILL");
    child.wait().unwrap();
    assert_none_left(dir.path(), "kill -9 of watchcache up");

    // A later start: the data is kept, and the window starts at the current revision.
    let (mut up, again) = Up::start(dir.path(), port, &args, 2);
    eprintln!("later start ready in {again:.1?}");
    let list: serde_json::Value = serde_json::from_str(&up.must(&request)).unwrap();
    assert!(names(&list).contains(&"web-7"), "kept: {list}");
    let last = tour.lines().rfind(|l| !l.trim().is_empty()).unwrap();
    let preamble: String = tour
        .lines()
        .take_while(|l| !l.starts_with("pod()"))
        .collect::<Vec<_>>()
        .join("\n");
    check_expired(&up.must(&format!("{preamble}\n{last}")));

    // SIGINT (Ctrl-C) stops everything, and the launcher exits cleanly.
    let mut child = up.signal("-INT");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "watchcache up did not stop within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "watchcache up exits 0 on SIGINT: {status}"
    );
    assert_none_left(dir.path(), "SIGINT");
}

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

//! Runs README.md's set-up examples against what `./scripts/run` starts (`watchcache up`: etcd
//! 3.6, kube-apiserver, kube-controller-manager, kube-scheduler, hollow nodes and watchcache in
//! front), so the README stays true: the curl tour, the kubectl block and the token example, each
//! as written but for the port (the README shows the documented 8443; here a free one, and the
//! data dir in a temporary directory). Then the launcher's promises: `kill -9` of it leaves no
//! process behind, a later start is ready with the data kept (and the tour's last line, a 410,
//! holds once the window starts after revision 1), and SIGINT stops everything cleanly.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::kube::{etcd36_bin, k8s_bin};
use watchcache::etcd::free_port;

/// The port the README's examples use.
const DOCUMENTED: &str = "127.0.0.1:8443";

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
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

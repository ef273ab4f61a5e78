//! Runs the curl tour of README.md against the real binary (`watchcache serve` with its local etcd),
//! so the README stays true.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

//! Client compatibility shown with a real client: the official Python `kubernetes` package, unchanged,
//! listing with selectors, watching with a resource_version and bookmarks, and creating, updating
//! (with a conflict) and deleting, against a watchcache server over a real etcd.

mod support;

use std::path::Path;
use std::process::Command;

use support::server::TestServer;
use watchcache::server::ServerConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_works_unchanged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = support::venv::venv();
    let s = TestServer::start(ServerConfig::default()).await;
    let script = root.join("tests/python/client_test.py");
    let url = s.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(venv.join("bin/python"))
            .arg(script)
            .arg(url)
            .output()
    })
    .await
    .unwrap()
    .expect("run the Python client test");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "python client test failed:\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.trim(), "OK");
}

/// The dynamic client, PATCH (merge, strategic, status), deletecollection and a metadata-only list
/// (issue 12), with the same client, unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_dynamic_client_patches_and_deletes_collections() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = support::venv::venv();
    let s = TestServer::start(ServerConfig::default()).await;
    let script = root.join("tests/python/dynamic_test.py");
    let url = s.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(venv.join("bin/python"))
            .arg(script)
            .arg(url)
            .output()
    })
    .await
    .unwrap()
    .expect("run the Python dynamic client test");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "python dynamic client test failed:\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.trim(), "OK");
}

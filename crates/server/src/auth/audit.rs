//! The audit log: one JSON line per write and per denied (401, 403, 429) request, appended to
//! the `--audit-log-path` file. Without the file there is no audit line anywhere: a line per write
//! in the server's own log buried what an operator looks for there.
//!
//! The file never stalls a request: lines go through a bounded channel to one writer task; when
//! the channel is full (the disk is slower than the requests), the line is dropped and counted
//! ([`Audit::dropped`], and a warning every 1000 drops).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::attributes::RequestInfo;
use super::user::User;

/// Lines waiting for the file at most.
const QUEUE: usize = 4096;

/// The audit log.
#[derive(Debug, Default)]
pub struct Audit {
    file: OnceLock<mpsc::Sender<String>>,
    dropped: AtomicU64,
}

/// One audited request.
#[derive(Debug)]
pub struct Record<'a> {
    /// Who (absent when not authenticated).
    pub user: Option<&'a User>,
    /// What.
    pub info: &'a RequestInfo,
    /// The answer's status code.
    pub code: u16,
    /// How long the request took until its answer's head.
    pub latency: Duration,
}

impl Audit {
    /// Whether a request with this answer is audited: every write, every denial.
    pub fn wants(info: &RequestInfo, code: u16) -> bool {
        info.is_write() || matches!(code, 401 | 403 | 429)
    }

    /// Starts the file writer (appending, created if missing). Call once, in a runtime.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub async fn open(&self, path: PathBuf) -> std::io::Result<()> {
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await?;
        let (tx, mut rx) = mpsc::channel::<String>(QUEUE);
        if self.file.set(tx).is_err() {
            return Ok(());
        }
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if let Err(e) = file.write_all(line.as_bytes()).await {
                    tracing::warn!(path = %path.display(), error = %e, "audit log write failed");
                }
                // Flush when no more lines wait: a burst is one write to the OS per line, and a
                // reader sees every line soon after it was recorded.
                if rx.is_empty()
                    && let Err(e) = file.flush().await
                {
                    tracing::warn!(path = %path.display(), error = %e, "audit log flush failed");
                }
            }
        });
        Ok(())
    }

    /// Whether the file is open.
    pub fn has_file(&self) -> bool {
        self.file.get().is_some()
    }

    /// Lines dropped because the file's writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Records one request, when the file is open (else nothing).
    pub fn record(&self, r: &Record<'_>) {
        let Some(tx) = self.file.get() else {
            return;
        };
        let (user, groups) = r
            .user
            .map_or(("", &[][..]), |u| (u.name.as_str(), u.groups.as_slice()));
        let res = r.info.resource.as_ref();
        let resource = res.map_or(String::new(), |x| {
            if x.subresource.is_empty() {
                x.resource.clone()
            } else {
                format!("{}/{}", x.resource, x.subresource)
            }
        });
        let namespace = res.map_or("", |x| x.namespace.as_str());
        let name = res.map_or("", |x| x.name.as_str());
        let latency_ms = r.latency.as_secs_f64() * 1000.0;
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut line = serde_json::json!({
            "ts": ts,
            "user": user,
            "groups": groups,
            "verb": r.info.verb,
            "apiGroup": res.map_or("", |x| x.group.as_str()),
            "resource": resource,
            "namespace": namespace,
            "name": name,
            "path": r.info.path,
            "code": r.code,
            "latencyMs": latency_ms,
        })
        .to_string();
        line.push('\n');
        if tx.try_send(line).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n % 1000 == 1 {
                tracing::warn!(dropped = n, "audit log behind: lines dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_reach_the_file_as_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let a = Audit::default();
        a.open(path.clone()).await.unwrap();
        let u = User::authenticated("alice", "", vec!["dev".into()]);
        let info = RequestInfo::new("POST", "/api/v1/namespaces/a/configmaps", false);
        assert!(Audit::wants(&info, 201));
        assert!(!Audit::wants(
            &RequestInfo::new("GET", "/api/v1/pods", false),
            200
        ));
        assert!(Audit::wants(
            &RequestInfo::new("GET", "/api/v1/pods", false),
            403
        ));
        a.record(&Record {
            user: Some(&u),
            info: &info,
            code: 201,
            latency: Duration::from_millis(3),
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let text = loop {
            let t = tokio::fs::read_to_string(&path).await.unwrap_or_default();
            if t.ends_with('\n') || tokio::time::Instant::now() > deadline {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["user"], "alice");
        assert_eq!(
            v["groups"],
            serde_json::json!(["dev", "system:authenticated"])
        );
        assert_eq!(v["verb"], "create");
        assert_eq!(v["resource"], "configmaps");
        assert_eq!(v["namespace"], "a");
        assert_eq!(v["code"], 201);
        assert_eq!(a.dropped(), 0);
    }
}

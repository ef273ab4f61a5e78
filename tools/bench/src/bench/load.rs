//! The load: seeding, watchers (HTTP against the cache, or one etcd watch each), and the paced
//! churn writer.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, EventType, Txn, TxnOp, WatchOptions};
use futures_util::StreamExt;
use indicatif::ProgressBar;
use parking_lot::Mutex;
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, MissedTickBehavior};

use super::http::Http;
use super::pods;
use super::proto;

/// One received event: revision, pod id, receive time (µs since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Received {
    pub rev: u64,
    pub id: u32,
    pub at_us: u64,
}

/// What one watcher received.
#[derive(Default)]
pub(super) struct Recorder {
    pub events: Mutex<Vec<Received>>,
    pub errors: AtomicU64,
}

/// Whether a watcher's error was logged yet: one per run, the rest are counted.
static FIRST_ERROR_LOGGED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

impl Recorder {
    /// Records a change received now, and counts it in `received`.
    pub(super) fn record(&self, received: &AtomicU64, rev: u64, id: u32) {
        self.record_at(received, rev, id, pods::now_us());
    }

    /// Records a change received at `at_us`, and counts it in `received`.
    pub(super) fn record_at(&self, received: &AtomicU64, rev: u64, id: u32, at_us: u64) {
        self.events.lock().push(Received { rev, id, at_us });
        received.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an error; the first of the run is logged with `why`.
    pub(super) fn error(&self, why: impl FnOnce() -> String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if !FIRST_ERROR_LOGGED.swap(true, Ordering::Relaxed) {
            tracing::warn!(why = %why(), "a watcher's error (the first of the run; the rest are counted)");
        }
    }
}

/// Shared counters for progress and connection tracking.
#[derive(Default)]
pub(super) struct Counters {
    pub connected: AtomicUsize,
    pub failed: AtomicUsize,
    pub received: AtomicU64,
}

/// Waits until `received` has not moved for a second, or until `grace` has passed. What each
/// watcher must see is only known from etcd's history, and reading it loads etcd and this
/// process, so delivery is taken to have ended when it goes quiet. `bar` shows the count.
pub(super) async fn until_quiet(received: &AtomicU64, grace: Duration, bar: Option<&ProgressBar>) {
    let deadline = Instant::now() + grace;
    let mut last = (received.load(Ordering::Relaxed), Instant::now());
    while Instant::now() < deadline {
        let got = received.load(Ordering::Relaxed);
        if let Some(b) = bar {
            b.set_position(got);
        }
        if got != last.0 {
            last = (got, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pod_id(name: &[u8]) -> Option<u32> {
    std::str::from_utf8(name.strip_prefix(b"pod-")?)
        .ok()?
        .parse()
        .ok()
}

/// (revision, pod id) of a change event of type `kind`, its resourceVersion and name read by
/// `rv_name` only then; `Err` for an ERROR event; `None` for any other.
fn change<'a>(
    kind: &[u8],
    rv_name: impl FnOnce() -> Option<(&'a [u8], &'a [u8])>,
) -> Option<Result<(u64, u32), ()>> {
    match kind {
        b"ADDED" | b"MODIFIED" | b"DELETED" => {}
        b"ERROR" => return Some(Err(())),
        _ => return None,
    }
    let (rv, name) = rv_name()?;
    let rev = std::str::from_utf8(rv).ok()?.parse().ok()?;
    Some(Ok((rev, pod_id(name)?)))
}

/// Parses one watch line of the cache's wire format cheaply: (revision, pod id) of a change.
fn parse_line(line: &[u8]) -> Option<Result<(u64, u32), ()>> {
    change(pods::string_field(line, "type")?, || {
        Some((
            pods::string_field(line, "resourceVersion")?,
            pods::string_field(line, "name")?,
        ))
    })
}

/// Reads one protobuf watch frame cheaply: (revision, pod id) of a change.
fn parse_protobuf(frame: &[u8]) -> Option<Result<(u64, u32), ()>> {
    let ev = proto::event(frame)?;
    change(ev.kind, || Some((ev.rv, ev.name)))
}

/// Takes the complete lines off the front of `buf`, calling `f` with each (without its newline);
/// returns how many bytes they took.
fn lines(buf: &[u8], mut f: impl FnMut(&[u8])) -> usize {
    let mut start = 0;
    while let Some(n) = memchr::memchr(b'\n', &buf[start..]) {
        f(&buf[start..start + n]);
        start += n + 1;
    }
    start
}

/// The wire format the bench's HTTP watchers ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum WatchWire {
    /// JSON, one event per line (kubectl, client-go's default).
    #[default]
    Json,
    /// Protobuf, length-prefixed frames (kubelets, kube-controller-manager).
    Protobuf,
}

/// A kubelet- or controller-style HTTP watch on the cache, in `wire`.
pub(super) async fn http_watcher(
    client: Http,
    url: String,
    wire: WatchWire,
    rec: Arc<Recorder>,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let accept = match wire {
        WatchWire::Json => None,
        WatchWire::Protobuf => Some("application/vnd.kubernetes.protobuf;stream=watch"),
    };
    let mut body = match client.get_accept(&url, accept).await {
        Ok((status, body)) if (200..300).contains(&status) => body,
        _ => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    counters.connected.fetch_add(1, Ordering::Relaxed);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            c = body.next() => c,
        };
        let chunk = match chunk {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return rec.error(|| format!("the stream failed: {e}")),
            None => return rec.error(|| "the stream ended".to_owned()),
        };
        buf.extend_from_slice(&chunk);
        let record = |raw: &[u8], parsed| match parsed {
            Some(Ok((rev, id))) => rec.record(&counters.received, rev, id),
            Some(Err(())) => rec.error(|| {
                format!(
                    "an ERROR frame: {}",
                    String::from_utf8_lossy(&raw[..raw.len().min(400)])
                )
            }),
            None => {}
        };
        let used = match wire {
            WatchWire::Json => lines(&buf, |l| record(l, parse_line(l))),
            WatchWire::Protobuf => proto::frames(&buf, |f| record(f, parse_protobuf(f))),
        };
        buf.drain(..used);
    }
}

/// A watcher of a cache in this process (a controller embedding the library): the same record as
/// [`http_watcher`]'s, taken from the cache's own watch stream.
pub(super) async fn embedded_watcher(
    cache: watchcache::Cache,
    opts: watchcache::WatchOptions,
    rec: Arc<Recorder>,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let Ok(mut stream) = cache.watch(opts).await else {
        counters.failed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    counters.connected.fetch_add(1, Ordering::Relaxed);
    // One stop future for the whole loop: made afresh per event, it joined and left the stop
    // channel's waiter list (a lock shared by every watcher) at each event, 5 % of the
    // consumers' time in the catch-up bench.
    let stopped = stop.wait_for(|s| *s);
    tokio::pin!(stopped);
    loop {
        let ev = tokio::select! {
            biased;
            ev = stream.next() => ev,
            _ = &mut stopped => return,
        };
        let ev = match ev {
            Some(Ok(ev)) => ev,
            Some(Err(e)) => return rec.error(|| format!("the stream failed: {e}")),
            None => return rec.error(|| "the stream ended".to_owned()),
        };
        if ev.kind() == watchcache::EventType::Bookmark {
            continue;
        }
        match ev.object().and_then(|o| pod_id(o.name().as_bytes())) {
            Some(id) => rec.record(&counters.received, ev.resource_version(), id),
            None => rec.error(|| format!("an event without a bench pod: {:?}", ev.kind())),
        }
    }
}

/// The world before the cache: each watcher has its own etcd watch on the whole pods prefix and
/// filters on the client.
pub(super) async fn etcd_watcher(
    client: Client,
    node: Option<usize>,
    from_rev: u64,
    rec: Arc<Recorder>,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut wc = client.watch_client();
    let opts = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_start_revision(from_rev as i64 + 1);
    let mut stream = match wc.watch("/registry/pods/", Some(opts)).await {
        Ok(s) => s,
        Err(_) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    counters.connected.fetch_add(1, Ordering::Relaxed);
    loop {
        let msg = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            m = stream.message() => m,
        };
        let resp = match msg {
            Ok(Some(resp)) => resp,
            Ok(None) => return rec.error(|| "the etcd watch ended".to_owned()),
            Err(e) => return rec.error(|| format!("the etcd watch failed: {e}")),
        };
        let now = pods::now_us();
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let new_node = (ev.event_type() == EventType::Put)
                .then(|| pods::node_of(kv.value()))
                .flatten();
            let old_node = ev.prev_kv().and_then(|p| pods::node_of(p.value()));
            if node.is_none() || new_node == node || old_node == node {
                let Some(id) = kv
                    .key_str()
                    .ok()
                    .and_then(|k| k.rsplit('/').next())
                    .and_then(|n| pod_id(n.as_bytes()))
                else {
                    continue;
                };
                rec.record_at(&counters.received, kv.mod_revision() as u64, id, now);
            }
        }
    }
}

/// Creates `pods` pods (pod i on node i % nodes, labelled `app=app-{i % apps}`) in transactions
/// of 100, stored as JSON or, with `codec`, as kube-apiserver stores them (protobuf); returns the
/// revision.
pub(super) async fn seed(
    client: &Client,
    pods: usize,
    nodes: usize,
    apps: usize,
    codec: Option<Arc<pods::Codec>>,
    bar: &ProgressBar,
) -> Result<u64, String> {
    let sem = Arc::new(Semaphore::new(8));
    let mut tasks = Vec::new();
    for chunk_start in (0..pods).step_by(100) {
        let permit = Arc::clone(&sem)
            .acquire_owned()
            .await
            .unwrap_or_else(|_| unreachable!("never closed"));
        let mut kv = client.kv_client();
        let (bar, codec) = (bar.clone(), codec.clone());
        tasks.push(tokio::spawn(async move {
            let end = (chunk_start + 100).min(pods);
            let ops = (chunk_start..end)
                .map(|i| {
                    let (key, json) = (
                        pods::key(i),
                        pods::json_app(i, i % nodes, i % apps, 1, pods::now_us()),
                    );
                    Ok(TxnOp::put(
                        key.clone(),
                        value_of(codec.as_deref(), &key, json)?,
                        None,
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?;
            let r = kv.txn(Txn::new().and_then(ops)).await;
            bar.inc((end - chunk_start) as u64);
            drop(permit);
            r.map(|r| r.header().map_or(0, |h| h.revision() as u64))
                .map_err(|e| format!("etcd: {e}"))
        }));
    }
    let mut rev = 0;
    for t in tasks {
        rev = rev.max(t.await.map_err(|e| format!("seed task: {e}"))??);
    }
    Ok(rev)
}

/// A pod's value in etcd: its JSON, or with `codec` kube-apiserver's protobuf of it.
fn value_of(codec: Option<&pods::Codec>, key: &str, json: String) -> Result<Vec<u8>, String> {
    match codec {
        None => Ok(json.into_bytes()),
        Some(c) => c.stored(pods::Storage::Protobuf, key, json),
    }
}

/// The churn writer's view of the pods.
pub(super) struct Churn {
    /// With a codec, pods are written as kube-apiserver stores them (protobuf); else JSON.
    codec: Option<Arc<pods::Codec>>,
    nodes: usize,
    /// Pod i is labelled `app=app-{i % apps}`.
    apps: usize,
    node_of: Vec<Option<usize>>,
    live: Vec<usize>,
    busy: HashSet<usize>,
    generation: u64,
}

/// One write of the churn: pod `id` put on `node` (`None`: deleted), labelled `app=app-{app}`.
pub(super) struct Write {
    pub id: usize,
    pub node: Option<usize>,
    pub app: usize,
    pub generation: u64,
}

enum Op {
    Put(usize, usize),
    Delete(usize),
}

impl Churn {
    pub(super) fn new(pods: usize, nodes: usize) -> Churn {
        Churn {
            codec: None,
            nodes,
            apps: 50,
            node_of: (0..pods).map(|i| Some(i % nodes)).collect(),
            live: (0..pods).collect(),
            busy: HashSet::new(),
            generation: 1,
        }
    }

    /// Labels pod i `app=app-{i % apps}` (default 50).
    pub(super) fn with_apps(mut self, apps: usize) -> Churn {
        self.apps = apps.max(1);
        self
    }

    /// With `codec`, writes pods as kube-apiserver stores them (protobuf); without, JSON.
    pub(super) fn with_codec(mut self, codec: Option<Arc<pods::Codec>>) -> Churn {
        self.codec = codec;
        self
    }

    /// The next write as a [`Write`], its pod held busy until [`done`](Churn::done); `None` when
    /// the pod drawn is busy.
    pub(super) fn next_write(&mut self) -> Option<Write> {
        let (id, node) = match self.next()? {
            Op::Put(id, node) => (id, Some(node)),
            Op::Delete(id) => (id, None),
        };
        self.generation += 1;
        Some(Write {
            id,
            node,
            app: id % self.apps,
            generation: self.generation,
        })
    }

    /// Releases a pod taken by [`next_write`](Churn::next_write) once its write is acknowledged.
    pub(super) fn done(&mut self, id: usize) {
        self.busy.remove(&id);
    }

    /// 40 % updates in place, 20 % moves to another node, 20 % creations, 20 % deletions.
    fn next(&mut self) -> Option<Op> {
        let roll = fastrand::u32(0..100);
        if roll < 20 || self.live.is_empty() {
            let id = self.node_of.len();
            let node = fastrand::usize(0..self.nodes);
            self.node_of.push(Some(node));
            self.live.push(id);
            self.busy.insert(id);
            return Some(Op::Put(id, node));
        }
        let slot = fastrand::usize(0..self.live.len());
        let id = self.live[slot];
        if !self.busy.insert(id) {
            return None;
        }
        let cur = self.node_of[id]?;
        Some(match roll {
            20..40 => {
                self.live.swap_remove(slot);
                self.node_of[id] = None;
                Op::Delete(id)
            }
            40..60 => {
                let node = (cur + 1 + fastrand::usize(0..self.nodes.max(2) - 1)) % self.nodes;
                self.node_of[id] = Some(node);
                Op::Put(id, node)
            }
            _ => Op::Put(id, cur),
        })
    }
}

/// Runs the churn for `duration` at `rate` writes/s (bounded: the writer stops at the deadline
/// whether or not it kept up). Returns the send and acknowledgement times (µs since the epoch)
/// of every acknowledged write, by revision.
pub(super) async fn churn(
    client: &Client,
    churn: Churn,
    rate: f64,
    duration: Duration,
    bar: &ProgressBar,
) -> HashMap<u64, (u64, u64)> {
    let codec = churn.codec.clone();
    let churn = Arc::new(Mutex::new(churn));
    let sent = Arc::new(Mutex::new(HashMap::new()));
    let in_flight = Arc::new(Semaphore::new(256));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1.0)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::time::sleep_until(deadline) => break,
        }
        let Some(op) = churn.lock().next() else {
            continue;
        };
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            continue;
        };
        let (mut kv, sent, churn, bar, codec) = (
            client.kv_client(),
            Arc::clone(&sent),
            Arc::clone(&churn),
            bar.clone(),
            codec.clone(),
        );
        tokio::spawn(async move {
            let at = pods::now_us();
            let (id, r) = match op {
                Op::Put(id, node) => {
                    let (generation, app) = {
                        let mut c = churn.lock();
                        c.generation += 1;
                        (c.generation, id % c.apps)
                    };
                    let key = pods::key(id);
                    let pod = pods::json_app(id, node, app, generation, at);
                    match value_of(codec.as_deref(), &key, pod) {
                        Ok(value) => (
                            id,
                            kv.put(key, value, None)
                                .await
                                .map(|r| r.header().map(|h| h.revision())),
                        ),
                        Err(e) => {
                            tracing::warn!(error = %e, "a churned pod could not be encoded");
                            (id, Ok(None))
                        }
                    }
                }
                Op::Delete(id) => (
                    id,
                    kv.delete(pods::key(id), None)
                        .await
                        .map(|r| r.header().map(|h| h.revision())),
                ),
            };
            if let Ok(Some(rev)) = r {
                sent.lock().insert(rev as u64, (at, pods::now_us()));
            }
            churn.lock().busy.remove(&id);
            bar.inc(1);
            drop(permit);
        });
    }
    // Writes still in flight get a bounded time to finish; the rest count as never written.
    let drained = tokio::time::timeout(Duration::from_secs(10), in_flight.acquire_many(256)).await;
    if drained.is_err() {
        tracing::warn!("some writes were still in flight 10 s after the churn ended");
    }
    sent.lock().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_watch_lines_cheaply() {
        let line = br#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pod-42","namespace":"bench-10","resourceVersion":"977"}}}"#;
        assert_eq!(parse_line(line), Some(Ok((977, 42))));
        assert_eq!(parse_line(br#"{"type":"BOOKMARK","object":{}}"#), None);
        assert_eq!(
            parse_line(br#"{"type":"ERROR","object":{}}"#),
            Some(Err(()))
        );
    }

    #[test]
    fn churn_mixes_operations_without_touching_busy_pods() {
        let mut c = Churn::new(100, 10);
        let ops: Vec<Op> = (0..50).filter_map(|_| c.next()).collect();
        assert!(ops.iter().any(|o| matches!(o, Op::Delete(_))));
        assert!(
            ops.iter()
                .any(|o| matches!(o, Op::Put(id, _) if *id >= 100))
        );
        assert_eq!(
            c.busy.len(),
            ops.len(),
            "every op holds its pod until it completes"
        );
    }
}

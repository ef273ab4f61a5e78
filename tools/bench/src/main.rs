//! `watchcache-bench`: the load tool, apart from the shipped `watchcache` binary (and without its
//! HTTP client, progress bars and load models in it). It starts the servers it measures: the
//! `watchcache` beside it (or `--server-binary`), etcd, kube-apiserver, HAProxy; each is stopped
//! when the run ends or is interrupted. docs/load-test.md has the models and their flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tracing::{debug, error, info, warn};

mod bench;
// The binary's open-file limit handling and what `watchcache up` and the bench share: one copy
// of each, in crates/cli.
#[path = "../../../crates/cli/src/fdlimit.rs"]
#[allow(dead_code)] // serve's idle-connection defaults are not the bench's
mod fdlimit;
#[path = "../../../crates/cli/src/ops.rs"]
mod ops;

// As the server's: many small allocations per simulated client.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Load a watchcache kubelet-style on a real etcd and report latency, loss and resource use,
/// optionally side by side with one etcd watch per watcher (the world before the cache) or with
/// kube-apiserver.
#[derive(Parser)]
#[command(name = "watchcache-bench", version, about, long_about = None)]
struct BenchArgs {
    /// The load: `pods` (per-node and unrouted pod watchers, one stream each) or `kubelet`
    /// (simulated kubelets: one TLS HTTP/2 connection per node with its own client certificate,
    /// its watches in protobuf, authorized by Node,RBAC; `--mode cache`, `kube-apiserver` or
    /// `both`, one after the other on the same etcd).
    #[arg(long, value_enum, default_value_t = bench::Model::Pods)]
    model: bench::Model,
    /// `--model kubelet`: watches per node (k8s-1m's 18 by default; the first N of the list in
    /// design/performance.md, the pod paths first).
    #[arg(long, default_value_t = 18)]
    watches_per_node: usize,
    /// `--model kubelet`: each node renews its Lease once per this many seconds.
    #[arg(long, default_value_t = 10.0)]
    lease_period: f64,
    /// `--model kubelet`: watchcache counts its heap (`WATCHCACHE_HEAP_STATS=1`) and the heap per
    /// idle watch is reported next to its RSS (two atomic additions per allocation: CPU figures
    /// are not comparable with runs without it).
    #[arg(long)]
    heap_stats: bool,
    /// The watchcache binary the bench starts as its server (default: this one); for example a
    /// script that runs it under a heap profiler.
    #[arg(long, value_name = "FILE")]
    server_binary: Option<PathBuf>,
    /// `--model kubelet`: the etcd binary to run (kube-apiserver 1.35 needs 3.5.13+); default:
    /// target/etcd/v3.6.16/etcd when it is there (the tests' etcd), else `etcd` from PATH.
    #[arg(long, value_name = "FILE")]
    etcd_binary: Option<PathBuf>,
    /// `--model kubelet`: kube-apiserver 1.35's binary.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/k8s/v1.35.4/kube-apiserver"
    )]
    kube_apiserver: PathBuf,
    /// `--model cold-start`: another kube-apiserver measured after the first, on the same etcd
    /// (repeatable; e.g. `target/k8s/v1.37.2/kube-apiserver`, built by
    /// `K8S_VERSIONS=v1.37.2 scripts/k8s-peers`).
    #[arg(long, value_name = "FILE")]
    also_kube_apiserver: Vec<PathBuf>,
    /// `--model catchup`: events written to etcd while the cache is cut off from it.
    #[arg(long, default_value_t = 300_000)]
    events: usize,
    /// `--model catchup`: events written with the link up before the measured cut, so that the
    /// cache under test runs warm (its history window full, its memory reused rather than grown
    /// from the OS: what a long-running cache catching up after a partition has).
    #[arg(long, default_value_t = 0)]
    warmup_events: usize,
    /// `--model catchup` and `--model kubelet`: how pods are stored in etcd (`protobuf`: as
    /// kube-apiserver 1.35 writes them).
    #[arg(long, value_enum, default_value_t = bench::pods::Storage::Protobuf)]
    storage: bench::pods::Storage,
    /// `--model catchup`: what the server under test follows (`root`: it is a leaf of a root
    /// watchcache on etcd, and the root replays the backlog from its history window).
    #[arg(long, value_enum, default_value_t = bench::catchup::Follow::Etcd)]
    follow: bench::catchup::Follow,
    /// `--model catchup`: what the bench's HTTP watchers ask for.
    #[arg(long, value_enum, default_value_t = bench::WatchWire::Json)]
    watch_wire: bench::WatchWire,
    /// `--model catchup --follow root|root-embedded`: how the leaf reads its root's watch
    /// (`protobuf`: when the root's version allows it, as a leaf does by default).
    #[arg(long, value_enum, default_value_t = bench::WatchWire::Protobuf)]
    leaf_wire: bench::WatchWire,
    /// `--model catchup`: distinct `app` labels; the label watchers (`--unrouted`) select
    /// `app=app-0`, `app=app-1`, ...
    #[arg(long, default_value_t = 100)]
    apps: usize,
    /// Nodes; pods are spread over them.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Pods created before the churn (about 2 KB each); `--model cold-start`: stored before the
    /// servers start.
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// `--model cold-start`: the size of each pod's JSON, about (an annotation pads it).
    #[arg(long, default_value_t = 10_000)]
    pod_bytes: usize,
    /// Per-node watchers (fieldSelector=spec.nodeName=node-i), one per node.
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Unrouted watchers of all pods (controllers); with `--model catchup`, label watchers.
    #[arg(long, default_value_t = 2)]
    unrouted: usize,
    /// Target writes per second during the churn.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Churn duration in seconds.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// `--model consistent-list`: the Go program `tests/h2probe`, built
    /// (`go build -C tests/h2probe -o ../../target/h2probe .`), to time the same LISTs with Go's
    /// own HTTP/2 client after the rounds.
    #[arg(long, value_name = "FILE")]
    go_probe: Option<PathBuf>,
    /// `--model consistent-list`: LISTs of each side.
    #[arg(long, default_value_t = 1000)]
    rounds: usize,
    /// `--model rollout`: watchcache replicas behind HAProxy.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// `--model rollout`: SIGKILL one replica (no drain) and start it again, instead of
    /// restarting each in turn.
    #[arg(long)]
    kill: bool,
    /// `--model rollout`: the replicas' `--shutdown-delay-duration`, seconds.
    #[arg(long, default_value_t = 2.0)]
    shutdown_delay: f64,
    /// `--model rollout`: the replicas' `--shutdown-watch-termination-grace-period`, seconds.
    #[arg(long, default_value_t = 10.0)]
    watch_grace: f64,
    /// `--model rollout`: seconds of churn before the first replica stops (the churn lasts
    /// `--duration` in all, which must outlast the rollout).
    #[arg(long, default_value_t = 5.0)]
    settle: f64,
    /// What to measure.
    #[arg(long, value_enum, default_value_t = bench::Mode::Cache)]
    mode: bench::Mode,
    /// etcd client URL (repeatable); with none, a fresh local etcd is started per mode.
    #[arg(long = "etcd", value_name = "URL")]
    etcd: Vec<String>,
    /// A running watchcache server; with none, one is started per cache-mode run.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Directory for the local etcd's data (a fresh one under it per mode), e.g. /dev/shm to take
    /// etcd's disk out of the measurement; default: the system temp dir.
    #[arg(long, value_name = "DIR")]
    etcd_data_dir: Option<PathBuf>,
    /// The local etcd's `--snapshot-count` (etcd 3.4's default: 100 000 applied entries between
    /// snapshots). Noise removal for a part not under test: with `--model catchup` etcd's snapshot
    /// otherwise lands near the heal (after 100 000 warm-up events, say) and takes CPU from the
    /// cache under test. The cache does nothing differently. Not for `--model kubelet`.
    #[arg(long, value_name = "N")]
    etcd_snapshot_count: Option<u64>,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write every delivered event as a CSV line to this file (`watcher,node,rev,sent_us,ack_us,
    /// at_us`: the watcher's index, its node or empty when unrouted, then the write's start, etcd's
    /// ack and the receipt on the bench's clock), to see where a tail comes from. With `--mode both`,
    /// the last mode's.
    #[arg(long, value_name = "FILE")]
    samples: Option<PathBuf>,
    /// Run the cache mode over TLS (the server started with --local-pki): `h2` (the default)
    /// multiplexes watchers on HTTP/2 connections, 18 per connection like a kubelet's; `http1`
    /// opens one TLS HTTP/1.1 connection per watcher.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "h2", value_name = "PROTO")]
    tls: Option<bench::TlsMode>,
    /// After seeding, send this many fresh requests (no resourceVersion) within one second: half
    /// WatchLists, half consistent LISTs of one node's pods (a fleet reconnecting). Reports how
    /// many were served, refused (429) or failed, and the etcd reads they cost.
    #[arg(long, default_value_t = 0, value_name = "N")]
    burst: usize,
}

async fn bench(
    args: BenchArgs,
    open_files: Option<fdlimit::OpenFiles>,
) -> Result<(), Box<dyn std::error::Error>> {
    if args.model == bench::Model::Kubelet {
        // One HTTP/2 connection per node.
        bench::check_open_files(args.nodes, open_files)?;
        return kubelets(args).await;
    }
    if args.model == bench::Model::RolloutCluster {
        return rollout_cluster(args).await;
    }
    if args.model == bench::Model::Rollout {
        // One HTTP/2 connection per node here, and HAProxy processes sized to the same limit.
        bench::check_open_files(args.nodes, open_files)?;
        return rollout(args, open_files).await;
    }
    if args.model == bench::Model::Catchup {
        return catchup(args).await;
    }
    if args.model == bench::Model::ColdStart {
        return cold_start(args).await;
    }
    if args.model == bench::Model::ConsistentList {
        return consistent_list(args).await;
    }
    let cfg = bench::BenchConfig {
        nodes: args.nodes,
        pods: args.pods,
        watchers: args.watchers,
        unrouted: args.unrouted,
        rate: args.rate,
        duration: std::time::Duration::from_secs(args.duration),
        mode: args.mode,
        etcd: args.etcd,
        server: args.server,
        server_binary: server_binary(&args.server_binary)?,
        delivery_grace: std::time::Duration::from_secs(30),
        progress: true,
        etcd_data_dir: args.etcd_data_dir,
        etcd_snapshot_count: args.etcd_snapshot_count,
        tls: args.tls,
        samples: args.samples,
        burst: args.burst,
    };
    bench::check_open_files(bench::planned_connections(&cfg), open_files)?;
    let run = bench::run(cfg).await?;
    print_report(&bench::table(&run), &run, args.json.as_deref())
}

/// The kubelet model's parameters from the flags.
fn kubelet_config(
    args: &BenchArgs,
    sides: bench::kubelet::Sides,
) -> Result<bench::kubelet::KubeletConfig, Box<dyn std::error::Error>> {
    use std::time::Duration;
    Ok(bench::kubelet::KubeletConfig {
        nodes: args.nodes,
        pods: args.pods,
        watches: args.watches_per_node,
        rate: args.rate,
        duration: Duration::from_secs(args.duration),
        lease_period: Duration::from_secs_f64(args.lease_period.max(0.001)),
        sides,
        server_binary: server_binary(&args.server_binary)?,
        heap_stats: args.heap_stats,
        kube_apiserver: args.kube_apiserver.clone(),
        delivery_grace: Duration::from_secs(30),
        progress: true,
        etcd_data_dir: args.etcd_data_dir.clone(),
        etcd_binary: etcd_binary(args.etcd_binary.clone()),
        storage: args.storage,
    })
}

/// `--flag`'s seconds as a duration.
fn secs(s: f64, flag: &str) -> Result<std::time::Duration, String> {
    std::time::Duration::try_from_secs_f64(s).map_err(|e| format!("--{flag} {s}: {e}"))
}

/// The watchcache binary a bench starts: `--server-binary` (`given`), else the `watchcache`
/// beside this program (cargo builds both into one directory).
fn server_binary(given: &Option<PathBuf>) -> Result<PathBuf, Box<dyn std::error::Error>> {
    if let Some(b) = given {
        return Ok(b.clone());
    }
    let beside = std::env::current_exe()?.with_file_name("watchcache");
    if beside.is_file() {
        Ok(beside)
    } else {
        Err(format!(
            "{} is missing: build it (cargo build --release --bin watchcache) or name one with \
             --server-binary",
            beside.display()
        )
        .into())
    }
}

/// The etcd a bench starts: `--etcd-binary` (`given`), else the tests' etcd 3.6 when it is
/// built, else (`None`) `etcd` from PATH.
fn etcd_binary(given: Option<PathBuf>) -> Option<PathBuf> {
    given.or_else(|| {
        let tests = PathBuf::from("target/etcd/v3.6.16/etcd");
        tests.exists().then_some(tests)
    })
}

/// Prints a run's table, and writes its report as JSON to `json` when given.
fn print_report<T: serde::Serialize>(
    table: &str,
    run: &T,
    json: Option<&std::path::Path>,
) -> Result<(), Box<dyn std::error::Error>> {
    print!("{table}");
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_vec_pretty(run)?)?;
        info!(path = %path.display(), "report written");
    }
    Ok(())
}

/// Runs a bench until it ends or SIGTERM or SIGINT arrives. Either way its futures are dropped in
/// this process, and with them the etcd, watchcache and kube-apiserver processes it started (each
/// stopped by its drop; the runtime's end drops what spawned tasks hold). The signals' default
/// action would end the process at once and leave them running.
async fn interruptible(
    run: impl std::future::Future<Output = Result<(), Box<dyn std::error::Error>>>,
) -> Result<(), Box<dyn std::error::Error>> {
    tokio::select! {
        r = run => r,
        () = ops::shutdown_signal() => Err("interrupted; the processes the bench started are stopped".into()),
    }
}

async fn catchup(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = bench::catchup::CatchupConfig {
        nodes: args.nodes,
        pods: args.pods,
        watchers: args.watchers,
        label_watchers: args.unrouted,
        apps: args.apps,
        events: args.events,
        warmup_events: args.warmup_events,
        storage: args.storage,
        follow: args.follow,
        watch_wire: args.watch_wire,
        leaf_wire: args.leaf_wire,
        server_binary: server_binary(&args.server_binary)?,
        etcd_data_dir: args.etcd_data_dir,
        etcd_snapshot_count: args.etcd_snapshot_count,
        grace: std::time::Duration::from_secs(120),
        progress: true,
    };
    let report = bench::catchup::run(cfg).await?;
    print_report(
        &bench::catchup::table(&report),
        &report,
        args.json.as_deref(),
    )
}

async fn cold_start(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    use bench::kubelet::Side;
    let sides = match args.mode {
        bench::Mode::Cache => vec![Side::Watchcache],
        bench::Mode::KubeApiserver => vec![Side::KubeApiserver],
        bench::Mode::Both => vec![Side::Watchcache, Side::KubeApiserver],
        bench::Mode::DirectEtcd => return Err("--model cold-start has no direct-etcd mode".into()),
    };
    let cfg = bench::coldstart::ColdStartConfig {
        pods: args.pods,
        pod_bytes: args.pod_bytes,
        sides,
        server_binary: server_binary(&args.server_binary)?,
        kube_apiservers: std::iter::once(args.kube_apiserver)
            .chain(args.also_kube_apiserver)
            .collect(),
        etcd_binary: etcd_binary(args.etcd_binary),
        etcd_data_dir: args.etcd_data_dir,
        storage: args.storage,
    };
    let run = bench::coldstart::run(cfg).await?;
    print_report(&bench::coldstart::table(&run), &run, args.json.as_deref())
}

async fn consistent_list(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = bench::consistent::ConsistentConfig {
        objects: args.pods,
        object_bytes: args.pod_bytes,
        rounds: args.rounds,
        rate: args.rate,
        server_binary: server_binary(&args.server_binary)?,
        kube_apiserver: args.kube_apiserver,
        etcd_binary: etcd_binary(args.etcd_binary),
        etcd_data_dir: args.etcd_data_dir,
        go_probe: args.go_probe,
    };
    let run = bench::consistent::run(cfg).await?;
    print_report(&bench::consistent::table(&run), &run, args.json.as_deref())
}

async fn kubelets(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    use bench::kubelet::Sides;
    let sides = match args.mode {
        bench::Mode::Cache => Sides::Watchcache,
        bench::Mode::KubeApiserver => Sides::KubeApiserver,
        bench::Mode::Both => Sides::Both,
        bench::Mode::DirectEtcd => return Err("--model kubelet has no direct-etcd mode".into()),
    };
    let cfg = kubelet_config(&args, sides)?;
    let run = bench::kubelet::run(cfg).await?;
    print_report(&bench::kubelet::table(&run), &run, args.json.as_deref())
}

async fn rollout(
    args: BenchArgs,
    open_files: Option<fdlimit::OpenFiles>,
) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = bench::kubelet::rollout::RolloutConfig {
        kubelet: kubelet_config(&args, bench::kubelet::Sides::Watchcache)?,
        replicas: args.replicas,
        kill: args.kill,
        shutdown_delay: secs(args.shutdown_delay, "shutdown-delay")?,
        watch_grace: secs(args.watch_grace, "watch-grace")?,
        settle: secs(args.settle, "settle")?,
        // Unknown: HAProxy is sized as for the limit this kind of machine gives (20 000).
        open_files: open_files.map_or(20_000, |f| f.hard),
    };
    let run = bench::kubelet::rollout::run(cfg).await?;
    print_report(
        &bench::kubelet::rollout::table(&run),
        &run,
        args.json.as_deref(),
    )
}

async fn rollout_cluster(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let k8s_bin_dir = args
        .kube_apiserver
        .parent()
        .map(PathBuf::from)
        .ok_or("--kube-apiserver names no directory")?;
    let cfg = bench::cluster::ClusterConfig {
        nodes: args.nodes,
        pods: args.pods,
        replicas: args.replicas,
        kill: args.kill,
        rate: args.rate,
        before: secs(args.settle, "settle")?,
        shutdown_delay: secs(args.shutdown_delay, "shutdown-delay")?,
        watch_grace: secs(args.watch_grace, "watch-grace")?,
        binary: server_binary(&args.server_binary)?,
        k8s_bin_dir,
        etcd_binary: etcd_binary(args.etcd_binary),
        data_dir: args.etcd_data_dir,
    };
    let run = bench::cluster::run(cfg).await?;
    print_report(&bench::cluster::table(&run), &run, args.json.as_deref())
}

fn main() -> ExitCode {
    let args = BenchArgs::parse();
    // Logs go to stderr: stdout carries the report's table.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(ops::log_filter(std::env::var("RUST_LOG").ok(), "info"))
        .init();
    // The limit in force bounds the connections the run opens (the server it starts inherits
    // it; a run that cannot fit names both numbers). At debug; a warning when unraised.
    let open_files = match fdlimit::raise() {
        Ok(f) => {
            debug!(soft = f.soft, hard = f.hard, was = f.was, "open-file limit");
            Some(f)
        }
        Err(e) => {
            warn!(error = %e, "open-file limit unchanged");
            None
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(interruptible(bench(args, open_files))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "watchcache-bench failed");
            ExitCode::FAILURE
        }
    }
}

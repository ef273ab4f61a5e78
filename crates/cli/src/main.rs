//! `watchcache`: the command-line entry point.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};
use tracing::{debug, error, info, warn};
use watchcache::{Cache, CacheConfig, ResourceDef};
use watchcache_etcd::{
    ConsistentReads, Encryption, EtcdCaches, EtcdConfig, EtcdTls, LocalEtcd, LocalEtcdError,
};
use watchcache_follow::crds::ResourceChange;
use watchcache_kube::{ApiServerCaches, ApiServerConfig, InitialList, client_from_kubeconfig};
use watchcache_server::{Served, Server, ServerConfig, TlsConfig, auth};

mod fdlimit;
mod ops;
mod peers;
mod pki;
mod proxy;
mod up;

mod heap;

// Many small long-lived allocations per watcher: mimalloc keeps their resident cost close to
// their size (glibc's arenas fragment; measured in design/performance.md). Counted when
// `WATCHCACHE_HEAP_STATS=1` (`heap.rs`).
#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

/// An indexed watch cache with trigger-based routing, serving the Kubernetes list/watch API from etcd.
#[derive(Parser)]
#[command(name = "watchcache", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Kubernetes list/watch API for the defined resources, cached from etcd or from a
    /// Kubernetes API server (--upstream-kubeconfig).
    ///
    /// Logging is filtered by RUST_LOG (default: info, without kube-rs's line per failed
    /// request), e.g. RUST_LOG=watchcache=debug.
    // Boxed: the flags are many, and there is one of these per process.
    Serve(Box<ServeArgs>),
    /// Run a local Kubernetes control plane with watchcache in front (etcd 3.6, kube-apiserver,
    /// kube-controller-manager, kube-scheduler, optionally kubemark hollow nodes), its data kept
    /// in --data-dir across restarts, until Ctrl-C. `./scripts/run` builds the peers and runs it.
    // Boxed: as the others.
    Up(Box<up::UpArgs>),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// etcd client URL; repeat for a cluster. With none, a local etcd is started from PATH.
    #[arg(long = "etcd", value_name = "URL")]
    etcd: Vec<String>,
    /// Data directory of the local etcd (only without --etcd).
    #[arg(long, default_value = "./watchcache-data")]
    data_dir: PathBuf,
    /// Client port of the local etcd (its peer port is this plus 10; only without --etcd). A
    /// port already taken fails the start, naming it: the local etcd is this server's own or
    /// none. 0: free ports chosen at each start (several servers on one machine; the data dir
    /// keeps the data either way).
    #[arg(long, default_value_t = 23790, value_name = "PORT")]
    local_etcd_port: u16,
    /// Address to serve on: HTTPS with --tls-cert-file or --local-pki, plain HTTP without.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// PEM serving certificate (chain, leaf first); with it, --listen serves TLS (HTTP/2 and
    /// HTTP/1.1). Reloaded when the file changes.
    #[arg(long, value_name = "FILE", requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// PEM CA bundle: client certificates signed by it are verified during the TLS handshake.
    /// Clients without a certificate still connect.
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    client_ca_file: Option<PathBuf>,
    /// Make (first start) or reuse a local CA, serving certificate and admin client certificate
    /// in --data-dir, serve TLS with them and write <data-dir>/admin.kubeconfig.
    #[arg(long, conflicts_with_all = ["tls_cert_file", "client_ca_file"])]
    local_pki: bool,
    /// Also serve plain HTTP on this address, for development; it must be a loopback address.
    #[arg(long, value_name = "ADDR")]
    insecure_listen: Option<SocketAddr>,
    /// Directory of resource definitions (*.toml); they add to, or replace, the built-ins of the
    /// same group and plural.
    #[arg(long, value_name = "DIR")]
    indexers: Option<PathBuf>,
    /// Largest accepted request body, in bytes.
    #[arg(long, default_value_t = 3 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Longest accepted field or label selector, in bytes.
    #[arg(long, default_value_t = 4096)]
    max_selector_len: usize,
    /// Most concurrent watches; more are answered 429.
    #[arg(long, default_value_t = 200_000)]
    max_watchers: usize,
    /// Most open client connections; more are answered 503 and closed at once.
    #[arg(long, default_value_t = 250_000)]
    max_connections: usize,
    /// Most connections at once that have not sent their first request yet, counted from the
    /// accept (on TLS the handshake is part of it); more are answered 503 and closed at once.
    /// Default: a quarter of --max-connections, at most half the open-file limit. 0: no limit.
    #[arg(long, value_name = "N")]
    max_idle_connections: Option<usize>,
    /// Most such connections from one client address; more are answered 503 and closed at once
    /// (0: no limit). Default: a quarter of --max-idle-connections, at least 256. Clients behind
    /// one NAT or proxy share an address: raise it there.
    #[arg(long, value_name = "N")]
    max_idle_connections_per_address: Option<usize>,
    /// How consistent reads (resourceVersion unset) are served: from the cache on etcd
    /// 3.4.31+/3.5.13+ and from etcd range reads on older versions (auto), always from the cache
    /// (cache), or always from etcd (etcd).
    #[arg(long, default_value = "auto",
          value_parser = PossibleValuesParser::new(ConsistentReads::NAMES).try_map(|s| s.parse::<ConsistentReads>()))]
    consistent_reads: ConsistentReads,
    /// kube-apiserver's EncryptionConfiguration (apiserver.config.k8s.io/v1): values encrypted at
    /// rest (identity, aescbc, aesgcm, secretbox) are decrypted. KMS providers are refused.
    #[arg(long, value_name = "FILE")]
    encryption_provider_config: Option<PathBuf>,
    /// Serve only these resources (comma-separated): a plural names that resource in every group
    /// (`events`), `plural.group` one (`deployments.apps`); default: every definition.
    #[arg(long, value_delimiter = ',', value_name = "PLURAL")]
    resources: Vec<String>,
    /// PEM CA bundle that verifies etcd's serving certificate (for https:// etcd URLs).
    #[arg(long, value_name = "FILE")]
    etcd_cafile: Option<PathBuf>,
    /// PEM client certificate for etcd (an etcd with --client-cert-auth requires one).
    #[arg(long, value_name = "FILE", requires = "etcd_keyfile")]
    etcd_certfile: Option<PathBuf>,
    /// PEM private key of --etcd-certfile.
    #[arg(long, value_name = "FILE", requires = "etcd_certfile")]
    etcd_keyfile: Option<PathBuf>,
    /// Follow a Kubernetes API server (or another watchcache) described by this kubeconfig
    /// instead of etcd: one watch per resource on it; writes are forwarded to it.
    #[arg(long, value_name = "FILE", conflicts_with = "etcd")]
    upstream_kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "CTX", requires = "upstream_kubeconfig")]
    upstream_context: Option<String>,
    /// The recommended set-up in front of a real cluster: read the cluster's etcd directly (one
    /// watch per resource, as kube-apiserver's own cache), and forward writes, subresources and
    /// resources not cached here to the kube-apiserver this kubeconfig names, with the client's
    /// identity as impersonation headers; so admission, defaulting and validation stay
    /// kube-apiserver's. Its user must be allowed to impersonate.
    #[arg(long, value_name = "FILE", conflicts_with = "upstream_kubeconfig")]
    apiserver_kubeconfig: Option<PathBuf>,
    /// The context of --apiserver-kubeconfig (default: its current context).
    #[arg(long, value_name = "CTX", requires = "apiserver_kubeconfig")]
    apiserver_context: Option<String>,
    /// How the upstream API server's full state is read: WatchList when it does it, else a
    /// paginated LIST (auto), WatchList only (watchlist), or LIST then watch (list).
    #[arg(long, default_value = "auto", value_parser = ["auto", "watchlist", "list"],
          requires = "upstream_kubeconfig")]
    upstream_initial_list: String,
    /// How the upstream API server's watches and LISTs of built-in kinds are read: in protobuf when its
    /// version is not newer than this build's (auto), or always in JSON (json).
    #[arg(long, default_value = "auto", value_parser = ["auto", "json"],
          requires = "upstream_kubeconfig")]
    upstream_watch_wire: String,
    /// Static bearer tokens: a CSV file of `token,user,uid,"group1,group2"` lines (as
    /// kube-apiserver's).
    #[arg(long, value_name = "FILE")]
    token_auth_file: Option<PathBuf>,
    /// PEM public keys (RSA or EC P-256) that verify service-account tokens; repeatable.
    #[arg(long, value_name = "FILE")]
    service_account_key_file: Vec<PathBuf>,
    /// The issuer (`iss`) service-account tokens must name; repeatable.
    #[arg(long, value_name = "URL")]
    service_account_issuer: Vec<String>,
    /// Audiences a service-account token must name one of (default: the issuers).
    #[arg(long, value_delimiter = ',', value_name = "AUD")]
    api_audiences: Vec<String>,
    /// Look a service-account token's account (and the pod, secret or node it is bound to) up on
    /// every request: a token of a deleted account is refused. Needs the serviceaccounts
    /// resource served.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    service_account_lookup: bool,
    /// Serve requests without credentials as `system:anonymous` (default: true on plain HTTP,
    /// false when serving TLS, as kube-apiserver's secure port).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    anonymous_auth: Option<bool>,
    /// Authorizers, in order: comma-separated AlwaysAllow, AlwaysDeny, Node, RBAC (default, once
    /// any authentication is configured: Node,RBAC; `system:masters` may do everything).
    #[arg(long, value_delimiter = ',', value_name = "MODES")]
    authorization_mode: Vec<watchcache_server::auth::Mode>,
    /// Directory of RBAC objects (YAML or JSON: Roles, ClusterRoles, RoleBindings,
    /// ClusterRoleBindings, Lists) the RBAC authorizer starts from; the cache's own RBAC objects
    /// add to them.
    #[arg(long, value_name = "DIR")]
    authorization_rbac_dir: Option<PathBuf>,
    /// Most non-watch requests in progress at once; more are answered 429 (0: no limit).
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// How long a request other than a watch may take, reading its body included; past it the
    /// answer is 504 Timeout (kube-apiserver's flag and default; a Go duration: `60s`, `1m0s`).
    #[arg(long, default_value = "1m0s", value_name = "DURATION", value_parser = positive_duration)]
    request_timeout: std::time::Duration,
    /// On SIGTERM, how long to keep serving everything while /readyz fails, so that load
    /// balancers take this replica out first (kube-apiserver's flag and default; a Go duration)
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = duration)]
    shutdown_delay_duration: std::time::Duration,
    /// After that delay, how long the open watches get to end: each gets a last BOOKMARK and
    /// ends, the ends spread over this period so that clients resume on other replicas a few at
    /// a time, without relisting (kube-apiserver's flag and default, where every watch ends at
    /// once; a Go duration)
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = duration)]
    shutdown_watch_termination_grace_period: std::time::Duration,
    /// Most concurrent watches of one user; more are answered 429 (0: no limit). A quarter of
    /// --max-watchers: a DaemonSet's service account on 5000 nodes still fits.
    #[arg(long, default_value_t = 50_000)]
    max_watches_per_user: usize,
    /// Append one JSON line per write and per denied request to this file. Without it there is
    /// no audit line, in the file or in the log.
    #[arg(long, value_name = "FILE")]
    audit_log_path: Option<PathBuf>,
    /// Most bytes each resource's history window may hold (`256Mi`, `1Gi`, or bytes); past it
    /// the oldest events leave the window and a watcher behind them gets 410 Expired. A
    /// definition's `[history] max_bytes` overrides it. Default: no budget (count-sized window).
    #[arg(long, value_name = "BYTES", value_parser = byte_size)]
    history_bytes: Option<usize>,
    /// How often each followed resource's cache is compared with its upstream at one revision
    /// (kube-apiserver's DetectCacheInconsistency: 5m, each wait drawn up to 50 % longer); a
    /// mismatch is counted (apiserver_storage_consistency_checks_total), logged, and the resource
    /// relisted. 0 turns the check off.
    #[arg(long, default_value = "5m", value_name = "DURATION", value_parser = duration_or_zero)]
    consistency_check_period: std::time::Duration,
    /// Let the kernel back the heap with transparent huge pages. Off by default: mimalloc asks
    /// for them on its arenas, and a 2 MiB page is resident whole once any byte of it is
    /// touched; with 100 000 idle watches half the server's RSS was huge pages, and the server
    /// held 3.5–4.5 % more than without them (design/performance.md, "Bookmarks woken in
    /// batches; transparent huge pages").
    #[arg(long, env = "WATCHCACHE_TRANSPARENT_HUGE_PAGES")]
    transparent_huge_pages: bool,
}

/// A size flag: bytes, or a number with a binary (`Ki`, `Mi`, `Gi`) or decimal (`k`, `M`, `G`)
/// suffix, above zero.
fn byte_size(s: &str) -> Result<usize, String> {
    let (digits, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let mult: usize = match unit {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit \"{other}\": use Ki, Mi, Gi, k, M or G"
            ));
        }
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("\"{s}\" is not a size (e.g. 256Mi)"))?;
    match n.checked_mul(mult) {
        Some(0) => Err("must be above zero".into()),
        Some(b) => Ok(b),
        None => Err(format!("\"{s}\" is too large")),
    }
}

/// A duration flag (`5m`, `30s`), or `0` for none.
fn duration_or_zero(s: &str) -> Result<std::time::Duration, String> {
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// A duration flag (`60s`, `1m0s`, `1m 30s`), which must be above zero.
fn duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

fn positive_duration(s: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be above zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

impl ServeArgs {
    /// The caches' tunables the flags set.
    fn cache_config(&self) -> CacheConfig {
        CacheConfig::default().consistency_check_period(self.consistency_check_period)
    }

    /// Authentication and authorization, when any of their flags is given; `None` keeps
    /// today's open server. `tls`: whether the port serves TLS (anonymous is then off unless
    /// asked for), `client_certs`: whether `--client-ca-file` was given.
    fn auth(
        &self,
        tls: bool,
        client_certs: bool,
    ) -> Result<Option<auth::AuthConfig>, Box<dyn std::error::Error>> {
        let wanted = client_certs
            || self.token_auth_file.is_some()
            || !self.service_account_key_file.is_empty()
            || !self.authorization_mode.is_empty()
            || self.anonymous_auth.is_some();
        if !wanted {
            return Ok(None);
        }
        let tokens = self
            .token_auth_file
            .as_deref()
            .map(auth::TokenFile::load)
            .transpose()?;
        let service_accounts = if self.service_account_key_file.is_empty() {
            None
        } else {
            let sa = auth::ServiceAccounts::load(
                &self.service_account_key_file,
                self.service_account_issuer.clone(),
                self.api_audiences.clone(),
            )?;
            Some(if self.service_account_lookup {
                sa
            } else {
                sa.without_lookup()
            })
        };
        let rbac_bootstrap = match &self.authorization_rbac_dir {
            Some(d) => auth::RbacObjects::load_dir(d)?,
            None => auth::RbacObjects::default(),
        };
        Ok(Some(auth::AuthConfig {
            authenticator: auth::Authenticator {
                client_certs,
                tokens,
                service_accounts,
                anonymous: self.anonymous_auth.unwrap_or(!tls),
            },
            modes: self.authorization_mode.clone(),
            rbac_bootstrap,
        }))
    }
}

/// The caches a server serves, and where they come from.
enum Caches {
    // Boxed: the etcd client is large, and there is one of these per process.
    Etcd(Box<EtcdCaches>, Option<LocalEtcd>),
    ApiServer(ApiServerCaches),
}

impl Caches {
    /// Every cache.
    fn all(&self) -> Vec<watchcache::Cache> {
        match self {
            Caches::Etcd(c, _) => c.caches().map(|(_, c)| c.clone()).collect(),
            Caches::ApiServer(c) => c.caches().map(|(_, c)| c.clone()).collect(),
        }
    }

    fn served(&self) -> Vec<Served> {
        let caches: Vec<Cache> = match self {
            Caches::Etcd(c, _) => c.caches().map(|(_, c)| c.clone()).collect(),
            Caches::ApiServer(c) => c.caches().map(|(_, c)| c.clone()).collect(),
        };
        caches.into_iter().map(Served::new).collect()
    }

    /// Starts caching every CRD's custom resources as the CRD is Established, serving each on
    /// `server` once its cache is ready; `None` when CRDs are not cached (`--resources`).
    fn sync_crds(&self, server: &Server) -> Option<watchcache_follow::crds::CrdSync> {
        const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
        let (crds, dynamic) = match self {
            Caches::Etcd(c, _) => (c.cache(CRDS)?.clone(), c.dynamic()),
            Caches::ApiServer(c) => (c.cache(CRDS)?.clone(), c.dynamic()),
        };
        let resources = server.resources();
        Some(watchcache_follow::crds::sync_crds(
            crds,
            dynamic,
            move |change| match change {
                ResourceChange::Serve(cache) => resources.serve(Served::new(cache)),
                ResourceChange::Unserve(cache) => {
                    resources.unserve(&cache);
                }
            },
        ))
    }

    async fn shutdown(self) {
        match self {
            Caches::Etcd(c, local) => {
                c.shutdown().await;
                drop(local);
            }
            Caches::ApiServer(c) => c.shutdown().await,
        }
    }
}

async fn follow_api_server(
    args: &ServeArgs,
    kubeconfig: &std::path::Path,
    defs: Vec<ResourceDef>,
) -> Result<Caches, Box<dyn std::error::Error>> {
    let client = client_from_kubeconfig(kubeconfig, args.upstream_context.as_deref()).await?;
    let config = ApiServerConfig {
        initial_list: match args.upstream_initial_list.as_str() {
            "watchlist" => InitialList::WatchList,
            "list" => InitialList::List,
            _ => InitialList::Auto,
        },
        protobuf_watch: args.upstream_watch_wire != "json",
        ..ApiServerConfig::default()
    };
    info!(kubeconfig = %kubeconfig.display(), context = ?args.upstream_context, "following an API server");
    // Resources the server does not serve (a CRD not installed, an API group its version lacks)
    // are left to it: their requests are proxied.
    let (defs, missing) = watchcache_kube::served_by(&client, defs).await;
    if !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(ResourceDef::resource_name).collect();
        warn!(resources = ?names, "not served by the upstream: not cached (requests for them are proxied)");
    }
    Ok(Caches::ApiServer(ApiServerCaches::connect(
        client,
        config,
        defs,
        args.cache_config(),
    )?))
}

fn definitions(dir: Option<&PathBuf>) -> Result<Vec<ResourceDef>, watchcache::DefinitionError> {
    let mut defs = ResourceDef::builtins();
    if let Some(dir) = dir {
        for d in ResourceDef::load_dir(dir)? {
            defs.retain(|b| !(b.group == d.group && b.plural == d.plural));
            defs.push(d);
        }
    }
    Ok(defs)
}

/// `open_files`: the soft open-file limit in force, when known.
async fn serve(args: ServeArgs, open_files: Option<u64>) -> Result<(), Box<dyn std::error::Error>> {
    let mut defs = definitions(args.indexers.as_ref())?;
    if !args.resources.is_empty() {
        // A plural names the resources of that plural in every group (`events`: both event
        // APIs); `plural.group` names one (`events.events.k8s.io`).
        let named = |d: &ResourceDef, r: &String| d.plural == *r || d.resource_name() == *r;
        if let Some(unknown) = args
            .resources
            .iter()
            .find(|r| !defs.iter().any(|d| named(d, r)))
        {
            return Err(format!("--resources: no definition for \"{unknown}\"").into());
        }
        defs.retain(|d| args.resources.iter().any(|r| named(d, r)));
    }
    if let Some(budget) = args.history_bytes {
        for d in &mut defs {
            d.history.max_bytes.get_or_insert(budget);
        }
    }
    // Before anything starts: a bad or KMS configuration is a start-up error.
    let encryption = args
        .encryption_provider_config
        .as_deref()
        .map(Encryption::load)
        .transpose()?
        .map(std::sync::Arc::new);
    // Read before anything starts: bad TLS files, a bad token file, key or RBAC directory is a
    // start-up error. Client certificates authenticate when a client CA verifies them.
    let started = std::time::Instant::now();
    let (tls, hint) = tls_config(&args)?;
    let client_certs = tls.as_ref().is_some_and(|t| t.client_ca_file.is_some());
    let auth = args.auth(tls.is_some(), client_certs)?;
    if args.service_account_lookup
        && !args.service_account_key_file.is_empty()
        && !defs
            .iter()
            .any(|d| d.group.is_empty() && d.plural == "serviceaccounts")
    {
        return Err("--service-account-lookup needs the serviceaccounts resource served (add it to --resources or --indexers), or pass --service-account-lookup=false".into());
    }
    let caches = match &args.upstream_kubeconfig {
        Some(kubeconfig) => follow_api_server(&args, kubeconfig, defs).await?,
        None => {
            let mut local = None;
            let endpoints = if args.etcd.is_empty() {
                let e = start_local_etcd(&args).await?;
                let url = e.url();
                info!(%url, pid = e.pid().unwrap_or(0), data_dir = %args.data_dir.display(), "local etcd started");
                local = Some(e);
                vec![url]
            } else {
                info!(endpoints = %args.etcd.join(","), "following etcd");
                args.etcd.clone()
            };
            let mut etcd = EtcdConfig::new(endpoints);
            etcd.consistent_reads = args.consistent_reads;
            if args.etcd_cafile.is_some() || args.etcd_certfile.is_some() {
                etcd.tls = Some(EtcdTls {
                    ca_file: args.etcd_cafile.clone(),
                    cert_file: args.etcd_certfile.clone(),
                    key_file: args.etcd_keyfile.clone(),
                });
            }
            etcd.encryption = encryption;
            Caches::Etcd(
                Box::new(EtcdCaches::connect(etcd, defs, args.cache_config()).await?),
                local,
            )
        }
    };
    let max_idle_connections = args
        .max_idle_connections
        .unwrap_or_else(|| fdlimit::default_max_idle(args.max_connections, open_files));
    let config = ServerConfig {
        max_body_bytes: args.max_body_bytes,
        max_selector_len: args.max_selector_len,
        max_watchers: args.max_watchers,
        max_connections: args.max_connections,
        max_idle_connections,
        max_idle_connections_per_address: args
            .max_idle_connections_per_address
            .unwrap_or_else(|| fdlimit::default_max_idle_per_address(max_idle_connections)),
        max_requests_inflight: args.max_requests_inflight,
        max_watches_per_user: args.max_watches_per_user,
        audit_log_path: args.audit_log_path.clone(),
        request_timeout: args.request_timeout,
        shutdown_delay: args.shutdown_delay_duration,
        shutdown_watch_grace: args.shutdown_watch_termination_grace_period,
        // Proxy mode: the upstream answers a consistent GET as cheaply as it answers the LIST
        // that would prove the cache fresh, and without the wait for its bookmark.
        forward_consistent_gets: matches!(caches, Caches::ApiServer(_)),
        ..ServerConfig::default()
    };
    if let Some(addr) = args.insecure_listen
        && !addr.ip().is_loopback()
    {
        return Err(format!("--insecure-listen {addr}: must be a loopback address").into());
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut urls = format!("{scheme}://{}", args.listen);
    let mut server = Server::new(config, caches.served());
    if let Some(tls) = tls {
        server = server.with_tls(tls)?;
    }
    if let Some(addr) = args.insecure_listen {
        let plain = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("--insecure-listen {addr}: {e}"))?;
        urls.push_str(&format!(" http://{addr}"));
        server = server.with_insecure_listener(plain);
    }
    if let Some(a) = auth {
        server = server.with_auth(a);
    }
    // What is not read from the cache goes to kube-apiserver: the API server this cache follows
    // (proxy mode), or the one beside the etcd it reads (--apiserver-kubeconfig).
    let forward_to = match (&caches, &args.apiserver_kubeconfig) {
        (Caches::ApiServer(c), _) => Some(c.client().clone()),
        (_, Some(kubeconfig)) => {
            let client =
                client_from_kubeconfig(kubeconfig, args.apiserver_context.as_deref()).await?;
            info!(kubeconfig = %kubeconfig.display(), context = ?args.apiserver_context, "writes and uncached requests go to kube-apiserver");
            Some(client)
        }
        _ => None,
    };
    if let Some(client) = forward_to {
        server = server.with_proxy(Arc::new(proxy::KubeProxy { client }));
    }
    let crd_sync = caches.sync_crds(&server);
    let report = tokio::spawn(report_start(caches.all(), urls, hint, started));
    server.serve(listener, ops::shutdown_signal()).await?;
    report.abort();
    drop(crd_sync);
    caches.shutdown().await;
    info!("stopped");
    Ok(())
}

/// The TLS files: given by flags, or the local PKI's; with the local PKI, the hint printed once
/// the server is up (how to reach it as the admin).
fn tls_config(
    args: &ServeArgs,
) -> Result<(Option<TlsConfig>, Option<String>), Box<dyn std::error::Error>> {
    if args.local_pki {
        let pki = pki::LocalPki::ensure(&args.data_dir, args.listen)?;
        debug!(
            dir = %args.data_dir.display(),
            created = pki.created,
            "local PKI"
        );
        let hint = format!(
            "watchcache serves TLS on {}; as the admin:\n  kubectl --kubeconfig {} get pods",
            args.listen,
            pki.kubeconfig.display()
        );
        return Ok((
            Some(TlsConfig::new(pki.cert_file, pki.key_file).with_client_ca(pki.ca_file)),
            Some(hint),
        ));
    }
    Ok(match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(cert), Some(key)) => {
            let mut tls = TlsConfig::new(cert, key);
            if let Some(ca) = &args.client_ca_file {
                tls = tls.with_client_ca(ca);
            }
            (Some(tls), None)
        }
        _ => (None, None),
    })
}

/// How long the start's report waits for every cache before saying which are not ready.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The start's last lines: the caches ready (with their count), where the server listens, then
/// the local PKI's hint, so the hint is the last thing an operator sees. Caches still syncing
/// after [`READY_WAIT`] are reported as such (the server serves meanwhile, /readyz names them),
/// and once more when they are all ready.
async fn report_start(
    caches: Vec<watchcache::Cache>,
    urls: String,
    hint: Option<String>,
    started: std::time::Instant,
) {
    // Polled, not awaited per cache: a resource its upstream does not serve is never ready, and
    // counts as done (its requests are proxied).
    let ready = || {
        caches
            .iter()
            .filter(|c| c.is_ready() || c.is_absent())
            .count()
    };
    let deadline = tokio::time::Instant::now() + READY_WAIT;
    while ready() < caches.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let all = ready() == caches.len();
    if all {
        info!(caches = caches.len(), took = ?started.elapsed(), "caches ready");
    } else {
        warn!(ready = ready(), caches = caches.len(), waited = ?READY_WAIT, "caches not all ready: serving meanwhile; /readyz names the rest");
    }
    info!(url = %urls, "listening");
    if let Some(h) = hint {
        println!("{h}");
    }
    if !all {
        while ready() < caches.len() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        info!(caches = caches.len(), took = ?started.elapsed(), "caches ready");
    }
}

/// Starts the local etcd of `serve` without --etcd; a taken port names the flag that moves it.
async fn start_local_etcd(args: &ServeArgs) -> Result<LocalEtcd, Box<dyn std::error::Error>> {
    let port = args.local_etcd_port;
    let started = if port == 0 {
        LocalEtcd::start(&args.data_dir).await
    } else {
        let peer = port.checked_add(10).ok_or_else(|| {
            format!("--local-etcd-port {port}: its peer port (the port plus 10) is above 65535")
        })?;
        LocalEtcd::start_on(&args.data_dir, port, peer).await
    };
    started.map_err(|e| match e {
        LocalEtcdError::PortInUse { .. } => format!(
            "{e}. Another watchcache or etcd holds it: stop that one, or pass another --local-etcd-port (its peer port is that plus 10; 0 chooses free ports), or --etcd URL to follow a running etcd"
        )
        .into(),
        e => format!("local etcd of --data-dir {}: {e}", args.data_dir.display()).into(),
    })
}

fn main() -> ExitCode {
    heap::init_from_env();
    let cli = Cli::parse();
    // `up` probes servers that are still starting: kube-rs would log each refusal as an error.
    let default_filter = match cli.command {
        Command::Up(_) => "info,kube_client=off",
        _ => "info",
    };
    // Logs go to stderr: stdout carries results (the bench table, `up`'s kubeconfig).
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(ops::log_filter(
            std::env::var("RUST_LOG").ok(),
            default_filter,
        ))
        .init();
    if let Command::Serve(args) = &cli.command
        && !args.transparent_huge_pages
        && let Err(e) = heap::refuse_huge_pages()
    {
        warn!(error = %e, "transparent huge pages stay on");
    }
    let open_files = match &cli.command {
        // The limit in force bounds the connections served. At debug; a warning when unraised.
        Command::Serve(_) => match fdlimit::raise() {
            Ok(f) => {
                debug!(soft = f.soft, hard = f.hard, was = f.was, "open-file limit");
                Some(f)
            }
            Err(e) => {
                warn!(error = %e, "open-file limit unchanged");
                None
            }
        },
        Command::Up(_) => None,
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(*args, open_files.map(|f| f.soft)).await,
            Command::Up(args) => up::up(*args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "watchcache failed");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_args(args: &[&str]) -> ServeArgs {
        let mut argv = vec!["watchcache", "serve"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Serve(a) => *a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn consistency_check_period_defaults_to_upstreams_and_zero_turns_it_off() {
        use std::time::Duration;
        assert_eq!(
            serve_args(&[]).consistency_check_period,
            Duration::from_secs(300)
        );
        for (flag, want) in [("0", 0), ("30s", 30), ("1m", 60), ("0s", 0)] {
            assert_eq!(
                serve_args(&["--consistency-check-period", flag]).consistency_check_period,
                Duration::from_secs(want)
            );
        }
        let argv = ["watchcache", "serve", "--consistency-check-period", "often"];
        assert!(Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn history_bytes_takes_sizes() {
        assert_eq!(serve_args(&[]).history_bytes, None);
        for (flag, want) in [
            ("1048576", 1 << 20),
            ("64Mi", 64 << 20),
            ("2G", 2_000_000_000),
        ] {
            assert_eq!(
                serve_args(&["--history-bytes", flag]).history_bytes,
                Some(want)
            );
        }
        for bad in ["0", "12Mb", "x", "99999999999999999999Gi"] {
            let argv = ["watchcache", "serve", "--history-bytes", bad];
            assert!(Cli::try_parse_from(argv).is_err(), "{bad}");
        }
    }

    #[test]
    fn auth_flags_parse_as_kube_apiservers() {
        // None of them: the open server of before.
        let a = serve_args(&[]);
        assert!(a.auth(false, false).unwrap().is_none());
        assert_eq!(
            (a.max_requests_inflight, a.max_watches_per_user),
            (400, 50_000)
        );
        assert_eq!(a.request_timeout, std::time::Duration::from_secs(60));
        assert!(
            a.shutdown_delay_duration.is_zero()
                && a.shutdown_watch_termination_grace_period.is_zero()
        );
        let a = serve_args(&[
            "--shutdown-delay-duration",
            "5s",
            "--shutdown-watch-termination-grace-period",
            "1m0s",
        ]);
        assert_eq!(
            (
                a.shutdown_delay_duration,
                a.shutdown_watch_termination_grace_period
            ),
            (
                std::time::Duration::from_secs(5),
                std::time::Duration::from_secs(60)
            )
        );
        for (flag, secs) in [("90s", 90), ("1m0s", 60), ("2m30s", 150)] {
            assert_eq!(
                serve_args(&["--request-timeout", flag]).request_timeout,
                std::time::Duration::from_secs(secs),
                "{flag}"
            );
        }
        for bad in ["0s", "soon", "-1s"] {
            assert!(
                Cli::try_parse_from(["watchcache", "serve", "--request-timeout", bad]).is_err(),
                "{bad}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, "t,alice,1,\"a,b\"\n").unwrap();
        let a = serve_args(&[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--authorization-mode",
            "Node,RBAC",
            "--max-watches-per-user",
            "7",
        ]);
        let c = a.auth(false, false).unwrap().unwrap();
        assert_eq!(c.modes, [auth::Mode::Node, auth::Mode::Rbac]);
        assert!(
            c.authenticator.anonymous,
            "plain HTTP: anonymous by default"
        );
        assert!(
            !a.auth(true, true).unwrap().unwrap().authenticator.anonymous,
            "TLS: not"
        );
        assert_eq!(c.authenticator.tokens.unwrap().len(), 1);
        let a = serve_args(&[
            "--anonymous-auth=false",
            "--authorization-mode",
            "AlwaysAllow",
        ]);
        assert!(
            !a.auth(false, false)
                .unwrap()
                .unwrap()
                .authenticator
                .anonymous
        );
        assert!(serve_args(&["--anonymous-auth"]).anonymous_auth.unwrap());
        assert!(
            Cli::try_parse_from(["watchcache", "serve", "--authorization-mode", "Webhook"])
                .is_err()
        );
        std::fs::write(&tokens, "t,alice\n").unwrap();
        let e = serve_args(&["--token-auth-file", tokens.to_str().unwrap()])
            .auth(false, false)
            .unwrap_err();
        assert!(e.to_string().contains("tokens.csv:1:"), "{e}");
    }
}

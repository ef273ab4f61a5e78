//! The integration tests of the whole: the `watchcache` binary, its HTTP API, and the real
//! peers (etcd, kube-apiserver and its control plane, kubectl, client-go, the Python client,
//! helm, HAProxy, podman). One binary, so that the dependency tree is linked once, not once per
//! file: each file below is a module of it. `cargo test --test system kubectl::` runs one file.

/// The shared helpers (tests/support/) this binary uses: each binary names its own, so that
/// none needs a feature it does not build with.
#[path = "../support"]
mod support {
    #![allow(dead_code, unreachable_pub)]
    mod common;
    pub use common::*;
    pub mod cut;
    pub mod etcd;
    pub mod k8s_peers;
    pub mod kube;
    pub mod kubectl;
    pub mod pki;
    pub mod server;
    pub mod venv;
}

mod apiserver;
mod apiserver_chain;
mod auth;
mod catalog;
#[cfg(feature = "test-hooks")]
mod consistency;
mod deploy;
mod drop_managed_fields;
mod etcd_tls;
mod history_budget;
mod http;
mod k8s_apiserver;
mod k8s_conformance;
mod k8s_control_plane;
mod k8s_equality;
mod kubectl;
mod memory_server;
mod metrics;
mod protobuf_storage;
mod python_client;
mod readme_tour;
mod shards;
mod shards_client_go;
mod storm;
mod tls;
mod tls_auth;

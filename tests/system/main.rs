//! The integration tests of the whole: the `watchcache` binary, its HTTP API, and the real
//! peers (etcd, kube-apiserver and its control plane, kubectl, client-go, the Python client,
//! helm, HAProxy, podman). One binary, so that the dependency tree is linked once, not once per
//! file: each file below is a module of it. `cargo test --test system kubectl::` runs one file.

#[path = "../support/mod.rs"]
mod support;

mod apiserver;
mod apiserver_chain;
mod auth;
mod bench_smoke;
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

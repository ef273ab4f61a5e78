//! The core's integration tests: the library without its optional features (model and cache,
//! fed by `MemorySource`). One binary: each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

mod fuzz;
mod kube_apiserver_objects;
mod list;
mod model;
mod selectors;
mod watch;

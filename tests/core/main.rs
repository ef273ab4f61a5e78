//! The core's integration tests: the library without its optional features (model and cache,
//! fed by `MemorySource`). One binary: each file below is a module of it.

/// The shared helpers (tests/support/) this binary uses: each binary names its own, so that
/// none needs a feature it does not build with.
#[path = "../support"]
mod support {
    #![allow(dead_code, unreachable_pub)]
    mod common;
    pub use common::*;
    pub mod cut;
}

mod fuzz;
mod kube_apiserver_objects;
mod list;
mod model;
mod selectors;
mod watch;

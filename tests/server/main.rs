//! The server's integration tests that need no binary: the library with `etcd` and `server`
//! (and `fuzzing` for `fuzz_mutate`). One binary: each file below is a module of it.

/// The shared helpers (tests/support/) this binary uses: each binary names its own, so that
/// none needs a feature it does not build with.
#[path = "../support"]
mod support {
    #![allow(dead_code, unreachable_pub)]
    mod common;
    pub use common::*;
    pub mod etcd;
    pub mod k8s_peers;
    pub mod server;
}

mod adversarial;
#[cfg(feature = "fuzzing")]
mod fuzz_mutate;
mod protobuf_wire;

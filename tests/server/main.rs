//! The server's integration tests that need no binary: the library with `etcd` and `server`
//! (and `fuzzing` for `fuzz_mutate`). One binary: each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

mod adversarial;
#[cfg(feature = "fuzzing")]
mod fuzz_mutate;
mod protobuf_wire;

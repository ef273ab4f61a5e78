//! The load tool's tests (tools/bench, `watchcache-bench`): each run starts the `watchcache`
//! beside it, which `cargo test` at the top builds with it (the workspace's default members).

mod smoke;

//! Fuzz targets of the server's readers of outside input: query strings, the watch fast path's
//! request head, client certificates. Each is a function of raw bytes that panics when an
//! invariant breaks; `tests/server/fuzz_mutate.rs` drives them (and the core's,
//! `watchcache::fuzz`) over the corpus in `tests/fuzz-corpus/`. Behind the `fuzzing` feature:
//! not part of the crate's API.

/// Query strings of LIST and WATCH: parsed and turned into options, or a Status error.
pub fn query(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(mut p) = crate::http::params::ReadParams::parse(Some(text), 10_240) {
        let _list = p.list_options(Some("default"));
        let _watch = p.watch_options(None);
        p.watch_one("web");
        let _one = p.watch_options(Some("default"));
    }
}

/// The watch fast path's first-request head parser.
pub fn request_head(data: &[u8]) {
    let _head = crate::watch::fast_path::parse_head(data);
}

/// The client-certificate verifier (X.509 v1 leaves, read by hand): `data` is a client's chain
/// of DER certificates; refused or verified, never a panic.
pub fn client_cert(data: &[u8]) {
    crate::transport::client_cert::fuzz(data);
}

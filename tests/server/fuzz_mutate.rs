//! A mutating fuzzer over the targets in `watchcache::fuzz`: every reader of outside input. It
//! complements `tests/core/fuzz.rs` (proptest's generated and spliced inputs): it edits the corpus
//! entries byte by byte, which is how it found numbers out of range (`1e999`) that the generated
//! values, always finite floats, never contain.
//!
//! Each target starts from its corpus in `tests/fuzz-corpus/<target>/` and runs mutated inputs
//! (bit flips, byte edits, range deletes and duplicates, dictionary tokens, splices of two corpus
//! entries) for `FUZZ_SECONDS` seconds (default 2 here, so CI stays fast; a long local run is
//! `FUZZ_SECONDS=600 cargo test --release --all-features --test server fuzz_mutate:: -- --nocapture`).
//! `FUZZ_SEED` repeats a run. A panic fails the test with the input, saved under
//! `target/fuzz-crashes/<target>/` to be added to the corpus once fixed. cargo-fuzz needs a
//! nightly toolchain; this runs on stable, without coverage guidance, which the structured corpus
//! and dictionaries make up for in part.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use watchcache::fuzz;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, corpus: &[Vec<u8>], dict: &[&[u8]]) {
    for _ in 0..=rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                input.insert(i, rng.next() as u8);
            }
            3 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(16)).min(len);
                input.drain(a..b);
            }
            4 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(32)).min(len);
                let piece = input[a..b].to_vec();
                let at = rng.below(input.len() + 1);
                input.splice(at..at, piece);
            }
            5 if !dict.is_empty() => {
                let tok = dict[rng.below(dict.len())];
                let at = rng.below(len + 1);
                input.splice(at..at, tok.iter().copied());
            }
            6 if !corpus.is_empty() => {
                let other = &corpus[rng.below(corpus.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            _ if len > 0 => input.truncate(rng.below(len)),
            _ => input.push(rng.next() as u8),
        }
        if input.len() > 1 << 16 {
            input.truncate(1 << 16);
        }
    }
}

fn run(target: &str, f: fn(&[u8]), dict: &[&[u8]]) {
    run_on(target, &[target], f, dict);
}

/// Runs `f` over the corpus of several directories of `tests/fuzz-corpus`.
fn run_on(target: &str, dirs: &[&str], f: fn(&[u8]), dict: &[&[u8]]) {
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    for d in dirs {
        let dir = crate::support::repo().join("tests/fuzz-corpus").join(d);
        corpus.extend(
            std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
                .map(|e| std::fs::read(e.unwrap().path()).unwrap()),
        );
    }
    corpus.sort();
    assert!(!corpus.is_empty(), "empty corpus for {target}");
    let seconds: f64 = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        | 1;
    let mut rng = Rng(seed);
    let check = |input: &[u8]| {
        if catch_unwind(AssertUnwindSafe(|| f(input))).is_err() {
            let out = crate::support::repo()
                .join("target/fuzz-crashes")
                .join(target);
            std::fs::create_dir_all(&out).unwrap();
            let path = out.join(format!("crash-{seed}-{}", input.len()));
            std::fs::write(&path, input).unwrap();
            panic!(
                "{target} panicked (FUZZ_SEED={seed}) on {:?}, saved to {}",
                String::from_utf8_lossy(input),
                path.display()
            );
        }
    };
    for input in &corpus {
        check(input);
    }
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut execs: u64 = corpus.len() as u64;
    let mut input = Vec::new();
    while start.elapsed() < budget {
        for _ in 0..64 {
            input.clear();
            input.extend_from_slice(&corpus[rng.below(corpus.len())]);
            mutate(&mut rng, &mut input, &corpus, dict);
            check(&input);
            execs += 1;
        }
        // Keep some mutants as seeds, so that edits accumulate (a crude substitute for coverage).
        if rng.below(16) == 0 && corpus.len() < 4096 {
            corpus.push(input.clone());
        }
    }
    eprintln!(
        "fuzz {target}: {execs} executions in {:.1} s (FUZZ_SEED={seed}), no failure",
        start.elapsed().as_secs_f64()
    );
}

const SELECTOR_TOKENS: &[&[u8]] = &[
    b"=",
    b"==",
    b"!=",
    b",",
    b" in ",
    b" notin ",
    b"(",
    b")",
    b"!",
    b"\\",
    b"\\,",
    b"\\=",
    b"metadata.name",
    b"spec.nodeName",
    b"a.b/c",
    b"x",
    b" ",
    b"\xff",
    b"\xe2\x98\x83",
];

#[test]
fn field_selector() {
    run("field_selector", fuzz::field_selector, SELECTOR_TOKENS);
}

#[test]
fn label_selector() {
    run("label_selector", fuzz::label_selector, SELECTOR_TOKENS);
}

#[test]
fn object() {
    run(
        "object",
        fuzz::object,
        &[
            b"{",
            b"}",
            b"[",
            b"]",
            b"\"",
            b":",
            b",",
            b"\\u",
            b"\\ud800",
            b"\\udc00",
            b"\\\"",
            b"null",
            b"true",
            b"1e999",
            b"-0",
            b"\"metadata\":",
            b"\"name\":\"web\"",
            b"\"namespace\":\"default\"",
            b"\"labels\":{\"a\":\"b\"}",
            b"\"resourceVersion\":\"7\"",
            b"[[[[[[[[[[",
            b"]]]]]]]]]]",
            b"\xed\xa0\x80",
            b"\xff",
        ],
    );
}

#[test]
fn continue_token() {
    run(
        "continue_token",
        fuzz::continue_token,
        &[b"=", b"+", b"/", b"A", b"eyJ"],
    );
}

#[test]
fn query() {
    run(
        "query",
        watchcache_server::fuzz::query,
        &[
            b"&",
            b"=",
            b"%",
            b"%00",
            b"%ff",
            b"+",
            b"watch=1",
            b"limit=",
            b"18446744073709551615",
            b"9223372036854775808",
            b"-1",
            b"timeoutSeconds=",
            b"resourceVersion=",
            b"resourceVersionMatch=Exact",
            b"sendInitialEvents=true",
            b"continue=",
            b"fieldSelector=",
            b"labelSelector=",
            b"allowWatchBookmarks=true",
        ],
    );
}

#[test]
fn request_head() {
    run_on(
        "request_head",
        // Heads that are not watches (also replayed by the fast path's unit tests), and watches.
        &["head", "head-watch"],
        watchcache_server::fuzz::request_head,
        &[
            b"\r\n",
            b"\r\n\r\n",
            b"GET ",
            b" HTTP/1.1",
            b"?watch=1",
            b"&",
            b"Accept-Encoding: gzip",
            b"Transfer-Encoding: chunked",
            b"Content-Length: 5",
            b":",
            b"\x00",
            b"%",
        ],
    );
}

#[test]
fn client_cert() {
    run(
        "client_cert",
        watchcache_server::fuzz::client_cert,
        &[
            // DER headers: SEQUENCE short and long forms, BIT STRING, INTEGER, OID, the v3
            // version tag, and lengths at and past the reader's limits.
            b"\x30",
            b"\x30\x00",
            b"\x30\x81",
            b"\x30\x82",
            b"\x30\x84\xff\xff\xff\xff",
            b"\x30\x85",
            b"\x03\x01\x00",
            b"\x02\x01\x02",
            b"\x06\x03\x55\x1d\x13",
            b"\xa0\x03\x02\x01\x02",
            b"\x00",
            b"\xff",
        ],
    );
}

//! Continue tokens, in upstream's form: URL-safe base64 (no padding) of
//! `{"v":"meta.k8s.io/v1","rv":R,"start":"<key after the prefix>\u0000"}`. A negative R (upstream
//! writes -1) continues at the latest revision: the token a 410 for an expired continue hands
//! back, for a client that accepts an inconsistent list (`storage.EncodeContinue(key, prefix, -1)`).
// Reads outside input (requests or stored values): it must not panic on any of it
// (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice,
        clippy::panic
    )
)]

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::error::Error;

#[derive(Serialize, Deserialize)]
struct Token {
    v: String,
    rv: i64,
    start: String,
}

/// Encodes a token for a list at `rv` whose last returned key was `last_key` (relative to the prefix).
pub(crate) fn encode(rv: u64, last_key: &str) -> String {
    let t = Token {
        v: "meta.k8s.io/v1".into(),
        rv: rv as i64,
        start: format!("{last_key}\u{0}"),
    };
    let json = serde_json::to_vec(&t).unwrap_or_else(|_| unreachable!("a token always serializes"));
    URL_SAFE_NO_PAD.encode(json)
}

/// Encodes a token that continues after `last_key` at the latest revision (rv -1).
pub(crate) fn encode_latest(last_key: &str) -> String {
    let t = Token {
        v: "meta.k8s.io/v1".into(),
        rv: -1,
        start: format!("{last_key}\u{0}"),
    };
    let json = serde_json::to_vec(&t).unwrap_or_else(|_| unreachable!("a token always serializes"));
    URL_SAFE_NO_PAD.encode(json)
}

/// Decodes a token into (list revision, `None` for the latest; last returned key relative to
/// the prefix).
pub(crate) fn decode(token: &str) -> Result<(Option<u64>, String), Error> {
    let bad = |why: &str| Error::bad_request(format!("continue key is not valid: {why}"));
    let bytes = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad("not base64"))?;
    let t: Token = serde_json::from_slice(&bytes).map_err(|_| bad("not a continue token"))?;
    if t.v != "meta.k8s.io/v1" {
        return Err(bad("unsupported version"));
    }
    if t.rv == 0 {
        return Err(bad(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    let Some(last) = t.start.strip_suffix('\u{0}') else {
        return Err(bad("malformed start key"));
    };
    if last.is_empty() {
        return Err(bad("encoded start key is empty"));
    }
    Ok((u64::try_from(t.rv).ok(), last.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let t = encode(42, "ns/pod-1");
        assert_eq!(decode(&t).unwrap(), (Some(42), "ns/pod-1".to_owned()));
        // Upstream's token for the latest revision, as a 410 for an expired continue hands back.
        assert_eq!(
            decode(&encode_latest("ns/pod-1")).unwrap(),
            (None, "ns/pod-1".to_owned())
        );
        for bad in [
            "",
            "!!!",
            &URL_SAFE_NO_PAD.encode("{}"),
            &URL_SAFE_NO_PAD.encode(r#"{"v":"x","rv":1,"start":"a\u0000"}"#),
        ] {
            let e = decode(bad).unwrap_err();
            assert_eq!(e.code(), 400);
            assert!(
                e.to_string().starts_with("continue key is not valid"),
                "{e}"
            );
        }
    }

    // Fuzzing target (tests/core/fuzz.rs has the others): tokens come from clients.
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { failure_persistence: None, ..Default::default() })]

        #[test]
        fn tokens_decode_without_panicking_and_round_trip(
            garbage in "\\PC{0,80}",
            json in "\\{\"v\":\"meta.k8s.io/v1\",\"rv\":-?[0-9]{1,20},\"start\":\"\\PC{0,10}\"\\}",
            rv in 1u64..=i64::MAX as u64,
            last in "\\PC{1,30}",
        ) {
            let _ = decode(&garbage);
            if let Ok((at, _)) = decode(&URL_SAFE_NO_PAD.encode(&json)) {
                proptest::prop_assert!(at.is_none_or(|at| at >= 1 && at <= i64::MAX as u64));
            }
            proptest::prop_assert_eq!(decode(&encode(rv, &last)).unwrap(), (Some(rv), last));
        }
    }
}

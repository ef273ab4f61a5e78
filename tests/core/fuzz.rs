//! Fuzzing on the stable toolchain (cargo-fuzz needs nightly): proptest drives the parsers of
//! outside input that the public API exposes (the object decoder, both selector parsers, name
//! rules) with arbitrary and structured inputs, and every target first replays its corpus in
//! `tests/fuzz-corpus/<target>/` (inputs that once found bugs). The query-parameter, continue-token
//! and request-head parsers are crate-private; their targets sit beside them
//! (`server::params`, `cache::continue_token`, `server::watch::fast_path`).
//!
//! What each target checks beyond "no panic": the decoder only accepts what it serves as valid
//! JSON that serde_json reads back (also inside a list body and a watch event), the selectors
//! print a form that parses to the same selector, accepted names are safe path segments.
//!
//! CI runs the default 256 cases per target; a long run:
//! `PROPTEST_CASES=200000 cargo test --release --test core fuzz::`.

use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::Value;
use watchcache::names::NameRule;
use watchcache::{Cache, CacheConfig, FieldSelector, LabelSelector, ResourceDef};

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz-corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

fn pods() -> Cache {
    // Decoding needs no writer.
    Cache::new(
        ResourceDef::builtin("pods").unwrap(),
        CacheConfig::default(),
    )
    .0
}

const KEY: &str = "/registry/pods/ns/a";

/// The decoder never panics, and whatever it accepts is served as JSON that strict clients read,
/// alone, as a list item and inside a watch event.
fn check_object(cache: &Cache, bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(o) = cache.decode(KEY, bytes, 7) else {
        return Ok(());
    };
    let json = o.json();
    let v: Value = serde_json::from_slice(json)
        .map_err(|e| TestCaseError::fail(format!("served invalid JSON: {e}")))?;
    prop_assert_eq!(&v["metadata"]["resourceVersion"], "7");
    prop_assert_eq!(&v["metadata"]["name"], "a");
    let text = std::str::from_utf8(json).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(!text.contains('\n'), "a watch frame is one line");
    let list = format!(r#"{{"kind":"PodList","items":[{text}]}}"#);
    let event = format!(r#"{{"type":"ADDED","object":{text}}}"#);
    for body in [list, event] {
        serde_json::from_str::<Value>(&body)
            .map_err(|e| TestCaseError::fail(format!("wrapped body invalid: {e}")))?;
    }
    let moved: Value = serde_json::from_slice(&o.json_at(123_456_789))
        .map_err(|e| TestCaseError::fail(format!("json_at invalid: {e}")))?;
    prop_assert_eq!(&moved["metadata"]["resourceVersion"], "123456789");
    // The protobuf encoder and decoder agree (an object a Pod message cannot hold is a typed
    // error): protobuf → JSON → protobuf is the identity.
    if let Ok(pb) = o.protobuf_wire() {
        let back = cache
            .decode(KEY, pb, 7)
            .map_err(|e| TestCaseError::fail(format!("served protobuf does not decode: {e}")))?;
        let again = cache
            .decode(KEY, back.json(), 7)
            .map_err(|e| TestCaseError::fail(format!("its JSON does not decode: {e}")))?;
        let again = again
            .protobuf_wire()
            .map_err(|e| TestCaseError::fail(format!("its JSON does not encode: {e}")))?;
        prop_assert_eq!(again, pb);
    }
    Ok(())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Pieces that stress the decoder when spliced into JSON text.
fn splice() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\\\u[dD][89abAB][0-9a-fA-F]{2}",
        "\\\\u[dD][c-fC-F][0-9a-fA-F]{2}",
        "[\\[\\]{}\",:\\\\ ]{1,4}",
        "(\\[){90,130}",
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn object_decoder_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check_object(&pods(), &bytes)?;
    }

    #[test]
    fn object_decoder_keeps_every_valid_value(x in json_value(), y in json_value()) {
        let text = serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}, "x": x, "y": y}).to_string();
        let o = pods().decode(KEY, text.as_bytes(), 7).unwrap();
        let back = o.to_value();
        // Both sides through the same float parsing (serde_json's default one is not exact).
        let body: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&back["x"], &body["x"]);
        prop_assert_eq!(&back["y"], &body["y"]);
        check_object(&pods(), text.as_bytes())?;
    }

    #[test]
    fn object_decoder_on_spliced_json(x in json_value(), at in any::<prop::sample::Index>(), piece in splice()) {
        let mut text = serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}, "x": x}).to_string();
        let mut i = at.index(text.len() + 1);
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        text.insert_str(i, &piece);
        check_object(&pods(), text.as_bytes())?;
    }

    #[test]
    fn label_selectors_print_what_they_parse(s in "[a-z0-9=!,() ./-]{0,40}|\\PC{0,40}") {
        if let Ok(sel) = LabelSelector::parse(&s) {
            let again = LabelSelector::parse(&sel.to_string());
            prop_assert_eq!(again.as_ref(), Ok(&sel), "{} printed as {}", s, sel);
        }
    }

    #[test]
    fn field_selectors_print_what_they_parse(s in "[a-z.=!,\\\\]{0,40}|\\PC{0,40}") {
        if let Ok(sel) = FieldSelector::parse(&s) {
            let again = FieldSelector::parse(&sel.to_string());
            prop_assert_eq!(again.as_ref(), Ok(&sel), "{} printed as {}", s, sel);
        }
    }

    #[test]
    fn accepted_names_are_safe_path_segments(s in "[a-z0-9.-]{0,70}|\\PC{0,20}") {
        for rule in [NameRule::Dns1123Subdomain, NameRule::Dns1123Label, NameRule::Dns1035Label] {
            if rule.validate(&s).is_ok() {
                prop_assert!(!s.is_empty() && s.len() <= 253);
                prop_assert!(s != "." && s != "..");
                prop_assert!(s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'));
            }
        }
    }
}

#[test]
fn object_corpus() {
    let cache = pods();
    for input in corpus("object") {
        check_object(&cache, &input).unwrap();
    }
}

#[test]
fn selector_corpus() {
    for input in corpus("label_selector") {
        let s = String::from_utf8(input).unwrap();
        if let Ok(sel) = LabelSelector::parse(&s) {
            assert_eq!(LabelSelector::parse(&sel.to_string()).as_ref(), Ok(&sel));
        }
    }
    for input in corpus("field_selector") {
        let s = String::from_utf8(input).unwrap();
        if let Ok(sel) = FieldSelector::parse(&s) {
            assert_eq!(FieldSelector::parse(&sel.to_string()).as_ref(), Ok(&sel));
        }
    }
}

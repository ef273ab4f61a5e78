//! Query parameters of LIST, GET and WATCH, parsed into typed options with upstream's validation.

// Reads outside input (request or etcd data): it must not panic on any of it.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

use std::borrow::Cow;
use std::collections::HashSet;
use std::time::Duration;

use crate::http::status::ApiError;
use watchcache::{FieldPath, ResourceVersion, RvMatch, Selection};
use watchcache::{ListOptions, WatchOptions};

/// A query's parameters, each name with its first value only, in order: upstream reads a query
/// that way (Go's `url.Values.Get`, and its parameter codec's conversion of a repeated value to a
/// single field), so `?watch=1&watch=0` is a watch wherever it is read: authorized as one, served
/// as one. Names are compared percent-decoded, as Go's `url.ParseQuery` decodes them.
pub(crate) fn query_pairs(
    query: Option<&str>,
) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    let mut seen: HashSet<Cow<'_, str>> = HashSet::new();
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(move |(k, _)| seen.insert(k.clone()))
}

/// The first value of one query parameter.
pub(crate) fn query_value<'q>(query: Option<&'q str>, name: &str) -> Option<Cow<'q, str>> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// Whether a query asks for a watch: its first `watch` value is true in one of Go's boolean
/// spellings (`strconv.ParseBool`).
pub(crate) fn is_watch(query: Option<&str>) -> bool {
    query_value(query, "watch")
        .is_some_and(|v| matches!(&*v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// Parsed query of a read request.
#[derive(Debug, Default, Clone)]
pub(crate) struct ReadParams {
    pub watch: bool,
    pub resource_version: ResourceVersion,
    pub rv_match: Option<RvMatch>,
    pub field_selector: String,
    pub label_selector: String,
    /// `shardSelector` as sent; upstream reads an empty one as absent.
    pub shard_selector: String,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout: Option<Duration>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    /// The object a watch on its own path is restricted to.
    pub name: Option<String>,
    /// `resourceVersionMatch` as sent (validated into `rv_match`).
    rv_match_text: String,
    /// Whether a non-empty `resourceVersion` was sent.
    resource_version_given: bool,
}

/// Booleans as Go's strconv.ParseBool reads them (the Python client sends `True`).
fn parse_bool(name: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Ok(false),
        other => Err(ApiError::bad_request(format!(
            "invalid value \"{other}\" for {name}: expected true or false"
        ))),
    }
}

impl ReadParams {
    /// Parses a query string. Unknown parameters are ignored, as upstream does; a repeated one
    /// counts with its first value ([`query_pairs`]).
    pub(crate) fn parse(
        query: Option<&str>,
        max_selector_len: usize,
    ) -> Result<ReadParams, ApiError> {
        let mut p = ReadParams::default();
        for (k, v) in query_pairs(query) {
            match &*k {
                "watch" => p.watch = parse_bool("watch", &v)?,
                "resourceVersion" => {
                    p.resource_version = ResourceVersion::parse(&v)?;
                    p.resource_version_given = !v.is_empty();
                }
                "resourceVersionMatch" => p.rv_match_text = v.into_owned(),
                "fieldSelector" => p.field_selector = v.into_owned(),
                "labelSelector" => p.label_selector = v.into_owned(),
                "shardSelector" => p.shard_selector = v.into_owned(),
                "allowWatchBookmarks" => p.allow_bookmarks = parse_bool("allowWatchBookmarks", &v)?,
                "sendInitialEvents" => {
                    p.send_initial_events = Some(parse_bool("sendInitialEvents", &v)?)
                }
                "timeoutSeconds" => {
                    let s: u64 = v.parse().map_err(|_| {
                        ApiError::bad_request(format!(
                            "invalid timeoutSeconds \"{v}\": expected a non-negative integer"
                        ))
                    })?;
                    p.timeout = (s > 0).then(|| Duration::from_secs(s));
                }
                "limit" => {
                    let n: i64 = v.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid limit \"{v}\": expected an integer"))
                    })?;
                    p.limit = (n > 0).then_some(n as usize);
                }
                "continue" if !v.is_empty() => p.continue_token = Some(v.into_owned()),
                _ => {}
            }
        }
        for (name, sel) in [
            ("fieldSelector", &p.field_selector),
            ("labelSelector", &p.label_selector),
        ] {
            if sel.len() > max_selector_len {
                return Err(ApiError::bad_request(format!(
                    "{name} is {} bytes long; the limit is {max_selector_len}",
                    sel.len()
                )));
            }
        }
        p.validate()?;
        Ok(p)
    }

    /// Upstream's `ValidateListOptions` (apimachinery's internalversion validation): every broken
    /// rule is a cause naming its parameter, answered 422 Invalid as upstream answers.
    fn validate(&mut self) -> Result<(), ApiError> {
        const FORBIDDEN: &str = "FieldValueForbidden";
        let mut errs: Vec<(&'static str, &'static str, String)> = Vec::new();
        fn forbid(
            errs: &mut Vec<(&'static str, &'static str, String)>,
            field: &'static str,
            msg: &str,
        ) {
            errs.push((FORBIDDEN, field, msg.to_owned()));
        }
        let m = self.rv_match_text.as_str();
        let continues = self.continue_token.is_some();
        if self.watch {
            if self.send_initial_events.is_some() && m != "NotOlderThan" {
                forbid(
                    &mut errs,
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                );
            }
            if self.send_initial_events == Some(true) && !self.allow_bookmarks {
                forbid(
                    &mut errs,
                    "allowWatchBookmarks",
                    "sendInitialEvents requires setting allowWatchBookmarks to true",
                );
            }
            if !m.is_empty() {
                if self.send_initial_events.is_none() {
                    forbid(
                        &mut errs,
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    );
                }
                if continues {
                    forbid(
                        &mut errs,
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    );
                }
                if m != "NotOlderThan" {
                    errs.push((
                        "FieldValueNotSupported",
                        "resourceVersionMatch",
                        format!("Unsupported value: \"{m}\": supported values: \"NotOlderThan\""),
                    ));
                }
            }
        } else {
            if !m.is_empty() {
                if !self.resource_version_given {
                    forbid(
                        &mut errs,
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    );
                }
                if continues {
                    forbid(
                        &mut errs,
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    );
                }
                if m != "NotOlderThan" && m != "Exact" {
                    errs.push((
                        "FieldValueNotSupported",
                        "resourceVersionMatch",
                        format!(
                            "Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\", \"\" (expected NotOlderThan or Exact)"
                        ),
                    ));
                }
                if m == "Exact" && self.resource_version == ResourceVersion::Any {
                    forbid(
                        &mut errs,
                        "resourceVersionMatch",
                        "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                    );
                }
            }
            if self.send_initial_events.is_some() {
                forbid(
                    &mut errs,
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                );
            }
        }
        if !errs.is_empty() {
            let causes = errs
                .into_iter()
                .map(|(reason, field, msg)| {
                    let msg = if reason == FORBIDDEN {
                        format!("Forbidden: {msg}")
                    } else {
                        msg
                    };
                    (reason, field.to_owned(), msg)
                })
                .collect();
            return Err(ApiError::invalid("ListOptions.meta.k8s.io", "", causes));
        }
        self.rv_match = match m {
            "" => None,
            m => Some(m.parse()?),
        };
        Ok(())
    }

    /// Restricts a watch to one object, as a watch on an object's own path is: the collection with
    /// an exact `metadata.name` term added to the field selector (a term, not selector text, so
    /// any name works, `=` and `,` included).
    pub(crate) fn watch_one(&mut self, name: &str) {
        self.name = Some(name.to_owned());
    }

    fn selection(&self, namespace: Option<&str>) -> Result<Selection, ApiError> {
        let mut s = Selection::parse(namespace, &self.field_selector, &self.label_selector)?;
        if !self.shard_selector.is_empty() {
            s = s.with_shard(&self.shard_selector)?;
        }
        if let Some(name) = &self.name {
            let path = FieldPath::parse("metadata.name").map_err(ApiError::bad_request)?;
            s.fields = s.fields.and_equals(path, name.clone());
        }
        Ok(s)
    }

    /// The LIST options.
    pub(crate) fn list_options(&self, namespace: Option<&str>) -> Result<ListOptions, ApiError> {
        Ok(ListOptions {
            selection: self.selection(namespace)?,
            resource_version: self.resource_version,
            rv_match: self.rv_match,
            limit: self.limit,
            continue_token: self.continue_token.clone(),
        })
    }

    /// The WATCH options.
    pub(crate) fn watch_options(&self, namespace: Option<&str>) -> Result<WatchOptions, ApiError> {
        Ok(WatchOptions {
            selection: self.selection(namespace)?,
            resource_version: self.resource_version,
            send_initial_events: self.send_initial_events,
            allow_bookmarks: self.allow_bookmarks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let p = ReadParams::parse(
            Some("watch=True&resourceVersion=5&allowWatchBookmarks=1&timeoutSeconds=30&fieldSelector=spec.nodeName%3Dn1&limit=0"),
            100,
        )
        .unwrap();
        assert!(p.watch && p.allow_bookmarks);
        assert_eq!(p.resource_version, ResourceVersion::At(5));
        assert_eq!(p.timeout, Some(Duration::from_secs(30)));
        assert_eq!(p.field_selector, "spec.nodeName=n1");
        assert_eq!(p.limit, None);
        let bad = |q: &str| ReadParams::parse(Some(q), 10).unwrap_err().status_json();
        let text = |q: &str| String::from_utf8(bad(q).to_vec()).unwrap();
        assert!(text("watch=maybe").contains("invalid value \\\"maybe\\\" for watch"));
        assert!(text("resourceVersion=abc").contains("invalid resource version"));
        assert!(text("limit=x").contains("invalid limit"));
        assert!(text("sendInitialEvents=true").contains("forbidden for list"));
        assert!(
            text("watch=1&sendInitialEvents=true&allowWatchBookmarks=1").contains("NotOlderThan")
        );
        assert!(
            text("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
                .contains("allowWatchBookmarks")
        );
        assert!(
            text("watch=1&resourceVersionMatch=NotOlderThan").contains("unless sendInitialEvents")
        );
        assert!(text("labelSelector=aaaaaaaaaaaaaaa").contains("the limit is 10"));
    }

    #[test]
    fn a_repeated_parameter_counts_with_its_first_value() {
        // Issue 20, item 13: `?watch=1&watch=0` was authorized as a watch and served as a list.
        for (q, watch) in [
            ("watch=1&watch=0", true),
            ("watch=0&watch=1", false),
            ("w%61tch=1&watch=0", true),
            ("watch=true", true),
            ("watch=yes", false),
            ("x=1", false),
        ] {
            assert_eq!(is_watch(Some(q)), watch, "{q}");
        }
        let p = ReadParams::parse(Some("watch=1&watch=0&limit=5&limit=x"), 100).unwrap();
        assert!(p.watch);
        assert_eq!(p.limit, Some(5));
        let p = ReadParams::parse(Some("fieldSelector=a%3D1&fieldSelector=b%3D2"), 100).unwrap();
        assert_eq!(p.field_selector, "a=1");
    }

    // Fuzzing target (tests/core/fuzz.rs has the others): every query string comes from a client.
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { failure_persistence: None, ..Default::default() })]

        #[test]
        fn any_query_parses_or_is_a_status(
            raw in "\\PC{0,80}",
            pairs in proptest::collection::vec((
                "watch|resourceVersion|resourceVersionMatch|fieldSelector|labelSelector|allowWatchBookmarks|sendInitialEvents|timeoutSeconds|limit|continue|x",
                "[-0-9a-zA-Z=!,()%. ]{0,25}|[0-9]{15,25}",
            ), 0..6),
        ) {
            let structured: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            for q in [raw, structured.join("&")] {
                match ReadParams::parse(Some(&q), 4096) {
                    Ok(mut p) => {
                        p.watch_one("a=b,c");
                        let _ = p.list_options(Some("ns"));
                        let _ = p.watch_options(None);
                    }
                    Err(e) => {
                        proptest::prop_assert!(matches!(e.code(), 400 | 422), "{q}: {}", e.code());
                        serde_json::from_slice::<serde_json::Value>(&e.status_json()).unwrap();
                    }
                }
            }
        }
    }

    #[test]
    fn query_corpus() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz-corpus/query");
        for f in std::fs::read_dir(dir).unwrap() {
            let q = std::fs::read_to_string(f.unwrap().path()).unwrap();
            if let Err(e) = ReadParams::parse(Some(&q), 4096) {
                assert!(matches!(e.code(), 400 | 422), "{q}");
            }
        }
    }

    #[test]
    fn invalid_option_combinations_are_422_naming_the_parameter() {
        let invalid = |q: &str| {
            let e = ReadParams::parse(Some(q), 100).unwrap_err();
            let v: serde_json::Value = serde_json::from_slice(&e.status_json()).unwrap();
            assert_eq!(
                (e.code(), v["reason"].as_str()),
                (422, Some("Invalid")),
                "{q}: {v}"
            );
            v
        };
        let v = invalid("continue=abc&resourceVersionMatch=NotOlderThan&resourceVersion=1");
        assert_eq!(v["details"]["causes"][0]["field"], "resourceVersionMatch");
        assert_eq!(v["details"]["causes"][0]["reason"], "FieldValueForbidden");
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .starts_with("ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"),
            "{v}"
        );
        let v = invalid("watch=1&continue=abc&resourceVersionMatch=NotOlderThan");
        assert_eq!(v["details"]["causes"].as_array().unwrap().len(), 2, "{v}");
        let v = invalid("resourceVersionMatch=Sometimes&resourceVersion=1");
        assert_eq!(
            v["details"]["causes"][0]["reason"],
            "FieldValueNotSupported"
        );
        invalid("resourceVersionMatch=Exact");
        invalid("resourceVersionMatch=Exact&resourceVersion=0");
        invalid("sendInitialEvents=false");
        invalid("watch=1&resourceVersionMatch=NotOlderThan");
        invalid("watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&allowWatchBookmarks=1");
        // Valid combinations still parse.
        for ok in [
            "resourceVersionMatch=Exact&resourceVersion=5",
            "resourceVersionMatch=NotOlderThan&resourceVersion=0",
            "continue=abc",
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=1",
        ] {
            assert!(ReadParams::parse(Some(ok), 100).is_ok(), "{ok}");
        }
    }
}

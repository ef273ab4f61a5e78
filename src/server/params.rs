//! Query parameters of LIST, GET and WATCH, parsed into typed options with upstream's validation.

use std::time::Duration;

use crate::cache::{ListOptions, WatchOptions};
use crate::model::{FieldPath, ResourceVersion, RvMatch, Selection};
use crate::server::status::ApiError;

/// Parsed query of a read request.
#[derive(Debug, Default)]
pub struct ReadParams {
    pub watch: bool,
    pub resource_version: ResourceVersion,
    pub rv_match: Option<RvMatch>,
    pub field_selector: String,
    pub label_selector: String,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout: Option<Duration>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    /// The object a watch on its own path is restricted to.
    pub name: Option<String>,
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
    /// Parses a query string. Unknown parameters are ignored, as upstream does.
    pub fn parse(query: Option<&str>, max_selector_len: usize) -> Result<ReadParams, ApiError> {
        let mut p = ReadParams::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "watch" => p.watch = parse_bool("watch", &v)?,
                "resourceVersion" => p.resource_version = ResourceVersion::parse(&v)?,
                "resourceVersionMatch" if !v.is_empty() => p.rv_match = Some(v.parse()?),
                "fieldSelector" => p.field_selector = v.into_owned(),
                "labelSelector" => p.label_selector = v.into_owned(),
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

    /// Upstream's `ValidateListOptions` rules for WatchList parameters.
    fn validate(&self) -> Result<(), ApiError> {
        if let Some(send) = self.send_initial_events {
            if !self.watch {
                return Err(ApiError::bad_request(
                    "sendInitialEvents is forbidden for list",
                ));
            }
            if self.rv_match != Some(RvMatch::NotOlderThan) {
                return Err(ApiError::bad_request(
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if send && !self.allow_bookmarks {
                return Err(ApiError::bad_request(
                    "sendInitialEvents requires setting allowWatchBookmarks to true",
                ));
            }
        } else if self.watch && self.rv_match.is_some() {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        Ok(())
    }

    /// Restricts a watch to one object, as a watch on an object's own path is: the collection with
    /// an exact `metadata.name` term added to the field selector (a term, not selector text, so
    /// any name works, `=` and `,` included).
    pub fn watch_one(&mut self, name: &str) {
        self.name = Some(name.to_owned());
    }

    fn selection(&self, namespace: Option<&str>) -> Result<Selection, ApiError> {
        let mut s = Selection::parse(namespace, &self.field_selector, &self.label_selector)?;
        if let Some(name) = &self.name {
            let path = FieldPath::parse("metadata.name").map_err(ApiError::bad_request)?;
            s.fields = s.fields.and_equals(path, name.clone());
        }
        Ok(s)
    }

    /// The LIST options.
    pub fn list_options(&self, namespace: Option<&str>) -> Result<ListOptions, ApiError> {
        Ok(ListOptions {
            selection: self.selection(namespace)?,
            resource_version: self.resource_version,
            rv_match: self.rv_match,
            limit: self.limit,
            continue_token: self.continue_token.clone(),
        })
    }

    /// The WATCH options.
    pub fn watch_options(&self, namespace: Option<&str>) -> Result<WatchOptions, ApiError> {
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
}

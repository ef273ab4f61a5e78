//! An object read at another served version of its CRD than the one its cache holds it at: the
//! same JSON with its top-level `apiVersion` changed, as apiextensions' nop converter
//! (`conversion: None`) converts it (`nopConverter.Convert` sets the group-version-kind and
//! nothing else).
//!
//! The cache's JSON of a custom resource has each top-level member once (decoding keeps the last
//! of duplicates) and no whitespace between members; as kube-apiserver writes a custom resource
//! (a map, its keys sorted), `apiVersion` usually comes first, which is read without parsing the
//! rest. A bookmark's object (kind first) and any other order are parsed.

use bytes::Bytes;

use crate::model::members::{find, members};

/// The start of a JSON object whose first member is `apiVersion`, up to its value's quote.
const LEADING: &[u8] = br#"{"apiVersion":""#;

/// `json` (an object's, or a bookmark's) with its top-level `apiVersion` set to `api_version`:
/// the same bytes when it already is, or when it has none (never expected: the cache stores none
/// without one) or is not a JSON object.
pub(crate) fn json_at_version(json: &Bytes, api_version: &str) -> Bytes {
    match api_version_span(json) {
        Some((at, end)) if json.get(at..end) != Some(quoted(api_version).as_bytes()) => {
            let q = quoted(api_version);
            let mut out = Vec::with_capacity(json.len() + q.len());
            out.extend_from_slice(json.get(..at).unwrap_or_default());
            out.extend_from_slice(q.as_bytes());
            out.extend_from_slice(json.get(end..).unwrap_or_default());
            Bytes::from(out)
        }
        _ => json.clone(),
    }
}

/// A version as a JSON string (a Kubernetes version holds nothing JSON escapes).
fn quoted(api_version: &str) -> String {
    serde_json::to_string(api_version).unwrap_or_default()
}

/// Where the top-level `apiVersion`'s value is: from its opening quote to just past its closing
/// one.
fn api_version_span(json: &[u8]) -> Option<(usize, usize)> {
    if let Some(rest) = json.strip_prefix(LEADING) {
        // Up to the closing quote, unless the value escapes something (then parsed).
        let close = rest.iter().position(|b| *b == b'"' || *b == b'\\')?;
        if rest.get(close) == Some(&b'"') {
            let at = LEADING.len() - 1;
            return Some((at, LEADING.len() + close + 1));
        }
    }
    let text = std::str::from_utf8(json).ok()?;
    let top = members(text).ok()?;
    let raw = find(&top, "apiVersion")?.get();
    let at = (raw.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    Some((at, at + raw.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(json: &str, v: &str) -> String {
        String::from_utf8(json_at_version(&Bytes::from(json.to_owned()), v).to_vec()).unwrap()
    }

    #[test]
    fn only_the_api_version_changes_wherever_it_is() {
        // Sorted keys, as kube-apiserver writes a custom resource.
        assert_eq!(
            at(
                r#"{"apiVersion":"g.io/v1","kind":"K","metadata":{"name":"a","apiVersion":"x"}}"#,
                "g.io/v1beta1"
            ),
            r#"{"apiVersion":"g.io/v1beta1","kind":"K","metadata":{"name":"a","apiVersion":"x"}}"#
        );
        // A bookmark: kind first.
        assert_eq!(
            at(
                r#"{"kind":"K","apiVersion":"g.io/v1","metadata":{"resourceVersion":"7"}}"#,
                "g.io/v2"
            ),
            r#"{"kind":"K","apiVersion":"g.io/v2","metadata":{"resourceVersion":"7"}}"#
        );
        // An upper-case key sorts before apiVersion; an escaped value is parsed.
        assert_eq!(
            at(r#"{"A":1,"apiVersion":"g.io/v1"}"#, "g.io/v2"),
            r#"{"A":1,"apiVersion":"g.io/v2"}"#
        );
        assert_eq!(
            at(r#"{"apiVersion":"g.io\/v1","kind":"K"}"#, "g.io/v2"),
            r#"{"apiVersion":"g.io/v2","kind":"K"}"#
        );
    }

    #[test]
    fn the_same_bytes_when_nothing_changes() {
        let same = Bytes::from_static(br#"{"apiVersion":"g.io/v1","kind":"K"}"#);
        let out = json_at_version(&same, "g.io/v1");
        assert_eq!(out.as_ptr(), same.as_ptr());
        for odd in [
            &b"{\"kind\":\"K\"}"[..],
            b"[1]",
            b"{\"apiVersion\":\"unterminated",
        ] {
            let b = Bytes::from_static(odd);
            assert_eq!(json_at_version(&b, "g.io/v2"), b);
        }
    }
}

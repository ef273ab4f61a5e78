//! Dotted field paths (`spec.nodeName`) and their extraction from raw JSON without building a DOM.
// Reads outside input (requests or stored values): no panicking access (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A dotted path into an object, as used by field selectors and field indexes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldPath {
    text: Arc<str>,
}

impl FieldPath {
    /// Parses `a.b.c`.
    ///
    /// # Errors
    /// A description of the problem when the path is empty, has an empty segment or contains characters
    /// outside `[A-Za-z0-9_-]`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("field path is empty".into());
        }
        for (i, seg) in text.split('.').enumerate() {
            if seg.is_empty() {
                return Err(format!("field path \"{text}\": segment {} is empty", i + 1));
            }
            if let Some(bad) = seg
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
            {
                return Err(format!(
                    "field path \"{text}\": unexpected character {bad:?}"
                ));
            }
        }
        Ok(FieldPath { text: text.into() })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The path's segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.text.split('.')
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Reads the value at `path` from a JSON document, as a field selector sees it: strings as they are,
/// numbers and booleans in their JSON text, and a missing field or `null` as the empty string (so that
/// `spec.nodeName=` selects unscheduled pods, as upstream). Objects and arrays have no field value.
pub(crate) fn extract(doc: &RawValue, path: &FieldPath) -> Option<String> {
    let mut cur: &RawValue = doc;
    for seg in path.segments() {
        match child(cur, seg) {
            Some(next) => cur = next,
            None => return Some(String::new()),
        }
    }
    scalar_text(cur)
}

/// The text of a scalar JSON value; `None` for objects and arrays.
pub(crate) fn scalar_text(raw: &RawValue) -> Option<String> {
    let text = raw.get().trim();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(text).ok(),
        Some(b'{') | Some(b'[') | None => None,
        _ if text == "null" => Some(String::new()),
        _ => Some(text.to_owned()),
    }
}

/// The member `key` of a JSON object, skipping the other members without allocating. `None` when
/// `doc` is not an object or has no such member.
pub(crate) fn child<'a>(doc: &'a RawValue, key: &str) -> Option<&'a RawValue> {
    if !doc.get().trim_start().starts_with('{') {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(doc.get());
    de::Deserializer::deserialize_map(&mut de, MemberFinder { key })
        .ok()
        .flatten()
}

struct MemberFinder<'k> {
    key: &'k str,
}

impl<'de> Visitor<'de> for MemberFinder<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        // Keep scanning after a hit: with duplicate keys the last one wins, as in Go's encoding/json.
        while let Some(k) = map.next_key_seed(KeySeed)? {
            if k == self.key {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Deserializes a map key borrowed when possible (keys without escapes).
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Cow<'de, str>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_owned()))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn extracts_scalars_along_a_path() {
        let doc = raw(
            r#"{"spec":{"nodeName":"n1","replicas":3,"paused":false,"x":null,"o":{}},"a\"b":1}"#,
        );
        let p = |s| FieldPath::parse(s).unwrap();
        assert_eq!(extract(&doc, &p("spec.nodeName")).as_deref(), Some("n1"));
        assert_eq!(extract(&doc, &p("spec.replicas")).as_deref(), Some("3"));
        assert_eq!(extract(&doc, &p("spec.paused")).as_deref(), Some("false"));
        assert_eq!(extract(&doc, &p("spec.x")).as_deref(), Some(""));
        assert_eq!(extract(&doc, &p("spec.missing")).as_deref(), Some(""));
        assert_eq!(
            extract(&doc, &p("spec.nodeName.deeper")).as_deref(),
            Some("")
        );
        assert_eq!(extract(&doc, &p("spec.o")), None);
    }

    #[test]
    fn last_duplicate_key_wins() {
        let doc = raw(r#"{"a":"1","a":"2"}"#);
        assert_eq!(
            extract(&doc, &FieldPath::parse("a").unwrap()).as_deref(),
            Some("2")
        );
    }

    #[test]
    fn rejects_bad_paths() {
        assert!(FieldPath::parse("").unwrap_err().contains("empty"));
        assert!(FieldPath::parse("a..b").unwrap_err().contains("segment 2"));
        assert!(FieldPath::parse("a b").unwrap_err().contains("' '"));
    }
}

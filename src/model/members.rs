//! A JSON object's members in order, values left raw (no DOM): how ingest reads objects
//! (`object.rs`) and how stored CRDs are rewritten (`crd_storage.rs`). Later duplicates replace
//! earlier ones, in linear time.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The members of an object: (key, raw value), in order.
pub(crate) type Members<'a> = Vec<(Cow<'a, str>, &'a RawValue)>;

/// The value of a member (the last of that name).
pub(crate) fn find<'a>(m: &Members<'a>, key: &str) -> Option<&'a RawValue> {
    m.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// The members of a JSON object, in order, values left raw. Later duplicates replace earlier ones.
pub(crate) fn members(text: &str) -> Result<Members<'_>, serde_json::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Members<'de>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out: Members<'de> = Vec::new();
            while let Some(k) = map.next_key::<Cow<'de, str>>()? {
                let v: &'de RawValue = map.next_value()?;
                out.push((k, v));
            }
            Ok(dedup_last_wins(out))
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let m = de::Deserializer::deserialize_map(&mut de, V)?;
    de.end()?;
    Ok(m)
}

/// Drops every member that a later member of the same name replaces, keeping the survivors in the
/// position of their last occurrence. Linear: a body of 100 000 members must not cost 100 000²
/// comparisons (issue 9, item 1); small objects, the common case, skip the hash map.
fn dedup_last_wins(mut m: Members<'_>) -> Members<'_> {
    const SMALL: usize = 16;
    if m.len() <= SMALL {
        let mut i = 0;
        while let Some((key, _)) = m.get(i) {
            let replaced = m.iter().skip(i + 1).any(|(k, _)| k == key);
            if replaced {
                m.remove(i);
            } else {
                i += 1;
            }
        }
        return m;
    }
    let keep: Vec<bool> = {
        let mut last: hashbrown::HashMap<&str, usize> = hashbrown::HashMap::with_capacity(m.len());
        for (i, (k, _)) in m.iter().enumerate() {
            last.insert(k, i);
        }
        if last.len() == m.len() {
            Vec::new()
        } else {
            m.iter()
                .enumerate()
                .map(|(i, (k, _))| last.get(&**k) == Some(&i))
                .collect()
        }
    };
    if keep.is_empty() {
        return m;
    }
    let mut flags = keep.into_iter();
    m.retain(|_| flags.next().unwrap_or(false));
    m
}

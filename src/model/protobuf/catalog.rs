//! Lookups over the generated tables: a message by index, by kind, `ObjectMeta`, and a field by
//! its JSON name. (`schema.rs` only describes a message's shape, so the generated `tables.rs`
//! depends on it and not the other way round.)

use super::schema::{Field, Kind, Message};
use super::tables::{KINDS, MESSAGES};

impl Message {
    /// The field with wire number `num`.
    #[inline]
    pub(crate) fn field(&self, num: u32) -> Option<&'static Field>
    where
        Self: 'static,
    {
        match self.by_num.get(num as usize) {
            Some(&i) if i > 0 => Some(&self.fields[i as usize - 1]),
            _ => None,
        }
    }

    /// The field that JSON calls `name`, looking through inline structs: the chain of fields from
    /// this message down to it.
    pub(crate) fn json_field(
        &'static self,
        name: &str,
    ) -> Option<(&'static Field, Option<&'static Field>)> {
        for f in self.fields {
            if f.json == name {
                return Some((f, None));
            }
            if f.json.is_empty()
                && let Kind::Msg(i) = f.kind
                && let Some((inner, _)) = message(i).json_field(name)
            {
                return Some((inner, Some(f)));
            }
        }
        None
    }
}

/// A message by index.
pub fn message(i: u16) -> &'static Message {
    &MESSAGES[i as usize]
}

/// `metav1.ObjectMeta`, every kind's `metadata` (custom resources' too): found by name once, so
/// this does not depend on the generated table's order. The generator always emits it; were it
/// missing, an empty message (no fields) stands in. (Read by field validation and OpenAPI,
/// which only the server has.)
pub fn object_meta() -> &'static Message {
    static INDEX: std::sync::OnceLock<Option<u16>> = std::sync::OnceLock::new();
    static EMPTY: Message = Message {
        name: "apimachinery/pkg/apis/meta/v1.ObjectMeta",
        by_num: &[],
        fields: &[],
    };
    let index = INDEX.get_or_init(|| {
        MESSAGES
            .iter()
            .position(|m| m.name == "apimachinery/pkg/apis/meta/v1.ObjectMeta")
            .and_then(|i| u16::try_from(i).ok())
    });
    index.map_or(&EMPTY, message)
}

/// The message of a top-level built-in type, by `apiVersion` and `kind`.
pub fn kind_message(api_version: &str, kind: &str) -> Option<&'static Message> {
    let kinds = &KINDS;
    kinds
        .binary_search_by(|(av, k, _)| (*av, *k).cmp(&(api_version, kind)))
        .ok()
        .map(|i| message(kinds[i].2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_sorted_and_found() {
        let kinds = &KINDS;
        assert!(
            kinds
                .windows(2)
                .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1))
        );
        assert_eq!(kind_message("v1", "Pod").unwrap().name, "api/core/v1.Pod");
        assert_eq!(
            kind_message("discovery.k8s.io/v1", "EndpointSlice")
                .unwrap()
                .name,
            "api/discovery/v1.EndpointSlice"
        );
        assert!(kind_message("v1", "Widget").is_none());
    }

    #[test]
    fn inline_fields_are_found_through_their_struct() {
        let probe = MESSAGES
            .iter()
            .find(|m| m.name == "api/core/v1.Probe")
            .unwrap();
        let (f, via) = probe.json_field("httpGet").unwrap();
        assert_eq!((f.json, via.map(|v| v.num)), ("httpGet", Some(1)));
        assert!(probe.json_field("handler").is_none());
    }
}

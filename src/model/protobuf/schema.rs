//! The shape of each Kubernetes protobuf message, as the generated `tables.rs` describes it: for every
//! field its number, its JSON name, what it holds and when encoding/json leaves it out.

/// What one field holds (for maps and repeated fields: what each element holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `string` (and every named string type).
    Str,
    /// `[]byte`: base64 in JSON.
    Bytes,
    /// `bool`.
    Bool,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// A nested message: the index into [`MESSAGES`](super::tables::MESSAGES).
    Msg(u16),
    /// `metav1.Time`: a Timestamp; RFC 3339 with seconds, `null` when zero.
    Time,
    /// `metav1.MicroTime`: a Timestamp; RFC 3339 with microseconds, `null` when zero.
    MicroTime,
    /// `resource.Quantity`: its canonical string.
    Quantity,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `runtime.RawExtension` and `metav1.FieldsV1`: JSON bytes written as they are.
    Raw,
}

/// How many values a field holds and how Go declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Card {
    /// A value field: absent means Go's zero value.
    One,
    /// A pointer: absent means nil.
    Ptr,
    /// A slice: absent means nil.
    Rep,
    /// A map with keys of this kind: absent means nil.
    Map(Key),
}

/// The key kind of a map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    /// Every Kubernetes map is keyed by a string type.
    Str,
}

/// When encoding/json leaves a field out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Omit {
    /// Always written (`null` for nil pointers, slices and maps).
    Never,
    /// `omitempty`: false, 0, "", nil, and empty slices and maps are left out; structs never are.
    Empty,
    /// `omitzero` (with or without `omitempty`): the zero value is left out, structs included.
    Zero,
}

/// One field of a message. An empty `json` name means the field is a struct embedded `inline`:
/// its fields are written into the enclosing JSON object.
#[derive(Debug)]
pub(crate) struct Field {
    pub num: u32,
    pub json: &'static str,
    pub kind: Kind,
    pub card: Card,
    pub omit: Omit,
}

/// One message: its Go name (for errors) and its fields in Go declaration order, which is the
/// order encoding/json writes them in.
#[derive(Debug)]
pub(crate) struct Message {
    pub name: &'static str,
    /// Field number → 1 + index into `fields` (0: not a field of this message).
    pub by_num: &'static [u8],
    pub fields: &'static [Field],
}

impl Message {
    /// The field with wire number `num`.
    #[inline]
    pub fn field(&self, num: u32) -> Option<&'static Field>
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
    pub fn json_field(
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
pub(crate) fn message(i: u16) -> &'static Message {
    &super::tables::MESSAGES[i as usize]
}

/// `metav1.ObjectMeta`, every kind's `metadata` (custom resources' too): found by name once, so
/// this does not depend on the generated table's order. The generator always emits it; were it
/// missing, an empty message (no fields) stands in. (Read by field validation and OpenAPI,
/// which only the server has.)
#[cfg(feature = "server")]
pub(crate) fn object_meta() -> &'static Message {
    static INDEX: std::sync::OnceLock<Option<u16>> = std::sync::OnceLock::new();
    static EMPTY: Message = Message {
        name: "apimachinery/pkg/apis/meta/v1.ObjectMeta",
        by_num: &[],
        fields: &[],
    };
    let index = INDEX.get_or_init(|| {
        super::tables::MESSAGES
            .iter()
            .position(|m| m.name == "apimachinery/pkg/apis/meta/v1.ObjectMeta")
            .and_then(|i| u16::try_from(i).ok())
    });
    index.map_or(&EMPTY, message)
}

/// The message of a top-level built-in type, by `apiVersion` and `kind`.
pub(crate) fn kind_message(api_version: &str, kind: &str) -> Option<&'static Message> {
    let kinds = &super::tables::KINDS;
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
        let kinds = &super::super::tables::KINDS;
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
        let probe = super::super::tables::MESSAGES
            .iter()
            .find(|m| m.name == "api/core/v1.Probe")
            .unwrap();
        let (f, via) = probe.json_field("httpGet").unwrap();
        assert_eq!((f.json, via.map(|v| v.num)), ("httpGet", Some(1)));
        assert!(probe.json_field("handler").is_none());
    }
}

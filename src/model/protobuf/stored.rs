//! Kinds that kube-apiserver 1.35 stores as another type than the one served: an events.k8s.io/v1
//! Event is stored as a core v1 Event (both APIs serve the same objects), and a
//! storage.k8s.io/v1 VolumeAttributesClass as its v1beta1 (the storage version still). Each is
//! read by renaming the envelope and renumbering the message's top-level fields to the served
//! message's: the fields are matched by JSON name, through upstream's renames (`involvedObject`
//! is `regarding`...), and their nested messages are the same (a unit test checks every pair).
//! The renumbered fields are written in the served message's field order, as gogo writes them,
//! so the result is byte for byte what kube-apiserver serves.
//!
//! (CustomResourceDefinitions, stored as JSON in v1beta1, are `model/crd_storage.rs`.)

use std::borrow::Cow;

use super::catalog::kind_message;
use super::encode::envelope;
use super::schema::Message;
use super::wire::Fields;

/// A served kind stored as another.
pub(crate) struct StorageVersion {
    /// The served `apiVersion` and `kind`.
    pub served: (&'static str, &'static str),
    /// What kube-apiserver stores.
    pub stored: (&'static str, &'static str),
    /// Fields of the served message named differently in the stored one: (served, stored).
    pub renames: &'static [(&'static str, &'static str)],
    /// Whether writes are stored as the stored type too (events.k8s.io: the core Event cache on
    /// the same prefix reads only core Events; a VolumeAttributesClass is written in v1, which
    /// kube-apiserver reads as well).
    pub write_stored: bool,
}

/// Every such kind.
pub(crate) const STORAGE_VERSIONS: &[StorageVersion] = &[
    // pkg/apis/events/v1/conversion.go: Convert_v1_Event_To_core_Event and back.
    StorageVersion {
        served: ("events.k8s.io/v1", "Event"),
        stored: ("v1", "Event"),
        renames: &[
            ("regarding", "involvedObject"),
            ("note", "message"),
            ("deprecatedSource", "source"),
            ("deprecatedFirstTimestamp", "firstTimestamp"),
            ("deprecatedLastTimestamp", "lastTimestamp"),
            ("deprecatedCount", "count"),
            ("reportingController", "reportingComponent"),
        ],
        write_stored: true,
    },
    StorageVersion {
        served: ("storage.k8s.io/v1", "VolumeAttributesClass"),
        stored: ("storage.k8s.io/v1beta1", "VolumeAttributesClass"),
        renames: &[],
        write_stored: false,
    },
];

/// Built-in kinds kube-apiserver stores as JSON, not protobuf: kube-aggregator's and
/// apiextensions-apiserver's storage media type is JSON. Writes keep them JSON too, so that
/// kube-apiserver reads them as it wrote them (it serves them in protobuf all the same).
pub(crate) const JSON_STORED: &[(&str, &str)] = &[
    ("apiregistration.k8s.io/v1", "APIService"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
];

/// Whether a served kind may be stored as another type, or as JSON read through its Go type.
pub(crate) fn stored_otherwise(served: (&str, &str)) -> bool {
    JSON_STORED.contains(&served) || STORAGE_VERSIONS.iter().any(|r| r.served == served)
}

/// The rule reading values stored as (`api_version`, `kind`) for a resource served as
/// `served`, if there is one.
pub(crate) fn rule(served: (&str, &str), stored: (&str, &str)) -> Option<&'static StorageVersion> {
    STORAGE_VERSIONS
        .iter()
        .find(|r| r.served == served && r.stored == stored)
}

/// The rule writing objects of a served kind as another, if there is one.
pub(crate) fn write_rule(served: (&str, &str)) -> Option<&'static StorageVersion> {
    STORAGE_VERSIONS
        .iter()
        .find(|r| r.served == served && r.write_stored)
}

fn messages(
    a: (&str, &str),
    b: (&str, &str),
) -> Result<(&'static Message, &'static Message), String> {
    let m = |(av, k): (&str, &str)| {
        kind_message(av, k).ok_or_else(|| format!("{av} {k} has no protobuf message"))
    };
    Ok((m(a)?, m(b)?))
}

/// `raw` (a message of `from`) as a message of `to`: each field renumbered by JSON name through
/// `renames` (pairs of (`to` name, `from` name) when `forward`, reversed otherwise), fields `to`
/// lacks dropped (as Go drops unknown fields), in `to`'s field order.
fn renumber(
    from: &'static Message,
    to: &'static Message,
    renames: &[(&str, &str)],
    forward: bool,
    raw: &[u8],
) -> Result<Vec<u8>, String> {
    let mut fields: Vec<(u32, &[u8])> = Vec::new();
    let mut start = 0;
    let mut it = Fields::new(raw);
    while let Some(e) = it.next() {
        let (num, _) = e.map_err(|e| format!("{}: {e}", from.name))?;
        let end = it.pos();
        let bytes = &raw[start..end];
        start = end;
        let Some(f) = from.field(num) else { continue };
        let name = renames
            .iter()
            .find_map(|(a, b)| {
                let (served, stored) = if forward { (a, b) } else { (b, a) };
                (*stored == f.json).then_some(*served)
            })
            .unwrap_or(f.json);
        let Some((g, _)) = to.json_field(name) else {
            continue;
        };
        fields.push((g.num, bytes));
    }
    // Stable: a repeated field keeps its elements' order.
    fields.sort_by_key(|(n, _)| *n);
    let mut out = Vec::with_capacity(raw.len());
    for (num, bytes) in fields {
        // The field's bytes with its old tag replaced by the new one (same wire type).
        let mut pos = 0;
        let tag =
            super::wire::varint(bytes, &mut pos).map_err(|e| format!("{}: {e}", from.name))?;
        let wire_type = tag & 7;
        let mut new_tag = (u64::from(num) << 3) | wire_type;
        while new_tag >= 0x80 {
            out.push((new_tag as u8) | 0x80);
            new_tag >>= 7;
        }
        out.push(new_tag as u8);
        out.extend_from_slice(&bytes[pos..]);
    }
    Ok(out)
}

/// A stored envelope read as the served kind: `Ok(None)` when no rule covers it.
///
/// # Errors
/// Malformed protobuf.
pub(crate) fn read_as_served(
    served: (&str, &str),
    stored: (&str, &str),
    raw: &[u8],
) -> Result<Option<Vec<u8>>, String> {
    let Some(r) = rule(served, stored) else {
        return Ok(None);
    };
    let (from, to) = messages(r.stored, r.served)?;
    let raw = if r.renames.is_empty() && std::ptr::eq(from, to) {
        Cow::Borrowed(raw)
    } else {
        Cow::Owned(renumber(from, to, r.renames, true, raw)?)
    };
    Ok(Some(envelope(r.served.0, r.served.1, &raw)))
}

/// A served envelope as kube-apiserver stores it, when a rule says to write it as another type:
/// `Ok(None)` otherwise.
///
/// # Errors
/// Malformed protobuf.
pub(crate) fn write_as_stored(served: (&str, &str), raw: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let Some(r) = write_rule(served) else {
        return Ok(None);
    };
    let (from, to) = messages(r.served, r.stored)?;
    let raw = renumber(from, to, r.renames, false, raw)?;
    Ok(Some(envelope(r.stored.0, r.stored.1, &raw)))
}

#[cfg(test)]
mod tests {
    use super::super::catalog::message;
    use super::super::schema::Kind;
    use super::*;

    /// Two messages hold the same values: same numbers, kinds and cardinalities, nested messages
    /// alike too.
    fn alike(a: &'static Message, b: &'static Message, depth: u32) -> Result<(), String> {
        if std::ptr::eq(a, b) || depth > 8 {
            return Ok(());
        }
        if a.fields.len() != b.fields.len() {
            return Err(format!("{} and {} differ in fields", a.name, b.name));
        }
        for (x, y) in a.fields.iter().zip(b.fields) {
            if (x.num, x.json, x.card) != (y.num, y.json, y.card) {
                return Err(format!(
                    "{}.{} and {}.{} differ",
                    a.name, x.json, b.name, y.json
                ));
            }
            match (x.kind, y.kind) {
                (Kind::Msg(i), Kind::Msg(j)) => alike(message(i), message(j), depth + 1)?,
                (k, l) if k == l => {}
                _ => return Err(format!("{}.{}: kinds differ", a.name, x.json)),
            }
        }
        Ok(())
    }

    #[test]
    fn every_renamed_field_holds_the_same_values_in_both_types() {
        for r in STORAGE_VERSIONS {
            let (stored, served) = messages(r.stored, r.served).unwrap();
            // Every served field has its stored counterpart, through the renames.
            for f in served.fields {
                let name = r
                    .renames
                    .iter()
                    .find_map(|(a, b)| (*a == f.json).then_some(*b))
                    .unwrap_or(f.json);
                let (g, _) = stored
                    .json_field(name)
                    .unwrap_or_else(|| panic!("{:?}: {} has no {name}", r.served, stored.name));
                // The same cardinality; omission rules are the served JSON's own (an
                // `omitempty` MicroTime, never left out, and one without it read alike).
                assert_eq!(f.card, g.card, "{:?} {}", r.served, f.json);
                match (f.kind, g.kind) {
                    (Kind::Msg(i), Kind::Msg(j)) => alike(message(i), message(j), 0).unwrap(),
                    (k, l) => assert_eq!(k, l, "{:?} {}", r.served, f.json),
                }
            }
            assert_eq!(served.fields.len(), stored.fields.len(), "{:?}", r.served);
        }
    }

    #[test]
    fn an_event_reads_as_events_k8s_io_and_writes_back_as_a_core_event() {
        let value = super::super::tests::vector("event.etcd.bin");
        let env = super::super::Envelope::parse(&value).unwrap();
        let served = read_as_served(("events.k8s.io/v1", "Event"), ("v1", "Event"), env.raw)
            .unwrap()
            .unwrap();
        let as_served = super::super::Envelope::parse(&served).unwrap();
        assert_eq!(
            (as_served.api_version, as_served.kind),
            ("events.k8s.io/v1", "Event")
        );
        let (json, ..) = as_served.encode_json(7).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(json["regarding"]["kind"], "Pod");
        assert!(json.get("involvedObject").is_none());
        // And back: the very bytes kube-apiserver stored.
        let back = write_as_stored(("events.k8s.io/v1", "Event"), as_served.raw)
            .unwrap()
            .unwrap();
        assert_eq!(back, value);
        assert!(
            read_as_served(("v1", "Pod"), ("v1", "Event"), env.raw)
                .unwrap()
                .is_none()
        );
    }
}

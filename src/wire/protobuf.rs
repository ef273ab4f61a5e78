//! The protobuf forms of what the server writes around objects, byte for byte as kube-apiserver:
//! a `{Kind}List`'s envelope and item heads, and `metav1.Status` (a watch frame's head is the
//! protobuf watch encoder's, in `encoder.rs`). Objects themselves are the cache's
//! shared bytes (`model/protobuf/`), never re-encoded here.

use serde_json::Value as Json;

use crate::model::protobuf::envelope;
use crate::model::protobuf::{MAGIC, nested, put_len, put_varint, tag, varint};

/// `metav1.ListMeta` {selfLink = 1, resourceVersion = 2, continue = 3, remainingItemCount = 4,
/// shardInfo = 5 {selector = 1}} as field 1 of a list.
fn list_meta(out: &mut Vec<u8>, rv: &str, cont: &str, remaining: Option<i64>, shard: Option<&str>) {
    let _ = nested::<()>(out, 1, |out| {
        put_len(out, 1, b"");
        put_len(out, 2, rv.as_bytes());
        put_len(out, 3, cont.as_bytes());
        if let Some(n) = remaining {
            put_varint(out, 4, n as u64);
        }
        if let Some(sel) = shard {
            nested::<()>(out, 5, |out| {
                put_len(out, 1, sel.as_bytes());
                Ok(())
            })?;
        }
        Ok(())
    });
}

/// The envelope around a `{Kind}List` {metadata = 1, items = 2} whose items (each an object's
/// message, of the given lengths) are written by the caller: returns what goes before the first
/// item, and the head of each item is [`item_head`]; [`ENVELOPE_TAIL`] ends the body.
pub(crate) fn list_head(
    api_version: &str,
    list_kind: &str,
    rv: &str,
    cont: &str,
    remaining: Option<i64>,
    shard: Option<&str>,
    item_lens: impl Iterator<Item = usize>,
) -> Vec<u8> {
    let mut meta = Vec::with_capacity(32);
    list_meta(&mut meta, rv, cont, remaining, shard);
    let mut scratch = Vec::with_capacity(8);
    let items: usize = item_lens
        .map(|n| {
            scratch.clear();
            varint(&mut scratch, n as u64);
            1 + scratch.len() + n
        })
        .sum();
    let mut out = Vec::with_capacity(64 + meta.len());
    out.extend_from_slice(MAGIC);
    let _ = nested::<()>(&mut out, 1, |out| {
        put_len(out, 1, api_version.as_bytes());
        put_len(out, 2, list_kind.as_bytes());
        Ok(())
    });
    tag(&mut out, 2, 2);
    varint(&mut out, (meta.len() + items) as u64);
    out.extend_from_slice(&meta);
    out
}

/// The envelope's last two fields, contentEncoding and contentType, both empty.
pub(crate) const ENVELOPE_TAIL: &[u8] = &[0x1a, 0x00, 0x22, 0x00];

/// The head of a list item (field 2 of a `{Kind}List`) of `len` bytes.
pub(crate) fn item_head(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(6);
    tag(&mut out, 2, 2);
    varint(&mut out, len as u64);
    out
}

/// `metav1.Status` from its JSON (`kind: Status`, as the server writes its errors), in the
/// envelope: Status is a metav1 type outside the generated tables (they hold the served kinds),
/// so its few fields are written here, numbered as in apimachinery's `generated.proto`:
/// Status {metadata = 1 ListMeta, status = 2, message = 3, reason = 4, details = 5, code = 6},
/// StatusDetails {name = 1, group = 2, kind = 3, causes = 4, retryAfterSeconds = 5, uid = 6},
/// StatusCause {reason = 1, message = 2, field = 3}.
pub(crate) fn status(json: &Json) -> Vec<u8> {
    let s = |v: &Json, k: &str| v.get(k).and_then(Json::as_str).unwrap_or("").to_owned();
    let i = |v: &Json, k: &str| v.get(k).and_then(Json::as_i64).unwrap_or(0);
    let mut raw = Vec::with_capacity(256);
    let meta = json.get("metadata").cloned().unwrap_or(Json::Null);
    list_meta(
        &mut raw,
        &s(&meta, "resourceVersion"),
        &s(&meta, "continue"),
        meta.get("remainingItemCount").and_then(Json::as_i64),
        None,
    );
    put_len(&mut raw, 2, s(json, "status").as_bytes());
    put_len(&mut raw, 3, s(json, "message").as_bytes());
    put_len(&mut raw, 4, s(json, "reason").as_bytes());
    if let Some(d) = json.get("details").filter(|d| d.is_object()) {
        let _ = nested::<()>(&mut raw, 5, |out| {
            put_len(out, 1, s(d, "name").as_bytes());
            put_len(out, 2, s(d, "group").as_bytes());
            put_len(out, 3, s(d, "kind").as_bytes());
            for c in d
                .get("causes")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                let _ = nested::<()>(out, 4, |out| {
                    put_len(out, 1, s(c, "reason").as_bytes());
                    put_len(out, 2, s(c, "message").as_bytes());
                    put_len(out, 3, s(c, "field").as_bytes());
                    Ok(())
                });
            }
            put_varint(out, 5, i(d, "retryAfterSeconds") as i32 as i64 as u64);
            put_len(out, 6, s(d, "uid").as_bytes());
            Ok(())
        });
    }
    put_varint(&mut raw, 6, i(json, "code") as i32 as i64 as u64);
    envelope("v1", "Status", &raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sharded_lists_meta_carries_shard_info_as_field_5() {
        let sel = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        let plain = list_head("v1", "PodList", "7", "", None, None, std::iter::empty());
        let sharded = list_head(
            "v1",
            "PodList",
            "7",
            "",
            None,
            Some(sel),
            std::iter::empty(),
        );
        // ListMeta {selfLink "", resourceVersion "7", continue "", shardInfo {selector}}:
        // field 5 (tag 0x2a) holding field 1 (tag 0x0a), after the plain head's meta.
        let mut info = vec![0x0a, sel.len() as u8];
        info.extend_from_slice(sel.as_bytes());
        let mut field = vec![0x2a, info.len() as u8];
        field.extend_from_slice(&info);
        assert!(sharded.windows(field.len()).any(|w| w == field.as_slice()));
        assert!(!plain.windows(2).any(|w| w == [0x2a, info.len() as u8]));
        assert_eq!(sharded.len(), plain.len() + field.len());
    }

    #[test]
    fn lists_and_watch_streams_are_framed_as_upstreams() {
        let vector = |name: &str| {
            let dir = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/kubernetes-protobuf/"
            );
            std::fs::read(format!("{dir}{name}")).unwrap()
        };
        let list: serde_json::Value = serde_json::from_slice(&vector("pods-list.json")).unwrap();
        let items: Vec<Vec<u8>> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                let mut item = item.clone();
                item["apiVersion"] = "v1".into();
                item["kind"] = "Pod".into();
                let env = crate::model::protobuf::encode_json(&item).unwrap();
                env[crate::model::protobuf::raw_range(&env).unwrap()].to_vec()
            })
            .collect();
        let mut got = list_head(
            "v1",
            "PodList",
            "12345",
            "",
            None,
            None,
            items.iter().map(Vec::len),
        );
        for i in &items {
            got.extend_from_slice(&item_head(i.len()));
            got.extend_from_slice(i);
        }
        got.extend_from_slice(ENVELOPE_TAIL);
        assert!(
            got == vector("pods-list.pb"),
            "list differs from upstream's vector"
        );
    }
}

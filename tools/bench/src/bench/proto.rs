//! Reading protobuf watch streams (`application/vnd.kubernetes.protobuf;stream=watch`) as cheaply
//! as the JSON reader: each frame is a 4-byte big-endian length and a `metav1.WatchEvent` (type 1,
//! object 2 = `RawExtension` whose raw 1 is the object in its `k8s\0` envelope, a `runtime.Unknown`
//! with the object's bytes in field 2); of the object only `metadata` (1) → name (1) and
//! resourceVersion (6) are read.

/// The envelope kube-apiserver puts before a protobuf object.
const MAGIC: &[u8] = b"k8s\0";

fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// The first length-delimited field `want` of a message.
fn field(msg: &[u8], want: u64) -> Option<&[u8]> {
    let mut at = 0;
    while at < msg.len() {
        let key = varint(msg, &mut at)?;
        match key & 7 {
            0 => {
                varint(msg, &mut at)?;
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let len = usize::try_from(varint(msg, &mut at)?).ok()?;
                let body = msg.get(at..at.checked_add(len)?)?;
                at += len;
                if key >> 3 == want {
                    return Some(body);
                }
            }
            _ => return None,
        }
    }
    None
}

/// The first varint field `want` of a message.
fn varint_field(msg: &[u8], want: u64) -> Option<u64> {
    let mut at = 0;
    while at < msg.len() {
        let key = varint(msg, &mut at)?;
        match key & 7 {
            0 => {
                let v = varint(msg, &mut at)?;
                if key >> 3 == want {
                    return Some(v);
                }
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let len = usize::try_from(varint(msg, &mut at)?).ok()?;
                at = at.checked_add(len)?;
            }
            _ => return None,
        }
    }
    None
}

/// The message inside a `k8s\0` + `runtime.Unknown` envelope, or the bytes as they are.
fn unwrap(b: &[u8]) -> Option<&[u8]> {
    match b.strip_prefix(MAGIC) {
        Some(unknown) => field(unknown, 2),
        None => Some(b),
    }
}

/// One watch event: its type, and the object's name and resourceVersion.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Event<'a> {
    pub kind: &'a [u8],
    pub name: &'a [u8],
    pub rv: &'a [u8],
}

/// Reads one frame's `WatchEvent`.
pub(super) fn event(frame: &[u8]) -> Option<Event<'_>> {
    let ev = unwrap(frame)?;
    let kind = field(ev, 1)?;
    let object = unwrap(field(field(ev, 2)?, 1)?)?;
    let meta = field(object, 1).unwrap_or_default();
    Some(Event {
        kind,
        name: field(meta, 1).unwrap_or_default(),
        rv: field(meta, 6).unwrap_or_default(),
    })
}

/// The `code` (field 6) of the `Status` an ERROR event's frame carries.
pub(super) fn status_code(frame: &[u8]) -> Option<u64> {
    let ev = unwrap(frame)?;
    let status = unwrap(field(field(ev, 2)?, 1)?)?;
    varint_field(status, 6)
}

/// Takes the complete frames off the front of `buf`, calling `f` with each; returns how many
/// bytes they took.
pub(super) fn frames(buf: &[u8], mut f: impl FnMut(&[u8])) -> usize {
    let mut at = 0;
    while let Some(head) = buf.get(at..at + 4) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let Some(body) = buf.get(at + 4..at + 4 + len) else {
            break;
        };
        f(body);
        at += 4 + len;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(field: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![(field << 3) | 2, body.len() as u8];
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn reads_a_framed_watch_event_through_both_envelopes() {
        let meta = [ld(1, b"pod-7"), ld(3, b"ns"), ld(6, b"42")].concat();
        let pod = [ld(1, &meta), ld(2, b"")].concat();
        let unknown = [ld(1, b""), ld(2, &pod)].concat();
        let raw = [MAGIC, &unknown[..]].concat();
        let ev = [ld(1, b"MODIFIED"), ld(2, &ld(1, &raw))].concat();
        let mut buf = (ev.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(&ev);
        buf.extend_from_slice(&[0, 0]);
        let mut got = Vec::new();
        let used = frames(&buf, |f| got.push(event(f).unwrap().name.to_vec()));
        assert_eq!(used, buf.len() - 2, "a partial frame stays in the buffer");
        assert_eq!(got, [b"pod-7".to_vec()]);
        let status = [ld(2, b"Failure"), vec![6 << 3, 0x9a, 0x03]].concat();
        let unknown = [ld(1, b""), ld(2, &status)].concat();
        let raw = [MAGIC, &unknown[..]].concat();
        let error = [ld(1, b"ERROR"), ld(2, &ld(1, &raw))].concat();
        assert_eq!(status_code(&error), Some(410));
        assert_eq!(status_code(&ev), None);
        assert_eq!(
            event(&ev),
            Some(Event {
                kind: b"MODIFIED",
                name: b"pod-7",
                rv: b"42"
            })
        );
    }
}

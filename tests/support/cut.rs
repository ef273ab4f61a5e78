//! managedFields cut out of kube-apiserver's own answers, written apart from the server's
//! implementation (`src/wire/managed_fields.rs`): JSON by a scan of the text that skips strings,
//! protobuf by a walk of the wire format. What the tests compare `drop=metadata.managedFields`
//! answers with.
#![allow(dead_code)]

/// `s` with every `"managedFields":[...]` member cut out with the comma that joined it: the
/// JSON encoding/json writes for the same object with `ManagedFields` nil. Written apart from
/// the server's implementation: a scan of the text that skips strings.
pub fn cut_json(s: &str) -> String {
    const KEY: &str = "\"managedFields\":[";
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while let Some(at) = s[i..].find(KEY).map(|a| a + i) {
        // The matching `]`, strings skipped.
        let (mut depth, mut j, mut in_str) = (0i32, at + KEY.len() - 1, false);
        loop {
            match (b[j], in_str) {
                (b'\\', true) => j += 1,
                (b'"', _) => in_str = !in_str,
                (b'[' | b'{', false) => depth += 1,
                (b']' | b'}', false) => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let (start, end) = if b[at - 1] == b',' {
            (at - 1, j + 1)
        } else if b[j + 1] == b',' {
            (at, j + 2)
        } else {
            (at, j + 1)
        };
        out.push_str(&s[i..start]);
        i = end;
    }
    out.push_str(&s[i..]);
    out
}

pub fn varint(b: &[u8], i: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let byte = b[*i];
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return v;
        }
        shift += 7;
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A message's fields as (number, whole field bytes, payload of a length-delimited field).
pub fn fields(b: &[u8]) -> Vec<(u64, &[u8], &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let tag = varint(b, &mut i);
        let payload = match tag & 7 {
            0 => {
                varint(b, &mut i);
                &b[i..i]
            }
            1 => {
                i += 8;
                &b[i..i]
            }
            5 => {
                i += 4;
                &b[i..i]
            }
            2 => {
                let n = varint(b, &mut i) as usize;
                i += n;
                &b[i - n..i]
            }
            t => panic!("wire type {t}"),
        };
        out.push((tag >> 3, &b[start..i], payload));
    }
    out
}

/// `msg` with each length-delimited field `num` replaced by `f(payload)`.
fn rewrite(msg: &[u8], num: u64, f: &dyn Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, whole, payload) in fields(msg) {
        if n == num {
            let new = f(payload);
            put_varint(&mut out, (num << 3) | 2);
            put_varint(&mut out, new.len() as u64);
            out.extend_from_slice(&new);
        } else {
            out.extend_from_slice(whole);
        }
    }
    out
}

/// An envelope (`k8s\0` + `runtime.Unknown`) with its object's `ObjectMeta` field 17 left out.
pub fn cut_protobuf(envelope: &[u8]) -> Vec<u8> {
    let meta = |m: &[u8]| -> Vec<u8> {
        fields(m)
            .into_iter()
            .filter(|(n, _, _)| *n != 17)
            .flat_map(|(_, whole, _)| whole.to_vec())
            .collect()
    };
    let object = |raw: &[u8]| rewrite(raw, 1, &meta);
    let mut out = b"k8s\0".to_vec();
    out.extend(rewrite(&envelope[4..], 2, &object));
    out
}

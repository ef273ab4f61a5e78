//! The protobuf wire format, read without allocating: varints and tagged fields over a byte slice.

/// Why bytes are not a protobuf message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    /// The bytes end inside a field.
    #[error("truncated protobuf")]
    Truncated,
    /// A varint longer than 10 bytes.
    #[error("malformed varint")]
    Varint,
    /// Groups (wire types 3, 4) and unknown wire types; field number 0.
    #[error("invalid protobuf tag {0:#x}")]
    Tag(u64),
}

/// One field's value as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
}

/// Reads a varint at `*pos`, advancing it.
#[inline]
pub(crate) fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    // Tags and lengths are almost always one byte.
    match buf.get(*pos) {
        Some(&b) if b < 0x80 => {
            *pos += 1;
            Ok(u64::from(b))
        }
        Some(_) => varint_slow(buf, pos),
        None => Err(WireError::Truncated),
    }
}

#[inline(never)]
fn varint_slow(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    let mut out = 0u64;
    let mut shift = 0;
    while shift < 70 {
        let b = *buf.get(*pos).ok_or(WireError::Truncated)?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(out);
        }
        shift += 7;
    }
    Err(WireError::Varint)
}

/// The fields of one message, in wire order.
#[derive(Clone)]
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Fields { buf, pos: 0 }
    }

    /// Where the next field starts (the end of the buffer once done or failed).
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    #[inline]
    fn read(&mut self) -> Result<(u32, Value<'a>), WireError> {
        let tag = varint(self.buf, &mut self.pos)?;
        let num = tag >> 3;
        if num == 0 || num > u64::from(u32::MAX >> 3) {
            return Err(WireError::Tag(tag));
        }
        let v = match tag & 7 {
            0 => Value::Varint(varint(self.buf, &mut self.pos)?),
            2 => {
                let n = varint(self.buf, &mut self.pos)?;
                let n = usize::try_from(n).map_err(|_| WireError::Truncated)?;
                Value::Len(self.take(n)?)
            }
            1 => {
                let b = self.take(8)?;
                Value::Fixed64(u64::from_le_bytes([
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                ]))
            }
            5 => {
                let b = self.take(4)?;
                Value::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            _ => return Err(WireError::Tag(tag)),
        };
        Ok((num as u32, v))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let r = self.read();
        if r.is_err() {
            self.pos = self.buf.len();
        }
        Some(r)
    }
}

/// Appends a varint (test vectors are built with it).
#[cfg(test)]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_wire_type() {
        let mut b = vec![0x08];
        put_varint(&mut b, 300);
        b.extend_from_slice(&[0x11, 1, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&[0x1a, 2, b'h', b'i']);
        b.extend_from_slice(&[0x25, 7, 0, 0, 0]);
        let got: Vec<_> = Fields::new(&b).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                (1, Value::Varint(300)),
                (2, Value::Fixed64(1)),
                (3, Value::Len(b"hi")),
                (4, Value::Fixed32(7)),
            ]
        );
    }

    #[test]
    fn bad_bytes_are_errors() {
        for (b, want) in [
            (&[0x0a, 5, 1][..], WireError::Truncated),
            (&[0x08][..], WireError::Truncated),
            (&[0x0b][..], WireError::Tag(0x0b)),
            (&[0x00, 1][..], WireError::Tag(0)),
            (
                &[
                    0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1,
                ][..],
                WireError::Varint,
            ),
            (
                &[
                    0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1,
                ][..],
                WireError::Truncated,
            ),
        ] {
            let mut it = Fields::new(b);
            assert_eq!(it.next(), Some(Err(want)), "{b:x?}");
            assert_eq!(it.next(), None);
        }
    }
}

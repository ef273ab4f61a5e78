//! Protobuf → JSON, as kube-apiserver's JSON serializer writes the same Go object: field names and
//! order from the Go structs, `omitempty`/`omitzero`, `null` for nil pointers, slices and maps that
//! have no `omitempty`, map keys sorted, `[]byte` as base64, `Time` in RFC 3339 seconds and
//! `MicroTime` in microseconds (zero as `null`), quantities as strings, int-or-string as either.
//!
//! Go decodes protobuf into structs first, so what JSON sees is Go's value: an absent value field
//! is its zero value; an absent pointer, slice or map is nil. Repeated occurrences of a singular
//! field: the last one wins (upstream merges nested messages; kube-apiserver never writes
//! duplicates, so the two agree on everything it stores).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::catalog::message;
use super::schema::{Card, Field, Kind, Message, Omit};
use super::wire::{Fields, Value};

/// Seconds from 1970 to Go's zero `time.Time` (January 1, year 1, UTC).
pub(crate) const GO_ZERO_UNIX: i64 = -62_135_596_800;

/// The wire fields of one message, in wire order.
pub(crate) type Entries<'a> = Vec<(u32, Value<'a>)>;

/// Appends the fields of a message to `stack`, ordered by field number (kube-apiserver writes them
/// in that order already; the sort is stable, so repeated fields keep their order).
fn push_entries<'a>(stack: &mut Entries<'a>, msg: &Message, bytes: &'a [u8]) -> Result<(), String> {
    let start = stack.len();
    for e in Fields::new(bytes) {
        stack.push(e.map_err(|e| format!("{}: {e}", msg.name))?);
    }
    let mine = &mut stack[start..];
    if !mine.is_sorted_by_key(|(n, _)| *n) {
        mine.sort_by_key(|(n, _)| *n);
    }
    Ok(())
}

/// The index range of field `num` in a number-ordered run of entries.
fn range_of(es: &[(u32, Value<'_>)], num: u32) -> std::ops::Range<usize> {
    let a = es.partition_point(|(n, _)| *n < num);
    let b = a + es[a..].partition_point(|(n, _)| *n == num);
    a..b
}

/// Writes the top-level object: `kind` and `apiVersion` from the envelope, then the message's
/// fields, with `metadata.resourceVersion` = `rv` in its place. Returns where the revision's
/// digits are, and where the fields after `kind` and `apiVersion` start.
pub(crate) fn write_object(
    out: &mut Vec<u8>,
    api_version: &str,
    kind: &str,
    msg: &'static Message,
    bytes: &[u8],
    rv: u64,
) -> Result<(u32, u8, u32), String> {
    out.extend_from_slice(b"{\"kind\":");
    write_str(out, kind);
    out.extend_from_slice(b",\"apiVersion\":");
    write_str(out, api_version);
    // Every built-in has metadata, always written: the next byte is its separator.
    let fields_at = out.len() as u32 + 1;
    let mut w = Writer {
        out,
        stack: Vec::with_capacity(64),
        rv: Some(rv),
        rv_pos: None,
        limit: usize::MAX,
    };
    let mut first = false;
    w.fields(msg, bytes, &mut first, 0)?;
    w.out.push(b'}');
    let (at, len) = w
        .rv_pos
        .ok_or_else(|| format!("{}: no metadata", msg.name))?;
    Ok((at, len, fields_at))
}

/// Writes a message as a JSON object (a nested type's, such as `ObjectMeta`), as encoding/json
/// writes its Go struct.
///
/// # Errors
/// Bytes that are not that message.
pub(crate) fn write_message_json(
    out: &mut Vec<u8>,
    msg: &'static Message,
    bytes: &[u8],
) -> Result<(), String> {
    out.push(b'{');
    let mut w = Writer {
        out,
        stack: Vec::with_capacity(64),
        rv: None,
        rv_pos: None,
        limit: usize::MAX,
    };
    let mut first = true;
    w.fields(msg, bytes, &mut first, 2)?;
    w.out.push(b'}');
    Ok(())
}

/// Writes one field of a message alone, as `"name":value`, or nothing when Go leaves it out.
pub(crate) fn write_one_field(
    out: &mut Vec<u8>,
    msg: &'static Message,
    f: &Field,
    bytes: &[u8],
) -> Result<(), String> {
    let mut w = Writer {
        out,
        stack: Vec::new(),
        rv: None,
        rv_pos: None,
        limit: usize::MAX,
    };
    push_entries(&mut w.stack, msg, bytes)?;
    let r = range_of(&w.stack, f.num);
    w.field(msg, f, r, &mut true)
}

fn wire_type(msg: &Message, f: &Field) -> String {
    format!("{}: field {} has the wrong wire type", msg.name, f.num)
}

fn sep(out: &mut Vec<u8>, first: &mut bool) {
    if !*first {
        out.push(b',');
    }
    *first = false;
}

fn key(out: &mut Vec<u8>, first: &mut bool, name: &str) {
    sep(out, first);
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

/// The JSON writer: the output, and one stack of wire entries shared by every nesting level.
struct Writer<'o, 'b> {
    out: &'o mut Vec<u8>,
    stack: Entries<'b>,
    /// The revision to write as the top-level `metadata.resourceVersion`.
    rv: Option<u64>,
    rv_pos: Option<(u32, u8)>,
    /// The longest output wanted: past it, writing stops with an error (a request body's
    /// 2 bytes of an empty repeated message stand for tens of bytes of JSON).
    limit: usize,
}

impl<'b> Writer<'_, 'b> {
    /// An error once the output is longer than the limit (the caller sees the length).
    fn within_limit(&self) -> Result<(), String> {
        if self.out.len() > self.limit {
            Err(format!("the JSON is longer than {} bytes", self.limit))
        } else {
            Ok(())
        }
    }

    /// Writes the fields of a message (without braces), `,`-separated after `*first`. `depth` 1
    /// with `self.rv` set is the top-level metadata.
    fn fields(
        &mut self,
        msg: &'static Message,
        bytes: &'b [u8],
        first: &mut bool,
        depth: u32,
    ) -> Result<(), String> {
        if depth > 64 {
            return Err(format!("{}: nested too deeply", msg.name));
        }
        self.within_limit()?;
        let start = self.stack.len();
        push_entries(&mut self.stack, msg, bytes)?;
        let end = self.stack.len();
        for f in msg.fields {
            if depth == 1
                && f.json == "resourceVersion"
                && let Some(v) = self.rv
            {
                let out = &mut *self.out;
                sep(out, first);
                out.extend_from_slice(b"\"resourceVersion\":\"");
                let at = out.len() as u32;
                let mut digits = itoa::Buffer::new();
                let d = digits.format(v);
                out.extend_from_slice(d.as_bytes());
                out.push(b'"');
                self.rv_pos = Some((at, d.len() as u8));
                continue;
            }
            let r = range_of(&self.stack[start..end], f.num);
            let r = start + r.start..start + r.end;
            // Only the top-level `metadata` gets the revision.
            let d = if depth == 0 && f.json != "metadata" {
                depth + 2
            } else {
                depth + 1
            };
            self.field_at(msg, f, r, first, d)?;
        }
        self.stack.truncate(start);
        Ok(())
    }

    fn field(
        &mut self,
        msg: &'static Message,
        f: &Field,
        r: std::ops::Range<usize>,
        first: &mut bool,
    ) -> Result<(), String> {
        self.field_at(msg, f, r, first, 2)
    }

    /// Writes one field as `"name":value` (after a separator), or nothing when Go leaves it out.
    fn field_at(
        &mut self,
        msg: &'static Message,
        f: &Field,
        r: std::ops::Range<usize>,
        first: &mut bool,
        depth: u32,
    ) -> Result<(), String> {
        let last_v = (!r.is_empty()).then(|| self.stack[r.end - 1].1);
        if f.json.is_empty() {
            // An inline struct: its fields join ours.
            let Kind::Msg(m) = f.kind else {
                return Err(format!(
                    "{}: inline field {} is not a struct",
                    msg.name, f.num
                ));
            };
            let b = match last_v {
                Some(Value::Len(b)) => b,
                None => &[],
                Some(_) => return Err(wire_type(msg, f)),
            };
            return self.fields(message(m), b, first, depth);
        }
        let out = &mut *self.out;
        let nil = |out: &mut Vec<u8>, first: &mut bool| {
            if f.omit == Omit::Never {
                key(out, first, f.json);
                out.extend_from_slice(b"null");
            }
        };
        match f.card {
            Card::Ptr => match last_v {
                None => nil(out, first),
                Some(v) => {
                    key(out, first, f.json);
                    self.value(msg, f, Some(v), depth)?;
                }
            },
            Card::Rep => {
                let mut any = false;
                for i in r {
                    self.within_limit()?;
                    let v = self.stack[i].1;
                    let out = &mut *self.out;
                    if !any {
                        key(out, first, f.json);
                        out.push(b'[');
                    }
                    match (f.kind, v) {
                        // Packed scalars: several values in one field.
                        (Kind::I32 | Kind::I64 | Kind::Bool, Value::Len(b)) => {
                            let mut pos = 0;
                            while pos < b.len() {
                                let x = super::wire::varint(b, &mut pos)
                                    .map_err(|e| format!("{}: {e}", msg.name))?;
                                if any {
                                    out.push(b',');
                                }
                                any = true;
                                write_value(out, msg, f, f.kind, Some(Value::Varint(x)))?;
                            }
                        }
                        _ => {
                            if any {
                                out.push(b',');
                            }
                            any = true;
                            self.value(msg, f, Some(v), depth)?;
                        }
                    }
                }
                if any {
                    self.out.push(b']');
                } else {
                    nil(self.out, first);
                }
            }
            Card::Map(_) => {
                let mut pairs = Vec::new();
                for i in r {
                    let v = self.stack[i].1;
                    let Value::Len(b) = v else {
                        return Err(wire_type(msg, f));
                    };
                    let mut k: &[u8] = &[];
                    let mut val = None;
                    for e in Fields::new(b) {
                        match e.map_err(|e| format!("{}: map {}: {e}", msg.name, f.json))? {
                            (1, Value::Len(kb)) => k = kb,
                            (2, x) => val = Some(x),
                            (1, _) => return Err(wire_type(msg, f)),
                            _ => {}
                        }
                    }
                    pairs.push((k, val));
                }
                if pairs.is_empty() {
                    nil(self.out, first);
                    return Ok(());
                }
                // Go writes map keys sorted; a repeated key keeps its last value.
                pairs.reverse();
                pairs.sort_by(|a, b| a.0.cmp(b.0));
                pairs.dedup_by(|a, b| a.0 == b.0);
                key(self.out, first, f.json);
                self.out.push(b'{');
                for (i, (k, v)) in pairs.into_iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    write_str(self.out, &String::from_utf8_lossy(k));
                    self.out.push(b':');
                    // An absent map value is the value type's zero.
                    self.value(msg, f, v, depth)?;
                }
                self.out.push(b'}');
            }
            Card::One => {
                let v = last_v;
                let omit = match (f.omit, f.kind) {
                    (Omit::Never, _) => false,
                    // A []byte is a slice: nil (absent) is left out; with omitempty so is empty.
                    (o, Kind::Bytes) => match v {
                        None => true,
                        Some(Value::Len(b)) => o == Omit::Empty && b.is_empty(),
                        Some(_) => return Err(wire_type(msg, f)),
                    },
                    // omitempty never leaves a struct out.
                    (
                        Omit::Empty,
                        Kind::Msg(_)
                        | Kind::Time
                        | Kind::MicroTime
                        | Kind::Quantity
                        | Kind::IntOrString
                        | Kind::Raw
                        | Kind::StrList
                        | Kind::OrArray(_)
                        | Kind::OrBool(_)
                        | Kind::OrStrings(_),
                    ) => false,
                    (_, _) => is_zero(msg, f, f.kind, v)?,
                };
                if omit {
                    return Ok(());
                }
                if f.kind == Kind::Bytes && v.is_none() {
                    // With Omit::Never a nil []byte is null.
                    nil(out, first);
                    return Ok(());
                }
                key(out, first, f.json);
                self.value(msg, f, v, depth)?;
            }
        }
        Ok(())
    }

    /// One value; nested messages go through the shared stack.
    fn value(
        &mut self,
        msg: &'static Message,
        f: &Field,
        v: Option<Value<'b>>,
        depth: u32,
    ) -> Result<(), String> {
        if let Kind::OrArray(m) | Kind::OrBool(m) | Kind::OrStrings(m) = f.kind {
            return self.either(msg, f, m, v, depth);
        }
        if let Kind::Msg(m) = f.kind {
            let b = match v {
                None => &[][..],
                Some(Value::Len(b)) => b,
                Some(_) => return Err(wire_type(msg, f)),
            };
            self.out.push(b'{');
            self.fields(message(m), b, &mut true, depth)?;
            self.out.push(b'}');
            return Ok(());
        }
        write_value(self.out, msg, f, f.kind, v)
    }

    /// One of apiextensions' either-or wrappers, as its `MarshalJSON` writes it.
    fn either(
        &mut self,
        msg: &'static Message,
        f: &Field,
        props: u16,
        v: Option<Value<'b>>,
        depth: u32,
    ) -> Result<(), String> {
        let b = match v {
            None => &[][..],
            Some(Value::Len(b)) => b,
            Some(_) => return Err(wire_type(msg, f)),
        };
        let Either {
            schema,
            items,
            allows,
        } = either_fields(msg, f, b)?;
        let props = message(props);
        let object = |this: &mut Self, x: &'b [u8]| -> Result<(), String> {
            this.out.push(b'{');
            this.fields(props, x, &mut true, depth + 1)?;
            this.out.push(b'}');
            Ok(())
        };
        match f.kind {
            Kind::OrArray(_) if !items.is_empty() => {
                self.out.push(b'[');
                for (i, x) in items.into_iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    object(self, x)?;
                }
                self.out.push(b']');
            }
            Kind::OrStrings(_) if !items.is_empty() => {
                self.out.push(b'[');
                for (i, x) in items.into_iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    write_str(self.out, &String::from_utf8_lossy(x));
                }
                self.out.push(b']');
            }
            _ => match schema {
                Some(x) => object(self, x)?,
                None if matches!(f.kind, Kind::OrBool(_)) => {
                    self.out
                        .extend_from_slice(if allows { b"true" } else { b"false" });
                }
                None => self.out.extend_from_slice(b"null"),
            },
        }
        Ok(())
    }
}

/// The fields of an either-or wrapper: its schema, its repeated items (schemas or strings, by
/// kind), and `allows`.
struct Either<'b> {
    schema: Option<&'b [u8]>,
    items: Vec<&'b [u8]>,
    allows: bool,
}

fn either_fields<'b>(msg: &Message, f: &Field, b: &'b [u8]) -> Result<Either<'b>, String> {
    let mut e = Either {
        schema: None,
        items: Vec::new(),
        allows: false,
    };
    let schema_num = if matches!(f.kind, Kind::OrBool(_)) {
        2
    } else {
        1
    };
    for x in Fields::new(b) {
        match x.map_err(|x| format!("{}.{}: {x}", msg.name, f.json))? {
            (n, Value::Len(s)) if n == schema_num => e.schema = Some(s),
            (2, Value::Len(s)) => e.items.push(s),
            (1, Value::Varint(a)) if matches!(f.kind, Kind::OrBool(_)) => e.allows = a != 0,
            (1 | 2, _) => return Err(wire_type(msg, f)),
            _ => {}
        }
    }
    Ok(e)
}

/// A JSON value as Go's encoding/json writes it back from `interface{}` (an unstructured object,
/// decoded as apimachinery decodes it: integers as int64, other numbers as float64): object keys
/// sorted byte-wise, strings Go-escaped, floats in Go's form.
pub(crate) fn write_go_value(out: &mut Vec<u8>, v: &serde_json::Value) {
    use serde_json::Value as J;
    match v {
        J::Null => out.extend_from_slice(b"null"),
        J::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        J::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
            (None, Some(f)) => write_f64(out, f),
            (None, None) => out.extend_from_slice(n.to_string().as_bytes()),
        },
        J::String(s) => write_str(out, s),
        J::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_go_value(out, x);
            }
            out.push(b']');
        }
        J::Object(m) => {
            // serde_json's map is sorted unless a dependency turns on `preserve_order`: sort.
            let mut members: Vec<_> = m.iter().collect();
            members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, x)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_go_value(out, x);
            }
            out.push(b'}');
        }
    }
}

/// Go's encoding/json float64: the shortest round-tripping digits, in exponent form below 1e-6
/// or from 1e21 (`1e+21`, `1e-7`), else plain.
fn write_f64(out: &mut Vec<u8>, x: f64) {
    if !x.is_finite() {
        // encoding/json refuses NaN and infinities; upstream can never have stored one.
        out.extend_from_slice(b"null");
        return;
    }
    let abs = x.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        out.extend_from_slice(mantissa.as_bytes());
        out.push(b'e');
        out.push(sign as u8);
        // Go writes at least two exponent digits, then drops a leading 0 of a negative one.
        if digits.len() < 2 && sign == '+' {
            out.push(b'0');
        }
        out.extend_from_slice(digits.as_bytes());
    } else {
        out.extend_from_slice(format!("{x}").as_bytes());
    }
}

/// Whether a value field holds Go's zero value (`None`: absent).
fn is_zero(msg: &Message, f: &Field, kind: Kind, v: Option<Value<'_>>) -> Result<bool, String> {
    let Some(v) = v else { return Ok(true) };
    Ok(match (kind, v) {
        (Kind::Str | Kind::Bytes, Value::Len(b)) => b.is_empty(),
        (Kind::Bool | Kind::I32 | Kind::I64, Value::Varint(x)) => {
            if kind == Kind::I32 {
                x as i32 == 0
            } else {
                x == 0
            }
        }
        (Kind::Time | Kind::MicroTime, Value::Len(b)) => {
            let (s, n) = timestamp(msg, b)?;
            s == GO_ZERO_UNIX && (kind == Kind::Time || n / 1000 == 0) || b.is_empty()
        }
        (Kind::Msg(m), Value::Len(b)) => message_is_zero(message(m), b)?,
        (
            Kind::Quantity
            | Kind::IntOrString
            | Kind::Raw
            | Kind::StrList
            | Kind::OrArray(_)
            | Kind::OrBool(_)
            | Kind::OrStrings(_),
            Value::Len(b),
        ) => message_is_zero(&ANY, b)?,
        (Kind::F64, Value::Fixed64(x)) => x == 0,
        _ => return Err(wire_type(msg, f)),
    })
}

/// Stands in for the small special messages when asking whether one is zero: any set field with a
/// non-zero payload makes it non-zero.
static ANY: Message = Message {
    name: "special",
    by_num: &[],
    fields: &[],
};

/// Go's `reflect.Value.IsZero` on the decoded struct: no field differs from its zero value.
fn message_is_zero(msg: &'static Message, bytes: &[u8]) -> Result<bool, String> {
    for e in Fields::new(bytes) {
        let (num, v) = e.map_err(|e| format!("{}: {e}", msg.name))?;
        if msg.fields.is_empty() {
            let nonzero = match v {
                Value::Varint(x) | Value::Fixed64(x) => x != 0,
                Value::Fixed32(x) => x != 0,
                Value::Len(b) => !b.is_empty(),
            };
            if nonzero {
                return Ok(false);
            }
            continue;
        }
        let Some(f) = msg.field(num) else {
            continue;
        };
        let zero = match f.card {
            Card::One => is_zero(msg, f, f.kind, Some(v))?,
            _ => false,
        };
        if !zero {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Seconds and nanoseconds of a `Timestamp`; an empty one is Go's zero time.
fn timestamp(msg: &Message, b: &[u8]) -> Result<(i64, i32), String> {
    if b.is_empty() {
        return Ok((GO_ZERO_UNIX, 0));
    }
    let (mut s, mut n) = (0i64, 0i32);
    for e in Fields::new(b) {
        match e.map_err(|e| format!("{}: Timestamp: {e}", msg.name))? {
            (1, Value::Varint(x)) => s = x as i64,
            (2, Value::Varint(x)) => n = x as i32,
            (1 | 2, _) => return Err(format!("{}: Timestamp: wrong wire type", msg.name)),
            _ => {}
        }
    }
    Ok((s, n))
}

/// The string of a `Quantity` message.
fn quantity<'b>(msg: &Message, f: &Field, b: &'b [u8]) -> Result<&'b str, String> {
    let mut found = None;
    for e in Fields::new(b) {
        if let (1, Value::Len(x)) = e.map_err(|e| format!("{}: Quantity: {e}", msg.name))? {
            found = Some(x);
        }
    }
    let s = found
        .filter(|x| !x.is_empty())
        .ok_or_else(|| format!("{}.{}: empty quantity", msg.name, f.json))?;
    std::str::from_utf8(s).map_err(|_| format!("{}.{}: quantity is not UTF-8", msg.name, f.json))
}

/// An `IntOrString` message: `Ok(Err(int))` or `Ok(Ok(string bytes))`.
fn int_or_string<'b>(
    msg: &Message,
    f: &Field,
    b: &'b [u8],
) -> Result<Result<&'b [u8], i32>, String> {
    let (mut ty, mut int, mut text) = (0u64, 0i32, &[][..]);
    for e in Fields::new(b) {
        match e.map_err(|e| format!("{}: IntOrString: {e}", msg.name))? {
            (1, Value::Varint(x)) => ty = x,
            (2, Value::Varint(x)) => int = x as i32,
            (3, Value::Len(x)) => text = x,
            (1..=3, _) => return Err(wire_type(msg, f)),
            _ => {}
        }
    }
    match ty {
        0 => Ok(Err(int)),
        1 => Ok(Ok(text)),
        t => Err(format!("{}.{}: IntOrString type {t}", msg.name, f.json)),
    }
}

/// The JSON bytes of a `RawExtension` or `FieldsV1` (`None`: nil), checked to be JSON.
fn raw_json<'b>(msg: &Message, f: &Field, b: &'b [u8]) -> Result<Option<&'b [u8]>, String> {
    let mut raw = None;
    for e in Fields::new(b) {
        if let (1, Value::Len(x)) = e.map_err(|e| format!("{}: raw: {e}", msg.name))? {
            raw = Some(x);
        }
    }
    if let Some(x) = raw {
        serde_json::from_slice::<serde::de::IgnoredAny>(x)
            .map_err(|e| format!("{}.{}: embedded JSON: {e}", msg.name, f.json))?;
    }
    Ok(raw)
}

/// Checks everything the JSON encoding of a message needs, without writing it: afterwards
/// [`write_object`] cannot fail on these bytes. Fields unknown to the table are skipped, as Go
/// skips them; repeated singular fields must all be well-formed (stricter than Go, which reads
/// only the last).
pub(crate) fn validate(msg: &'static Message, bytes: &[u8], depth: u32) -> Result<(), String> {
    if depth > 64 {
        return Err(format!("{}: nested too deeply", msg.name));
    }
    let bad = |e: super::wire::WireError| format!("{}: {e}", msg.name);
    let mut pos = 0;
    // One tight loop over the wire: most fields are strings and integers, which need nothing
    // beyond their wire type; only nested messages and the special kinds are looked into.
    while pos < bytes.len() {
        let tag = super::wire::varint(bytes, &mut pos).map_err(bad)?;
        let num = tag >> 3;
        let f = if num == 0 || num > u64::from(u32::MAX >> 3) {
            return Err(bad(super::wire::WireError::Tag(tag)));
        } else {
            msg.field(num as u32)
        };
        match tag & 7 {
            0 => {
                super::wire::varint(bytes, &mut pos).map_err(bad)?;
                if let Some(f) = f
                    && !(matches!(f.kind, Kind::Bool | Kind::I32 | Kind::I64)
                        && matches!(f.card, Card::One | Card::Ptr | Card::Rep))
                {
                    return Err(wire_type(msg, f));
                }
            }
            2 => {
                let n = super::wire::varint(bytes, &mut pos).map_err(bad)?;
                let end = usize::try_from(n)
                    .ok()
                    .and_then(|n| pos.checked_add(n))
                    .filter(|&e| e <= bytes.len())
                    .ok_or_else(|| bad(super::wire::WireError::Truncated))?;
                let b = &bytes[pos..end];
                pos = end;
                let Some(f) = f else { continue };
                match (f.card, f.kind) {
                    (_, Kind::Str | Kind::Bytes) if !matches!(f.card, Card::Map(_)) => {}
                    (Card::Map(_), _) => {
                        for e in Fields::new(b) {
                            match e.map_err(|e| format!("{}: map {}: {e}", msg.name, f.json))? {
                                (1, Value::Len(_)) => {}
                                (1, _) => return Err(wire_type(msg, f)),
                                (2, x) => validate_value(msg, f, x, depth)?,
                                _ => {}
                            }
                        }
                    }
                    (Card::Rep, Kind::I32 | Kind::I64 | Kind::Bool) => {
                        let mut p = 0;
                        while p < b.len() {
                            super::wire::varint(b, &mut p).map_err(bad)?;
                        }
                    }
                    _ => validate_value(msg, f, Value::Len(b), depth)?,
                }
            }
            1 | 5 => {
                let n = if tag & 7 == 1 { 8 } else { 4 };
                if bytes.len() - pos < n {
                    return Err(bad(super::wire::WireError::Truncated));
                }
                pos += n;
                if let Some(f) = f
                    && !(f.kind == Kind::F64 && n == 8)
                {
                    return Err(wire_type(msg, f));
                }
            }
            _ => return Err(bad(super::wire::WireError::Tag(tag))),
        }
    }
    Ok(())
}

fn validate_value(msg: &Message, f: &Field, v: Value<'_>, depth: u32) -> Result<(), String> {
    match (f.kind, v) {
        (Kind::Str | Kind::Bytes, Value::Len(_)) => {}
        (Kind::Bool | Kind::I32 | Kind::I64, Value::Varint(_)) => {}
        (Kind::Msg(m), Value::Len(b)) => validate(message(m), b, depth + 1)?,
        (Kind::Time | Kind::MicroTime, Value::Len(b)) => {
            timestamp(msg, b)?;
        }
        (Kind::Quantity, Value::Len(b)) => {
            quantity(msg, f, b)?;
        }
        (Kind::IntOrString, Value::Len(b)) => {
            let _either = int_or_string(msg, f, b)?;
        }
        (Kind::Raw, Value::Len(b)) => {
            raw_json(msg, f, b)?;
        }
        (Kind::StrList, Value::Len(b)) => {
            str_list(msg, f, b)?;
        }
        (Kind::F64, Value::Fixed64(_)) => {}
        (Kind::OrArray(m) | Kind::OrBool(m) | Kind::OrStrings(m), Value::Len(b)) => {
            let e = either_fields(msg, f, b)?;
            if let Some(s) = e.schema {
                validate(message(m), s, depth + 1)?;
            }
            if matches!(f.kind, Kind::OrArray(_)) {
                for s in e.items {
                    validate(message(m), s, depth + 1)?;
                }
            }
        }
        _ => return Err(wire_type(msg, f)),
    }
    Ok(())
}

/// The items of a wrapped string list (`ExtraValue`): field 1, repeated.
fn str_list<'b>(msg: &Message, f: &Field, b: &'b [u8]) -> Result<Vec<&'b [u8]>, String> {
    let mut items = Vec::new();
    for e in Fields::new(b) {
        match e.map_err(|e| format!("{}.{}: {e}", msg.name, f.json))? {
            (1, Value::Len(x)) => items.push(x),
            (1, _) => return Err(wire_type(msg, f)),
            _ => {}
        }
    }
    Ok(items)
}

/// Writes one value of `kind` (`None`: an absent value field, i.e. Go's zero value).
fn write_value(
    out: &mut Vec<u8>,
    msg: &Message,
    f: &Field,
    kind: Kind,
    v: Option<Value<'_>>,
) -> Result<(), String> {
    match (kind, v) {
        (Kind::Str, None) => out.extend_from_slice(b"\"\""),
        (Kind::Str, Some(Value::Len(b))) => write_str(out, &String::from_utf8_lossy(b)),
        (Kind::Bytes, None) => out.extend_from_slice(b"null"),
        (Kind::Bytes, Some(Value::Len(b))) => {
            out.push(b'"');
            let start = out.len();
            out.resize(start + b.len().div_ceil(3) * 4, 0);
            let n = STANDARD
                .encode_slice(b, &mut out[start..])
                .map_err(|e| format!("{}: base64: {e}", msg.name))?;
            out.truncate(start + n);
            out.push(b'"');
        }
        (Kind::Bool, None) => out.extend_from_slice(b"false"),
        (Kind::Bool, Some(Value::Varint(x))) => {
            out.extend_from_slice(if x != 0 { b"true" } else { b"false" })
        }
        (Kind::I32 | Kind::I64, None) => out.push(b'0'),
        (Kind::I32, Some(Value::Varint(x))) => {
            out.extend_from_slice(itoa::Buffer::new().format(x as i32).as_bytes())
        }
        (Kind::I64, Some(Value::Varint(x))) => {
            out.extend_from_slice(itoa::Buffer::new().format(x as i64).as_bytes())
        }
        (Kind::Time | Kind::MicroTime, v) => {
            let b = match v {
                None => &[][..],
                Some(Value::Len(b)) => b,
                Some(_) => return Err(wire_type(msg, f)),
            };
            let (s, n) = timestamp(msg, b)?;
            // Time keeps whole seconds (upstream drops nanos on decode); MicroTime keeps µs.
            let micros = if kind == Kind::MicroTime { n / 1000 } else { 0 };
            if s == GO_ZERO_UNIX && micros == 0 {
                out.extend_from_slice(b"null");
            } else {
                write_time(out, s, (kind == Kind::MicroTime).then_some(micros));
            }
        }
        (Kind::Quantity, None) => write_str(out, "0"),
        (Kind::Quantity, Some(Value::Len(b))) => write_str(out, quantity(msg, f, b)?),
        (Kind::IntOrString, None) => out.push(b'0'),
        (Kind::IntOrString, Some(Value::Len(b))) => match int_or_string(msg, f, b)? {
            Err(int) => out.extend_from_slice(itoa::Buffer::new().format(int).as_bytes()),
            Ok(text) => write_str(out, &String::from_utf8_lossy(text)),
        },
        (Kind::F64, None) => out.push(b'0'),
        (Kind::F64, Some(Value::Fixed64(x))) => write_f64(out, f64::from_bits(x)),
        (Kind::StrList, None) => out.extend_from_slice(b"null"),
        (Kind::StrList, Some(Value::Len(b))) => {
            let items = str_list(msg, f, b)?;
            if items.is_empty() {
                out.extend_from_slice(b"null");
            } else {
                out.push(b'[');
                for (i, item) in items.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_str(out, &String::from_utf8_lossy(item));
                }
                out.push(b']');
            }
        }
        (Kind::Raw, None) => out.extend_from_slice(b"null"),
        (Kind::Raw, Some(Value::Len(b))) => match raw_json(msg, f, b)? {
            None => out.extend_from_slice(b"null"),
            Some(x) => {
                // Written as it is, compacted as Go's encoding/json compacts a Marshaler's
                // output: members keep their order (a FieldsV1's is structured-merge-diff's, not
                // sorted), whitespace goes (a watch frame is one line), HTML characters escaped.
                serde_json::from_slice::<serde::de::IgnoredAny>(x)
                    .map_err(|e| format!("{}.{}: embedded JSON: {e}", msg.name, f.json))?;
                write_compact_go(out, x);
            }
        },
        _ => return Err(wire_type(msg, f)),
    }
    Ok(())
}

/// Valid JSON without its insignificant whitespace, `<`, `>`, `&`, U+2028 and U+2029 in strings
/// escaped: Go's `json.Compact` with HTML escaping, as encoding/json writes a `json.Marshaler`'s
/// output (a `RawExtension`, `FieldsV1`, `JSON`).
pub(crate) fn write_compact_go(out: &mut Vec<u8>, raw: &[u8]) {
    let mut in_str = false;
    let mut escaped = false;
    let mut i = 0;
    while let Some(&c) = raw.get(i) {
        i += 1;
        if !in_str {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                out.push(c);
                in_str = c == b'"';
            }
            continue;
        }
        if escaped {
            escaped = false;
            out.push(c);
            continue;
        }
        match c {
            b'\\' => {
                escaped = true;
                out.push(c);
            }
            b'"' => {
                in_str = false;
                out.push(c);
            }
            b'<' => out.extend_from_slice(b"\\u003c"),
            b'>' => out.extend_from_slice(b"\\u003e"),
            b'&' => out.extend_from_slice(b"\\u0026"),
            0xe2 if raw.get(i) == Some(&0x80) && matches!(raw.get(i + 1), Some(0xa8 | 0xa9)) => {
                let last = if raw.get(i + 1) == Some(&0xa8) {
                    b'8'
                } else {
                    b'9'
                };
                out.extend_from_slice(b"\\u202");
                out.push(last);
                i += 2;
            }
            _ => out.push(c),
        }
    }
}

/// A JSON string as Go's encoding/json writes it (kube-apiserver's serializer): `<`, `>` and
/// `&` escaped as `\u003c`, `\u003e`, `\u0026` (its HTML-safe default), U+2028 and U+2029 as
/// `\u2028` and `\u2029`, control characters as `\n`, `\r`, `\t`, `\b`, `\f` or `\u00xx`.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    if s.bytes()
        .all(|c| (0x20..0x7f).contains(&c) && !matches!(c, b'"' | b'\\' | b'<' | b'>' | b'&'))
    {
        out.extend_from_slice(s.as_bytes());
    } else {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 4];
        for ch in s.chars() {
            match ch {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                '\u{8}' => out.extend_from_slice(b"\\b"),
                '\u{c}' => out.extend_from_slice(b"\\f"),
                '\u{2028}' => out.extend_from_slice(b"\\u2028"),
                '\u{2029}' => out.extend_from_slice(b"\\u2029"),
                c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&') => {
                    let n = c as u32;
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[(n >> 4) as usize & 0xf]);
                    out.push(HEX[n as usize & 0xf]);
                }
                c => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
            }
        }
    }
    out.push(b'"');
}

/// RFC 3339 in UTC, with six fractional digits when `micros` is given.
fn write_time(out: &mut Vec<u8>, secs: i64, micros: Option<i32>) {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut buf = itoa::Buffer::new();
    out.push(b'"');
    let ys = buf.format(y);
    for _ in ys.len()..4 {
        out.push(b'0');
    }
    out.extend_from_slice(ys.as_bytes());
    let two = |out: &mut Vec<u8>, sepc: u8, v: i64| {
        out.push(sepc);
        out.push(b'0' + (v / 10) as u8);
        out.push(b'0' + (v % 10) as u8);
    };
    two(out, b'-', m);
    two(out, b'-', d);
    two(out, b'T', sod / 3600);
    two(out, b':', sod / 60 % 60);
    two(out, b':', sod % 60);
    if let Some(us) = micros {
        out.push(b'.');
        let us = us.rem_euclid(1_000_000);
        let s = buf.format(us);
        for _ in s.len()..6 {
            out.push(b'0');
        }
        out.extend_from_slice(s.as_bytes());
    }
    out.extend_from_slice(b"Z\"");
}

/// (year, month, day) of a day count from 1970-01-01 (proleptic Gregorian; H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(secs: i64, micros: Option<i32>) -> String {
        let mut out = Vec::new();
        write_time(&mut out, secs, micros);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let w = |s: &str| {
            let mut out = Vec::new();
            write_str(&mut out, s);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(w("plain"), r#""plain""#);
        assert_eq!(w("a<b && c>d"), r#""a\u003cb \u0026\u0026 c\u003ed""#);
        assert_eq!(w("q\"\\\n\r\t"), r#""q\"\\\n\r\t""#);
        assert_eq!(w("\u{8}\u{c}\u{1}"), r#""\b\f\u0001""#);
        assert_eq!(w("é\u{2028}x\u{2029}"), "\"é\\u2028x\\u2029\"");
        assert_eq!(w("\u{7f}"), "\"\u{7f}\"");
    }

    #[test]
    fn embedded_json_is_compacted_in_order_with_html_escaped() {
        let mut out = Vec::new();
        write_compact_go(
            &mut out,
            "{ \"f:b\": {}, \"f:a\" : [1, \"x <y> & \\\"z\\\" \u{2028}\"] }".as_bytes(),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"f:b":{},"f:a":[1,"x \u003cy\u003e \u0026 \"z\" \u2028"]}"#
        );
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(time(0, None), "\"1970-01-01T00:00:00Z\"");
        assert_eq!(time(1_795_768_200, None), "\"2026-11-27T08:30:00Z\"");
        assert_eq!(
            time(951_782_400, Some(7)),
            "\"2000-02-29T00:00:00.000007Z\""
        );
        assert_eq!(time(-1, Some(999_999)), "\"1969-12-31T23:59:59.999999Z\"");
        assert_eq!(
            time(GO_ZERO_UNIX + 86_400, None),
            "\"0001-01-02T00:00:00Z\""
        );
    }

    #[test]
    fn floats_are_written_as_go_writes_them() {
        for (x, want) in [
            (0.0, "0"),
            (1.0, "1"),
            (1.5, "1.5"),
            (-3.25, "-3.25"),
            (100.0, "100"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-10, "1.5e-10"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.25e100, "1.25e+100"),
            (0.1, "0.1"),
        ] {
            let mut out = Vec::new();
            write_f64(&mut out, x);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{x}");
        }
    }

    #[test]
    fn strings_are_escaped_like_json() {
        let mut out = Vec::new();
        write_str(&mut out, "a\"b\\c\nd\u{1}é");
        let back: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, "a\"b\\c\nd\u{1}é");
        // Go's HTML-safe escapes, as kube-apiserver writes `self.size >= 0` in a CRD.
        let mut out = Vec::new();
        write_str(&mut out, "<a> & b\u{2028}\u{8}");
        assert_eq!(out, br#""\u003ca\u003e \u0026 b\u2028\b""#);
    }
}

//! The shape of each Kubernetes protobuf message, as the generated `tables.rs` describes it: for every
//! field its number, its JSON name, what it holds and when encoding/json leaves it out.

/// What one field holds (for maps and repeated fields: what each element holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
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
    /// `float64` (a fixed64 on the wire): JSON as Go's encoding/json writes floats.
    F64,
    /// A nested message: its index in the generated table of messages (`catalog::message`).
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
    /// A named `[]string` as a map value (certificates' `ExtraValue`): protobuf wraps it in a
    /// message {repeated string items = 1}; JSON is the bare list, `null` when empty (nil).
    StrList,
    /// apiextensions' `JSONSchemaPropsOrArray` {schema = 1, jSONSchemas = 2 (repeated)}, of the
    /// `JSONSchemaProps` message at this index: JSON is the list when it has items, else the
    /// schema (or `null`).
    OrArray(u16),
    /// `JSONSchemaPropsOrBool` {allows = 1, schema = 2}: JSON is the schema, or the boolean.
    OrBool(u16),
    /// `JSONSchemaPropsOrStringArray` {schema = 1, property = 2 (repeated string)}: JSON is the
    /// strings when there are any, else the schema (or `null`).
    OrStrings(u16),
}

/// How many values a field holds and how Go declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Card {
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
pub enum Key {
    /// Every Kubernetes map is keyed by a string type.
    Str,
}

/// When encoding/json leaves a field out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Omit {
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
pub struct Field {
    /// The field's number.
    pub num: u32,
    /// Its JSON name (empty: an inline struct).
    pub json: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// How many values, and how Go declares it.
    pub card: Card,
    /// When encoding/json leaves it out.
    pub omit: Omit,
}

/// One message: its Go name (for errors) and its fields in Go declaration order, which is the
/// order encoding/json writes them in.
#[derive(Debug)]
pub struct Message {
    /// The Go type's name.
    pub name: &'static str,
    /// Field number → 1 + index into `fields` (0: not a field of this message).
    pub by_num: &'static [u8],
    /// The fields, in Go declaration order.
    pub fields: &'static [Field],
}

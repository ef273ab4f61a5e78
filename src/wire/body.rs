//! The body of a GET or a LIST in its negotiated variant: the objects' shared JSON or protobuf as
//! they are, without managed fields, at another served version of a CRD, or converted (Table,
//! PartialObjectMetadata). The one place a read's body is chosen by format; a watch's frames are
//! its encoder's (`encoder.rs`).

use bytes::Bytes;

use crate::model::{EncodeError, Object, ResourceDef};
use crate::wire::convert::{self, IncludeObject};
use crate::wire::format::{Fields, Format};
use crate::wire::status::Status;
use crate::wire::{
    ObjectList, list_parts, list_parts_protobuf, list_parts_protobuf_with, list_parts_with,
};

/// What a read is answered in: the negotiated format, the fields its objects keep, a Table's row
/// objects, and whether its objects go out at another served version of their CRD than the
/// cache's (the definition it is given is then that version's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// The format.
    pub format: Format,
    /// The fields objects keep.
    pub fields: Fields,
    /// What a Table row's `object` holds.
    pub include: IncludeObject,
    /// The objects go out at the definition's version, not the cache's.
    pub other_version: bool,
}

impl Variant {
    /// A GET's body: the object, and the newline a JSON body ends with.
    ///
    /// # Errors
    /// 500 when the object cannot be written in this variant (never expected: stored objects are
    /// validated; a JSON-stored object its kind's protobuf message cannot hold).
    pub fn object(&self, def: &ResourceDef, obj: &Object) -> Result<Vec<Bytes>, Box<Status>> {
        let mut parts = vec![self.object_bytes(def, obj)?];
        self.end_line(&mut parts);
        Ok(parts)
    }

    /// A LIST's body pieces, and the newline a JSON body ends with.
    ///
    /// # Errors
    /// As [`object`](Variant::object), for any of its items.
    pub fn list(&self, def: &ResourceDef, list: &ObjectList) -> Result<Vec<Bytes>, Box<Status>> {
        let mut parts = self.list_parts(def, list)?;
        self.end_line(&mut parts);
        Ok(parts)
    }

    /// A JSON body ends with a newline, as Go's `json.Encoder` (kube-apiserver's serializer)
    /// writes it; protobuf bodies end where the message does.
    fn end_line(&self, parts: &mut Vec<Bytes>) {
        if !matches!(self.format, Format::Protobuf | Format::MetadataProtobuf) {
            parts.push(Bytes::from_static(b"\n"));
        }
    }

    fn object_bytes(&self, def: &ResourceDef, obj: &Object) -> Result<Bytes, Box<Status>> {
        let (format, include, fields) = (self.format, self.include, self.fields);
        if self.other_version {
            let json = convert::at_def_version(def, obj.json());
            return match (format, fields) {
                (Format::Json, Fields::All) => Ok(json),
                (Format::Json, Fields::WithoutManaged) => Ok(convert::json_without_managed(&json)),
                (Format::MetadataProtobuf, _) => {
                    convert::object_metadata_protobuf(def, obj, fields)
                }
                _ => convert::object(def, &json, format, include, fields),
            };
        }
        match (format, fields) {
            (Format::Json, Fields::All) => Ok(obj.json().clone()),
            (Format::Json, Fields::WithoutManaged) => Ok(convert::json_without_managed(obj.json())),
            (Format::Protobuf, Fields::All) => obj.protobuf_wire().cloned().map_err(encode_error),
            (Format::Protobuf, Fields::WithoutManaged) => {
                convert::protobuf_without_managed(obj).map_err(encode_error)
            }
            (Format::MetadataProtobuf, _) => convert::object_metadata_protobuf(def, obj, fields),
            _ => convert::object(def, obj.json(), format, include, fields),
        }
    }

    fn list_parts(&self, def: &ResourceDef, list: &ObjectList) -> Result<Vec<Bytes>, Box<Status>> {
        match (self.format, self.fields) {
            (Format::Json, Fields::All) if self.other_version => {
                Ok(list_parts_with(def, list, |o, parts| {
                    parts.push(convert::at_def_version(def, o.json()));
                }))
            }
            (Format::Json, Fields::WithoutManaged) if self.other_version => {
                Ok(list_parts_with(def, list, |o, parts| {
                    let json = convert::at_def_version(def, o.json());
                    parts.push(convert::json_without_managed(&json));
                }))
            }
            (Format::Json, Fields::All) => Ok(list_parts(def, list)),
            (Format::Json, Fields::WithoutManaged) => Ok(list_parts_with(
                def,
                list,
                convert::json_item_without_managed,
            )),
            (Format::Protobuf, Fields::All) => list_parts_protobuf(def, list).map_err(encode_error),
            (Format::Protobuf, Fields::WithoutManaged) => {
                list_parts_protobuf_with(def, list, convert::protobuf_item_without_managed)
                    .map_err(encode_error)
            }
            (format, fields) => convert::list(def, list, format, self.include, fields),
        }
    }
}

/// An object its kind's protobuf message cannot hold (stored as JSON of another shape): 500, as
/// upstream answers an object it cannot encode.
fn encode_error(e: EncodeError) -> Box<Status> {
    tracing::error!(error = %e, "protobuf encoding failed");
    Box::new(Status::new(500, "InternalError", e.to_string()))
}

//! Kubernetes `Status` objects, the body of every error answer and of a watch's ERROR event: in
//! JSON as encoding/json writes `metav1.Status`, and in protobuf.

use bytes::Bytes;

use crate::wire::go_json::string;

/// A `metav1.Status` of a failure: its code, reason, message and details.
#[derive(Debug, Clone)]
pub struct Status {
    /// The HTTP status code (`code`).
    pub code: u16,
    /// The machine-readable reason (`reason`: `NotFound`, `Expired`, ...).
    pub reason: &'static str,
    /// What a person reads (`message`).
    pub message: String,
    /// `details.retryAfterSeconds`, and the `Retry-After` header.
    pub retry_after: Option<u64>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `details.kind` and `details.name`, when the error names an object.
    pub details: Option<(String, String)>,
    /// `details.group`, when the error names an API group (Forbidden).
    pub group: String,
    /// `metadata.continue`: an expired continue's token for the rest of the list at the latest
    /// revision.
    pub continue_token: Option<String>,
}

/// One entry of `details.causes`: why, what, and which field (when one is at fault).
#[derive(Debug, Clone)]
pub struct Cause {
    /// The cause's reason (`FieldValueInvalid`, ...).
    pub reason: &'static str,
    /// What is wrong.
    pub message: String,
    /// The field at fault, as a path (`metadata.name`).
    pub field: Option<String>,
}

impl Status {
    /// A status with a code, reason and message.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Status {
        Status {
            code,
            reason,
            message: message.into(),
            retry_after: None,
            causes: Vec::new(),
            details: None,
            group: String::new(),
            continue_token: None,
        }
    }

    /// The `Status` object as JSON, as encoding/json writes `metav1.Status`: kind, apiVersion,
    /// metadata, status, message, reason, details (name, group, kind, causes (reason, message,
    /// field), retryAfterSeconds), code.
    pub fn json(&self) -> Bytes {
        let this = self;
        let mut out = Vec::with_capacity(160 + this.message.len());
        out.extend_from_slice(br#"{"kind":"Status","apiVersion":"v1","metadata":{"#);
        if let Some(c) = &this.continue_token {
            out.extend_from_slice(br#""continue":"#);
            string(&mut out, c);
        }
        out.extend_from_slice(br#"},"status":"Failure","message":"#);
        string(&mut out, &this.message);
        out.extend_from_slice(br#","reason":"#);
        string(&mut out, this.reason);
        let mut details: Vec<(&str, Vec<u8>)> = Vec::new();
        if let Some((kind, name)) = &this.details {
            // Forbidden (the only error with a group) leaves an empty name out, as Go's
            // omitempty does; the others keep the shape they always had.
            if !name.is_empty() || this.group.is_empty() && this.code != 403 {
                let mut v = Vec::new();
                string(&mut v, name);
                details.push(("name", v));
            }
            if !this.group.is_empty() {
                let mut v = Vec::new();
                string(&mut v, &this.group);
                details.push(("group", v));
            }
            let mut v = Vec::new();
            string(&mut v, kind);
            details.push(("kind", v));
        }
        if !this.causes.is_empty() {
            let mut v = vec![b'['];
            for (i, c) in this.causes.iter().enumerate() {
                if i > 0 {
                    v.push(b',');
                }
                v.extend_from_slice(br#"{"reason":"#);
                string(&mut v, c.reason);
                v.extend_from_slice(br#","message":"#);
                string(&mut v, &c.message);
                if let Some(f) = &c.field {
                    v.extend_from_slice(br#","field":"#);
                    string(&mut v, f);
                }
                v.push(b'}');
            }
            v.push(b']');
            details.push(("causes", v));
        }
        if let Some(s) = this.retry_after {
            details.push(("retryAfterSeconds", s.to_string().into_bytes()));
        }
        if !details.is_empty() {
            out.extend_from_slice(br#","details":{"#);
            for (i, (k, v)) in details.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(&mut out, k);
                out.push(b':');
                out.extend_from_slice(v);
            }
            out.push(b'}');
        }
        out.extend_from_slice(format!(r#","code":{}}}"#, this.code).as_bytes());
        Bytes::from(out)
    }
    /// The same `Status` in protobuf (its `k8s\0` envelope), as kube-apiserver writes errors to
    /// a client that negotiated protobuf.
    pub fn protobuf(&self) -> Vec<u8> {
        let json: serde_json::Value = serde_json::from_slice(&self.json()).unwrap_or_default();
        crate::wire::protobuf::status(&json)
    }
}

//! Kubernetes `Status` objects: every error the server returns, with the right code and reason.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use watchcache::Error;
use watchcache::wire::status::{Cause, Status};

/// An error answer: a Kubernetes `Status` with its HTTP code. Boxed: errors are rare and results
/// stay small.
#[derive(Debug, Clone)]
pub struct ApiError(Box<Status>);

impl ApiError {
    /// A status with a code, reason and message.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError(Box::new(Status::new(code, reason, message)))
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// 422 Invalid: the object (or the request's options) breaks validation rules, each cause
    /// `(reason, field, message)` naming its field, as upstream's `NewInvalid` reports them
    /// (`FieldValueInvalid`, `FieldValueForbidden`, `FieldValueNotSupported`).
    pub fn invalid(
        kind: &str,
        name: &str,
        causes: Vec<(&'static str, String, String)>,
    ) -> ApiError {
        let summary: Vec<String> = causes.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
        let message = match summary.as_slice() {
            [one] => format!("{kind} \"{name}\" is invalid: {one}"),
            many => format!("{kind} \"{name}\" is invalid: [{}]", many.join(", ")),
        };
        let mut e = ApiError::new(422, "Invalid", message);
        e.0.details = Some((kind.to_owned(), name.to_owned()));
        e.0.causes = causes
            .into_iter()
            .map(|(reason, field, message)| Cause {
                reason,
                message,
                field: Some(field),
            })
            .collect();
        e
    }

    /// 415 UnsupportedMediaType for a write body that is not JSON.
    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json, application/vnd.kubernetes.protobuf (built-in kinds) (got \"{content_type}\")"
            ),
        )
    }

    /// 401 Unauthorized: no valid credentials (upstream says no more than this).
    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden with upstream's message; `details` name the group, the resource (as
    /// `kind`) and the object's name, as upstream's `NewForbidden`.
    pub fn forbidden(message: String, group: String, resource: String, name: String) -> ApiError {
        let mut e = ApiError::new(403, "Forbidden", message);
        if !resource.is_empty() {
            e.0.details = Some((resource, name));
            e.0.group = group;
        }
        e
    }

    /// 404 NotFound for a path that names no resource (a `/status` of a resource without that
    /// subresource included), in kube-apiserver's router's words; the path is logged, not echoed.
    pub fn no_route(path: &str) -> ApiError {
        tracing::debug!(path, "no route");
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 404 NotFound for an object of a resource in an API group (`clusterroles.rbac.authorization.k8s.io
    /// "x" not found`), with upstream's `details`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
        let qualified = if group.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}.{group}")
        };
        let mut e = ApiError::new(404, "NotFound", format!("{qualified} \"{name}\" not found"));
        e.0.details = Some((resource.to_owned(), name.to_owned()));
        e.0.group = group.to_owned();
        e
    }

    /// The same error with one more `details.causes` entry.
    #[must_use]
    pub fn with_cause(mut self, reason: &'static str, message: String, field: &str) -> ApiError {
        self.0.causes.push(Cause {
            reason,
            message,
            field: Some(field.to_owned()),
        });
        self
    }

    /// 409 AlreadyExists.
    pub fn already_exists(plural: &str, name: &str) -> ApiError {
        let mut e = ApiError::new(
            409,
            "AlreadyExists",
            format!("{plural} \"{name}\" already exists"),
        );
        e.0.details = Some((plural.to_owned(), name.to_owned()));
        e
    }

    /// 409 Conflict for a failed resourceVersion precondition.
    pub fn conflict(plural: &str, name: &str) -> ApiError {
        let mut e = ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        );
        e.0.details = Some((plural.to_owned(), name.to_owned()));
        e
    }

    /// 409 Conflict with upstream's `NewConflict` message for `reason`, naming the group and
    /// `resource` (upstream's delete preconditions name the kind there).
    pub fn conflict_because(group: &str, resource: &str, name: &str, reason: &str) -> ApiError {
        let qualified = if group.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}.{group}")
        };
        let mut e = ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {reason}"),
        );
        e.0.details = Some((resource.to_owned(), name.to_owned()));
        e.0.group = group.to_owned();
        e
    }

    /// 413 RequestEntityTooLarge for a request body over `limit` bytes, with upstream's message.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::entity_too_large(format!("limit is {limit}"))
    }

    /// 413 RequestEntityTooLarge, as upstream's `NewRequestEntityTooLargeError` words it.
    pub fn entity_too_large(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: {message}"),
        )
    }

    /// 504 Timeout: the request did not complete within `--request-timeout`, as upstream's
    /// timeout filter answers (`NewTimeoutError`).
    pub fn request_timeout() -> ApiError {
        ApiError::new(
            504,
            "Timeout",
            "Timeout: request did not complete within the allotted timeout",
        )
    }

    /// 429 TooManyRequests with a Retry-After.
    pub fn too_many(message: impl Into<String>, retry_after: u64) -> ApiError {
        let mut e = ApiError::new(429, "TooManyRequests", message);
        e.0.retry_after = Some(retry_after);
        e
    }

    /// 429 while the server drains (upstream's `--shutdown-send-retry-after` answer, with
    /// kube-apiserver's words): the client retries at once, on a connection of its own, so on
    /// another replica behind a load balancer.
    pub fn shutting_down() -> ApiError {
        ApiError::too_many("The apiserver is shutting down, please try again later.", 1)
    }

    /// 429 for a request that arrives before the authorizer has read the RBAC caches: a 403
    /// then would be a denial the caller's permissions do not make (a replica just started
    /// behind a load balancer that has not taken it out yet gets such requests), and 429
    /// tells the client to retry, through another replica.
    pub fn authorizer_not_ready() -> ApiError {
        ApiError::too_many(
            "The authorizer has not read its RBAC objects yet, please try again later.",
            1,
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported on {path}"),
        )
    }

    /// 405 for a write to a server without an upstream API server to forward it to: writes are
    /// kube-apiserver's (its registry and admission), so the message says how to forward them.
    pub fn read_only(method: &str, path: &str) -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "{method} is not supported on {path}: this watchcache is a read-only cache; \
                 writes go to kube-apiserver (start watchcache with --apiserver-kubeconfig to \
                 forward them)"
            ),
        )
    }

    /// The same error with a Retry-After (seconds).
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u64) -> ApiError {
        self.0.retry_after = Some(seconds);
        self
    }

    /// Seconds a client should wait before retrying, when the error says so.
    pub fn retry_after(&self) -> Option<u64> {
        self.0.retry_after
    }

    /// The HTTP code.
    pub fn code(&self) -> u16 {
        self.0.code
    }

    /// The `Status` message.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The `Status` object as JSON (as `wire::status` writes it).
    pub fn status_json(&self) -> Bytes {
        self.0.json()
    }

    /// The error's `Status`.
    pub(crate) fn status(&self) -> &Status {
        &self.0
    }
}

impl From<Box<Status>> for ApiError {
    fn from(s: Box<Status>) -> ApiError {
        ApiError(s)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let mut out = ApiError::new(e.code(), e.reason(), e.to_string());
        out.0.retry_after = e.retry_after().map(|d| d.as_secs().max(1));
        if let Error::ContinueExpired { continue_token, .. } = &e {
            out.0.continue_token = Some(continue_token.clone());
        }
        if let Error::TooLargeResourceVersion { .. } = e {
            out.0.causes.push(Cause {
                reason: "ResourceVersionTooLarge",
                message: "Too large resource version".into(),
                field: None,
            });
        }
        if let Error::NotFound { kind, name } = &e {
            out.0.details = Some((kind.clone(), name.clone()));
        }
        out
    }
}

impl ApiError {
    /// The error as an HTTP answer, its `Status` in protobuf when `protobuf` (a client of a
    /// built-in resource that prefers protobuf: kube-apiserver writes its errors in the format
    /// negotiated for the request), else in JSON.
    pub fn into_response_as(self, protobuf: bool) -> Response {
        let code = StatusCode::from_u16(self.0.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let (content_type, body) = if protobuf {
            ("application/vnd.kubernetes.protobuf", self.0.protobuf())
        } else {
            // Ends with a newline, as Go's json.Encoder writes kube-apiserver's Status.
            let mut body = self.status_json().to_vec();
            body.push(b'\n');
            ("application/json", body)
        };
        let mut resp = (code, [(header::CONTENT_TYPE, content_type)], body).into_response();
        if let Some(s) = self.0.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.into_response_as(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_written_as_kube_apiserver_writes_them() {
        let e = ApiError::from(Error::NotFound {
            kind: "pods".into(),
            name: "x".into(),
        });
        assert_eq!(
            std::str::from_utf8(&e.status_json()).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#
        );
        let e = ApiError::invalid(
            "ConfigMap",
            "a<b",
            vec![(
                "FieldValueInvalid",
                "metadata.name".into(),
                "Invalid value".into(),
            )],
        );
        assert_eq!(
            std::str::from_utf8(&e.status_json()).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ConfigMap \"a\u003cb\" is invalid: metadata.name: Invalid value","reason":"Invalid","details":{"name":"a\u003cb","kind":"ConfigMap","causes":[{"reason":"FieldValueInvalid","message":"Invalid value","field":"metadata.name"}]},"code":422}"#
        );
        let e = ApiError::too_many("slow down", 3);
        assert!(std::str::from_utf8(&e.status_json()).unwrap().ends_with(
            r#""reason":"TooManyRequests","details":{"retryAfterSeconds":3},"code":429}"#
        ));
        // An expired continue: upstream's words, and the token for the rest in metadata.
        let e = ApiError::from(Error::ContinueExpired {
            requested: 3,
            oldest: 9,
            continue_token: "tok".into(),
        });
        let json = String::from_utf8(e.status_json().to_vec()).unwrap();
        assert!(
            json.starts_with(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{"continue":"tok"},"status":"Failure","message":"The provided continue parameter is too old"#
            ),
            "{json}"
        );
        assert!(
            json.ends_with(r#""reason":"Expired","code":410}"#),
            "{json}"
        );
        // In protobuf too: Status.metadata (1) is a ListMeta whose continue is field 3.
        let pb = e.status().protobuf();
        assert!(
            pb.windows(5).any(|w| w == [0x1a, 3, b't', b'o', b'k']),
            "{pb:?}"
        );
    }
}

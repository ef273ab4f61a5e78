//! The authentication chain, in upstream's order: the verified client certificate, then a
//! bearer token (static tokens, then service-account JWTs), then anonymous.
//!
//! A request that presents a bearer token nobody accepts is refused (401) even when anonymous
//! requests are allowed, as upstream: a client with a wrong token must learn so, not be served
//! as somebody else.

use std::sync::Arc;

use super::service_account::ServiceAccounts;
use super::token_file::TokenFile;
use super::user::User;
use super::x509;

/// How requests are authenticated.
#[derive(Debug, Default)]
pub struct Authenticator {
    /// Whether verified client certificates name users (`--client-ca-file` was given).
    pub client_certs: bool,
    /// `--token-auth-file`.
    pub tokens: Option<TokenFile>,
    /// `--service-account-key-file` and its issuer.
    pub service_accounts: Option<ServiceAccounts>,
    /// `--anonymous-auth`.
    pub anonymous: bool,
}

/// Why a request is not authenticated (the 401's log line; the client sees "Unauthorized").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unauthenticated(pub String);

impl Authenticator {
    /// The user of a request: its verified client certificate (DER), its `Authorization` header
    /// value.
    ///
    /// # Errors
    /// [`Unauthenticated`] when no method accepts the request and anonymous requests are off,
    /// or when a bearer token is invalid.
    pub fn authenticate(
        &self,
        client_cert: Option<&[u8]>,
        authorization: Option<&[u8]>,
    ) -> Result<Arc<User>, Unauthenticated> {
        if self.client_certs
            && let Some(der) = client_cert
        {
            match x509::user_of(der) {
                Ok(u) => return Ok(Arc::new(u)),
                // A verified certificate without a usable subject: the other methods may
                // still accept the request, as upstream's union does.
                Err(e) => tracing::debug!(error = %e, "client certificate names no user"),
            }
        }
        // Basic auth and other schemes are not supported (upstream removed basic auth): such a
        // request goes on as if it had no Authorization header.
        if let Some(token) = authorization.and_then(bearer) {
            if let Some(u) = self.tokens.as_ref().and_then(|t| t.user(token)) {
                return Ok(Arc::clone(u));
            }
            if let Some(sa) = &self.service_accounts {
                return sa
                    .verify(token)
                    .map_err(|e| Unauthenticated(format!("invalid bearer token: {e}")));
            }
            return Err(Unauthenticated("invalid bearer token".into()));
        }
        if self.anonymous {
            return Ok(Arc::new(User::anonymous()));
        }
        Err(Unauthenticated("no credentials".into()))
    }
}

/// The token of a `Bearer` authorization value, read as upstream's bearer-token authenticator
/// does: the value trimmed, split at single spaces into at most three parts, the scheme
/// case-insensitive, the token the second part. `Bearer  token` (two spaces) has an empty second
/// part: no token at all, so the request goes on as if it had none (anonymous, or 401), as
/// upstream refuses it; anything after the token is ignored, as upstream ignores it.
fn bearer(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authn(anonymous: bool) -> Authenticator {
        Authenticator {
            client_certs: true,
            tokens: Some(TokenFile::parse("t", "good,alice,1,admins\n").unwrap()),
            service_accounts: None,
            anonymous,
        }
    }

    #[test]
    fn chain_order_and_anonymous() {
        let a = authn(true);
        assert_eq!(
            a.authenticate(None, Some(b"Bearer good")).unwrap().name,
            "alice"
        );
        assert_eq!(
            a.authenticate(None, Some(b" bearer good ")).unwrap().name,
            "alice"
        );
        // Two spaces before the token: no bearer token (issue 20, item 15), as upstream.
        assert_eq!(
            a.authenticate(None, Some(b"Bearer  good")).unwrap().name,
            "system:anonymous"
        );
        assert_eq!(
            a.authenticate(None, Some(b"Bearer good trailing"))
                .unwrap()
                .name,
            "alice"
        );
        // A bad token is refused even with anonymous on.
        assert!(a.authenticate(None, Some(b"Bearer bad")).is_err());
        assert_eq!(a.authenticate(None, None).unwrap().name, "system:anonymous");
        // An unsupported scheme falls through to anonymous.
        assert_eq!(
            a.authenticate(None, Some(b"Basic YTpi")).unwrap().name,
            "system:anonymous"
        );
        let strict = authn(false);
        assert_eq!(
            strict.authenticate(None, None),
            Err(Unauthenticated("no credentials".into()))
        );
        assert!(strict.authenticate(None, Some(b"Bearer  good")).is_err());
        assert!(strict.authenticate(None, Some(b"Bearer\tgood")).is_err());
        // A certificate that does not parse: the token still counts.
        assert_eq!(
            strict
                .authenticate(Some(b"junk"), Some(b"Bearer good"))
                .unwrap()
                .name,
            "alice"
        );
    }
}

//! Service-account tokens: JWTs signed with a key of `--service-account-key-file` (RS256 or
//! ES256), issued by `--service-account-issuer`, for an audience of `--api-audiences` (by default
//! the issuer, as upstream). These are the projected tokens pods and controllers carry.
//!
//! Verified tokens are remembered briefly (see [`Verified`]): an RS256 verification costs tens
//! of microseconds, and a client sends the same token on every request.
//!
//! `--service-account-lookup` (on by default, as upstream's): on every request, not only when
//! the signature is verified, the token's service account must exist in the serviceaccounts
//! cache with the uid the token names and not have been deleted more than 60 s ago; so must the
//! Secret or Pod the token is bound to (or the Node, for a token bound to a node only), as
//! upstream's `validator.Validate`. A token of a deleted account is refused at once (401). With
//! lookup on and no serviceaccounts cache served, tokens are refused (fail closed).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::Mutex;
use serde::Deserialize;

use super::user::User;
use watchcache::Cache;
use watchcache::FieldPath;

/// How long a verified token is remembered at most (never past its `exp`).
const REMEMBER: Duration = Duration::from_secs(10);
/// Most remembered tokens; the memo is emptied when it is full (tokens are few per client).
const REMEMBER_MAX: usize = 8192;

/// One verification key.
#[derive(Clone)]
struct Key {
    alg: Algorithm,
    key: DecodingKey,
}

/// Verifies service-account JWTs.
pub struct ServiceAccounts {
    keys: Vec<Key>,
    issuers: Vec<String>,
    audiences: Vec<String>,
    verified: Mutex<HashMap<String, Verified>>,
    /// `--service-account-lookup`.
    lookup: bool,
    /// Where the lookups read, once the server knows its caches.
    objects: Option<Objects>,
}

/// The caches a token's objects are looked up in (those the server serves).
#[derive(Debug, Clone)]
pub(crate) struct Objects {
    service_accounts: Option<Cache>,
    secrets: Option<Cache>,
    pods: Option<Cache>,
    nodes: Option<Cache>,
    uid: FieldPath,
    deletion: FieldPath,
}

/// A token verified recently: its user and what it is bound to, until when it may be trusted
/// without verifying its signature again.
struct Verified {
    user: Arc<User>,
    bound: Arc<KubeClaims>,
    until: Instant,
}

/// How long after its deletion an object still vouches for a token bound to it (upstream's JWT
/// leeway).
const DELETION_LEEWAY: Duration = Duration::from_secs(60);

impl std::fmt::Debug for ServiceAccounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccounts")
            .field("keys", &self.keys.len())
            .field("issuers", &self.issuers)
            .field("audiences", &self.audiences)
            .field("lookup", &self.lookup)
            .finish()
    }
}

/// The claims read from a token.
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    exp: Option<u64>,
    #[serde(default)]
    sub: String,
    #[serde(rename = "kubernetes.io", default)]
    kubernetes: Option<KubeClaims>,
}

#[derive(Deserialize)]
struct KubeClaims {
    namespace: String,
    serviceaccount: Ref,
    /// The pod a projected token is bound to.
    #[serde(default)]
    pod: Option<Ref>,
    /// The secret a token is bound to.
    #[serde(default)]
    secret: Option<Ref>,
    /// The node a token is bound to (with a pod: informational).
    #[serde(default)]
    node: Option<Ref>,
}

#[derive(Deserialize)]
struct Ref {
    name: String,
    #[serde(default)]
    uid: String,
}

impl ServiceAccounts {
    /// Keys from PEM files (each may hold several public keys, RSA or EC P-256, or certificates'
    /// `PUBLIC KEY` blocks), the accepted issuers and audiences (empty: the issuers, as upstream).
    ///
    /// # Errors
    /// A file that cannot be read or holds no usable key, naming the file.
    pub fn load(
        key_files: &[impl AsRef<Path>],
        issuers: Vec<String>,
        audiences: Vec<String>,
    ) -> Result<ServiceAccounts, String> {
        let mut keys = Vec::new();
        for f in key_files {
            let f = f.as_ref();
            let text =
                std::fs::read(f).map_err(|e| format!("{}: cannot read: {e}", f.display()))?;
            let found = keys_of_pem(&text);
            if found.is_empty() {
                return Err(format!(
                    "{}: no RSA or EC P-256 public key in this file",
                    f.display()
                ));
            }
            keys.extend(found);
        }
        if issuers.is_empty() {
            return Err(
                "--service-account-issuer is required with --service-account-key-file".into(),
            );
        }
        let audiences = if audiences.is_empty() {
            issuers.clone()
        } else {
            audiences
        };
        Ok(ServiceAccounts {
            keys,
            issuers,
            audiences,
            verified: Mutex::new(HashMap::new()),
            lookup: true,
            objects: None,
        })
    }

    /// `--service-account-lookup=false`: a verified token is accepted without looking its
    /// service account or bound objects up.
    #[must_use]
    pub fn without_lookup(mut self) -> ServiceAccounts {
        self.lookup = false;
        self
    }

    /// The caches lookups read (the server's served resources).
    pub(crate) fn look_up_in(&mut self, served: &[Cache]) {
        let find = |plural: &str| {
            served
                .iter()
                .find(|c| c.definition().group.is_empty() && c.definition().plural == plural)
                .cloned()
        };
        let (Ok(uid), Ok(deletion)) = (
            FieldPath::parse("metadata.uid"),
            FieldPath::parse("metadata.deletionTimestamp"),
        ) else {
            return;
        };
        let objects = Objects {
            service_accounts: find("serviceaccounts"),
            secrets: find("secrets"),
            pods: find("pods"),
            nodes: find("nodes"),
            uid,
            deletion,
        };
        if self.lookup && objects.service_accounts.is_none() {
            tracing::warn!(
                "--service-account-lookup is on but serviceaccounts are not served: every service-account token is refused"
            );
        }
        self.objects = Some(objects);
    }

    /// The user of a token, verified: signature by one of the keys, `iss`, `aud`, `exp` and
    /// `nbf` (60 s of leeway, as upstream), and the Kubernetes claims. `None` when the token is
    /// not one of ours; `Some(Err)` when it is and is invalid.
    pub fn verify(&self, token: &str) -> Result<Arc<User>, String> {
        let (user, bound) = self.verified(token)?;
        if self.lookup {
            self.check_bound(&bound)?;
        }
        Ok(user)
    }

    /// The token's user and claims, from the memo or verified now.
    fn verified(&self, token: &str) -> Result<(Arc<User>, Arc<KubeClaims>), String> {
        let now = Instant::now();
        if let Some(v) = self.verified.lock().get(token)
            && v.until > now
        {
            return Ok((Arc::clone(&v.user), Arc::clone(&v.bound)));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("not a JWT: {e}"))?;
        let mut last = String::from("no key for this token's algorithm");
        for k in self.keys.iter().filter(|k| k.alg == header.alg) {
            let mut v = Validation::new(k.alg);
            v.set_issuer(&self.issuers);
            v.set_audience(&self.audiences);
            v.validate_nbf = true;
            v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            match jsonwebtoken::decode::<Claims>(token, &k.key, &v) {
                Ok(data) => {
                    let user = Arc::new(user_of(&data.claims)?);
                    let bound = Arc::new(
                        data.claims
                            .kubernetes
                            .ok_or("the token has no kubernetes.io claims")?,
                    );
                    let mut until = now + REMEMBER;
                    if let Some(exp) = data.claims.exp {
                        let secs = exp.saturating_sub(unix_now());
                        until = until.min(now + Duration::from_secs(secs));
                    }
                    let mut memo = self.verified.lock();
                    if memo.len() >= REMEMBER_MAX {
                        memo.clear();
                    }
                    memo.insert(
                        token.to_owned(),
                        Verified {
                            user: Arc::clone(&user),
                            bound: Arc::clone(&bound),
                            until,
                        },
                    );
                    return Ok((user, bound));
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }
}

impl ServiceAccounts {
    /// Upstream's lookups: the service account, and the secret, pod or node the token is bound
    /// to, each present with the token's uid and not deleted (beyond the leeway).
    fn check_bound(&self, k: &KubeClaims) -> Result<(), String> {
        let Some(o) = &self.objects else {
            return Err("service account lookup: the server's caches are not known".into());
        };
        let ns = k.namespace.as_str();
        let live = |cache: &Option<Cache>, what: &str, namespace: Option<&str>, r: &Ref| {
            let at = match namespace {
                Some(ns) => format!("{ns}/{}", r.name),
                None => r.name.clone(),
            };
            let cache = cache
                .as_ref()
                .ok_or_else(|| format!("{what} {at}: {what}s are not served, cannot look it up"))?;
            let obj = cache
                .peek(namespace, &r.name)
                .ok_or_else(|| format!("{what} {at} not found"))?;
            let uid = obj.field(&o.uid).unwrap_or_default();
            if uid != r.uid {
                return Err(format!(
                    "{what} UID ({uid}) does not match claim ({})",
                    r.uid
                ));
            }
            let deleted = obj
                .field(&o.deletion)
                .filter(|t| !t.is_empty())
                .and_then(|t| humantime::parse_rfc3339_weak(&t).ok());
            if deleted.is_some_and(|t| {
                t.checked_add(DELETION_LEEWAY)
                    .is_some_and(|limit| limit < SystemTime::now())
            }) {
                return Err(format!("{what} {at} has been deleted"));
            }
            Ok(())
        };
        live(
            &o.service_accounts,
            "service account",
            Some(ns),
            &k.serviceaccount,
        )?;
        if let Some(s) = &k.secret {
            live(&o.secrets, "secret", Some(ns), s)?;
        }
        match (&k.pod, &k.node) {
            (Some(p), _) => live(&o.pods, "pod", Some(ns), p)?,
            (None, Some(n)) => live(&o.nodes, "node", None, n)?,
            (None, None) => {}
        }
        Ok(())
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts` and
/// `system:serviceaccounts:<ns>`.
fn user_of(claims: &Claims) -> Result<User, String> {
    let k = claims
        .kubernetes
        .as_ref()
        .ok_or("the token has no kubernetes.io claims")?;
    let name = format!(
        "system:serviceaccount:{}:{}",
        k.namespace, k.serviceaccount.name
    );
    if claims.sub != name {
        return Err(format!(
            "the token's subject {:?} is not its service account {name:?}",
            claims.sub
        ));
    }
    Ok(User::authenticated(
        name,
        k.serviceaccount.uid.clone(),
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", k.namespace),
        ],
    ))
}

/// Every usable key of a PEM file's blocks: each `PUBLIC KEY` block as RSA or EC, `RSA PUBLIC
/// KEY` as RSA.
fn keys_of_pem(text: &[u8]) -> Vec<Key> {
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    for block in text.split("-----BEGIN ").skip(1) {
        let pem = format!("-----BEGIN {block}");
        let pem = pem.as_bytes();
        if block.starts_with("RSA PUBLIC KEY") || block.starts_with("PUBLIC KEY") {
            if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
                out.push(Key {
                    alg: Algorithm::RS256,
                    key,
                });
                continue;
            }
            if let Ok(key) = DecodingKey::from_ec_pem(pem) {
                out.push(Key {
                    alg: Algorithm::ES256,
                    key,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    // Generated once with openssl for these tests only (genrsa 2048; ecparam prime256v1).
    const RSA_PRIVATE: &str = include_str!("testdata/sa-rsa.key");
    const RSA_PUBLIC: &str = include_str!("testdata/sa-rsa.pub");
    const EC_PRIVATE: &str = include_str!("testdata/sa-ec.key");
    const EC_PUBLIC: &str = include_str!("testdata/sa-ec.pub");
    const OTHER_RSA_PUBLIC: &str = include_str!("testdata/sa-rsa-other.pub");

    fn sa(keys: &[&str]) -> ServiceAccounts {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let p = dir.path().join(format!("{i}.pem"));
                std::fs::write(&p, k).unwrap();
                p
            })
            .collect();
        ServiceAccounts::load(&files, vec!["https://issuer".into()], vec![])
            .unwrap()
            .without_lookup()
    }

    fn claims(iss: &str, exp_in: i64) -> serde_json::Value {
        let now = unix_now() as i64;
        json!({
            "iss": iss, "aud": ["https://issuer"], "exp": now + exp_in, "iat": now, "nbf": now,
            "sub": "system:serviceaccount:ns1:builder",
            "kubernetes.io": {"namespace": "ns1", "serviceaccount": {"name": "builder", "uid": "u-1"}}
        })
    }

    fn rs(c: &serde_json::Value) -> String {
        let key = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), c, &key).unwrap()
    }

    fn es(c: &serde_json::Value) -> String {
        let key = EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).unwrap();
        jsonwebtoken::encode(&Header::new(Algorithm::ES256), c, &key).unwrap()
    }

    #[test]
    fn rs256_and_es256_tokens_name_their_service_account() {
        let sa = sa(&[&format!("{RSA_PUBLIC}{EC_PUBLIC}")]);
        for token in [
            rs(&claims("https://issuer", 600)),
            es(&claims("https://issuer", 600)),
        ] {
            let u = sa.verify(&token).unwrap();
            assert_eq!(u.name, "system:serviceaccount:ns1:builder");
            assert_eq!(u.uid, "u-1");
            assert_eq!(
                u.groups,
                [
                    "system:serviceaccounts",
                    "system:serviceaccounts:ns1",
                    "system:authenticated"
                ]
            );
            // Remembered: the second verification answers the same.
            assert_eq!(sa.verify(&token).unwrap(), u);
        }
    }

    #[test]
    fn expired_wrong_issuer_wrong_audience_and_wrong_key_are_refused() {
        let sa = sa(&[RSA_PUBLIC, EC_PUBLIC]);
        let e = sa
            .verify(&rs(&claims("https://issuer", -3600)))
            .unwrap_err();
        assert!(e.contains("xpired"), "{e}");
        let e = sa.verify(&rs(&claims("https://other", 600))).unwrap_err();
        assert!(e.contains("ssuer"), "{e}");
        let mut c = claims("https://issuer", 600);
        c["aud"] = json!(["someone-else"]);
        let e = sa.verify(&rs(&c)).unwrap_err();
        assert!(e.contains("udience"), "{e}");
        let mut c = claims("https://issuer", 600);
        c["sub"] = json!("system:serviceaccount:ns1:admin");
        assert!(sa.verify(&rs(&c)).unwrap_err().contains("subject"));
        let only_other = self::sa(&[OTHER_RSA_PUBLIC]);
        let e = only_other
            .verify(&rs(&claims("https://issuer", 600)))
            .unwrap_err();
        assert!(e.contains("ignature"), "{e}");
        // An ES256 token with only RSA keys: no key for it.
        let rsa_only = self::sa(&[RSA_PUBLIC]);
        assert!(
            rsa_only
                .verify(&es(&claims("https://issuer", 600)))
                .is_err()
        );
        assert!(sa.verify("not.a.jwt").is_err());
    }

    #[test]
    fn lookups_need_the_account_with_its_uid_and_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.pem");
        std::fs::write(&p, RSA_PUBLIC).unwrap();
        let token = rs(&claims("https://issuer", 600));
        let mut looked_up =
            ServiceAccounts::load(&[&p], vec!["https://issuer".into()], vec![]).unwrap();
        // No caches known, or no serviceaccounts served: refused, not waved through.
        assert!(looked_up.verify(&token).is_err());
        looked_up.look_up_in(&[]);
        let e = looked_up.verify(&token).unwrap_err();
        assert!(e.contains("not served"), "{e}");
        let (cache, writer) = Cache::new(
            watchcache::ResourceDef::builtin("serviceaccounts").unwrap(),
            watchcache::CacheConfig::default(),
        );
        let src = watchcache::MemorySource::new(writer, 1, []);
        looked_up.look_up_in(std::slice::from_ref(&cache));
        assert!(looked_up.verify(&token).unwrap_err().contains("not found"));
        let account = |uid: &str| {
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "builder", "namespace": "ns1", "uid": uid}})
            .to_string()
        };
        src.put("/registry/serviceaccounts/ns1/builder", account("u-1"))
            .unwrap();
        assert_eq!(
            looked_up.verify(&token).unwrap().name,
            "system:serviceaccount:ns1:builder"
        );
        // Recreated: another uid. The remembered signature does not save the token.
        src.put("/registry/serviceaccounts/ns1/builder", account("u-2"))
            .unwrap();
        let e = looked_up.verify(&token).unwrap_err();
        assert!(e.contains("does not match claim"), "{e}");
        src.delete("/registry/serviceaccounts/ns1/builder");
        assert!(looked_up.verify(&token).is_err());
    }

    #[test]
    fn key_files_without_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.pem");
        std::fs::write(&p, "nothing here").unwrap();
        let e = ServiceAccounts::load(&[&p], vec!["i".into()], vec![]).unwrap_err();
        assert!(e.contains("no RSA or EC"), "{e}");
    }
}

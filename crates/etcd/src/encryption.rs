//! Encryption at rest, as kube-apiserver does it: an `EncryptionConfiguration`
//! (`apiserver.config.k8s.io/v1`) names, per resource, providers tried in order.
//!
//! - Each key of a provider is one prefix, `k8s:enc:<provider>:v1:<key name>:`, followed by:
//!   aescbc: a 16-byte IV and AES-CBC ciphertext with PKCS#7 padding; aesgcm: a 12-byte nonce and
//!   AES-GCM ciphertext + tag, with the etcd key as authenticated data; secretbox: a 24-byte nonce
//!   and NaCl secretbox (tag, then XSalsa20 ciphertext). `identity` stores values as they are.
//! - Reading tries every provider key whose prefix the value has, in order; identity takes values
//!   without the `k8s:enc:` prefix. Writing uses the first provider (its first key).
//! - KMS providers need a plugin over gRPC that watchcache does not run: configuring one is a
//!   start-up error naming it.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use aes_gcm::aead::rand_core::RngCore;
use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
use serde::Deserialize;

use watchcache::ResourceDef;

/// The prefix of every encrypted value.
const ENCRYPTED: &[u8] = b"k8s:enc:";

/// Why an encryption configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncryptionError {
    /// The file could not be read.
    #[error("encryption provider config {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid configuration.
    #[error("encryption provider config {path}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The configuration names KMS providers, which need a KMS plugin watchcache does not run.
    #[error(
        "encryption provider config {path}: KMS providers are not supported by watchcache: {names}"
    )]
    Kms {
        /// The file.
        path: String,
        /// The KMS providers, by name and the resources they are configured for.
        names: String,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceConfig>,
}

#[derive(Deserialize)]
struct ResourceConfig {
    resources: Vec<String>,
    providers: Vec<ProviderConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProviderConfig {
    aescbc: Option<KeysConfig>,
    aesgcm: Option<KeysConfig>,
    secretbox: Option<KeysConfig>,
    identity: Option<serde::de::IgnoredAny>,
    kms: Option<KmsConfig>,
}

#[derive(Deserialize)]
struct KeysConfig {
    keys: Vec<KeyConfig>,
}

#[derive(Deserialize)]
struct KeyConfig {
    name: String,
    secret: String,
}

#[derive(Deserialize)]
struct KmsConfig {
    #[serde(default)]
    name: String,
}

type Aes192Gcm = aes_gcm::AesGcm<aes::Aes192, aes_gcm::aead::consts::U12>;

/// One key of one provider.
enum Cipher {
    Identity,
    AesCbc128(Box<[u8; 16]>),
    AesCbc192(Box<[u8; 24]>),
    AesCbc256(Box<[u8; 32]>),
    AesGcm128(Box<aes_gcm::Aes128Gcm>),
    AesGcm192(Box<Aes192Gcm>),
    AesGcm256(Box<aes_gcm::Aes256Gcm>),
    SecretBox(Box<crypto_secretbox::XSalsa20Poly1305>),
}

/// A provider key with its prefix, e.g. `k8s:enc:aesgcm:v1:key2:`.
struct Provider {
    prefix: Vec<u8>,
    /// `aescbc/key1`, for errors.
    name: String,
    cipher: Cipher,
}

/// The providers of one resource, in order: the first writes, all read.
pub struct Transformer {
    providers: Vec<Provider>,
}

impl std::fmt::Debug for Transformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_list()
            .entries(self.providers.iter().map(|p| &p.name))
            .finish()
    }
}

/// A loaded `EncryptionConfiguration`: resource patterns and their providers, in file order.
#[derive(Debug, Default)]
pub struct Encryption {
    rules: Vec<(Vec<String>, Arc<Transformer>)>,
}

impl Encryption {
    /// Loads an `EncryptionConfiguration` file (YAML or JSON).
    ///
    /// # Errors
    /// Unreadable file, wrong apiVersion or kind, a provider with no or several types, bad key
    /// material, or KMS providers.
    pub fn load(path: &Path) -> Result<Encryption, EncryptionError> {
        let text = std::fs::read_to_string(path).map_err(|source| EncryptionError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Encryption::parse(&text, &path.display().to_string())
    }

    /// Parses an `EncryptionConfiguration`; `path` names it in errors.
    ///
    /// # Errors
    /// As [`load`](Encryption::load).
    pub fn parse(text: &str, path: &str) -> Result<Encryption, EncryptionError> {
        let invalid = |reason: String| EncryptionError::Invalid {
            path: path.to_owned(),
            reason,
        };
        let file: ConfigFile = serde_saphyr::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if file.api_version != "apiserver.config.k8s.io/v1"
            || file.kind != "EncryptionConfiguration"
        {
            return Err(invalid(format!(
                "expected apiVersion apiserver.config.k8s.io/v1, kind EncryptionConfiguration; got {}, {}",
                file.api_version, file.kind
            )));
        }
        let kms: Vec<String> =
            file.resources
                .iter()
                .flat_map(|r| {
                    r.providers.iter().filter_map(|p| p.kms.as_ref()).map(|k| {
                        format!("kms provider \"{}\" for {}", k.name, r.resources.join(","))
                    })
                })
                .collect();
        if !kms.is_empty() {
            return Err(EncryptionError::Kms {
                path: path.to_owned(),
                names: kms.join("; "),
            });
        }
        let mut rules = Vec::new();
        for (i, r) in file.resources.into_iter().enumerate() {
            if r.resources.is_empty() || r.providers.is_empty() {
                return Err(invalid(format!(
                    "resources[{i}] needs at least one resource and one provider"
                )));
            }
            let mut providers = Vec::new();
            for (j, p) in r.providers.into_iter().enumerate() {
                let at = format!("resources[{i}].providers[{j}]");
                let set = [
                    p.aescbc.is_some(),
                    p.aesgcm.is_some(),
                    p.secretbox.is_some(),
                    p.identity.is_some(),
                ];
                if set.iter().filter(|s| **s).count() != 1 {
                    return Err(invalid(format!(
                        "{at} must name exactly one of aescbc, aesgcm, secretbox, identity"
                    )));
                }
                if p.identity.is_some() {
                    providers.push(Provider {
                        prefix: Vec::new(),
                        name: "identity".into(),
                        cipher: Cipher::Identity,
                    });
                    continue;
                }
                let (kind, keys) = match (p.aescbc, p.aesgcm, p.secretbox) {
                    (Some(k), _, _) => ("aescbc", k),
                    (_, Some(k), _) => ("aesgcm", k),
                    (_, _, Some(k)) => ("secretbox", k),
                    _ => unreachable!("exactly one provider type is set"),
                };
                if keys.keys.is_empty() {
                    return Err(invalid(format!("{at}.{kind} has no keys")));
                }
                for key in keys.keys {
                    let secret = STANDARD.decode(key.secret.trim()).map_err(|e| {
                        invalid(format!(
                            "{at}.{kind} key {}: secret is not base64: {e}",
                            key.name
                        ))
                    })?;
                    let cipher = cipher(kind, &secret).ok_or_else(|| {
                        invalid(format!(
                            "{at}.{kind} key {}: a {}-byte key is not valid for {kind}",
                            key.name,
                            secret.len()
                        ))
                    })?;
                    if key.name.is_empty() || key.name.contains(':') {
                        return Err(invalid(format!(
                            "{at}.{kind}: key name \"{}\" must be non-empty without ':'",
                            key.name
                        )));
                    }
                    providers.push(Provider {
                        prefix: format!("k8s:enc:{kind}:v1:{}:", key.name).into_bytes(),
                        name: format!("{kind}/{}", key.name),
                        cipher,
                    });
                }
            }
            rules.push((r.resources, Arc::new(Transformer { providers })));
        }
        Ok(Encryption { rules })
    }

    /// The providers of a resource: the first rule naming it (`plural.group`, `plural` for the
    /// core group, `*.group`, `*.` for every core resource, `*.*` for all), or `None` when it is
    /// stored as it is.
    pub fn for_resource(&self, def: &ResourceDef) -> Option<Arc<Transformer>> {
        let exact = if def.group.is_empty() {
            def.plural.clone()
        } else {
            format!("{}.{}", def.plural, def.group)
        };
        let group_wildcard = format!("*.{}", def.group);
        self.rules
            .iter()
            .find(|(names, _)| {
                names
                    .iter()
                    .any(|n| *n == exact || *n == group_wildcard || n == "*.*")
            })
            .map(|(_, t)| Arc::clone(t))
    }
}

fn cipher(kind: &str, key: &[u8]) -> Option<Cipher> {
    Some(match (kind, key.len()) {
        ("aescbc", 16) => Cipher::AesCbc128(Box::new(key.try_into().ok()?)),
        ("aescbc", 24) => Cipher::AesCbc192(Box::new(key.try_into().ok()?)),
        ("aescbc", 32) => Cipher::AesCbc256(Box::new(key.try_into().ok()?)),
        ("aesgcm", 16) => {
            Cipher::AesGcm128(Box::new(aes_gcm::Aes128Gcm::new_from_slice(key).ok()?))
        }
        ("aesgcm", 24) => Cipher::AesGcm192(Box::new(Aes192Gcm::new_from_slice(key).ok()?)),
        ("aesgcm", 32) => {
            Cipher::AesGcm256(Box::new(aes_gcm::Aes256Gcm::new_from_slice(key).ok()?))
        }
        ("secretbox", 32) => Cipher::SecretBox(Box::new(
            crypto_secretbox::XSalsa20Poly1305::new_from_slice(key).ok()?,
        )),
        _ => return None,
    })
}

fn cbc_decrypt<C>(key: &[u8], data: &[u8]) -> Result<Vec<u8>, String>
where
    C: cbc::cipher::BlockDecrypt + cbc::cipher::BlockCipher + cbc::cipher::KeyInit,
    cbc::Decryptor<C>: KeyIvInit,
{
    if data.len() < 16 || !data.len().is_multiple_of(16) {
        return Err("ciphertext is not a whole number of blocks after the IV".into());
    }
    let (iv, ct) = data.split_at(16);
    cbc::Decryptor::<C>::new_from_slices(key, iv)
        .map_err(|e| e.to_string())?
        .decrypt_padded_vec_mut::<Pkcs7>(ct)
        .map_err(|_| "bad padding (wrong key?)".to_owned())
}

fn cbc_encrypt<C>(key: &[u8], data: &[u8]) -> Vec<u8>
where
    C: cbc::cipher::BlockEncrypt + cbc::cipher::BlockCipher + cbc::cipher::KeyInit,
    cbc::Encryptor<C>: KeyIvInit,
{
    let mut iv = [0u8; 16];
    OsRng.fill_bytes(&mut iv);
    let ct = cbc::Encryptor::<C>::new_from_slices(key, &iv)
        .unwrap_or_else(|_| unreachable!("key and IV sizes were checked at load"))
        .encrypt_padded_vec_mut::<Pkcs7>(data);
    let mut out = iv.to_vec();
    out.extend_from_slice(&ct);
    out
}

fn aead_open<A: Aead + AeadCore>(
    a: &A,
    nonce_len: usize,
    data: &[u8],
    aad: &[u8],
) -> Result<Vec<u8>, String> {
    if data.len() < nonce_len {
        return Err("shorter than its nonce".into());
    }
    let (nonce, ct) = data.split_at(nonce_len);
    a.decrypt(
        aes_gcm::aead::generic_array::GenericArray::from_slice(nonce),
        Payload { msg: ct, aad },
    )
    .map_err(|_| "authentication failed (wrong key, or moved from another key?)".to_owned())
}

fn aead_seal<A: Aead + AeadCore>(a: &A, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
    let nonce = A::generate_nonce(&mut OsRng);
    let ct = a
        .encrypt(&nonce, Payload { msg: data, aad })
        .map_err(|_| "encryption failed".to_owned())?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&ct);
    Ok(out)
}

impl Provider {
    fn open(&self, key: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        match &self.cipher {
            Cipher::Identity => Ok(data.to_vec()),
            Cipher::AesCbc128(k) => cbc_decrypt::<aes::Aes128>(&k[..], data),
            Cipher::AesCbc192(k) => cbc_decrypt::<aes::Aes192>(&k[..], data),
            Cipher::AesCbc256(k) => cbc_decrypt::<aes::Aes256>(&k[..], data),
            Cipher::AesGcm128(a) => aead_open(&**a, 12, data, key.as_bytes()),
            Cipher::AesGcm192(a) => aead_open(&**a, 12, data, key.as_bytes()),
            Cipher::AesGcm256(a) => aead_open(&**a, 12, data, key.as_bytes()),
            Cipher::SecretBox(a) => aead_open(&**a, 24, data, &[]),
        }
    }

    fn seal(&self, key: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        let body = match &self.cipher {
            Cipher::Identity => return Ok(data.to_vec()),
            Cipher::AesCbc128(k) => cbc_encrypt::<aes::Aes128>(&k[..], data),
            Cipher::AesCbc192(k) => cbc_encrypt::<aes::Aes192>(&k[..], data),
            Cipher::AesCbc256(k) => cbc_encrypt::<aes::Aes256>(&k[..], data),
            Cipher::AesGcm128(a) => aead_seal(&**a, data, key.as_bytes())?,
            Cipher::AesGcm192(a) => aead_seal(&**a, data, key.as_bytes())?,
            Cipher::AesGcm256(a) => aead_seal(&**a, data, key.as_bytes())?,
            Cipher::SecretBox(a) => aead_seal(&**a, data, &[])?,
        };
        let mut out = self.prefix.clone();
        out.extend_from_slice(&body);
        Ok(out)
    }
}

impl Transformer {
    /// The stored value of `key` as plain bytes: decrypted by the first provider key whose prefix
    /// it has and that accepts it.
    ///
    /// # Errors
    /// No provider could read it: the providers tried and why, or that no prefix matched.
    pub fn decrypt<'v>(&self, key: &str, value: &'v [u8]) -> Result<Cow<'v, [u8]>, String> {
        let mut tried = Vec::new();
        for p in &self.providers {
            if let Cipher::Identity = p.cipher {
                if !value.starts_with(ENCRYPTED) {
                    return Ok(Cow::Borrowed(value));
                }
                continue;
            }
            if let Some(data) = value.strip_prefix(p.prefix.as_slice()) {
                match p.open(key, data) {
                    Ok(plain) => return Ok(Cow::Owned(plain)),
                    Err(e) => tried.push(format!("{}: {e}", p.name)),
                }
            }
        }
        if tried.is_empty() {
            let shown = value
                .iter()
                .position(|&b| b == b':')
                .and_then(|_| {
                    // `k8s:enc:<provider>:v1:<name>:` when the value has that shape.
                    let mut colons = 0;
                    value.iter().position(|&b| {
                        colons += usize::from(b == b':');
                        colons == 5
                    })
                })
                .map(|end| String::from_utf8_lossy(&value[..=end]).into_owned());
            return Err(match shown {
                Some(prefix) if value.starts_with(ENCRYPTED) => format!(
                    "encrypted with {prefix}, which no configured provider key matches (configured: {})",
                    self.names()
                ),
                _ => format!(
                    "not encrypted, and identity is not among the providers ({})",
                    self.names()
                ),
            });
        }
        Err(format!("cannot decrypt: {}", tried.join("; ")))
    }

    /// `value` as stored for `key`: encrypted with the first provider.
    ///
    /// # Errors
    /// The cipher failed (never expected).
    pub fn encrypt(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, String> {
        match self.providers.first() {
            Some(p) => p.seal(key, value),
            None => Ok(value.to_vec()),
        }
    }

    fn names(&self) -> String {
        self.providers
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "/registry/secrets/default/db-credentials";

    fn vector(name: &str) -> Vec<u8> {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/kubernetes-protobuf/"
        );
        std::fs::read(format!("{dir}{name}")).unwrap()
    }

    fn config() -> Encryption {
        let text = String::from_utf8(vector("encryption-config.yaml")).unwrap();
        Encryption::parse(&text, "encryption-config.yaml").unwrap()
    }

    fn secrets() -> Arc<Transformer> {
        config()
            .for_resource(&ResourceDef::builtin("secrets").unwrap())
            .unwrap()
    }

    #[test]
    fn upstreams_encrypted_secrets_decrypt_to_the_stored_value() {
        let t = secrets();
        let plain = vector("secret.etcd.bin");
        for p in ["aescbc", "aesgcm", "secretbox"] {
            let value = vector(&format!("secret.{p}.etcd.bin"));
            assert!(value.starts_with(format!("k8s:enc:{p}:v1:").as_bytes()));
            assert_eq!(&*t.decrypt(KEY, &value).unwrap(), &plain[..], "{p}");
        }
        // identity reads unencrypted values as they are.
        assert!(matches!(t.decrypt(KEY, &plain).unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn aesgcm_binds_the_etcd_key() {
        let t = secrets();
        let e = t
            .decrypt(
                "/registry/secrets/default/other",
                &vector("secret.aesgcm.etcd.bin"),
            )
            .unwrap_err();
        assert!(
            e.contains("aesgcm/key2") && e.contains("authentication failed"),
            "{e}"
        );
        // aescbc and secretbox do not.
        for p in ["aescbc", "secretbox"] {
            let v = vector(&format!("secret.{p}.etcd.bin"));
            assert!(t.decrypt("/registry/secrets/default/other", &v).is_ok());
        }
    }

    #[test]
    fn writes_use_the_first_provider_and_read_back() {
        let t = secrets();
        let plain = vector("secret.etcd.bin");
        let stored = t.encrypt(KEY, &plain).unwrap();
        assert!(stored.starts_with(b"k8s:enc:aescbc:v1:key1:"));
        assert_eq!(&*t.decrypt(KEY, &stored).unwrap(), &plain[..]);
        // Every provider round-trips, through a config with it first.
        for first in ["aesgcm", "secretbox"] {
            let key = |p: &str| match p {
                "aesgcm" => "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=",
                _ => "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=",
            };
            let text = format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - {first}:\n          keys:\n            - name: k\n              secret: {}\n      - identity: {{}}\n",
                key(first)
            );
            let t = Encryption::parse(&text, "x")
                .unwrap()
                .for_resource(&ResourceDef::builtin("secrets").unwrap())
                .unwrap();
            let stored = t.encrypt(KEY, &plain).unwrap();
            assert!(
                stored.starts_with(format!("k8s:enc:{first}:v1:k:").as_bytes()),
                "{first}"
            );
            assert_eq!(&*t.decrypt(KEY, &stored).unwrap(), &plain[..], "{first}");
        }
    }

    #[test]
    fn wrong_keys_and_unknown_prefixes_are_errors_naming_them() {
        let other = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: ["secrets"]
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=
      - secretbox:
          keys:
            - name: key3
              secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=
"#;
        let t = Encryption::parse(other, "x")
            .unwrap()
            .for_resource(&ResourceDef::builtin("secrets").unwrap())
            .unwrap();
        let e = t
            .decrypt(KEY, &vector("secret.aescbc.etcd.bin"))
            .unwrap_err();
        assert!(e.contains("aescbc/key1"), "{e}");
        let e = t
            .decrypt(KEY, &vector("secret.secretbox.etcd.bin"))
            .unwrap_err();
        assert!(
            e.contains("secretbox/key3") && e.contains("authentication failed"),
            "{e}"
        );
        let e = t
            .decrypt(KEY, &vector("secret.aesgcm.etcd.bin"))
            .unwrap_err();
        assert!(
            e.contains("k8s:enc:aesgcm:v1:key2:") && e.contains("no configured provider"),
            "{e}"
        );
        let e = t.decrypt(KEY, &vector("secret.etcd.bin")).unwrap_err();
        assert!(e.contains("identity is not among"), "{e}");
        // Truncated ciphertexts: errors, never panics.
        for p in ["aescbc", "aesgcm", "secretbox"] {
            let v = vector(&format!("secret.{p}.etcd.bin"));
            for n in 0..v.len() {
                let _ = secrets().decrypt(KEY, &v[..n]);
            }
        }
    }

    #[test]
    fn kms_and_bad_configs_are_start_up_errors() {
        let kms = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets, configmaps]
    providers:
      - kms:
          apiVersion: v2
          name: vault-kms
          endpoint: unix:///var/run/kms.sock
      - identity: {}
"#;
        let e = Encryption::parse(kms, "enc.yaml").unwrap_err().to_string();
        assert!(
            e.contains("KMS") && e.contains("vault-kms") && e.contains("secrets,configmaps"),
            "{e}"
        );
        for (text, want) in [
            (
                "apiVersion: v1\nkind: EncryptionConfiguration\n",
                "expected apiVersion",
            ),
            (
                "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aesgcm:\n          keys:\n            - name: k\n              secret: AAEC\n",
                "3-byte key",
            ),
            (
                "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - {}\n",
                "exactly one",
            ),
            ("{not yaml", ""),
        ] {
            let e = Encryption::parse(text, "enc.yaml").unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("enc.yaml"), "{e}");
        }
    }

    #[test]
    fn resources_match_like_upstream() {
        let text = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: ["deployments.apps", "*.coordination.k8s.io"]
    providers: [{identity: {}}]
  - resources: ["*."]
    providers: [{secretbox: {keys: [{name: a, secret: QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=}]}}]
"#;
        let enc = Encryption::parse(text, "x").unwrap();
        let first = |plural: &str| {
            enc.for_resource(&ResourceDef::builtin(plural).unwrap())
                .map(|t| t.providers[0].name.clone())
        };
        assert_eq!(first("leases").as_deref(), Some("identity"));
        assert_eq!(first("configmaps").as_deref(), Some("secretbox/a"));
        assert_eq!(first("endpointslices"), None);
    }
}

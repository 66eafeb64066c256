//! Manifest keys: loading, key ids, and the asymmetry that is the point.
//!
//! The worker holds a [`ManifestSigningKey`]; the runner holds only
//! [`ManifestVerifyingKeys`]. A compromised runner can verify manifests but
//! cannot create them. Both key kinds are accepted as PEM or as base64 DER
//! (PKCS#8 for the private key, SPKI for the public key), as the seed says.

use std::fmt;

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::encoding::{b64_decode_lenient_whitespace, b64url_encode};
use crate::secret::Secret;

/// Why a key could not be loaded. Messages never contain key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Neither valid PEM nor valid base64 DER of the expected structure.
    #[error("key_malformed: not a PEM or base64-DER Ed25519 key")]
    Malformed,
    /// A well-formed key of the wrong kind: RSA/EC, an encrypted PKCS#8, or
    /// a private key where a public key belongs (and the reverse).
    #[error("key_wrong_type: {0}")]
    WrongType(&'static str),
    /// No key at all.
    #[error("key_missing: no key was given")]
    Missing,
}

/// The key a worker signs manifests with.
pub enum ManifestSigningKey {
    /// Ed25519 (preferred). The runner gets only the public half.
    Ed25519 {
        /// The signing key.
        key: SigningKey,
        /// Its key id.
        kid: String,
    },
    /// Legacy HMAC-SHA-256. **Weaker**: the same secret verifies *and mints*,
    /// so it must never be mounted into a runner. Kept for non-split
    /// deployments that have not moved to a keypair yet.
    Hmac {
        /// The shared secret.
        secret: Secret,
        /// Its key id.
        kid: String,
    },
}

impl fmt::Debug for ManifestSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ed25519 { kid, .. } => write!(f, "ManifestSigningKey::Ed25519(kid={kid})"),
            Self::Hmac { kid, .. } => write!(f, "ManifestSigningKey::Hmac(kid={kid})"),
        }
    }
}

impl ManifestSigningKey {
    /// Loads a PKCS#8 Ed25519 private key from PEM or base64 DER.
    pub fn from_ed25519_text(text: &str) -> Result<Self, KeyError> {
        let key = parse_private(text)?;
        let kid = ed25519_kid(&key.verifying_key());
        Ok(Self::Ed25519 { key, kid })
    }

    /// A legacy HMAC signing key. See [`ManifestSigningKey::Hmac`].
    pub fn from_hmac_secret(secret: Secret) -> Self {
        let kid = hmac_kid(&secret);
        Self::Hmac { secret, kid }
    }

    /// A new random Ed25519 key.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut())?;
        let key = SigningKey::from_bytes(&seed);
        let kid = ed25519_kid(&key.verifying_key());
        Ok(Self::Ed25519 { key, kid })
    }

    /// The key id put in every manifest this key signs.
    pub fn kid(&self) -> &str {
        match self {
            Self::Ed25519 { kid, .. } | Self::Hmac { kid, .. } => kid,
        }
    }

    /// The matching verification keys (what a runner may hold).
    pub fn verifying_keys(&self) -> ManifestVerifyingKeys {
        match self {
            Self::Ed25519 { key, kid } => {
                ManifestVerifyingKeys { ed25519: vec![(kid.clone(), key.verifying_key())], hmac: None }
            }
            Self::Hmac { secret, kid } => {
                ManifestVerifyingKeys { ed25519: Vec::new(), hmac: Some((kid.clone(), secret.clone())) }
            }
        }
    }

    /// PKCS#8 PEM of an Ed25519 key (`None` for HMAC). The caller writes it
    /// to an owner-only file.
    pub fn to_pkcs8_pem(&self) -> Option<zeroize::Zeroizing<String>> {
        match self {
            Self::Ed25519 { key, .. } => key
                .to_pkcs8_pem(Default::default())
                .ok()
                .map(|pem| zeroize::Zeroizing::new(pem.as_str().to_owned())),
            Self::Hmac { .. } => None,
        }
    }

    /// SPKI PEM of the public half (`None` for HMAC).
    pub fn public_key_pem(&self) -> Option<String> {
        match self {
            Self::Ed25519 { key, .. } => key.verifying_key().to_public_key_pem(Default::default()).ok(),
            Self::Hmac { .. } => None,
        }
    }
}

/// The keys a verifier accepts, by key id. Holding several lets keys rotate
/// without downtime: add the new public key everywhere, then switch signers.
#[derive(Clone, Default)]
pub struct ManifestVerifyingKeys {
    pub(crate) ed25519: Vec<(String, VerifyingKey)>,
    pub(crate) hmac: Option<(String, Secret)>,
}

impl fmt::Debug for ManifestVerifyingKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kids: Vec<&str> = self.ed25519.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ManifestVerifyingKeys")
            .field("ed25519", &kids)
            .field("hmac", &self.hmac.is_some())
            .finish()
    }
}

impl ManifestVerifyingKeys {
    /// Loads one or more SPKI Ed25519 public keys: concatenated PEM blocks, or
    /// base64 DER values separated by commas or whitespace.
    pub fn from_public_keys_text(text: &str) -> Result<Self, KeyError> {
        let mut keys = Self::default();
        for part in split_key_list(text) {
            let key = parse_public(part)?;
            keys.add_ed25519(key);
        }
        if keys.ed25519.is_empty() {
            return Err(KeyError::Missing);
        }
        Ok(keys)
    }

    /// Adds a public key (no-op if already present).
    pub fn add_ed25519(&mut self, key: VerifyingKey) {
        let kid = ed25519_kid(&key);
        if !self.ed25519.iter().any(|(k, _)| *k == kid) {
            self.ed25519.push((kid, key));
        }
    }

    /// Adds every key of `other`.
    pub fn merge(&mut self, other: ManifestVerifyingKeys) {
        for (_, key) in other.ed25519 {
            self.add_ed25519(key);
        }
        if other.hmac.is_some() {
            self.hmac = other.hmac;
        }
    }

    /// Also accepts legacy HMAC manifests. Only a worker-side verifier may do
    /// this: a runner holding the secret could mint.
    pub fn with_hmac_secret(mut self, secret: Secret) -> Self {
        self.hmac = Some((hmac_kid(&secret), secret));
        self
    }

    /// The Ed25519 key ids held, in order.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.ed25519.iter().map(|(k, _)| k.as_str()).chain(self.hmac.iter().map(|(k, _)| k.as_str()))
    }

    /// Whether any key is held.
    pub fn is_empty(&self) -> bool {
        self.ed25519.is_empty() && self.hmac.is_none()
    }
}

/// `ed25519:` + base64url of the first 12 bytes of SHA-256 over the raw public
/// key: stable, derived from the key itself, so no registry of ids can drift.
fn ed25519_kid(key: &VerifyingKey) -> String {
    let digest = Sha256::digest(key.as_bytes());
    format!("ed25519:{}", b64url_encode(&digest[..12]))
}

/// `hmac:` + a truncated hash of the secret under a domain label. With a
/// secret of 32+ random bytes a 96-bit hash reveals nothing usable.
fn hmac_kid(secret: &Secret) -> String {
    let mut h = Sha256::new();
    h.update(b"gatehouse/manifest-hmac-kid/v1\0");
    h.update(secret.expose());
    format!("hmac:{}", b64url_encode(&h.finalize()[..12]))
}

/// Helm charts and env files often carry PEM with literal `\n` sequences.
fn unescape_newlines(text: &str) -> String {
    text.replace("\\n", "\n")
}

fn pem_label(text: &str) -> Option<&str> {
    let start = text.find("-----BEGIN ")? + "-----BEGIN ".len();
    let end = text[start..].find("-----")?;
    Some(&text[start..start + end])
}

fn parse_private(text: &str) -> Result<SigningKey, KeyError> {
    let text = unescape_newlines(text.trim());
    if text.is_empty() {
        return Err(KeyError::Missing);
    }
    let key = match pem_label(&text) {
        Some("PRIVATE KEY") => SigningKey::from_pkcs8_pem(&text).map_err(pkcs8_error)?,
        Some("PUBLIC KEY") => {
            return Err(KeyError::WrongType("a public key was given where the private key belongs"));
        }
        Some("ENCRYPTED PRIVATE KEY") => {
            return Err(KeyError::WrongType(
                "encrypted PKCS#8 is not supported; give the key unencrypted via a *_FILE secret mount",
            ));
        }
        Some(_) => {
            return Err(KeyError::WrongType(
                "not an Ed25519 PKCS#8 key (RSA, EC or OpenSSH keys are not accepted)",
            ));
        }
        None => {
            let der = b64_decode_lenient_whitespace(&text).ok_or(KeyError::Malformed)?;
            match SigningKey::from_pkcs8_der(&der) {
                Ok(k) => k,
                Err(e) if VerifyingKey::from_public_key_der(&der).is_ok() => {
                    let _ = e;
                    return Err(KeyError::WrongType("a public key was given where the private key belongs"));
                }
                Err(e) => return Err(pkcs8_error(e)),
            }
        }
    };
    Ok(key)
}

fn parse_public(text: &str) -> Result<VerifyingKey, KeyError> {
    let text = unescape_newlines(text.trim());
    if text.is_empty() {
        return Err(KeyError::Missing);
    }
    match pem_label(&text) {
        Some("PUBLIC KEY") => VerifyingKey::from_public_key_pem(&text).map_err(spki_error),
        Some(label) if label.contains("PRIVATE KEY") => {
            Err(KeyError::WrongType("a private key was given where only the public key belongs"))
        }
        Some(_) => Err(KeyError::WrongType("not an Ed25519 SPKI public key")),
        None => {
            let der = b64_decode_lenient_whitespace(&text).ok_or(KeyError::Malformed)?;
            match VerifyingKey::from_public_key_der(&der) {
                Ok(k) => Ok(k),
                Err(_) if SigningKey::from_pkcs8_der(&der).is_ok() => {
                    Err(KeyError::WrongType("a private key was given where only the public key belongs"))
                }
                Err(e) => Err(spki_error(e)),
            }
        }
    }
}

fn pkcs8_error(e: ed25519_dalek::pkcs8::Error) -> KeyError {
    match e {
        ed25519_dalek::pkcs8::Error::PublicKey(inner) => spki_error(inner),
        _ => KeyError::Malformed,
    }
}

fn spki_error(e: ed25519_dalek::pkcs8::spki::Error) -> KeyError {
    match e {
        ed25519_dalek::pkcs8::spki::Error::OidUnknown { .. } => KeyError::WrongType("not an Ed25519 key"),
        _ => KeyError::Malformed,
    }
}

/// Splits a list of keys: whole PEM blocks, or base64 DER separated by commas
/// or whitespace.
fn split_key_list(text: &str) -> Vec<&str> {
    if text.contains("-----BEGIN") {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("-----BEGIN") {
            let after = &rest[start..];
            let end =
                after.find("-----END").and_then(|e| after[e + 8..].find("-----").map(|t| e + 8 + t + 5));
            match end {
                Some(end) => {
                    parts.push(&after[..end]);
                    rest = &after[end..];
                }
                None => {
                    parts.push(after);
                    break;
                }
            }
        }
        parts
    } else {
        text.split(|c: char| c == ',' || c.is_ascii_whitespace()).filter(|p| !p.is_empty()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn pem_pair() -> (String, String) {
        let k = ManifestSigningKey::generate().unwrap();
        (k.to_pkcs8_pem().unwrap().to_string(), k.public_key_pem().unwrap())
    }

    fn pem_body_to_b64(pem: &str) -> String {
        pem.lines().filter(|l| !l.starts_with("-----")).collect()
    }

    #[test]
    fn pem_and_base64_der_load_to_the_same_key() {
        let (private_pem, public_pem) = pem_pair();
        let a = ManifestSigningKey::from_ed25519_text(&private_pem).unwrap();
        let b = ManifestSigningKey::from_ed25519_text(&pem_body_to_b64(&private_pem)).unwrap();
        assert_eq!(a.kid(), b.kid());
        let escaped = private_pem.replace('\n', "\\n");
        assert_eq!(ManifestSigningKey::from_ed25519_text(&escaped).unwrap().kid(), a.kid());
        let p = ManifestVerifyingKeys::from_public_keys_text(&public_pem).unwrap();
        let q = ManifestVerifyingKeys::from_public_keys_text(&pem_body_to_b64(&public_pem)).unwrap();
        assert_eq!(p.kids().collect::<Vec<_>>(), vec![a.kid()]);
        assert_eq!(q.kids().collect::<Vec<_>>(), vec![a.kid()]);
    }

    #[test]
    fn several_public_keys_load_for_rotation() {
        let (_, one) = pem_pair();
        let (_, two) = pem_pair();
        let keys = ManifestVerifyingKeys::from_public_keys_text(&format!("{one}\n{two}")).unwrap();
        assert_eq!(keys.kids().count(), 2);
        let csv = format!("{},{}", pem_body_to_b64(&one), pem_body_to_b64(&two));
        assert_eq!(ManifestVerifyingKeys::from_public_keys_text(&csv).unwrap().kids().count(), 2);
    }

    #[test]
    fn a_private_key_is_refused_where_a_public_key_belongs_and_vice_versa() {
        let (private_pem, public_pem) = pem_pair();
        assert!(matches!(
            ManifestVerifyingKeys::from_public_keys_text(&private_pem),
            Err(KeyError::WrongType(_))
        ));
        assert!(matches!(
            ManifestVerifyingKeys::from_public_keys_text(&pem_body_to_b64(&private_pem)),
            Err(KeyError::WrongType(_))
        ));
        assert!(matches!(ManifestSigningKey::from_ed25519_text(&public_pem), Err(KeyError::WrongType(_))));
        assert!(matches!(
            ManifestSigningKey::from_ed25519_text(&pem_body_to_b64(&public_pem)),
            Err(KeyError::WrongType(_))
        ));
    }

    #[test]
    fn other_key_types_are_wrong_type() {
        // An EC P-256 SPKI public key (prime256v1), DER in base64.
        let ec = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEWbtvBsx0DMRVSu+nBRO4P2S8+fM3aqpL8xWS2p7e6ItrBM1e/GZ3I3yHRyW3l+vjBa5UkSZs7FbWYJF2BB5l3Q==";
        assert!(matches!(ManifestVerifyingKeys::from_public_keys_text(ec), Err(KeyError::WrongType(_))));
        let rsa = "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n";
        assert!(matches!(ManifestSigningKey::from_ed25519_text(rsa), Err(KeyError::WrongType(_))));
    }

    #[test]
    fn garbage_is_malformed_never_a_panic() {
        for bad in [
            "not a key",
            "-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----",
            "AAAA",
            "-----BEGIN PUBLIC KEY-----",
        ] {
            assert!(ManifestSigningKey::from_ed25519_text(bad).is_err(), "{bad}");
            assert!(ManifestVerifyingKeys::from_public_keys_text(bad).is_err(), "{bad}");
        }
        let truncated = base64::engine::general_purpose::STANDARD.encode([0x30, 0x2e, 0x02, 0x01]);
        assert_eq!(ManifestSigningKey::from_ed25519_text(&truncated).unwrap_err(), KeyError::Malformed);
        assert_eq!(ManifestSigningKey::from_ed25519_text("  ").unwrap_err(), KeyError::Missing);
    }

    #[test]
    fn key_errors_never_contain_key_text() {
        let (private_pem, _) = pem_pair();
        let err = ManifestVerifyingKeys::from_public_keys_text(&private_pem).unwrap_err();
        let body = pem_body_to_b64(&private_pem);
        assert!(!err.to_string().contains(&body[..20]));
    }
}

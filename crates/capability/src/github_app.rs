//! A GitHub App's private key and the app JWT it signs (RS256, RFC 7519),
//! which the door trades for an installation access token.
//!
//! The key arrives once, as the PEM GitHub hands out (PKCS#1 `RSA PRIVATE
//! KEY`, or PKCS#8 `PRIVATE KEY`), is checked by parsing it, and is sealed
//! as PKCS#8 DER ([`AppKey::to_material`]) like any secret. The JWT follows
//! GitHub's rules: `iat` 60 seconds in the past (GitHub's own advice
//! against clock drift), `exp` at most ten minutes after it, `iss` the
//! app's id. RSA is aws-lc-rs's (the tree's one crypto provider), which
//! signs in constant time.

use std::fmt;

use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::rsa::KeyPair;
use aws_lc_rs::signature::RSA_PKCS1_SHA256;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use gatehouse_core::UnixTime;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject as _;
use zeroize::Zeroizing;

use crate::credential::{CredentialError, CredentialSecret};

/// How far `iat` is put in the past.
pub const ISSUED_BEFORE_SECS: i64 = 60;
/// How long after `iat` the JWT expires: nine minutes, inside GitHub's ten
/// with a minute for the two clocks to disagree.
pub const LIFETIME_SECS: i64 = 9 * 60;
/// What the sealed material begins with: PKCS#8 DER in standard base64.
const MATERIAL_PREFIX: &str = "pkcs8:";

/// Why a private key given to gatehouse is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AppKeyError {
    /// Not one PEM block holding an unencrypted RSA private key.
    #[error("private_key is the app's PEM private key (BEGIN RSA PRIVATE KEY or BEGIN PRIVATE KEY)")]
    NotPem,
    /// An RSA key aws-lc-rs refuses: not RSA, malformed, or outside 2048-8192 bits.
    #[error("private_key is not an RSA private key of 2048 to 8192 bits")]
    Rejected,
}

/// A GitHub App's private key, opened for one signature. Never printed.
pub struct AppKey(KeyPair);

impl fmt::Debug for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AppKey(redacted)")
    }
}

impl AppKey {
    /// The key in `pem` (PKCS#1 or PKCS#8), checked.
    pub fn from_pem(pem: &str) -> Result<Self, AppKeyError> {
        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| AppKeyError::NotPem)?;
        let pair = match &der {
            PrivateKeyDer::Pkcs1(key) => KeyPair::from_der(key.secret_pkcs1_der()),
            PrivateKeyDer::Pkcs8(key) => KeyPair::from_pkcs8(key.secret_pkcs8_der()),
            _ => return Err(AppKeyError::NotPem),
        };
        pair.map(Self).map_err(|_| AppKeyError::Rejected)
    }

    /// The key as one secret to seal: `pkcs8:` and its DER in base64.
    pub fn to_material(&self) -> Result<CredentialSecret, CredentialError> {
        let der = self.0.as_der().map_err(|_| CredentialError::SecretInvalid)?;
        let text = Zeroizing::new(format!("{MATERIAL_PREFIX}{}", STANDARD.encode(der.as_ref())));
        CredentialSecret::new(&text)
    }

    /// The key out of an opened secret.
    pub fn from_material(material: &CredentialSecret) -> Result<Self, CredentialError> {
        let text = std::str::from_utf8(material.expose()).map_err(|_| CredentialError::SecretInvalid)?;
        let encoded = text.strip_prefix(MATERIAL_PREFIX).ok_or(CredentialError::SecretInvalid)?;
        let der = Zeroizing::new(STANDARD.decode(encoded).map_err(|_| CredentialError::SecretInvalid)?);
        KeyPair::from_pkcs8(&der).map(Self).map_err(|_| CredentialError::SecretInvalid)
    }

    /// The app JWT for `app_id` at `now`: `header.claims.signature`, RS256.
    pub fn jwt(&self, app_id: u64, now: UnixTime) -> Result<Zeroizing<String>, CredentialError> {
        let iat = now - ISSUED_BEFORE_SECS;
        let exp = iat + LIFETIME_SECS;
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = URL_SAFE_NO_PAD.encode(format!(r#"{{"iat":{iat},"exp":{exp},"iss":{app_id}}}"#));
        let signing_input = format!("{header}.{claims}");
        let mut signature = vec![0u8; self.0.public_modulus_len()];
        let rng = aws_lc_rs::rand::SystemRandom::new();
        self.0
            .sign(&RSA_PKCS1_SHA256, &rng, signing_input.as_bytes(), &mut signature)
            .map_err(|_| CredentialError::SecretInvalid)?;
        Ok(Zeroizing::new(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(&signature))))
    }

    /// The public key (SubjectPublicKeyInfo DER), for a verifier in tests.
    #[doc(hidden)]
    pub fn public_key_der(&self) -> Vec<u8> {
        use aws_lc_rs::signature::KeyPair as _;
        self.0.public_key().as_der().map(|d| d.as_ref().to_vec()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};

    use super::*;

    fn generated_pem() -> String {
        let pair = KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let der = pair.as_der().unwrap();
        let body = STANDARD.encode(der.as_ref());
        let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", lines.join("\n"))
    }

    #[test]
    fn the_jwt_follows_githubs_rules_and_verifies_with_the_public_key() {
        let key = AppKey::from_pem(&generated_pem()).unwrap();
        let key = AppKey::from_material(&key.to_material().unwrap()).unwrap();
        let jwt = key.jwt(123_456, 1_800_000_000).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header, serde_json::json!({"alg": "RS256", "typ": "JWT"}));
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims, serde_json::json!({"iat": 1_799_999_940, "exp": 1_800_000_480, "iss": 123_456}));
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let public = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key.public_key_der());
        // The SPKI form is what aws-lc-rs's verifier reads too.
        let signed = format!("{}.{}", parts[0], parts[1]);
        assert!(public.verify(signed.as_bytes(), &signature).is_ok());
        assert!(public.verify(b"other", &signature).is_err());
        assert_eq!(format!("{key:?}"), "AppKey(redacted)");
    }

    #[test]
    fn anything_but_an_rsa_private_key_pem_is_refused() {
        assert_eq!(AppKey::from_pem("not a key").unwrap_err(), AppKeyError::NotPem);
        let garbage = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(AppKey::from_pem(garbage).unwrap_err(), AppKeyError::Rejected);
        let cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(AppKey::from_pem(cert).unwrap_err(), AppKeyError::NotPem);
        let not_material = CredentialSecret::new("pkcs8:AAAA").unwrap();
        assert!(AppKey::from_material(&not_material).is_err());
    }
}

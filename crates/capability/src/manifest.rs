//! Execution manifests: what one run is permitted to be, signed by the worker.
//!
//! Wire form: JWS compact serialization (RFC 7515),
//! `b64url(header).b64url(claims).b64url(signature)`, with header
//! `{"alg":"EdDSA","kid":…,"typ":"gatehouse-manifest+jwt"}` (`HS256` in the
//! legacy HMAC mode), so standard JOSE tooling can inspect and verify it.
//!
//! Verification order matters: size, then structure and header, then the
//! signature — and only then are the claims interpreted. Every failure has
//! its own reason code.

use ed25519_dalek::{Signature, Signer as _};
use gatehouse_core::{Reason, UnixTime, is_valid_id};
use hmac::{KeyInit as _, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

use crate::canonical::BodyDigest;
use crate::encoding::{b64url_decode, b64url_encode};
use crate::keys::{ManifestSigningKey, ManifestVerifyingKeys};

/// The largest manifest token accepted, in bytes. Real manifests are a few
/// hundred bytes; the cap bounds the work an attacker can make a verifier do.
pub const MAX_MANIFEST_TOKEN_BYTES: usize = 16 * 1024;

/// The JOSE `typ` of a manifest.
pub const MANIFEST_TYP: &str = "gatehouse-manifest+jwt";

/// The claims of an execution manifest.
///
/// Unknown claims are refused rather than carried: a verifier must never sign
/// or accept a statement containing something it does not understand.
/// Platform metadata belongs in the execute body, which the manifest binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestClaims {
    /// Format version; always 1.
    pub v: u32,
    /// Always `"manifest"`, so a grant's claims can never pass for a manifest.
    pub typ: String,
    /// The key that signed this manifest.
    pub kid: String,
    /// The run (execution) this manifest is for.
    pub exec_id: String,
    /// The tenant (factory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The user the run acts for.
    pub user_id: String,
    /// Exactly which files the run may read.
    #[serde(default)]
    pub input_files: Vec<String>,
    /// Which storage sessions the run may read.
    #[serde(default)]
    pub read_sessions: Vec<String>,
    /// The single session the run may write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_session_id: Option<String>,
    /// Upload budget in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_upload_bytes: Option<u64>,
    /// Output file budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_files: Option<u64>,
    /// Outbound request budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    /// Egress byte budget (bodies and tunnels, both directions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_egress_bytes: Option<u64>,
    /// MCP tool-call budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    /// Lowercase hex SHA-256 of the canonical execute body.
    pub execute_body_sha256: String,
    /// Issued at (Unix seconds).
    pub iat: UnixTime,
    /// Expires at (Unix seconds).
    pub exp: UnixTime,
}

/// Why a manifest could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The claims are not a valid manifest; the text names the problem
    /// (field names only, never values).
    #[error("invalid manifest claims: {0}")]
    InvalidClaims(String),
    /// The body is not canonicalizable JSON.
    #[error("invalid execute body: {0}")]
    InvalidBody(String),
}

/// A manifest that verified.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedManifest {
    /// Its claims.
    pub claims: ManifestClaims,
    /// `EdDSA` or `HS256`.
    pub alg: &'static str,
}

/// What to do with a request according to `SANDBOX_REQUIRE_EGRESS_MANIFEST`.
#[derive(Debug, Clone, PartialEq)]
pub enum ManifestPresence {
    /// Signed and verified.
    Signed(Box<VerifiedManifest>),
    /// No manifest, and the operator allows that: pass, but record as unsigned.
    Unsigned,
}

/// Fills in and signs manifests.
#[derive(Debug)]
pub struct ManifestSigner {
    key: ManifestSigningKey,
}

impl ManifestSigner {
    /// A signer with this key.
    pub fn new(key: ManifestSigningKey) -> Self {
        Self { key }
    }

    /// The signing key.
    pub fn key(&self) -> &ManifestSigningKey {
        &self.key
    }

    /// Signs `claims` for `body`: sets `v`, `typ`, `kid` and
    /// `execute_body_sha256`, fills `iat` (now) and `exp` (`iat + ttl`) when
    /// absent, validates the result, and returns the token.
    pub fn sign_for_body(
        &self,
        mut claims: Map<String, Value>,
        body: &BodyDigest,
        now: UnixTime,
        ttl_secs: i64,
    ) -> Result<(String, ManifestClaims), SignError> {
        let digest = body.to_hex();
        if claims.get("execute_body_sha256").is_some_and(|given| given.as_str() != Some(digest.as_str())) {
            return Err(SignError::InvalidClaims(
                "execute_body_sha256 is computed from the body; a different value was given".into(),
            ));
        }
        claims.insert("v".into(), Value::from(1));
        claims.insert("typ".into(), Value::from("manifest"));
        claims.insert("kid".into(), Value::from(self.key.kid()));
        claims.insert("execute_body_sha256".into(), Value::from(digest));
        let iat = claims.entry("iat").or_insert(Value::from(now)).as_i64();
        if let Some(iat) = iat {
            claims.entry("exp").or_insert(Value::from(iat.saturating_add(ttl_secs)));
        }
        let claims: ManifestClaims = serde_json::from_value(Value::Object(claims))
            .map_err(|e| SignError::InvalidClaims(field_error(&e)))?;
        validate_claims(&claims).map_err(|m| SignError::InvalidClaims(m.into()))?;
        if claims.exp <= claims.iat {
            return Err(SignError::InvalidClaims("exp must be after iat".into()));
        }
        Ok((self.sign(&claims), claims))
    }

    /// Signs already-complete claims.
    pub fn sign(&self, claims: &ManifestClaims) -> String {
        let (alg, kid) = match &self.key {
            ManifestSigningKey::Ed25519 { kid, .. } => ("EdDSA", kid),
            ManifestSigningKey::Hmac { kid, .. } => ("HS256", kid),
        };
        let header = serde_json::json!({"alg": alg, "kid": kid, "typ": MANIFEST_TYP});
        let mut token = b64url_encode(header.to_string().as_bytes());
        token.push('.');
        // Serializing a struct of strings, integers and JSON values cannot fail.
        token.push_str(&b64url_encode(&serde_json::to_vec(claims).unwrap_or_default()));
        let signature = match &self.key {
            ManifestSigningKey::Ed25519 { key, .. } => key.sign(token.as_bytes()).to_bytes().to_vec(),
            ManifestSigningKey::Hmac { secret, .. } => hmac_tag(secret.expose(), token.as_bytes()).to_vec(),
        };
        token.push('.');
        token.push_str(&b64url_encode(&signature));
        token
    }
}

fn hmac_tag(secret: &[u8], message: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <hmac::Hmac<Sha256>>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// serde messages for typed structs name the field and the expected type, and
/// may quote the offending value; keep the part before any quote.
fn field_error(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let cut = msg.find(['"', '`']).map_or(msg.as_str(), |i| &msg[..i]);
    let cut = cut.trim_end_matches([' ', ':', ',']);
    if cut.is_empty() { "claims do not match the manifest schema".into() } else { cut.to_owned() }
}

fn validate_claims(c: &ManifestClaims) -> Result<(), &'static str> {
    if c.v != 1 {
        return Err("unsupported manifest version");
    }
    if c.typ != "manifest" {
        return Err("typ must be \"manifest\"");
    }
    if !is_valid_id(&c.exec_id) {
        return Err("exec_id must be 1-128 characters of [A-Za-z0-9._:-]");
    }
    if !is_valid_id(&c.user_id) {
        return Err("user_id must be 1-128 characters of [A-Za-z0-9._:-]");
    }
    if c.tenant_id.as_deref().is_some_and(|t| !is_valid_id(t)) {
        return Err("tenant_id must be 1-128 characters of [A-Za-z0-9._:-]");
    }
    if c.output_session_id.as_deref().is_some_and(|t| !is_valid_id(t)) {
        return Err("output_session_id must be 1-128 characters of [A-Za-z0-9._:-]");
    }
    if c.execute_body_sha256.len() != 64
        || !c.execute_body_sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err("execute_body_sha256 must be 64 lowercase hex digits");
    }
    Ok(())
}

/// Verifies manifests.
#[derive(Debug, Clone)]
pub struct ManifestVerifier {
    keys: ManifestVerifyingKeys,
    /// Allowed clock difference between signer and verifier, in seconds.
    pub clock_skew_secs: i64,
    /// The longest `exp - iat` accepted, in seconds.
    pub max_lifetime_secs: i64,
}

/// Default clock skew tolerance.
pub const DEFAULT_CLOCK_SKEW_SECS: i64 = 30;
/// Default maximum manifest lifetime (one day).
pub const DEFAULT_MAX_LIFETIME_SECS: i64 = 24 * 3600;

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: String,
    #[serde(default)]
    typ: Option<String>,
    #[serde(default)]
    crit: Option<Value>,
}

impl ManifestVerifier {
    /// A verifier over `keys` with default skew and lifetime.
    pub fn new(keys: ManifestVerifyingKeys) -> Self {
        Self { keys, clock_skew_secs: DEFAULT_CLOCK_SKEW_SECS, max_lifetime_secs: DEFAULT_MAX_LIFETIME_SECS }
    }

    /// The keys held.
    pub fn keys(&self) -> &ManifestVerifyingKeys {
        &self.keys
    }

    /// Applies `SANDBOX_REQUIRE_EGRESS_MANIFEST`: a request without a token
    /// is refused with `manifest_missing` when `required`, and passes as
    /// [`ManifestPresence::Unsigned`] otherwise. A token that is present is
    /// always verified — an operator switch never makes a bad manifest pass.
    pub fn check_request(
        &self,
        token: Option<&str>,
        body: &BodyDigest,
        now: UnixTime,
        required: bool,
    ) -> Result<ManifestPresence, Reason> {
        match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(token) => self.verify(token, body, now).map(|m| ManifestPresence::Signed(Box::new(m))),
            None if required => Err(Reason::ManifestMissing),
            None => Ok(ManifestPresence::Unsigned),
        }
    }

    /// Verifies `token` against the execute body's digest at time `now`.
    pub fn verify(&self, token: &str, body: &BodyDigest, now: UnixTime) -> Result<VerifiedManifest, Reason> {
        if token.is_empty() {
            return Err(Reason::ManifestMissing);
        }
        if token.len() > MAX_MANIFEST_TOKEN_BYTES {
            return Err(Reason::ManifestTooLarge);
        }
        let mut parts = token.split('.');
        let (Some(h64), Some(c64), Some(s64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Reason::ManifestMalformed);
        };
        let header_bytes = b64url_decode(h64).ok_or(Reason::ManifestMalformed)?;
        // Typed parsing refuses a repeated known field (`"alg"` twice), so
        // no two readers can disagree about which algorithm was meant.
        let header: Header = serde_json::from_slice(&header_bytes).map_err(|_| Reason::ManifestMalformed)?;
        // RFC 7515 §4.1.11: extensions marked critical must be understood.
        // gatehouse understands none, so any `crit` is refused.
        if header.crit.is_some() {
            return Err(Reason::ManifestMalformed);
        }
        if header.typ.as_deref().is_some_and(|t| t != MANIFEST_TYP) {
            return Err(Reason::ManifestMalformed);
        }
        let signature = b64url_decode(s64).ok_or(Reason::ManifestMalformed)?;
        let signed = &token.as_bytes()[..h64.len() + 1 + c64.len()];
        // The algorithm picks the key family and never the reverse: an
        // Ed25519 public key is never used as an HMAC secret (alg confusion).
        let alg = match header.alg.as_str() {
            "EdDSA" => {
                let key = self
                    .keys
                    .ed25519
                    .iter()
                    .find(|(kid, _)| *kid == header.kid)
                    .map(|(_, k)| k)
                    .ok_or(Reason::ManifestUnknownKey)?;
                let signature: [u8; 64] = signature.try_into().map_err(|_| Reason::ManifestBadSignature)?;
                key.verify_strict(signed, &Signature::from_bytes(&signature))
                    .map_err(|_| Reason::ManifestBadSignature)?;
                "EdDSA"
            }
            "HS256" => {
                let (kid, secret) = self.keys.hmac.as_ref().ok_or(Reason::ManifestAlgorithmNotAllowed)?;
                if *kid != header.kid {
                    return Err(Reason::ManifestUnknownKey);
                }
                let expected = hmac_tag(secret.expose(), signed);
                if signature.len() != 32 || !bool::from(expected.ct_eq(signature.as_slice())) {
                    return Err(Reason::ManifestBadSignature);
                }
                "HS256"
            }
            _ => return Err(Reason::ManifestAlgorithmNotAllowed),
        };
        // Authentic from here on; interpret the claims.
        let claims_bytes = b64url_decode(c64).ok_or(Reason::ManifestMalformed)?;
        // deny_unknown_fields plus typed parsing: unknown and repeated claims are refused.
        let claims: ManifestClaims =
            serde_json::from_slice(&claims_bytes).map_err(|_| Reason::ManifestClaimsInvalid)?;
        validate_claims(&claims).map_err(|_| Reason::ManifestClaimsInvalid)?;
        if claims.kid != header.kid {
            return Err(Reason::ManifestClaimsInvalid);
        }
        if claims.exp <= claims.iat {
            return Err(Reason::ManifestClaimsInvalid);
        }
        if claims.exp.saturating_sub(claims.iat) > self.max_lifetime_secs {
            return Err(Reason::ManifestLifetimeTooLong);
        }
        if now.saturating_sub(self.clock_skew_secs) >= claims.exp {
            return Err(Reason::ManifestExpired);
        }
        if claims.iat > now.saturating_add(self.clock_skew_secs) {
            return Err(Reason::ManifestNotYetValid);
        }
        let expected = body.to_hex();
        if !bool::from(expected.as_bytes().ct_eq(claims.execute_body_sha256.as_bytes())) {
            return Err(Reason::ManifestBodyMismatch);
        }
        Ok(VerifiedManifest { claims, alg })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn body() -> BodyDigest {
        BodyDigest::of_json_bytes(br#"{"code":"print(1)","lang":"py","files":["a.txt"]}"#).unwrap()
    }

    fn claims() -> Map<String, Value> {
        json!({"exec_id": "exec-1", "tenant_id": "t1", "user_id": "u1", "input_files": ["a.txt"],
               "output_session_id": "out-1", "max_requests": 10})
        .as_object()
        .cloned()
        .unwrap()
    }

    fn pair() -> (ManifestSigner, ManifestVerifier) {
        let key = ManifestSigningKey::generate().unwrap();
        let verifier = ManifestVerifier::new(key.verifying_keys());
        (ManifestSigner::new(key), verifier)
    }

    #[test]
    fn sign_then_verify_round_trips() {
        let (signer, verifier) = pair();
        let (token, signed) = signer.sign_for_body(claims(), &body(), NOW, 300).unwrap();
        let verified = verifier.verify(&token, &body(), NOW + 10).unwrap();
        assert_eq!(verified.claims, signed);
        assert_eq!(verified.alg, "EdDSA");
        assert_eq!(verified.claims.exp, NOW + 300);
        assert_eq!(verified.claims.kid, signer.key().kid());
    }

    #[test]
    fn each_failure_has_its_own_reason() {
        let (signer, verifier) = pair();
        let (token, _) = signer.sign_for_body(claims(), &body(), NOW, 300).unwrap();
        let other_body = BodyDigest::of_json_bytes(br#"{"code":"print(2)"}"#).unwrap();
        assert_eq!(verifier.verify(&token, &other_body, NOW), Err(Reason::ManifestBodyMismatch));
        assert_eq!(
            verifier.verify(&token, &body(), NOW + 300 + DEFAULT_CLOCK_SKEW_SECS),
            Err(Reason::ManifestExpired)
        );
        assert!(verifier.verify(&token, &body(), NOW + 300 + DEFAULT_CLOCK_SKEW_SECS - 1).is_ok());
        assert_eq!(
            verifier.verify(&token, &body(), NOW - DEFAULT_CLOCK_SKEW_SECS - 1),
            Err(Reason::ManifestNotYetValid)
        );
        assert_eq!(verifier.verify("", &body(), NOW), Err(Reason::ManifestMissing));
        assert_eq!(verifier.verify("a.b", &body(), NOW), Err(Reason::ManifestMalformed));
        assert_eq!(
            verifier.verify(&"a".repeat(MAX_MANIFEST_TOKEN_BYTES + 1), &body(), NOW),
            Err(Reason::ManifestTooLarge)
        );
        let (_, stranger) = pair();
        assert_eq!(stranger.verify(&token, &body(), NOW), Err(Reason::ManifestUnknownKey));
        let (h, rest) = token.split_once('.').unwrap();
        let (c, s) = rest.rsplit_once('.').unwrap();
        let mut sig = b64url_decode(s).unwrap();
        sig[5] ^= 1;
        let bad = format!("{h}.{c}.{}", b64url_encode(&sig));
        assert_eq!(verifier.verify(&bad, &body(), NOW), Err(Reason::ManifestBadSignature));
    }

    #[test]
    fn lifetime_is_capped() {
        let (signer, verifier) = pair();
        let (token, _) = signer.sign_for_body(claims(), &body(), NOW, DEFAULT_MAX_LIFETIME_SECS + 1).unwrap();
        assert_eq!(verifier.verify(&token, &body(), NOW), Err(Reason::ManifestLifetimeTooLong));
    }

    #[test]
    fn keys_rotate_by_kid() {
        let old = ManifestSigningKey::generate().unwrap();
        let new = ManifestSigningKey::generate().unwrap();
        let mut keys = old.verifying_keys();
        for (_, k) in new.verifying_keys().ed25519 {
            keys.add_ed25519(k);
        }
        let verifier = ManifestVerifier::new(keys);
        for key in [old, new] {
            let (token, _) = ManifestSigner::new(key).sign_for_body(claims(), &body(), NOW, 60).unwrap();
            assert!(verifier.verify(&token, &body(), NOW).is_ok());
        }
    }

    #[test]
    fn hmac_mode_works_but_only_where_enabled() {
        let secret = Secret::new("0123456789abcdefghijklmnopqrstuvwxyz").unwrap();
        let key = ManifestSigningKey::from_hmac_secret(secret);
        let verifier = ManifestVerifier::new(key.verifying_keys());
        let (token, _) = ManifestSigner::new(key).sign_for_body(claims(), &body(), NOW, 60).unwrap();
        assert_eq!(verifier.verify(&token, &body(), NOW).unwrap().alg, "HS256");
        // A runner holding only public keys refuses HMAC manifests outright.
        let (_, runner) = pair();
        assert_eq!(runner.verify(&token, &body(), NOW), Err(Reason::ManifestAlgorithmNotAllowed));
    }

    #[test]
    fn alg_none_and_crit_are_refused() {
        let (signer, verifier) = pair();
        let (token, _) = signer.sign_for_body(claims(), &body(), NOW, 60).unwrap();
        let (_, rest) = token.split_once('.').unwrap();
        let kid = signer.key().kid();
        let none = b64url_encode(json!({"alg": "none", "kid": kid}).to_string().as_bytes());
        assert_eq!(
            verifier.verify(&format!("{none}.{rest}"), &body(), NOW),
            Err(Reason::ManifestAlgorithmNotAllowed)
        );
        let crit = b64url_encode(
            json!({"alg": "EdDSA", "kid": kid, "crit": ["b64"], "b64": false}).to_string().as_bytes(),
        );
        assert_eq!(verifier.verify(&format!("{crit}.{rest}"), &body(), NOW), Err(Reason::ManifestMalformed));
        let dup = b64url_encode(format!(r#"{{"alg":"EdDSA","alg":"HS256","kid":"{kid}"}}"#).as_bytes());
        assert_eq!(verifier.verify(&format!("{dup}.{rest}"), &body(), NOW), Err(Reason::ManifestMalformed));
    }

    #[test]
    fn required_switch_governs_missing_manifests_only() {
        let (signer, verifier) = pair();
        assert_eq!(verifier.check_request(None, &body(), NOW, true), Err(Reason::ManifestMissing));
        assert_eq!(verifier.check_request(Some("  "), &body(), NOW, true), Err(Reason::ManifestMissing));
        assert_eq!(verifier.check_request(None, &body(), NOW, false), Ok(ManifestPresence::Unsigned));
        assert_eq!(
            verifier.check_request(Some("x.y.z"), &body(), NOW, false),
            Err(Reason::ManifestMalformed)
        );
        let (token, _) = signer.sign_for_body(claims(), &body(), NOW, 60).unwrap();
        assert!(matches!(
            verifier.check_request(Some(&token), &body(), NOW, false),
            Ok(ManifestPresence::Signed(_))
        ));
    }

    #[test]
    fn signing_refuses_bad_claims_without_echoing_values() {
        let (signer, _) = pair();
        let mut c = claims();
        c.insert("exec_id".into(), json!("has space"));
        assert!(signer.sign_for_body(c, &body(), NOW, 60).is_err());
        let mut c = claims();
        c.insert("user_id".into(), json!(["sekrit-value"]));
        let err = signer.sign_for_body(c, &body(), NOW, 60).unwrap_err();
        assert!(!err.to_string().contains("sekrit"), "{err}");
        let mut c = claims();
        c.insert("execute_body_sha256".into(), json!("00"));
        assert!(signer.sign_for_body(c, &body(), NOW, 60).is_err());
        let mut c = claims();
        c.insert("exp".into(), json!(NOW - 1));
        assert!(signer.sign_for_body(c, &body(), NOW, 60).is_err());
    }
}

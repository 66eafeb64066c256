//! Egress grants: the capability a sandbox presents on every outbound request.
//!
//! A grant is *sealed*, not merely signed: XChaCha20-Poly1305 under a key
//! derived from `CODEAPI_EGRESS_GRANT_SECRET`, with the additional
//! authenticated data `codeapi-egress-grant:v1` (seed). The sandbox carries it
//! but can neither read its scope nor alter it.
//!
//! Wire form: `ceg1.` + base64url(`kid`(8) ‖ `nonce`(24) ‖ ciphertext‖tag).
//! The plaintext is the claims in postcard's compact binary serde format:
//! nobody but gatehouse ever reads it, and opening a grant is on the path of
//! every outbound request, where JSON parsing would cost more than the AEAD.
//! The key id is public and lets a node tell "sealed under a secret I do not
//! hold" (`grant_unknown_key`) from "altered" (`grant_tampered`), and pick the
//! current or previous secret during rotation without trial decryption.
//! Nonces are 192-bit random values, safe to draw independently on every node.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use chacha20poly1305::aead::{Aead as _, AeadInOut as _, Payload};
use chacha20poly1305::{KeyInit as _, XChaCha20Poly1305, XNonce};
use gatehouse_core::{Reason, UnixTime, is_valid_id, new_id};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::encoding::{b64url_decode, b64url_encode};
use crate::secret::Secret;

/// Token prefix (seed: "the ceg1 prefix").
pub const GRANT_PREFIX: &str = "ceg1.";
/// Additional authenticated data (seed).
pub const GRANT_AAD: &[u8] = b"codeapi-egress-grant:v1";
/// The largest grant token accepted, in bytes.
pub const MAX_GRANT_TOKEN_BYTES: usize = 16 * 1024;

const KID_LEN: usize = 8;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

/// Budgets a grant carries; the ledger enforces them across requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantBudgets {
    /// Total bytes the run may upload.
    pub max_upload_bytes: u64,
    /// Output files the run may create.
    pub max_output_files: u64,
    /// Outbound requests the run may make.
    pub max_requests: u64,
    /// Bytes the run may move through the door: request and response bodies
    /// and tunnel bytes, both directions.
    pub max_egress_bytes: u64,
    /// MCP tool calls the run may make (each is also a request).
    pub max_tool_calls: u64,
}

/// The tool-call budget of a grant sealed before grants had one: no limit
/// beyond its request budget (every tool call is a request too).
pub const UNLIMITED_TOOL_CALLS: u64 = (1 << 53) - 1;

fn unlimited_tool_calls() -> u64 {
    UNLIMITED_TOOL_CALLS
}

impl Default for GrantBudgets {
    /// Conservative defaults for a grant minted without explicit budgets.
    /// 1 GiB of egress is one tunnel's own cap: a run that needs more (a
    /// large package install) says so when it is created.
    fn default() -> Self {
        Self {
            max_upload_bytes: 50 * 1024 * 1024,
            max_output_files: 100,
            max_requests: 1000,
            max_egress_bytes: 1 << 30,
            max_tool_calls: 200,
        }
    }
}

/// The sealed claims (seed: "Claims include …").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantClaims {
    /// Format version; always 1.
    pub v: u32,
    /// Always `"grant"`.
    pub typ: String,
    /// The ledger record this grant spends from.
    pub grant_id: String,
    /// The run.
    pub exec_id: String,
    /// The tenant.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// The user the run acts for.
    pub user_id: String,
    /// The storage namespace the run writes into, derived by gatehouse.
    pub session_key: String,
    /// Exactly which files may be read.
    pub input_files: Vec<String>,
    /// Which storage sessions may be read.
    pub read_sessions: Vec<String>,
    /// The single session that may be written.
    #[serde(default)]
    pub output_session_id: Option<String>,
    /// Upload budget in bytes.
    pub max_upload_bytes: u64,
    /// Output file budget.
    pub max_output_files: u64,
    /// Outbound request budget.
    pub max_requests: u64,
    /// Egress byte budget (bodies and tunnels, both directions).
    pub max_egress_bytes: u64,
    /// MCP tool-call budget.
    #[serde(default = "unlimited_tool_calls")]
    pub max_tool_calls: u64,
    /// Issued at.
    pub iat: UnixTime,
    /// Expires at.
    pub exp: UnixTime,
}

/// What a caller asks to mint. `session_key` is deliberately absent: it is
/// derived from the principal, so there is no field in which to forge one,
/// and `deny_unknown_fields` turns an attempt to pass one into an error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// Generated when absent.
    #[serde(default)]
    pub grant_id: Option<String>,
    /// The run.
    pub exec_id: String,
    /// The tenant.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// The user.
    pub user_id: String,
    /// Files the run may read.
    #[serde(default)]
    pub input_files: Vec<String>,
    /// Sessions the run may read.
    #[serde(default)]
    pub read_sessions: Vec<String>,
    /// The session the run may write.
    #[serde(default)]
    pub output_session_id: Option<String>,
    /// Defaults to [`GrantBudgets::default`]'s value.
    #[serde(default)]
    pub max_upload_bytes: Option<u64>,
    /// Defaults to [`GrantBudgets::default`]'s value.
    #[serde(default)]
    pub max_output_files: Option<u64>,
    /// Defaults to [`GrantBudgets::default`]'s value.
    #[serde(default)]
    pub max_requests: Option<u64>,
    /// Defaults to [`GrantBudgets::default`]'s value.
    #[serde(default)]
    pub max_egress_bytes: Option<u64>,
    /// Defaults to [`GrantBudgets::default`]'s value.
    #[serde(default)]
    pub max_tool_calls: Option<u64>,
    /// Defaults to now.
    #[serde(default)]
    pub iat: Option<UnixTime>,
    /// Defaults to `iat + ttl`.
    #[serde(default)]
    pub exp: Option<UnixTime>,
}

/// Why a grant could not be minted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MintError {
    /// The request is invalid; the text names the field, never its value.
    #[error("invalid grant request: {0}")]
    Invalid(&'static str),
    /// The operating system's random generator failed.
    #[error("no randomness available")]
    Random,
}

/// How long a grant lives when the request does not say, and at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantLifetime {
    /// `exp - iat` when the request gives no `exp`.
    pub default_secs: i64,
    /// The longest `exp - iat` accepted, like a manifest's maximum lifetime.
    pub max_secs: i64,
}

impl GrantRequest {
    /// Completes the request into claims: ids checked, budgets and times
    /// defaulted, `session_key` supplied by the caller's derivation. A
    /// caller-chosen `exp` must lie ahead of `now` and within the maximum
    /// lifetime, and `iat` may not lie ahead of `now`: a grant that could
    /// never be used, or that outlives every rotation, is refused here.
    pub fn into_claims(
        self,
        session_key: String,
        now: UnixTime,
        lifetime: GrantLifetime,
    ) -> Result<GrantClaims, MintError> {
        let grant_id = self.grant_id.unwrap_or_else(|| new_id("gr"));
        let check = |id: &str, what: &'static str| {
            if is_valid_id(id) { Ok(()) } else { Err(MintError::Invalid(what)) }
        };
        check(&grant_id, "grant_id must be 1-128 characters of [A-Za-z0-9._:-]")?;
        check(&self.exec_id, "exec_id must be 1-128 characters of [A-Za-z0-9._:-]")?;
        check(&self.user_id, "user_id must be 1-128 characters of [A-Za-z0-9._:-]")?;
        if let Some(t) = &self.tenant_id {
            check(t, "tenant_id must be 1-128 characters of [A-Za-z0-9._:-]")?;
        }
        if let Some(o) = &self.output_session_id {
            check(o, "output_session_id must be 1-128 characters of [A-Za-z0-9._:-]")?;
        }
        // Budgets stay within the exactly representable integers, so every
        // ledger backend (Redis counts in Lua doubles) enforces them exactly.
        const MAX_BUDGET: u64 = (1 << 53) - 1;
        if [
            self.max_upload_bytes,
            self.max_output_files,
            self.max_requests,
            self.max_egress_bytes,
            self.max_tool_calls,
        ]
        .iter()
        .flatten()
        .any(|b| *b > MAX_BUDGET)
        {
            return Err(MintError::Invalid("budgets must not exceed 2^53-1"));
        }
        let defaults = GrantBudgets::default();
        let iat = self.iat.unwrap_or(now);
        if iat > now {
            return Err(MintError::Invalid("iat must not lie in the future"));
        }
        let exp = self.exp.unwrap_or(iat.saturating_add(lifetime.default_secs.min(lifetime.max_secs)));
        if exp <= iat {
            return Err(MintError::Invalid("exp must be after iat"));
        }
        if exp <= now {
            return Err(MintError::Invalid("exp must lie in the future"));
        }
        if exp.saturating_sub(iat) > lifetime.max_secs {
            return Err(MintError::Invalid("exp - iat exceeds the maximum grant lifetime"));
        }
        Ok(GrantClaims {
            v: 1,
            typ: "grant".into(),
            grant_id,
            exec_id: self.exec_id,
            tenant_id: self.tenant_id,
            user_id: self.user_id,
            session_key,
            input_files: self.input_files,
            read_sessions: self.read_sessions,
            output_session_id: self.output_session_id,
            max_upload_bytes: self.max_upload_bytes.unwrap_or(defaults.max_upload_bytes),
            max_output_files: self.max_output_files.unwrap_or(defaults.max_output_files),
            max_requests: self.max_requests.unwrap_or(defaults.max_requests),
            max_egress_bytes: self.max_egress_bytes.unwrap_or(defaults.max_egress_bytes),
            max_tool_calls: self.max_tool_calls.unwrap_or(defaults.max_tool_calls),
            iat,
            exp,
        })
    }
}

struct SealKey {
    kid: [u8; KID_LEN],
    cipher: XChaCha20Poly1305,
}

impl SealKey {
    fn derive(secret: &Secret) -> Self {
        let hk = Hkdf::<Sha256>::new(Some(b"gatehouse/egress-grant"), secret.expose());
        let mut key = zeroize::Zeroizing::new([0u8; 32]);
        let mut kid = [0u8; KID_LEN];
        // Expanding at most 255 blocks cannot fail; these are 1 block each.
        let _ = hk.expand(b"gatehouse/grant-key/v1", key.as_mut());
        let _ = hk.expand(b"gatehouse/grant-kid/v1", &mut kid);
        let cipher = XChaCha20Poly1305::new(&chacha20poly1305::Key::from(*key));
        Self { kid, cipher }
    }
}

/// Mints and opens grants. Holds the current secret and, during rotation,
/// the previous one (open only).
pub struct GrantSealer {
    current: SealKey,
    previous: Option<SealKey>,
    /// Allowed clock difference for `iat`, in seconds.
    pub clock_skew_secs: i64,
}

impl std::fmt::Debug for GrantSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantSealer").field("previous", &self.previous.is_some()).finish_non_exhaustive()
    }
}

impl GrantSealer {
    /// A sealer for `secret` (already checked strong by [`Secret::new`]).
    pub fn new(secret: &Secret) -> Self {
        Self { current: SealKey::derive(secret), previous: None, clock_skew_secs: 30 }
    }

    /// Also opens grants sealed under `previous`, so the secret can be
    /// rotated without invalidating grants already handed out.
    #[must_use]
    pub fn with_previous(mut self, previous: &Secret) -> Self {
        self.previous = Some(SealKey::derive(previous));
        self
    }

    /// Seals `claims` into a `ceg1.` token.
    pub fn mint(&self, claims: &GrantClaims) -> Result<String, MintError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|_| MintError::Random)?;
        let plaintext =
            zeroize::Zeroizing::new(postcard::to_allocvec(claims).map_err(|_| MintError::Invalid("claims"))?);
        let sealed = self
            .current
            .cipher
            .encrypt(&XNonce::from(nonce), Payload { msg: &plaintext, aad: GRANT_AAD })
            .map_err(|_| MintError::Invalid("claims too large"))?;
        let mut raw = Vec::with_capacity(KID_LEN + NONCE_LEN + sealed.len());
        raw.extend_from_slice(&self.current.kid);
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&sealed);
        let token = format!("{GRANT_PREFIX}{}", b64url_encode(&raw));
        // What `open` would refuse is never minted (nor registered: callers
        // mint before they register).
        if token.len() > MAX_GRANT_TOKEN_BYTES {
            return Err(MintError::Invalid("the grant is too large: its token would exceed 16 KiB"));
        }
        Ok(token)
    }

    /// Opens a token and checks its lifetime at `now`.
    pub fn open(&self, token: &str, now: UnixTime) -> Result<GrantClaims, Reason> {
        if token.is_empty() {
            return Err(Reason::GrantMissing);
        }
        if token.len() > MAX_GRANT_TOKEN_BYTES {
            return Err(Reason::GrantTooLarge);
        }
        let body = token.strip_prefix(GRANT_PREFIX).ok_or(Reason::GrantBadPrefix)?;
        let mut raw = zeroize::Zeroizing::new(b64url_decode(body).ok_or(Reason::GrantMalformed)?);
        if raw.len() < KID_LEN + NONCE_LEN + TAG_LEN {
            return Err(Reason::GrantMalformed);
        }
        let (head, sealed) = raw.split_at_mut(KID_LEN + NONCE_LEN);
        let (kid, nonce) = head.split_at(KID_LEN);
        let key = std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .find(|k| k.kid == kid)
            .ok_or(Reason::GrantUnknownKey)?;
        let nonce = XNonce::try_from(nonce).map_err(|_| Reason::GrantMalformed)?;
        let (plaintext, tag) = sealed.split_at_mut(sealed.len() - TAG_LEN);
        let tag = chacha20poly1305::Tag::try_from(&*tag).map_err(|_| Reason::GrantMalformed)?;
        // Decrypt in place in the decoded buffer (wiped on drop): no second
        // copy of the claims is made.
        key.cipher
            .decrypt_inout_detached(&nonce, GRANT_AAD, plaintext.into(), &tag)
            .map_err(|_| Reason::GrantTampered)?;
        let Ok((claims, [])) = postcard::take_from_bytes::<GrantClaims>(plaintext) else {
            return Err(Reason::GrantClaimsInvalid);
        };
        if claims.v != 1 || claims.typ != "grant" {
            return Err(Reason::GrantClaimsInvalid);
        }
        self.check_times(&claims, now)?;
        Ok(claims)
    }

    /// Whether `claims` are valid at `now`: not expired, not issued in the future.
    fn check_times(&self, claims: &GrantClaims, now: UnixTime) -> Result<(), Reason> {
        if now >= claims.exp {
            return Err(Reason::GrantExpired);
        }
        if claims.iat > now.saturating_add(self.clock_skew_secs) {
            return Err(Reason::GrantNotYetValid);
        }
        Ok(())
    }
}

/// A sealer that remembers the grants it has opened.
///
/// A sandbox presents the same grant on every request of its run, and
/// decoding, decrypting and parsing it again each time was a sixth of the
/// proxy's own CPU time. Only grants that opened successfully are kept, keyed
/// by the whole token (never by a hash, which could be made to collide), and
/// their lifetime is checked again at every use, so a remembered grant expires
/// exactly when it would have. Revocation is the ledger's concern and is
/// checked on every request regardless. The cache is bounded: when it is
/// full, expired entries go first, and if none have expired it starts over.
pub struct OpenedGrants {
    sealer: GrantSealer,
    capacity: usize,
    opened: RwLock<HashMap<Box<str>, Arc<GrantClaims>>>,
}

impl std::fmt::Debug for OpenedGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedGrants").field("sealer", &self.sealer).finish_non_exhaustive()
    }
}

impl OpenedGrants {
    /// Remembers at most `capacity` grants opened by `sealer`.
    pub fn new(sealer: GrantSealer, capacity: usize) -> Self {
        Self { sealer, capacity, opened: RwLock::default() }
    }

    /// Opens `token` as [`GrantSealer::open`] does, answering from memory
    /// when the same token opened before.
    pub fn open(&self, token: &str, now: UnixTime) -> Result<Arc<GrantClaims>, Reason> {
        let remembered = self.opened.read().unwrap_or_else(PoisonError::into_inner).get(token).cloned();
        if let Some(claims) = remembered {
            self.sealer.check_times(&claims, now)?;
            return Ok(claims);
        }
        let claims = Arc::new(self.sealer.open(token, now)?);
        let mut opened = self.opened.write().unwrap_or_else(PoisonError::into_inner);
        if opened.len() >= self.capacity {
            opened.retain(|_, c| now < c.exp);
            if opened.len() >= self.capacity {
                opened.clear();
            }
        }
        if self.capacity > 0 {
            opened.insert(token.into(), claims.clone());
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn secret(s: &str) -> Secret {
        Secret::new(&format!("{s}-0123456789abcdefghijklmnopqrstuvwxyz")).unwrap()
    }

    fn claims() -> GrantClaims {
        GrantRequest {
            grant_id: Some("gr-1".into()),
            exec_id: "exec-1".into(),
            tenant_id: Some("t1".into()),
            user_id: "u1".into(),
            input_files: vec!["f1".into()],
            output_session_id: Some("out".into()),
            max_requests: Some(3),
            ..Default::default()
        }
        .into_claims("sk1_x".into(), NOW, GrantLifetime { default_secs: 300, max_secs: 86_400 })
        .unwrap()
    }

    #[test]
    fn mint_then_open_round_trips_and_hides_the_claims() {
        let sealer = GrantSealer::new(&secret("a"));
        let token = sealer.mint(&claims()).unwrap();
        assert!(token.starts_with("ceg1."));
        assert!(!token.contains("exec-1"));
        assert_eq!(sealer.open(&token, NOW).unwrap(), claims());
        assert_ne!(sealer.mint(&claims()).unwrap(), token, "nonces are fresh");
    }

    #[test]
    fn each_failure_has_its_own_reason() {
        let sealer = GrantSealer::new(&secret("a"));
        let token = sealer.mint(&claims()).unwrap();
        assert_eq!(GrantSealer::new(&secret("b")).open(&token, NOW), Err(Reason::GrantUnknownKey));
        assert_eq!(sealer.open(&token, NOW + 300), Err(Reason::GrantExpired));
        assert_eq!(sealer.open(&token, NOW - 31), Err(Reason::GrantNotYetValid));
        assert_eq!(sealer.open(&token.replacen("ceg1.", "ceg2.", 1), NOW), Err(Reason::GrantBadPrefix));
        assert_eq!(sealer.open("", NOW), Err(Reason::GrantMissing));
        assert_eq!(sealer.open("ceg1.!!", NOW), Err(Reason::GrantMalformed));
        assert_eq!(sealer.open("ceg1.AAAA", NOW), Err(Reason::GrantMalformed));
        assert_eq!(
            sealer.open(&format!("ceg1.{}", "A".repeat(MAX_GRANT_TOKEN_BYTES)), NOW),
            Err(Reason::GrantTooLarge)
        );
        let mut raw = b64url_decode(&token[5..]).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0x80;
        assert_eq!(sealer.open(&format!("ceg1.{}", b64url_encode(&raw)), NOW), Err(Reason::GrantTampered));
    }

    #[test]
    fn remembered_grants_expire_on_time_and_the_cache_stays_bounded() {
        let sealer = GrantSealer::new(&secret("a"));
        let tokens: Vec<String> = (0..3).map(|_| sealer.mint(&claims()).unwrap()).collect();
        let opened = OpenedGrants::new(GrantSealer::new(&secret("a")), 2);
        for token in &tokens {
            assert_eq!(*opened.open(token, NOW).unwrap(), claims());
        }
        assert!(opened.opened.read().unwrap().len() <= 2);
        // Answered from memory, yet still judged by the clock.
        assert_eq!(opened.open(&tokens[2], NOW + 300), Err(Reason::GrantExpired));
        assert_eq!(opened.open(&tokens[2], NOW - 31), Err(Reason::GrantNotYetValid));
        // A token that differs from a remembered one in any byte is opened afresh.
        let mut raw = b64url_decode(&tokens[2][5..]).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0x80;
        assert_eq!(opened.open(&format!("ceg1.{}", b64url_encode(&raw)), NOW), Err(Reason::GrantTampered));
        // Failures are never remembered.
        assert!(!opened.opened.read().unwrap().keys().any(|k| !tokens.iter().any(|t| **t == **k)));
    }

    #[test]
    fn previous_secret_opens_during_rotation_but_never_mints() {
        let old = GrantSealer::new(&secret("old"));
        let token = old.mint(&claims()).unwrap();
        let rotated = GrantSealer::new(&secret("new")).with_previous(&secret("old"));
        assert_eq!(rotated.open(&token, NOW).unwrap(), claims());
        let fresh = rotated.mint(&claims()).unwrap();
        assert_eq!(old.open(&fresh, NOW), Err(Reason::GrantUnknownKey));
    }

    #[test]
    fn a_request_cannot_supply_a_session_key() {
        let err =
            serde_json::from_str::<GrantRequest>(r#"{"exec_id":"e","user_id":"u","session_key":"forged"}"#);
        assert!(err.is_err());
    }

    #[test]
    fn bad_requests_are_refused() {
        const LIFE: GrantLifetime = GrantLifetime { default_secs: 60, max_secs: 3600 };
        let bad = GrantRequest { exec_id: "a b".into(), user_id: "u".into(), ..Default::default() };
        assert!(bad.into_claims("k".into(), NOW, LIFE).is_err());
        let at = |iat: Option<i64>, exp: Option<i64>| {
            GrantRequest { exec_id: "e".into(), user_id: "u".into(), iat, exp, ..Default::default() }
                .into_claims("k".into(), NOW, LIFE)
        };
        // exp not after iat, already past, beyond the maximum lifetime
        // (i64::MAX included), iat ahead of now.
        assert!(at(None, Some(NOW)).is_err());
        assert!(at(Some(NOW - 100), Some(NOW - 1)).is_err());
        assert!(at(None, Some(NOW + 3601)).is_err());
        assert!(at(None, Some(i64::MAX)).is_err());
        assert!(at(Some(NOW + 10), Some(NOW + 20)).is_err());
        assert_eq!(at(None, Some(NOW + 3600)).unwrap().exp, NOW + 3600);
        assert_eq!(at(None, None).unwrap().exp, NOW + 60);
        // A default longer than the cap is cut to the cap.
        let long = GrantLifetime { default_secs: 7200, max_secs: 3600 };
        let claims = GrantRequest { exec_id: "e".into(), user_id: "u".into(), ..Default::default() }
            .into_claims("k".into(), NOW, long)
            .unwrap();
        assert_eq!(claims.exp, NOW + 3600);
    }

    #[test]
    fn what_open_would_refuse_for_size_is_never_minted() {
        let sealer = GrantSealer::new(&secret("size"));
        let mut big = claims();
        big.input_files = (0..2000).map(|i| format!("file_{i:06}")).collect();
        assert!(matches!(sealer.mint(&big), Err(MintError::Invalid(_))));
        big.input_files.truncate(10);
        let token = sealer.mint(&big).unwrap();
        assert!(sealer.open(&token, NOW).is_ok());
    }
}

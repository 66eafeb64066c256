//! Every change to a valid manifest or grant is refused, and refused for the
//! reason the place of the change calls for.
//!
//! - Exhaustive, for one token of each kind: every position of the token
//!   takes every other byte value (see [`replacements`]); every byte of the
//!   decoded grant, manifest header and signature takes every other value and
//!   is re-encoded canonically, so the change reaches the kid lookup, the
//!   AEAD or the signature; every truncation; extensions.
//! - Non-canonical base64 of the very same bytes, swapped key ids, and the
//!   real key sealing or signing contents that are not valid claims.
//! - proptest: near-valid tokens (real tokens of random claims with bytes
//!   flipped, cut, added, spliced or grafted from another token, and headers
//!   built from parts) refused for their reason.
//!
//! The reason owed is computed by [`grant_refusal`] and [`manifest_refusal`]:
//! models of the documented order of checks (ARCHITECTURE.md, "Mint and open
//! a grant", "Sign and verify a manifest"), written apart from the code.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::{Aead as _, Payload};
use chacha20poly1305::{KeyInit as _, XChaCha20Poly1305, XNonce};
use ed25519_dalek::Signer as _;
use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::grant::{GRANT_AAD, GRANT_PREFIX, GrantRequest, MAX_GRANT_TOKEN_BYTES};
use gatehouse_capability::manifest::{MANIFEST_TYP, MAX_MANIFEST_TOKEN_BYTES, ManifestSigner};
use gatehouse_capability::{
    GrantClaims, GrantLifetime, GrantSealer, ManifestClaims, ManifestSigningKey, ManifestVerifier, Secret,
};
use gatehouse_core::{Reason, is_valid_id};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

const NOW: i64 = 1_800_000_000;
const SECRET: &str = "tamper-0123456789abcdefghijklmnopqrstuvwxyz";
/// The wire form's key id length (ARCHITECTURE.md: kid ‖ nonce ‖ ciphertext ‖ tag).
const KID_LEN: usize = 8;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

/// base64url that also takes trailing bits and padding: what a lenient
/// reader would accept. Used only to show that a re-encoding carries the
/// very same bytes.
const LENIENT_URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
const LENIENT_STANDARD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

// ---------------------------------------------------------------- fixtures

fn signing_key() -> ManifestSigningKey {
    ManifestSigningKey::generate().unwrap()
}

fn manifest_with(key: &ManifestSigningKey, exec: &str) -> (ManifestVerifier, BodyDigest, String) {
    let verifier = ManifestVerifier::new(key.verifying_keys());
    let body = BodyDigest::of_json_bytes(br#"{"code":"print(1)"}"#).unwrap();
    let claims = json!({"exec_id": exec, "tenant_id": "t", "user_id": "u", "input_files": ["f"]});
    let signer =
        ManifestSigner::new(ManifestSigningKey::from_ed25519_text(&key.to_pkcs8_pem().unwrap()).unwrap());
    let (token, _) = signer.sign_for_body(claims.as_object().cloned().unwrap(), &body, NOW, 300).unwrap();
    (verifier, body, token)
}

fn manifest_fixture(exec: &str) -> (ManifestVerifier, BodyDigest, String) {
    manifest_with(&signing_key(), exec)
}

fn grant_claims(exec: &str) -> GrantClaims {
    GrantRequest {
        exec_id: exec.into(),
        tenant_id: Some("t".into()),
        user_id: "u".into(),
        input_files: vec!["f".into()],
        ..Default::default()
    }
    .into_claims("sk1_x".into(), NOW, GrantLifetime { default_secs: 300, max_secs: 86_400 })
    .unwrap()
}

fn sealer(secret: &str) -> GrantSealer {
    GrantSealer::new(&Secret::new(secret).unwrap())
}

fn grant_fixture(exec: &str) -> (GrantSealer, String) {
    let sealer = sealer(SECRET);
    let token = sealer.mint(&grant_claims(exec)).unwrap();
    (sealer, token)
}

fn grant_raw(token: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(token.strip_prefix(GRANT_PREFIX).unwrap()).unwrap()
}

fn grant_token(raw: &[u8]) -> String {
    format!("{GRANT_PREFIX}{}", URL_SAFE_NO_PAD.encode(raw))
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The three segments of a manifest, decoded.
fn segments(token: &str) -> [Vec<u8>; 3] {
    let parts: Vec<&str> = token.split('.').collect();
    [0, 1, 2].map(|i| URL_SAFE_NO_PAD.decode(parts[i]).unwrap())
}

fn join(parts: &[Vec<u8>; 3]) -> String {
    format!("{}.{}.{}", b64(&parts[0]), b64(&parts[1]), b64(&parts[2]))
}

/// The token with its byte at `i` replaced by every other byte value. A
/// token is a `&str`, and a lone byte of 0x80 or more is not UTF-8 and can
/// never reach `open` or `verify`; such a value goes in as the character
/// U+0080..U+00FF instead (its two UTF-8 bytes in the place of one), the
/// nearest a caller can come.
fn replacements(token: &str, i: usize) -> impl Iterator<Item = (u8, String)> + '_ {
    (0..=255u8).filter(move |&b| b != token.as_bytes()[i]).map(move |b| {
        let mut s = String::with_capacity(token.len() + 1);
        s.push_str(&token[..i]);
        s.push(char::from(b));
        s.push_str(&token[i + 1..]);
        (b, s)
    })
}

/// `check(i)` for every `i` in `0..n`, over two threads (the exhaustive
/// sweeps are a few hundred thousand verifications); the results in order.
fn sweep<T: Send>(n: usize, check: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let half = n / 2;
    std::thread::scope(|scope| {
        let first = scope.spawn(|| (0..half).map(&check).collect::<Vec<_>>());
        let second: Vec<T> = (half..n).map(&check).collect();
        let mut all = first.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        all.extend(second);
        all
    })
}

// ------------------------------------------------------------------ models

/// What `GrantSealer::open` owes `token`, a changed form of a grant whose
/// decoded bytes were `original` (sealed under the sealer's current key):
/// prefix → strict base64url → length → kid → AEAD, which refuses any change.
fn grant_refusal(token: &str, original: &[u8]) -> Reason {
    if token.is_empty() {
        return Reason::GrantMissing;
    }
    if token.len() > MAX_GRANT_TOKEN_BYTES {
        return Reason::GrantTooLarge;
    }
    let Some(body) = token.strip_prefix(GRANT_PREFIX) else { return Reason::GrantBadPrefix };
    let Ok(raw) = URL_SAFE_NO_PAD.decode(body) else { return Reason::GrantMalformed };
    if raw.len() < KID_LEN + NONCE_LEN + TAG_LEN {
        return Reason::GrantMalformed;
    }
    if raw[..KID_LEN] != original[..KID_LEN] {
        return Reason::GrantUnknownKey;
    }
    Reason::GrantTampered
}

/// The header as the verifier reads it: `alg` and `kid` required, `typ` and
/// `crit` optional, other members ignored, a member given twice refused.
#[derive(serde::Deserialize)]
struct Header {
    alg: String,
    kid: String,
    #[serde(default)]
    typ: Option<String>,
    #[serde(default)]
    crit: Option<Value>,
}

/// What `ManifestVerifier::verify` owes `token`, a changed form of an
/// Ed25519 manifest, from a verifier holding the Ed25519 keys `kids` and no
/// HMAC secret: size → three segments → header (strict base64url, JSON, no
/// `crit`, `typ`) → signature encoding → `alg` → `kid` → the signature,
/// which covers every byte of the first two segments and refuses any change.
fn manifest_refusal(token: &str, kids: &[&str]) -> Reason {
    if token.is_empty() {
        return Reason::ManifestMissing;
    }
    if token.len() > MAX_MANIFEST_TOKEN_BYTES {
        return Reason::ManifestTooLarge;
    }
    let parts: Vec<&str> = token.split('.').collect();
    let &[h, _, s] = parts.as_slice() else { return Reason::ManifestMalformed };
    let Ok(header) = URL_SAFE_NO_PAD.decode(h) else { return Reason::ManifestMalformed };
    let Ok(header) = serde_json::from_slice::<Header>(&header) else { return Reason::ManifestMalformed };
    if header.crit.is_some() || header.typ.as_deref().is_some_and(|t| t != MANIFEST_TYP) {
        return Reason::ManifestMalformed;
    }
    if URL_SAFE_NO_PAD.decode(s).is_err() {
        return Reason::ManifestMalformed;
    }
    match header.alg.as_str() {
        "EdDSA" if kids.contains(&header.kid.as_str()) => Reason::ManifestBadSignature,
        "EdDSA" => Reason::ManifestUnknownKey,
        _ => Reason::ManifestAlgorithmNotAllowed,
    }
}

fn kids(verifier: &ManifestVerifier) -> Vec<&str> {
    verifier.keys().kids().collect()
}

// ------------------------------------------------------- exhaustive: grants

#[test]
fn every_byte_value_at_every_position_of_a_grant_is_refused_for_its_reason() {
    let (sealer, token) = grant_fixture("exec-1");
    let raw = grant_raw(&token);
    assert!(sealer.open(&token, NOW).is_ok());
    // Whether some replacement at each position still decodes, so that the
    // kid lookup or the AEAD (not the decoder) has to refuse it.
    let past_the_decoder = sweep(token.len(), |i| {
        let mut past = false;
        for (b, t) in replacements(&token, i) {
            let want = grant_refusal(&t, &raw);
            assert_eq!(sealer.open(&t, NOW), Err(want), "byte {i} -> {b:#04x}");
            past |= matches!(want, Reason::GrantTampered | Reason::GrantUnknownKey);
        }
        past
    });
    assert!(past_the_decoder[GRANT_PREFIX.len()..].iter().all(|&p| p), "{past_the_decoder:?}");

    // Every byte of the decoded token, every other value, encoded canonically.
    sweep(raw.len(), |j| {
        for v in (0..=255u8).filter(|&v| v != raw[j]) {
            let mut changed = raw.clone();
            changed[j] = v;
            let want = if j < KID_LEN { Reason::GrantUnknownKey } else { Reason::GrantTampered };
            assert_eq!(sealer.open(&grant_token(&changed), NOW), Err(want), "raw byte {j} -> {v:#04x}");
        }
    });
}

#[test]
fn every_truncation_and_extension_of_a_grant_is_refused_for_its_reason() {
    let (sealer, token) = grant_fixture("exec-1");
    let raw = grant_raw(&token);
    for cut in 0..token.len() {
        let t = &token[..cut];
        assert_eq!(sealer.open(t, NOW), Err(grant_refusal(t, &raw)), "truncated at {cut}");
    }
    for b in 0..=255u8 {
        for n in 1..=3 {
            let t = format!("{token}{}", char::from(b).to_string().repeat(n));
            assert_eq!(sealer.open(&t, NOW), Err(grant_refusal(&t, &raw)), "{n} x {b:#04x} appended");
        }
    }
    // Decoded bytes cut or added and encoded canonically reach the AEAD.
    for cut in KID_LEN + NONCE_LEN + TAG_LEN..raw.len() {
        assert_eq!(
            sealer.open(&grant_token(&raw[..cut]), NOW),
            Err(Reason::GrantTampered),
            "raw cut at {cut}"
        );
    }
    for cut in 0..KID_LEN + NONCE_LEN + TAG_LEN {
        assert_eq!(
            sealer.open(&grant_token(&raw[..cut]), NOW),
            Err(Reason::GrantMalformed),
            "raw cut at {cut}"
        );
    }
    for b in 0..=255u8 {
        let mut longer = raw.clone();
        longer.push(b);
        assert_eq!(sealer.open(&grant_token(&longer), NOW), Err(Reason::GrantTampered), "{b:#04x} added");
    }
    // Around the size cap: the AEAD below it, the cap above.
    let mut padded = raw.clone();
    while grant_token(&padded).len() < MAX_GRANT_TOKEN_BYTES {
        padded.push(0);
    }
    assert_eq!(grant_token(&padded).len(), MAX_GRANT_TOKEN_BYTES, "16 KiB is a multiple of 4 chars plus 5");
    assert_eq!(sealer.open(&grant_token(&padded), NOW), Err(Reason::GrantTampered));
    padded.push(0);
    assert_eq!(sealer.open(&grant_token(&padded), NOW), Err(Reason::GrantTooLarge));
}

// ---------------------------------------------------- exhaustive: manifests

#[test]
fn every_byte_value_at_every_position_of_a_manifest_is_refused_for_its_reason() {
    let (verifier, body, token) = manifest_fixture("e");
    let kids = kids(&verifier);
    assert!(verifier.verify(&token, &body, NOW).is_ok());
    let reached_the_signature = sweep(token.len(), |i| {
        let mut reached = false;
        for (b, t) in replacements(&token, i) {
            let want = manifest_refusal(&t, &kids);
            assert_eq!(verifier.verify(&t, &body, NOW), Err(want), "byte {i} -> {b:#04x}");
            reached |= want == Reason::ManifestBadSignature;
        }
        reached
    });
    // Every position outside the header, but the separators, reaches the
    // signature check.
    let header_end = token.find('.').unwrap();
    for (i, reached) in reached_the_signature.iter().enumerate().skip(header_end) {
        assert!(*reached || token.as_bytes()[i] == b'.', "position {i} never reached the signature");
    }
}

#[test]
fn every_byte_value_in_a_manifests_decoded_header_and_signature_is_refused_for_its_reason() {
    let (verifier, body, token) = manifest_fixture("e");
    let kids = kids(&verifier);
    let parts = segments(&token);
    let mut seen = std::collections::BTreeSet::new();
    for segment in [0, 2] {
        for j in 0..parts[segment].len() {
            for v in (0..=255u8).filter(|&v| v != parts[segment][j]) {
                let mut changed = parts.clone();
                changed[segment][j] = v;
                let t = join(&changed);
                let want = manifest_refusal(&t, &kids);
                if segment == 2 {
                    assert_eq!(want, Reason::ManifestBadSignature);
                }
                assert_eq!(
                    verifier.verify(&t, &body, NOW),
                    Err(want),
                    "segment {segment} byte {j} -> {v:#04x}"
                );
                seen.insert(want.as_str());
            }
        }
    }
    // The header's changes reach each of its checks, and past them.
    for r in [
        Reason::ManifestMalformed,
        Reason::ManifestAlgorithmNotAllowed,
        Reason::ManifestUnknownKey,
        Reason::ManifestBadSignature,
    ] {
        assert!(seen.contains(r.as_str()), "{r:?} never reached: {seen:?}");
    }
}

#[test]
fn every_truncation_and_extension_of_a_manifest_is_refused_for_its_reason() {
    let (verifier, body, token) = manifest_fixture("e");
    let kids = kids(&verifier);
    for cut in 0..token.len() {
        let t = &token[..cut];
        assert_eq!(verifier.verify(t, &body, NOW), Err(manifest_refusal(t, &kids)), "truncated at {cut}");
    }
    for b in 0..=255u8 {
        for n in 1..=3 {
            let t = format!("{token}{}", char::from(b).to_string().repeat(n));
            assert_eq!(verifier.verify(&t, &body, NOW), Err(manifest_refusal(&t, &kids)), "{n} x {b:#04x}");
        }
    }
    let mut parts = segments(&token);
    for b in [0u8, 1, 0x7f, 0xff] {
        parts[2].push(b);
        assert_eq!(verifier.verify(&join(&parts), &body, NOW), Err(Reason::ManifestBadSignature));
    }
}

// ------------------------------------------- the same bytes, another spelling

/// Non-canonical spellings of `encoded` (canonical base64url of some bytes)
/// that a lenient reader decodes to the very same bytes: padding, the
/// standard alphabet, trailing bits set, line breaks.
fn respellings(encoded: &str) -> Vec<String> {
    let bytes = URL_SAFE_NO_PAD.decode(encoded).unwrap();
    let mut out = Vec::new();
    if !encoded.len().is_multiple_of(4) {
        out.push(format!("{encoded}{}", "=".repeat(4 - encoded.len() % 4)));
    }
    let standard = STANDARD.encode(&bytes).trim_end_matches('=').to_owned();
    if standard != encoded {
        out.push(standard);
    }
    // Trailing bits: the last character's unused low bits.
    let unused = match encoded.len() % 4 {
        2 => 4,
        3 => 2,
        _ => 0,
    };
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    if unused > 0 {
        let last = alphabet.iter().position(|&c| c == *encoded.as_bytes().last().unwrap()).unwrap();
        for bits in 1..(1 << unused) {
            let mut s = encoded[..encoded.len() - 1].to_owned();
            s.push(char::from(alphabet[last | bits]));
            out.push(s);
        }
    }
    for at in [1, encoded.len() / 2, encoded.len() - 1] {
        for gap in ["\n", "\r\n", " ", "\t"] {
            let mut s = encoded.to_owned();
            s.insert_str(at, gap);
            out.push(s);
        }
    }
    for s in &out {
        let compact: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let lenient = LENIENT_URL.decode(&compact).or_else(|_| LENIENT_STANDARD.decode(&compact));
        assert_eq!(lenient.as_deref(), Ok(&bytes[..]), "{s:?} is not a respelling");
    }
    out
}

#[test]
fn a_grant_respelled_in_base64_is_malformed_though_its_bytes_are_the_same() {
    let mut residues = std::collections::BTreeSet::new();
    let mut trailing_bits = 0;
    // Run ids of several lengths give every length modulo 3.
    for exec in ["e", "ex", "exe", "exec", "exec-", "exec-1", "exec-12", "exec-123"] {
        let (sealer, token) = grant_fixture(exec);
        let body = token.strip_prefix(GRANT_PREFIX).unwrap();
        residues.insert(grant_raw(&token).len() % 3);
        for respelled in respellings(body) {
            trailing_bits += usize::from(!respelled.contains(['=', '\n', ' ', '\t', '+', '/']));
            let t = format!("{GRANT_PREFIX}{respelled}");
            assert_eq!(sealer.open(&t, NOW), Err(Reason::GrantMalformed), "{respelled:?}");
        }
    }
    assert_eq!(residues.len(), 3);
    assert!(trailing_bits > 0, "no respelling in trailing bits was tried");
}

#[test]
fn a_manifest_respelled_in_base64_is_refused_though_its_bytes_are_the_same() {
    let (verifier, body, token) = manifest_fixture("exec-1");
    let parts: Vec<&str> = token.split('.').collect();
    for segment in 0..3 {
        for respelled in respellings(parts[segment]) {
            let mut p = parts.clone();
            p[segment] = &respelled;
            let t = p.join(".");
            // The claims segment is signed as written, so another spelling
            // breaks the signature; the others do not decode.
            let want = if segment == 1 { Reason::ManifestBadSignature } else { Reason::ManifestMalformed };
            assert_eq!(verifier.verify(&t, &body, NOW), Err(want), "segment {segment}: {respelled:?}");
        }
    }
}

// ----------------------------------------------------------- key ids swapped

#[test]
fn a_grant_under_another_keys_id_is_refused_by_the_aead_or_the_kid() {
    let old = sealer("old-0123456789abcdefghijklmnopqrstuvwxyz");
    let new = sealer("new-0123456789abcdefghijklmnopqrstuvwxyz");
    let rotated = GrantSealer::new(&Secret::new("new-0123456789abcdefghijklmnopqrstuvwxyz").unwrap())
        .with_previous(&Secret::new("old-0123456789abcdefghijklmnopqrstuvwxyz").unwrap());
    let from_old = grant_raw(&old.mint(&grant_claims("e")).unwrap());
    let from_new = grant_raw(&new.mint(&grant_claims("e")).unwrap());
    assert_ne!(from_old[..KID_LEN], from_new[..KID_LEN]);
    assert!(rotated.open(&grant_token(&from_old), NOW).is_ok());
    assert!(rotated.open(&grant_token(&from_new), NOW).is_ok());
    let swap = |raw: &[u8], kid: &[u8]| {
        let mut r = raw.to_vec();
        r[..KID_LEN].copy_from_slice(&kid[..KID_LEN]);
        grant_token(&r)
    };
    // Both kids are held: the kid picks the wrong key and the AEAD refuses.
    assert_eq!(rotated.open(&swap(&from_old, &from_new), NOW), Err(Reason::GrantTampered));
    assert_eq!(rotated.open(&swap(&from_new, &from_old), NOW), Err(Reason::GrantTampered));
    // A kid nobody holds, and a held kid on a node that only holds the other.
    assert_eq!(rotated.open(&swap(&from_new, &[0; KID_LEN]), NOW), Err(Reason::GrantUnknownKey));
    assert_eq!(old.open(&grant_token(&from_new), NOW), Err(Reason::GrantUnknownKey));
    assert_eq!(new.open(&swap(&from_old, &from_new), NOW), Err(Reason::GrantTampered));
}

fn header(alg: &str, kid: &str) -> Vec<u8> {
    json!({"alg": alg, "kid": kid, "typ": MANIFEST_TYP}).to_string().into_bytes()
}

#[test]
fn a_manifest_under_another_keys_id_is_refused_by_the_signature_or_the_kid() {
    let (one, two) = (signing_key(), signing_key());
    let hmac = ManifestSigningKey::from_hmac_secret(Secret::new(SECRET).unwrap());
    let mut keys = one.verifying_keys();
    keys.merge(two.verifying_keys());
    keys.merge(hmac.verifying_keys());
    let verifier = ManifestVerifier::new(keys);
    let (_, body, token) = manifest_with(&one, "e");
    assert!(verifier.verify(&token, &body, NOW).is_ok());
    let parts = segments(&token);
    let with_header = |h: Vec<u8>| join(&[h, parts[1].clone(), parts[2].clone()]);
    // Another held key's id: the signature is checked with that key.
    assert_eq!(
        verifier.verify(&with_header(header("EdDSA", two.kid())), &body, NOW),
        Err(Reason::ManifestBadSignature)
    );
    // The HMAC secret's id and algorithm: the Ed25519 signature is no HMAC tag.
    assert_eq!(
        verifier.verify(&with_header(header("HS256", hmac.kid())), &body, NOW),
        Err(Reason::ManifestBadSignature)
    );
    // An Ed25519 id under HS256, the HMAC id under EdDSA, an id nobody holds.
    assert_eq!(
        verifier.verify(&with_header(header("HS256", one.kid())), &body, NOW),
        Err(Reason::ManifestUnknownKey)
    );
    assert_eq!(
        verifier.verify(&with_header(header("EdDSA", hmac.kid())), &body, NOW),
        Err(Reason::ManifestUnknownKey)
    );
    assert_eq!(
        verifier.verify(&with_header(header("EdDSA", "ed25519:AAAAAAAAAAAAAAAA")), &body, NOW),
        Err(Reason::ManifestUnknownKey)
    );
    // Correctly signed by `one`, but the claims name `two`'s id.
    let mut claims: ManifestClaims = serde_json::from_slice(&parts[1]).unwrap();
    claims.kid = two.kid().to_owned();
    let signed =
        ManifestSigner::new(ManifestSigningKey::from_ed25519_text(&one.to_pkcs8_pem().unwrap()).unwrap())
            .sign(&claims);
    assert_eq!(verifier.verify(&signed, &body, NOW), Err(Reason::ManifestClaimsInvalid));
}

// ------------------------------------- the real key around invalid contents

/// The grant key as documented: HKDF-SHA-256 of the secret (salt
/// `gatehouse/egress-grant`), key and kid expanded under their own labels.
/// Changing it invalidates every grant in flight; this pins it.
fn seal_raw(secret: &str, plaintext: &[u8]) -> String {
    let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(b"gatehouse/egress-grant"), secret.as_bytes());
    let (mut key, mut kid) = ([0u8; 32], [0u8; KID_LEN]);
    hk.expand(b"gatehouse/grant-key/v1", &mut key).unwrap();
    hk.expand(b"gatehouse/grant-kid/v1", &mut kid).unwrap();
    let nonce = [7u8; NONCE_LEN];
    let sealed = XChaCha20Poly1305::new(&chacha20poly1305::Key::from(key))
        .encrypt(&XNonce::from(nonce), Payload { msg: plaintext, aad: GRANT_AAD })
        .unwrap();
    grant_token(&[&kid[..], &nonce, &sealed].concat())
}

/// What `open` owes an authentic seal around `plaintext`: the claims if
/// they are exactly one postcard `GrantClaims` of version 1 and type
/// `grant`, judged by the clock; `grant_claims_invalid` otherwise.
fn sealed_answer(plaintext: &[u8], now: i64) -> Result<GrantClaims, Reason> {
    match postcard::take_from_bytes::<GrantClaims>(plaintext) {
        Ok((c, [])) if c.v == 1 && c.typ == "grant" => {
            if now >= c.exp {
                Err(Reason::GrantExpired)
            } else if c.iat > now + 30 {
                Err(Reason::GrantNotYetValid)
            } else {
                Ok(c)
            }
        }
        _ => Err(Reason::GrantClaimsInvalid),
    }
}

#[test]
fn authentic_seals_around_invalid_claims_are_claims_invalid() {
    let sealer = sealer(SECRET);
    let claims = grant_claims("e");
    let plain = postcard::to_allocvec(&claims).unwrap();
    assert_eq!(sealer.open(&seal_raw(SECRET, &plain), NOW), Ok(claims.clone()), "the documented seal");
    let with = |f: &dyn Fn(&mut GrantClaims)| {
        let mut c = claims.clone();
        f(&mut c);
        postcard::to_allocvec(&c).unwrap()
    };
    for (plaintext, want) in [
        (with(&|c| c.v = 2), Reason::GrantClaimsInvalid),
        (with(&|c| c.v = 0), Reason::GrantClaimsInvalid),
        (with(&|c| c.typ = "manifest".into()), Reason::GrantClaimsInvalid),
        (with(&|c| c.typ = "Grant".into()), Reason::GrantClaimsInvalid),
        ([&plain[..], &[0]].concat(), Reason::GrantClaimsInvalid),
        (plain[..plain.len() - 1].to_vec(), Reason::GrantClaimsInvalid),
        (Vec::new(), Reason::GrantClaimsInvalid),
        (br#"{"v":1,"typ":"grant"}"#.to_vec(), Reason::GrantClaimsInvalid),
        (with(&|c| c.exp = NOW), Reason::GrantExpired),
        (with(&|c| c.iat = NOW + 31), Reason::GrantNotYetValid),
    ] {
        assert_eq!(sealer.open(&seal_raw(SECRET, &plaintext), NOW), Err(want), "{plaintext:?}");
    }
}

/// The Ed25519 signature of `header.claims` (both given as bytes) by `key`.
fn sign_raw(key: &ManifestSigningKey, header: &[u8], claims: &[u8]) -> String {
    let ManifestSigningKey::Ed25519 { key, .. } = key else { unreachable!() };
    let signed = format!("{}.{}", b64(header), b64(claims));
    let signature = key.sign(signed.as_bytes()).to_bytes();
    format!("{signed}.{}", b64(&signature))
}

/// Valid claims for `kid` and `body`, as a JSON object.
fn claims_json(kid: &str, body: &BodyDigest) -> serde_json::Map<String, Value> {
    json!({
        "v": 1, "typ": "manifest", "kid": kid, "exec_id": "e", "tenant_id": "t", "user_id": "u",
        "input_files": ["f"], "read_sessions": [], "output_session_id": "o", "max_requests": 3,
        "execute_body_sha256": body.to_hex(), "iat": NOW, "exp": NOW + 300,
    })
    .as_object()
    .cloned()
    .unwrap()
}

/// What `verify` owes an authentic signature over claims `bytes` (max
/// lifetime and skew at their defaults): the claims rules of ARCHITECTURE.md
/// (`deny_unknown_fields`, ids, digest form, kid, `exp > iat`) → lifetime →
/// expiry and `iat` with skew → the body digest.
fn signed_answer(bytes: &[u8], kid: &str, body: &BodyDigest) -> Result<ManifestClaims, Reason> {
    let Ok(c) = serde_json::from_slice::<ManifestClaims>(bytes) else {
        return Err(Reason::ManifestClaimsInvalid);
    };
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let ids_ok = is_valid_id(&c.exec_id)
        && is_valid_id(&c.user_id)
        && c.tenant_id.as_deref().is_none_or(is_valid_id)
        && c.output_session_id.as_deref().is_none_or(is_valid_id);
    if c.v != 1
        || c.typ != "manifest"
        || !ids_ok
        || !hex(&c.execute_body_sha256)
        || c.kid != kid
        || c.exp <= c.iat
    {
        return Err(Reason::ManifestClaimsInvalid);
    }
    if c.exp.saturating_sub(c.iat) > 24 * 3600 {
        return Err(Reason::ManifestLifetimeTooLong);
    }
    if NOW - 30 >= c.exp {
        return Err(Reason::ManifestExpired);
    }
    if c.iat > NOW + 30 {
        return Err(Reason::ManifestNotYetValid);
    }
    if c.execute_body_sha256 != body.to_hex() {
        return Err(Reason::ManifestBodyMismatch);
    }
    Ok(c)
}

#[test]
fn authentic_signatures_over_invalid_claims_are_refused_for_their_reason() {
    let key = signing_key();
    let verifier = ManifestVerifier::new(key.verifying_keys());
    let body = BodyDigest::of_json_bytes(br#"{"code":"print(1)"}"#).unwrap();
    let kid = key.kid().to_owned();
    let h = header("EdDSA", &kid);
    let valid = claims_json(&kid, &body);
    let with = |field: &str, value: Value| {
        let mut c = valid.clone();
        if value.is_null() {
            c.remove(field);
        } else {
            c.insert(field.into(), value);
        }
        serde_json::to_vec(&c).unwrap()
    };
    let text = serde_json::to_string(&valid).unwrap();
    let invalid = Reason::ManifestClaimsInvalid;
    let cases: Vec<(Vec<u8>, Reason)> = vec![
        (with("extra", json!(1)), invalid),
        (with("v", json!(2)), invalid),
        (with("v", json!("1")), invalid),
        (with("typ", json!("grant")), invalid),
        (with("kid", json!("ed25519:AAAAAAAAAAAAAAAA")), invalid),
        (with("exec_id", json!("a b")), invalid),
        (with("exec_id", json!("")), invalid),
        (with("exec_id", json!("..")), invalid),
        (with("exec_id", json!("x".repeat(129))), invalid),
        (with("user_id", json!(["u"])), invalid),
        (with("user_id", Value::Null), invalid),
        (with("tenant_id", json!("t/1")), invalid),
        (with("output_session_id", json!("o\u{e9}")), invalid),
        (with("input_files", json!("f")), invalid),
        (with("max_requests", json!(-1)), invalid),
        (with("execute_body_sha256", json!(body.to_hex().to_uppercase())), invalid),
        (with("execute_body_sha256", json!(&body.to_hex()[..63])), invalid),
        (with("execute_body_sha256", Value::Null), invalid),
        (with("exp", json!(NOW)), invalid),
        (with("iat", json!(1.5)), invalid),
        (text.replacen("\"v\":1", "\"v\":1,\"v\":1", 1).into_bytes(), invalid),
        (text.replacen("\"exec_id\":\"e\"", "\"exec_id\":\"e\",\"exec_id\":\"x\"", 1).into_bytes(), invalid),
        (text.as_bytes()[..text.len() - 1].to_vec(), invalid),
        (format!("{text} x").into_bytes(), invalid),
        (b"[]".to_vec(), invalid),
        (Vec::new(), invalid),
        (vec![0xff, 0xfe], invalid),
        (with("exp", json!(NOW + 24 * 3600 + 1)), Reason::ManifestLifetimeTooLong),
        (
            {
                let mut c = valid.clone();
                c.insert("iat".into(), json!(NOW - 400));
                c.insert("exp".into(), json!(NOW - 30));
                serde_json::to_vec(&c).unwrap()
            },
            Reason::ManifestExpired,
        ),
        (
            {
                let mut c = valid.clone();
                c.insert("iat".into(), json!(NOW + 31));
                c.insert("exp".into(), json!(NOW + 100));
                serde_json::to_vec(&c).unwrap()
            },
            Reason::ManifestNotYetValid,
        ),
        (with("execute_body_sha256", json!("0".repeat(64))), Reason::ManifestBodyMismatch),
    ];
    for (claims, want) in cases {
        assert_eq!(
            signed_answer(&claims, &kid, &body).err(),
            Some(want),
            "model: {}",
            String::from_utf8_lossy(&claims)
        );
        let got = verifier.verify(&sign_raw(&key, &h, &claims), &body, NOW).map(|m| m.claims);
        assert_eq!(got, Err(want), "{}", String::from_utf8_lossy(&claims));
    }
    let valid = serde_json::to_vec(&valid).unwrap();
    let got = verifier.verify(&sign_raw(&key, &h, &valid), &body, NOW).map(|m| m.claims);
    assert_eq!(got, signed_answer(&valid, &kid, &body));
    assert!(got.is_ok());
}

// ----------------------------------------------------- near-valid, generated

/// Changes to a token's decoded bytes.
#[derive(Debug, Clone)]
enum ByteEdit {
    /// XOR the bytes at these places with these (non-zero) masks.
    Flip(Vec<(Index, u8)>),
    /// Keep only the first bytes.
    Truncate(Index),
    /// Add bytes at the end.
    Extend(Vec<u8>),
    /// Replace a range with other bytes.
    Splice(Index, Index, Vec<u8>),
    /// Swap two bytes.
    Swap(Index, Index),
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        3 => prop::collection::vec((any::<Index>(), 1..=255u8), 1..4).prop_map(ByteEdit::Flip),
        1 => any::<Index>().prop_map(ByteEdit::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..40).prop_map(ByteEdit::Extend),
        1 => (any::<Index>(), any::<Index>(), prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(a, b, v)| ByteEdit::Splice(a, b, v)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| ByteEdit::Swap(a, b)),
    ]
}

fn apply(edit: &ByteEdit, bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if b.is_empty() {
        return b;
    }
    match edit {
        ByteEdit::Flip(flips) => {
            for (at, mask) in flips {
                let i = at.index(b.len());
                b[i] ^= mask;
            }
        }
        ByteEdit::Truncate(at) => b.truncate(at.index(b.len())),
        ByteEdit::Extend(more) => b.extend_from_slice(more),
        ByteEdit::Splice(x, y, with) => {
            let (x, y) = (x.index(b.len() + 1), y.index(b.len() + 1));
            b.splice(x.min(y)..x.max(y), with.iter().copied());
        }
        ByteEdit::Swap(x, y) => {
            let (x, y) = (x.index(b.len()), y.index(b.len()));
            b.swap(x, y);
        }
    }
    b
}

/// Changes to a token's text.
#[derive(Debug, Clone)]
enum TextEdit {
    Replace(Index, char),
    Insert(Index, char),
    Delete(Index),
}

fn text_edit() -> impl Strategy<Value = TextEdit> {
    let c = prop_oneof![
        4 => prop::sample::select(
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".map(char::from).to_vec()
        ),
        1 => prop::sample::select(vec!['.', '=', '+', '/', ' ', '\n', '\0', '%', 'é', '\u{ff0e}']),
        1 => any::<char>(),
    ];
    prop_oneof![
        (any::<Index>(), c.clone()).prop_map(|(i, c)| TextEdit::Replace(i, c)),
        (any::<Index>(), c).prop_map(|(i, c)| TextEdit::Insert(i, c)),
        any::<Index>().prop_map(TextEdit::Delete),
    ]
}

fn apply_text(edit: &TextEdit, token: &str) -> String {
    let mut chars: Vec<char> = token.chars().collect();
    match edit {
        TextEdit::Replace(at, c) => {
            let i = at.index(chars.len());
            chars[i] = *c;
        }
        TextEdit::Insert(at, c) => chars.insert(at.index(chars.len() + 1), *c),
        TextEdit::Delete(at) => {
            chars.remove(at.index(chars.len()));
        }
    }
    chars.into_iter().collect()
}

#[derive(Debug, Clone)]
enum GrantChange {
    Bytes(ByteEdit),
    Text(TextEdit),
    /// The kid of a sealer for another secret.
    OtherKid,
    /// The first bytes of this token, the rest of another one sealed under
    /// the same key (another nonce, other claims).
    Graft(Index),
}

fn grant_change() -> impl Strategy<Value = GrantChange> {
    prop_oneof![
        4 => byte_edit().prop_map(GrantChange::Bytes),
        2 => text_edit().prop_map(GrantChange::Text),
        1 => Just(GrantChange::OtherKid),
        1 => any::<Index>().prop_map(GrantChange::Graft),
    ]
}

/// One header member's value, as generated.
fn header_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            json!("EdDSA"),
            json!("HS256"),
            json!("none"),
            json!("eddsa"),
            json!("ES256"),
            json!(""),
            json!("KID"),
            json!("OTHER"),
            json!(MANIFEST_TYP),
            json!("JWT"),
            json!(null),
            json!(1),
            json!(["b64"]),
            json!([]),
            json!({}),
        ]),
        "[a-zA-Z0-9:+_-]{0,12}".prop_map(Value::from),
    ]
}

/// A header built from members: `alg`, `kid` and `typ` mostly their real
/// values, sometimes absent or another value; `crit` and an extra member
/// sometimes present; sometimes raw JSON with a member given twice. `"KID"`
/// stands for the signing key's id, `"OTHER"` for an id nobody holds.
fn header_text() -> impl Strategy<Value = Vec<u8>> {
    let member = |real: Value| {
        prop_oneof![
            3 => Just(Some(real)),
            1 => Just(None),
            2 => header_value().prop_map(Some),
        ]
    };
    let extra = || prop_oneof![4 => Just(None), 1 => header_value().prop_map(Some)];
    let built = (member(json!("EdDSA")), member(json!("KID")), member(json!(MANIFEST_TYP)), extra(), extra())
        .prop_map(|(alg, kid, typ, crit, x5u)| {
            let mut h = serde_json::Map::new();
            for (name, value) in [("alg", alg), ("kid", kid), ("typ", typ), ("crit", crit), ("x5u", x5u)] {
                if let Some(v) = value {
                    h.insert(name.into(), v);
                }
            }
            serde_json::to_vec(&h).unwrap()
        });
    let duplicated =
        (header_value(), prop::sample::select(vec!["alg", "kid", "typ", "crit"])).prop_map(|(v, dup)| {
            format!(r#"{{"alg":"EdDSA","kid":"KID","typ":"{MANIFEST_TYP}","{dup}":{v}}}"#).into_bytes()
        });
    prop_oneof![6 => built, 1 => duplicated]
}

#[derive(Debug, Clone)]
enum ManifestChange {
    /// An edit to one segment's decoded bytes (0 header, 1 claims, 2 signature).
    Segment(usize, ByteEdit),
    Text(TextEdit),
    /// A header built from parts.
    Header(Vec<u8>),
    /// One segment taken from another manifest signed by the same key.
    Foreign(usize),
    /// The segments in another order.
    Reorder(usize),
}

fn manifest_change() -> impl Strategy<Value = ManifestChange> {
    prop_oneof![
        4 => (0usize..3, byte_edit()).prop_map(|(s, e)| ManifestChange::Segment(s, e)),
        2 => text_edit().prop_map(ManifestChange::Text),
        2 => header_text().prop_map(ManifestChange::Header),
        1 => (0usize..3).prop_map(ManifestChange::Foreign),
        1 => (1usize..6).prop_map(ManifestChange::Reorder),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Real grants of random claims, changed near-validly: refused, with
    /// the reason their change calls for; most of them reach the AEAD.
    #[test]
    fn near_valid_grants_are_refused_for_their_reason(exec in "[a-z0-9-]{1,40}", change in grant_change()) {
        let (sealer, token) = grant_fixture(&exec);
        let raw = grant_raw(&token);
        let changed = match &change {
            GrantChange::Bytes(edit) => grant_token(&apply(edit, &raw)),
            GrantChange::Text(edit) => apply_text(edit, &token),
            GrantChange::OtherKid => {
                let other = grant_raw(&self::sealer("other-0123456789abcdefghijklmnopqrstuvwxyz").mint(&grant_claims(&exec)).unwrap());
                grant_token(&[&other[..KID_LEN], &raw[KID_LEN..]].concat())
            }
            GrantChange::Graft(at) => {
                let other = sealer.mint(&grant_claims(&format!("{exec}x"))).unwrap();
                let other = grant_raw(&other);
                // Past the kid (which both share), before the end of either.
                let cut = KID_LEN + 1 + at.index(raw.len().min(other.len()) - KID_LEN - 1);
                let grafted = grant_token(&[&raw[..cut], &other[cut..]].concat());
                prop_assume!(grafted != grant_token(&other));
                grafted
            }
        };
        prop_assume!(changed != token);
        prop_assert_eq!(sealer.open(&changed, NOW), Err(grant_refusal(&changed, &raw)), "{:?}", change);
    }

    /// Authentic seals around changed claims: exactly the claims postcard
    /// reads (judged by the clock), or `grant_claims_invalid`.
    #[test]
    fn authentic_seals_around_changed_claims_open_to_what_they_hold(exec in "[a-z0-9-]{1,40}", edit in byte_edit()) {
        let plaintext = apply(&edit, &postcard::to_allocvec(&grant_claims(&exec)).unwrap());
        let sealer = sealer(SECRET);
        prop_assert_eq!(sealer.open(&seal_raw(SECRET, &plaintext), NOW), sealed_answer(&plaintext, NOW), "{:?}", edit);
    }

    /// Real manifests, changed near-validly: refused, with the reason their
    /// change calls for.
    #[test]
    fn near_valid_manifests_are_refused_for_their_reason(
        exec in "[a-z0-9-]{1,40}",
        change in manifest_change(),
    ) {
        let key = signing_key();
        let (verifier, body, token) = manifest_with(&key, &exec);
        let kids = kids(&verifier);
        let parts = segments(&token);
        let changed = match &change {
            ManifestChange::Segment(s, edit) => {
                let mut p = parts.clone();
                p[*s] = apply(edit, &p[*s]);
                join(&p)
            }
            ManifestChange::Text(edit) => apply_text(edit, &token),
            ManifestChange::Header(h) => {
                // The generator's placeholders become this key's id and another's.
                let h = String::from_utf8(h.clone()).unwrap()
                    .replace("\"KID\"", &json!(key.kid()).to_string())
                    .replace("\"OTHER\"", "\"ed25519:AAAAAAAAAAAAAAAA\"");
                join(&[h.into_bytes(), parts[1].clone(), parts[2].clone()])
            }
            ManifestChange::Foreign(s) => {
                let (_, _, other) = manifest_with(&key, &format!("{exec}x"));
                let mut p = parts.clone();
                p[*s] = segments(&other)[*s].clone();
                join(&p)
            }
            ManifestChange::Reorder(n) => {
                let t: Vec<&str> = token.split('.').collect();
                let order = [[0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]][n - 1];
                order.map(|i| t[i]).join(".")
            }
        };
        prop_assume!(changed != token);
        prop_assert_eq!(verifier.verify(&changed, &body, NOW), Err(manifest_refusal(&changed, &kids)), "{:?}", change);
    }

    /// Authentic signatures over changed claims: the claims, or the reason
    /// the claims rules give.
    #[test]
    fn authentic_signatures_over_changed_claims_verify_to_what_they_hold(
        edit in byte_edit(),
        field in prop::sample::select(vec!["v", "typ", "kid", "exec_id", "tenant_id", "user_id", "input_files", "execute_body_sha256", "iat", "exp", "output_session_id", "unknown"]),
        value in prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            (NOW - 100_000..NOW + 100_000).prop_map(Value::from),
            "[a-zA-Z0-9._:/ -]{0,8}".prop_map(Value::from),
            "[0-9a-fA-F]{63,65}".prop_map(Value::from),
            Just(json!(["f"])),
            Just(json!("manifest")),
            Just(json!(1)),
        ],
        bytes_or_field in any::<bool>(),
    ) {
        let key = signing_key();
        let verifier = ManifestVerifier::new(key.verifying_keys());
        let body = BodyDigest::of_json_bytes(br#"{"code":"print(1)"}"#).unwrap();
        let mut claims = claims_json(key.kid(), &body);
        let claims = if bytes_or_field {
            apply(&edit, &serde_json::to_vec(&claims).unwrap())
        } else {
            if value.is_null() { claims.remove(field); } else { claims.insert(field.into(), value); }
            serde_json::to_vec(&claims).unwrap()
        };
        let got = verifier.verify(&sign_raw(&key, &header("EdDSA", key.kid()), &claims), &body, NOW).map(|m| m.claims);
        prop_assert_eq!(got, signed_answer(&claims, key.kid(), &body), "{}", String::from_utf8_lossy(&claims));
    }
}

//! Every single-byte change to a valid manifest or grant is refused.
//!
//! Exhaustive over positions for one token of each kind, plus proptest over
//! random positions, replacement bytes and claims.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::grant::GrantRequest;
use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::{GrantSealer, ManifestSigningKey, ManifestVerifier, Secret};
use proptest::prelude::*;
use serde_json::json;

const NOW: i64 = 1_800_000_000;

fn manifest_fixture(exec: &str) -> (ManifestVerifier, BodyDigest, String) {
    let key = ManifestSigningKey::generate().unwrap();
    let verifier = ManifestVerifier::new(key.verifying_keys());
    let body = BodyDigest::of_json_bytes(br#"{"code":"print(1)"}"#).unwrap();
    let claims = json!({"exec_id": exec, "tenant_id": "t", "user_id": "u", "input_files": ["f"]});
    let (token, _) = ManifestSigner::new(key)
        .sign_for_body(claims.as_object().cloned().unwrap(), &body, NOW, 300)
        .unwrap();
    (verifier, body, token)
}

fn grant_fixture(exec: &str) -> (GrantSealer, String) {
    let sealer = GrantSealer::new(&Secret::new("tamper-0123456789abcdefghijklmnopqrstuvwxyz").unwrap());
    let claims = GrantRequest {
        exec_id: exec.into(),
        tenant_id: Some("t".into()),
        user_id: "u".into(),
        input_files: vec!["f".into()],
        ..Default::default()
    }
    .into_claims(
        "sk1_x".into(),
        NOW,
        gatehouse_capability::GrantLifetime { default_secs: 300, max_secs: 86_400 },
    )
    .unwrap();
    let token = sealer.mint(&claims).unwrap();
    (sealer, token)
}

fn replace_byte(token: &str, index: usize, byte: u8) -> Option<String> {
    let mut bytes = token.as_bytes().to_vec();
    if bytes[index] == byte {
        return None;
    }
    bytes[index] = byte;
    String::from_utf8(bytes).ok()
}

/// Bytes that keep the token in its own alphabet (the hard case: the
/// change survives decoding) plus separators and junk.
const REPLACEMENTS: &[u8] = b"AQgw_-.9=+/ \x00";

#[test]
fn every_position_of_a_manifest_is_covered() {
    let (verifier, body, token) = manifest_fixture("exec-1");
    assert!(verifier.verify(&token, &body, NOW).is_ok());
    for i in 0..token.len() {
        for &b in REPLACEMENTS {
            if let Some(t) = replace_byte(&token, i, b) {
                assert!(verifier.verify(&t, &body, NOW).is_err(), "byte {i} -> {:?} accepted", b as char);
            }
        }
    }
    // Truncations and extensions too.
    for cut in 0..token.len() {
        assert!(verifier.verify(&token[..cut], &body, NOW).is_err(), "truncated at {cut}");
    }
    for suffix in ["A", "=", ".", "AA"] {
        assert!(verifier.verify(&format!("{token}{suffix}"), &body, NOW).is_err());
    }
}

#[test]
fn every_position_of_a_grant_is_covered() {
    let (sealer, token) = grant_fixture("exec-1");
    assert!(sealer.open(&token, NOW).is_ok());
    for i in 0..token.len() {
        for &b in REPLACEMENTS {
            if let Some(t) = replace_byte(&token, i, b) {
                assert!(sealer.open(&t, NOW).is_err(), "byte {i} -> {:?} accepted", b as char);
            }
        }
    }
    for cut in 0..token.len() {
        assert!(sealer.open(&token[..cut], NOW).is_err(), "truncated at {cut}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_single_byte_changes_to_manifests_are_refused(exec in "[a-z0-9-]{1,40}", pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let (verifier, body, token) = manifest_fixture(&exec);
        if let Some(t) = replace_byte(&token, pos.index(token.len()), byte) {
            prop_assert!(verifier.verify(&t, &body, NOW).is_err());
        }
    }

    #[test]
    fn random_single_byte_changes_to_grants_are_refused(exec in "[a-z0-9-]{1,40}", pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let (sealer, token) = grant_fixture(&exec);
        if let Some(t) = replace_byte(&token, pos.index(token.len()), byte) {
            prop_assert!(sealer.open(&t, NOW).is_err());
        }
    }

    #[test]
    fn arbitrary_strings_never_panic_and_never_verify(s in "\\PC{0,400}") {
        let (verifier, body, _) = manifest_fixture("e");
        let (sealer, _) = grant_fixture("e");
        prop_assert!(verifier.verify(&s, &body, NOW).is_err());
        prop_assert!(sealer.open(&s, NOW).is_err());
        let with_prefix = format!("ceg1.{s}");
        prop_assert!(sealer.open(&with_prefix, NOW).is_err());
    }
}

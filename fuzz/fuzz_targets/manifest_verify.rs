//! Manifest verification on arbitrary tokens and bodies: never panics, and
//! never accepts anything the fixed key did not sign.
#![no_main]

use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::{ManifestSigningKey, ManifestVerifier};
use libfuzzer_sys::fuzz_target;

const KEY: &str = "MC4CAQAwBQYDK2VwBCIEIBqnPLbl3mqEeHZ5Q0Wd9h6b2cMzQyq1FvYk4bKx0Yh8";

fuzz_target!(|data: &[u8]| {
    let key = ManifestSigningKey::from_ed25519_text(KEY).expect("the fixed key parses");
    let verifier = ManifestVerifier::new(key.verifying_keys());
    // First line: the token; the rest: the body.
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let token = String::from_utf8_lossy(&data[..split]);
    let body = BodyDigest::of_json_bytes(data.get(split + 1..).unwrap_or_default())
        .unwrap_or(BodyDigest([0; 32]));
    assert!(verifier.verify(&token, &body, 1_800_000_000).is_err(), "forged manifest accepted");
});

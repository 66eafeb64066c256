//! Capability throughput, each operation beside the raw primitive it wraps,
//! measured in the same run. Ratios are recorded in docs/benchmarks.md.
//!
//! Run: `cargo bench -p gatehouse-capability --bench capability`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use chacha20poly1305::aead::{Aead as _, Payload};
use chacha20poly1305::{KeyInit as _, XChaCha20Poly1305, XNonce};
use criterion::{Criterion, criterion_group, criterion_main};
use ed25519_dalek::{Signer as _, SigningKey};
use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::grant::{GRANT_AAD, GrantRequest};
use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::{GrantSealer, ManifestSigningKey, ManifestVerifier, Secret};
use serde_json::json;

const NOW: i64 = 1_800_000_000;

/// A realistic ~1 KB execute body.
fn body_1k() -> Vec<u8> {
    let files: Vec<String> = (0..16).map(|i| format!("inputs/session-7/file-{i:03}.csv")).collect();
    let body = json!({
        "lang": "python",
        "code": "import pandas as pd\nfor f in files:\n    df = pd.read_csv(f)\n    print(df.describe())\n".repeat(4),
        "files": files,
        "timeout_ms": 30000,
        "env": {"LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"},
    });
    let bytes = serde_json::to_vec(&body).unwrap();
    assert!((900..1200).contains(&bytes.len()), "body is {} bytes", bytes.len());
    bytes
}

fn manifest(c: &mut Criterion) {
    let key = ManifestSigningKey::generate().unwrap();
    let verifier = ManifestVerifier::new(key.verifying_keys());
    let signer = ManifestSigner::new(key);
    let body = body_1k();
    let digest = BodyDigest::of_json_bytes(&body).unwrap();
    let claims = json!({"exec_id": "exec-1", "tenant_id": "t1", "user_id": "u1", "input_files": ["a", "b"], "max_requests": 100});
    let (token, complete) =
        signer.sign_for_body(claims.as_object().cloned().unwrap(), &digest, NOW, 300).unwrap();

    // The raw primitive: one Ed25519 signature over a message of the token's signed length.
    let raw = SigningKey::from_bytes(&[7u8; 32]);
    let raw_public = raw.verifying_key();
    let message = vec![b'x'; token.rfind('.').unwrap()];
    let raw_sig = raw.sign(&message);

    let mut g = c.benchmark_group("manifest");
    g.bench_function("raw_ed25519_sign", |b| b.iter(|| raw.sign(black_box(&message))));
    g.bench_function("sign", |b| b.iter(|| signer.sign(black_box(&complete))));
    g.bench_function("raw_ed25519_verify_strict", |b| {
        b.iter(|| raw_public.verify_strict(black_box(&message), black_box(&raw_sig)).unwrap())
    });
    g.bench_function("verify_1k_body", |b| {
        b.iter(|| {
            let digest = BodyDigest::of_json_bytes(black_box(&body)).unwrap();
            verifier.verify(black_box(&token), &digest, NOW).unwrap()
        })
    });
    // The two parts of verify_1k_body, to show where time goes.
    g.bench_function("body_digest_1k", |b| b.iter(|| BodyDigest::of_json_bytes(black_box(&body)).unwrap()));
    g.bench_function("verify_token_only", |b| {
        b.iter(|| verifier.verify(black_box(&token), &digest, NOW).unwrap())
    });
    g.finish();
}

fn grant(c: &mut Criterion) {
    let secret = Secret::new("bench-0123456789abcdefghijklmnopqrstuvwxyz").unwrap();
    let sealer = GrantSealer::new(&secret);
    let claims = GrantRequest {
        grant_id: Some("gr_0192f3a1b2c3d4e5f60718293a4b5c6d".into()),
        exec_id: "exec-0192f3a1b2c3".into(),
        tenant_id: Some("tenant-acme".into()),
        user_id: "user-42".into(),
        input_files: vec!["file_a1".into(), "file_b2".into(), "file_c3".into()],
        read_sessions: vec!["sess-1".into()],
        output_session_id: Some("out-1".into()),
        max_requests: Some(100),
        ..Default::default()
    }
    .into_claims("sk1_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd".into(), NOW, 900)
    .unwrap();
    let token = sealer.mint(&claims).unwrap();
    let plaintext = postcard::to_allocvec(&claims).unwrap();

    // The raw primitive: XChaCha20-Poly1305 over a plaintext of the same size.
    let cipher = XChaCha20Poly1305::new(&chacha20poly1305::Key::from([9u8; 32]));
    let nonce = XNonce::from([3u8; 24]);
    let sealed = cipher.encrypt(&nonce, Payload { msg: &plaintext, aad: GRANT_AAD }).unwrap();

    let mut g = c.benchmark_group("grant");
    g.bench_function("raw_xchacha20poly1305_seal", |b| {
        b.iter(|| cipher.encrypt(&nonce, Payload { msg: black_box(&plaintext), aad: GRANT_AAD }).unwrap())
    });
    g.bench_function("mint", |b| b.iter(|| sealer.mint(black_box(&claims)).unwrap()));
    g.bench_function("raw_xchacha20poly1305_open", |b| {
        b.iter(|| cipher.decrypt(&nonce, Payload { msg: black_box(&sealed), aad: GRANT_AAD }).unwrap())
    });
    g.bench_function("open", |b| b.iter(|| sealer.open(black_box(&token), NOW).unwrap()));
    g.finish();
}

criterion_group!(benches, manifest, grant);
criterion_main!(benches);

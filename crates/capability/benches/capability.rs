//! Capability throughput, each operation beside the raw primitive it wraps,
//! measured in the same run. Ratios are recorded in docs/benchmarks.md.
//!
//! Run: `cargo bench -p gatehouse-capability --bench capability`
//!
//! Besides criterion's per-benchmark statistics, the run ends with an
//! *interleaved* throughput ratio for each target: short blocks of the raw
//! primitive and of the wrapped operation alternate, and the median of the
//! per-round ratios is printed. On a shared virtual machine whose speed drifts
//! by ±20% over seconds, only measurements taken side by side in time can be
//! compared; this is that comparison.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use chacha20poly1305::aead::{Aead as _, Payload};
use chacha20poly1305::{KeyInit as _, XChaCha20Poly1305, XNonce};
use criterion::{Criterion, criterion_group};
use ed25519_dalek::{Signer as _, SigningKey};
use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::grant::{GRANT_AAD, GrantRequest};
use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::{GrantClaims, GrantSealer, ManifestSigningKey, ManifestVerifier, Secret};
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

/// A signed manifest for a 1 KB body, and the raw primitive beside it: one
/// Ed25519 signature over a message of the token's signed length.
struct ManifestFixture {
    signer: ManifestSigner,
    verifier: ManifestVerifier,
    body: Vec<u8>,
    digest: BodyDigest,
    token: String,
    complete: gatehouse_capability::ManifestClaims,
    raw: SigningKey,
    raw_public: ed25519_dalek::VerifyingKey,
    message: Vec<u8>,
    raw_sig: ed25519_dalek::Signature,
}

fn manifest_fixture() -> ManifestFixture {
    let key = ManifestSigningKey::generate().unwrap();
    let verifier = ManifestVerifier::new(key.verifying_keys());
    let signer = ManifestSigner::new(key);
    let body = body_1k();
    let digest = BodyDigest::of_json_bytes(&body).unwrap();
    let claims = json!({"exec_id": "exec-1", "tenant_id": "t1", "user_id": "u1", "input_files": ["a", "b"], "max_requests": 100});
    let (token, complete) =
        signer.sign_for_body(claims.as_object().cloned().unwrap(), &digest, NOW, 300).unwrap();
    let raw = SigningKey::from_bytes(&[7u8; 32]);
    let raw_public = raw.verifying_key();
    let message = vec![b'x'; token.rfind('.').unwrap()];
    let raw_sig = raw.sign(&message);
    ManifestFixture { signer, verifier, body, digest, token, complete, raw, raw_public, message, raw_sig }
}

/// A minted grant, and the raw primitive beside it: XChaCha20-Poly1305 over a
/// plaintext of the same size.
struct GrantFixture {
    sealer: GrantSealer,
    claims: GrantClaims,
    token: String,
    plaintext: Vec<u8>,
    cipher: XChaCha20Poly1305,
    nonce: XNonce,
    sealed: Vec<u8>,
}

fn grant_fixture() -> GrantFixture {
    let secret = Secret::new("bench-0123456789abcdefghijklmnopqrstuvwxyz").unwrap();
    let sealer = GrantSealer::new(&secret);
    let claims = bench_grant_claims();
    let token = sealer.mint(&claims).unwrap();
    let plaintext = postcard::to_allocvec(&claims).unwrap();
    let cipher = XChaCha20Poly1305::new(&chacha20poly1305::Key::from([9u8; 32]));
    let nonce = XNonce::from([3u8; 24]);
    let sealed = cipher.encrypt(&nonce, Payload { msg: &plaintext, aad: GRANT_AAD }).unwrap();
    GrantFixture { sealer, claims, token, plaintext, cipher, nonce, sealed }
}

fn manifest(c: &mut Criterion) {
    let ManifestFixture {
        signer,
        verifier,
        body,
        digest,
        token,
        complete,
        raw,
        raw_public,
        message,
        raw_sig,
    } = manifest_fixture();

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

fn bench_grant_claims() -> GrantClaims {
    GrantRequest {
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
    .into_claims(
        "sk1_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd".into(),
        NOW,
        gatehouse_capability::GrantLifetime { default_secs: 900, max_secs: 86_400 },
    )
    .unwrap()
}

fn grant(c: &mut Criterion) {
    let GrantFixture { sealer, claims, token, plaintext, cipher, nonce, sealed } = grant_fixture();

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

/// Median over rounds of (raw time / wrapped time) for equal operation
/// counts, alternating which runs first: the wrapped operation's throughput as
/// a fraction of the raw primitive's.
fn interleaved_ratio(ops: u32, rounds: usize, mut raw: impl FnMut(), mut wrapped: impl FnMut()) -> f64 {
    let time = |f: &mut dyn FnMut()| {
        let start = std::time::Instant::now();
        for _ in 0..ops {
            f();
        }
        start.elapsed().as_secs_f64()
    };
    let mut ratios: Vec<f64> = (0..rounds)
        .map(|round| {
            if round % 2 == 0 {
                let r = time(&mut raw);
                r / time(&mut wrapped)
            } else {
                let w = time(&mut wrapped);
                time(&mut raw) / w
            }
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

fn ratios() {
    let ManifestFixture { verifier, body, token, raw_public, message, raw_sig, .. } = manifest_fixture();
    let verify = interleaved_ratio(
        50,
        201,
        || raw_public.verify_strict(black_box(&message), black_box(&raw_sig)).unwrap(),
        || {
            let digest = BodyDigest::of_json_bytes(black_box(&body)).unwrap();
            verifier.verify(black_box(&token), &digest, NOW).unwrap();
        },
    );

    let GrantFixture { sealer, token, cipher, nonce, sealed, .. } = grant_fixture();
    let open = interleaved_ratio(
        1000,
        201,
        || {
            cipher.decrypt(&nonce, Payload { msg: black_box(&sealed), aad: GRANT_AAD }).unwrap();
        },
        || {
            sealer.open(black_box(&token), NOW).unwrap();
        },
    );
    println!(
        "interleaved throughput ratio, manifest verify (1 KB body) / raw Ed25519 verify_strict: {verify:.3} (target >= 0.80)"
    );
    println!(
        "interleaved throughput ratio, grant open / raw XChaCha20-Poly1305 open (same plaintext): {open:.3} (target >= 0.50)"
    );
}

criterion_group!(benches, manifest, grant);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratios();
}

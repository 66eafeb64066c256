//! Signing a request at the door with AWS Signature Version 4 beside
//! injecting a static secret by a header rule: the same S3 `GetObject`
//! request as boto3 sends it (seven headers, no body), each step producing
//! the request as sent and the scrub for its answer. The goal is signing at
//! ≥ 0.8× the static rule's throughput. A body in hand is hashed on top,
//! in proportion to its length (SHA-256, about 0.8 µs a KiB here).
//!
//! Criterion's numbers first, then an interleaved ratio: blocks of each
//! step alternate (1000 requests a block, 201 rounds, order alternating),
//! and the median per-round ratio is printed, so a VM's speed phases fall
//! on both alike.
//!
//! `cargo bench -p gatehouse-egress --bench sigv4`

#![allow(missing_docs, clippy::unwrap_used, reason = "benchmark")]

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use gatehouse_capability::sigv4::{AwsKeys, Scope, Signer};
use gatehouse_egress::inject::{Delivery, InjectRule, LeaseEntry, LeaseState, apply, placeholder_for};
use gatehouse_egress::sigv4::{Payload, ToSign, sign};
use http::{HeaderMap, HeaderValue};

const LEASE_ID: &str = "lease_0123456789abcdef0123456789abcdef";
const NOW: i64 = 1_800_000_000;

fn sandbox_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("authorization", HeaderValue::from_static(
        "AWS4-HMAC-SHA256 Credential=AKIADUMMYDUMMYDUMMY0/20270115/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=00"));
    h.insert("x-amz-date", HeaderValue::from_static("20270115T080000Z"));
    h.insert("x-amz-content-sha256", HeaderValue::from_static("UNSIGNED-PAYLOAD"));
    h.insert("accept-encoding", HeaderValue::from_static("identity"));
    h.insert("user-agent", HeaderValue::from_static("Boto3/1.43 md/Botocore#1.43"));
    h.insert("x-amz-meta-run", HeaderValue::from_static("run_0123"));
    h
}

fn static_lease() -> LeaseEntry {
    LeaseEntry {
        lease_id: LEASE_ID.to_owned(),
        placeholder: placeholder_for(LEASE_ID).unwrap(),
        host: "bucket.s3.amazonaws.com".to_owned(),
        granted_at: 0,
        state: LeaseState::Live { expires_at: i64::MAX },
        delivery: Delivery::Inject(InjectRule::header("authorization", "Bearer {secret}").unwrap()),
        allow_plain_http: false,
    }
}

struct Steps {
    lease: LeaseEntry,
    placeholder: String,
    signer: Signer,
}

impl Steps {
    fn new() -> Self {
        let lease = static_lease();
        Self {
            placeholder: lease.placeholder.clone(),
            lease,
            signer: Signer::new(
                AwsKeys::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None)
                    .unwrap(),
                Scope::new("us-east-1", "s3").unwrap(),
            ),
        }
    }

    fn inject(&self) -> usize {
        let mut headers = sandbox_headers();
        let scrub = apply(&mut headers, &self.lease, b"ghp_Q7x2Lm9Vt4Rk8Wz3Np6Yb1Hc5Jd0FsA1b2").unwrap();
        headers.len() + usize::from(scrub.is_empty())
    }

    fn sign(&self) -> usize {
        let mut headers = sandbox_headers();
        let request = ToSign {
            method: "GET",
            authority: "bucket.s3.amazonaws.com",
            path_and_query: "/runs/out/result.txt?x-id=GetObject",
            payload: Payload::InHand(b""),
        };
        let scrub = sign(&mut headers, &request, &self.signer, &self.placeholder, NOW).unwrap();
        headers.len() + usize::from(scrub.is_empty())
    }
}

fn sigv4(c: &mut Criterion) {
    let steps = Steps::new();
    let mut group = c.benchmark_group("door");
    group.bench_function("static header rule", |b| b.iter(|| black_box(steps.inject())));
    group.bench_function("sigv4 signature", |b| b.iter(|| black_box(steps.sign())));
    group.finish();

    const BLOCK: usize = 1000;
    const ROUNDS: usize = 201;
    let time = |f: &dyn Fn() -> usize| {
        let started = Instant::now();
        for _ in 0..BLOCK {
            black_box(f());
        }
        started.elapsed().as_secs_f64()
    };
    let mut ratios = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let (static_secs, signed_secs) = if round % 2 == 0 {
            let s = time(&|| steps.inject());
            (s, time(&|| steps.sign()))
        } else {
            let signed = time(&|| steps.sign());
            (time(&|| steps.inject()), signed)
        };
        // Throughput of signing over throughput of the static rule.
        ratios.push(static_secs / signed_secs);
    }
    ratios.sort_by(f64::total_cmp);
    println!("interleaved throughput ratio, sigv4 signature / static header rule: {:.3}", ratios[ROUNDS / 2]);
}

criterion_group!(benches, sigv4);
criterion_main!(benches);

//! Signing a request at the door with AWS Signature Version 4 beside
//! injecting a static secret by a header rule: the same S3 `GetObject`
//! request as boto3 sends it (seven headers, no body), each step producing
//! the request as sent and the scrub for its answer. The goal is signing at
//! ≥ 0.8× the static rule's throughput. A body in hand is hashed on top,
//! in proportion to its length (SHA-256, about 0.8 µs a KiB here).
//!
//! Then the same two beside each other as the whole of the door's lease
//! step for a run's request (`leases::at_the_door` over leases held in
//! memory: read, examined, the generation checked, then the rule or the
//! signature).
//!
//! Criterion's numbers first, then an interleaved ratio for each: blocks of
//! each alternate (1000 requests a block, 201 rounds, order alternating),
//! and the median per-round ratio is printed, so a VM's speed phases fall
//! on both alike.
//!
//! `cargo bench -p gatehouse-egress --bench sigv4`

#![allow(missing_docs, clippy::unwrap_used, reason = "benchmark")]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use gatehouse_capability::sigv4::{AwsKeys, Scope, Signer};
use gatehouse_capability::{CredentialSecret, LocalSeal};
use gatehouse_core::Reason;
use gatehouse_egress::inject::{Delivery, InjectRule, LeaseEntry, LeaseState, apply, placeholder_for};
use gatehouse_egress::leases::{
    LeaseFuture, LeaseSecret, LeaseSource, OfRun, Outbound, RunLeases, at_the_door,
};
use gatehouse_egress::sigv4::{Payload, ToSign, sign};
use http::{HeaderMap, HeaderValue};

const LEASE_ID: &str = "lease_0123456789abcdef0123456789abcdef";
const NOW: i64 = 1_800_000_000;
const STATIC_SECRET: &str = "ghp_Q7x2Lm9Vt4Rk8Wz3Np6Yb1Hc5Jd0FsA1b2";

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
    fn signer_copy(&self) -> Signer {
        Signer::new(
            AwsKeys::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None).unwrap(),
            Scope::new("us-east-1", "s3").unwrap(),
        )
    }

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
        let scrub = apply(&mut headers, &self.lease, STATIC_SECRET.as_bytes()).unwrap();
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

    println!(
        "interleaved throughput ratio, sigv4 signature / static header rule: {:.3}",
        interleaved(&|| steps.inject(), &|| steps.sign())
    );

    // The whole of the door's lease step for a run's request, each kind:
    // the leases read (a source in memory), the request examined, the
    // lease's generation checked, then the rule or the signature.
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let static_source = MemorySource::of(static_lease(), None);
    let signing_source = MemorySource::of(signing_lease(), Some(Arc::new(steps.signer_copy())));
    let door = |source: &MemorySource| {
        let mut headers = sandbox_headers();
        let run = OfRun { grant_id: "grant_1", run_id: "run_1", generation: Some(1) };
        let request = Outbound {
            method: "GET",
            authority: "bucket.s3.amazonaws.com",
            headers: &mut headers,
            path_and_query: "/runs/out/result.txt?x-id=GetObject",
            host: "bucket.s3.amazonaws.com",
            over_tls: true,
            body: Some(b""),
        };
        let injected = runtime.block_on(at_the_door(source, run, request, NOW)).unwrap();
        headers.len() + usize::from(injected.scrub.is_empty())
    };
    let mut group = c.benchmark_group("door, the lease step");
    group.bench_function("static lease", |b| b.iter(|| black_box(door(&static_source))));
    group.bench_function("sigv4 lease", |b| b.iter(|| black_box(door(&signing_source))));
    group.finish();
    println!(
        "interleaved throughput ratio, the lease step, sigv4 / static: {:.3}",
        interleaved(&|| door(&static_source), &|| door(&signing_source))
    );
}

/// The median ratio of throughputs, `b`'s over `a`'s: blocks of 1000 calls
/// of each alternate, 201 rounds, the order alternating.
fn interleaved(a: &dyn Fn() -> usize, b: &dyn Fn() -> usize) -> f64 {
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
        let (a_secs, b_secs) = if round % 2 == 0 {
            let a_secs = time(a);
            (a_secs, time(b))
        } else {
            let b_secs = time(b);
            (time(a), b_secs)
        };
        ratios.push(a_secs / b_secs);
    }
    ratios.sort_by(f64::total_cmp);
    ratios[ROUNDS / 2]
}

/// A run's leases held in memory: the door's source without a store.
struct MemorySource(Arc<RunLeases>);

impl MemorySource {
    fn of(entry: LeaseEntry, signer: Option<Arc<Signer>>) -> Self {
        let seal = Arc::new(LocalSeal::new().unwrap());
        let secret = match signer {
            Some(signer) => LeaseSecret::Signer(signer),
            None => LeaseSecret::Sealed(seal.seal(&CredentialSecret::new(STATIC_SECRET).unwrap())),
        };
        Self(Arc::new(RunLeases { generation: 1, entries: vec![entry], secrets: vec![Ok(secret)], seal }))
    }
}

impl LeaseSource for MemorySource {
    fn leases<'a>(&'a self, _: &'a str, _: u64) -> LeaseFuture<'a, Result<Arc<RunLeases>, Reason>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }

    fn leaked<'a>(&'a self, _: &'a str, _: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(async {})
    }

    fn current_generation<'a>(&'a self, _: &'a str) -> LeaseFuture<'a, Result<u64, Reason>> {
        Box::pin(async { Ok(1) })
    }
}

fn signing_lease() -> LeaseEntry {
    LeaseEntry { delivery: Delivery::SigV4(Scope::new("us-east-1", "s3").unwrap()), ..static_lease() }
}

criterion_group!(benches, sigv4);
criterion_main!(benches);

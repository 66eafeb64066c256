//! The policy decision with rule objects: a request's host and request
//! stages under a policy of 1,000 rule objects (methods and paths), beside
//! the host-only decision under 1,000 host entries (what a policy was
//! before rule objects). The target: under 2 µs a request at the median.
//!
//! `cargo bench -p gatehouse-egress --bench rules`

#![allow(missing_docs, clippy::unwrap_used, reason = "benchmark")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gatehouse_egress::{Policy, parse_url};
use http::Method;
use serde_json::json;

const RULES: usize = 1_000;
const NOW: i64 = 1_800_000_000;

/// 1,000 rule objects, each host with methods and paths, half with an
/// expiry; and a deny rule with a reason for every tenth host.
fn rule_objects() -> Policy {
    let allow: Vec<_> = (0..RULES)
        .map(|i| {
            let mut rule = json!({"host": format!("host-{i}.example.com"), "methods": ["GET", "HEAD", "POST"],
                "paths": [format!("/v{}/public/", i % 7), "/health"]});
            if i % 2 == 0 {
                rule["expires_at"] = json!("2030-01-01T00:00:00Z");
            }
            rule
        })
        .collect();
    let deny: Vec<_> = (0..RULES / 10)
        .map(|i| json!({"host": format!("host-{}.example.com", i * 10), "methods": ["DELETE"], "reason": "no"}))
        .collect();
    Policy::from_json(json!({"mode": "allowlist", "allow": allow, "deny": deny}).to_string().as_bytes())
        .unwrap()
}

/// 1,000 host entries: the policy as it was before rule objects.
fn host_entries() -> Policy {
    let allow: Vec<_> = (0..RULES).map(|i| format!("host-{i}.example.com")).collect();
    Policy::from_json(json!({"mode": "allowlist", "allow": allow}).to_string().as_bytes()).unwrap()
}

fn decide(c: &mut Criterion) {
    let objects = rule_objects();
    let hosts = host_entries();
    // The last host: every rule before it is looked at.
    let allowed = parse_url("https://host-999.example.com/v5/public/a/b/../c?x=1").unwrap();
    let refused = parse_url("https://host-999.example.com/v1/private").unwrap();
    let mut group = c.benchmark_group("policy decision, 1,000 rules");
    group.bench_function("rule objects: host and request stages (allowed)", |b| {
        b.iter(|| {
            let p = black_box(&objects);
            p.check_host(black_box(&allowed), NOW).unwrap();
            p.check_request(black_box(&allowed), &Method::GET, NOW).unwrap();
        })
    });
    group.bench_function("rule objects: host and request stages (refused by path)", |b| {
        b.iter(|| {
            let p = black_box(&objects);
            p.check_host(black_box(&refused), NOW).unwrap();
            p.check_request(black_box(&refused), &Method::GET, NOW).unwrap_err();
        })
    });
    group.bench_function("host entries: host stage only (before rule objects)", |b| {
        b.iter(|| black_box(&hosts).check_host(black_box(&allowed), NOW).unwrap())
    });
    group.finish();
}

criterion_group!(benches, decide);
criterion_main!(benches);

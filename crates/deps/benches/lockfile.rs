//! Parsing a large `package-lock.json` (lockfileVersion 3, 6,000 packages,
//! generated) beside `serde_json::from_slice::<serde_json::Value>` of the
//! same bytes: the raw JSON parse every lockfile parse must at least do.
//!
//! `cargo bench -p gatehouse-deps --bench lockfile`

#![allow(missing_docs, clippy::unwrap_used, reason = "benchmark")]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Map, Value, json};

/// A realistic v3 lockfile: scoped and unscoped names, nested duplicates,
/// dev and optional flags, integrity hashes, dependency maps.
fn package_lock(n: usize) -> Vec<u8> {
    let mut packages = Map::new();
    packages
        .insert("".into(), json!({"name": "app", "version": "1.0.0", "dependencies": {"pkg-0": "^1.0.0"}}));
    for i in 0..n {
        let name = if i % 7 == 0 { format!("@scope{}/pkg-{i}", i % 13) } else { format!("pkg-{i}") };
        let version = format!("{}.{}.{}", i % 5, i % 17, i % 31);
        let path = if i % 11 == 0 {
            format!("node_modules/pkg-{}/node_modules/{name}", i / 2)
        } else {
            format!("node_modules/{name}")
        };
        let mut deps = Map::new();
        for d in 1..=(i % 6) {
            deps.insert(format!("pkg-{}", (i * 31 + d * 7) % n), Value::String(format!("^{}.0.0", d % 4)));
        }
        let mut entry = json!({
            "version": version,
            "resolved": format!("https://registry.npmjs.org/{name}/-/{}-{version}.tgz", name.rsplit('/').next().unwrap()),
            "integrity": format!("sha512-{}", "A1b2C3d4".repeat(11)),
            "dependencies": deps,
            "engines": {"node": ">=14"},
            "license": "MIT",
        });
        if i % 3 == 0 {
            entry["dev"] = Value::Bool(true);
        }
        if i % 19 == 0 {
            entry["optional"] = Value::Bool(true);
        }
        packages.insert(path, entry);
    }
    serde_json::to_vec_pretty(&json!({"name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": true, "packages": packages}))
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let bytes = package_lock(6000);
    let parsed = gatehouse_deps::parse("package-lock.json", &bytes).unwrap();
    assert!(parsed.packages.len() >= 5000, "{} packages", parsed.packages.len());
    let mut group = c.benchmark_group("package_lock_6000");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("gatehouse_parse", |b| {
        b.iter(|| gatehouse_deps::parse("package-lock.json", std::hint::black_box(&bytes)).unwrap())
    });
    group.bench_function("serde_json_value", |b| {
        b.iter(|| serde_json::from_slice::<Value>(std::hint::black_box(&bytes)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Ledger throughput and latency, each beside a reference in the same run.
//!
//! Run: `cargo bench -p gatehouse-ledger --bench ledger`
//! (needs `redis-server` and `redis-benchmark`, Debian package `redis-server`).
//!
//! - In-process: `consume` on 1 thread and on 8 threads (separate grants, and
//!   one shared grant), beside a bare `Mutex<HashMap>` lookup-and-increment.
//! - Redis: 50 concurrent clients, one connection each, no pipelining,
//!   `consume` in a loop, beside `redis-benchmark -t incr -c 50 -P 1` against
//!   the same private redis-server.
//! - Revocation: with 100,000 live grants registered, an emergency revoke
//!   (every grant) and a tenant-wide revoke, each beside revoking one grant,
//!   in-process and on Redis; then a spend on a covered grant, to show it is
//!   refused.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gatehouse_ledger::{
    LedgerBackend, MemoryLedger, Operation, RedisLedger, RedisLedgerConfig, Registration,
};
use gatehouse_test_support::RedisServer;

const NOW: i64 = 1_800_000_000;
const RUN: Duration = Duration::from_secs(3);

fn registration(id: &str) -> Registration {
    Registration {
        grant_id: id.into(),
        exec_id: "exec".into(),
        tenant_id: Some("t".into()),
        exp: NOW + 3600,
        input_files: vec![],
        read_sessions: vec![],
        output_session_id: None,
        max_upload_bytes: 0,
        max_output_files: 0,
        max_requests: (1 << 53) - 1,
        max_egress_bytes: (1 << 53) - 1,
        max_tool_calls: (1 << 53) - 1,
    }
}

/// Runs `op` on `threads` threads for `RUN`; returns ops/s and sampled
/// per-op latencies in nanoseconds (every 16th op).
fn threaded(threads: usize, op: impl Fn(usize) + Sync) -> (f64, Vec<u64>) {
    let deadline = Instant::now() + RUN;
    let start = Instant::now();
    let results: Vec<(u64, Vec<u64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let op = &op;
                s.spawn(move || {
                    let mut n = 0u64;
                    let mut samples = Vec::new();
                    while Instant::now() < deadline {
                        for i in 0..256u64 {
                            if i % 16 == 0 {
                                let t0 = Instant::now();
                                op(t);
                                samples.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
                            } else {
                                op(t);
                            }
                        }
                        n += 256;
                    }
                    (n, samples)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let total: u64 = results.iter().map(|r| r.0).sum();
    let samples = results.into_iter().flat_map(|r| r.1).collect();
    (total as f64 / elapsed, samples)
}

fn percentile(samples: &mut [u64], p: f64) -> u64 {
    samples.sort_unstable();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples.get(i).copied().unwrap_or(0)
}

fn report(name: &str, ops: f64, mut samples: Vec<u64>, unit: &str) {
    let (p50, p99) = (percentile(&mut samples, 0.50), percentile(&mut samples, 0.99));
    println!("{name:<58} {:>12.0} ops/s   p50 {p50:>6} {unit}   p99 {p99:>6} {unit}", ops);
}

fn in_process() {
    let ledger = MemoryLedger::new();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for t in 0..8 {
        rt.block_on(ledger.register(&registration(&format!("g{t}")))).unwrap();
    }
    let ids: Vec<String> = (0..8).map(|t| format!("g{t}")).collect();

    // Reference: the bare data-structure work a consume cannot avoid.
    let reference: Mutex<HashMap<String, u64>> = Mutex::new(ids.iter().map(|id| (id.clone(), 0)).collect());
    let (ops, lat) = threaded(1, |_| {
        *reference.lock().unwrap().get_mut("g0").unwrap() += 1;
    });
    report("reference: Mutex<HashMap> lookup+increment, 1 thread", ops, lat, "ns");
    let reference_ops = ops;

    let (ops, lat) = threaded(1, |_| {
        ledger.consume_sync("g0", &Operation::Request, NOW).unwrap();
    });
    report("in-process consume, 1 thread", ops, lat, "ns");
    println!("  ratio to reference: {:.2}; target >= 2,000,000 ops/s on one core", ops / reference_ops);

    let (ops, lat) = threaded(8, |t| {
        ledger.consume_sync(&ids[t], &Operation::Request, NOW).unwrap();
    });
    report("in-process consume, 8 threads, separate grants (2 cores)", ops, lat, "ns");
    let (ops, lat) = threaded(8, |_| {
        ledger.consume_sync("g0", &Operation::Request, NOW).unwrap();
    });
    report("in-process consume, 8 threads, one shared grant (2 cores)", ops, lat, "ns");
}

fn redis_benchmark_incr(port: u16, clients: usize) -> Option<f64> {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            &clients.to_string(),
            "-n",
            "300000",
            "-P",
            "1",
        ])
        .args(["-t", "incr", "-q"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "INCR: 123456.79 requests per second, p50=0.199 msec"
    let line = text.split(['\r', '\n']).rev().find(|l| l.contains("requests per second"))?;
    line.split(':').nth(1)?.split_whitespace().next()?.parse().ok()
}

fn redis() {
    let server = RedisServer::start();
    let port: u16 = server.url().rsplit(':').next().unwrap().trim_end_matches('/').parse().unwrap();
    let clients = 50;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (ops, samples) = rt.block_on(async {
        let mut config = RedisLedgerConfig::new(server.url());
        config.op_timeout = Duration::from_secs(5);
        let ledgers: Vec<RedisLedger> = (0..clients).map(|_| RedisLedger::new(&config).unwrap()).collect();
        for (i, l) in ledgers.iter().enumerate() {
            l.register(&registration(&format!("r{i}"))).await.unwrap();
            l.consume(&format!("r{i}"), &Operation::Request, NOW).await.unwrap();
        }
        let deadline = Instant::now() + RUN;
        let start = Instant::now();
        let tasks: Vec<_> = ledgers
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                tokio::spawn(async move {
                    let id = format!("r{i}");
                    let mut n = 0u64;
                    let mut samples = Vec::new();
                    while Instant::now() < deadline {
                        let t0 = Instant::now();
                        l.consume(&id, &Operation::Request, NOW).await.unwrap();
                        samples.push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                        n += 1;
                    }
                    (n, samples)
                })
            })
            .collect();
        let mut total = 0;
        let mut samples = Vec::new();
        for t in tasks {
            let (n, s) = t.await.unwrap();
            total += n;
            samples.extend(s);
        }
        (total as f64 / start.elapsed().as_secs_f64(), samples)
    });
    report("redis consume, 50 clients, no pipelining", ops, samples, "µs");
    match redis_benchmark_incr(port, clients) {
        Some(incr) => {
            println!("{:<58} {incr:>12.0} ops/s", "reference: redis-benchmark -t incr -c 50 -P 1");
            println!("  ratio consume / INCR: {:.2} (target >= 0.50)", ops / incr);
        }
        None => println!("redis-benchmark not found or unparseable: no reference ratio"),
    }
}

/// Registers `n` live grants of tenant `t`, named `{prefix}-{i}`.
async fn register_many(ledger: &(impl LedgerBackend + Sync), prefix: &str, n: usize) {
    for i in 0..n {
        let r = Registration { exec_id: format!("e{i}"), ..registration(&format!("{prefix}-{i}")) };
        ledger.register(&r).await.unwrap();
    }
}

/// Times one revocation of each scope with `LIVE` grants registered.
async fn revocation(name: &str, ledger: &(impl LedgerBackend + Sync)) {
    use gatehouse_ledger::RevokeScope;
    const LIVE: usize = 100_000;
    register_many(ledger, "live", LIVE).await;
    let time = |label: &'static str, elapsed: Duration, revoked: u64| {
        println!("{name} {label:<44} {:>10.3} ms   revoked {revoked}", elapsed.as_secs_f64() * 1e3);
    };
    let t0 = Instant::now();
    let one = ledger.revoke(&RevokeScope::Grant("live-7".into())).await.unwrap();
    time("revoke one grant (reference)", t0.elapsed(), one);
    let t0 = Instant::now();
    let tenant = ledger.revoke(&RevokeScope::Tenant("t".into())).await.unwrap();
    time("revoke tenant t (100,000 live grants)", t0.elapsed(), tenant);
    register_many(ledger, "later", LIVE).await;
    let t0 = Instant::now();
    let all = ledger.revoke(&RevokeScope::All).await.unwrap();
    time("emergency revoke (100,000 live grants)", t0.elapsed(), all);
    let refused = ledger.consume("later-99999", &Operation::Request, NOW).await;
    println!("{name} a later spend on a covered grant: {refused:?}");
}

fn revocations() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(revocation("in-process", &MemoryLedger::new()));
    let server = RedisServer::start();
    rt.block_on(async {
        let mut config = RedisLedgerConfig::new(server.url());
        config.op_timeout = Duration::from_secs(10);
        revocation("redis     ", &RedisLedger::new(&config).unwrap()).await;
    });
}

fn main() {
    // `cargo test --benches` runs this with --bench absent: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::args().any(|a| a == "revocation") {
        revocations();
        return;
    }
    in_process();
    redis();
    revocations();
}

//! The ledger across processes: two gatehouse nodes sharing one real Redis.

use std::path::Path;

use gatehouse_test_support::RedisServer;
use serde_json::{Value, json};

use crate::cli::{Server, gatehouse, http, spawn_server};
use crate::support::{GRANT_SECRET, SESSION_KEY_SECRET, TOKEN, private_key_pem};

fn node(dir: &Path, redis: &RedisServer, key: &str) -> (Server, String) {
    let mut c = gatehouse(dir);
    c.env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_REDIS_URL", redis.url())
        .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY", key)
        .env("CODEAPI_EGRESS_GRANT_SECRET", GRANT_SECRET)
        .env("CODEAPI_INTERNAL_SERVICE_TOKEN", TOKEN);
    let (server, addr, _, _) = spawn_server(c);
    (server, addr)
}

fn post(addr: &str, path: &str, body: &Value) -> Value {
    let body = body.to_string();
    let response = http(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let json = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {response}"))
}

/// Consumes from `addr` until refused or `attempts` run out; returns the
/// number allowed and the refusal reasons seen.
fn spend(addr: String, token: String, attempts: usize) -> (usize, Vec<String>) {
    let mut allowed = 0;
    let mut reasons = Vec::new();
    for _ in 0..attempts {
        let r = post(&addr, "/v1/grants/consume", &json!({"token": token, "operation": {"kind": "request"}}));
        if r["allowed"] == true {
            allowed += 1;
        } else {
            reasons.push(r["reason"].as_str().unwrap_or("?").to_owned());
        }
    }
    (allowed, reasons)
}

#[test]
fn two_processes_on_one_redis_spend_exactly_the_budget() {
    let redis = RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let key = private_key_pem();
    let (_a, a) = node(tmp.path(), &redis, &key);
    let (_b, b) = node(tmp.path(), &redis, &key);

    let budget = 37;
    let minted = post(
        &a,
        "/v1/grants",
        &json!({"exec_id": "e1", "tenant_id": "t1", "user_id": "u1", "max_requests": budget}),
    );
    let token = minted["token"].as_str().unwrap().to_owned();

    // 8 clients, half on each process, 10 attempts each: 80 attempts for 37.
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let addr = if i % 2 == 0 { a.clone() } else { b.clone() };
            let token = token.clone();
            std::thread::spawn(move || spend(addr, token, 10))
        })
        .collect();
    let mut allowed = 0;
    for w in workers {
        let (n, reasons) = w.join().unwrap();
        allowed += n;
        assert!(reasons.iter().all(|r| r == "budget_requests_exhausted"), "{reasons:?}");
    }
    assert_eq!(allowed, budget, "exactly the budget, never one more");

    let opened = post(&b, "/v1/grants/open", &json!({"token": token}));
    assert_eq!(opened["ledger"]["request_count"], budget);
}

#[test]
fn a_revocation_on_one_process_stops_the_other() {
    let redis = RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let key = private_key_pem();
    let (_a, a) = node(tmp.path(), &redis, &key);
    let (_b, b) = node(tmp.path(), &redis, &key);
    let minted = post(
        &a,
        "/v1/grants",
        &json!({"exec_id": "e1", "tenant_id": "t1", "user_id": "u1", "max_requests": 1000}),
    );
    let token = minted["token"].as_str().unwrap().to_owned();
    let grant_id = minted["grant_id"].as_str().unwrap().to_owned();

    assert_eq!(spend(b.clone(), token.clone(), 3).0, 3);
    assert_eq!(post(&a, &format!("/v1/grants/{grant_id}/revoke"), &json!({})), json!({"revoked": 1}));
    for addr in [&a, &b] {
        let (allowed, reasons) = spend(addr.clone(), token.clone(), 2);
        assert_eq!(allowed, 0);
        assert_eq!(reasons, ["grant_revoked", "grant_revoked"]);
    }
}

#[test]
fn a_node_whose_redis_dies_refuses_and_recovers() {
    let mut redis = RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_a, a) = node(tmp.path(), &redis, &private_key_pem());
    let minted = post(
        &a,
        "/v1/grants",
        &json!({"exec_id": "e1", "tenant_id": "t1", "user_id": "u1", "max_requests": 5}),
    );
    let token = minted["token"].as_str().unwrap().to_owned();
    assert_eq!(spend(a.clone(), token.clone(), 2).0, 2);

    redis.stop();
    let (allowed, reasons) = spend(a.clone(), token.clone(), 3);
    assert_eq!(allowed, 0, "nothing is allowed while the ledger cannot answer");
    assert!(reasons.iter().all(|r| r == "ledger_unavailable"), "{reasons:?}");
    let refused = post(&a, "/v1/grants", &json!({"exec_id": "e2", "tenant_id": "t1", "user_id": "u1"}));
    assert_eq!(refused["error"]["reason"], "ledger_unavailable", "no grant without a record: {refused}");

    redis.restart();
    let mut last = Vec::new();
    for _ in 0..50 {
        let (allowed, reasons) = spend(a.clone(), token.clone(), 1);
        assert_eq!(allowed, 0, "the lost record must not turn into a fresh budget");
        if reasons != ["ledger_unavailable"] {
            last = reasons;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(last, ["grant_unknown"]);
    let fresh = post(&a, "/v1/grants", &json!({"exec_id": "e3", "tenant_id": "t1", "user_id": "u1"}));
    assert!(fresh["token"].is_string(), "recovered: {fresh}");
}

#[test]
fn the_cli_revokes_in_the_shared_ledger() {
    let redis = RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_a, a) = node(tmp.path(), &redis, &private_key_pem());
    let minted = post(&a, "/v1/grants", &json!({"exec_id": "e9", "tenant_id": "t1", "user_id": "u1"}));
    let token = minted["token"].as_str().unwrap().to_owned();
    assert_eq!(spend(a.clone(), token.clone(), 1).0, 1);

    let out = gatehouse(tmp.path())
        .env("GATEHOUSE_REDIS_URL", redis.url())
        .args(["grant", "revoke", "--exec-id", "e9", "--actor", "ada", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap(), json!({"revoked": 1}));
    assert_eq!(spend(a.clone(), token, 1).1, ["grant_revoked"]);
    // Audited in the node's store (the data directory's, here), naming the command line.
    let audit = http(
        &a,
        &format!(
            "GET /v1/audit HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n"
        ),
    );
    let audit: Value = serde_json::from_str(audit.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap();
    let entry = audit["items"].as_array().unwrap().iter().find(|e| e["action"] == "grants.revoke").cloned();
    let entry = entry.unwrap_or_else(|| panic!("no grants.revoke entry: {audit}"));
    assert_eq!((entry["actor"].as_str(), entry["subject"].as_str()), (Some("cli:ada"), Some("e9")));
    assert_eq!(entry["detail"], json!({"scope": "exec", "revoked": 1}));
    // A store that cannot take the entry: the revocation stands, and the command says it is not audited.
    let out = gatehouse(tmp.path())
        .env("GATEHOUSE_REDIS_URL", redis.url())
        .args([
            "grant",
            "revoke",
            "--exec-id",
            "e9",
            "--database-url",
            "postgres://postgres@127.0.0.1:1/none",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not audited"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // No ledger configured, or one that cannot answer: exit 2, never a silent success.
    let out = gatehouse(tmp.path()).args(["grant", "revoke", "--all"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = gatehouse(tmp.path())
        .args(["grant", "revoke", "--all", "--redis-url", "redis://127.0.0.1:1/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ledger_unavailable"));
}

#[test]
fn a_grant_minted_on_the_command_line_is_registered_in_the_shared_ledger() {
    let redis = RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_a, a) = node(tmp.path(), &redis, &private_key_pem());
    std::fs::write(tmp.path().join("secret"), GRANT_SECRET).unwrap();
    std::fs::write(tmp.path().join("session-key-secret"), SESSION_KEY_SECRET).unwrap();
    std::fs::write(
        tmp.path().join("claims.json"),
        r#"{"grant_id":"g-cli","exec_id":"e-cli","tenant_id":"t1","user_id":"u1","max_requests":2}"#,
    )
    .unwrap();
    let mint = |with_ledger: bool| {
        let mut c = gatehouse(tmp.path());
        c.args(["grant", "mint", "--secret-file", "secret", "--claims", "claims.json"]);
        if with_ledger {
            c.args(["--redis-url", &redis.url()]);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Without a ledger: a token, and a plain warning that it will be refused.
    let (token, warning) = mint(false);
    assert!(warning.contains("not registered") && warning.contains("grant_unknown"), "{warning}");
    assert_eq!(spend(a.clone(), token, 1).1, ["grant_unknown"]);
    // With the shared ledger: registered, so the gateway spends its budget.
    let (token, warning) = mint(true);
    assert!(!warning.contains("warning"), "{warning}");
    assert_eq!(spend(a.clone(), token.clone(), 3), (2, vec!["budget_requests_exhausted".to_owned()]));
    // A ledger that cannot answer: no token at all.
    let out = gatehouse(tmp.path())
        .args([
            "grant",
            "mint",
            "--secret-file",
            "secret",
            "--claims",
            "claims.json",
            "--redis-url",
            "redis://127.0.0.1:1/",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

/// How many commands of `name` the Redis server has run (`INFO commandstats`).
fn redis_calls(redis: &RedisServer, name: &str) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-u", &redis.url(), "INFO", "commandstats"])
        .output()
        .expect("redis-cli is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn readiness_is_probed_at_most_once_a_second_however_often_it_is_asked() {
    let redis = RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, addr) = node(tmp.path(), &redis, &private_key_pem());
    let before = redis_calls(&redis, "hgetall");
    let started = std::time::Instant::now();
    let asks = 200;
    for _ in 0..asks {
        let r = http(&addr, "GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    let seconds = started.elapsed().as_secs() + 1;
    let probes = redis_calls(&redis, "hgetall") - before;
    assert!(probes >= 1 && probes <= seconds + 1, "{probes} ledger probes for {asks} asks in {seconds} s");

    // Readiness still tells the truth: with Redis gone it says so within
    // the second the answer stands.
    drop(redis);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = http(&addr, "GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 503") && r.contains("ledger_unavailable"), "{r}");
}

#[test]
fn a_metrics_token_guards_metrics_and_nothing_else_opens_them() {
    const METRICS: &str = "metrics-token-0123456789abcdefghijklmnopqrstuvwxyz";
    let redis = RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = gatehouse(tmp.path());
    c.env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_REDIS_URL", redis.url())
        .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY", private_key_pem())
        .env("CODEAPI_EGRESS_GRANT_SECRET", GRANT_SECRET)
        .env("CODEAPI_INTERNAL_SERVICE_TOKEN", TOKEN)
        .env("GATEHOUSE_METRICS_TOKEN", METRICS);
    let (_server, addr, _, _) = spawn_server(c);
    let scrape = |auth: &str| {
        http(&addr, &format!("GET /metrics HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n"))
    };
    for auth in [
        String::new(),
        "authorization: Bearer wrong-0123456789abcdefghijklmnopqrstuvwxyz\r\n".into(),
        format!("authorization: Bearer {TOKEN}\r\n"),
        format!("authorization: Bearer {METRICS}\r\nauthorization: Bearer {METRICS}\r\n"),
    ] {
        let r = scrape(&auth);
        assert!(r.starts_with("HTTP/1.1 401"), "{auth:?}: {r}");
        assert!(!r.contains("gatehouse_"), "{auth:?}: nothing of the metrics leaks");
    }
    let r = scrape(&format!("authorization: Bearer {METRICS}\r\n"));
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("gatehouse_egress_allowed_total"), "{r}");
}

#[test]
fn a_redis_that_may_evict_ledger_keys_is_refused_at_start_and_by_readiness() {
    let tmp = tempfile::tempdir().unwrap();
    let key = private_key_pem();
    for policy in ["allkeys-lru", "allkeys-random", "volatile-lru", "volatile-ttl"] {
        let redis = RedisServer::start_with(&["--maxmemory-policy", policy]);
        let mut c = gatehouse(tmp.path());
        c.env("GATEHOUSE_LISTEN", "127.0.0.1:0")
            .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
            .env("GATEHOUSE_REDIS_URL", redis.url())
            .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY", &key)
            .env("CODEAPI_EGRESS_GRANT_SECRET", GRANT_SECRET)
            .env("CODEAPI_INTERNAL_SERVICE_TOKEN", TOKEN);
        let out = c.arg("serve").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{policy}: {stderr}");
        assert!(stderr.contains("ledger_eviction_unsafe") && stderr.contains(policy), "{policy}: {stderr}");
    }

    // A node started while Redis was safe, whose Redis is switched to evict:
    // not ready, and it says why.
    let redis = RedisServer::start();
    let (_server, addr) = node(tmp.path(), &redis, &key);
    let ready = http(&addr, "GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let out = std::process::Command::new("redis-cli")
        .args(["-u", &redis.url(), "CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .output()
        .expect("redis-cli is installed");
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK"));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = http(&addr, "GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 503") && r.contains("ledger_eviction_unsafe"), "{r}");
}

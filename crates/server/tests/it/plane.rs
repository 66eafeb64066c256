//! The control plane across processes: gatehouse nodes on one real
//! PostgreSQL and one real Redis, a store that goes away, the audit command
//! line, and tunnels closed when their run ends.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse_test_support::{RedisServer, TestDatabase};
use serde_json::{Value, json};

use crate::cli::{Server, gatehouse, spawn_server};
use crate::proxy::{Upstream, api, proxy_address};
use crate::support::{GRANT_SECRET, TOKEN, private_key_pem};

/// `gatehouse serve` (role all) with explicit keys and the given settings;
/// returns the process, its API address and its proxy address.
fn node(dir: &Path, key: &str, settings: &[(&str, &str)]) -> (Server, String, String) {
    let mut c = gatehouse(dir);
    c.env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.0/8")
        .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY", key)
        .env("CODEAPI_EGRESS_GRANT_SECRET", GRANT_SECRET)
        .env("CODEAPI_INTERNAL_SERVICE_TOKEN", TOKEN);
    for (k, v) in settings {
        c.env(k, v);
    }
    let (server, addr, printed, _) = spawn_server(c);
    (server, addr, proxy_address(&printed))
}

fn new_run(addr: &str, tenant: &str) -> Value {
    api(
        addr,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": tenant, "user_id": "u1", "body": {"code": "1"}, "budgets": {"max_requests": 1000}}),
    )
}

fn fetch(addr: &str, grant: &Value, url: &str) -> Value {
    api(addr, "POST", "/v1/egress/fetch", &json!({"grant": grant, "url": url, "purpose": "runtime"}))
}

fn consume(addr: &str, grant: &Value) -> Value {
    api(addr, "POST", "/v1/grants/consume", &json!({"token": grant, "operation": {"kind": "request"}}))
}

/// Polls `check` every 50 ms until it holds; returns how long that took.
pub(crate) fn within(limit: Duration, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if check() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn two_nodes_on_one_postgres_and_redis_agree_on_policies_runs_revocations_and_the_audit_chain() {
    let db = TestDatabase::create();
    let redis = RedisServer::start();
    let upstream = Upstream::start();
    let key = private_key_pem();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let settings = [("GATEHOUSE_DATABASE_URL", db.url()), ("GATEHOUSE_REDIS_URL", &redis.url())];
    let (_a, a, _) = node(dir_a.path(), &key, &settings);
    let (_b, b, _) = node(dir_b.path(), &key, &settings);
    let url = format!("http://127.0.0.1:{}/", upstream.port);

    // A run created on one node works through the other's door.
    let run = new_run(&a, "t1");
    let grant = run["grant"].clone();
    assert_eq!(fetch(&b, &grant, &url)["status"], 200, "{run}");

    // A policy set on one node is in force on the other within 2 s.
    let set =
        api(&a, "PUT", "/v1/tenants/t1/egress-policy", &json!({"mode": "allowlist", "allow": ["127.0.0.2"]}));
    assert_eq!(set["version"], 1, "{set}");
    let took =
        within(Duration::from_secs(2), || fetch(&b, &grant, &url)["error"]["reason"] == "policy_not_allowed");
    assert!(took.is_some(), "node B still lets t1 through 2 s after node A's change");
    assert_eq!(api(&b, "GET", "/v1/tenants/t1/egress-policy", &json!({}))["version"], 1);

    // B's refusal is in the shared record, readable on A.
    let seen = within(Duration::from_secs(3), || {
        let r = api(&a, "GET", "/v1/refusals?tenant_id=t1&reason=policy_not_allowed", &json!({}));
        !r["items"].as_array().unwrap().is_empty()
    });
    assert!(seen.is_some(), "node A never saw node B's refusal");

    // The kill switch thrown on B: A refuses new runs, and A's run is dead everywhere.
    let killed = api(&b, "POST", "/v1/tenants/t1/kill-switch", &json!({"engaged": true}));
    assert_eq!(killed["revoked"]["runs"], 1, "{killed}");
    assert_eq!(consume(&a, &grant)["reason"], "grant_revoked");
    assert_eq!(new_run(&a, "t1")["error"]["reason"], "tenant_kill_switch");
    let shown = api(&a, "GET", &format!("/v1/runs/{}", run["run_id"].as_str().unwrap()), &json!({}));
    assert_eq!(shown["status"], "killed");
    api(&a, "POST", "/v1/tenants/t1/kill-switch", &json!({"engaged": false}));

    // A run ended on one node is revoked on the other.
    let second = new_run(&b, "t1");
    assert_eq!(consume(&a, &second["grant"])["allowed"], true, "{second}");
    let id = second["run_id"].as_str().unwrap();
    let ended = api(&a, "POST", &format!("/v1/runs/{id}/end"), &json!({"outcome": "failed"}));
    assert_eq!(ended["revoked"]["grants"], 1);
    assert_eq!(consume(&b, &second["grant"])["reason"], "grant_revoked");

    // Both nodes appended to one chain, and it is unbroken.
    let out = gatehouse(dir_a.path())
        .args(["audit", "verify", "--json", "--database-url", db.url()])
        .output()
        .unwrap();
    let verdict: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"));
    assert_eq!(verdict["intact"], true, "{verdict}");
    assert!(verdict["entries"].as_i64().unwrap() >= 8, "{verdict}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_store_that_goes_away_fails_closed_and_recovers() {
    let db = TestDatabase::create();
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, addr, proxy_addr) = node(
        tmp.path(),
        &private_key_pem(),
        &[("GATEHOUSE_DATABASE_URL", db.url()), ("GATEHOUSE_STORE_TIMEOUT_MS", "1000")],
    );
    let url = format!("http://127.0.0.1:{}/", upstream.port);
    let run = new_run(&addr, "t1");
    let grant = run["grant"].clone();
    assert_eq!(fetch(&addr, &grant, &url)["status"], 200, "{run}");

    db.set_reachable(false);
    assert_eq!(new_run(&addr, "t1")["error"]["reason"], "store_unavailable");
    let put = api(&addr, "PUT", "/v1/tenants/t1/egress-policy", &json!({"mode": "open"}));
    assert_eq!(put["error"]["reason"], "store_unavailable");
    // Once nothing can vouch for the tenant's policy, the door refuses.
    let refused = within(Duration::from_secs(5), || {
        fetch(&addr, &grant, &url)["error"]["reason"] == "store_unavailable"
    });
    assert!(refused.is_some(), "the door kept letting traffic through without its policy store");
    // An outage, not an answer: 503 and retryable, through the API and the proxy.
    assert_eq!(fetch(&addr, &grant, &url)["error"]["retryable"], true);
    let proxied = std::process::Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-", "-o", "/dev/null", "-x"])
        .arg(format!("http://grant:{}@{proxy_addr}", grant.as_str().unwrap()))
        .arg(&url)
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&proxied.stdout);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(head.contains("x-gatehouse-reason: store_unavailable\r\n"), "{head}");
    assert!(head.contains("x-gatehouse-retryable: true\r\n"), "{head}");

    db.set_reachable(true);
    let back = within(Duration::from_secs(10), || fetch(&addr, &grant, &url)["status"] == 200);
    assert!(back.is_some(), "the door did not recover when the store came back");
    assert_eq!(new_run(&addr, "t1")["status"], "live");
}

#[test]
fn a_node_whose_database_is_gone_is_not_ready() {
    let db = TestDatabase::create();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, addr, _) = node(
        tmp.path(),
        &private_key_pem(),
        &[("GATEHOUSE_DATABASE_URL", db.url()), ("GATEHOUSE_STORE_TIMEOUT_MS", "1000")],
    );
    let readyz = || api(&addr, "GET", "/readyz", &Value::Null);
    assert_eq!(readyz()["status"], "ready");
    db.set_reachable(false);
    // Within the second an answer stands, and the store's timeout.
    let down = within(Duration::from_secs(5), || readyz()["reason"] == "store_unavailable");
    assert!(down.is_some(), "a node whose database is gone still says it is ready: {}", readyz());
    assert_eq!(readyz()["status"], "not_ready");
    db.set_reachable(true);
    let back = within(Duration::from_secs(10), || readyz()["status"] == "ready");
    assert!(back.is_some(), "readiness did not come back with the database: {}", readyz());
}

#[test]
fn the_audit_command_line_catches_edits_and_truncation() {
    let tmp = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        let out = gatehouse(tmp.path()).args(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Every migration the binary carries, in order, once.
    let carried = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../store/migrations/sqlite"))
        .unwrap()
        .count();
    let all: Vec<usize> = (1..=carried).collect();
    let (code, out, err) = cli(&["migrate", "--json"]);
    assert_eq!((code, out.trim()), (0, serde_json::json!({"applied": all}).to_string().as_str()), "{err}");
    assert_eq!(cli(&["migrate", "--json"]).1.trim(), r#"{"applied":[]}"#);

    let db_path = tmp.path().join("gatehouse-data/gatehouse.db");
    let url = format!("sqlite://{}", db_path.display());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let raw = |sql: &str| {
        runtime.block_on(async {
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(&pool).await.unwrap();
        });
    };
    runtime.block_on(async {
        let store = gatehouse_store::Store::connect(&gatehouse_store::StoreConfig::new(&url)).await.unwrap();
        for i in 0..5 {
            store.set_policy("t1", r#"{"mode":"open"}"#, "platform", 100 + i).await.unwrap();
        }
    });
    assert_eq!(cli(&["audit", "verify", "--json"]).1.trim(), r#"{"entries":5,"intact":true}"#);

    let (code, checkpoint, err) = cli(&["audit", "checkpoint"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("generated audit-signing.pem"), "{err}");
    assert!(!checkpoint.contains("PRIVATE"), "{checkpoint}");
    std::fs::write(tmp.path().join("cp.json"), &checkpoint).unwrap();
    assert_eq!(cli(&["audit", "verify", "--json", "--checkpoint", "cp.json"]).0, 0);

    raw("UPDATE audit_log SET subject = 't2' WHERE seq = 2");
    let (code, out, _) = cli(&["audit", "verify", "--json"]);
    assert_eq!((code, out.trim()), (1, r#"{"first_bad_seq":2,"intact":false,"why":"hash_mismatch"}"#));
    raw("UPDATE audit_log SET subject = 't1' WHERE seq = 2");

    // Cut the last two entries and rewind the head: consistent on its own,
    // caught by the checkpoint.
    raw("DELETE FROM audit_log WHERE seq > 3");
    raw("UPDATE control SET audit_seq = 3, audit_hash = (SELECT hash FROM audit_log WHERE seq = 3)");
    assert_eq!(cli(&["audit", "verify", "--json"]).0, 0);
    let (code, out, _) = cli(&["audit", "verify", "--json", "--checkpoint", "cp.json"]);
    assert_eq!((code, out.trim()), (1, r#"{"first_bad_seq":4,"intact":false,"why":"checkpoint_missing"}"#));

    // A forged checkpoint is bad input, not a verdict.
    let forged = checkpoint.replace("\"seq\":5", "\"seq\":3");
    std::fs::write(tmp.path().join("forged.json"), forged).unwrap();
    let (code, _, err) = cli(&["audit", "verify", "--checkpoint", "forged.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not signed by the audit key"), "{err}");

    // A schema from a newer gatehouse is refused by every command.
    raw(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99990101000000, 'future', TRUE, X'', 1)",
    );
    let (code, _, err) = cli(&["migrate"]);
    assert_eq!(code, 2);
    assert!(err.contains("store_schema_newer"), "{err}");
    assert_eq!(cli(&["audit", "verify"]).0, 2);
}

/// A TCP server that echoes whatever it is sent, for tunnels.
fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = stream.try_clone().unwrap();
                let mut writer = stream;
                let _ = std::io::copy(&mut reader, &mut writer);
            });
        }
    });
    port
}

#[test]
#[allow(clippy::disallowed_methods, reason = "a test client talking to the proxy under test on loopback")]
fn ending_a_run_closes_its_open_tunnels() {
    let port = echo_server();
    let tmp = tempfile::tempdir().unwrap();
    let ports = format!("443,{port}");
    let (_server, addr, proxy) =
        node(tmp.path(), &private_key_pem(), &[("GATEHOUSE_PROXY_CONNECT_PORTS", &ports)]);
    let run = new_run(&addr, "t1");
    let grant = run["grant"].as_str().unwrap();

    let mut tunnel = std::net::TcpStream::connect(&proxy).unwrap();
    tunnel.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(tunnel, "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nproxy-authorization: Bearer {grant}\r\n\r\n").unwrap();
    let mut head = [0u8; 19];
    tunnel.read_exact(&mut head).unwrap();
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    let mut rest = Vec::new();
    while !rest.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        tunnel.read_exact(&mut b).unwrap();
        rest.push(b[0]);
    }
    tunnel.write_all(b"ping").unwrap();
    let mut echo = [0u8; 4];
    tunnel.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"ping");

    let id = run["run_id"].as_str().unwrap();
    api(&addr, "POST", &format!("/v1/runs/{id}/end"), &json!({"outcome": "succeeded"}));
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let _ = tunnel.write_all(b"more");
    // Whatever was in flight may still arrive; then the tunnel must close.
    let closed = loop {
        match tunnel.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            // Closed with our unread "more" in its buffer: a reset is a close too.
            Err(e) => break e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    };
    assert!(closed, "the tunnel of an ended run stayed open");
    assert!(started.elapsed() < Duration::from_secs(3), "closed only after {:?}", started.elapsed());
}

/// `audit verify` and `audit checkpoint` on a store another process keeps
/// appending to: each walks to the head it read first, so both succeed,
/// and every checkpoint taken meanwhile verifies against the chain after.
fn the_audit_command_line_works_on_a_busy_store(url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        let out = gatehouse(tmp.path()).args(args).args(["--database-url", url]).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(cli(&["migrate", "--json"]).0, 0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let (stop, url) = (stop.clone(), url.to_owned());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let config = gatehouse_store::StoreConfig::new(&url);
                let store = gatehouse_store::Store::connect(&config).await.unwrap();
                let mut appended = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    store.set_policy("t1", r#"{"mode":"open"}"#, "platform", 100 + appended).await.unwrap();
                    appended += 1;
                }
                appended
            })
        })
    };
    let mut checkpoints = Vec::new();
    for i in 0..3 {
        let (code, checkpoint, err) = cli(&["audit", "checkpoint"]);
        assert_eq!(code, 0, "a busy store checkpoints: {err}");
        let path = format!("cp{i}.json");
        std::fs::write(tmp.path().join(&path), &checkpoint).unwrap();
        checkpoints.push(path);
        let (code, out, err) = cli(&["audit", "verify", "--json"]);
        assert_eq!(code, 0, "a busy store verifies: {out} {err}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let appended = appender.join().unwrap();
    let mut args = vec!["audit", "verify", "--json"];
    for path in &checkpoints {
        args.extend(["--checkpoint", path.as_str()]);
    }
    let (code, out, err) = cli(&args);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(out.trim(), json!({"entries": appended, "intact": true}).to_string());
}

#[test]
fn the_audit_command_line_works_on_a_busy_sqlite_store() {
    let tmp = tempfile::tempdir().unwrap();
    the_audit_command_line_works_on_a_busy_store(&format!(
        "sqlite://{}",
        tmp.path().join("busy.db").display()
    ));
}

#[test]
fn the_audit_command_line_works_on_a_busy_postgres_store() {
    let db = TestDatabase::create();
    the_audit_command_line_works_on_a_busy_store(db.url());
}

/// A proposal a refusal made on one node, approved for its run on the
/// other, is in force on the first within 2 s (the policy replica follows
/// the tenant's settings version), for that run alone.
#[test]
fn a_proposal_approved_on_one_node_is_in_force_on_the_other_within_2_s() {
    let db = TestDatabase::create();
    let redis = RedisServer::start();
    let upstream = Upstream::start();
    let key = private_key_pem();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let settings = [("GATEHOUSE_DATABASE_URL", db.url()), ("GATEHOUSE_REDIS_URL", &redis.url())];
    let (_a, a, _) = node(dir_a.path(), &key, &settings);
    let (_b, b, _) = node(dir_b.path(), &key, &settings);
    let url = format!("http://127.0.0.1:{}/", upstream.port);
    let set =
        api(&a, "PUT", "/v1/tenants/t1/egress-policy", &json!({"mode": "allowlist", "allow": ["127.0.0.2"]}));
    assert_eq!(set["version"], 1, "{set}");
    let run = new_run(&a, "t1");
    let other = new_run(&a, "t1");
    let grant = run["grant"].clone();
    let refused = within(Duration::from_secs(2), || {
        fetch(&b, &grant, &url)["error"]["proposal_id"].as_str().is_some_and(|p| p.starts_with("prop_"))
    });
    assert!(refused.is_some(), "node B never refused with a proposal");
    let proposal = fetch(&b, &grant, &url)["error"]["proposal_id"].as_str().unwrap().to_owned();
    let decided = api(
        &a,
        "POST",
        &format!("/v1/egress-proposals/{proposal}/decide"),
        &json!({"decision": "approve", "scope": "run", "actor": "person:ada"}),
    );
    assert_eq!(decided["status"], "approved", "{decided}");
    let took = within(Duration::from_secs(2), || fetch(&b, &grant, &url)["status"] == 200);
    assert!(took.is_some(), "node B still refuses the run 2 s after node A approved its ask");
    assert_eq!(fetch(&b, &other["grant"], &url)["error"]["reason"], "policy_not_allowed", "that run alone");
}

//! Credential leases across processes: two `gatehouse serve` nodes on one
//! real PostgreSQL and one real Redis, a Redis that goes away, and a unique
//! canary secret looked for in every row of the database, every JSON log
//! line, every API answer and the metrics.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use gatehouse_test_support::{RedisServer, TestDatabase, assert_no_key_material};
use serde_json::{Value, json};

use crate::cli::{Server, gatehouse, http, spawn_server};
use crate::leases::Echo;
use crate::plane::within;
use crate::proxy::{api, proxy_address};
use crate::support::{GRANT_SECRET, SEALING_KEY, SESSION_KEY_SECRET, TOKEN, private_key_pem};

/// A secret no other test (and no earlier run of this one) uses.
fn canary(what: &str) -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let word = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u32(std::process::id());
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
        h.finish()
    };
    format!("canary-{what}-{:016x}{:016x}", word(1), word(2))
}

/// One `gatehouse serve` (role all) process.
pub(crate) struct Node {
    server: Server,
    pub(crate) api: String,
    pub(crate) proxy: String,
    log: JoinHandle<String>,
}

/// Starts a node with the keys every node of a cluster shares (manifest
/// key, grant secret, service token, session key secret, credential sealing
/// key), loopback opened for the upstreams, and `settings` on top.
pub(crate) fn start_node(dir: &Path, manifest_key: &str, settings: &[(&str, &str)]) -> Node {
    let mut c = gatehouse(dir);
    c.env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.0/8")
        .env("GATEHOUSE_PROXY_CONNECT_PORTS", "443")
        .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY", manifest_key)
        .env("CODEAPI_EGRESS_GRANT_SECRET", GRANT_SECRET)
        .env("CODEAPI_INTERNAL_SERVICE_TOKEN", TOKEN)
        .env("GATEHOUSE_SESSION_KEY_SECRET", SESSION_KEY_SECRET)
        .env("GATEHOUSE_CREDENTIAL_SEALING_KEY", SEALING_KEY);
    // The door never honours proxy settings from its environment.
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        c.env(name, "http://127.0.0.1:9");
    }
    c.env("NO_PROXY", "").env("no_proxy", "");
    for (k, v) in settings {
        c.env(k, v);
    }
    let (server, api, printed, log) = spawn_server(c);
    Node { server, api, proxy: proxy_address(&printed), log }
}

impl Node {
    /// SIGKILL, mid-whatever it was doing.
    pub(crate) fn kill(&mut self) {
        self.server.kill();
    }

    /// SIGTERM, as an orchestrator stops a node, and what it logged.
    pub(crate) fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let status = self.server.terminate();
        (status, self.log.join().unwrap_or_default())
    }
}

/// curl as the sandbox: the response head and body, as the sandbox sees them.
fn curl(args: &[&str]) -> String {
    let Output { stdout, .. } = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-"])
        .args(args)
        .output()
        .expect("curl is installed");
    String::from_utf8_lossy(&stdout).into_owned()
}

pub(crate) fn create_credential(api_addr: &str, secret: &str) -> Value {
    api(
        api_addr,
        "POST",
        "/v1/tenants/t1/credentials",
        &json!({"name": "github", "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true, "secret": secret}),
    )
}

/// A run created on `api_addr`, and the proxy URL its sandbox would use
/// through the door at `proxy_addr` (the grant as the password).
fn new_run(api_addr: &str, proxy_addr: &str) -> (String, String, Value) {
    let run = api(
        api_addr,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "print(1)"},
            "budgets": {"max_requests": 100, "max_egress_bytes": 10_000_000}}),
    );
    let run_id = run["run_id"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned();
    let grant = run["grant"].as_str().unwrap_or_else(|| panic!("{run}"));
    let proxy = format!("http://grant:{grant}@{proxy_addr}");
    (run_id, proxy, run)
}

pub(crate) fn lease(api_addr: &str, run_id: &str, credential_id: &str) -> Value {
    api(
        api_addr,
        "POST",
        &format!("/v1/runs/{run_id}/leases"),
        &json!({"credential_id": credential_id, "purpose": "git_provider", "host": "127.0.0.1"}),
    )
}

pub(crate) fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or_else(|| panic!("no {field} in {v}"))
}

pub(crate) fn refused_with(out: &str, reason: &str) -> bool {
    out.contains(&format!("x-gatehouse-reason: {reason}\r\n"))
}

#[test]
fn leases_hold_across_two_nodes_on_postgres_and_redis() {
    let secret = canary("cluster");
    let rotated = canary("rotated");
    let db = TestDatabase::create();
    let redis = RedisServer::start();
    let upstream = Echo::start("127.0.0.1", 0);
    let manifest_key = private_key_pem();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let redis_url = redis.url();
    let settings = [("GATEHOUSE_DATABASE_URL", db.url()), ("GATEHOUSE_REDIS_URL", redis_url.as_str())];
    let a = start_node(dir_a.path(), &manifest_key, &settings);
    let b = start_node(dir_b.path(), &manifest_key, &settings);
    let target = format!("http://127.0.0.1:{}/repo", upstream.port);

    // Credential, run and lease on A; the request through B's door.
    let credential = create_credential(&a.api, &secret);
    let credential_id = str_of(&credential, "credential_id").to_owned();
    let (run1, run1_via_b, _) = new_run(&a.api, &b.proxy);
    let granted = lease(&a.api, &run1, &credential_id);
    let placeholder = str_of(&granted, "placeholder").to_owned();
    let lease_id = str_of(&granted, "lease_id").to_owned();

    let out = curl(&["-x", &run1_via_b, &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
    assert!(out.contains(&format!("x-echo-authorization: Bearer {placeholder}\r\n")), "{out}");
    assert!(out.contains(&format!("authorization: Bearer {placeholder}")), "the echoed body too: {out}");
    assert!(!out.contains(&secret), "the sandbox saw the secret");
    // The placeholder where the sandbox put it.
    let out = curl(&["-x", &run1_via_b, "-H", &format!("authorization: Bearer {placeholder}"), &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
    assert!(!out.contains(&secret), "the sandbox saw the secret");

    // Revoked on A: in force on B when the call returns (no wait, no retry).
    let revoked = api(&a.api, "POST", &format!("/v1/leases/{lease_id}/revoke"), &json!({}));
    assert_eq!(revoked, json!({"revoked": 1}));
    let before = upstream.count();
    let out = curl(&["-x", &run1_via_b, "-H", &format!("authorization: Bearer {placeholder}"), &target]);
    assert!(out.starts_with("HTTP/1.1 403") && refused_with(&out, "lease_revoked"), "{out}");
    assert!(out.contains("x-gatehouse-retryable: false"), "{out}");
    let out = curl(&["-x", &run1_via_b, &target]);
    assert!(refused_with(&out, "lease_revoked"), "the lease's host says why without a placeholder: {out}");
    assert_eq!(upstream.count(), before, "nothing reached the upstream after the revocation");
    let listed = api(&b.api, "GET", &format!("/v1/leases?run_id={run1}"), &json!({}));
    assert_eq!(listed["items"][0]["status"], "revoked", "{listed}");

    // A second run: B reads the old secret, A rotates it, B's very next
    // request carries the new one.
    let (run2, run2_via_b, _) = new_run(&a.api, &b.proxy);
    let granted2 = lease(&a.api, &run2, &credential_id);
    let placeholder2 = str_of(&granted2, "placeholder").to_owned();
    let out = curl(&["-x", &run2_via_b, &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
    let changed = api(
        &a.api,
        "PUT",
        &format!("/v1/tenants/t1/credentials/{credential_id}/secret"),
        &json!({"secret": rotated}),
    );
    assert_eq!(changed["version"], 2, "{changed}");
    assert_ne!(changed["fingerprint"], credential["fingerprint"], "{changed}");
    let out = curl(&["-x", &run2_via_b, "-H", &format!("authorization: Bearer {placeholder2}"), &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {rotated}\r\n")), "{}", upstream.last());
    assert!(out.contains(&format!("x-echo-authorization: Bearer {placeholder2}\r\n")), "{out}");
    assert!(!out.contains(&rotated) && !out.contains(&secret), "the sandbox saw a secret");

    // B's heartbeat renews the lease A granted; B ends the run, A's door
    // says so.
    let heartbeat = api(&b.api, "POST", &format!("/v1/runs/{run2}/heartbeat"), &json!({}));
    assert_eq!(heartbeat["leases_renewed"], 1, "{heartbeat}");
    let ended = api(&b.api, "POST", &format!("/v1/runs/{run2}/end"), &json!({"outcome": "succeeded"}));
    assert_eq!(ended["revoked"], json!({"grants": 1, "leases": 1}), "{ended}");
    let run2_via_a = run2_via_b.replace(&b.proxy, &a.proxy);
    let before = upstream.count();
    let out = curl(&["-x", &run2_via_a, "-H", &format!("authorization: Bearer {placeholder2}"), &target]);
    assert!(refused_with(&out, "run_not_live"), "{out}");
    assert_eq!(upstream.count(), before, "nothing reached the upstream for an ended run");

    // Both nodes' refusals are in the one record: A's read waits for what
    // A queued, never for B's writer, so it polls until B's are in too.
    let refusals = || api(&a.api, "GET", "/v1/refusals?kind=secret_refused", &json!({}));
    let both = within(Duration::from_secs(10), || {
        let listed = refusals();
        let reasons: Vec<&str> =
            listed["items"].as_array().unwrap().iter().filter_map(|r| r["reason"].as_str()).collect();
        ["lease_revoked", "run_not_live"].iter().all(|reason| reasons.contains(reason))
    });
    let refusals = refusals();
    assert!(both.is_some(), "lease_revoked and run_not_live in {refusals}");
    assert!(!refusals.to_string().contains(&secret) && !refusals.to_string().contains(&rotated));
}

/// `redis-cli COMMAND...` against `redis`; returns its reply.
fn redis_cli(redis: &RedisServer, command: &[&str]) -> String {
    let url = redis.url();
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap().to_owned();
    let out =
        Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &port]).args(command).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Makes Redis write its data to its directory now, so the next
/// [`RedisServer::restart`] loads it: an outage, not a loss.
fn persist(redis: &RedisServer) {
    assert_eq!(redis_cli(redis, &["SAVE"]), "OK");
}

#[test]
fn redis_down_means_no_injection() {
    use gatehouse_egress::intercept::InterceptCa;
    let secret = canary("outage");
    let mut redis = RedisServer::start();
    let upstream = Echo::start("127.0.0.1", 0);
    let upstream_ca = Arc::new(InterceptCa::generate().unwrap());
    let tls_upstream = crate::intercept::TlsEcho::start(&upstream_ca, "127.0.0.1", 0);
    let tmp = tempfile::tempdir().unwrap();
    let upstream_ca_file = tmp.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca_file, upstream_ca.cert_pem()).unwrap();
    let (redis_url, ports) = (redis.url(), format!("443,{}", tls_upstream.port));
    let node = start_node(
        tmp.path(),
        &private_key_pem(),
        &[
            ("GATEHOUSE_REDIS_URL", redis_url.as_str()),
            ("GATEHOUSE_PROXY_CONNECT_PORTS", ports.as_str()),
            ("GATEHOUSE_EGRESS_EXTRA_CA_FILE", upstream_ca_file.to_str().unwrap()),
        ],
    );
    let target = format!("http://127.0.0.1:{}/repo", upstream.port);
    let credential = create_credential(&node.api, &secret);
    let credential_id = str_of(&credential, "credential_id").to_owned();
    let (run_id, proxy, run) = new_run(&node.api, &node.proxy);
    let placeholder = str_of(&lease(&node.api, &run_id, &credential_id), "placeholder").to_owned();
    let with_placeholder = format!("authorization: Bearer {placeholder}");
    let out = curl(&["-x", &proxy, "-H", &with_placeholder, &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
    // The same lease through the fetch API, and in an intercepted tunnel.
    let fetch = |headers: Value| {
        api(
            &node.api,
            "POST",
            "/v1/egress/fetch",
            &json!({"grant": run["grant"], "url": target, "purpose": "git_provider", "headers": headers}),
        )
    };
    let fetched = fetch(json!([["authorization", format!("Bearer {placeholder}")]]));
    assert_eq!(fetched["status"], 200, "{fetched}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
    let ca_file = tmp.path().join("gatehouse-ca.pem");
    std::fs::write(&ca_file, str_of(&run, "ca_certificate_pem")).unwrap();
    let https = format!("https://127.0.0.1:{}/repo", tls_upstream.port);
    let out = curl(&["-x", &proxy, "--cacert", ca_file.to_str().unwrap(), &https]);
    assert!(out.contains("HTTP/1.1 200"), "{out}");
    assert!(
        tls_upstream.last().contains(&format!("authorization: Bearer {secret}")),
        "{}",
        tls_upstream.last()
    );
    // What Redis holds (grants' budgets, leases' state) never includes the secret.
    let held = redis.snapshot();
    assert!(String::from_utf8_lossy(&held).contains(&run_id), "the snapshot holds the run's records");
    assert_no_key_material(secret.as_bytes(), &held, "Redis");

    // Redis goes away (its data kept on disk): no request gets through,
    // with or without the placeholder.
    persist(&redis);
    redis.stop();
    let before = upstream.count();
    let out = curl(&["-x", &proxy, "-H", &with_placeholder, &target]);
    assert!(out.starts_with("HTTP/1.1 503") && refused_with(&out, "lease_unavailable"), "{out}");
    assert!(out.contains("x-gatehouse-retryable: true"), "an outage: {out}");
    let out = curl(&["-x", &proxy, &target]);
    assert!(refused_with(&out, "ledger_unavailable"), "the ledger is required: {out}");
    assert!(
        out.starts_with("HTTP/1.1 503") && out.contains("x-gatehouse-retryable: true"),
        "an outage: {out}"
    );
    assert_eq!(upstream.count(), before, "nothing reached the upstream without the ledger");
    assert!(!out.contains(&secret));
    // The fetch API says the same, and no tunnel opens.
    let refused = fetch(json!([["authorization", format!("Bearer {placeholder}")]]));
    assert_eq!(
        (refused["error"]["reason"].as_str(), refused["error"]["retryable"].as_bool()),
        (Some("lease_unavailable"), Some(true)),
        "{refused}"
    );
    let refused = fetch(json!([]));
    assert_eq!(
        (refused["error"]["reason"].as_str(), refused["error"]["retryable"].as_bool()),
        (Some("ledger_unavailable"), Some(true)),
        "{refused}"
    );
    let tls_before = tls_upstream.seen.lock().unwrap().len();
    let out = curl(&["-x", &proxy, "--cacert", ca_file.to_str().unwrap(), &https]);
    assert!(out.starts_with("HTTP/1.1 503") && refused_with(&out, "ledger_unavailable"), "{out}");
    assert_eq!(upstream.count(), before, "nothing reached the upstream without the ledger");
    assert_eq!(tls_upstream.seen.lock().unwrap().len(), tls_before, "no tunnel without the ledger");

    // Redis is back with its data: the same lease injects again.
    redis.restart();
    let back = within(Duration::from_secs(15), || {
        curl(&["-x", &proxy, "-H", &with_placeholder, &target]).starts_with("HTTP/1.1 200")
    });
    assert!(back.is_some(), "the lease did not work again when Redis came back");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
    let out = curl(&["-x", &proxy, &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());

    // Redis back *without* its data: the run's grant is unknown, so its
    // placeholder never turns into the secret again; a new run's lease works.
    assert_eq!(redis_cli(&redis, &["FLUSHALL"]), "OK");
    persist(&redis);
    redis.stop();
    redis.restart();
    let before = upstream.count();
    let mut last = String::new();
    let refused = within(Duration::from_secs(15), || {
        last = curl(&["-x", &proxy, "-H", &with_placeholder, &target]);
        refused_with(&last, "grant_unknown")
    });
    assert!(refused.is_some(), "a lost ledger record must not let the lease inject: {last}");
    assert_eq!(upstream.count(), before, "nothing reached the upstream for a grant the ledger lost");
    let (fresh_run, fresh_proxy, _) = new_run(&node.api, &node.proxy);
    let fresh = str_of(&lease(&node.api, &fresh_run, &credential_id), "placeholder").to_owned();
    let out = curl(&["-x", &fresh_proxy, "-H", &format!("authorization: Bearer {fresh}"), &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
}

/// `pg_dump` on PATH, else PostgreSQL 15's own; never skipped.
pub(crate) fn pg_dump() -> PathBuf {
    let on_path = Command::new("pg_dump").arg("--version").output().is_ok_and(|o| o.status.success());
    if on_path {
        return PathBuf::from("pg_dump");
    }
    let debian = Path::new("/usr/lib/postgresql/15/bin/pg_dump");
    assert!(
        debian.is_file(),
        "pg_dump is neither on PATH nor at {}: install the PostgreSQL 15 client tools (postgresql-client-15)",
        debian.display()
    );
    debian.to_owned()
}

#[test]
fn the_canary_is_in_no_postgres_row_json_log_answer_or_metric() {
    let secret = canary("dump");
    let db = TestDatabase::create();
    let upstream = Echo::start("127.0.0.1", 0);
    let other = Echo::start("127.0.0.2", upstream.port);
    let tmp = tempfile::tempdir().unwrap();
    let node = start_node(
        tmp.path(),
        &private_key_pem(),
        &[("GATEHOUSE_DATABASE_URL", db.url()), ("GATEHOUSE_LOG_FORMAT", "json"), ("GATEHOUSE_LOG", "debug")],
    );
    let answers = RefCell::new(String::new());
    let call = |method: &str, path: &str, body: Value| {
        let v = api(&node.api, method, path, &body);
        answers.borrow_mut().push_str(&v.to_string());
        v
    };
    let mut seen_by_sandbox = String::new();
    let target = format!("http://127.0.0.1:{}/repo", upstream.port);

    // Create, lease, inject.
    let credential = call(
        "POST",
        "/v1/tenants/t1/credentials",
        json!({"name": "github", "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true, "secret": secret}),
    );
    let credential_id = str_of(&credential, "credential_id").to_owned();
    let (run_id, proxy, run) = new_run(&node.api, &node.proxy);
    answers.borrow_mut().push_str(&run.to_string());
    let granted = call(
        "POST",
        &format!("/v1/runs/{run_id}/leases"),
        json!({"credential_id": credential_id, "purpose": "git_provider", "host": "127.0.0.1"}),
    );
    let placeholder = str_of(&granted, "placeholder").to_owned();
    let lease_id = str_of(&granted, "lease_id").to_owned();
    let out = curl(&["-x", &proxy, &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
    seen_by_sandbox.push_str(&out);
    let out = curl(&["-x", &proxy, "-H", &format!("authorization: Bearer {placeholder}"), &target]);
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}\r\n")), "{}", upstream.last());
    seen_by_sandbox.push_str(&out);

    // The leak: the placeholder toward another host.
    let out = curl(&[
        "-x",
        &proxy,
        "-H",
        &format!("authorization: token {placeholder}"),
        &format!("http://127.0.0.2:{}/", upstream.port),
    ]);
    assert!(out.starts_with("HTTP/1.1 403") && refused_with(&out, "lease_host_mismatch"), "{out}");
    assert_eq!(other.count(), 0, "nothing reached the other host");
    seen_by_sandbox.push_str(&out);
    let leases = call("GET", &format!("/v1/leases?run_id={run_id}"), json!({}));
    assert_eq!(leases["items"][0]["status"], "revoked", "{leases}");
    assert_eq!(leases["items"][0]["revoke_reason"], "leaked", "{leases}");
    let out = curl(&["-x", &proxy, &target]);
    assert!(refused_with(&out, "lease_revoked"), "{out}");
    seen_by_sandbox.push_str(&out);

    // The refusals of where a secret may go, on a run of their own: a
    // placeholder beside the rule's header, and a credential that does not
    // allow plain HTTP asked to cross it.
    let tls_only = call(
        "POST",
        "/v1/tenants/t1/credentials",
        json!({"name": "tls-only", "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "secret": secret}),
    );
    let (run2, proxy2, run2_json) = new_run(&node.api, &node.proxy);
    answers.borrow_mut().push_str(&run2_json.to_string());
    let granted2 = call(
        "POST",
        &format!("/v1/runs/{run2}/leases"),
        json!({"credential_id": str_of(&tls_only, "credential_id"), "purpose": "git_provider", "host": "127.0.0.1"}),
    );
    let placeholder2 = str_of(&granted2, "placeholder").to_owned();
    let bearer2 = format!("authorization: Bearer {placeholder2}");
    let sent = upstream.count();
    let out = curl(&["-x", &proxy2, "-H", &bearer2, "-H", &format!("x-debug: {placeholder2}"), &target]);
    assert!(refused_with(&out, "lease_placeholder_misplaced"), "{out}");
    seen_by_sandbox.push_str(&out);
    let out = curl(&["-x", &proxy2, "-H", &bearer2, &target]);
    assert!(refused_with(&out, "lease_plain_http"), "{out}");
    seen_by_sandbox.push_str(&out);
    assert_eq!(upstream.count(), sent, "nothing went out for either");

    // The record is written behind the requests: wait until it holds them,
    // so the dump has every row there will be.
    let recorded = within(Duration::from_secs(10), || {
        let r = api(&node.api, "GET", "/v1/refusals?kind=secret_refused", &json!({}));
        let reasons = r.to_string();
        ["lease_host_mismatch", "lease_revoked", "lease_placeholder_misplaced", "lease_plain_http"]
            .iter()
            .all(|reason| reasons.contains(reason))
    });
    assert!(recorded.is_some(), "the refusals never reached the record");
    let events = within(Duration::from_secs(10), || {
        let e = api(&node.api, "GET", &format!("/v1/runs/{run_id}/events"), &json!({}));
        let kinds = e.to_string();
        kinds.contains("lease_granted") && kinds.contains("lease_revoked")
    });
    assert!(events.is_some(), "the lease events never reached the record");
    call("GET", "/v1/refusals?kind=secret_refused", json!({}));
    call("GET", &format!("/v1/runs/{run_id}/events"), json!({}));
    call("GET", &format!("/v1/runs/{run_id}"), json!({}));
    call("GET", "/v1/audit", json!({}));
    call("GET", "/v1/tenants/t1/credentials", json!({}));
    call("GET", &format!("/v1/tenants/t1/credentials/{credential_id}"), json!({}));
    call("GET", &format!("/v1/leases?credential_id={credential_id}"), json!({}));
    let metrics = http(&node.api, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");

    // Every row of the database.
    let dump = Command::new(pg_dump()).args(["--no-owner", "--dbname", db.url()]).output().unwrap();
    assert!(dump.status.success(), "pg_dump failed: {}", String::from_utf8_lossy(&dump.stderr));
    let dump = String::from_utf8_lossy(&dump.stdout).into_owned();
    for row in [credential_id.as_str(), lease_id.as_str(), run_id.as_str(), "lease_host_mismatch"] {
        assert!(dump.contains(row), "the dump lacks {row}: is it the test's database?");
    }
    for table in ["credentials", "leases", "runs", "events", "audit_log"] {
        assert!(dump.contains(&format!("COPY public.{table} ")), "the dump lacks table {table}");
    }

    drop(node.server);
    let logs = node.log.join().unwrap();
    let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "too few log lines to mean anything: {logs}");
    for line in &lines {
        assert!(serde_json::from_str::<Value>(line).is_ok(), "not a JSON log line: {line}");
    }

    let answers = answers.into_inner();
    for (what, text) in [
        ("the database dump", dump.as_str()),
        ("the JSON logs", logs.as_str()),
        ("the API answers", answers.as_str()),
        ("the metrics", metrics.as_str()),
        ("the sandbox's view", seen_by_sandbox.as_str()),
    ] {
        assert!(!text.contains(&secret), "{what} hold the canary");
        // Nor any piece of it, in any encoding.
        assert_no_key_material(secret.as_bytes(), text, what);
    }
}

#[test]
fn https_is_intercepted_by_a_node_that_did_not_grant_the_lease() {
    use gatehouse_egress::intercept::InterceptCa;
    let secret = canary("tls-cluster");
    let db = TestDatabase::create();
    let redis = RedisServer::start();
    let upstream_ca = Arc::new(InterceptCa::generate().unwrap());
    let upstream = crate::intercept::TlsEcho::start(&upstream_ca, "127.0.0.1", 0);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let upstream_ca_file = dir_a.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca_file, upstream_ca.cert_pem()).unwrap();
    // Every gateway of a deployment presents leaves under the one CA the
    // workers hand out.
    let (ca_key, ca_cert) = crate::support::intercept_ca();
    let (redis_url, ports) = (redis.url(), format!("443,{}", upstream.port));
    let settings = [
        ("GATEHOUSE_DATABASE_URL", db.url()),
        ("GATEHOUSE_REDIS_URL", redis_url.as_str()),
        ("GATEHOUSE_PROXY_CONNECT_PORTS", ports.as_str()),
        ("GATEHOUSE_EGRESS_EXTRA_CA_FILE", upstream_ca_file.to_str().unwrap()),
        ("GATEHOUSE_INTERCEPT_CA_KEY", ca_key.as_str()),
        ("GATEHOUSE_INTERCEPT_CA_CERT", ca_cert.as_str()),
    ];
    let manifest_key = private_key_pem();
    let a = start_node(dir_a.path(), &manifest_key, &settings);
    let b = start_node(dir_b.path(), &manifest_key, &settings);

    let credential = create_credential(&a.api, &secret);
    let (run, via_b, created) = new_run(&a.api, &b.proxy);
    assert_eq!(created["ca_certificate_pem"].as_str(), Some(ca_cert.as_str()), "{created}");
    let ca_file = dir_a.path().join("gatehouse-ca.pem");
    std::fs::write(&ca_file, ca_cert).unwrap();
    let granted = lease(&a.api, &run, str_of(&credential, "credential_id"));
    let url = format!("https://127.0.0.1:{}/api", upstream.port);
    let https = |proxy: &str| {
        let out = Command::new("curl")
            .args(["-s", "-S", "--max-time", "10", "-x", proxy, "--cacert", ca_file.to_str().unwrap(), &url])
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (ok, body) = https(&via_b);
    assert!(ok, "{body}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {secret}")), "{}", upstream.last());
    assert!(!body.contains(&secret) && body.contains(str_of(&granted, "placeholder")), "{body}");

    // Revoked on A: B's next tunnel to the host is opaque, so the sandbox
    // (which trusts only gatehouse's CA) cannot even reach it, let alone
    // with the credential.
    let revoked =
        api(&a.api, "POST", &format!("/v1/leases/{}/revoke", str_of(&granted, "lease_id")), &json!({}));
    assert_eq!(revoked, json!({"revoked": 1}));
    let before = upstream.seen.lock().unwrap().len();
    let (ok, _) = https(&via_b);
    assert!(!ok, "no interception after the revocation");
    assert_eq!(upstream.seen.lock().unwrap().len(), before);
}

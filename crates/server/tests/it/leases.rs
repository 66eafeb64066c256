//! Credential leases end to end: a real gatehouse process, real upstreams
//! on loopback that echo what they receive, and curl as the sandbox.
//!
//! A unique canary secret goes in once, through the API. It must reach the
//! upstream, and nothing else: not the sandbox's view of the responses, not
//! an API answer, not a refusal or audit entry, not a log line, not the
//! database file.

use std::io::{BufReader, Write as _};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::proxy::{api, start_logging};

/// An upstream on `ip` that records each request head and answers with it:
/// in the body and, for `authorization`, in a response header (a `/headers`
/// echo service, the reflection case).
pub(crate) struct Echo {
    pub(crate) port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

/// A request head as it arrives, up to its blank line (or the end).
pub(crate) fn read_head(reader: &mut impl std::io::BufRead) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            return head;
        }
        head.push_str(&line);
    }
}

impl Echo {
    pub(crate) fn start(ip: &str, port: u16) -> Self {
        let listener = TcpListener::bind((ip, port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let head = read_head(&mut reader);
                    log.lock().unwrap().push(head.clone());
                    let auth = head
                        .lines()
                        .find_map(|l| l.strip_prefix("authorization: "))
                        .unwrap_or("none")
                        .to_owned();
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nx-echo-authorization: {auth}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{head}",
                        head.len()
                    );
                });
            }
        });
        Self { port, seen }
    }

    pub(crate) fn last(&self) -> String {
        self.seen.lock().unwrap().last().cloned().unwrap_or_default()
    }

    pub(crate) fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

fn curl(args: &[&str]) -> String {
    let Output { stdout, .. } = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-"])
        .args(args)
        .output()
        .expect("curl is installed");
    String::from_utf8_lossy(&stdout).into_owned()
}

/// A run and the proxy URL its sandbox uses (the grant as the password).
fn new_run(api_addr: &str, proxy_addr: &str) -> (String, String) {
    let run = api(
        api_addr,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "print(1)"},
            "input_files": [], "read_sessions": [], "budgets": {"max_requests": 100, "max_egress_bytes": 10_000_000}}),
    );
    let run_id = run["run_id"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned();
    assert!(run["proxy"]["env"]["HTTP_PROXY"].as_str().unwrap().contains(run["grant"].as_str().unwrap()));
    // Listening on port 0, the run is handed the port bound, not `:0`.
    assert_eq!(run["proxy"]["url"], format!("http://{proxy_addr}"), "{run}");
    (run_id, format!("http://grant:{}@{proxy_addr}", run["grant"].as_str().unwrap()))
}

fn lease(api_addr: &str, run_id: &str, credential_id: &str, host: &str) -> Value {
    api(
        api_addr,
        "POST",
        &format!("/v1/runs/{run_id}/leases"),
        &json!({"credential_id": credential_id, "purpose": "git_provider", "host": host}),
    )
}

#[test]
fn a_lease_injects_for_its_one_host_and_the_secret_never_leaks() {
    const CANARY: &str = "canary-3f9c1e7a5b2d48c6a0e1-secret";
    const ROTATED: &str = "canary-rotated-77d2c4e1b9a05f36";
    let lease_host = Echo::start("127.0.0.1", 0);
    let other_host = Echo::start("127.0.0.2", lease_host.port);
    let tmp = tempfile::tempdir().unwrap();
    let (server, api_addr, proxy_addr, log) = start_logging(tmp.path(), &crate::proxy::Upstream::start());
    let answers = std::cell::RefCell::new(String::new());
    let call = |method: &str, path: &str, body: Value| {
        let v = api(&api_addr, method, path, &body);
        answers.borrow_mut().push_str(&v.to_string());
        v
    };

    let credential = call(
        "POST",
        "/v1/tenants/t1/credentials",
        json!({"name": "github", "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true, "secret": CANARY}),
    );
    let credential_id =
        credential["credential_id"].as_str().unwrap_or_else(|| panic!("{credential}")).to_owned();
    assert!(credential["fingerprint"].as_str().unwrap().starts_with("hmac-sha256:"), "{credential}");
    let (run_id, proxy) = new_run(&api_addr, &proxy_addr);
    let granted = lease(&api_addr, &run_id, &credential_id, "127.0.0.1");
    answers.borrow_mut().push_str(&granted.to_string());
    let placeholder = granted["placeholder"].as_str().unwrap_or_else(|| panic!("{granted}")).to_owned();
    let lease_id = granted["lease_id"].as_str().unwrap().to_owned();
    let target = format!("http://127.0.0.1:{}/repo", lease_host.port);
    let other = format!("http://127.0.0.2:{}/", lease_host.port);

    // Without a placeholder the rule adds the header; the echo of it, in
    // the head and the body, comes back as the placeholder.
    let mut seen_by_sandbox = curl(&["-x", &proxy, &target]);
    assert!(seen_by_sandbox.starts_with("HTTP/1.1 200"), "{seen_by_sandbox}");
    assert!(lease_host.last().contains(&format!("authorization: Bearer {CANARY}")), "{}", lease_host.last());
    assert!(
        seen_by_sandbox.contains(&format!("x-echo-authorization: Bearer {placeholder}")),
        "{seen_by_sandbox}"
    );
    // The placeholder where the sandbox put it (an SDK's own header).
    let out = curl(&["-x", &proxy, "-H", &format!("authorization: Bearer {placeholder}"), &target]);
    assert!(lease_host.last().contains(&format!("authorization: Bearer {CANARY}")), "{}", lease_host.last());
    assert!(out.contains(&format!("authorization: Bearer {placeholder}")), "{out}");
    seen_by_sandbox.push_str(&out);

    // A placeholder in the URL is refused, not retryable.
    let out = curl(&["-x", &proxy, &format!("{target}?token={placeholder}")]);
    assert!(out.contains("x-gatehouse-reason: lease_placeholder_in_url"), "{out}");
    assert!(out.contains("x-gatehouse-retryable: false"), "{out}");
    // Toward any other host it is a leak attempt: refused, and the lease revoked.
    let before = other_host.seen.lock().unwrap().len();
    let out = curl(&["-x", &proxy, "-H", &format!("authorization: token {placeholder}"), &other]);
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: lease_host_mismatch"),
        "{out}"
    );
    assert_eq!(other_host.seen.lock().unwrap().len(), before, "nothing reached the other host");
    let leases = call("GET", &format!("/v1/leases?run_id={run_id}"), json!({}));
    assert_eq!(leases["items"][0]["status"], "revoked", "{leases}");
    assert_eq!(leases["items"][0]["revoke_reason"], "leaked", "{leases}");
    let out = curl(&["-x", &proxy, &target]);
    assert!(out.contains("x-gatehouse-reason: lease_revoked"), "the host's requests now say why: {out}");
    let again = lease(&api_addr, &run_id, &credential_id, "127.0.0.1");
    assert_eq!(again["error"]["reason"], "run_lease_revoked", "{again}");

    // A second run: rotation takes effect at the next request; a revoke
    // from the API stops injection before it returns; an ended run's
    // placeholder says the run is over.
    let (run2, proxy2) = new_run(&api_addr, &proxy_addr);
    let granted = lease(&api_addr, &run2, &credential_id, "127.0.0.1");
    let placeholder2 = granted["placeholder"].as_str().unwrap().to_owned();
    let rotated = call(
        "PUT",
        &format!("/v1/tenants/t1/credentials/{credential_id}/secret"),
        json!({"secret": ROTATED}),
    );
    assert_eq!(rotated["version"], 2, "{rotated}");
    assert_ne!(rotated["fingerprint"], credential["fingerprint"]);
    seen_by_sandbox.push_str(&curl(&["-x", &proxy2, &target]));
    assert!(lease_host.last().contains(&format!("Bearer {ROTATED}")), "{}", lease_host.last());
    let heartbeat = call("POST", &format!("/v1/runs/{run2}/heartbeat"), json!({}));
    assert_eq!(heartbeat["leases_renewed"], 1, "{heartbeat}");
    let revoked =
        call("POST", &format!("/v1/leases/{}/revoke", granted["lease_id"].as_str().unwrap()), json!({}));
    assert_eq!(revoked["revoked"], 1, "{revoked}");
    let out = curl(&["-x", &proxy2, "-H", &format!("authorization: Bearer {placeholder2}"), &target]);
    assert!(out.contains("x-gatehouse-reason: lease_revoked"), "{out}");
    let (run3, proxy3) = new_run(&api_addr, &proxy_addr);
    let granted = lease(&api_addr, &run3, &credential_id, "127.0.0.1");
    let placeholder3 = granted["placeholder"].as_str().unwrap().to_owned();
    let ended = call("POST", &format!("/v1/runs/{run3}/end"), json!({"outcome": "succeeded"}));
    assert_eq!(ended["revoked"], json!({"grants": 1, "leases": 1}), "{ended}");
    let out = curl(&["-x", &proxy3, "-H", &format!("authorization: Bearer {placeholder3}"), &target]);
    assert!(out.contains("x-gatehouse-reason: run_not_live"), "{out}");

    // Leases of other tenants' credentials and of wrong hosts or purposes are refused.
    let (run4, _) = new_run(&api_addr, &proxy_addr);
    let wrong_host = lease(&api_addr, &run4, &credential_id, "127.0.0.2");
    assert_eq!(wrong_host["error"]["reason"], "lease_host_mismatch", "{wrong_host}");
    let wrong_purpose = api(
        &api_addr,
        "POST",
        &format!("/v1/runs/{run4}/leases"),
        &json!({"credential_id": credential_id, "purpose": "mcp_server", "host": "127.0.0.1"}),
    );
    assert_eq!(wrong_purpose["error"]["reason"], "lease_purpose_mismatch", "{wrong_purpose}");
    let theirs = call(
        "POST",
        "/v1/tenants/t2/credentials",
        json!({"name": "github", "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"basic_username": "x-access-token"}, "allow_plain_http": true, "secret": "t2-secret-value"}),
    );
    let not_ours = lease(&api_addr, &run4, theirs["credential_id"].as_str().unwrap(), "127.0.0.1");
    assert_eq!(not_ours["error"]["reason"], "credential_unknown", "{not_ours}");
    // Hosts compare normalized: case and a trailing dot do not make another host.
    let named = call(
        "POST",
        "/v1/tenants/t1/credentials",
        json!({"name": "gh-named", "purpose": "git_provider", "host": "GitHub.COM.",
            "inject": {"basic_username": "x-access-token"}, "allow_plain_http": true, "secret": "named-secret-value"}),
    );
    assert_eq!(named["host"], "github.com", "{named}");
    let same = lease(&api_addr, &run4, named["credential_id"].as_str().unwrap(), "github.COM.");
    assert_eq!(same["host"], "github.com", "{same}");
    // Deleting a credential revokes its leases; its id resolves no more.
    let deleted = call(
        "DELETE",
        &format!("/v1/tenants/t1/credentials/{}", named["credential_id"].as_str().unwrap()),
        json!({}),
    );
    assert_eq!(deleted, json!({"deleted": true, "revoked": {"leases": 1}}));
    let gone = lease(&api_addr, &run4, named["credential_id"].as_str().unwrap(), "github.com");
    assert_eq!(gone["error"]["reason"], "run_lease_revoked", "{gone}");

    // The record: every refusal is a secret_refused with its lease, and
    // nothing anywhere holds either secret but what the upstream received.
    let refusals = call("GET", "/v1/refusals?kind=secret_refused", json!({}));
    let reasons: Vec<&str> =
        refusals["items"].as_array().unwrap().iter().filter_map(|r| r["reason"].as_str()).collect();
    for reason in ["lease_placeholder_in_url", "lease_host_mismatch", "lease_revoked", "run_not_live"] {
        assert!(reasons.contains(&reason), "{reason} in {refusals}");
    }
    assert!(refusals["items"].as_array().unwrap().iter().any(|r| r["lease_id"] == lease_id.as_str()));
    let events = call("GET", &format!("/v1/runs/{run_id}/events"), json!({}));
    let kinds: Vec<&str> =
        events["items"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"lease_granted") && kinds.contains(&"lease_revoked"), "{events}");
    call("GET", "/v1/audit", json!({}));
    let shown = call("GET", &format!("/v1/runs/{run2}"), json!({}));
    assert_eq!(shown["leases"].as_array().map(Vec::len), Some(1), "{shown}");
    assert_eq!(shown["leases"][0]["status"], "revoked", "{shown}");
    assert_eq!(shown["leases"][0]["placeholder"], placeholder2.as_str(), "{shown}");
    call("GET", "/v1/tenants/t1/credentials", json!({}));
    let metrics =
        crate::cli::http(&api_addr, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    drop(server);
    let logs = log.join().unwrap();
    let database = sqlite_files(tmp.path());
    for secret in [CANARY, ROTATED, "t2-secret-value", "named-secret-value"] {
        assert_nowhere(
            secret,
            &[
                ("the sandbox's view", seen_by_sandbox.as_bytes()),
                ("API answers", answers.borrow().as_bytes()),
                ("logs", logs.as_bytes()),
                ("metrics", metrics.as_bytes()),
                ("the database", &database),
            ],
        );
    }
}

/// Every byte of the embedded SQLite store under `dir`: the database, its
/// write-ahead log and shared memory, as they are on disk.
fn sqlite_files(dir: &std::path::Path) -> Vec<u8> {
    let mut database = Vec::new();
    for entry in std::fs::read_dir(dir.join("gatehouse-data")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with("gatehouse.db") {
            database.extend(std::fs::read(&path).unwrap());
        }
    }
    assert!(database.len() > 4096, "no database under {}", dir.display());
    database
}

/// `secret` is in none of `places`, in any form or piece of it.
fn assert_nowhere(secret: &str, places: &[(&str, &[u8])]) {
    for (what, bytes) in places {
        assert!(!String::from_utf8_lossy(bytes).contains(secret), "{what} hold a secret");
        gatehouse_test_support::assert_no_key_material(secret.as_bytes(), bytes, what);
    }
}

#[test]
fn the_fetch_api_injects_scrubs_and_signs_webhooks_with_leases() {
    use base64::Engine as _;
    const CANARY: &str = "canary-fetch-9a1c2e3f4b5d6e7f";
    const SIGNING: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let upstream = Echo::start("127.0.0.1", 0);
    let tmp = tempfile::tempdir().unwrap();
    let (server, api_addr, _, log) = start_logging(tmp.path(), &crate::proxy::Upstream::start());
    let answers = std::cell::RefCell::new(String::new());
    let api = |addr: &str, method: &str, path: &str, body: &Value| {
        let v = api(addr, method, path, body);
        answers.borrow_mut().push_str(&v.to_string());
        v
    };
    let token = api(
        &api_addr,
        "POST",
        "/v1/tenants/t1/credentials",
        &json!({"name": "mcp", "purpose": "mcp_server", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "token {secret}"}, "allow_plain_http": true, "secret": CANARY}),
    );
    let signing = api(
        &api_addr,
        "POST",
        "/v1/tenants/t1/credentials",
        &json!({"name": "hooks", "purpose": "webhook_signing", "host": "127.0.0.1", "secret": SIGNING}),
    );
    let run = api(
        &api_addr,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"}, "budgets": {"max_requests": 20, "max_egress_bytes": 1_000_000}}),
    );
    let (run_id, grant) = (run["run_id"].as_str().unwrap(), run["grant"].as_str().unwrap());
    let lease_of = |credential: &Value, purpose: &str| {
        api(
            &api_addr,
            "POST",
            &format!("/v1/runs/{run_id}/leases"),
            &json!({"credential_id": credential["credential_id"], "purpose": purpose, "host": "127.0.0.1"}),
        )
    };
    let injected = lease_of(&token, "mcp_server");
    let placeholder = injected["placeholder"].as_str().unwrap_or_else(|| panic!("{injected}"));
    let signer = lease_of(&signing, "webhook_signing");
    let url = format!("http://127.0.0.1:{}/mcp", upstream.port);

    let fetched = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": grant, "url": url, "purpose": "mcp", "headers": [["authorization", format!("token {placeholder}")]]}),
    );
    assert_eq!(fetched["status"], 200, "{fetched}");
    assert!(upstream.last().contains(&format!("authorization: token {CANARY}")), "{}", upstream.last());
    let body =
        base64::engine::general_purpose::STANDARD.decode(fetched["body_base64"].as_str().unwrap()).unwrap();
    let body = String::from_utf8(body).unwrap();
    assert!(
        body.contains(&format!("authorization: token {placeholder}")) && !body.contains(CANARY),
        "{body}"
    );
    assert!(!fetched.to_string().contains(CANARY), "{fetched}");

    // A signed delivery: the receiver checks the signature with the secret;
    // the sender never held it.
    let payload = r#"{"event":"run.finished"}"#;
    let delivered = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": grant, "method": "POST", "url": url, "purpose": "webhook",
            "sign_with": signer["lease_id"], "body_base64": base64::engine::general_purpose::STANDARD.encode(payload)}),
    );
    assert_eq!(delivered["status"], 200, "{delivered}");
    let head = upstream.last();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("{name} in {head}"))
    };
    let (id, timestamp) = (header("webhook-id"), header("webhook-timestamp").parse::<i64>().unwrap());
    let secret = gatehouse_capability::CredentialSecret::new(SIGNING).unwrap();
    let expected = gatehouse_capability::webhook_signature(&secret, id, timestamp, payload.as_bytes());
    assert_eq!(header("webhook-signature"), expected);
    // Signing needs a webhook signing lease of this run, for a webhook.
    let wrong = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": grant, "method": "POST", "url": url, "purpose": "webhook", "sign_with": injected["lease_id"]}),
    );
    assert_eq!(wrong["error"]["reason"], "lease_purpose_mismatch", "{wrong}");

    // The raw secret toward another host (the sandbox should never have
    // it): a leak attempt like the placeholder, refused and revoked.
    let raw = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": grant, "url": "http://127.0.0.2:9/", "purpose": "mcp", "headers": [["x-stolen", CANARY]]}),
    );
    assert_eq!(raw["error"]["reason"], "lease_host_mismatch", "{raw}");
    // The placeholder toward another host through the fetch API: refused, lease revoked.
    let leak = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": grant, "url": "http://127.0.0.2:9/", "purpose": "mcp", "headers": [["authorization", placeholder]]}),
    );
    assert_eq!(leak["error"]["reason"], "lease_host_mismatch", "{leak}");
    for refused in [&wrong, &raw, &leak] {
        assert_eq!(refused["error"]["retryable"], false, "the fetch caller is told to stop: {refused}");
    }
    let leases = api(&api_addr, "GET", &format!("/v1/leases?run_id={run_id}&status=revoked"), &json!({}));
    assert_eq!(leases["items"].as_array().unwrap().len(), 1, "{leases}");

    // The record, read back: refusals, the run's events, the audit log,
    // credentials and leases, and the metrics.
    let refusals = api(&api_addr, "GET", &format!("/v1/refusals?run_id={run_id}"), &json!({}));
    let reasons = refusals.to_string();
    assert!(
        reasons.contains("lease_host_mismatch") && reasons.contains("lease_purpose_mismatch"),
        "{refusals}"
    );
    api(&api_addr, "GET", &format!("/v1/runs/{run_id}/events"), &json!({}));
    api(&api_addr, "GET", &format!("/v1/runs/{run_id}"), &json!({}));
    let audit = api(&api_addr, "GET", "/v1/audit", &json!({}));
    assert!(audit.to_string().contains("credential.create"), "{audit}");
    api(&api_addr, "GET", "/v1/tenants/t1/credentials", &json!({}));
    api(&api_addr, "GET", &format!("/v1/leases?run_id={run_id}"), &json!({}));
    let metrics =
        crate::cli::http(&api_addr, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert!(metrics.contains("gatehouse_egress_fetch_total"), "{metrics}");
    drop(server);
    let logs = log.join().unwrap();
    let database = sqlite_files(tmp.path());
    let seen_by_caller = [fetched.to_string(), delivered.to_string(), body].concat();
    for secret in [CANARY, SIGNING] {
        assert_nowhere(
            secret,
            &[
                ("the caller's view of the fetches", seen_by_caller.as_bytes()),
                ("API answers", answers.borrow().as_bytes()),
                ("logs", logs.as_bytes()),
                ("metrics", metrics.as_bytes()),
                ("the database", &database),
            ],
        );
    }
}

//! The forward proxy, end to end: a real gatehouse process, a real upstream
//! on loopback (opened with an explicit allow range), and curl as the client.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::cli::{Server, gatehouse, http, spawn_server};
use crate::support::{GRANT_SECRET, TOKEN, private_key_pem};

/// A tiny HTTP/1.1 upstream that records the request heads it receives.
pub(crate) struct Upstream {
    pub(crate) port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    log.lock().unwrap().push(head);
                    let body = "hello from upstream";
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Self { port, seen }
    }
}

fn start(dir: &Path, upstream: &Upstream) -> (Server, String, String) {
    let (server, api, proxy, _) = start_logging(dir, upstream);
    (server, api, proxy)
}

/// As [`start`], with the thread collecting the server's log (stderr) until it exits.
pub(crate) fn start_logging(
    dir: &Path,
    upstream: &Upstream,
) -> (Server, String, String, std::thread::JoinHandle<String>) {
    let mut c = door(dir);
    c.env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_PROXY_CONNECT_PORTS", format!("443,{}", upstream.port));
    let (server, api, printed, log) = spawn_server(c);
    (server, api, proxy_address(&printed), log)
}

/// `gatehouse serve` (role all, embedded) as the end-to-end door tests run
/// it: the API on a port of its own, loopback opened to egress (where the
/// test upstreams are), the keys and token given, and proxy settings in its
/// environment pointing nowhere.
pub(crate) fn door(dir: &Path) -> Command {
    let mut c = gatehouse(dir);
    c.env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.0/8")
        .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY", private_key_pem())
        .env("CODEAPI_EGRESS_GRANT_SECRET", GRANT_SECRET)
        .env("CODEAPI_INTERNAL_SERVICE_TOKEN", TOKEN);
    // The door never honours proxy settings from its environment: were it to,
    // every request in these tests would go to a closed port and fail.
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        c.env(name, "http://127.0.0.1:9");
    }
    c.env("NO_PROXY", "").env("no_proxy", "");
    c
}

/// The proxy address in what `gatehouse serve` printed at startup.
pub(crate) fn proxy_address(printed: &str) -> String {
    printed
        .lines()
        .find_map(|l| l.split("egress proxy listening on http://").nth(1))
        .unwrap_or_else(|| panic!("no proxy line: {printed}"))
        .trim()
        .to_owned()
}

#[test]
fn opened_internal_ranges_are_logged_loudly_at_startup() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().unwrap();
    let (server, _, _, log) = start_logging(tmp.path(), &upstream);
    drop(server);
    let log = log.join().unwrap();
    let line =
        log.lines().find(|l| l.contains("GATEHOUSE_EGRESS_ALLOW_RANGES")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("WARN") && line.contains("127.0.0.0/8"), "{line}");
}

/// A read of the record that said it could not wait for every queued event
/// (`x-gatehouse-record-complete: false`) is read again, for up to 30 s.
pub(crate) fn api(addr: &str, method: &str, path: &str, body: &Value) -> Value {
    let body = body.to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let response = http(
            addr,
            &format!(
                "{method} {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            ),
        );
        let (head, rest) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        if head.contains("\r\nx-gatehouse-record-complete: false") && std::time::Instant::now() < deadline {
            continue;
        }
        return serde_json::from_str(rest).unwrap();
    }
}

fn curl(args: &[&str]) -> (String, String) {
    let Output { stdout, stderr, .. } = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-"])
        .args(args)
        .output()
        .expect("curl is installed");
    (String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr).into_owned())
}

#[test]
fn curl_through_the_proxy_reaches_only_what_the_grant_and_policy_allow() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, proxy) = start(tmp.path(), &upstream);
    let grant = api(
        &api_addr,
        "POST",
        "/v1/grants",
        &json!({"exec_id": "e1", "tenant_id": "t1", "user_id": "u1", "max_requests": 6}),
    );
    assert!(grant["token"].is_string(), "{grant}");
    let token = grant["token"].as_str().unwrap().to_owned();
    let with_grant = format!("http://grant:{token}@{proxy}");
    let target = format!("http://127.0.0.1:{}/hello?q=1", upstream.port);

    // No credentials: 407.
    let (out, _) = curl(&["-x", &format!("http://{proxy}"), &target]);
    assert!(out.starts_with("HTTP/1.1 407"), "{out}");
    assert!(out.contains("x-gatehouse-reason: proxy_auth_missing"), "{out}");

    // Allowed: forwarded, and the upstream never sees the grant.
    let (out, err) = curl(&["-x", &with_grant, &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}{err}");
    assert!(out.ends_with("hello from upstream"), "{out}");
    let head = upstream.seen.lock().unwrap().last().cloned().unwrap();
    assert!(head.starts_with("GET /hello?q=1 HTTP/1.1"), "{head}");
    assert!(!head.to_ascii_lowercase().contains("proxy-authorization"), "{head}");
    assert!(!head.contains(&token), "{head}");

    // CONNECT tunnel to an allowed port, and to a port that is not.
    let (out, err) = curl(&["-p", "-x", &with_grant, &format!("http://127.0.0.1:{}/tunnel", upstream.port)]);
    assert!(out.contains("HTTP/1.1 200") && out.ends_with("hello from upstream"), "{out}{err}");
    let (out, _) = curl(&["-p", "-x", &with_grant, "http://127.0.0.1:8/"]);
    assert!(out.contains("x-gatehouse-reason: port_not_allowed"), "{out}");

    // The address guard: metadata and non-opened private ranges.
    let (out, _) = curl(&["-x", &with_grant, "http://169.254.169.254/latest/meta-data/"]);
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: address_metadata"), "{out}");
    let (out, _) = curl(&["-x", &with_grant, "http://10.1.2.3/"]);
    assert!(out.contains("x-gatehouse-reason: address_special_purpose"), "{out}");

    // The tenant's policy.
    let set = api(
        &api_addr,
        "PUT",
        "/v1/tenants/t1/egress-policy",
        &json!({"mode": "allowlist", "allow": ["api.github.com"]}),
    );
    assert_eq!(set["tenant_id"], "t1", "{set}");
    let (out, _) = curl(&["-x", &with_grant, &target]);
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: policy_not_allowed"),
        "{out}"
    );
    let bad =
        api(&api_addr, "PUT", "/v1/tenants/t1/egress-policy", &json!({"mode": "allowlist", "allow": ["*"]}));
    assert_eq!(bad["error"]["reason"], "policy_unreadable");

    // Every request spent the budget: six allowed, the seventh refused.
    let (out, _) = curl(&["-x", &with_grant, &target]);
    assert!(out.contains("x-gatehouse-reason: budget_requests_exhausted"), "{out}");

    let refusals = api(&api_addr, "GET", "/v1/refusals", &json!({}));
    let egress: Vec<&Value> =
        refusals["items"].as_array().unwrap().iter().filter(|r| r["kind"] == "egress_refused").collect();
    assert!(
        egress.iter().any(|r| r["reason"] == "address_metadata"
            && r["host"] == "169.254.169.254"
            && r["run_id"] == "e1")
    );
    assert!(!refusals.to_string().contains("meta-data"), "the path never reaches the record");
    assert!(!refusals.to_string().contains(&token));

    // One run's refusal events, and only that run's.
    let other =
        api(&api_addr, "POST", "/v1/grants", &json!({"exec_id": "e9", "tenant_id": "t1", "user_id": "u1"}));
    let other = format!("http://grant:{}@{proxy}", other["token"].as_str().unwrap());
    let (out, _) = curl(&["-x", &other, "http://10.9.9.9/"]);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    let events = api(&api_addr, "GET", "/v1/refusals?run_id=e1&kind=egress_refused", &json!({}));
    let events = events["items"].as_array().unwrap();
    assert_eq!(events.len(), egress.len(), "{events:?}");
    assert!(events.iter().all(|r| r["run_id"] == "e1" && r["kind"] == "egress_refused"));
    let events = api(&api_addr, "GET", "/v1/refusals?run_id=e9", &json!({}));
    assert_eq!(events["items"].as_array().unwrap().len(), 1, "{events}");
    assert_eq!(events["items"][0]["host"], "10.9.9.9");
    let bad = api(&api_addr, "GET", "/v1/refusals?kind=nope", &json!({}));
    assert_eq!(bad["error"]["code"], "bad_request", "{bad}");
}

#[test]
fn a_forged_or_revoked_grant_gets_nothing_through() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, proxy) = start(tmp.path(), &upstream);
    let target = format!("http://127.0.0.1:{}/", upstream.port);
    let (out, _) = curl(&["-x", &format!("http://grant:ceg1.AAAA@{proxy}"), &target]);
    assert!(out.starts_with("HTTP/1.1 407") && out.contains("x-gatehouse-reason: grant_malformed"), "{out}");

    let grant =
        api(&api_addr, "POST", "/v1/grants", &json!({"exec_id": "e2", "tenant_id": "t1", "user_id": "u1"}));
    let token = grant["token"].as_str().unwrap();
    let id = grant["grant_id"].as_str().unwrap();
    let bearer = format!("Proxy-Authorization: Bearer {token}");
    let (out, _) = curl(&["-x", &format!("http://{proxy}"), "--proxy-header", &bearer, &target]);
    assert!(out.starts_with("HTTP/1.1 200"), "Bearer credentials work too: {out}");
    api(&api_addr, "POST", &format!("/v1/grants/{id}/revoke"), &json!({}));
    let (out, _) = curl(&["-x", &format!("http://{proxy}"), "--proxy-header", &bearer, &target]);
    assert!(out.contains("x-gatehouse-reason: grant_revoked"), "{out}");
    assert_eq!(upstream.seen.lock().unwrap().len(), 1, "only the allowed request reached the upstream");
}

#[test]
fn the_fetch_api_goes_through_the_same_door() {
    use base64::Engine as _;
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, _) = start(tmp.path(), &upstream);
    let grant = api(
        &api_addr,
        "POST",
        "/v1/grants",
        &json!({"exec_id": "e3", "tenant_id": "t1", "user_id": "u1", "max_requests": 3}),
    );
    let token = grant["token"].as_str().unwrap();
    let fetch = |url: String| {
        api(
            &api_addr,
            "POST",
            "/v1/egress/fetch",
            &json!({"grant": token, "url": url, "purpose": "git_provider", "headers": [["x-trace", "1"]]}),
        )
    };
    let r = fetch(format!("http://127.0.0.1:{}/repo?ref=main", upstream.port));
    assert_eq!(r["status"], 200, "{r}");
    let body = base64::engine::general_purpose::STANDARD.decode(r["body_base64"].as_str().unwrap()).unwrap();
    assert_eq!(body, b"hello from upstream");
    let head = upstream.seen.lock().unwrap().last().cloned().unwrap();
    assert!(head.starts_with("GET /repo?ref=main HTTP/1.1") && head.contains("x-trace: 1"), "{head}");

    let r = fetch("http://169.254.169.254/latest/meta-data/".into());
    assert_eq!(
        (r["error"]["code"].as_str(), r["error"]["reason"].as_str()),
        (Some("refused"), Some("address_metadata"))
    );
    let r = fetch("http://2130706433/".into());
    assert_eq!(r["error"]["reason"], "host_noncanonical_ip");
    // The budget of 3 is spent: refused before any connection.
    let r = fetch(format!("http://127.0.0.1:{}/again", upstream.port));
    assert_eq!(r["error"]["reason"], "budget_requests_exhausted");
    let r = api(&api_addr, "POST", "/v1/egress/fetch", &json!({"url": "http://x.test/", "purpose": "mcp"}));
    assert_eq!(r["error"]["reason"], "grant_missing");
    // Purposes are a closed list.
    let r = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": token, "url": "http://x.test/", "purpose": "anything"}),
    );
    assert_eq!(r["error"]["code"], "bad_request", "{r}");
}

#[test]
fn fetch_refuses_framing_headers_pays_its_bytes_and_counts_each_purpose() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, _) = start(tmp.path(), &upstream);
    // "hello from upstream" is 19 bytes: two fetches fit in 40, a third not.
    let grant = api(
        &api_addr,
        "POST",
        "/v1/grants",
        &json!({"exec_id": "f1", "tenant_id": "t1", "user_id": "u1", "max_egress_bytes": 40}),
    );
    let token = grant["token"].as_str().unwrap();
    let url = format!("http://127.0.0.1:{}/", upstream.port);
    let seen_before = upstream.seen.lock().unwrap().len();
    for name in ["content-length", "Transfer-Encoding", "host", "connection", "expect"] {
        let r = api(
            &api_addr,
            "POST",
            "/v1/egress/fetch",
            &json!({"grant": token, "url": url, "purpose": "runtime", "headers": [[name, "5"]]}),
        );
        assert_eq!(
            (r["error"]["code"].as_str(), r["error"]["reason"].as_str()),
            (Some("bad_request"), Some("header_not_allowed")),
            "{name}: {r}"
        );
    }
    assert_eq!(upstream.seen.lock().unwrap().len(), seen_before, "nothing reached the upstream");

    let fetch = |purpose: &str| {
        api(&api_addr, "POST", "/v1/egress/fetch", &json!({"grant": token, "url": url, "purpose": purpose}))
    };
    assert_eq!(fetch("git_provider")["status"], 200);
    assert_eq!(fetch("mcp")["status"], 200);
    let r = fetch("mcp");
    assert_eq!(r["error"]["reason"], "budget_egress_bytes_exhausted", "{r}");
    let opened = api(&api_addr, "POST", "/v1/grants/open", &json!({"token": token}));
    assert_eq!(opened["ledger"]["egress_bytes"], 38, "{opened}");
    assert_eq!(opened["ledger"]["budgets"]["max_egress_bytes"], 40, "{opened}");

    let text = metrics(&api_addr);
    for (purpose, n) in [("git_provider", 1), ("mcp", 1), ("webhook", 0), ("runtime", 0)] {
        let line = format!("gatehouse_egress_fetch_total{{purpose=\"{purpose}\"}} {n}");
        assert!(text.contains(&line), "{line} in {text}");
    }
    assert!(text.contains("gatehouse_egress_allowed_total{kind=\"fetch\"} 2"), "{text}");
}

fn metrics(api_addr: &str) -> String {
    http(
        api_addr,
        &format!(
            "GET /metrics HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n"
        ),
    )
}

#[test]
fn dry_run_policies_let_requests_through_and_record_what_they_would_refuse() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, proxy) = start(tmp.path(), &upstream);
    let grant =
        api(&api_addr, "POST", "/v1/grants", &json!({"exec_id": "d1", "tenant_id": "t2", "user_id": "u1"}));
    let token = grant["token"].as_str().unwrap().to_owned();
    let with_grant = format!("http://grant:{token}@{proxy}");
    let policy =
        json!({"mode": "allowlist", "allow": ["api.github.com"], "deny": ["127.0.0.9"], "dry_run": true});
    api(&api_addr, "PUT", "/v1/tenants/t2/egress-policy", &policy);

    // The policy would refuse both; a dry run lets them through.
    let (out, err) = curl(&["-x", &with_grant, &format!("http://127.0.0.1:{}/", upstream.port)]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}{err}");
    let fetched = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": token, "url": format!("http://127.0.0.1:{}/f", upstream.port), "purpose": "mcp"}),
    );
    assert_eq!(fetched["status"], 200, "{fetched}");
    // The address guard is never dry-run.
    let (out, _) = curl(&["-x", &with_grant, "http://169.254.169.254/"]);
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: address_metadata"), "{out}");

    let events = api(&api_addr, "GET", "/v1/refusals?run_id=d1", &json!({}));
    let events = events["items"].as_array().unwrap();
    let dry: Vec<&Value> = events.iter().filter(|r| r["dry_run"] == true).collect();
    assert_eq!(dry.len(), 2, "{events:?}");
    assert!(dry.iter().all(|r| r["reason"] == "policy_not_allowed"
        && r["host"] == "127.0.0.1"
        && r["tenant_id"] == "t2"
        && r["kind"] == "egress_refused"
        && r["at"].as_i64().is_some_and(|t| t > 1_700_000_000)));
    let enforced: Vec<&Value> = events.iter().filter(|r| r.get("dry_run").is_none()).collect();
    assert_eq!(enforced.len(), 1, "{events:?}");
    assert_eq!(enforced[0]["reason"], "address_metadata");

    let text = metrics(&api_addr);
    assert!(
        text.contains(
            "gatehouse_dry_run_refusals_total{kind=\"egress_refused\",reason=\"policy_not_allowed\"} 2"
        ),
        "{text}"
    );
    assert!(
        !text.contains("gatehouse_refusals_total{kind=\"egress_refused\",reason=\"policy_not_allowed\"}"),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_refusals_total{kind=\"egress_refused\",reason=\"address_metadata\"} 1"),
        "{text}"
    );
    assert!(text.contains("gatehouse_egress_allowed_total{kind=\"request\"} 1"), "{text}");
    assert!(text.contains("gatehouse_egress_allowed_total{kind=\"fetch\"} 1"), "{text}");
}

#[test]
fn connect_is_checked_like_a_request() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, proxy) = start(tmp.path(), &upstream);
    let grant =
        api(&api_addr, "POST", "/v1/grants", &json!({"exec_id": "c1", "tenant_id": "t3", "user_id": "u1"}));
    let token = grant["token"].as_str().unwrap();
    let with_grant = format!("http://grant:{token}@{proxy}");
    let tunnel =
        |host: &str| curl(&["-p", "-x", &with_grant, &format!("http://{host}:{}/", upstream.port)]).0;

    // The address guard: metadata, and loopback outside the opened 127.0.0.0/8.
    let out = curl(&["-p", "-x", &with_grant, "https://169.254.169.254/"]).0;
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: address_metadata"), "{out}");
    let out = tunnel("[::1]");
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: address_special_purpose"),
        "{out}"
    );
    // The tenant's policy, with the rule that fired in the record.
    api(&api_addr, "PUT", "/v1/tenants/t3/egress-policy", &json!({"mode": "open", "deny": ["127.0.0.0/24"]}));
    let out = tunnel("127.0.0.1");
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: policy_denied"), "{out}");
    // The refusal body is the safe error shape.
    let raw = http(
        &proxy,
        &format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nproxy-authorization: Bearer {token}\r\nconnection: close\r\n\r\n",
            port = upstream.port
        ),
    );
    assert!(raw.starts_with("HTTP/1.1 403"), "{raw}");
    let body: Value = serde_json::from_str(raw.rsplit("\r\n\r\n").next().unwrap()).unwrap();
    assert_eq!(
        (body["error"]["code"].as_str(), body["error"]["reason"].as_str()),
        (Some("refused"), Some("policy_denied"))
    );
    let events = api(&api_addr, "GET", "/v1/refusals?run_id=c1&kind=egress_refused", &json!({}));
    let last = events["items"].as_array().unwrap().first().cloned().unwrap();
    assert_eq!(
        (last["reason"].as_str(), last["rule"].as_str()),
        (Some("policy_denied"), Some("127.0.0.0/24")),
        "{last}"
    );
    // Allowed again once the rule is gone: the tunnel carries the exchange.
    api(&api_addr, "PUT", "/v1/tenants/t3/egress-policy", &json!({"mode": "open"}));
    let out = tunnel("127.0.0.1");
    assert!(out.contains("HTTP/1.1 200") && out.ends_with("hello from upstream"), "{out}");
}

/// An upstream that reads a request with a `content-length` body, then
/// answers with `answer_bytes` of `y` and a header pretending to be gatehouse's.
/// Request heads an upstream saw, each with the size of its body.
type Seen = Arc<Mutex<Vec<(String, usize)>>>;

fn counting_upstream(answer_bytes: usize) -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let (mut head, mut length) = (String::new(), 0usize);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                }
                let mut body = vec![0u8; length];
                let _ = std::io::Read::read_exact(&mut reader, &mut body);
                log.lock().unwrap().push((head, body.len()));
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 201 Created\r\ncontent-length: {answer_bytes}\r\nx-gatehouse-reason: spoofed\r\nx-upstream: yes\r\nconnection: close\r\n\r\n"
                );
                let _ = stream.write_all(&vec![b'y'; answer_bytes]);
            });
        }
    });
    (port, seen)
}

#[test]
fn the_raw_fetch_streams_bodies_past_the_json_cap_both_ways() {
    let upstream = Upstream::start();
    let (port, seen) = counting_upstream(3 << 20);
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, _) = start(tmp.path(), &upstream);
    let grant = api(
        &api_addr,
        "POST",
        "/v1/grants",
        &json!({"exec_id": "raw1", "tenant_id": "t1", "user_id": "u1", "max_egress_bytes": 16 << 20}),
    );
    let token = grant["token"].as_str().unwrap();
    let upload = tmp.path().join("upload");
    std::fs::write(&upload, vec![b'x'; 3 << 20]).unwrap();
    let raw = |query: &str, extra: &[&str]| {
        let out = Command::new("curl")
            .args(["-s", "-D", "-", "--max-time", "20", "-X", "POST", "-H", "expect:"])
            .args(["-H", &format!("authorization: Bearer {TOKEN}")])
            .args(["-H", &format!("x-gatehouse-grant: {token}")])
            .args(extra)
            .arg(format!("http://{api_addr}/v1/egress/fetch/raw?{query}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let url = format!("http%3A%2F%2F127.0.0.1%3A{port}%2Fup");
    let out = raw(
        &format!("url={url}&method=PUT&purpose=runtime"),
        &["-H", "x-gatehouse-header: x-trace: 7", "--data-binary", &format!("@{}", upload.display())],
    );
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 201"), "{head}");
    assert!(head.contains("x-upstream: yes") && head.contains("x-gatehouse-redirects: 0"), "{head}");
    assert!(!head.contains("spoofed"), "the upstream cannot speak as gatehouse: {head}");
    assert_eq!(body.len(), 3 << 20, "the 3 MiB answer came through whole");
    let (up_head, up_len) = seen.lock().unwrap().last().cloned().unwrap();
    assert!(up_head.starts_with("PUT /up HTTP/1.1") && up_head.contains("x-trace: 7"), "{up_head}");
    assert_eq!(up_len, 3 << 20, "the 3 MiB upload reached the upstream whole");

    // Paid for both ways, and the budget holds: 12 MiB spent of 16.
    let opened = api(&api_addr, "POST", "/v1/grants/open", &json!({"token": token}));
    assert_eq!(opened["ledger"]["egress_bytes"], 6 << 20, "{opened}");
    // The same checks as the JSON route: framing headers, the door.
    let out = raw(&format!("url={url}&purpose=runtime"), &["-H", "x-gatehouse-header: content-length: 5"]);
    assert!(out.starts_with("HTTP/1.1 400") && out.contains("\"header_not_allowed\""), "{out}");
    let out = raw("url=http%3A%2F%2F169.254.169.254%2F&purpose=runtime", &[]);
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("\"address_metadata\""), "{out}");
    let out = raw("purpose=runtime", &[]);
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
}

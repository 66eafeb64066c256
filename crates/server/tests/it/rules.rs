//! Egress rules as fine as methods and paths, end to end: a real gatehouse,
//! real upstreams on loopback (plain HTTP, and TLS under a test CA the
//! gateway trusts), curl as the sandbox through the proxy, the fetch API,
//! and `gatehouse egress check`. Each rule form is decided by the one pure
//! decision wherever the request is visible; a host judged per request is
//! terminated, never tunnelled blind.

use std::process::Command;
use std::sync::Arc;

use gatehouse_egress::intercept::InterceptCa;
use serde_json::{Value, json};

use crate::cli::gatehouse;
use crate::intercept::TlsEcho;
use crate::leases::Echo;
use crate::proxy::api;

/// curl as the sandbox: the response head and body.
fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-"])
        .args(args)
        .output()
        .expect("curl is installed");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn refused_with(out: &str, reason: &str) -> bool {
    out.starts_with("HTTP/1.1 403") && out.contains(&format!("x-gatehouse-reason: {reason}\r\n"))
}

#[test]
fn method_and_path_rules_hold_through_the_proxy_the_fetch_api_and_egress_check() {
    let upstream_ca = Arc::new(InterceptCa::generate().unwrap());
    let plain = Echo::start("127.0.0.1", 0);
    let narrowed_tls = TlsEcho::start(&upstream_ca, "127.0.0.2", 0);
    let open_tls = TlsEcho::start(&upstream_ca, "127.0.0.3", narrowed_tls.port);
    let tmp = tempfile::tempdir().unwrap();
    let upstream_ca_file = tmp.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca_file, upstream_ca.cert_pem()).unwrap();
    let (_server, api_addr, proxy_addr, _log) =
        crate::intercept::start(tmp.path(), &upstream_ca_file, &[narrowed_tls.port]);

    let policy = json!({"mode": "allowlist",
        "allow": [{"host": "127.0.0.1", "methods": ["GET", "POST"], "paths": ["/v1/public/"]},
                  {"host": "127.0.0.2", "methods": ["GET"]},
                  "127.0.0.3"],
        "deny": [{"host": "127.0.0.1", "methods": ["POST"], "paths": ["/v1/public/admin"],
                  "reason": "no admin from agents"}]});
    let stored = api(&api_addr, "PUT", "/v1/tenants/t1/egress-policy", &policy);
    assert_eq!(stored["version"], 1, "{stored}");
    assert_eq!(stored["policy"]["allow"], policy["allow"], "stored as written: {stored}");
    assert_eq!(stored["policy"]["deny"], policy["deny"], "stored as written: {stored}");
    let run = api(
        &api_addr,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"},
            "budgets": {"max_requests": 100, "max_egress_bytes": 1_000_000}}),
    );
    let grant = run["grant"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned();
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    let proxy = format!("http://grant:{grant}@{proxy_addr}");
    let ca_file = tmp.path().join("gatehouse-ca.pem");
    std::fs::write(&ca_file, run["ca_certificate_pem"].as_str().unwrap()).unwrap();
    let at = |path: &str| format!("http://127.0.0.1:{}{path}", plain.port);

    // Plain HTTP through the proxy: each request judged by method and path.
    let out = curl(&["-x", &proxy, &at("/v1/public/x")]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    for (method, path, reason) in [
        ("PUT", "/v1/public/x", "policy_method_not_allowed"),
        ("GET", "/v1/private", "policy_path_not_allowed"),
        ("GET", "/v1/public/../private", "policy_path_not_allowed"),
        ("GET", "/v1/public/a%2Fb", "url_ambiguous_path"),
        ("GET", "/v1/public/a;jsessionid=1", "url_ambiguous_path"),
    ] {
        let out = curl(&["-x", &proxy, "--path-as-is", "-X", method, &at(path)]);
        assert!(refused_with(&out, reason), "{method} {path}: {out}");
        assert!(out.contains("x-gatehouse-retryable: false"), "{out}");
        // A refusal a person could lift asks one: its proposal is named.
        let lifts = reason.starts_with("policy_");
        assert_eq!(out.contains("x-gatehouse-proposal: prop_"), lifts, "{method} {path}: {out}");
        assert_eq!(out.contains(r#""proposal_id":"prop_"#), lifts, "{method} {path}: {out}");
    }
    let out = curl(&["-x", &proxy, "-X", "POST", &at("/v1/public/admin")]);
    assert!(refused_with(&out, "policy_denied"), "{out}");
    assert!(out.contains("x-gatehouse-rule-reason: no admin from agents\r\n"), "{out}");
    assert!(out.contains(r#""rule_reason":"no admin from agents""#), "{out}");
    assert!(!out.contains("x-gatehouse-proposal"), "a deny asks no one: {out}");
    assert_eq!(plain.count(), 1, "only the allowed request reached the upstream");

    // HTTPS to a host judged per request: terminated under gatehouse's CA.
    let narrowed = format!("https://127.0.0.2:{}/repo", narrowed_tls.port);
    let out = curl(&["-x", &proxy, "--cacert", ca_file.to_str().unwrap(), &narrowed]);
    assert!(out.contains("HTTP/1.1 200"), "{out}");
    assert!(narrowed_tls.last().starts_with("GET /repo"), "{}", narrowed_tls.last());
    let seen = narrowed_tls.seen.lock().unwrap().len();
    let out = curl(&["-x", &proxy, "--cacert", ca_file.to_str().unwrap(), "-X", "DELETE", &narrowed]);
    assert!(
        out.contains("HTTP/1.1 403") && out.contains("x-gatehouse-reason: policy_method_not_allowed"),
        "{out}"
    );
    // Inside the terminated tunnel too, the refusal asks a person.
    assert!(out.contains("x-gatehouse-proposal: prop_"), "{out}");
    assert_eq!(narrowed_tls.seen.lock().unwrap().len(), seen, "the refused request never left");
    // Its tunnel is never opaque: a client trusting only the upstream's CA
    // cannot get through.
    let out = curl(&["-x", &proxy, "--cacert", upstream_ca_file.to_str().unwrap(), &narrowed]);
    assert!(!out.contains("HTTP/1.1 200 OK\r\ncontent-length"), "{out}");
    // A host-only rule keeps the tunnel opaque (the upstream's own certificate).
    let opaque = format!("https://127.0.0.3:{}/x", open_tls.port);
    let out = curl(&["-x", &proxy, "--cacert", upstream_ca_file.to_str().unwrap(), "-X", "DELETE", &opaque]);
    assert!(out.contains("HTTP/1.1 200"), "{out}");

    // The fetch API: the same decision, the deny's reason in JSON and header.
    let fetch = |method: &str, path: &str| {
        let body =
            json!({"grant": grant, "method": method, "url": at(path), "purpose": "runtime"}).to_string();
        crate::cli::http(
            &api_addr,
            &format!(
                "POST /v1/egress/fetch HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                crate::support::TOKEN,
                body.len()
            ),
        )
    };
    let out = fetch("GET", "/v1/public/y");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let out = fetch("PATCH", "/v1/public/y");
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains(r#""reason":"policy_method_not_allowed""#),
        "{out}"
    );
    let out = fetch("POST", "/v1/public/admin/users");
    assert!(out.contains(r#""rule_reason":"no admin from agents""#), "{out}");
    assert!(out.contains("x-gatehouse-rule-reason: no admin from agents\r\n"), "{out}");

    // `egress check`, offline, with the same policy.
    let policy_file = tmp.path().join("policy.json");
    std::fs::write(&policy_file, policy.to_string()).unwrap();
    let check = |method: &str, path: &str| {
        let out = gatehouse(tmp.path())
            .args([
                "egress",
                "check",
                "--json",
                "--allow-ranges",
                "127.0.0.0/8",
                "--method",
                method,
                "--policy",
            ])
            .arg(&policy_file)
            .arg(at(path))
            .output()
            .unwrap();
        (out.status.code(), serde_json::from_slice::<Value>(&out.stdout).unwrap_or_default())
    };
    assert_eq!(check("GET", "/v1/public/x").0, Some(0));
    let (code, refused) = check("POST", "/v1/public/admin");
    assert_eq!(code, Some(1), "{refused}");
    assert_eq!(
        (refused["reason"].as_str(), refused["rule_reason"].as_str()),
        (Some("policy_denied"), Some("no admin from agents"))
    );
    assert_eq!(check("DELETE", "/v1/public/x").1["reason"], "policy_method_not_allowed");
    assert_eq!(check("GET", "/v1/other").1["reason"], "policy_path_not_allowed");

    // The record holds each refusal of the run.
    let refusals = api(&api_addr, "GET", &format!("/v1/refusals?run_id={run_id}&limit=500"), &json!({}));
    let reasons: Vec<&str> =
        refusals["items"].as_array().unwrap().iter().filter_map(|r| r["reason"].as_str()).collect();
    for reason in
        ["policy_method_not_allowed", "policy_path_not_allowed", "url_ambiguous_path", "policy_denied"]
    {
        assert!(reasons.contains(&reason), "{reason} in {refusals}");
    }

    // The presets a policy may name.
    let presets = api(&api_addr, "GET", "/v1/egress-presets", &json!({}));
    let registries = presets["items"].as_array().unwrap().iter().find(|p| p["name"] == "package-registries");
    let registries = registries.unwrap_or_else(|| panic!("{presets}"));
    assert!(registries["entries"].as_array().unwrap().contains(&json!("pypi.org")), "{registries}");
    assert!(!registries["sources"].as_array().unwrap().is_empty());
    // A policy naming an unknown preset, or holding a bad rule, is refused
    // naming the entry; nothing is stored.
    for bad in [
        json!({"mode": "allowlist", "allow": [{"preset": "nope"}]}),
        json!({"mode": "allowlist", "allow": [{"host": "a.example", "methods": ["get"]}]}),
        json!({"mode": "allowlist", "allow": [{"host": "a.example", "paths": ["v1"]}]}),
        json!({"mode": "open", "deny": [{"host": "a.example", "reason": "x\u{7}"}]}),
    ] {
        let refused = api(&api_addr, "PUT", "/v1/tenants/t1/egress-policy", &bad);
        assert_eq!(refused["error"]["reason"], "policy_unreadable", "{bad}: {refused}");
    }
    assert_eq!(api(&api_addr, "GET", "/v1/tenants/t1/egress-policy", &json!({}))["version"], 1);
}

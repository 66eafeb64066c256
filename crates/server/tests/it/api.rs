//! The HTTP API, in process, with a controlled clock.

use axum::body::Body;
use gatehouse_config::names;
use http::Request;
use serde_json::json;

use crate::support::*;

fn exec_body() -> serde_json::Value {
    json!({"code": "print(1)", "lang": "python", "files": ["a.csv"]})
}

fn claims() -> serde_json::Value {
    json!({"exec_id": "exec-1", "tenant_id": "t1", "user_id": "u1", "input_files": ["a.csv"], "max_requests": 5})
}

async fn sign(node: &Node) -> String {
    let r = call(node, "/v1/manifests/sign", json!({"claims": claims(), "body": exec_body()})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_manifest_signed_by_the_worker_verifies_against_its_body_only() {
    let node = node().await;
    let token = sign(&node).await;
    // Same body, other key order and whitespace: still the same body.
    let reordered: serde_json::Value =
        serde_json::from_str(r#"{ "files": ["a.csv"], "lang": "python", "code": "print(1)" }"#).unwrap();
    let r = call(&node, "/v1/manifests/verify", json!({"token": token, "body": reordered})).await;
    assert_eq!(r.json()["valid"], true, "{}", r.text);
    assert_eq!(r.json()["claims"]["exec_id"], "exec-1");
    assert_eq!(r.json()["claims"]["max_requests"], 5);

    let other = json!({"code": "import os; os.system('curl evil')", "lang": "python", "files": ["a.csv"]});
    let r = call(&node, "/v1/manifests/verify", json!({"token": token, "body": other})).await;
    assert_eq!(r.json(), json!({"valid": false, "reason": "manifest_body_mismatch"}));

    node.clock.advance(300 + 31);
    let r = call(&node, "/v1/manifests/verify", json!({"token": token, "body": exec_body()})).await;
    assert_eq!(r.json(), json!({"valid": false, "reason": "manifest_expired"}));

    let kinds: Vec<(String, String)> = refusals(&node)
        .await
        .iter()
        .map(|r| (r["kind"].as_str().unwrap().to_owned(), r["reason"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("manifest_refused".to_owned(), "manifest_body_mismatch".to_owned()),
            ("manifest_refused".to_owned(), "manifest_expired".to_owned())
        ],
        "every refusal is recorded with its reason"
    );
}

#[tokio::test]
async fn a_missing_manifest_is_refused_unless_the_operator_allows_unsigned() {
    let node = node().await;
    let r = call(&node, "/v1/manifests/verify", json!({"body": exec_body()})).await;
    assert_eq!(r.json(), json!({"valid": false, "reason": "manifest_missing"}));

    let lenient = node_with("all", &[(names::REQUIRE_MANIFEST, "false")]).await;
    let r = call(&lenient, "/v1/manifests/verify", json!({"body": exec_body()})).await;
    assert_eq!(r.json(), json!({"valid": true, "unsigned": true}));
    let metrics = send(&lenient.router, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert!(
        metrics.text.contains("gatehouse_unsigned_requests_total 1"),
        "recorded as unsigned: {}",
        metrics.text
    );
    // The switch never lets a bad manifest through.
    let r = call(&lenient, "/v1/manifests/verify", json!({"token": "x.y.z", "body": exec_body()})).await;
    assert_eq!(r.json()["valid"], false);
}

#[tokio::test]
async fn a_runner_verifies_but_cannot_mint() {
    let worker = node().await;
    let token = sign(&worker).await;
    // A runner configured with the worker's public key.
    let public = gatehouse_capability::ManifestSigningKey::from_ed25519_text(&worker.private_pem)
        .unwrap()
        .public_key_pem()
        .unwrap();
    let runner = node_with("runner", &[(names::MANIFEST_PUBLIC_KEY, &public)]).await;
    let r = call(&runner, "/v1/manifests/verify", json!({"token": token, "body": exec_body()})).await;
    assert_eq!(r.json()["valid"], true, "{}", r.text);

    for (path, body) in [
        ("/v1/manifests/sign", json!({"claims": claims(), "body": exec_body()})),
        ("/v1/grants", json!({"exec_id": "e", "tenant_id": "t", "user_id": "u"})),
        ("/v1/grants/open", json!({"token": "ceg1.x"})),
    ] {
        let r = call(&runner, path, body).await;
        assert_eq!(r.status, 403, "{path}: {}", r.text);
        assert_eq!(r.json()["error"]["code"], "forbidden");
    }
}

#[tokio::test]
async fn grants_round_trip_and_refuse_with_reasons() {
    let node = node().await;
    let r = call(
        &node,
        "/v1/grants",
        json!({"exec_id": "exec-1", "tenant_id": "t1", "user_id": "u1", "input_files": ["f"], "max_requests": 3}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let token = r.json()["token"].as_str().unwrap().to_owned();
    let grant_id = r.json()["grant_id"].as_str().unwrap().to_owned();
    assert!(token.starts_with("ceg1."));

    let r = call(&node, "/v1/grants/open", json!({"token": token})).await;
    let claims = &r.json()["claims"];
    assert_eq!(claims["grant_id"], grant_id.as_str());
    assert_eq!(claims["max_requests"], 3);
    assert!(claims["session_key"].as_str().unwrap().starts_with("sk1_"));

    let r = call(&node, "/v1/grants/open", json!({"token": token.replacen("ceg1.", "ceg0.", 1)})).await;
    assert_eq!(r.json(), json!({"valid": false, "reason": "grant_bad_prefix"}));
    let r = call(&node, "/v1/grants/open", json!({})).await;
    assert_eq!(r.json(), json!({"valid": false, "reason": "grant_missing"}));
    node.clock.advance(900);
    let r = call(&node, "/v1/grants/open", json!({"token": token})).await;
    assert_eq!(r.json(), json!({"valid": false, "reason": "grant_expired"}));

    // The same principal always derives the same namespace, another one never does.
    let a = call(&node, "/v1/grants", json!({"exec_id": "e2", "tenant_id": "t1", "user_id": "u1"})).await;
    let b = call(&node, "/v1/grants", json!({"exec_id": "e3", "tenant_id": "t1", "user_id": "u2"})).await;
    node.clock.set(NOW + 900);
    let mut keys = Vec::new();
    for minted in [&a, &b] {
        let r = call(&node, "/v1/grants/open", json!({"token": minted.json()["token"]})).await;
        keys.push(r.json()["claims"]["session_key"].clone());
    }
    assert!(keys[0].is_string());
    assert_ne!(keys[0], keys[1]);
}

#[tokio::test]
async fn a_caller_cannot_supply_the_session_key_or_skip_the_tenant() {
    let node = node().await;
    let r = call(
        &node,
        "/v1/grants",
        json!({"exec_id": "e", "tenant_id": "t", "user_id": "u", "session_key": "sk1_forged"}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = call(&node, "/v1/grants", json!({"exec_id": "e", "user_id": "u"})).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["reason"], "tenant_missing");
    let r =
        call(&node, "/v1/manifests/sign", json!({"claims": {"exec_id": "e", "user_id": "u"}, "body": {}}))
            .await;
    assert_eq!(r.json()["error"]["reason"], "tenant_missing");
}

#[tokio::test]
async fn internal_routes_need_the_service_token() {
    let node = node().await;
    let no_auth = Request::post("/v1/grants/open")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let r = send(&node.router, no_auth).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["reason"], "service_token_missing");
    // A refusal says it will not pass by retrying, in the body and headers.
    assert_eq!(r.json()["error"]["retryable"], false);
    assert_eq!(
        (&r.headers["x-gatehouse-reason"], &r.headers["x-gatehouse-retryable"]),
        (
            &"service_token_missing".parse::<http::HeaderValue>().unwrap(),
            &"false".parse::<http::HeaderValue>().unwrap()
        )
    );
    let wrong = Request::post("/v1/grants/open")
        .header("authorization", format!("Bearer {TOKEN}x"))
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let r = send(&node.router, wrong).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["reason"], "service_token_invalid");
    // Two credentials are refused, whichever of them is right and in
    // whichever order: nothing guesses which one counts.
    for (first, second) in [(TOKEN.to_owned(), format!("{TOKEN}x")), (format!("{TOKEN}x"), TOKEN.to_owned())]
    {
        let twice = Request::post("/v1/grants/open")
            .header("authorization", format!("Bearer {first}"))
            .header("authorization", format!("Bearer {second}"))
            .header("content-type", "application/json")
            .body(Body::from("{}"))
            .unwrap();
        let r = send(&node.router, twice).await;
        assert_eq!(r.status, 401);
        assert_eq!(r.json()["error"]["reason"], "credentials_ambiguous");
    }
    // Callers who proved nothing are counted, not itemized: one row per
    // reason (and minute and client), four refusals in all.
    let rows = refusals(&node).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows.iter().map(|r| r["count"].as_i64().unwrap()).sum::<i64>(), 4);
    assert!(rows.iter().all(|r| r["listener"] == "api" && r["kind"] == "auth_refused"));
    // Health stays open for load balancers.
    let r = send(&node.router, Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn bad_requests_get_the_safe_error_shape() {
    let node = node().await;
    let cases: Vec<(Request<Body>, u16, &str)> = vec![
        (post("/v1/grants/open", "{\"token\": \"a\", \"token\": \"b\"}"), 400, "invalid_json"),
        (post("/v1/grants/open", "{not json"), 400, "invalid_json"),
        (post("/v1/grants/open", "{\"token\": 5}"), 400, "bad_request"),
        (post("/v1/grants/open", "{\"token\": \"a\", \"extra\": 1}"), 400, "bad_request"),
        (
            post("/v1/grants/open", &format!("{{\"token\": \"{}\"}}", "a".repeat(2 * 1024 * 1024))),
            413,
            "payload_too_large",
        ),
        (
            Request::post("/v1/grants/open")
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "text/plain")
                .body(Body::from("{}"))
                .unwrap(),
            415,
            "unsupported_media_type",
        ),
        (Request::get("/v2/nothing").body(Body::empty()).unwrap(), 404, "not_found"),
        (Request::delete("/healthz").body(Body::empty()).unwrap(), 405, "method_not_allowed"),
    ];
    for (req, status, code) in cases {
        let r = send(&node.router, req).await;
        assert_eq!(r.status, status, "{}", r.text);
        let body = r.json();
        assert_eq!(body["error"]["code"], code, "{}", r.text);
        let rid = body["error"]["request_id"].as_str().unwrap();
        assert_eq!(r.headers["x-request-id"], rid);
        assert_eq!(
            body["error"].as_object().unwrap().keys().filter(|k| *k != "reason").count(),
            3,
            "{}",
            r.text
        );
    }
}

#[tokio::test]
async fn request_ids_from_callers_cannot_forge_log_lines() {
    let node = node().await;
    let req = Request::get("/healthz").header("x-request-id", "ok-id.1").body(Body::empty()).unwrap();
    assert_eq!(send(&node.router, req).await.headers["x-request-id"], "ok-id.1");
    let req = Request::get("/healthz")
        .header("x-request-id", "a\" status=200 forged=\"")
        .body(Body::empty())
        .unwrap();
    let r = send(&node.router, req).await;
    assert!(r.headers["x-request-id"].to_str().unwrap().starts_with("req_"));
}

async fn boom() -> &'static str {
    panic!("secret path /etc/gatehouse/key.pem")
}

#[tokio::test]
async fn a_panic_becomes_a_safe_internal_error() {
    use axum::middleware;
    use axum::routing::get;
    let node = node().await;
    let app = axum::Router::new()
        .route("/boom", get(boom))
        .layer(middleware::from_fn_with_state(node.state.clone(), gatehouse_server::http::request_context))
        .with_state(node.state.clone());
    let r = send(&app, Request::get("/boom").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["code"], "internal");
    assert!(!r.text.contains("/etc/gatehouse"));
}

#[tokio::test]
async fn no_secret_reaches_a_response_a_log_line_or_a_metric() {
    let logs = LogBuffer::global();
    let mark = logs.mark();
    let node = node().await;
    let manifest = sign(&node).await;
    let grant = call(&node, "/v1/grants", json!({"exec_id": "e", "tenant_id": "t", "user_id": "u"}))
        .await
        .json()["token"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut responses = String::new();
    let requests = vec![
        post("/v1/manifests/verify", &json!({"token": manifest, "body": {"other": true}}).to_string()),
        post("/v1/manifests/verify", &json!({"token": manifest, "body": exec_body()}).to_string()),
        post("/v1/grants/open", &json!({"token": grant}).to_string()),
        post("/v1/grants/open", &json!({"token": format!("{grant}x")}).to_string()),
        post(
            "/v1/manifests/sign",
            &json!({"claims": {"exec_id": GRANT_SECRET, "tenant_id": "t", "user_id": "u"}, "body": {}})
                .to_string(),
        ),
        post(
            "/v1/manifests/sign",
            &json!({"claims": {"exec_id": "e", "tenant_id": "t", "user_id": [TOKEN]}, "body": {}})
                .to_string(),
        ),
        post(
            "/v1/grants",
            &json!({"exec_id": "e", "tenant_id": "t", "user_id": "u", "session_key": GRANT_SECRET})
                .to_string(),
        ),
        post("/v1/grants/open", &format!("{{\"token\": \"{TOKEN}\", \"token\": 1}}")),
        Request::post("/v1/grants/open")
            .header("authorization", format!("Bearer {GRANT_SECRET}"))
            .header("content-type", "application/json")
            .body(Body::from("{}"))
            .unwrap(),
        Request::get("/metrics").body(Body::empty()).unwrap(),
        Request::get(format!("/v1/refusals?token={TOKEN}"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    ];
    for req in requests {
        responses.push_str(&send(&node.router, req).await.text);
    }
    let log = logs.since(mark);
    assert!(log.contains("refused"), "the refusals were logged: {log}");
    gatehouse_test_support::assert_no_pem_key(&node.private_pem, &responses, "a response");
    gatehouse_test_support::assert_no_pem_key(&node.private_pem, &log, "a log line");
    for secret in [TOKEN, GRANT_SECRET] {
        assert!(!responses.contains(secret), "a response carried a secret: {responses}");
        assert!(!log.contains(secret), "a log line carried a secret: {log}");
    }
    for token in [&manifest, &grant] {
        assert!(!log.contains(token.as_str()), "a log line carried a token");
    }
}

#[tokio::test]
async fn metrics_count_refusals_by_closed_labels() {
    let node = node().await;
    call(&node, "/v1/grants/open", json!({"token": "nope"})).await;
    let r = send(&node.router, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert!(
        r.text.contains("gatehouse_refusals_total{kind=\"grant_refused\",reason=\"grant_bad_prefix\"} 1"),
        "{}",
        r.text
    );
    assert!(r.text.contains("gatehouse_http_responses_total{class=\"2xx\"}"));
}

#[tokio::test]
async fn refusals_are_listed_for_operators() {
    let node = node().await;
    call(&node, "/v1/grants/open", json!({"token": "nope"})).await;
    let req = Request::get("/v1/refusals")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let list = send(&node.router, req).await.json();
    assert_eq!(list["items"][0]["kind"], "grant_refused");
    assert_eq!(list["items"][0]["reason"], "grant_bad_prefix");
    assert_eq!(list["items"][0]["at"], NOW);
    assert!(list["items"][0]["request_id"].as_str().unwrap().starts_with("req_"));
}

async fn mint(node: &Node, extra: serde_json::Value) -> (String, String) {
    let mut body = json!({"exec_id": "exec-1", "tenant_id": "t1", "user_id": "u1", "input_files": ["f1"], "output_session_id": "out-1"});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let r = call(node, "/v1/grants", body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    (r.json()["token"].as_str().unwrap().to_owned(), r.json()["grant_id"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_minted_grant_spends_its_ledger_budget_and_no_more() {
    let node = node().await;
    let (token, grant_id) = mint(&node, json!({"max_requests": 2})).await;
    for left in [1, 0] {
        let r = call(&node, "/v1/grants/consume", json!({"token": token, "operation": {"kind": "request"}}))
            .await;
        assert_eq!(r.json()["allowed"], true, "{}", r.text);
        assert_eq!(r.json()["remaining"]["requests"], left);
    }
    let r =
        call(&node, "/v1/grants/consume", json!({"token": token, "operation": {"kind": "request"}})).await;
    assert_eq!(r.json(), json!({"allowed": false, "reason": "budget_requests_exhausted"}));
    let last = refusals(&node).await.pop().unwrap();
    assert_eq!((last["kind"].as_str(), last["run_id"].as_str()), (Some("budget_exhausted"), Some("exec-1")));

    let r = call(&node, "/v1/grants/open", json!({"token": token})).await;
    assert_eq!(r.json()["ledger"]["request_count"], 2, "{}", r.text);
    assert_eq!(r.json()["ledger"]["remaining"]["requests"], 0);
    assert_eq!(r.json()["claims"]["grant_id"], grant_id.as_str());
}

#[tokio::test]
async fn consume_checks_scope_and_refuses_forged_grants() {
    let node = node().await;
    let (token, _) = mint(&node, json!({})).await;
    let op = |o: serde_json::Value| json!({"token": token, "operation": o});
    let r = call(&node, "/v1/grants/consume", op(json!({"kind": "read_file", "file": "f1"}))).await;
    assert_eq!(r.json()["allowed"], true);
    let r = call(&node, "/v1/grants/consume", op(json!({"kind": "read_file", "file": "other"}))).await;
    assert_eq!(r.json()["reason"], "scope_file_not_granted");
    let r = call(
        &node,
        "/v1/grants/consume",
        op(json!({"kind": "upload", "session": "out-2", "bytes": 1, "output_file_id": "o"})),
    )
    .await;
    assert_eq!(r.json()["reason"], "scope_output_session_mismatch");
    let r = call(&node, "/v1/grants/consume", op(json!({"kind": "launch_missiles"}))).await;
    assert_eq!(r.status, 400);
    let r =
        call(&node, "/v1/grants/consume", json!({"token": "ceg1.AAAA", "operation": {"kind": "request"}}))
            .await;
    assert_eq!(r.json()["reason"], "grant_malformed");
}

#[tokio::test]
async fn a_revoked_grant_is_refused_everywhere() {
    let node = node().await;
    let (token, grant_id) = mint(&node, json!({})).await;
    let (other, _) = mint(&node, json!({"exec_id": "exec-2"})).await;
    let r = call(&node, &format!("/v1/grants/{grant_id}/revoke"), json!({})).await;
    assert_eq!(r.json(), json!({"revoked": 1}), "{}", r.text);
    let r =
        call(&node, "/v1/grants/consume", json!({"token": token, "operation": {"kind": "request"}})).await;
    assert_eq!(r.json()["reason"], "grant_revoked");
    let r = call(&node, "/v1/grants/open", json!({"token": token})).await;
    assert_eq!(r.json(), json!({"valid": false, "reason": "grant_revoked"}));

    // Kill switch for the tenant, then emergency revoke of everything.
    let r = call(&node, "/v1/grants/revoke", json!({"tenant_id": "t1"})).await;
    assert_eq!(r.json(), json!({"revoked": 1}));
    let r =
        call(&node, "/v1/grants/consume", json!({"token": other, "operation": {"kind": "request"}})).await;
    assert_eq!(r.json()["reason"], "grant_revoked");
    assert_eq!(call(&node, "/v1/grants/revoke", json!({"all": true})).await.json(), json!({"revoked": 0}));
    let r = call(&node, "/v1/grants/revoke", json!({"all": true, "tenant_id": "t1"})).await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn a_grant_without_a_ledger_record_is_refused_when_the_ledger_is_required() {
    // A grant sealed by another node's secret copy but never registered here.
    let node = node().await;
    let secret = gatehouse_capability::Secret::new(GRANT_SECRET).unwrap();
    let claims = gatehouse_capability::GrantRequest {
        exec_id: "e".into(),
        tenant_id: Some("t".into()),
        user_id: "u".into(),
        ..Default::default()
    }
    .into_claims(
        "sk1_x".into(),
        NOW,
        gatehouse_capability::GrantLifetime { default_secs: 300, max_secs: 86_400 },
    )
    .unwrap();
    let token = gatehouse_capability::GrantSealer::new(&secret).mint(&claims).unwrap();
    let r =
        call(&node, "/v1/grants/consume", json!({"token": token, "operation": {"kind": "request"}})).await;
    assert_eq!(r.json()["reason"], "grant_unknown");
    let r = call(&node, "/v1/grants/open", json!({"token": token})).await;
    assert_eq!(r.json()["reason"], "grant_unknown");

    let lenient = node_with("all", &[(names::LEDGER_REQUIRED, "false")]).await;
    let r =
        call(&lenient, "/v1/grants/consume", json!({"token": token, "operation": {"kind": "request"}})).await;
    assert_eq!(r.json()["allowed"], true);
}

#[tokio::test]
async fn malformed_path_parameters_get_the_safe_shape() {
    let node = node().await;
    let r = send(&node.router, post("/v1/grants/%FF%FE/revoke", "{}")).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "bad_request");
    let r = send(&node.router, post("/v1/grants/a%20b/revoke", "{}")).await;
    assert_eq!(r.json()["error"]["code"], "bad_request");
    assert!(!r.text.contains("a b"));
}

#[tokio::test]
async fn a_record_read_that_could_not_wait_for_the_queue_says_so() {
    use std::io::{BufRead as _, Write as _};
    let node = node().await;
    let refusals = || async {
        let req = Request::get("/v1/refusals")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap();
        send(&node.router, req).await
    };
    let complete = |r: &Reply| r.headers["x-gatehouse-record-complete"].to_str().unwrap().to_owned();
    assert_eq!(complete(&refusals().await), "true");
    // Another process holds the store's write lock: the event writer waits.
    let mut lock = std::process::Command::new("sqlite3")
        .arg(node.data.path().join("gatehouse.db"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sqlite3 is installed");
    lock.stdin.as_mut().unwrap().write_all(b"BEGIN IMMEDIATE;\nSELECT 'locked';\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(lock.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    // A refused request: its refusal is queued for the store.
    let r = send(&node.router, Request::get("/v1/runs").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, 401);
    let short = refusals().await;
    assert_eq!(short.status, 200, "{}", short.text);
    assert_eq!(complete(&short), "false", "a read that did not wait for the queue said it was complete");
    // The lock goes; the refusal reaches the store and the read is whole.
    drop(lock.stdin.take());
    lock.wait().unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut whole = refusals().await;
    while complete(&whole) != "true" && tokio::time::Instant::now() < deadline {
        whole = refusals().await;
    }
    assert_eq!(complete(&whole), "true");
    assert!(
        whole.json()["items"].as_array().unwrap().iter().any(|i| i["reason"] == "service_token_missing"),
        "{}",
        whole.text
    );
}

#[tokio::test]
async fn readiness_reflects_the_ledger() {
    let node = node().await;
    let r = send(&node.router, Request::get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!((r.status, r.json()["status"].as_str()), (200, Some("ready")));
    // A Redis ledger nobody listens on: not ready, and why.
    let unreachable = node_with("all", &[(names::REDIS_URL, "redis://127.0.0.1:1/")]).await;
    let r = send(&unreachable.router, Request::get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["reason"], "ledger_unavailable");
}

/// A route's path with every placeholder filled with a valid id.
fn concrete(path: &str) -> String {
    path.split('/').map(|seg| if seg.starts_with('{') { "x-1" } else { seg }).collect::<Vec<_>>().join("/")
}

#[tokio::test]
async fn bodies_that_are_not_json_objects_are_refused_everywhere() {
    use gatehouse_server::openapi::{Body as Documented, ROUTES};
    let node = node().await;
    let mut checked = 0;
    for route in ROUTES.iter().filter(|r| matches!(r.body, Documented::Json(_))) {
        for body in
            ["[]", "[null, null]", "[null, null, null, null, null, null, null, null]", "\"x\"", "7", "null"]
        {
            let request = Request::builder()
                .method(route.method.to_uppercase().as_str())
                .uri(concrete(route.path))
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap();
            let r = send(&node.router, request).await;
            assert_eq!(r.status, 400, "{} {} with {body}: {}", route.method, route.path, r.text);
            assert_eq!(r.json()["error"]["code"], "bad_request", "{}", r.text);
            checked += 1;
        }
    }
    assert!(checked > 60);
    // Objects inside a body are objects too, never arrays read as structs.
    let nested = [
        ("/v1/runs", json!({"tenant_id": "t1", "user_id": "u1", "body": {}, "budgets": [null, null]})),
        ("/v1/grants/consume", json!({"token": "x", "operation": ["request"]})),
        (
            "/v1/tenants/t1/credentials",
            json!({"name": "n", "purpose": "git_provider", "host": "example.com", "inject": ["authorization", "Bearer {secret}"], "secret": "s"}),
        ),
    ];
    for (path, body) in nested {
        let r = call(&node, path, body).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
    }
}

#[tokio::test]
async fn a_whole_number_written_with_a_fraction_is_that_integer() {
    // JSON has one number type and JSON Schema's integer is any number
    // without a fractional part: 5.0 and 5e0 are the budget 5.
    let node = node().await;
    let grant = json!({"exec_id": "e1", "tenant_id": "t1", "user_id": "u1", "max_requests": 5.0, "max_egress_bytes": 1e3});
    let r = call(&node, "/v1/grants", grant).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let opened = call(&node, "/v1/grants/open", json!({"token": r.json()["token"]})).await;
    assert_eq!(opened.json()["claims"]["max_requests"], 5, "{}", opened.text);
    // A fraction stays a fraction, refused where an integer is wanted.
    let r = call(
        &node,
        "/v1/grants",
        json!({"exec_id": "e2", "tenant_id": "t1", "user_id": "u1", "max_requests": 5.5}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
}

#[tokio::test]
async fn openapi_states_the_constraints_the_server_enforces() {
    use gatehouse_server::openapi::{Body as Documented, ROUTES};
    let node = node().await;
    let doc = send(&node.router, Request::get("/openapi.json").body(Body::empty()).unwrap()).await.json();
    let operation = |method: &str, path: &str| doc["paths"][path][method].clone();
    // Ids in paths: the pattern the server checks.
    for route in ROUTES {
        for param in operation(route.method, route.path)["parameters"].as_array().into_iter().flatten() {
            if param["in"] == "path" && param["name"] != "name" {
                assert_eq!(
                    param["schema"]["pattern"], "^[A-Za-z0-9._:-]{1,128}$",
                    "{} {}",
                    route.method, route.path
                );
                assert_eq!(param["schema"]["not"], json!({"enum": [".", ".."]}));
            }
        }
    }
    // /metrics is Prometheus text, as served.
    let metrics = operation("get", "/metrics");
    assert!(metrics["responses"]["200"]["content"]["text/plain"].is_object(), "{metrics}");
    let served = send(&node.router, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert!(served.headers["content-type"].to_str().unwrap().starts_with("text/plain"));
    // A 201 is documented as a 201.
    assert!(operation("post", "/v1/runs")["responses"]["201"].is_object());
    // Every JSON body is a closed object, and the server refuses a field
    // it does not know on every one of them.
    for route in ROUTES.iter().filter(|r| matches!(r.body, Documented::Json(_))) {
        let schema =
            &operation(route.method, route.path)["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(schema["type"], "object", "{} {}", route.method, route.path);
        assert_eq!(schema["additionalProperties"], false, "{} {}", route.method, route.path);
        let request = Request::builder()
            .method(route.method.to_uppercase().as_str())
            .uri(concrete(route.path))
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Body::from(r#"{"x-unknown": 1}"#))
            .unwrap();
        let r = send(&node.router, request).await;
        assert_eq!(r.status, 400, "{} {}: {}", route.method, route.path, r.text);
    }
    // Enums and required fields, as the handlers check them.
    let end = operation("post", "/v1/runs/{run_id}/end");
    let end = &end["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(end["properties"]["outcome"]["enum"], json!(["succeeded", "failed"]));
    assert_eq!(end["required"], json!(["outcome"]));
    // Under strict tenant isolation (the default) a grant names its tenant.
    let grants = operation("post", "/v1/grants");
    let grants = &grants["requestBody"]["content"]["application/json"]["schema"];
    assert!(grants["required"].as_array().unwrap().contains(&json!("tenant_id")), "{grants}");
    let refusals = operation("get", "/v1/refusals");
    let limit =
        refusals["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "limit").unwrap().clone();
    assert_eq!(limit["schema"], json!({"type": "integer", "minimum": 1, "maximum": 500}));
}

/// The document is a contract users' clients are generated from: it changes
/// only on purpose. These files are the document as it stood before the
/// server was split into its faces and the plane (issue #28); a change to
/// the API that means to change the document updates them in the same
/// commit.
#[test]
fn the_openapi_document_is_byte_for_byte_the_recorded_one() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (strict, file) in [(false, "openapi.json"), (true, "openapi-strict-tenants.json")] {
        let now = serde_json::to_string(&gatehouse_server::openapi::document(strict)).unwrap();
        // A change made on purpose is recorded with GATEHOUSE_RECORD_OPENAPI=1
        // and reviewed in the diff.
        if std::env::var_os("GATEHOUSE_RECORD_OPENAPI").is_some() {
            std::fs::write(fixtures.join(file), &now).unwrap();
        }
        let recorded = std::fs::read_to_string(fixtures.join(file)).unwrap();
        assert!(
            now == recorded,
            "{file}: the OpenAPI document changed (record it: GATEHOUSE_RECORD_OPENAPI=1)"
        );
    }
}

#[tokio::test]
async fn openapi_documents_every_route_and_only_real_ones() {
    let node = node().await;
    let reply = send(&node.router, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    assert_eq!(reply.status, 200);
    let doc = reply.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    for route in gatehouse_server::openapi::ROUTES {
        assert!(paths[route.path][route.method].is_object(), "{} {}", route.method, route.path);
        // The router serves it: neither 404 nor 405, with the service token.
        let path = route
            .path
            .replace("{grant_id}", "g-1")
            .replace("{tenant_id}", "t-1")
            .replace("{run_id}", "run_x");
        let request = Request::builder()
            .method(route.method.to_uppercase().as_str())
            .uri(&path)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Body::from("{}"))
            .unwrap();
        let reply = send(&node.router, request).await;
        let status = reply.status;
        // A 404 about the resource (it carries a reason, such as run_unknown)
        // means the route exists; only the router's own 404 does not.
        let routed = status != 405 && (status != 404 || reply.json()["error"]["reason"].is_string());
        assert!(routed, "{} {path} answered {status}: {}", route.method, reply.text);
        if route.auth {
            let anonymous = Request::builder()
                .method(route.method.to_uppercase().as_str())
                .uri(&path)
                .body(Body::from("{}"))
                .unwrap();
            assert_eq!(send(&node.router, anonymous).await.status, 401, "{path} needs the token");
        }
    }
    // The other way round: every path the router was given, and every
    // method it answers there, is documented; nothing more, nothing less.
    let documented: std::collections::BTreeSet<(String, String)> =
        gatehouse_server::openapi::ROUTES.iter().map(|r| (r.method.to_owned(), r.path.to_owned())).collect();
    let mut served = std::collections::BTreeSet::new();
    for path in gatehouse_server::api::served_paths() {
        let concrete =
            path.replace("{grant_id}", "g-1").replace("{tenant_id}", "t-1").replace("{run_id}", "run_x");
        for method in ["get", "post", "put", "delete", "patch"] {
            let request = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(&concrete)
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .unwrap();
            if send(&node.router, request).await.status != 405 {
                served.insert((method.to_owned(), path.clone()));
            }
        }
    }
    assert_eq!(served, documented, "the router and the document disagree");
    // And nothing undocumented answers under /v1.
    let reply = send(
        &node.router,
        Request::get("/v1/undocumented")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, 404);
}

#[tokio::test]
async fn grants_that_could_never_be_used_or_outlive_the_cap_are_refused_before_registration() {
    let node = node().await;
    let base = json!({"exec_id": "e", "tenant_id": "t", "user_id": "u", "grant_id": "gr_cap"});
    let with = |extra: serde_json::Value| {
        let mut body = base.clone();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for extra in [
        json!({"exp": NOW - 1}),
        json!({"exp": i64::MAX}),
        json!({"exp": NOW + 86_401}),
        json!({"iat": NOW + 600, "exp": NOW + 900}),
        json!({"input_files": (0..3000).map(|i| format!("file_{i:06}")).collect::<Vec<_>>()}),
    ] {
        let r = call(&node, "/v1/grants", with(extra.clone())).await;
        assert_eq!(r.status, 400, "{extra}: {}", r.text);
    }
    // None of them was registered: the same id still registers once.
    let r = call(&node, "/v1/grants", base.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["exp"].as_i64().unwrap() <= NOW + 86_400);
}

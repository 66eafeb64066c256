//! The control plane in process: runs and their whole life, tenants'
//! durable settings, the kill switch, emergency revoke, the durable record.

use std::time::Duration;

use axum::body::Body;
use gatehouse_config::names;
use gatehouse_egress::proxy::PolicySource as _;
use gatehouse_egress::{AddressGuard, Purpose, decide};
use gatehouse_store::Store;
use http::Request;
use serde_json::{Value, json};

use crate::support::*;

fn execute_body() -> Value {
    json!({"code": "print(1)", "lang": "python"})
}

/// Creates a live run; returns the whole answer.
async fn create(node: &Node, tenant: &str, extra: Value) -> Value {
    let mut body = json!({"tenant_id": tenant, "user_id": "u1", "body": execute_body(),
        "input_files": ["f1"], "output_session_id": "out-1", "budgets": {"max_requests": 10, "max_egress_bytes": 5000}});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let r = call(node, "/v1/runs", body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()
}

async fn spend(node: &Node, grant: &Value) -> Value {
    call(node, "/v1/grants/consume", json!({"token": grant, "operation": {"kind": "request"}})).await.json()
}

#[tokio::test]
async fn a_run_starts_whole_and_ending_it_by_any_path_revokes_its_grant() {
    let node = node().await;
    let run = create(&node, "t1", json!({"claims": {"tenant_id": "t1"}})).await;
    let run_id = run["run_id"].as_str().unwrap();
    assert!(run_id.starts_with("run_"));
    assert_eq!(run["status"], "live");
    assert_eq!(run["expires_at"], NOW + 900);
    // The manifest is bound to the execute body and names the run.
    let verified =
        call(&node, "/v1/manifests/verify", json!({"token": run["manifest"], "body": execute_body()}))
            .await
            .json();
    assert_eq!(verified["valid"], true, "{verified}");
    assert_eq!(verified["claims"]["exec_id"], run_id);
    assert_eq!(verified["claims"]["input_files"], json!(["f1"]));
    assert_eq!(
        (verified["claims"]["max_requests"].as_u64(), verified["claims"]["output_session_id"].as_str()),
        (Some(10), Some("out-1"))
    );
    assert_eq!(verified["claims"]["exp"], run["expires_at"]);
    assert_eq!(verified["claims"]["execute_body_sha256"], run["execute_body_sha256"]);
    let other =
        call(&node, "/v1/manifests/verify", json!({"token": run["manifest"], "body": {"code": "x"}})).await;
    assert_eq!(other.json()["reason"], "manifest_body_mismatch");
    // The grant opens, is registered, and the sandbox is told how to use it.
    let grant = &run["grant"];
    assert_eq!(spend(&node, grant).await["allowed"], true);
    let proxy = run["proxy"]["env"]["HTTPS_PROXY"].as_str().unwrap();
    assert!(proxy.starts_with("http://grant:ceg1.") && proxy.ends_with("@127.0.0.1:0"), "{proxy}");
    assert_eq!(run["proxy"]["env"]["HTTP_PROXY"], proxy);

    let shown = get(&node, &format!("/v1/runs/{run_id}")).await.json();
    assert_eq!((shown["status"].as_str(), shown["tenant_id"].as_str()), (Some("live"), Some("t1")));
    assert_eq!(shown["ledger"]["request_count"], 1);
    assert_eq!(shown["ledger"]["budgets"]["max_requests"], 10);
    assert_eq!(shown["ledger"]["budgets"]["max_egress_bytes"], 5000);
    assert!(!shown.to_string().contains("ceg1."), "a run's record never shows its grant");

    node.clock.advance(30);
    let beat = call(&node, &format!("/v1/runs/{run_id}/heartbeat"), json!({})).await.json();
    assert_eq!((beat["status"].as_str(), beat["heartbeat_at"].as_i64()), (Some("live"), Some(NOW + 30)));

    let ended = call(&node, &format!("/v1/runs/{run_id}/end"), json!({"outcome": "succeeded"})).await.json();
    assert_eq!(ended["status"], "ended");
    assert_eq!(ended["revoked"], json!({"grants": 1, "leases": 0}));
    assert_eq!(spend(&node, grant).await["reason"], "grant_revoked");
    // Idempotent: ending or cancelling an ended run reports zeros.
    let again = call(&node, &format!("/v1/runs/{run_id}/end"), json!({"outcome": "failed"})).await.json();
    assert_eq!(
        (again["status"].as_str(), &again["revoked"]),
        (Some("ended"), &json!({"grants": 0, "leases": 0}))
    );
    let cancel = call(&node, &format!("/v1/runs/{run_id}/cancel"), json!({"actor": "ada"})).await.json();
    assert_eq!(cancel["revoked"]["grants"], 0);
    let late = call(&node, &format!("/v1/runs/{run_id}/heartbeat"), json!({})).await;
    assert_eq!((late.status, late.json()["error"]["reason"].as_str()), (409, Some("run_not_live")));

    let events = get(&node, &format!("/v1/runs/{run_id}/events")).await.json();
    let kinds: Vec<&str> =
        events["items"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["run_ended", "grant_refused"], "the end, then the refused spend after it");
    assert_eq!(events["items"][0]["reason"], "succeeded");

    // Cancel is another path to the same end.
    let second = create(&node, "t1", json!({})).await;
    let id = second["run_id"].as_str().unwrap();
    let cancelled = call(&node, &format!("/v1/runs/{id}/cancel"), json!({"actor": "ada"})).await.json();
    assert_eq!(
        (cancelled["status"].as_str(), cancelled["revoked"]["grants"].as_u64()),
        (Some("cancelled"), Some(1))
    );
    assert_eq!(spend(&node, &second["grant"]).await["reason"], "grant_revoked");
    let listed = get(&node, "/v1/runs?tenant_id=t1&status=cancelled").await.json();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert_eq!(listed["items"][0]["ended_by"], "service:ada");
    assert!(listed["next_cursor"].is_null());
}

#[tokio::test]
async fn no_token_or_secret_reaches_a_database_row() {
    let node = node().await;
    let run = create(&node, "t1", json!({})).await;
    let id = run["run_id"].as_str().unwrap();
    spend(&node, &run["grant"]).await;
    call(&node, &format!("/v1/runs/{id}/end"), json!({"outcome": "succeeded"})).await;
    call(&node, "/v1/grants/open", json!({"token": "ceg1.forged"})).await;
    get(&node, "/v1/refusals").await;
    // Every byte the store wrote: the database and its write-ahead log.
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(node.data.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().starts_with("gatehouse.db") {
            bytes.extend(std::fs::read(&path).unwrap());
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains(id), "the run is stored");
    let grant = run["grant"].as_str().unwrap();
    let manifest = run["manifest"].as_str().unwrap();
    for secret in [grant, &grant[5..40], manifest, TOKEN, GRANT_SECRET, "ceg1.forged"] {
        assert!(!text.contains(secret), "a database row holds {secret:.12}...");
    }
}

#[tokio::test]
async fn bad_run_requests_get_stable_codes_and_leave_nothing_behind() {
    let node = node().await;
    for (path, status, reason) in [
        ("/v1/runs/run_nope", 404, Some("run_unknown")),
        ("/v1/runs/..", 400, None),
        ("/v1/runs/a%20b", 400, None),
    ] {
        let r = get(&node, path).await;
        assert_eq!((r.status, r.json()["error"]["reason"].as_str()), (status, reason), "{path}: {}", r.text);
    }
    let r = call(&node, "/v1/runs/run_nope/heartbeat", json!({})).await;
    assert_eq!((r.status, r.json()["error"]["reason"].as_str()), (404, Some("run_unknown")));
    let base = json!({"tenant_id": "t1", "user_id": "u1", "body": execute_body()});
    for (change, why) in [
        (json!({"tenant_id": "a/b"}), "bad id"),
        (json!({"ttl_secs": 0}), "no lifetime"),
        (json!({"ttl_secs": 86_401}), "past the maximum lifetime"),
        (json!({"budgets": {"max_egress_bytes": 9_007_199_254_740_992_u64}}), "a budget past 2^53-1"),
        (json!({"claims": {"exec_id": "someone-else"}}), "claims contradicting the run"),
        (json!({"body": {"n": 9_007_199_254_740_993_u64}}), "a body that cannot be canonicalized"),
        (json!({"surprise": 1}), "an unknown field"),
    ] {
        let mut body = base.clone();
        body.as_object_mut().unwrap().extend(change.as_object().unwrap().clone());
        let r = call(&node, "/v1/runs", body).await;
        assert_eq!(r.status, 400, "{why}: {}", r.text);
    }
    let r = call(&node, "/v1/runs/run_x/end", json!({"outcome": "maybe"})).await;
    assert_eq!(r.status, 400);
    let runs = get(&node, "/v1/runs").await.json();
    assert_eq!(runs["items"], json!([]), "no failed request left a run");
}

#[tokio::test]
async fn the_kill_switch_kills_a_tenants_runs_and_refuses_new_ones_until_released() {
    let node = node().await;
    let (a, b, other) = (
        create(&node, "t1", json!({})).await,
        create(&node, "t1", json!({})).await,
        create(&node, "t2", json!({})).await,
    );
    // A grant minted outside any run is the tenant's too.
    let loose =
        call(&node, "/v1/grants", json!({"exec_id": "e9", "tenant_id": "t1", "user_id": "u1"})).await.json();

    let r = call(&node, "/v1/tenants/t1/kill-switch", json!({"engaged": true, "reason": "incident 42"}))
        .await
        .json();
    assert_eq!(r["engaged"], true);
    assert_eq!(r["revoked"]["runs"], 2);
    assert_eq!(r["revoked"]["grants"], 3, "both runs' grants and the loose one");
    for grant in [&a["grant"], &b["grant"], &loose["token"]] {
        assert_eq!(spend(&node, grant).await["reason"], "grant_revoked");
    }
    assert_eq!(spend(&node, &other["grant"]).await["allowed"], true, "another tenant is untouched");
    let shown = get(&node, &format!("/v1/runs/{}", a["run_id"].as_str().unwrap())).await.json();
    assert_eq!(
        (shown["status"].as_str(), shown["end_reason"].as_str()),
        (Some("killed"), Some("kill_switch"))
    );

    let refused = call(&node, "/v1/runs", json!({"tenant_id": "t1", "user_id": "u1", "body": {}})).await;
    assert_eq!(
        (refused.status, refused.json()["error"]["reason"].as_str()),
        (403, Some("tenant_kill_switch"))
    );
    let recorded = get(&node, "/v1/refusals?tenant_id=t1&reason=tenant_kill_switch").await.json();
    assert_eq!(recorded["items"].as_array().unwrap().len(), 1);

    let released = call(&node, "/v1/tenants/t1/kill-switch", json!({"engaged": false})).await.json();
    assert_eq!(released["engaged"], false);
    let fresh = create(&node, "t1", json!({})).await;
    assert_eq!(spend(&node, &fresh["grant"]).await["allowed"], true, "a run after release is live");

    let all = call(&node, "/v1/emergency-revoke", json!({"reason": "breach"})).await.json();
    assert_eq!(all["revoked"]["runs"], 2, "the fresh run and t2's");
    for grant in [&fresh["grant"], &other["grant"]] {
        assert_eq!(spend(&node, grant).await["reason"], "grant_revoked");
    }
    assert_eq!(get(&node, "/v1/runs?status=live").await.json()["items"], json!([]));
    let after = create(&node, "t2", json!({})).await;
    assert_eq!(
        spend(&node, &after["grant"]).await["allowed"],
        true,
        "emergency revoke is not a standing switch"
    );

    let audit = get(&node, "/v1/audit").await.json();
    let actions: Vec<&str> =
        audit["items"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for wanted in
        ["run.create", "kill_switch.engage", "run.killed", "kill_switch.release", "emergency_revoke"]
    {
        assert!(actions.contains(&wanted), "{wanted} missing from {actions:?}");
    }
}

#[tokio::test]
async fn a_run_whose_heartbeat_is_lost_expires_and_its_grant_dies() {
    let node = node_with("all", &[(names::RUN_HEARTBEAT_TIMEOUT_SECS, "60")]).await;
    let run = create(&node, "t1", json!({})).await;
    let id = run["run_id"].as_str().unwrap();
    node.clock.advance(61);
    let mut status = Value::Null;
    for _ in 0..50 {
        status = get(&node, &format!("/v1/runs/{id}")).await.json();
        if status["status"] == "expired" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (status["status"].as_str(), status["end_reason"].as_str()),
        (Some("expired"), Some("heartbeat_lost"))
    );
    // Expiry records the status first, then revokes the grant and writes
    // the run_ended event: wait for each, within a deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut spent = spend(&node, &run["grant"]).await;
    while spent["reason"] != "grant_revoked" && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        spent = spend(&node, &run["grant"]).await;
    }
    assert_eq!(spent["reason"], "grant_revoked", "{spent}");
    let mut events = get(&node, &format!("/v1/runs/{id}/events")).await.json();
    while events["items"][0]["reason"] != "heartbeat_lost" && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        events = get(&node, &format!("/v1/runs/{id}/events")).await.json();
    }
    assert_eq!(events["items"][0]["reason"], "heartbeat_lost", "{events}");
}

/// The door's decision for `url` under the node's replica of `tenant`'s policy.
fn decision(node: &Node, tenant: &str, url: &str) -> Option<String> {
    let policy = node.state.plane.policies.policy(Some(tenant));
    let guard = AddressGuard::new(vec![]);
    let now = node.state.plane.clock.now();
    let d = decide(url, policy.as_deref(), &guard, Purpose::Request, now, |_| {
        Ok(vec!["93.184.215.14".parse().unwrap()])
    });
    d.refusal().map(|r| r.as_str().to_owned())
}

#[tokio::test]
async fn policies_are_versioned_durable_and_never_reopen_after_a_restart() {
    let node = node().await;
    let data_dir = node.data.path().to_str().unwrap().to_owned();
    let empty = get(&node, "/v1/tenants/t1/egress-policy").await.json();
    assert_eq!((empty["version"].as_i64(), empty["policy"]["mode"].as_str()), (Some(0), Some("open")));
    let first =
        put(&node, "/v1/tenants/t1/egress-policy", json!({"mode": "allowlist", "allow": ["a.example"]}))
            .await;
    assert_eq!(first.json()["version"], 1, "{}", first.text);
    let second =
        put(&node, "/v1/tenants/t1/egress-policy", json!({"mode": "allowlist", "allow": ["b.example"]}))
            .await;
    assert_eq!(second.json()["version"], 2);
    let bad =
        put(&node, "/v1/tenants/t1/egress-policy", json!({"mode": "allowlist", "allow": ["no spaces"]}))
            .await;
    assert_eq!((bad.status, bad.json()["error"]["reason"].as_str()), (400, Some("policy_unreadable")));
    let current = get(&node, "/v1/tenants/t1/egress-policy").await.json();
    assert_eq!((current["version"].as_i64(), current["actor"].as_str()), (Some(2), Some("service")));
    assert_eq!(current["policy"]["allow"], json!(["b.example"]));
    // This node's door follows at once.
    assert_eq!(decision(&node, "t1", "https://a.example/").as_deref(), Some("policy_not_allowed"));
    assert_eq!(decision(&node, "t1", "https://b.example/"), None);
    let gate = put(&node, "/v1/tenants/t1/dependency-gate", json!({"mode": "critical"})).await;
    assert_eq!(gate.status, 200, "{}", gate.text);
    let Node { data: _kept, .. } = node;

    // A new process on the same data directory: nothing is lost, nothing reopens.
    let restarted = node_with("all", &[(names::DATA_DIR, &data_dir)]).await;
    assert_eq!(get(&restarted, "/v1/tenants/t1/egress-policy").await.json()["version"], 2);
    assert_eq!(decision(&restarted, "t1", "https://a.example/").as_deref(), Some("policy_not_allowed"));
    assert_eq!(get(&restarted, "/v1/tenants/t1/dependency-gate").await.json()["mode"], "critical");
    let audit = get(&restarted, "/v1/audit").await.json();
    assert_eq!(audit["items"].as_array().unwrap().len(), 3, "two policies and the gate, not the refused one");
}

#[tokio::test]
async fn a_stored_policy_that_does_not_read_refuses_every_request_of_its_tenant() {
    let node = node().await;
    put(&node, "/v1/tenants/t1/egress-policy", json!({"mode": "open"})).await;
    // Someone edits the row by hand: the door must refuse, not fall back to open.
    let url = format!("sqlite://{}", node.data.path().join("gatehouse.db").display());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query(
        "UPDATE policy_versions SET document = '{\"mode\": \"allowlist\", \"allow\": [\"bad entry\"]}'",
    )
    .execute(&raw)
    .await
    .unwrap();
    // Any later change to the tenant makes every node reload it.
    sqlx::query("UPDATE control SET settings_version = settings_version + 1").execute(&raw).await.unwrap();
    sqlx::query("UPDATE tenants SET settings_version = (SELECT settings_version FROM control)")
        .execute(&raw)
        .await
        .unwrap();
    let store: &Store = node.state.plane.store.as_ref().unwrap();
    node.state.plane.policies.refresh(store).await.unwrap();
    assert_eq!(decision(&node, "t1", "https://a.example/").as_deref(), Some("policy_unreadable"));
    assert_eq!(decision(&node, "t2", "https://a.example/"), None, "other tenants are not affected");
}

#[tokio::test]
async fn a_missing_current_policy_row_refuses_and_never_reads_as_open() {
    let node = node().await;
    let data_dir = node.data.path().to_str().unwrap().to_owned();
    put(&node, "/v1/tenants/t1/egress-policy", json!({"mode": "allowlist", "allow": ["a.example"]})).await;
    assert_eq!(decision(&node, "t1", "https://b.example/").as_deref(), Some("policy_not_allowed"));
    // Someone deletes the current row by hand; any later change to the tenant makes every node reload it.
    let url = format!("sqlite://{}", node.data.path().join("gatehouse.db").display());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM policy_versions WHERE tenant_id = 't1'").execute(&raw).await.unwrap();
    sqlx::query("UPDATE control SET settings_version = settings_version + 1").execute(&raw).await.unwrap();
    sqlx::query("UPDATE tenants SET settings_version = (SELECT settings_version FROM control)")
        .execute(&raw)
        .await
        .unwrap();
    let store: &Store = node.state.plane.store.as_ref().unwrap();
    node.state.plane.policies.refresh(store).await.unwrap();
    assert_eq!(decision(&node, "t1", "https://b.example/").as_deref(), Some("policy_unreadable"));
    let read = get(&node, "/v1/tenants/t1/egress-policy").await;
    assert_eq!(read.json()["error"]["reason"], "policy_unreadable", "{}", read.text);
    // A tenant that never set a policy keeps the documented default, open.
    assert_eq!(decision(&node, "t2", "https://b.example/"), None);
    assert_eq!(get(&node, "/v1/tenants/t2/egress-policy").await.json()["policy"]["mode"], "open");
    let Node { data: _kept, .. } = node;
    // A node starting on it refuses too.
    let restarted = node_with("all", &[(names::DATA_DIR, &data_dir)]).await;
    assert_eq!(decision(&restarted, "t1", "https://b.example/").as_deref(), Some("policy_unreadable"));
}

#[tokio::test]
async fn refusals_are_durable_paged_and_filtered() {
    let node = node().await;
    for _ in 0..7 {
        call(&node, "/v1/grants/open", json!({"token": "ceg1.nope"})).await;
    }
    let page = get(&node, "/v1/refusals?limit=5").await.json();
    assert_eq!(page["items"].as_array().unwrap().len(), 5);
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest = get(&node, &format!("/v1/refusals?limit=5&cursor={cursor}")).await.json();
    assert_eq!(rest["items"].as_array().unwrap().len(), 2);
    assert!(rest["next_cursor"].is_null());
    let reason = page["items"][0]["reason"].as_str().unwrap();
    let filtered = get(&node, &format!("/v1/refusals?kind=grant_refused&reason={reason}")).await.json();
    assert_eq!(filtered["items"].as_array().unwrap().len(), 7, "{filtered}");
    for bad in
        ["/v1/refusals?limit=0", "/v1/refusals?limit=501", "/v1/refusals?reason=nope", "/v1/refusals?page=2"]
    {
        assert_eq!(get(&node, bad).await.status, 400, "{bad}");
    }
}

async fn as_caller(node: &Node, token: &str, path: &str, body: Value) -> Reply {
    let req = Request::post(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(&node.router, req).await
}

#[tokio::test]
async fn named_callers_can_do_what_their_scopes_say_and_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let (runner, worker, gateway) = (
        "runner-token-0123456789abcdefghijklmnopqrstuvwxyz",
        "worker-token-0123456789abcdefghijklmnopqrstuvwxyz",
        "gateway-token-0123456789abcdefghijklmnopqrstuvwxyz",
    );
    let digest = gatehouse_capability::CallerToken::digest_hex;
    let file = dir.path().join("callers.toml");
    std::fs::write(
        &file,
        format!(
            "[[caller]]\nname = \"runner\"\nscopes = [\"manifests:verify\"]\ntoken_sha256 = \"{}\"\n\n\
             [[caller]]\nname = \"worker\"\nscopes = [\"runs\", \"manifests:sign\", \"grants\", \"admin\"]\ntoken_sha256 = \"{}\"\n\n\
             [[caller]]\nname = \"gateway\"\nscopes = [\"ledger\", \"egress\"]\ntoken_sha256 = \"{}\"\n",
            digest(runner),
            digest(worker),
            digest(gateway)
        ),
    )
    .unwrap();
    assert!(!std::fs::read_to_string(&file).unwrap().contains(runner), "the file holds digests only");
    let node = node_with("all", &[(names::CALLERS_FILE, file.to_str().unwrap())]).await;

    let run = as_caller(
        &node,
        worker,
        "/v1/runs",
        json!({"tenant_id": "t1", "user_id": "u1", "body": execute_body()}),
    )
    .await;
    assert_eq!(run.status, 201, "{}", run.text);
    let run = run.json();
    let verify = json!({"token": run["manifest"], "body": execute_body()});
    assert_eq!(as_caller(&node, runner, "/v1/manifests/verify", verify).await.json()["valid"], true);

    // A compromised runner can verify, and nothing else.
    let sign = json!({"claims": {"exec_id": "e", "tenant_id": "t1", "user_id": "u1"}, "body": {}});
    let grant = json!({"exec_id": "e", "tenant_id": "t1", "user_id": "u1"});
    for (path, body) in [
        ("/v1/manifests/sign", sign.clone()),
        ("/v1/grants", grant.clone()),
        ("/v1/runs", json!({"tenant_id": "t1", "user_id": "u1", "body": {}})),
        ("/v1/emergency-revoke", json!({})),
        ("/v1/grants/consume", json!({"token": run["grant"], "operation": {"kind": "request"}})),
    ] {
        let r = as_caller(&node, runner, path, body).await;
        assert_eq!((r.status, r.json()["error"]["reason"].as_str()), (403, Some("scope_missing")), "{path}");
    }
    // The gateway spends but does not mint.
    let spent = as_caller(
        &node,
        gateway,
        "/v1/grants/consume",
        json!({"token": run["grant"], "operation": {"kind": "request"}}),
    )
    .await;
    assert_eq!(spent.json()["allowed"], true, "{}", spent.text);
    assert_eq!(as_caller(&node, gateway, "/v1/grants", grant).await.status, 403);
    assert_eq!(as_caller(&node, gateway, "/v1/manifests/sign", sign).await.status, 403);
    // Unknown tokens are 401; the service token keeps every scope.
    assert_eq!(as_caller(&node, &format!("{runner}x"), "/v1/manifests/verify", json!({})).await.status, 401);
    assert_eq!(
        as_caller(&node, TOKEN, "/v1/tenants/t1/kill-switch", json!({"engaged": false})).await.status,
        200
    );
    // The audit log names who did what.
    let audit = get(&node, "/v1/audit").await.json();
    assert_eq!(audit["items"][0]["actor"], "worker");
    let refusals = get(&node, "/v1/refusals?reason=scope_missing").await.json();
    assert_eq!(refusals["items"].as_array().unwrap().len(), 7);
}

/// Cancel, the kill switch and emergency revoke each report the leases
/// they revoked, and the lease is revoked after them.
#[tokio::test]
async fn every_way_a_run_stops_reports_the_leases_it_revoked() {
    let node = node().await;
    let credential = call(
        &node,
        "/v1/tenants/t1/credentials",
        json!({"name": "gh", "purpose": "git_provider", "host": "api.example",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true, "secret": "s3cret-value-123"}),
    )
    .await;
    assert_eq!(credential.status, 201, "{}", credential.text);
    let credential_id = credential.json()["credential_id"].as_str().unwrap().to_owned();
    let leased_run = || async {
        let run = create(&node, "t1", json!({})).await;
        let run_id = run["run_id"].as_str().unwrap().to_owned();
        let lease = call(
            &node,
            &format!("/v1/runs/{run_id}/leases"),
            json!({"credential_id": credential_id, "purpose": "git_provider", "host": "api.example"}),
        )
        .await;
        assert_eq!(lease.status, 201, "{}", lease.text);
        (run_id, lease.json()["lease_id"].as_str().unwrap().to_owned())
    };
    let lease_status = |lease_id: String| {
        let node = &node;
        async move {
            let listed = get(node, "/v1/leases?tenant_id=t1&limit=500").await.json();
            let items = listed["items"].as_array().unwrap().clone();
            items.into_iter().find(|l| l["lease_id"] == lease_id.as_str()).unwrap()["status"].clone()
        }
    };

    let (run_id, lease_id) = leased_run().await;
    let cancelled = call(&node, &format!("/v1/runs/{run_id}/cancel"), json!({})).await.json();
    assert_eq!(cancelled["revoked"], json!({"grants": 1, "leases": 1}), "{cancelled}");
    assert_eq!(lease_status(lease_id).await, "revoked");

    let (_, lease_id) = leased_run().await;
    let killed = call(&node, "/v1/tenants/t1/kill-switch", json!({"engaged": true})).await.json();
    assert_eq!(killed["revoked"]["leases"], 1, "{killed}");
    assert_eq!(lease_status(lease_id).await, "revoked");
    call(&node, "/v1/tenants/t1/kill-switch", json!({"engaged": false})).await;

    let (_, lease_id) = leased_run().await;
    let everything = call(&node, "/v1/emergency-revoke", json!({})).await.json();
    assert_eq!(everything["revoked"]["runs"], 1, "{everything}");
    assert_eq!(everything["revoked"]["leases"], 1, "{everything}");
    assert_eq!(lease_status(lease_id).await, "revoked");
}

/// A lease lives two minutes unless a heartbeat renews it: past them, with
/// its run still live, the door refuses to inject (`lease_expired`, not
/// retryable) and records a `secret_refused` event in the run.
#[tokio::test]
async fn an_unrenewed_lease_expires_at_the_door_while_its_run_lives_on() {
    let upstream = crate::leases::Echo::start("127.0.0.1", 0);
    let port = upstream.port;
    let node = node_with(
        "all",
        &[(names::EGRESS_ALLOW_RANGES, "127.0.0.0/8"), (names::RUN_HEARTBEAT_TIMEOUT_SECS, "600")],
    )
    .await;
    let credential = call(
        &node,
        "/v1/tenants/t1/credentials",
        json!({"name": "gh", "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true, "secret": "s3cret-value-123"}),
    )
    .await
    .json();
    let run = create(&node, "t1", json!({})).await;
    let run_id = run["run_id"].as_str().unwrap();
    let lease = call(
        &node,
        &format!("/v1/runs/{run_id}/leases"),
        json!({"credential_id": credential["credential_id"], "purpose": "git_provider", "host": "127.0.0.1"}),
    )
    .await
    .json();
    let fetch = || {
        call(
            &node,
            "/v1/egress/fetch",
            json!({"grant": run["grant"], "method": "GET", "url": format!("http://127.0.0.1:{port}/"), "purpose": "git_provider"}),
        )
    };
    let first = fetch().await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert!(upstream.last().contains("authorization: Bearer s3cret-value-123"), "{}", upstream.last());

    node.clock.advance(121);
    let expired = fetch().await;
    assert_eq!(expired.status, 403, "{}", expired.text);
    assert_eq!(expired.json()["error"]["reason"], "lease_expired");
    assert_eq!(expired.json()["error"]["retryable"], false);
    assert_eq!(upstream.count(), 1, "nothing reached the upstream without its credential");
    assert_eq!(get(&node, &format!("/v1/runs/{run_id}")).await.json()["status"], "live");
    let events = get(&node, &format!("/v1/runs/{run_id}/events")).await.json();
    let refused =
        events["items"].as_array().unwrap().iter().find(|e| e["reason"] == "lease_expired").cloned();
    let refused = refused.unwrap_or_else(|| panic!("{events}"));
    assert_eq!(
        (refused["kind"].as_str(), refused["lease_id"].as_str()),
        (Some("secret_refused"), lease["lease_id"].as_str())
    );
}

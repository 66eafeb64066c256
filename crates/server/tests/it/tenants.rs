//! Callers bound to tenants (`tenants = [...]` in the caller file): every
//! route's tenant rule, stated once and probed; what a bound caller may
//! not reach; lists narrowed to its tenants; global operations kept for an
//! unbound caller with scope `admin`; and the kill switch on grants.

use axum::body::Body;
use gatehouse_config::names;
use gatehouse_server::http::tenancy::{TenantRule, tenant_rule};
use http::Request;
use serde_json::{Value, json};

use crate::support::{Node, Reply, TOKEN, call, get, node_with, send};

/// Bound to `t1`, with every scope.
const BOUND: &str = "bound-token-0123456789abcdefghijklmnopqrstuvwxyz";
/// Bound to `t1` and `t3`, with the scopes a worker has.
const BOUND_TWO: &str = "bound-two-token-0123456789abcdefghijklmnopqrstuvwxyz";
/// Unbound, without `admin`.
const GRANTS_ONLY: &str = "grants-only-token-0123456789abcdefghijklmnopqrstuvwxyz";

const EVERY_SCOPE: &str = "[\"runs\", \"manifests:sign\", \"manifests:verify\", \"grants\", \"ledger\", \
     \"egress\", \"policies\", \"credentials\", \"admin\"]";

/// A node whose caller file holds the three callers above.
async fn tenants_node() -> (Node, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let digest = gatehouse_capability::CallerToken::digest_hex;
    let file = dir.path().join("callers.toml");
    std::fs::write(
        &file,
        format!(
            "[[caller]]\nname = \"platform-b\"\nscopes = {EVERY_SCOPE}\ntenants = [\"t1\"]\ntoken_sha256 = \"{}\"\n\n\
             [[caller]]\nname = \"platform-c\"\nscopes = [\"runs\", \"grants\", \"credentials\", \"admin\"]\n\
             tenants = [\"t1\", \"t3\"]\ntoken_sha256 = \"{}\"\n\n\
             [[caller]]\nname = \"revoker\"\nscopes = [\"grants\"]\ntoken_sha256 = \"{}\"\n",
            digest(BOUND),
            digest(BOUND_TWO),
            digest(GRANTS_ONLY),
        ),
    )
    .unwrap();
    let node = node_with("all", &[(names::CALLERS_FILE, file.to_str().unwrap())]).await;
    (node, dir)
}

async fn request(node: &Node, token: &str, method: &str, uri: &str, body: &str) -> Reply {
    let req = Request::builder()
        .method(method.to_uppercase().as_str())
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    send(&node.router, req).await
}

fn reason(reply: &Reply) -> Option<String> {
    serde_json::from_str::<Value>(&reply.text)
        .ok()
        .and_then(|v| v["error"]["reason"].as_str().map(str::to_owned))
}

fn refused_for_tenant(reply: &Reply) -> bool {
    reply.status == 403 && reason(reply).as_deref() == Some("tenant_not_allowed")
}

/// Content the scanner refuses (not text).
const BINARY: &str = "\u{0}\u{1}\u{2}\u{3} not text";

/// One tenant's things: a live run (its grant, manifest), a credential, a
/// lease of the run on it, an input file.
struct Things {
    tenant: String,
    run_id: String,
    grant: String,
    grant_id: String,
    manifest: String,
    credential_id: String,
    lease_id: String,
    file_id: String,
    proposal_id: String,
}

/// Credential names, distinct within a tenant.
static NAMES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn things(node: &Node, tenant: &str) -> Things {
    let run = call(node, "/v1/runs", json!({"tenant_id": tenant, "user_id": "u1", "body": {}})).await;
    assert_eq!(run.status, 201, "{}", run.text);
    let run = run.json();
    let credential = call(
        node,
        &format!("/v1/tenants/{tenant}/credentials"),
        json!({"name": format!("gh-{}", NAMES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
            "purpose": "git_provider", "host": "api.example",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "secret": "s3cret-value-123"}),
    )
    .await;
    assert_eq!(credential.status, 201, "{}", credential.text);
    let credential_id = credential.json()["credential_id"].as_str().unwrap().to_owned();
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    let lease = call(
        node,
        &format!("/v1/runs/{run_id}/leases"),
        json!({"credential_id": credential_id, "purpose": "git_provider", "host": "api.example"}),
    )
    .await;
    assert_eq!(lease.status, 201, "{}", lease.text);
    let file = request(
        node,
        TOKEN,
        "post",
        &format!("/v1/files?tenant_id={tenant}&user_id=u1&resource=r1&name=brief.txt"),
        "plain text",
    )
    .await;
    assert_eq!(file.status, 201, "{}", file.text);
    let proposal = call(
        node,
        &format!("/v1/runs/{run_id}/egress-proposals"),
        json!({"host": "api.example.com", "methods": ["GET"], "why": "to read the docs"}),
    )
    .await;
    assert_eq!(proposal.status, 201, "{}", proposal.text);
    Things {
        tenant: tenant.to_owned(),
        run_id,
        grant: run["grant"].as_str().unwrap().to_owned(),
        grant_id: run["grant_id"].as_str().unwrap().to_owned(),
        manifest: run["manifest"].as_str().unwrap().to_owned(),
        credential_id,
        lease_id: lease.json()["lease_id"].as_str().unwrap().to_owned(),
        file_id: file.json()["file_id"].as_str().unwrap().to_owned(),
        proposal_id: proposal.json()["proposal_id"].as_str().unwrap().to_owned(),
    }
}

impl Things {
    /// `text` with this tenant's things in place of their placeholders.
    fn fill(&self, text: &str) -> String {
        text.replace("{tenant_id}", &self.tenant)
            .replace("{run_id}", &self.run_id)
            .replace("{grant_id}", &self.grant_id)
            .replace("{grant}", &self.grant)
            .replace("{manifest}", &self.manifest)
            .replace("{credential_id}", &self.credential_id)
            .replace("{lease_id}", &self.lease_id)
            .replace("{file_id}", &self.file_id)
            .replace("{proposal_id}", &self.proposal_id)
            .replace("{session_id}", "out-1")
            .replace("{name}", "brief.txt")
    }
}

/// Every route with its tenant rule, and a request to probe it with: its
/// query string and body, filled in with one tenant's things. A route added
/// to the router without a line here fails the test below.
const RULES: &[(&str, &str, TenantRule, &str, &str)] = &[
    ("get", "/healthz", TenantRule::Public, "", ""),
    ("get", "/readyz", TenantRule::Public, "", ""),
    ("get", "/metrics", TenantRule::Public, "", ""),
    ("get", "/openapi.json", TenantRule::Public, "", ""),
    (
        "post",
        "/v1/manifests/sign",
        TenantRule::Named,
        "",
        r#"{"claims": {"exec_id": "e1", "tenant_id": "{tenant_id}", "user_id": "u1"}, "body": {}}"#,
    ),
    ("post", "/v1/manifests/verify", TenantRule::Named, "", r#"{"token": "{manifest}", "body": {}}"#),
    (
        "post",
        "/v1/grants",
        TenantRule::Named,
        "",
        r#"{"exec_id": "e-{tenant_id}", "tenant_id": "{tenant_id}", "user_id": "u1"}"#,
    ),
    ("post", "/v1/grants/open", TenantRule::Named, "", r#"{"token": "{grant}"}"#),
    (
        "post",
        "/v1/grants/consume",
        TenantRule::Named,
        "",
        r#"{"token": "{grant}", "operation": {"kind": "request"}}"#,
    ),
    ("post", "/v1/grants/revoke", TenantRule::Named, "", r#"{"exec_id": "{run_id}"}"#),
    ("post", "/v1/grants/{grant_id}/revoke", TenantRule::Grant, "", "{}"),
    ("get", "/v1/refusals", TenantRule::Narrowed, "?tenant_id={tenant_id}", ""),
    ("put", "/v1/tenants/{tenant_id}/egress-policy", TenantRule::Path, "", r#"{"mode": "open"}"#),
    ("get", "/v1/tenants/{tenant_id}/egress-policy", TenantRule::Path, "", ""),
    ("put", "/v1/tenants/{tenant_id}/mcp-servers", TenantRule::Path, "", r#"{"servers": []}"#),
    ("get", "/v1/tenants/{tenant_id}/mcp-servers", TenantRule::Path, "", ""),
    ("put", "/v1/tenants/{tenant_id}/dependency-gate", TenantRule::Path, "", r#"{"mode": "high"}"#),
    ("get", "/v1/tenants/{tenant_id}/dependency-gate", TenantRule::Path, "", ""),
    ("post", "/v1/tenants/{tenant_id}/dependency-scans", TenantRule::Path, "", "{}"),
    ("get", "/v1/tenants/{tenant_id}/dependency-scans", TenantRule::Path, "", ""),
    ("get", "/v1/tenants/{tenant_id}/dependency-scans/{scan_id}", TenantRule::Path, "", ""),
    ("post", "/v1/tenants/{tenant_id}/gate-checks", TenantRule::Path, "", "{}"),
    ("post", "/v1/tenants/{tenant_id}/kill-switch", TenantRule::Path, "", r#"{"engaged": false}"#),
    ("post", "/v1/emergency-revoke", TenantRule::Global, "", "{}"),
    (
        "post",
        "/v1/runs",
        TenantRule::Named,
        "",
        r#"{"tenant_id": "{tenant_id}", "user_id": "u1", "body": {}}"#,
    ),
    ("get", "/v1/runs", TenantRule::Narrowed, "?tenant_id={tenant_id}", ""),
    ("get", "/v1/runs/{run_id}", TenantRule::Run, "", ""),
    ("post", "/v1/runs/{run_id}/heartbeat", TenantRule::Run, "", ""),
    ("get", "/v1/runs/{run_id}/events", TenantRule::Run, "", ""),
    ("get", "/v1/runs/{run_id}/artifacts", TenantRule::Run, "", ""),
    (
        "post",
        "/v1/runs/{run_id}/leases",
        TenantRule::Run,
        "",
        r#"{"credential_id": "{credential_id}", "purpose": "git_provider", "host": "api.example"}"#,
    ),
    ("post", "/v1/tenants/{tenant_id}/credentials", TenantRule::Path, "", "{}"),
    ("get", "/v1/tenants/{tenant_id}/credentials", TenantRule::Path, "", ""),
    ("get", "/v1/tenants/{tenant_id}/credentials/{credential_id}", TenantRule::Path, "", ""),
    (
        "post",
        "/v1/tenants/{tenant_id}/credentials/{credential_id}/fetch",
        TenantRule::Path,
        "",
        r#"{"actor": "person:ada", "url": "https://api.example/"}"#,
    ),
    (
        "put",
        "/v1/tenants/{tenant_id}/credentials/{credential_id}/secret",
        TenantRule::Path,
        "",
        r#"{"secret": "n3w-s3cret-value"}"#,
    ),
    ("get", "/v1/leases", TenantRule::Narrowed, "?tenant_id={tenant_id}", ""),
    ("post", "/v1/leases/{lease_id}/revoke", TenantRule::Lease, "", ""),
    // A bound caller reads its tenants' entries (and its own actions);
    // the whole log needs an unbound admin (see the narrowing test).
    ("get", "/v1/audit", TenantRule::Narrowed, "", ""),
    (
        "post",
        "/v1/egress/fetch",
        TenantRule::CarriedGrant,
        "",
        r#"{"grant": "{grant}", "url": "http://localhost/", "purpose": "runtime"}"#,
    ),
    ("post", "/v1/egress/fetch/raw", TenantRule::CarriedGrant, "?url=http://localhost/&purpose=runtime", ""),
    (
        "post",
        "/v1/files",
        TenantRule::Named,
        "?tenant_id={tenant_id}&user_id=u1&resource=r1&name=more.txt",
        "more text",
    ),
    ("get", "/v1/tenants/{tenant_id}/files/{file_id}", TenantRule::Path, "", ""),
    ("get", "/v1/files/{file_id}", TenantRule::BearerGrant, "", ""),
    ("get", "/v1/sessions/{session_id}/files", TenantRule::BearerGrant, "", ""),
    ("get", "/v1/sessions/{session_id}/files/{name}", TenantRule::BearerGrant, "", ""),
    ("put", "/v1/sessions/{session_id}/files/{name}", TenantRule::BearerGrant, "", "text"),
    ("post", "/v1/content/scan", TenantRule::Named, "?tenant_id={tenant_id}&run_id={run_id}", "text"),
    ("get", "/v1/content/scanner", TenantRule::None, "", ""),
    ("get", "/v1/egress-presets", TenantRule::None, "", ""),
    ("get", "/v1/tenants/{tenant_id}/egress-proposals", TenantRule::Path, "", ""),
    (
        "post",
        "/v1/runs/{run_id}/egress-proposals",
        TenantRule::Run,
        "",
        r#"{"host": "api.example.com", "why": "to read the docs"}"#,
    ),
    ("get", "/v1/egress-proposals/{proposal_id}", TenantRule::Named, "", ""),
    (
        "post",
        "/v1/egress-proposals/{proposal_id}/decide",
        TenantRule::Named,
        "",
        r#"{"decision": "deny", "actor": "person:ada"}"#,
    ),
    // Last: they end, delete or revoke what the probes above use.
    ("post", "/v1/runs/{run_id}/end", TenantRule::Run, "", r#"{"outcome": "succeeded"}"#),
    ("post", "/v1/runs/{run_id}/cancel", TenantRule::Run, "", "{}"),
    ("delete", "/v1/tenants/{tenant_id}/files/{file_id}", TenantRule::Path, "", ""),
    ("delete", "/v1/tenants/{tenant_id}/credentials/{credential_id}", TenantRule::Path, "", ""),
];

/// The one table of every route's tenant rule: it lists exactly the routes
/// the API serves (a new route without a rule fails here), the server
/// applies the rule stated (`tenancy::tenant_rule`), and a caller bound to
/// `t1` is refused `tenant_not_allowed` on what names or reaches `t2` and
/// let through on `t1`; global operations refuse it either way; routes
/// that reach no tenant never refuse it for a tenant.
#[tokio::test]
async fn every_route_states_its_tenant_rule_and_a_bound_caller_keeps_to_its_tenants() {
    let documented: std::collections::BTreeSet<(String, String)> =
        gatehouse_server::openapi::ROUTES.iter().map(|r| (r.method.to_owned(), r.path.to_owned())).collect();
    let stated: std::collections::BTreeSet<(String, String)> =
        RULES.iter().map(|(m, p, ..)| ((*m).to_owned(), (*p).to_owned())).collect();
    assert_eq!(stated.len(), RULES.len(), "a route is stated twice");
    assert_eq!(stated, documented, "every route states its tenant rule, and only real routes do");

    let (node, _dir) = tenants_node().await;
    let own = things(&node, "t1").await;
    let other = things(&node, "t2").await;
    for (method, path, rule, query, body) in RULES {
        let method_ = http::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        assert_eq!(tenant_rule(&method_, path), *rule, "{method} {path}: the server applies another rule");
        let probe = |t: &Things| {
            let uri = format!("{}{}", t.fill(path), t.fill(query));
            let mut req = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(uri)
                .header("authorization", format!("Bearer {BOUND}"))
                .header("content-type", "application/json");
            if path.ends_with("/raw") {
                req = req.header("x-gatehouse-grant", &t.grant);
            }
            req.body(Body::from(t.fill(body))).unwrap()
        };
        let on_other = send(&node.router, probe(&other)).await;
        let on_own = send(&node.router, probe(&own)).await;
        let what = format!("{method} {path} ({rule:?})");
        match rule {
            TenantRule::Global => {
                assert!(refused_for_tenant(&on_other), "{what}: {} {}", on_other.status, on_other.text);
                assert!(refused_for_tenant(&on_own), "{what} is global: {} {}", on_own.status, on_own.text);
            }
            TenantRule::Public | TenantRule::BearerGrant | TenantRule::None => {
                assert!(!refused_for_tenant(&on_other), "{what} reaches no tenant: {}", on_other.text);
                assert!(!refused_for_tenant(&on_own), "{what}: {}", on_own.text);
            }
            // The audit log names no tenant in its query: it is narrowed.
            TenantRule::Narrowed if query.is_empty() => {
                assert_eq!(on_other.status, 200, "{what}: {}", on_other.text);
            }
            _ => {
                assert!(refused_for_tenant(&on_other), "{what} on t2: {} {}", on_other.status, on_other.text);
                assert!(!refused_for_tenant(&on_own), "{what} on t1: {} {}", on_own.status, on_own.text);
            }
        }
    }
    // Each refusal is recorded, with the tenant it tried to reach.
    let refusals = get(&node, "/v1/refusals?reason=tenant_not_allowed&limit=500").await.json();
    let refusals = refusals["items"].as_array().unwrap();
    assert!(refusals.len() >= 30, "{}", refusals.len());
    assert!(refusals.iter().all(|r| r["kind"] == "auth_refused" && r["tenant_id"] != "t1"));
}

/// What a bound caller was refused on another tenant's run, lease, file,
/// credential and scan is left exactly as it was.
#[tokio::test]
async fn a_bound_caller_changes_nothing_of_another_tenant() {
    let (node, _dir) = tenants_node().await;
    let other = things(&node, "t2").await;
    for (method, uri, body) in [
        ("post", format!("/v1/runs/{}/end", other.run_id), r#"{"outcome": "failed"}"#.to_owned()),
        ("post", format!("/v1/runs/{}/cancel", other.run_id), "{}".to_owned()),
        ("post", format!("/v1/leases/{}/revoke", other.lease_id), String::new()),
        ("post", format!("/v1/grants/{}/revoke", other.grant_id), String::new()),
        ("post", "/v1/grants/revoke".to_owned(), json!({"exec_id": other.run_id}).to_string()),
        ("post", "/v1/grants/revoke".to_owned(), json!({"tenant_id": "t2"}).to_string()),
        ("delete", format!("/v1/tenants/t2/files/{}", other.file_id), String::new()),
        ("delete", format!("/v1/tenants/t2/credentials/{}", other.credential_id), String::new()),
        ("post", "/v1/tenants/t2/kill-switch".to_owned(), r#"{"engaged": true}"#.to_owned()),
        // A percent-encoded id is read as the handlers read it.
        ("get", "/v1/tenants/t%32/egress-policy".to_owned(), String::new()),
    ] {
        let r = request(&node, BOUND, method, &uri, &body).await;
        assert!(refused_for_tenant(&r), "{method} {uri}: {} {}", r.status, r.text);
        // The same through the other bound caller, bound to two tenants.
        let r = request(&node, BOUND_TWO, method, &uri, &body).await;
        assert!(refused_for_tenant(&r) || r.status == 403, "{method} {uri}: {} {}", r.status, r.text);
    }
    // A scan naming t2's run is refused, and attaches nothing to it.
    let scan =
        request(&node, BOUND, "post", &format!("/v1/content/scan?run_id={}", other.run_id), BINARY).await;
    assert!(refused_for_tenant(&scan), "{}", scan.text);
    let run = get(&node, &format!("/v1/runs/{}", other.run_id)).await.json();
    assert_eq!(run["status"], "live");
    assert_eq!(run["leases"][0]["status"], "live");
    let spent =
        call(&node, "/v1/grants/consume", json!({"token": other.grant, "operation": {"kind": "request"}}))
            .await
            .json();
    assert_eq!(spent["allowed"], true, "t2's grant still works: {spent}");
    assert_eq!(get(&node, &format!("/v1/tenants/t2/files/{}", other.file_id)).await.status, 200);
    assert_eq!(get(&node, &format!("/v1/tenants/t2/credentials/{}", other.credential_id)).await.status, 200);
    assert_eq!(get(&node, "/v1/tenants/t2/egress-policy").await.json()["version"], 0);
    let events = get(&node, &format!("/v1/runs/{}/events", other.run_id)).await.json();
    assert!(events["items"].as_array().unwrap().iter().all(|e| e["kind"] != "content_refused"), "{events}");
    // The service token stays unbound: it acts on every tenant.
    let r = request(&node, TOKEN, "post", &format!("/v1/leases/{}/revoke", other.lease_id), "").await;
    assert_eq!((r.status, r.json()["revoked"].as_u64()), (200, Some(1)), "{}", r.text);
}

/// Every page of `path` (a list), read with `limit` 1 as `token`.
async fn every_page(node: &Node, token: &str, path: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let sep = if path.contains('?') { '&' } else { '?' };
        let uri = match &cursor {
            Some(c) => format!("{path}{sep}limit=1&cursor={c}"),
            None => format!("{path}{sep}limit=1"),
        };
        let page = request(node, token, "get", &uri, "").await;
        assert_eq!(page.status, 200, "{uri}: {}", page.text);
        let page = page.json();
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return items,
        }
    }
    panic!("{path} never ended");
}

fn tenants_of(items: &[Value]) -> std::collections::BTreeSet<String> {
    items.iter().filter_map(|i| i["tenant_id"].as_str().map(str::to_owned)).collect()
}

/// Runs, leases, refusals and the audit log are narrowed to a bound
/// caller's tenants, page after page (each item once); naming another
/// tenant is refused; the whole audit log is an unbound admin's.
#[tokio::test]
async fn lists_are_narrowed_to_a_bound_callers_tenants() {
    let (node, _dir) = tenants_node().await;
    for tenant in ["t1", "t2", "t3", "t2", "t1", "t3"] {
        things(&node, tenant).await;
        // A refusal of each tenant, on record.
        let r = request(&node, TOKEN, "post", &format!("/v1/content/scan?tenant_id={tenant}"), BINARY).await;
        assert_eq!(r.json()["verdict"], "refused", "{}", r.text);
    }
    for (path, per_tenant) in [("/v1/runs", 2), ("/v1/leases", 2), ("/v1/refusals?kind=content_refused", 2)] {
        let all = every_page(&node, TOKEN, path).await;
        assert_eq!(all.len(), 3 * per_tenant, "{path}: {all:?}");
        for (token, tenants) in [(BOUND, vec!["t1"]), (BOUND_TWO, vec!["t1", "t3"])] {
            let seen = every_page(&node, token, path).await;
            assert_eq!(tenants_of(&seen), tenants.iter().map(|t| (*t).to_owned()).collect(), "{path}");
            assert_eq!(seen.len(), tenants.len() * per_tenant, "{path}: each item once: {seen:?}");
            // In the order the whole list has them.
            let order: Vec<&Value> =
                all.iter().filter(|i| tenants.contains(&i["tenant_id"].as_str().unwrap())).collect();
            assert_eq!(seen.iter().collect::<Vec<_>>(), order, "{path}");
        }
        let sep = if path.contains('?') { '&' } else { '?' };
        let named = request(&node, BOUND_TWO, "get", &format!("{path}{sep}tenant_id=t3"), "").await;
        assert_eq!(tenants_of(named.json()["items"].as_array().unwrap()), ["t3".to_owned()].into());
        let other = request(&node, BOUND_TWO, "get", &format!("{path}{sep}tenant_id=t2"), "").await;
        assert!(refused_for_tenant(&other), "{path}: {}", other.text);
    }
    // Refusals of a run of another tenant: none to see.
    let t2_run =
        get(&node, "/v1/runs?tenant_id=t2").await.json()["items"][0]["run_id"].as_str().unwrap().to_owned();
    let r = request(&node, BOUND, "get", &format!("/v1/refusals?run_id={t2_run}"), "").await;
    assert_eq!(r.json()["items"], json!([]), "{}", r.text);

    // The audit log: a bound caller reads its tenants' entries (and its
    // own actions); the service token the whole chain.
    request(&node, BOUND, "post", "/v1/grants/revoke", &json!({"tenant_id": "t1"}).to_string()).await;
    let whole = request(&node, TOKEN, "get", "/v1/audit?limit=500", "").await.json();
    let whole = whole["items"].as_array().unwrap();
    assert!(whole.iter().any(|e| e["tenant_id"] == "t2"));
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = request(&node, BOUND_TWO, "get", &format!("/v1/audit?after={after}&limit=3"), "").await;
        assert_eq!(page.status, 200, "{}", page.text);
        let page = page.json();
        seen.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => after = c.parse().unwrap(),
            None => break,
        }
    }
    let expected: Vec<&Value> = whole
        .iter()
        .filter(|e| {
            ["t1", "t3"].contains(&e["tenant_id"].as_str().unwrap_or_default()) || e["actor"] == "platform-c"
        })
        .collect();
    assert_eq!(seen.iter().collect::<Vec<_>>(), expected);
    let bound = request(&node, BOUND, "get", "/v1/audit?limit=500", "").await.json();
    let bound = bound["items"].as_array().unwrap();
    assert!(bound.iter().all(|e| e["tenant_id"] == "t1" || e["actor"] == "platform-b"), "{bound:?}");
    assert!(bound.iter().any(|e| e["action"] == "grants.revoke"), "its own revocation: {bound:?}");
}

/// Emergency revoke and revoking every grant act on every tenant: only an
/// unbound caller with scope `admin` may (the service token is one).
#[tokio::test]
async fn global_operations_need_an_unbound_admin() {
    let (node, _dir) = tenants_node().await;
    let own = things(&node, "t1").await;
    let all = json!({"all": true}).to_string();
    for token in [BOUND, BOUND_TWO, GRANTS_ONLY] {
        let r = request(&node, token, "post", "/v1/grants/revoke", &all).await;
        assert!(refused_for_tenant(&r), "{}", r.text);
    }
    let r = request(&node, BOUND, "post", "/v1/emergency-revoke", "{}").await;
    assert!(refused_for_tenant(&r), "{}", r.text);
    assert_eq!(get(&node, &format!("/v1/runs/{}", own.run_id)).await.json()["status"], "live");
    // An unbound caller without admin still revokes one tenant's grants.
    let r = request(&node, GRANTS_ONLY, "post", "/v1/grants/revoke", &json!({"tenant_id": "t1"}).to_string())
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = request(&node, TOKEN, "post", "/v1/grants/revoke", &all).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = request(&node, TOKEN, "post", "/v1/emergency-revoke", "{}").await;
    assert_eq!((r.status, r.json()["revoked"]["runs"].as_u64()), (200, Some(1)), "{}", r.text);
}

/// `POST /v1/grants` for a tenant whose kill switch is engaged is refused
/// as `POST /v1/runs` is; every mint is audited without its token. The
/// other ways out of a kill-switched tenant stay shut: its run's leases,
/// files and grant.
#[tokio::test]
async fn a_kill_switched_tenant_gets_no_grant_and_every_mint_is_audited() {
    let (node, _dir) = tenants_node().await;
    let own = things(&node, "t1").await;
    let grant = json!({"exec_id": "e-1", "tenant_id": "t1", "user_id": "u1", "input_files": ["f1"],
        "read_sessions": ["s1", "s2"], "output_session_id": "out-1", "max_requests": 7});
    let minted = call(&node, "/v1/grants", grant.clone()).await;
    assert_eq!(minted.status, 200, "{}", minted.text);
    let minted = minted.json();
    let token = minted["token"].as_str().unwrap();
    let audit = get(&node, "/v1/audit?limit=500").await;
    assert!(!audit.text.contains(token), "no token in the audit log");
    let entry = audit.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "grant.mint")
        .cloned()
        .expect("the mint is audited");
    assert_eq!((entry["tenant_id"].as_str(), entry["actor"].as_str()), (Some("t1"), Some("service")));
    assert_eq!(entry["subject"], minted["grant_id"]);
    assert_eq!(entry["detail"]["exec_id"], "e-1");
    assert_eq!(entry["detail"]["grant_id"], minted["grant_id"]);
    assert_eq!(
        entry["detail"]["scope"],
        json!({"input_files": 1, "read_sessions": 2, "output_session_id": "out-1", "max_requests": 7,
            "max_upload_bytes": entry["detail"]["scope"]["max_upload_bytes"],
            "max_output_files": entry["detail"]["scope"]["max_output_files"],
            "max_egress_bytes": entry["detail"]["scope"]["max_egress_bytes"], "max_tool_calls": 200})
    );

    let r = call(&node, "/v1/tenants/t1/kill-switch", json!({"engaged": true})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut second = grant.clone();
    second["exec_id"] = json!("e-2");
    let refused = call(&node, "/v1/grants", second.clone()).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert_eq!(refused.json()["error"]["reason"], "tenant_kill_switch");
    let kinds = get(&node, "/v1/refusals?reason=tenant_kill_switch").await.json();
    assert_eq!(kinds["items"][0]["tenant_id"], "t1");
    assert_eq!(kinds["items"][0]["kind"], "grant_refused");
    // Another tenant is not held by t1's switch.
    let mut elsewhere = second.clone();
    elsewhere["tenant_id"] = json!("t2");
    assert_eq!(call(&node, "/v1/grants", elsewhere).await.status, 200);

    // The run was killed: no lease, no heartbeat, its grant spends nothing,
    // its files are not read, and the grant minted before is revoked.
    let lease = call(
        &node,
        &format!("/v1/runs/{}/leases", own.run_id),
        json!({"credential_id": own.credential_id, "purpose": "git_provider", "host": "api.example"}),
    )
    .await;
    assert_eq!((lease.status, reason(&lease).as_deref()), (409, Some("run_not_live")), "{}", lease.text);
    let beat = call(&node, &format!("/v1/runs/{}/heartbeat", own.run_id), json!({})).await;
    assert_eq!(beat.status, 409, "{}", beat.text);
    for token in [own.grant.as_str(), token] {
        let spent =
            call(&node, "/v1/grants/consume", json!({"token": token, "operation": {"kind": "request"}}))
                .await
                .json();
        assert_eq!(spent["allowed"], false, "{spent}");
    }
    let read = send(
        &node.router,
        Request::get(format!("/v1/files/{}", own.file_id))
            .header("authorization", format!("Bearer {}", own.grant))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(read.status, 403, "{}", read.text);
    let fetch = call(
        &node,
        "/v1/egress/fetch",
        json!({"grant": own.grant, "url": "http://api.example/", "purpose": "runtime"}),
    )
    .await;
    assert_eq!((fetch.status, reason(&fetch).as_deref()), (403, Some("grant_revoked")), "{}", fetch.text);
    assert_eq!(
        get(&node, &format!("/v1/runs/{}", own.run_id)).await.json()["leases"][0]["status"],
        "revoked"
    );

    // Released, grants are minted again.
    call(&node, "/v1/tenants/t1/kill-switch", json!({"engaged": false})).await;
    let again = call(&node, "/v1/grants", second).await;
    assert_eq!(again.status, 200, "{}", again.text);
    let mints = get(&node, "/v1/audit?limit=500").await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "grant.mint")
        .count();
    assert_eq!(mints, 3, "every mint, and only mints that happened");
}

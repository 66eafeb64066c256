//! The settings page over HTTP, in process: sign-in, sessions, the
//! anti-forgery token, and each section's change, audited under the
//! person's name. (`browser.rs` drives the same page in a real Chromium.)

use axum::body::Body;
use gatehouse_config::names;
use gatehouse_core::{Reason, Refusal, RefusalKind};
use http::Request;
use serde_json::{Value, json};

use crate::support::*;

pub const PASSWORD: &str = "correct horse battery staple";

/// The page's password hash at real cost, computed once per test binary.
pub fn password_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| gatehouse_capability::AdminPasswordHash::hash(PASSWORD).unwrap().as_str().to_owned())
}

/// An `all` node that serves the page.
pub async fn admin_node() -> Node {
    node_with("all", &[(names::ADMIN_PASSWORD_HASH, password_hash())]).await
}

/// A browser's view of the page: one cookie jar.
pub struct Visitor<'a> {
    node: &'a Node,
    cookie: Option<String>,
}

impl<'a> Visitor<'a> {
    pub fn new(node: &'a Node) -> Self {
        Self { node, cookie: None }
    }

    fn request(&self, method: &str, path: &str, form: Option<&[(&str, &str)]>) -> Request<Body> {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(cookie) = &self.cookie {
            req = req.header("cookie", cookie.as_str());
        }
        match form {
            Some(fields) => req
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Body::from(serde_urlencoded::to_string(fields).unwrap()))
                .unwrap(),
            None => req.body(Body::empty()).unwrap(),
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        send(&self.node.router, self.request("GET", path, None)).await
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Reply {
        send(&self.node.router, self.request("POST", path, Some(form))).await
    }

    /// Posts a form with this session's anti-forgery token, read from `page`.
    pub async fn submit(&self, page: &str, path: &str, form: &[(&str, &str)]) -> Reply {
        let csrf = csrf_of(&self.get(page).await.text);
        let mut fields = vec![("csrf", csrf.as_str())];
        fields.extend_from_slice(form);
        self.post(path, &fields).await
    }

    pub async fn sign_in(&mut self, person: &str, password: &str) -> Reply {
        let reply = self.post("/admin/login", &[("person", person), ("password", password)]).await;
        if let Some(set) = reply.headers.get("set-cookie") {
            let pair = set.to_str().unwrap().split(';').next().unwrap().to_owned();
            self.cookie = Some(pair);
        }
        reply
    }
}

/// The anti-forgery token of the first form on a page.
pub fn csrf_of(html: &str) -> String {
    let at =
        html.find(r#"name="csrf" value=""#).unwrap_or_else(|| panic!("no form token on the page: {html}"));
    let rest = &html[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

async fn audit_actions(node: &Node) -> Vec<(String, String)> {
    let items = get(node, "/v1/audit?limit=500").await.json()["items"].as_array().unwrap().clone();
    items
        .iter()
        .map(|e| (e["action"].as_str().unwrap().to_owned(), e["actor"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test]
async fn signing_in_takes_the_password_sets_a_strict_cookie_and_is_audited() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    let first = ada.get("/admin").await;
    assert_eq!((first.status, first.headers["location"].to_str().unwrap()), (303, "/admin/login"));

    let wrong = ada.sign_in("ada", "not the password").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.text.contains("That password is not right"), "{}", wrong.text);
    assert!(wrong.headers.get("set-cookie").is_none());
    let hostile = ada.sign_in("<script>x</script>", PASSWORD).await;
    assert_eq!(hostile.status, 400, "a name that is not a plain token is refused");
    assert!(!hostile.text.contains("<script>x"), "{}", hostile.text);

    let login = ada.get("/admin/login").await;
    for (header, value) in [
        (
            "content-security-policy",
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
    ] {
        assert_eq!(login.headers[header], value, "{header}");
    }

    let signed = ada.sign_in("ada", PASSWORD).await;
    assert_eq!((signed.status, signed.headers["location"].to_str().unwrap()), (303, "/admin"));
    let cookie = signed.headers["set-cookie"].to_str().unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/admin", "Max-Age=28800"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "on loopback the cookie is not Secure: {cookie}");
    let index = ada.get("/admin").await;
    assert_eq!(index.status, 200, "{}", index.text);
    assert!(index.text.contains("Signed in as <strong>person:ada</strong>"), "{}", index.text);

    let audit = audit_actions(&node).await;
    assert!(audit.contains(&("admin.sign_in".into(), "person:ada".into())), "{audit:?}");
    let refused: Vec<Value> = refusals(&node).await;
    assert!(
        refused.iter().any(|r| r["reason"] == "admin_sign_in_failed" && r["kind"] == "auth_refused"),
        "{refused:?}"
    );
    // The store keeps the session token's hash only.
    let token = ada.cookie.as_deref().unwrap().split_once('=').unwrap().1.to_owned();
    let db = std::fs::read(node.data.path().join("gatehouse.db")).unwrap();
    let wal = std::fs::read(node.data.path().join("gatehouse.db-wal")).unwrap_or_default();
    for bytes in [&db, &wal] {
        assert!(!bytes.windows(token.len()).any(|w| w == token.as_bytes()), "the session token is stored");
    }
}

/// A first visit (no cookie at all) is simply asked to sign in; only a
/// cookie that no longer matches a live session hears that it ended.
#[tokio::test]
async fn a_first_visit_is_asked_to_sign_in_and_only_a_stale_cookie_hears_it_ended() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    for path in ["/admin", "/admin/tenants/t1", "/admin/emergency-revoke"] {
        let first = ada.get(path).await;
        assert_eq!(
            (first.status, first.headers["location"].to_str().unwrap()),
            (303, "/admin/login"),
            "{path}"
        );
    }
    let login = ada.get("/admin/login").await;
    assert_eq!(login.status, 200);
    assert!(!login.text.contains("Your session has ended"), "{}", login.text);
    assert!(
        refusals(&node).await.iter().all(|r| r["reason"] != "admin_session_invalid"),
        "no session is not a refused session"
    );

    // Signed in, then the session ends (idle): the cookie now matches nothing.
    ada.sign_in("ada", PASSWORD).await;
    node.clock.advance(31 * 60);
    let stale = ada.get("/admin").await;
    assert_eq!((stale.status, stale.headers["location"].to_str().unwrap()), (303, "/admin/login?expired=1"));
    let told = ada.get("/admin/login?expired=1").await;
    assert!(told.text.contains("Your session has ended"), "{}", told.text);
    // A cookie of the page's name that is not a token at all is no session either.
    ada.cookie = Some("gatehouse_admin=not-a-token".into());
    assert_eq!(ada.get("/admin").await.headers["location"].to_str().unwrap(), "/admin/login?expired=1");
    // Another site's cookie is no session of this page.
    ada.cookie = Some("theme=dark".into());
    assert_eq!(ada.get("/admin").await.headers["location"].to_str().unwrap(), "/admin/login");
}

#[tokio::test]
async fn a_guesser_is_held_back_even_with_the_right_password_at_last() {
    let node = admin_node().await;
    let mut guesser = Visitor::new(&node);
    for i in 0..10 {
        assert_eq!(guesser.sign_in("mallory", &format!("guess {i}")).await.status, 401);
    }
    let held = guesser.sign_in("mallory", PASSWORD).await;
    assert_eq!(held.status, 429, "{}", held.text);
    assert!(held.headers.get("set-cookie").is_none());
    let refused = refusals(&node).await;
    assert_eq!(refused.iter().filter(|r| r["reason"] == "admin_sign_in_failed").count(), 10);
    assert_eq!(refused.iter().filter(|r| r["reason"] == "admin_sign_in_throttled").count(), 1);
    // A sign-in another site's page makes the browser send is refused.
    let req = Request::post("/admin/login")
        .header("sec-fetch-site", "cross-site")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(serde_urlencoded::to_string([("person", "ada"), ("password", PASSWORD)]).unwrap()))
        .unwrap();
    let cross = send(&node.router, req).await;
    assert_eq!(cross.status, 403);
    assert!(cross.headers.get("set-cookie").is_none());
}

#[tokio::test]
async fn sessions_end_when_idle_when_old_and_at_sign_out() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    node.clock.advance(29 * 60);
    assert_eq!(ada.get("/admin").await.status, 200, "used within the idle limit");
    node.clock.advance(29 * 60);
    assert_eq!(ada.get("/admin").await.status, 200, "the last use keeps it alive");
    node.clock.advance(31 * 60);
    assert_eq!(ada.get("/admin").await.status, 303, "idle past 30 minutes");

    ada.sign_in("ada", PASSWORD).await;
    for _ in 0..20 {
        node.clock.advance(25 * 60);
        if ada.get("/admin").await.status != 200 {
            break;
        }
    }
    assert_eq!(ada.get("/admin").await.status, 303, "eight hours is the most a session lives");

    ada.sign_in("ada", PASSWORD).await;
    let out = ada.submit("/admin", "/admin/logout", &[]).await;
    assert_eq!((out.status, out.headers["location"].to_str().unwrap()), (303, "/admin/login"));
    assert!(out.headers["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(ada.get("/admin").await.status, 303, "the old cookie is worth nothing now");
    assert!(audit_actions(&node).await.contains(&("admin.sign_out".into(), "person:ada".into())));
}

#[tokio::test]
async fn a_form_without_its_sessions_token_changes_nothing() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    let mut bob = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    bob.sign_in("bob", PASSWORD).await;
    let bobs_token = csrf_of(&bob.get("/admin/tenants/t1").await.text);
    let form = [("version", "0"), ("mode", "allowlist"), ("allow", "a.example"), ("deny", "")];
    let mut without = form.to_vec();
    let none = ada.post("/admin/tenants/t1/policy", &without).await;
    without.push(("csrf", &bobs_token));
    let others = ada.post("/admin/tenants/t1/policy", &without).await;
    for reply in [none, others] {
        assert_eq!(reply.status, 403, "{}", reply.text);
        assert!(reply.text.contains("admin_csrf_invalid"));
    }
    // A browser's word that the form came from another site is enough.
    let csrf = csrf_of(&ada.get("/admin/tenants/t1").await.text);
    let mut fields = form.to_vec();
    fields.push(("csrf", &csrf));
    let mut req = Request::post("/admin/tenants/t1/policy")
        .header("cookie", ada.cookie.clone().unwrap())
        .header("sec-fetch-site", "cross-site")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(serde_urlencoded::to_string(&fields).unwrap()))
        .unwrap();
    assert_eq!(send(&node.router, req).await.status, 403);
    assert_eq!(get(&node, "/v1/tenants/t1/egress-policy").await.json()["version"], 0, "nothing stored");
    // A signed-out visitor's post goes to the sign-in page.
    req = Request::post("/admin/tenants/t1/policy")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(serde_urlencoded::to_string(&fields).unwrap()))
        .unwrap();
    assert_eq!(send(&node.router, req).await.status, 303);
    let refused = refusals(&node).await;
    assert!(refused.iter().filter(|r| r["reason"] == "admin_csrf_invalid").count() >= 3, "{refused:?}");
}

#[tokio::test]
async fn the_policy_form_names_the_wrong_entry_refuses_stale_edits_and_audits_the_person() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    let page = "/admin/tenants/t1";
    let bad = ada
        .submit(
            page,
            "/admin/tenants/t1/policy",
            &[
                ("version", "0"),
                ("mode", "allowlist"),
                ("allow", "a.example\nhttp://b.example/x"),
                ("deny", ""),
            ],
        )
        .await;
    assert_eq!(bad.status, 200);
    assert!(bad.text.contains("Not saved") && bad.text.contains("http://b.example/x"), "{}", bad.text);
    assert!(bad.text.contains("a.example\nhttp://b.example/x</textarea>"), "the person's text is kept");
    assert_eq!(get(&node, "/v1/tenants/t1/egress-policy").await.json()["version"], 0);

    let edit = [
        ("version", "0"),
        ("mode", "allowlist"),
        ("allow", " a.example \n\n*.b.example"),
        ("deny", "10.0.0.0/8"),
        ("dry_run", "on"),
    ];
    // The change is shown first; nothing is saved until it is confirmed.
    let shown = ada.submit(page, "/admin/tenants/t1/policy", &edit).await;
    assert!(shown.text.contains("Nothing is saved yet"), "{}", shown.text);
    assert!(shown.text.contains("<ins>+ a.example</ins>") && shown.text.contains("<ins>+ 10.0.0.0/8</ins>"));
    assert!(shown.text.contains("Dry run: on"), "{}", shown.text);
    assert_eq!(get(&node, "/v1/tenants/t1/egress-policy").await.json()["version"], 0);
    let mut confirmed = edit.to_vec();
    confirmed.push(("action", "save"));
    let saved = ada.submit(page, "/admin/tenants/t1/policy/confirm", &confirmed).await;
    assert!(saved.text.contains("Policy saved as version 1"), "{}", saved.text);
    let stored = get(&node, "/v1/tenants/t1/egress-policy").await.json();
    assert_eq!(
        stored["policy"],
        json!({"mode": "allowlist", "allow": ["a.example", "*.b.example"], "deny": ["10.0.0.0/8"], "dry_run": true})
    );
    assert_eq!(stored["actor"], "person:ada");

    // Someone else changes it; a form loaded before says so, overwrites nothing.
    put(&node, "/v1/tenants/t1/egress-policy", json!({"mode": "open"})).await;
    let stale = ada
        .submit(
            page,
            "/admin/tenants/t1/policy/confirm",
            &[
                ("version", "1"),
                ("mode", "allowlist"),
                ("allow", "c.example"),
                ("deny", ""),
                ("action", "save"),
            ],
        )
        .await;
    assert!(stale.text.contains("changed since this page was loaded"), "{}", stale.text);
    let now = get(&node, "/v1/tenants/t1/egress-policy").await.json();
    assert_eq!((now["version"].clone(), now["policy"]["mode"].clone()), (json!(2), json!("open")));
    let audit = audit_actions(&node).await;
    assert!(audit.contains(&("policy.set".into(), "person:ada".into())), "{audit:?}");
}

#[tokio::test]
async fn test_a_url_runs_the_doors_decision_without_connecting() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    put(
        &node,
        "/v1/tenants/t1/egress-policy",
        json!({"mode": "allowlist", "allow": ["a.example"], "deny": ["*.bad.example"]}),
    )
    .await;
    let page = "/admin/tenants/t1";
    let not_allowed = ada.submit(page, "/admin/tenants/t1/test-url", &[("url", "https://c.example/x")]).await;
    assert!(
        not_allowed.text.contains("<strong>refuse</strong>: <code>policy_not_allowed</code>"),
        "{}",
        not_allowed.text
    );
    let denied = ada.submit(page, "/admin/tenants/t1/test-url", &[("url", "https://x.bad.example/")]).await;
    assert!(
        denied.text.contains("<code>policy_denied</code>, by rule <code>*.bad.example</code>"),
        "{}",
        denied.text
    );
    let metadata =
        ada.submit(page, "/admin/tenants/t1/test-url", &[("url", "http://169.254.169.254/latest")]).await;
    assert!(
        metadata.text.contains("policy_not_allowed") || metadata.text.contains("address_metadata"),
        "{}",
        metadata.text
    );
    let malformed =
        ada.submit(page, "/admin/tenants/t1/test-url", &[("url", "http://a.example\\@evil/")]).await;
    assert!(malformed.text.contains("<strong>refuse</strong>"), "{}", malformed.text);
}

#[tokio::test]
async fn allow_offers_the_narrowest_entry_shows_the_change_and_saves_it() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    put(&node, "/v1/tenants/t1/egress-policy", json!({"mode": "allowlist", "allow": ["a.example"]})).await;
    for host in ["api.needed.example", "api.needed.example", "other.example"] {
        node.state.plane.refusals.record_refusal(Refusal {
            kind: RefusalKind::EgressRefused,
            reason: Reason::PolicyNotAllowed,
            tenant_id: Some("t1".into()),
            run_id: Some("run_1".into()),
            request_id: None,
            host: Some(host.into()),
            rule: None,
            lease_id: None,
            actor: None,
            file_name: None,
            dry_run: false,
            at: 0,
        });
    }
    // Another tenant's refusals are not this tenant's to allow.
    node.state.plane.refusals.record_refusal(Refusal {
        kind: RefusalKind::EgressRefused,
        reason: Reason::PolicyNotAllowed,
        tenant_id: Some("t2".into()),
        run_id: None,
        request_id: None,
        host: Some("elsewhere.example".into()),
        rule: None,
        lease_id: None,
        actor: None,
        file_name: None,
        dry_run: false,
        at: 0,
    });
    let page = ada.get("/admin/tenants/t1").await.text;
    assert!(
        page.contains("<code>api.needed.example</code></td><td>refused 2 time(s) lately as not allowed"),
        "{page}"
    );
    assert!(page.contains(r#"aria-label="Allow other.example""#));
    assert!(!page.contains("elsewhere.example"));

    let preview = ada
        .submit(
            "/admin/tenants/t1",
            "/admin/tenants/t1/allow",
            &[("host", "API.needed.example."), ("version", "1")],
        )
        .await;
    assert_eq!(preview.status, 200, "{}", preview.text);
    assert!(preview.text.contains("  a.example\n<ins>+ api.needed.example</ins>"), "{}", preview.text);
    assert_eq!(get(&node, "/v1/tenants/t1/egress-policy").await.json()["version"], 1, "nothing saved yet");
    let csrf = csrf_of(&preview.text);
    let saved = ada
        .post(
            "/admin/tenants/t1/allow/confirm",
            &[("csrf", &csrf), ("host", "api.needed.example"), ("version", "1")],
        )
        .await;
    assert!(saved.text.contains("api.needed.example is allowed (policy version 2)"), "{}", saved.text);
    assert_eq!(
        get(&node, "/v1/tenants/t1/egress-policy").await.json()["policy"]["allow"],
        json!(["a.example", "api.needed.example"])
    );
    // Confirming against a version that is no longer current saves nothing.
    let stale = ada
        .post(
            "/admin/tenants/t1/allow/confirm",
            &[("csrf", &csrf), ("host", "other.example"), ("version", "1")],
        )
        .await;
    assert!(stale.text.contains("the policy changed since this page was loaded"), "{}", stale.text);
    assert_eq!(get(&node, "/v1/tenants/t1/egress-policy").await.json()["version"], 2);
    // Non-ASCII names are allowed as their A-label, and shown as stored.
    let idn = ada
        .submit(
            "/admin/tenants/t1",
            "/admin/tenants/t1/allow",
            &[("host", "Bücher.example"), ("version", "2")],
        )
        .await;
    assert!(idn.text.contains("<ins>+ xn--bcher-kva.example</ins>"), "{}", idn.text);
    // A wildcard, an address or an allowed host is never offered.
    for host in ["*.needed.example", "10.1.2.3", "a.example"] {
        let refused = ada
            .submit("/admin/tenants/t1", "/admin/tenants/t1/allow", &[("host", host), ("version", "2")])
            .await;
        assert_eq!(refused.status, 400, "{host}");
    }
}

#[tokio::test]
async fn runs_the_kill_switch_and_emergency_revoke_work_from_the_page() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    let body = |tenant: &str| json!({"tenant_id": tenant, "user_id": "u1", "body": {"code": "1"}, "output_session_id": "out", "budgets": {"max_requests": 5}});
    let run1 = call(&node, "/v1/runs", body("t1")).await.json();
    let run2 = call(&node, "/v1/runs", body("t1")).await.json();
    call(&node, "/v1/runs", body("t2")).await;
    let (id1, id2) = (run1["run_id"].as_str().unwrap(), run2["run_id"].as_str().unwrap());

    let page = "/admin/tenants/t1";
    let wrong_tenant = ada.submit(page, &format!("/admin/tenants/t2/runs/{id1}/cancel"), &[]).await;
    assert_eq!(wrong_tenant.status, 404, "a run is cancelled only from its own tenant's page");
    let cancelled = ada.submit(page, &format!("/admin/tenants/t1/runs/{id1}/cancel"), &[]).await;
    assert_eq!(cancelled.status, 303);
    let run = get(&node, &format!("/v1/runs/{id1}")).await.json();
    assert_eq!((run["status"].as_str(), run["ended_by"].as_str()), (Some("cancelled"), Some("person:ada")));

    let engaged = ada
        .submit(
            page,
            "/admin/tenants/t1/kill-switch",
            &[("engaged", "true"), ("reason", "<script>alert(1)</script> leak")],
        )
        .await;
    assert!(engaged.text.contains("Kill switch engaged: 1 run(s) killed"), "{}", engaged.text);
    let shown = engaged.text.split("Engaged</strong>: ").nth(1).unwrap().split(". No run").next().unwrap();
    assert_eq!(shown, "&#60;script&#62;alert(1)&#60;/script&#62; leak", "the reason is shown as text");
    assert!(!engaged.text.contains("<script>alert"), "{}", engaged.text);
    assert_eq!(get(&node, &format!("/v1/runs/{id2}")).await.json()["status"], "killed");
    assert!(engaged.text.contains(r#"class="status killed">killed"#), "{}", engaged.text);
    assert_eq!(call(&node, "/v1/runs", body("t1")).await.status, 403, "no new run while engaged");
    let released = ada.submit(page, "/admin/tenants/t1/kill-switch", &[("engaged", "false")]).await;
    assert!(released.text.contains("Kill switch released"));

    let confirm = ada.get("/admin/emergency-revoke").await;
    assert!(confirm.text.contains("This will kill <strong>1</strong> live run(s)"), "{}", confirm.text);
    let done = ada.submit("/admin/emergency-revoke", "/admin/emergency-revoke", &[("reason", "drill")]).await;
    assert!(done.text.contains("Done: 1 run(s) killed"), "{}", done.text);
    let audit = audit_actions(&node).await;
    for action in ["kill_switch.engage", "emergency_revoke", "run.cancelled"] {
        assert!(audit.iter().any(|(a, who)| a == action && who == "person:ada"), "{action}: {audit:?}");
    }
}

#[tokio::test]
async fn refusals_are_filtered_and_paged_and_bad_ids_are_not_found() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    for i in 0..120 {
        node.state.plane.refusals.record_refusal(Refusal {
            kind: if i % 2 == 0 { RefusalKind::EgressRefused } else { RefusalKind::BudgetExhausted },
            reason: if i % 2 == 0 { Reason::PolicyDenied } else { Reason::BudgetRequestsExhausted },
            tenant_id: Some("t1".into()),
            run_id: Some(format!("run_{i}")),
            request_id: Some(format!("req_{i}")),
            host: Some(format!("h{i}.example")),
            rule: Some("*.example".into()),
            lease_id: None,
            actor: None,
            file_name: None,
            dry_run: false,
            at: 0,
        });
    }
    let first = ada.get("/admin/tenants/t1").await.text;
    assert_eq!(first.matches("<code>req_").count(), 50, "one page");
    assert!(first.contains("<code>req_119</code>"), "newest first");
    let older = first
        .split("href=\"/admin/tenants/t1?")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    let second = ada.get(&format!("/admin/tenants/t1?{}", older.trim_end_matches("#refusals"))).await.text;
    assert!(second.contains("<code>req_69</code>") && !second.contains("<code>req_70</code>"), "{second}");

    let filtered = ada.get("/admin/tenants/t1?kind=budget_exhausted&host=h7.example").await.text;
    assert_eq!(filtered.matches("<code>req_").count(), 1, "{filtered}");
    assert!(filtered.contains("<code>req_7</code>"));
    assert_eq!(ada.get("/admin/tenants/t1?kind=not_a_kind").await.status, 400);
    assert_eq!(ada.get("/admin/tenants/t1?cursor=1%27%20or%201=1").await.status, 400);
    for path in
        ["/admin/tenants/..", "/admin/tenants/%3Cscript%3E", &format!("/admin/tenants/{}", "x".repeat(129))]
    {
        let reply = ada.get(path).await;
        assert_eq!(reply.status, 404, "{path}");
        assert!(!reply.text.contains("<script>"));
    }
}

// ---- the sign-in throttle ----

/// A sign-in from `peer` (the listener's client address), with an
/// `X-Forwarded-For` header when given.
async fn sign_in_from(node: &Node, peer: &str, forwarded_for: Option<&str>, password: &str) -> Reply {
    let peer: std::net::SocketAddr = peer.parse().unwrap();
    let mut req = Request::post("/admin/login").header("content-type", "application/x-www-form-urlencoded");
    if let Some(xff) = forwarded_for {
        req = req.header("x-forwarded-for", xff);
    }
    let mut req = req
        .body(Body::from(serde_urlencoded::to_string([("person", "ada"), ("password", password)]).unwrap()))
        .unwrap();
    req.extensions_mut().insert(gatehouse_listener::PeerAddr(peer));
    send(&node.router, req).await
}

/// How many sign-ins were checked and failed, and how many were held back.
async fn sign_in_counts(node: &Node) -> (usize, usize) {
    let refused = refusals(node).await;
    let count = |reason: &str| refused.iter().filter(|r| r["reason"] == reason).count();
    (count("admin_sign_in_failed"), count("admin_sign_in_throttled"))
}

#[tokio::test]
async fn eighty_sign_ins_at_once_from_one_address_get_at_most_its_share_of_checks() {
    let node = admin_node().await;
    let guesses: Vec<_> = (0..80)
        .map(|i| {
            let node = &node;
            async move { sign_in_from(node, "203.0.113.7:40000", None, &format!("guess {i}")).await.status }
        })
        .collect();
    let statuses = futures_util::future::join_all(guesses).await;
    let checked = statuses.iter().filter(|s| **s == 401).count();
    let held = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((checked, held), (10, 70), "{statuses:?}");
    assert_eq!(sign_in_counts(&node).await, (10, 70), "each check is a recorded failure");
    // The address is held back even with the password now; another is not.
    assert_eq!(sign_in_from(&node, "203.0.113.7:40001", None, PASSWORD).await.status, 429);
    assert_eq!(sign_in_from(&node, "203.0.113.8:40000", None, PASSWORD).await.status, 303);
}

#[tokio::test]
async fn a_flood_from_one_address_does_not_lock_the_operator_out() {
    let node = admin_node().await;
    let flood: Vec<_> = (0..250)
        .map(|i| {
            let node = &node;
            async move { sign_in_from(node, "198.51.100.66:5000", None, &format!("guess {i}")).await.status }
        })
        .collect();
    let statuses = futures_util::future::join_all(flood).await;
    assert!(statuses.iter().all(|s| *s == 401 || *s == 429), "{statuses:?}");
    let operator = sign_in_from(&node, "192.0.2.10:6000", None, PASSWORD).await;
    assert_eq!((operator.status, operator.headers["location"].to_str().unwrap()), (303, "/admin"));
    assert!(operator.headers.get("set-cookie").is_some());
}

#[tokio::test]
async fn many_addresses_failing_slow_sign_ins_down_but_never_refuse_a_clean_address_the_password() {
    let node = admin_node().await;
    // 200 failures in all, from 200 addresses (the global cap).
    let guesses: Vec<_> = (0..200u32)
        .map(|i| {
            let node = &node;
            async move {
                let peer = format!("10.{}.{}.1:7000", i / 250, i % 250);
                sign_in_from(node, &peer, None, "a guess").await.status
            }
        })
        .collect();
    let statuses = futures_util::future::join_all(guesses).await;
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    // An address that has failed is held back now; a clean one is checked
    // (slowed down), and the right password signs in.
    assert_eq!(sign_in_from(&node, "10.0.0.1:7001", None, PASSWORD).await.status, 429);
    assert_eq!(sign_in_from(&node, "192.0.2.77:7000", None, "still a guess").await.status, 401);
    let operator = sign_in_from(&node, "192.0.2.10:6000", None, PASSWORD).await;
    assert_eq!((operator.status, operator.headers["location"].to_str().unwrap()), (303, "/admin"));
}

#[tokio::test]
async fn forwarded_for_counts_only_from_a_trusted_proxy() {
    let node = node_with(
        "all",
        &[
            (names::ADMIN_PASSWORD_HASH, password_hash()),
            (names::TRUSTED_PROXIES, "10.0.0.0/8, 2001:db8:ffff::1"),
        ],
    )
    .await;
    // An untrusted peer says whatever it likes in the header: it is ignored,
    // so a fresh "address" per guess does not buy more guesses.
    for i in 0..10 {
        let xff = format!("192.0.2.{i}");
        assert_eq!(sign_in_from(&node, "198.51.100.9:1000", Some(&xff), "guess").await.status, 401);
    }
    let spoofed = sign_in_from(&node, "198.51.100.9:1000", Some("192.0.2.200"), PASSWORD).await;
    assert_eq!(spoofed.status, 429, "the peer's own address is held back");

    // Behind the trusted proxy, each client is its own address.
    let proxy = "10.0.0.2:443";
    for _ in 0..10 {
        assert_eq!(sign_in_from(&node, proxy, Some("203.0.113.5"), "guess").await.status, 401);
    }
    assert_eq!(sign_in_from(&node, proxy, Some("203.0.113.5"), PASSWORD).await.status, 429);
    // Something the client put in front of the proxy's entry changes nothing:
    // the right-most address that is not a trusted proxy is the client.
    assert_eq!(sign_in_from(&node, proxy, Some("192.0.2.1, 203.0.113.5"), PASSWORD).await.status, 429);
    assert_eq!(sign_in_from(&node, proxy, Some("203.0.113.5, 10.9.9.9"), PASSWORD).await.status, 429);
    // Another client through the same proxy is not held back.
    let other = sign_in_from(&node, proxy, Some("203.0.113.5, 203.0.113.6, 10.1.1.1"), PASSWORD).await;
    assert_eq!(other.status, 303, "{}", other.text);
    let v6 = sign_in_from(&node, "[2001:db8:ffff::1]:443", Some("203.0.113.9"), PASSWORD).await;
    assert_eq!(v6.status, 303, "{}", v6.text);
}

#[tokio::test]
async fn two_ipv6_addresses_in_one_64_share_a_bucket() {
    let node = admin_node().await;
    for i in 0..10 {
        let peer = format!("[2001:db8:1:2::{:x}]:1000", i + 1);
        assert_eq!(sign_in_from(&node, &peer, None, "guess").await.status, 401);
    }
    let same_64 = sign_in_from(&node, "[2001:db8:1:2:ffff:ffff:ffff:ffff]:1000", None, PASSWORD).await;
    assert_eq!(same_64.status, 429, "another address of the same /64 is the same client");
    let next_64 = sign_in_from(&node, "[2001:db8:1:3::1]:1000", None, PASSWORD).await;
    assert_eq!(next_64.status, 303, "the next /64 is another client");
}

// ---- sessions and the password ----

/// A node serving the page with `hash`, on the SQLite file at `db` (shared
/// between the nodes of a test, as a restart finds it).
async fn admin_node_on(db: &std::path::Path, hash: &str) -> Node {
    let url = format!("sqlite://{}", db.display());
    node_with("all", &[(names::ADMIN_PASSWORD_HASH, hash), (names::DATABASE_URL, &url)]).await
}

#[tokio::test]
async fn a_new_password_hash_ends_every_session_even_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let before = admin_node_on(&db, password_hash()).await;
    let mut ada = Visitor::new(&before);
    assert_eq!(ada.sign_in("ada", PASSWORD).await.status, 303);
    assert_eq!(ada.get("/admin").await.status, 200);
    let cookie = ada.cookie.clone();
    // The stored row binds the session to the hash by a keyed digest: neither
    // the hash nor anything of the token is in the file.
    let phc = password_hash();
    let stored_hash = phc.rsplit('$').next().unwrap();
    let bytes = std::fs::read(&db).unwrap();
    let wal = std::fs::read(dir.path().join("shared.db-wal")).unwrap_or_default();
    for b in [&bytes, &wal] {
        assert!(!b.windows(stored_hash.len()).any(|w| w == stored_hash.as_bytes()), "the hash is stored");
    }

    // The operator changes the password and restarts: the old session is over.
    let new_password = "a new password, after a leak";
    let new_hash = gatehouse_capability::AdminPasswordHash::hash(new_password).unwrap();
    let after = admin_node_on(&db, new_hash.as_str()).await;
    let mut old = Visitor::new(&after);
    old.cookie = cookie.clone();
    let ended = old.get("/admin").await;
    assert_eq!((ended.status, ended.headers["location"].to_str().unwrap()), (303, "/admin/login?expired=1"));
    // Ended for good: going back to the old hash does not revive it.
    let back = admin_node_on(&db, password_hash()).await;
    let mut revived = Visitor::new(&back);
    revived.cookie = cookie;
    assert_eq!(revived.get("/admin").await.status, 303, "an ended session stays ended");
    // The new password signs in on the new node; the old one does not.
    let mut bob = Visitor::new(&after);
    assert_eq!(bob.sign_in("bob", PASSWORD).await.status, 401);
    assert_eq!(bob.sign_in("bob", new_password).await.status, 303);
    assert_eq!(bob.get("/admin").await.status, 200);
    // ... and that session is no session to a node still on the old hash.
    let mut stale_node = Visitor::new(&back);
    stale_node.cookie = bob.cookie.clone();
    assert_eq!(stale_node.get("/admin").await.status, 303);
}

#[tokio::test]
async fn sign_out_everywhere_ends_every_session_and_is_audited() {
    let node = admin_node().await;
    let mut ada = Visitor::new(&node);
    let mut bob = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    bob.sign_in("bob", PASSWORD).await;
    let index = ada.get("/admin").await;
    assert!(index.text.contains(r#"action="/admin/logout-everywhere""#), "{}", index.text);

    // Without the session's form token (or from another site): nothing ends.
    let forged = ada.post("/admin/logout-everywhere", &[]).await;
    assert_eq!(forged.status, 403, "{}", forged.text);
    let bobs = csrf_of(&bob.get("/admin").await.text);
    assert_eq!(ada.post("/admin/logout-everywhere", &[("csrf", &bobs)]).await.status, 403);
    assert_eq!(bob.get("/admin").await.status, 200, "nothing ended");
    let signed_out = Visitor::new(&node).post("/admin/logout-everywhere", &[("csrf", &bobs)]).await;
    assert_eq!(signed_out.status, 303, "no session: sign in first");

    let out = ada.submit("/admin", "/admin/logout-everywhere", &[]).await;
    assert_eq!((out.status, out.headers["location"].to_str().unwrap()), (303, "/admin/login"));
    assert!(out.headers["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    for visitor in [&ada, &bob] {
        let reply = visitor.get("/admin").await;
        assert_eq!(
            (reply.status, reply.headers["location"].to_str().unwrap()),
            (303, "/admin/login?expired=1")
        );
    }
    let audit = audit_actions(&node).await;
    assert!(audit.contains(&("admin.sign_out_everywhere".into(), "person:ada".into())), "{audit:?}");
    let items = get(&node, "/v1/audit?limit=500").await.json()["items"].as_array().unwrap().clone();
    let entry = items.iter().find(|e| e["action"] == "admin.sign_out_everywhere").unwrap();
    assert_eq!(entry["detail"]["sessions"], 2, "{entry}");
    // Signing in again works.
    assert_eq!(ada.sign_in("ada", PASSWORD).await.status, 303);
    assert_eq!(ada.get("/admin").await.status, 200);
}

/// A tenant whose current policy row is gone from the store is refused at
/// the door (`policy_unreadable`); the page says so and never shows it as
/// open, in the list of tenants or on the tenant's own page.
#[tokio::test]
async fn a_tenant_whose_policy_row_is_gone_reads_unreadable_never_open() {
    let node = admin_node().await;
    put(&node, "/v1/tenants/t1/egress-policy", json!({"mode": "allowlist", "allow": ["a.example"]})).await;
    let url = format!("sqlite://{}", node.data.path().join("gatehouse.db").display());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM policy_versions WHERE tenant_id = 't1'").execute(&raw).await.unwrap();
    let mut ada = Visitor::new(&node);
    ada.sign_in("ada", PASSWORD).await;
    let index = ada.get("/admin").await.text;
    let row = index
        .split(">t1</a>")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("{index}"));
    assert!(row.contains("unreadable") && !row.contains("open (never set)"), "{index}");
    let tenant = ada.get("/admin/tenants/t1").await.text;
    assert!(tenant.contains("The stored policy is unreadable"), "{tenant}");
    assert!(!tenant.contains(r#"<option value="open" selected>"#), "{tenant}");
}

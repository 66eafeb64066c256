//! The settings page in a real browser: headless Chromium (through
//! chromedriver and fantoccini) against a real `gatehouse serve` process
//! (role `all`, the embedded SQLite store in a temporary directory), with
//! curl as a run's sandbox going through the real proxy, an upstream that
//! echoes what it receives, and a DNS responder that answers every name
//! with 127.0.0.1, so the sandbox reaches hosts by NAME, as it would.
//!
//! Each page a person sees is screenshotted under
//! `target/admin-screenshots/browser-*.png` and checked with axe-core.
//! (`admin.rs` tests the same routes in process, over plain HTTP.)

use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use gatehouse_config::names;
use gatehouse_test_support::Browser;
use gatehouse_test_support::browser::{Client, Locator, screenshot_dir};
use serde_json::{Value, json};

use crate::admin::{PASSWORD, password_hash};
use crate::cli::{Server, spawn_server};
use crate::leases::Echo;
use crate::proxy::{api, door, proxy_address};
use crate::support::Dns;

/// What a hostile tenant puts in a name or a reason.
const HOSTILE: &str = "<script>document.title='pwned'</script>";
/// How long a page or a condition is waited for, polling.
const PATIENCE: Duration = Duration::from_secs(15);

/// A real gatehouse (`gatehouse serve`, role `all`, embedded defaults in a
/// temporary directory), its upstream and its resolver.
struct Plane {
    /// Declared first: the process stops before its directory is removed.
    _server: Server,
    api: String,
    proxy: String,
    echo: Echo,
    dns: Dns,
    _dir: tempfile::TempDir,
}

impl Plane {
    /// A clamd that is configured but not there: the scanner section
    /// shows every row (reachable: no), and no upload is taken.
    fn start() -> Self {
        Self::with_clamd(gatehouse_test_support::free_port())
    }

    /// Uploads judged by the clamd on `clamd_port`.
    fn with_clamd(clamd_port: u16) -> Self {
        let echo = Echo::start("127.0.0.1", 0);
        let dns = Dns::start();
        let dir = tempfile::tempdir().unwrap();
        let osv = format!("{}/tests/fixtures/osv-mini", env!("CARGO_MANIFEST_DIR"));
        let clamd_port = clamd_port.to_string();
        // A fixed proxy port, not `:0`: a run is given the proxy URL of the
        // configured address (`GATEHOUSE_PROXY_LISTEN`), and the test uses
        // exactly what a run is given.
        let proxy_listen = format!("127.0.0.1:{}", gatehouse_test_support::free_port());
        let mut c = door(dir.path());
        c.env(names::PROXY_LISTEN, &proxy_listen)
            .env(names::DNS_SERVERS, format!("127.0.0.1:{}", dns.port))
            .env(names::ADMIN_PASSWORD_HASH, password_hash())
            .env(names::OSV_DB, osv)
            .env(names::CLAMD_HOST, "127.0.0.1")
            .env(names::CLAMD_PORT, clamd_port);
        let (server, api, printed, _log) = spawn_server(c);
        Self { _server: server, api, proxy: proxy_address(&printed), echo, dns, _dir: dir }
    }

    /// A page's full URL.
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        api(&self.api, method, path, &body)
    }

    /// A live run of `t1` and the proxy URL its sandbox is given.
    fn new_run(&self) -> (String, String) {
        let run = self.call(
            "POST",
            "/v1/runs",
            json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "print(1)"},
                "budgets": {"max_requests": 100, "max_egress_bytes": 10_000_000}}),
        );
        let run_id = run["run_id"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned();
        let proxy = run["proxy"]["env"]["HTTP_PROXY"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned();
        assert!(proxy.contains(&self.proxy), "the run's proxy is this gatehouse's: {proxy}");
        (run_id, proxy)
    }

    fn policy(&self) -> Value {
        self.call("GET", "/v1/tenants/t1/egress-policy", json!({}))
    }
}

/// A request from the sandbox: curl through the run's proxy. Returns the
/// response head and body.
fn sandbox_get(proxy: &str, url: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-", "-x", proxy, url])
        .output()
        .expect("curl is installed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---- driving the page ----

/// The rendered text of the page (what a person reads), or nothing while
/// a navigation is under way.
async fn page_text(client: &Client) -> String {
    match client.execute("return document.body ? document.body.innerText : '';", vec![]).await {
        Ok(Value::String(text)) => text,
        _ => String::new(),
    }
}

/// Waits (polling, bounded) until the page shows `needle`; returns its text.
async fn wait_for_text(client: &Client, needle: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = page_text(client).await;
        if text.contains(needle) {
            return text;
        }
        assert!(Instant::now() < deadline, "the page never showed {needle:?}; it shows:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn click(client: &Client, css: &str) {
    let button = client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no {css} on the page: {e}"));
    button.click().await.unwrap_or_else(|e| panic!("{css} did not click: {e}"));
}

async fn type_into(client: &Client, id: &str, text: &str) {
    let field = client.find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("no #{id}: {e}"));
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

/// A screenshot of one section of the page (the element `id`, whole),
/// beside the harness's viewport screenshots.
async fn screenshot_section(browser: &Browser, id: &str, name: &str) {
    let section =
        browser.client().find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("no #{id} on the page: {e}"));
    // Chromium crops an element's screenshot to the viewport: scrolled into it first.
    let script = "document.getElementById(arguments[0]).scrollIntoView();";
    browser.client().execute(script, vec![json!(id)]).await.unwrap();
    let png = section.screenshot().await.unwrap_or_else(|e| panic!("no screenshot of #{id}: {e}"));
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// axe-core finds nothing on the current page.
async fn assert_accessible(browser: &Browser, what: &str) {
    let violations = browser.axe_violations().await;
    if violations.is_empty() {
        return;
    }
    let summary: Vec<String> = violations
        .iter()
        .map(|v| {
            let nodes: Vec<String> = v["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| format!("    {} {}", n["target"], n["html"]))
                .collect();
            format!("  {} ({}): {}\n{}", v["id"], v["impact"], v["help"], nodes.join("\n"))
        })
        .collect();
    panic!("axe-core finds violations on {what}:\n{}", summary.join("\n"));
}

/// No script of a tenant's text ran or became an element: the title is
/// the page's own and the page has no script element at all.
async fn assert_no_script_ran(client: &Client, title: &str) {
    assert_eq!(client.title().await.unwrap(), title, "the page's title is its own");
    let scripts = client.execute("return document.getElementsByTagName('script').length;", vec![]).await;
    assert_eq!(scripts.unwrap(), json!(0), "no script element on the page");
}

async fn sign_in(client: &Client, password: &str) {
    type_into(client, "person", "ada").await;
    type_into(client, "password", password).await;
    click(client, "form.signin button[type=submit]").await;
}

// ---- the tests ----

/// The whole loop a person goes through: sign in (a wrong password is
/// refused first), switch the tenant to an allowlist, see a sandbox's
/// request to a host refused and listed, allow that host in one click
/// (with the diff shown first) and the same request passes; revoke a live
/// lease and the next injected request is refused; engage the kill switch
/// and the run is killed. Every page has no axe-core violation.
#[tokio::test]
async fn a_person_allows_a_refused_host_revokes_a_lease_and_kills_a_run() {
    let plane = Plane::start();
    let browser = Browser::start().await;
    let client = browser.client();

    // A first visit is sent to sign in, and not told of a session it never had.
    client.goto(&plane.url("/admin")).await.unwrap();
    let first = wait_for_text(client, "Your name").await;
    assert!(!first.contains("Your session has ended"), "{first}");
    assert_eq!(client.current_url().await.unwrap().path(), "/admin/login");
    assert_eq!(client.title().await.unwrap(), "Sign in · gatehouse");
    browser.screenshot("browser-sign-in").await;
    assert_accessible(&browser, "the sign-in page").await;

    // A wrong password: refused, said so, the name kept, no session.
    sign_in(client, "not the password").await;
    let refused = wait_for_text(client, "That password is not right").await;
    assert!(!refused.contains("Signed in as"), "{refused}");
    let kept = client.find(Locator::Id("person")).await.unwrap().prop("value").await.unwrap();
    assert_eq!(kept.as_deref(), Some("ada"));
    let alert = client.find(Locator::Css("p.notice[role=alert]")).await.unwrap().text().await.unwrap();
    assert_eq!(alert, "That password is not right.");
    browser.screenshot("browser-sign-in-refused").await;
    assert_accessible(&browser, "the sign-in page with its error").await;

    sign_in(client, PASSWORD).await;
    wait_for_text(client, "Signed in as person:ada").await;
    assert_eq!(client.current_url().await.unwrap().path(), "/admin");

    // Open the tenant from the index, as a person would.
    type_into(client, "open-tenant", "t1").await;
    click(client, "form[action='/admin/tenants'] button[type=submit]").await;
    wait_for_text(client, "Tenant t1").await;
    assert_eq!(client.current_url().await.unwrap().path(), "/admin/tenants/t1");

    // The policy form: allowlist, saved.
    let mode = client.find(Locator::Id("mode")).await.unwrap();
    mode.select_by_value("allowlist").await.unwrap();
    click(client, "#policy form[action$='/policy'] button[type=submit]").await;
    // The change is shown before anything is saved.
    wait_for_text(client, "Nothing is saved yet").await;
    assert_eq!(plane.policy()["version"], 0, "not saved before the confirmation");
    browser.screenshot("browser-policy-confirm").await;
    assert_accessible(&browser, "the policy's confirmation").await;
    click(client, "button[name=action][value=save]").await;
    wait_for_text(client, "Policy saved as version 1.").await;
    let policy = plane.policy();
    assert_eq!(policy["version"], 1, "{policy}");
    assert_eq!(policy["policy"]["mode"], "allowlist", "{policy}");
    assert_eq!(policy["actor"], "person:ada", "{policy}");

    // A run's sandbox asks for a host by name: refused by the policy.
    let (run_id, proxy) = plane.new_run();
    let target = format!("http://api.needed.test:{}/repo", plane.echo.port);
    let out = sandbox_get(&proxy, &target);
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: policy_not_allowed"),
        "{out}"
    );
    assert_eq!(plane.echo.count(), 0, "nothing reached the upstream");
    // Another host it needs, refused too: it stays on the page as a
    // candidate to allow (so every section has something in it).
    let out = sandbox_get(&proxy, &format!("http://telemetry.needed.test:{}/", plane.echo.port));
    assert!(out.contains("x-gatehouse-reason: policy_not_allowed"), "{out}");

    // The refusal is on the page, with the rule column empty and an Allow button.
    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    wait_for_text(client, "Recent refusals").await;
    let row = client
        .find(Locator::XPath("//section[@id='refusals']//tr[td/code[text()='api.needed.test']]"))
        .await
        .expect("the refusal is listed under Recent refusals");
    let row_text = row.text().await.unwrap();
    assert!(row_text.contains("egress_refused") && row_text.contains("policy_not_allowed"), "{row_text}");
    assert!(row_text.contains(&run_id), "{row_text}");
    screenshot_section(&browser, "refusals", "browser-tenant-refusals").await;
    click(client, "#refusals button[aria-label='Allow api.needed.test']").await;

    // The confirmation shows the change before anything is saved.
    wait_for_text(client, "Allow api.needed.test for t1").await;
    let diff = client.find(Locator::Css("pre.diff")).await.unwrap().text().await.unwrap();
    assert_eq!(diff.trim(), "+ api.needed.test", "the allow list gains exactly this host");
    assert_eq!(plane.policy()["version"], 1, "nothing is saved before the confirmation");
    browser.screenshot("browser-allow-confirm").await;
    assert_accessible(&browser, "the Allow confirmation page").await;
    click(client, "form[action$='/allow/confirm'] button[type=submit]").await;
    wait_for_text(client, "api.needed.test is allowed (policy version 2).").await;
    let policy = plane.policy();
    assert_eq!(policy["policy"]["allow"], json!(["api.needed.test"]), "{policy}");

    // The same request now passes, the name resolved by the door.
    let out = sandbox_get(&proxy, &target);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(plane.echo.count(), 1);
    assert!(plane.echo.last().starts_with("GET /repo HTTP/1.1"), "{}", plane.echo.last());
    assert!(plane.dns.was_asked("api.needed.test"), "the allowed name was looked up");

    // A credential (its name a hostile tenant's), a lease of it for the
    // run, and a scan with a finding: data in every section of the page.
    let credential = plane.call(
        "POST",
        "/v1/tenants/t1/credentials",
        json!({"name": format!("{HOSTILE} deploy key"), "purpose": "git_provider", "host": "api.needed.test",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"},
            "allow_plain_http": true, "secret": "browser-test-secret-5e1f0a"}),
    );
    let credential_id = credential["credential_id"].as_str().unwrap_or_else(|| panic!("{credential}"));
    let lease = plane.call(
        "POST",
        &format!("/v1/runs/{run_id}/leases"),
        json!({"credential_id": credential_id, "purpose": "git_provider", "host": "api.needed.test"}),
    );
    let lease_id = lease["lease_id"].as_str().unwrap_or_else(|| panic!("{lease}")).to_owned();
    let out = sandbox_get(&proxy, &target);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        plane.echo.last().contains("authorization: Bearer browser-test-secret-5e1f0a"),
        "the lease injects: {}",
        plane.echo.last()
    );
    submit_scan(&plane);

    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    let text = wait_for_text(client, "Live credential leases").await;
    let lease_row = client
        .find(Locator::XPath(&format!("//section[@id='leases']//tr[td/code[text()='{lease_id}']]")))
        .await
        .expect("the lease is listed under Live credential leases");
    let lease_text = lease_row.text().await.unwrap();
    assert!(lease_text.contains(&format!("{HOSTILE} deploy key")), "the name is shown as text: {lease_text}");
    assert!(lease_text.contains(&run_id) && lease_text.contains("api.needed.test"), "{lease_text}");
    assert_no_script_ran(client, "t1 · gatehouse").await;
    for shown in
        ["telemetry.needed.test", "GHSA-35jh-r3h4-6jhm", "lodash", "Reachable", "Engage the kill switch"]
    {
        assert!(text.contains(shown), "{shown} on the page:\n{text}");
    }
    browser.screenshot("browser-tenant").await;
    for section in ["policy", "allow", "gate", "scanner", "runs", "leases", "kill"] {
        screenshot_section(&browser, section, &format!("browser-tenant-{section}")).await;
    }
    assert_accessible(&browser, "the tenant page with every section filled").await;

    // Test a URL, from the page: the door's decision, with the addresses.
    type_into(client, "test-url", &format!("http://api.needed.test:{}/", plane.echo.port)).await;
    click(client, "form[action$='/test-url'] button[type=submit]").await;
    let verdict = wait_for_text(client, "Addresses:").await;
    assert!(verdict.contains("allow") && verdict.contains("127.0.0.1"), "{verdict}");
    screenshot_section(&browser, "policy", "browser-tenant-test-url").await;
    assert_accessible(&browser, "the tenant page with a URL's verdict").await;

    // Revoke the lease from the page: the next injected request is refused.
    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    wait_for_text(client, "Live credential leases").await;
    click(client, &format!("button[aria-label='Revoke lease {lease_id}']")).await;
    wait_for_text(client, "No run holds a live lease.").await;
    let leases = plane.call("GET", &format!("/v1/leases?run_id={run_id}"), json!({}));
    assert_eq!(leases["items"][0]["status"], "revoked", "{leases}");
    let seen = plane.echo.count();
    let out = sandbox_get(&proxy, &target);
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: lease_revoked"), "{out}");
    assert_eq!(plane.echo.count(), seen, "nothing reached the upstream");

    // The kill switch, engaged from the page: the run is killed.
    type_into(client, "kill-reason", "leak drill").await;
    click(client, "#kill button.danger").await;
    wait_for_text(client, "Kill switch engaged: 1 run(s) killed").await;
    let status = client
        .find(Locator::XPath(&format!("//section[@id='runs']//tr[td/code[text()='{run_id}']]/td[3]")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(status.starts_with("killed"), "the run shows as killed: {status}");
    let run = plane.call("GET", &format!("/v1/runs/{run_id}"), json!({}));
    assert_eq!(run["status"], "killed", "{run}");
    let out = sandbox_get(&proxy, &target);
    assert!(out.starts_with("HTTP/1.1 40"), "a killed run's sandbox gets nothing: {out}");
    screenshot_section(&browser, "kill", "browser-tenant-kill-switch").await;
    screenshot_section(&browser, "runs", "browser-tenant-runs-killed").await;
    assert_accessible(&browser, "the tenant page with the kill switch engaged").await;

    // The index lists the tenant with what the person did.
    client.goto(&plane.url("/admin")).await.unwrap();
    let index = wait_for_text(client, "Tenants with settings").await;
    assert!(index.contains("allowlist (version 2)") && index.contains("engaged"), "{index}");
    browser.screenshot("browser-tenants").await;
    assert_accessible(&browser, "the tenants index").await;

    let audit = plane.call("GET", "/v1/audit?limit=500", json!({}));
    let by_ada: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["actor"] == "person:ada")
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in ["admin.sign_in", "policy.set", "kill_switch.engage"] {
        assert!(by_ada.contains(&action), "{action} by person:ada in {by_ada:?}");
    }
    browser.close().await;
}

/// A tenant's hostile text is text on the page, and a form posted without
/// its anti-forgery token is refused and changes nothing.
#[tokio::test]
async fn hostile_text_stays_text_and_a_form_without_its_token_changes_nothing() {
    let plane = Plane::start();
    let (run_id, _) = plane.new_run();
    let browser = Browser::start().await;
    let client = browser.client();
    client.goto(&plane.url("/admin/login")).await.unwrap();
    wait_for_text(client, "Your name").await;
    sign_in(client, PASSWORD).await;
    wait_for_text(client, "Signed in as person:ada").await;

    // A credential named by a hostile tenant, under an allowlist that does
    // not allow its host: offered in Allow hosts, its name as text.
    plane.call("PUT", "/v1/tenants/t1/egress-policy", json!({"mode": "allowlist", "allow": ["a.test"]}));
    let credential = plane.call(
        "POST",
        "/v1/tenants/t1/credentials",
        json!({"name": HOSTILE, "purpose": "git_provider", "host": "git.needed.test",
            "inject": {"basic_username": "x-access-token"}, "secret": "browser-test-secret-9c2d"}),
    );
    assert!(credential["credential_id"].is_string(), "{credential}");
    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    let text = wait_for_text(client, "Allow hosts").await;
    assert!(text.contains(&format!("the credential {HOSTILE} reaches it")), "{text}");
    assert_no_script_ran(client, "t1 · gatehouse").await;

    // The kill switch's reason, hostile too.
    type_into(client, "kill-reason", &format!("{HOSTILE} leak")).await;
    click(client, "#kill button.danger").await;
    let text = wait_for_text(client, "Kill switch engaged: 1 run(s) killed").await;
    assert!(text.contains(&format!("Engaged: {HOSTILE} leak.")), "the reason is shown as text: {text}");
    assert_no_script_ran(client, "t1 · gatehouse").await;
    let shown = client.find(Locator::Css("#kill p")).await.unwrap().html(true).await.unwrap();
    assert!(shown.contains("&lt;script&gt;"), "escaped in the markup: {shown}");
    assert_eq!(plane.call("GET", &format!("/v1/runs/{run_id}"), json!({}))["status"], "killed");
    screenshot_section(&browser, "kill", "browser-hostile-kill-reason").await;

    // The policy form without its token: refused, nothing changed.
    let before = plane.policy();
    let mode = client.find(Locator::Id("mode")).await.unwrap();
    mode.select_by_value("open").await.unwrap();
    type_into(client, "allow-rules", "evil.test").await;
    let removed = client
        .execute(
            "const field = document.querySelector(\"#policy form[action$='/policy'] input[name=csrf]\");
             field.remove();
             return document.querySelectorAll(\"#policy form[action$='/policy'] input[name=csrf]\").length;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(removed, json!(0), "the form has no token left");
    click(client, "#policy form[action$='/policy'] button[type=submit]").await;
    let refused = wait_for_text(client, "Form refused").await;
    assert!(refused.contains("admin_csrf_invalid") && refused.contains("Nothing was changed"), "{refused}");
    assert_eq!(plane.policy(), before, "the policy is as it was");
    browser.screenshot("browser-form-refused").await;
    assert_accessible(&browser, "the Form refused page").await;
    let refusals = plane.call("GET", "/v1/refusals?reason=admin_csrf_invalid", json!({}));
    assert_eq!(refusals["items"].as_array().map(Vec::len), Some(1), "{refusals}");

    // The same with the kill switch's release: still engaged.
    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    wait_for_text(client, "Release the kill switch").await;
    client
        .execute("document.querySelector(\"#kill form input[name=csrf]\").remove();", vec![])
        .await
        .unwrap();
    click(client, "#kill form button[type=submit]").await;
    wait_for_text(client, "Form refused").await;
    let refused = plane.call(
        "POST",
        "/v1/runs",
        json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "print(1)"}}),
    );
    assert_eq!(refused["error"]["reason"], "tenant_kill_switch", "still engaged: {refused}");

    // Emergency revoke: the confirmation names what it will do.
    client.goto(&plane.url("/admin")).await.unwrap();
    wait_for_text(client, "Emergency revoke").await;
    click(client, "a.button.danger").await;
    let confirm = wait_for_text(client, "This will kill").await;
    assert!(confirm.contains("This will kill 0 live run(s) of every tenant"), "{confirm}");
    browser.screenshot("browser-emergency-revoke").await;
    assert_accessible(&browser, "the emergency revoke confirmation").await;
    // axe really checks the served page: a field stripped of its label is found.
    client
        .execute("document.querySelector(\"label[for='emergency-reason']\").remove();", vec![])
        .await
        .unwrap();
    let found: Vec<Value> = browser.axe_violations().await.iter().map(|v| v["id"].clone()).collect();
    assert_eq!(found, [json!("label")], "axe sees the unlabelled field");

    // Sign out everywhere: another person's session (signed in elsewhere)
    // ends with this one.
    let elsewhere = curl_sign_in(&plane, "bob");
    assert_eq!(curl_admin(&plane, &elsewhere), "200 ", "bob is signed in");
    client.goto(&plane.url("/admin")).await.unwrap();
    wait_for_text(client, "Sign out everywhere").await;
    click(client, "form[action='/admin/logout-everywhere'] button[type=submit]").await;
    let after = wait_for_text(client, "Your name").await;
    assert!(!after.contains("Signed in as"), "{after}");
    assert_eq!(client.current_url().await.unwrap().path(), "/admin/login");
    assert_eq!(curl_admin(&plane, &elsewhere), "303 /admin/login?expired=1", "bob's session ended too");
    let audit = plane.call("GET", "/v1/audit?limit=500", json!({}));
    let everywhere =
        audit["items"].as_array().unwrap().iter().find(|e| e["action"] == "admin.sign_out_everywhere");
    assert_eq!(everywhere.map(|e| e["actor"].clone()), Some(json!("person:ada")), "{audit}");
    browser.close().await;
}

/// A person tests a stored credential from its row (the answer shown
/// scrubbed of the secret, the call audited under their name) and opens a
/// run's security checks from its row: its files with their verdicts and
/// its uploads refused as content. Both pages pass axe-core.
#[tokio::test]
async fn a_person_tests_a_credential_and_reads_a_runs_security_checks() {
    const SECRET: &str = "browser-person-secret-73c1d9e0";
    let clamd = gatehouse_test_support::ClamdServer::start();
    let plane = Plane::with_clamd(clamd.port());
    let credential = plane.call(
        "POST",
        "/v1/tenants/t1/credentials",
        json!({"name": format!("{HOSTILE} runtime"), "purpose": "runtime_secret", "host": "api.needed.test",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"},
            "allow_plain_http": true, "secret": SECRET}),
    );
    let credential_id =
        credential["credential_id"].as_str().unwrap_or_else(|| panic!("{credential}")).to_owned();
    // A run that writes a report, then tries an executable and EICAR.
    let run = plane.call(
        "POST",
        "/v1/runs",
        json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "print(1)"}, "output_session_id": "out-1",
            "budgets": {"max_upload_bytes": 10_000, "max_output_files": 5}}),
    );
    let run_id = run["run_id"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned();
    let grant = run["grant"].as_str().unwrap().to_owned();
    let upload = |name: &str, content: &[u8]| {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), content).unwrap();
        let out = Command::new("curl")
            .args(["-s", "-S", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT"])
            .args(["-H", &format!("authorization: Bearer {grant}"), "--data-binary"])
            .arg(format!("@{}", file.path().display()))
            .arg(plane.url(&format!("/v1/sessions/out-1/files/{name}")))
            .output()
            .expect("curl is installed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(upload("report.md", b"# all good\n"), "201");
    assert_eq!(upload("tool.exe", &[b"MZ\x90\x00\x03".as_slice(), &[0u8; 59]].concat()), "403");
    assert_eq!(upload("eicar.txt", gatehouse_test_support::EICAR), "403");

    let browser = Browser::start().await;
    let client = browser.client();
    client.goto(&plane.url("/admin/login")).await.unwrap();
    wait_for_text(client, "Your name").await;
    sign_in(client, PASSWORD).await;
    wait_for_text(client, "Signed in as person:ada").await;
    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    wait_for_text(client, "Credentials").await;
    let field = client.find(Locator::Id(&format!("test-{credential_id}"))).await.unwrap();
    assert_eq!(
        field.prop("value").await.unwrap().as_deref(),
        Some("http://api.needed.test/"),
        "the host's root"
    );
    type_into(
        client,
        &format!("test-{credential_id}"),
        &format!("http://api.needed.test:{}/v1/me", plane.echo.port),
    )
    .await;
    click(client, &format!("form[action*='/credentials/{credential_id}/test'] button")).await;
    let shown = wait_for_text(client, "Status 200").await;
    assert!(
        plane.echo.last().contains(&format!("authorization: Bearer {SECRET}")),
        "the credential went in: {}",
        plane.echo.last()
    );
    let body = client.find(Locator::Css("#credential-test pre.body")).await.unwrap().text().await.unwrap();
    assert!(body.contains("GET /v1/me HTTP/1.1"), "{body}");
    assert!(body.contains("authorization: Bearer gatehouse_credential_redacted"), "scrubbed: {body}");
    let html = client.source().await.unwrap();
    assert!(!shown.contains(SECRET) && !html.contains(SECRET), "the page never holds the secret");
    assert_no_script_ran(client, "t1 · gatehouse").await;
    screenshot_section(&browser, "credentials", "browser-credential-test").await;
    assert_accessible(&browser, "the tenant page with a credential's test").await;
    // Off the credential's host: refused, said why, nothing sent.
    let sent = plane.echo.count();
    type_into(client, &format!("test-{credential_id}"), "http://elsewhere.test/").await;
    click(client, &format!("form[action*='/credentials/{credential_id}/test'] button")).await;
    // (Every reason code is on the page already, in the refusal filter.)
    wait_for_text(client, "Not sent or not answered").await;
    let verdict = client.find(Locator::Id("credential-test")).await.unwrap().text().await.unwrap();
    assert!(verdict.contains("lease_host_mismatch"), "{verdict}");
    assert!(verdict.contains("not on the credential's host"), "{verdict}");
    assert_eq!(plane.echo.count(), sent, "nothing went out");
    assert_accessible(&browser, "the tenant page with a refused test").await;

    // The run's security checks, from its row.
    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    wait_for_text(client, "Runs").await;
    click(client, &format!("a[aria-label='Security checks of run {run_id}']")).await;
    let checks = wait_for_text(client, "Uploads refused as content").await;
    assert_eq!(
        client.current_url().await.unwrap().path(),
        format!("/admin/tenants/t1/runs/{run_id}/artifacts")
    );
    let files = client.find(Locator::Css("#files tbody")).await.unwrap().text().await.unwrap();
    assert!(files.contains("report.md") && files.contains("clean"), "{files}");
    let refused = client.find(Locator::Css("#refused-uploads tbody")).await.unwrap().text().await.unwrap();
    assert!(refused.contains("tool.exe") && refused.contains("content_executable"), "{refused}");
    assert!(refused.contains("eicar.txt") && refused.contains("content_malware"), "{refused}");
    assert!(!checks.contains(SECRET));
    browser.screenshot("browser-run-security-checks").await;
    assert_accessible(&browser, "a run's security checks").await;
    // Another tenant's run is not found under this tenant.
    client.goto(&plane.url(&format!("/admin/tenants/t2/runs/{run_id}/artifacts"))).await.unwrap();
    wait_for_text(client, "Not found").await;

    let audit = plane.call("GET", "/v1/audit?limit=100", json!({}));
    let uses: Vec<&Value> =
        audit["items"].as_array().unwrap().iter().filter(|e| e["action"] == "credential.use").collect();
    assert_eq!(uses.len(), 2, "{audit}");
    assert!(uses.iter().all(|e| e["actor"] == "person:ada"), "{audit}");
    assert_eq!(uses[0]["detail"]["status"], 200);
    assert_eq!(uses[1]["detail"]["refused"], "lease_host_mismatch");
    assert!(!audit.to_string().contains(SECRET));
    browser.close().await;
}

/// A person edits rule objects (methods, paths, a deny's reason, an
/// expiry) and default methods on the page: the change is shown before it
/// is saved, it is stored as written, the door's decision names the deny's
/// reason, and an expired rule is listed as such. Every page passes axe.
#[tokio::test]
async fn a_person_edits_rule_objects_and_sees_the_change_before_it_is_saved() {
    let plane = Plane::start();
    let browser = Browser::start().await;
    let client = browser.client();
    client.goto(&plane.url("/admin/login")).await.unwrap();
    wait_for_text(client, "Your name").await;
    sign_in(client, PASSWORD).await;
    wait_for_text(client, "Signed in as person:ada").await;
    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    wait_for_text(client, "Egress policy").await;

    client.find(Locator::Id("mode")).await.unwrap().select_by_value("allowlist").await.unwrap();
    type_into(client, "default-methods", "GET HEAD").await;
    let allow = [
        "api.needed.test",
        r#"{"host": "api.needed.test", "methods": ["POST"], "paths": ["/v1/"]}"#,
        r#"{"host": "old.needed.test", "expires_at": "2001-01-01T00:00:00Z"}"#,
        r#"{"preset": "debian"}"#,
    ];
    type_into(client, "allow-rules", &allow.join("\n")).await;
    type_into(
        client,
        "deny-rules",
        r#"{"host": "api.needed.test", "methods": ["DELETE"], "reason": "agents never delete here"}"#,
    )
    .await;
    click(client, "#policy form[action$='/policy'] button[type=submit]").await;
    let shown = wait_for_text(client, "Nothing is saved yet").await;
    for line in [
        "+ api.needed.test",
        r#"+ {"host":"api.needed.test","methods":["POST"],"paths":["/v1/"]}"#,
        "Default methods: GET HEAD",
        "Mode: allowlist",
    ] {
        assert!(shown.contains(line), "{line} in:\n{shown}");
    }
    assert_eq!(plane.policy()["version"], 0, "nothing saved yet");
    browser.screenshot("browser-policy-rules-confirm").await;
    assert_accessible(&browser, "the confirmation of rule objects").await;
    click(client, "button[name=action][value=save]").await;
    wait_for_text(client, "Policy saved as version 1.").await;
    let policy = plane.policy();
    assert_eq!(policy["policy"]["default_methods"], json!(["GET", "HEAD"]), "{policy}");
    assert_eq!(
        policy["policy"]["allow"][1],
        json!({"host": "api.needed.test", "methods": ["POST"], "paths": ["/v1/"]})
    );
    assert_eq!(policy["policy"]["deny"][0]["reason"], "agents never delete here", "{policy}");
    // The form shows the rules as saved, and the expired one as expired.
    let text = page_text(client).await;
    assert!(text.contains("Expired, and ignored by the door"), "{text}");
    assert!(text.contains("Preset debian") && text.contains("deb.debian.org, security.debian.org"), "{text}");
    assert!(text.contains(r#"{"expires_at":"2001-01-01T00:00:00Z","host":"old.needed.test"}"#), "{text}");
    let saved = client
        .find(Locator::Id("allow-rules"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(saved.contains(r#"{"host":"api.needed.test","methods":["POST"],"paths":["/v1/"]}"#), "{saved}");

    // Test a URL with a method: the deny's reason is shown.
    client.find(Locator::Id("test-method")).await.unwrap().select_by_value("DELETE").await.unwrap();
    type_into(client, "test-url", &format!("http://api.needed.test:{}/v1/x", plane.echo.port)).await;
    click(client, "form[action$='/test-url'] button[type=submit]").await;
    let verdict = wait_for_text(client, "agents never delete here").await;
    assert!(verdict.contains("policy_denied"), "{verdict}");
    assert_accessible(&browser, "the tenant page with a rule's verdict").await;
    client.find(Locator::Id("test-method")).await.unwrap().select_by_value("PUT").await.unwrap();
    click(client, "form[action$='/test-url'] button[type=submit]").await;
    // Every reason code is on the page (the refusal filter): wait for the
    // verdict's own text.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let verdict = client.execute(
            "const v = document.querySelector('#policy .verdict'); return v ? v.innerText : '';",
            vec![],
        );
        if verdict
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .is_some_and(|v| v.contains("policy_method_not_allowed"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "the verdict never said policy_method_not_allowed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    screenshot_section(&browser, "policy", "browser-policy-rules").await;

    // A bad rule is refused naming the entry, the text kept.
    type_into(client, "allow-rules", r#"{"host": "x.test", "methods": ["get"]}"#).await;
    click(client, "#policy form[action$='/policy'] button[type=submit]").await;
    let refused = wait_for_text(client, "Not saved").await;
    assert!(refused.contains("IANA"), "{refused}");
    assert_eq!(plane.policy()["version"], 1);
    browser.close().await;
}

/// Runs ask, a person decides on the page: a request refused by the
/// policy names its proposal, which the page lists; approved once, that
/// run's same request passes and another run's does not; approved always,
/// the policy gains exactly that rule; denied, nothing changes. Every
/// decision is audited under the person's name; the page passes axe.
#[tokio::test]
async fn a_person_approves_runs_asks_once_and_always_and_denies_one() {
    let plane = Plane::start();
    plane.call(
        "PUT",
        "/v1/tenants/t1/egress-policy",
        json!({"mode": "allowlist", "allow": ["docs.needed.test"]}),
    );
    let (run_a, proxy_a) = plane.new_run();
    let (run_b, proxy_b) = plane.new_run();
    let api_url = format!("http://api.needed.test:{}/repo", plane.echo.port);
    let out = sandbox_get(&proxy_a, &api_url);
    assert!(out.contains("x-gatehouse-reason: policy_not_allowed"), "{out}");
    let once = out
        .lines()
        .find_map(|l| l.strip_prefix("x-gatehouse-proposal: "))
        .unwrap_or_else(|| panic!("the refusal names its proposal: {out}"))
        .trim()
        .to_owned();
    let other_url = format!("http://other.needed.test:{}/", plane.echo.port);
    let out = sandbox_get(&proxy_b, &other_url);
    let always =
        out.lines().find_map(|l| l.strip_prefix("x-gatehouse-proposal: ")).unwrap().trim().to_owned();
    let asked = plane.call(
        "POST",
        &format!("/v1/runs/{run_b}/egress-proposals"),
        json!({"host": "telemetry.needed.test", "methods": ["POST"], "why": "<b>send</b> usage numbers"}),
    );
    let denied = asked["proposal_id"].as_str().unwrap_or_else(|| panic!("{asked}")).to_owned();

    let browser = Browser::start().await;
    let client = browser.client();
    client.goto(&plane.url("/admin/login")).await.unwrap();
    wait_for_text(client, "Your name").await;
    sign_in(client, PASSWORD).await;
    wait_for_text(client, "Signed in as person:ada").await;
    client.goto(&plane.url("/admin/tenants/t1")).await.unwrap();
    let page = wait_for_text(client, "Egress proposals").await;
    for shown in [run_a.as_str(), run_b.as_str(), "<b>send</b> usage numbers", "refused: policy_not_allowed"]
    {
        assert!(page.contains(shown), "{shown} on the page:\n{page}");
    }
    assert_no_script_ran(client, "t1 · gatehouse").await;
    screenshot_section(&browser, "proposals", "browser-tenant-proposals").await;
    assert_accessible(&browser, "the tenant page with proposals").await;

    click(client, &format!("button[aria-label='Approve once {once} (this run)']")).await;
    wait_for_text(client, &format!("Approved for run {run_a}")).await;
    let out = sandbox_get(&proxy_a, &api_url);
    assert!(out.starts_with("HTTP/1.1 200"), "approved for this run: {out}");
    let out = sandbox_get(&proxy_b, &api_url);
    assert!(out.contains("x-gatehouse-reason: policy_not_allowed"), "not for another run: {out}");

    click(client, &format!("button[aria-label='Approve always {always} (the tenant)']")).await;
    wait_for_text(client, "Approved for the tenant").await;
    let policy = plane.policy();
    assert_eq!(policy["version"], 2, "{policy}");
    let exact = json!({"host": format!("other.needed.test:{}", plane.echo.port), "methods": ["GET"]});
    assert_eq!(policy["policy"]["allow"], json!(["docs.needed.test", exact]), "exactly that rule: {policy}");
    assert!(sandbox_get(&proxy_b, &other_url).starts_with("HTTP/1.1 200"));

    click(client, &format!("button[aria-label='Deny {denied}']")).await;
    wait_for_text(client, "Denied:").await;
    // What is left: run B's own ask, made when it was refused above.
    let rows = client.find_all(Locator::Css("#proposals tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 1);
    let left = rows[0].text().await.unwrap();
    assert!(left.contains(&run_b) && left.contains("api.needed.test"), "{left}");
    assert_accessible(&browser, "the tenant page after the decisions").await;
    assert_eq!(plane.call("GET", &format!("/v1/egress-proposals/{denied}"), json!({}))["status"], "denied");

    let audit = plane.call("GET", "/v1/audit?limit=100", json!({}));
    let decisions: Vec<(&str, &str)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"].as_str().is_some_and(|a| a.starts_with("proposal.")))
        .map(|e| (e["action"].as_str().unwrap(), e["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("proposal.approve", "person:ada"),
            ("proposal.approve", "person:ada"),
            ("proposal.deny", "person:ada")
        ],
        "{audit}"
    );
    browser.close().await;
}

/// Signs `person` in over plain HTTP (curl, another browser as far as the
/// page knows); returns the `name=value` of its session cookie.
fn curl_sign_in(plane: &Plane, person: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-", "-o", "/dev/null"])
        .args([
            "--data-urlencode",
            &format!("person={person}"),
            "--data-urlencode",
            &format!("password={PASSWORD}"),
        ])
        .arg(plane.url("/admin/login"))
        .output()
        .expect("curl is installed");
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    let cookie = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().starts_with("set-cookie:").then(|| l["set-cookie:".len()..].trim())
        })
        .unwrap_or_else(|| panic!("no session cookie: {head}"));
    cookie.split(';').next().unwrap().to_owned()
}

/// `GET /admin` with `cookie`: the status and where it sends the visitor.
fn curl_admin(plane: &Plane, cookie: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}"])
        .args(["-b", cookie])
        .arg(plane.url("/admin"))
        .output()
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.replace(&format!("http://{}", plane.api), "")
}

/// A dependency scan of a pull request with one known vulnerability (the
/// offline OSV fixture knows lodash 4.17.20).
fn submit_scan(plane: &Plane) {
    let lock = |version: &str| {
        let text = json!({"name": "app", "lockfileVersion": 3, "requires": true, "packages": {
            "": {"name": "app", "version": "1.0.0"},
            "node_modules/lodash": {"version": version}}})
        .to_string();
        base64::engine::general_purpose::STANDARD.encode(text)
    };
    let scan = plane.call(
        "POST",
        "/v1/tenants/t1/dependency-scans",
        json!({"repository": "octo/app", "pull_request": 7, "head_sha": "0123456789abcdef0123456789abcdef01234567",
            "lockfiles": [{"path": "package-lock.json", "head_base64": lock("4.17.20"), "base_base64": lock("4.17.21")}]}),
    );
    assert_eq!(scan["status"], "ok", "{scan}");
}

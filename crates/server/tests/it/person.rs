//! A person's own request with a stored credential, and a run's
//! artifacts, through the API on SQLite and on PostgreSQL: real upstreams
//! on loopback that echo what they receive, and a canary secret that must
//! reach the upstream and nothing else.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::leases::Echo;
use crate::support::*;

const CANARY: &str = "canary-person-5e1f2a9c7b3d4e60";
const OTHER_TENANT_SECRET: &str = "canary-person-t2-8c1d0e2f3a4b";

/// A node of role `all` that may reach loopback (where the upstreams are),
/// with a rate of `rate` credential uses a minute, on `database` (SQLite in
/// its data directory when `None`).
async fn person_node(database: Option<&str>, rate: &str) -> Node {
    node_on(database, &[("GATEHOUSE_CREDENTIAL_USE_PER_MINUTE", rate)]).await
}

/// A node of role `all` that may reach loopback, on `database` (SQLite in
/// its data directory when `None`), with `extra` settings.
async fn node_on(database: Option<&str>, extra: &[(&str, &str)]) -> Node {
    let mut settings = vec![("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.0/8")];
    settings.extend_from_slice(extra);
    if let Some(url) = database {
        settings.push(("GATEHOUSE_DATABASE_URL", url));
    }
    node_with("all", &settings).await
}

/// A node as [`node_on`], its uploads judged by a real clamd too.
async fn node_with_clamd(database: Option<&str>, clamd: &gatehouse_test_support::ClamdServer) -> Node {
    let port = clamd.port().to_string();
    node_on(
        database,
        &[(gatehouse_config::names::CLAMD_HOST, "127.0.0.1"), (gatehouse_config::names::CLAMD_PORT, &port)],
    )
    .await
}

/// Everything the API answered, kept for the sweep.
#[derive(Default)]
struct Answers(std::cell::RefCell<String>);

impl Answers {
    fn keep(&self, reply: Reply) -> Reply {
        let mut kept = self.0.borrow_mut();
        kept.push_str(&format!("{:?}", reply.headers));
        kept.push_str(&reply.text);
        reply
    }
}

fn person_fetch(url: &str) -> Value {
    json!({"actor": "person:ada", "method": "GET", "url": url})
}

fn reason(reply: &Reply) -> String {
    reply.json()["error"]["reason"].as_str().unwrap_or_default().to_owned()
}

fn decoded(reply: &Reply) -> String {
    let body = reply.json()["body_base64"].as_str().unwrap_or_default().to_owned();
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(body).unwrap()).unwrap()
}

/// The whole life of a person's use of a credential: what goes out, what
/// comes back, and every refusal with its own reason, recorded, with
/// nothing sent. Returns the answers, for the sweep.
async fn a_person_uses_a_stored_credential(node: &Node) -> String {
    let upstream = Echo::start("127.0.0.1", 0);
    let elsewhere = Echo::start("127.0.0.2", upstream.port);
    let answers = Answers::default();
    let post = |path: String, body: Value| {
        let answers = &answers;
        async move { answers.keep(call(node, &path, body).await) }
    };
    let created = post(
        "/v1/tenants/t1/credentials".into(),
        json!({"name": "runtime", "purpose": "runtime_secret", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true,
            "secret": CANARY}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let credential_id = created.json()["credential_id"].as_str().unwrap().to_owned();
    let fetch_path = format!("/v1/tenants/t1/credentials/{credential_id}/fetch");
    let target = format!("http://127.0.0.1:{}/v1/models?key=typed-by-ada", upstream.port);

    // The credential goes in by its rule; the echo of it comes back
    // scrubbed, in the body and in the header.
    let answer = post(fetch_path.clone(), person_fetch(&target)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json()["status"], 200, "{}", answer.text);
    assert!(upstream.last().contains(&format!("authorization: Bearer {CANARY}\r\n")), "{}", upstream.last());
    let body = decoded(&answer);
    assert!(body.contains("GET /v1/models?key=typed-by-ada"), "{body}");
    assert!(body.contains("authorization: Bearer gatehouse_credential_redacted"), "{body}");
    assert!(
        answer.text.contains("Bearer gatehouse_credential_redacted"),
        "the echoing header too: {}",
        answer.text
    );
    // Audited under the person's name: the method, the host and the path
    // (no query), the status.
    let audit = answers.keep(get(node, "/v1/audit?limit=100").await).json();
    let used: Vec<&Value> =
        audit["items"].as_array().unwrap().iter().filter(|e| e["action"] == "credential.use").collect();
    assert_eq!(used.len(), 1, "{audit}");
    assert_eq!(used[0]["actor"], "person:ada");
    assert_eq!(used[0]["tenant_id"], "t1");
    assert_eq!(used[0]["subject"], credential_id.as_str());
    let detail = &used[0]["detail"];
    assert_eq!(
        (&detail["method"], &detail["host"], &detail["path"], &detail["status"]),
        (&json!("GET"), &json!("127.0.0.1"), &json!("/v1/models"), &json!(200)),
        "{detail}"
    );

    // Each bad input: its own reason, recorded, nothing sent.
    let sent = upstream.count();
    let off_host =
        post(fetch_path.clone(), person_fetch(&format!("http://127.0.0.2:{}/", upstream.port))).await;
    assert_eq!(
        (off_host.status, reason(&off_host).as_str()),
        (403, "lease_host_mismatch"),
        "{}",
        off_host.text
    );
    assert_eq!(elsewhere.count(), 0, "nothing reached another host");
    let not_a_person = post(fetch_path.clone(), json!({"actor": "ada", "url": target})).await;
    assert_eq!((not_a_person.status, reason(&not_a_person).as_str()), (400, "actor_invalid"));
    let an_agent = post(fetch_path.clone(), json!({"actor": "agent:x", "url": target})).await;
    assert_eq!(reason(&an_agent), "actor_invalid");
    let theirs = post(
        "/v1/tenants/t2/credentials".into(),
        json!({"name": "theirs", "purpose": "runtime_secret", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true,
            "secret": OTHER_TENANT_SECRET}),
    )
    .await;
    let theirs_id = theirs.json()["credential_id"].as_str().unwrap().to_owned();
    let crossed = post(format!("/v1/tenants/t1/credentials/{theirs_id}/fetch"), person_fetch(&target)).await;
    assert_eq!((crossed.status, reason(&crossed).as_str()), (404, "credential_unknown"), "{}", crossed.text);
    let tls_only = post(
        "/v1/tenants/t1/credentials".into(),
        json!({"name": "tls-only", "purpose": "runtime_secret", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "secret": CANARY}),
    )
    .await;
    let tls_only_id = tls_only.json()["credential_id"].as_str().unwrap().to_owned();
    let plain = post(format!("/v1/tenants/t1/credentials/{tls_only_id}/fetch"), person_fetch(&target)).await;
    assert_eq!(reason(&plain), "lease_plain_http", "{}", plain.text);
    let signing = post(
        "/v1/tenants/t1/credentials".into(),
        json!({"name": "hooks", "purpose": "webhook_signing", "host": "127.0.0.1", "secret": "whsec_person0123456789"}),
    )
    .await;
    let signing_id = signing.json()["credential_id"].as_str().unwrap().to_owned();
    let signs = post(format!("/v1/tenants/t1/credentials/{signing_id}/fetch"), person_fetch(&target)).await;
    assert_eq!(reason(&signs), "lease_purpose_mismatch", "{}", signs.text);
    // The tenant's policy and the address guard apply.
    let policy = answers.keep(
        put(node, "/v1/tenants/t1/egress-policy", json!({"mode": "allowlist", "allow": ["api.example.com"]}))
            .await,
    );
    assert_eq!(policy.status, 200, "{}", policy.text);
    let not_allowed = post(fetch_path.clone(), person_fetch(&target)).await;
    assert_eq!(reason(&not_allowed), "policy_not_allowed", "{}", not_allowed.text);
    answers.keep(put(node, "/v1/tenants/t1/egress-policy", json!({"mode": "open"})).await);
    // A kill-switched tenant is refused.
    assert_eq!(post("/v1/tenants/t1/kill-switch".into(), json!({"engaged": true})).await.status, 200);
    let killed = post(fetch_path.clone(), person_fetch(&target)).await;
    assert_eq!((killed.status, reason(&killed).as_str()), (403, "tenant_kill_switch"), "{}", killed.text);
    assert_eq!(post("/v1/tenants/t1/kill-switch".into(), json!({"engaged": false})).await.status, 200);
    // A deleted credential is gone.
    let doomed = post(
        "/v1/tenants/t1/credentials".into(),
        json!({"name": "doomed", "purpose": "runtime_secret", "host": "127.0.0.1",
            "inject": {"basic_username": "x-access-token"}, "allow_plain_http": true, "secret": CANARY}),
    )
    .await;
    let doomed_id = doomed.json()["credential_id"].as_str().unwrap().to_owned();
    let delete = http::Request::delete(format!("/v1/tenants/t1/credentials/{doomed_id}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(send(&node.router, delete).await.status, 200);
    let deleted = post(format!("/v1/tenants/t1/credentials/{doomed_id}/fetch"), person_fetch(&target)).await;
    assert_eq!((deleted.status, reason(&deleted).as_str()), (404, "credential_unknown"));
    assert_eq!(upstream.count(), sent, "no refused request went out");

    // The rate (5 a minute here, counted in the ledger): four of this
    // minute's are spent (taken once the credential is known to be usable:
    // the use, the other host, plain HTTP, the policy); one more goes out,
    // the next is refused with when to try again, nothing sent.
    for _ in 0..1 {
        let ok = post(fetch_path.clone(), person_fetch(&target)).await;
        assert_eq!(ok.status, 200, "{}", ok.text);
    }
    let sent = upstream.count();
    let limited = post(fetch_path.clone(), person_fetch(&target)).await;
    assert_eq!(
        (limited.status, reason(&limited).as_str()),
        (429, "credential_use_rate_limited"),
        "{}",
        limited.text
    );
    assert_eq!(limited.json()["error"]["retryable"], true);
    let retry_after: u64 = limited.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(upstream.count(), sent, "nothing sent past the rate");

    // Every refusal is the tenant's, names the person where it knew one,
    // and is outside any run.
    let record = answers.keep(get(node, "/v1/refusals?tenant_id=t1&limit=500").await).json();
    let refusals = record["items"].as_array().unwrap();
    for (kind, why) in [
        ("secret_refused", "lease_host_mismatch"),
        ("secret_refused", "actor_invalid"),
        ("secret_refused", "credential_unknown"),
        ("secret_refused", "lease_plain_http"),
        ("secret_refused", "lease_purpose_mismatch"),
        ("egress_refused", "policy_not_allowed"),
        ("secret_refused", "tenant_kill_switch"),
        ("secret_refused", "credential_use_rate_limited"),
    ] {
        let found = refusals.iter().find(|r| r["kind"] == kind && r["reason"] == why);
        let found = found.unwrap_or_else(|| panic!("{kind} {why} recorded: {record}"));
        assert!(found["run_id"].is_null(), "{found}");
        if why != "actor_invalid" {
            assert_eq!(found["actor"], "person:ada", "{found}");
        }
    }
    answers.0.into_inner()
}

/// `secret` is in none of `places`, in any form or piece of it.
fn assert_nowhere(secret: &str, places: &[(&str, &[u8])]) {
    for (what, bytes) in places {
        assert!(!String::from_utf8_lossy(bytes).contains(secret), "{what} hold a secret");
        gatehouse_test_support::assert_no_key_material(secret.as_bytes(), bytes, what);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_uses_a_stored_credential_on_sqlite() {
    let logs = LogBuffer::global();
    let mark = logs.mark();
    let node = person_node(None, "5").await;
    let answers = a_person_uses_a_stored_credential(&node).await;
    let metrics = get(&node, "/metrics").await.text;
    let mut database = Vec::new();
    for entry in std::fs::read_dir(node.data.path()).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("gatehouse.db") {
            database.extend(std::fs::read(entry.path()).unwrap());
        }
    }
    assert!(database.len() > 4096, "no database under {}", node.data.path().display());
    let logs = logs.since(mark);
    for secret in [CANARY, OTHER_TENANT_SECRET] {
        assert_nowhere(
            secret,
            &[
                ("API answers", answers.as_bytes()),
                ("logs", logs.as_bytes()),
                ("metrics", metrics.as_bytes()),
                ("the database", &database),
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_uses_a_stored_credential_on_postgres() {
    let db = gatehouse_test_support::TestDatabase::create();
    let node = person_node(Some(db.url()), "5").await;
    let answers = a_person_uses_a_stored_credential(&node).await;
    let dump = std::process::Command::new(crate::leases_cluster::pg_dump())
        .args(["--no-owner", "--dbname", db.url()])
        .output()
        .unwrap();
    assert!(dump.status.success(), "pg_dump failed: {}", String::from_utf8_lossy(&dump.stderr));
    assert!(String::from_utf8_lossy(&dump.stdout).contains("credential.use"), "is it the test's database?");
    for secret in [CANARY, OTHER_TENANT_SECRET] {
        assert_nowhere(secret, &[("API answers", answers.as_bytes()), ("the database dump", &dump.stdout)]);
    }
}

/// A run's artifacts: the files it wrote with their verdicts (a file it
/// replaced is not listed twice), its uploads refused as content with
/// their names and reasons; nothing of another run.
async fn a_runs_artifacts_list_what_it_wrote_and_what_was_refused(node: &Node) {
    let create = |output: &'static str| async move {
        let created = call(
            node,
            "/v1/runs",
            json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"}, "output_session_id": output,
                "budgets": {"max_upload_bytes": 1000, "max_output_files": 5}}),
        )
        .await;
        assert_eq!(created.status, 201, "{}", created.text);
        let run = created.json();
        (run["run_id"].as_str().unwrap().to_owned(), run["grant"].as_str().unwrap().to_owned())
    };
    let upload = |grant: String, name: &'static str, content: Vec<u8>| async move {
        let req = http::Request::put(format!("/v1/sessions/out-1/files/{name}"))
            .header("authorization", format!("Bearer {grant}"))
            .header("content-length", content.len())
            .body(axum::body::Body::from(content))
            .unwrap();
        send(&node.router, req).await
    };
    let (run_id, grant) = create("out-1").await;
    assert_eq!(upload(grant.clone(), "report.md", b"# first".to_vec()).await.status, 201);
    assert_eq!(upload(grant.clone(), "report.md", b"# second".to_vec()).await.status, 201);
    assert_eq!(upload(grant.clone(), "data.csv", b"a,b\n1,2\n".to_vec()).await.status, 201);
    let executable = [b"MZ\x90\x00\x03".as_slice(), &[0u8; 59]].concat();
    let refused = upload(grant.clone(), "tool.exe", executable).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let infected = upload(grant.clone(), "eicar.txt", gatehouse_test_support::EICAR.to_vec()).await;
    assert_eq!(infected.status, 403, "{}", infected.text);
    let (other_run, other_grant) = create("out-2").await;
    let req = http::Request::put("/v1/sessions/out-2/files/other.md")
        .header("authorization", format!("Bearer {other_grant}"))
        .header("content-length", 5)
        .body(axum::body::Body::from("other"))
        .unwrap();
    assert_eq!(send(&node.router, req).await.status, 201);

    let artifacts = get(node, &format!("/v1/runs/{run_id}/artifacts")).await;
    assert_eq!(artifacts.status, 200, "{}", artifacts.text);
    assert_eq!(artifacts.headers["x-gatehouse-record-complete"], "true");
    let artifacts = artifacts.json();
    let items = artifacts["items"].as_array().unwrap();
    let names: Vec<&str> = items.iter().filter_map(|i| i["name"].as_str()).collect();
    assert_eq!(names, ["report.md", "data.csv"], "{artifacts}");
    let report = &items[0];
    for field in ["file_id", "name", "bytes", "sha256", "verdict", "at"] {
        assert!(!report[field].is_null(), "{field}: {artifacts}");
    }
    assert_eq!(report["bytes"], 8);
    assert_eq!(report["verdict"], "clean");
    assert_eq!(report["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(artifacts["refused"].as_array().unwrap().len(), 2, "{artifacts}");
    assert_eq!(artifacts["refused"][0]["name"], "tool.exe");
    assert_eq!(artifacts["refused"][0]["reason"], "content_executable");
    assert!(artifacts["refused"][0]["at"].is_i64());
    assert_eq!(artifacts["refused"][1]["name"], "eicar.txt");
    assert_eq!(artifacts["refused"][1]["reason"], "content_malware");
    assert_eq!(artifacts["truncated"], false);
    let other = get(node, &format!("/v1/runs/{other_run}/artifacts")).await.json();
    assert_eq!(other["items"].as_array().unwrap().len(), 1, "{other}");
    assert_eq!(other["refused"], json!([]), "{other}");
    // A scan of one of the run's artifacts by name is listed with it.
    let scan = http::Request::post(format!("/v1/content/scan?tenant_id=t1&run_id={run_id}&name=payload.bin"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(axum::body::Body::from(b"\x7fELF\x02\x01\x01".to_vec()))
        .unwrap();
    assert_eq!(send(&node.router, scan).await.status, 200);
    let again = get(node, &format!("/v1/runs/{run_id}/artifacts")).await.json();
    let refused: Vec<&str> =
        again["refused"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(refused, ["tool.exe", "eicar.txt", "payload.bin"], "{again}");
    let unknown = get(node, "/v1/runs/run_nope/artifacts").await;
    assert_eq!((unknown.status, unknown.json()["error"]["reason"].as_str()), (404, Some("run_unknown")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_artifacts_on_sqlite() {
    let clamd = gatehouse_test_support::ClamdServer::start();
    let node = node_with_clamd(None, &clamd).await;
    a_runs_artifacts_list_what_it_wrote_and_what_was_refused(&node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_artifacts_on_postgres() {
    let db = gatehouse_test_support::TestDatabase::create();
    let clamd = gatehouse_test_support::ClamdServer::start();
    let node = node_with_clamd(Some(db.url()), &clamd).await;
    a_runs_artifacts_list_what_it_wrote_and_what_was_refused(&node).await;
}

/// On a worker, which seals credentials but cannot open them, a person's
/// request is not served: nothing is opened, nothing sent.
#[tokio::test]
async fn a_worker_does_not_serve_a_persons_request() {
    let node = node_with("worker", &[]).await;
    let reply = call(
        &node,
        "/v1/tenants/t1/credentials/cred_x/fetch",
        json!({"actor": "person:ada", "url": "https://api.example.com/"}),
    )
    .await;
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{}",
        reply.text
    );
}

/// The page's Test and Security checks over plain HTTP, on either store:
/// the same audited operation as the API, the answer shown scrubbed, the
/// secret nowhere in the page; a run's files and refused uploads listed.
async fn the_page_tests_a_credential_and_shows_a_runs_checks(node: &Node) {
    use crate::admin::{PASSWORD, Visitor};
    const SECRET: &str = "canary-page-2b7e9d4c1a05f3e8";
    let upstream = Echo::start("127.0.0.1", 0);
    let created = call(
        node,
        "/v1/tenants/t1/credentials",
        json!({"name": "runtime", "purpose": "runtime_secret", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true,
            "secret": SECRET}),
    )
    .await;
    let credential_id = created.json()["credential_id"].as_str().unwrap().to_owned();
    let run = call(
        node,
        "/v1/runs",
        json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"}, "output_session_id": "out-1",
            "budgets": {"max_upload_bytes": 1000, "max_output_files": 5}}),
    )
    .await
    .json();
    let (run_id, grant) = (run["run_id"].as_str().unwrap(), run["grant"].as_str().unwrap());
    for (name, content) in [("notes.md", b"# notes".to_vec()), ("tool.exe", b"\x7fELF\x02\x01\x01".to_vec())]
    {
        let req = http::Request::put(format!("/v1/sessions/out-1/files/{name}"))
            .header("authorization", format!("Bearer {grant}"))
            .header("content-length", content.len())
            .body(axum::body::Body::from(content))
            .unwrap();
        send(&node.router, req).await;
    }

    let mut ada = Visitor::new(node);
    assert_eq!(ada.sign_in("ada", PASSWORD).await.status, 303);
    let page = ada.get("/admin/tenants/t1").await;
    assert!(page.text.contains(&format!(r#"id="test-{credential_id}""#)), "a Test per credential");
    assert!(page.text.contains(r#"value="http://127.0.0.1/""#), "prefilled with the host's root");
    let test = format!("/admin/tenants/t1/credentials/{credential_id}/test");
    let url = format!("http://127.0.0.1:{}/v1/me?q=1", upstream.port);
    let tested = ada.submit("/admin/tenants/t1", &test, &[("url", &url)]).await;
    assert_eq!(tested.status, 200, "{}", tested.text);
    assert!(tested.text.contains("Status <strong>200</strong>"), "{}", tested.text);
    assert!(tested.text.contains("authorization: Bearer gatehouse_credential_redacted"), "{}", tested.text);
    assert!(upstream.last().contains(&format!("authorization: Bearer {SECRET}")), "{}", upstream.last());
    let sent = upstream.count();
    let elsewhere = ada.submit("/admin/tenants/t1", &test, &[("url", "http://127.0.0.2/")]).await;
    assert!(
        elsewhere.text.contains("Not sent or not answered</strong>: <code>lease_host_mismatch</code>"),
        "{}",
        elsewhere.text
    );
    assert_eq!(upstream.count(), sent, "nothing sent off the credential's host");
    let checks = ada.get(&format!("/admin/tenants/t1/runs/{run_id}/artifacts")).await;
    assert_eq!(checks.status, 200, "{}", checks.text);
    assert!(checks.text.contains("notes.md") && checks.text.contains("not_scanned"), "{}", checks.text);
    assert!(
        checks.text.contains("tool.exe") && checks.text.contains("content_executable"),
        "{}",
        checks.text
    );
    assert_eq!(ada.get(&format!("/admin/tenants/t2/runs/{run_id}/artifacts")).await.status, 404);

    let audit = get(node, "/v1/audit?limit=100").await.json();
    let uses: Vec<&Value> =
        audit["items"].as_array().unwrap().iter().filter(|e| e["action"] == "credential.use").collect();
    assert_eq!(uses.len(), 2, "{audit}");
    assert!(uses.iter().all(|u| u["actor"] == "person:ada"), "{audit}");
    let refusals = get(node, "/v1/refusals?reason=lease_host_mismatch").await.json();
    assert_eq!(refusals["items"][0]["actor"], "person:ada", "{refusals}");
    for (what, text) in [
        ("the page", &page.text),
        ("the test's page", &tested.text),
        ("the refused test's page", &elsewhere.text),
        ("the checks", &checks.text),
    ] {
        assert_nowhere(SECRET, &[(what, text.as_bytes())]);
    }
    assert_nowhere(SECRET, &[("the audit", audit.to_string().as_bytes())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_tests_a_credential_and_shows_a_runs_checks_on_sqlite() {
    let node =
        node_on(None, &[(gatehouse_config::names::ADMIN_PASSWORD_HASH, crate::admin::password_hash())]).await;
    the_page_tests_a_credential_and_shows_a_runs_checks(&node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_tests_a_credential_and_shows_a_runs_checks_on_postgres() {
    let db = gatehouse_test_support::TestDatabase::create();
    let node = node_on(
        Some(db.url()),
        &[(gatehouse_config::names::ADMIN_PASSWORD_HASH, crate::admin::password_hash())],
    )
    .await;
    the_page_tests_a_credential_and_shows_a_runs_checks(&node).await;
}

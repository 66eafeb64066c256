//! Dependency scans of pull requests and the gate at the worker's pass,
//! end to end through the API, on SQLite and on PostgreSQL.

use base64::Engine as _;
use gatehouse_config::names;
use gatehouse_test_support::TestDatabase;
use serde_json::{Value, json};

use crate::support::*;

fn osv_mini() -> String {
    format!("{}/tests/fixtures/osv-mini", env!("CARGO_MANIFEST_DIR"))
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// An npm v3 lockfile pinning `packages`.
fn npm_lock(packages: &[(&str, &str)]) -> String {
    let mut entries = serde_json::Map::new();
    entries.insert(String::new(), json!({"name": "app", "version": "1.0.0"}));
    for (name, version) in packages {
        entries.insert(format!("node_modules/{name}"), json!({"version": version}));
    }
    json!({"name": "app", "lockfileVersion": 3, "requires": true, "packages": entries}).to_string()
}

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn submission(pull_request: i64, lockfiles: Value) -> Value {
    json!({"repository": "octo/app", "pull_request": pull_request, "head_sha": SHA, "lockfiles": lockfiles})
}

async fn gate(node: &Node, actor: &str) -> Value {
    let reply = call(
        node,
        "/v1/tenants/t1/gate-checks",
        json!({"repository": "octo/app", "pull_request": 7, "actor": actor}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()
}

async fn submit(node: &Node, body: Value) -> Value {
    let reply = call(node, "/v1/tenants/t1/dependency-scans", body).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.json()
}

/// The whole life of a pull request's scans on one node.
async fn scans_and_the_gate_work_end_to_end(node: Node) {
    // Gate on (the default, high), no scan: an agent is blocked, a person never.
    let none = gate(&node, "agent").await;
    assert_eq!(
        none,
        json!({"blocked": true, "policy_failure_code": "dependency_gate_no_scan", "scan_id": null})
    );
    assert_eq!(gate(&node, "person").await["blocked"], false);

    // The head goes back to a vulnerable lodash and adds left-pad.
    let base = npm_lock(&[("lodash", "4.17.21")]);
    let head = npm_lock(&[("lodash", "4.17.20"), ("left-pad", "1.3.0")]);
    let bad = submit(
        &node,
        submission(
            7,
            json!([{"path": "web/package-lock.json", "head_base64": b64(&head), "base_base64": b64(&base)}]),
        ),
    )
    .await;
    assert_eq!(bad["status"], "ok");
    assert_eq!(bad["checked"], 2, "lodash 4.17.20 and left-pad 1.3.0");
    let ids: Vec<&str> =
        bad["findings"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"GHSA-35jh-r3h4-6jhm"), "{ids:?}");
    assert_eq!(bad["gate"]["tripped"], true);
    assert_eq!(bad["gate"]["reason"], "dependency_gate_severity");
    assert_eq!(bad["lockfiles"][0]["format"], "npm-package-lock");
    let markdown = bad["markdown"].as_str().unwrap();
    assert!(markdown.contains("https://osv.dev/vulnerability/GHSA-35jh-r3h4-6jhm"), "{markdown}");
    assert!(markdown.contains("upgrade to `4.17.21`"), "{markdown}");
    let bad_id = bad["scan_id"].as_str().unwrap().to_owned();

    let blocked = gate(&node, "agent").await;
    assert_eq!(
        blocked,
        json!({"blocked": true, "policy_failure_code": "dependency_gate_severity", "scan_id": bad_id})
    );
    assert_eq!(gate(&node, "person").await["blocked"], false, "a person is never held to the gate");

    // The gate's mode is read at the check, not frozen into the scan.
    assert_eq!(put(&node, "/v1/tenants/t1/dependency-gate", json!({"mode": "critical"})).await.status, 200);
    assert_eq!(gate(&node, "agent").await["blocked"], false, "no critical finding");
    assert_eq!(put(&node, "/v1/tenants/t1/dependency-gate", json!({"mode": "high"})).await.status, 200);

    // A newer scan of the fixed head is the one that counts.
    let fixed = submit(
        &node,
        submission(
            7,
            json!([{"path": "web/package-lock.json", "head_base64": b64(&base), "base_base64": b64(&base)}]),
        ),
    )
    .await;
    assert_eq!((fixed["status"].as_str(), fixed["checked"].as_u64()), (Some("ok"), Some(0)));
    let passed = gate(&node, "agent").await;
    assert_eq!(passed, json!({"blocked": false, "policy_failure_code": null, "scan_id": fixed["scan_id"]}));

    // Another pull request of the repository has a scan of its own.
    submit(&node, submission(8, json!([{"path": "package-lock.json", "head_base64": b64(&head)}]))).await;
    let listed =
        get(&node, "/v1/tenants/t1/dependency-scans?repository=octo/app&pull_request=7").await.json();
    let listed: Vec<&Value> = listed["items"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["scan_id"], fixed["scan_id"], "newest first");
    assert_eq!(*listed[1], bad, "the record is the answer");
    let page = get(&node, "/v1/tenants/t1/dependency-scans?repository=octo/app&limit=1").await.json();
    assert_eq!(page["items"][0]["pull_request"], 8);
    let rest = get(
        &node,
        &format!(
            "/v1/tenants/t1/dependency-scans?repository=octo/app&limit=5&cursor={}",
            page["next_cursor"].as_str().unwrap()
        ),
    )
    .await
    .json();
    assert_eq!(rest["items"].as_array().unwrap().len(), 2);
    assert_eq!(rest["next_cursor"], Value::Null);
    let other_tenant = get(&node, "/v1/tenants/t2/dependency-scans?repository=octo/app").await.json();
    assert_eq!(other_tenant["items"], json!([]), "scans are the tenant's own");

    // Every scan and every gate decision is in the audit chain.
    let audit = get(&node, "/v1/audit?limit=500").await.json();
    let actions: Vec<&str> =
        audit["items"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions.iter().filter(|a| **a == "dependency_scan.create").count(), 3);
    assert_eq!(actions.iter().filter(|a| **a == "gate.check").count(), 6);
    let first_check =
        audit["items"].as_array().unwrap().iter().find(|e| e["action"] == "gate.check").unwrap();
    assert_eq!(first_check["detail"]["policy_failure_code"], "dependency_gate_no_scan");
    assert_eq!(first_check["subject"], "octo/app#7");
}

#[tokio::test]
async fn scans_and_the_gate_work_end_to_end_on_sqlite() {
    scans_and_the_gate_work_end_to_end(node_with("all", &[(names::OSV_DB, &osv_mini())]).await).await;
}

#[tokio::test]
async fn scans_and_the_gate_work_end_to_end_on_postgres() {
    let db = TestDatabase::create();
    let node = node_with("worker", &[(names::OSV_DB, &osv_mini()), (names::DATABASE_URL, db.url())]).await;
    scans_and_the_gate_work_end_to_end(node).await;
}

#[tokio::test]
async fn an_incomplete_scan_blocks_and_a_later_complete_one_passes() {
    let node = node_with("all", &[(names::OSV_DB, &osv_mini())]).await;
    let good = npm_lock(&[("lodash", "4.17.21")]);
    // A head that is not a lockfile, beside one that is: the scan is
    // incomplete, whatever the other one found.
    let broken = submit(
        &node,
        submission(
            7,
            json!([{"path": "package-lock.json", "head_base64": b64(&good)},
                   {"path": "api/package-lock.json", "head_base64": b64("{\"lockfileVersion\": 3, \"packages\": ")}]),
        ),
    )
    .await;
    assert_eq!(broken["status"], "error");
    assert!(broken["errors"][0]["code"].as_str().unwrap().starts_with("lockfile_"), "{broken}");
    assert!(broken["errors"][0]["message"].as_str().unwrap().contains("api/package-lock.json"), "{broken}");
    assert!(broken["markdown"].as_str().unwrap().contains("did not complete"));
    assert_eq!(gate(&node, "agent").await["policy_failure_code"], "dependency_gate_scan_error");
    assert_eq!(put(&node, "/v1/tenants/t1/dependency-gate", json!({"mode": "critical"})).await.status, 200);
    assert_eq!(gate(&node, "agent").await["policy_failure_code"], "dependency_gate_scan_error");
    assert_eq!(put(&node, "/v1/tenants/t1/dependency-gate", json!({"mode": "off"})).await.status, 200);
    assert_eq!(gate(&node, "agent").await["blocked"], false, "off never blocks");
    assert_eq!(put(&node, "/v1/tenants/t1/dependency-gate", json!({"mode": "high"})).await.status, 200);

    let retried =
        submit(&node, submission(7, json!([{"path": "package-lock.json", "head_base64": b64(&good)}]))).await;
    assert_eq!(retried["status"], "ok");
    assert_eq!(gate(&node, "agent").await["blocked"], false);
}

#[tokio::test]
async fn osv_is_asked_through_the_door_and_an_unreachable_one_blocks() {
    // The operator has not opened loopback to the door: OSV at a loopback
    // address is refused there, so the scan cannot complete.
    let node = node_with("all", &[(names::OSV_URL, "http://127.0.0.1:9")]).await;
    let head = npm_lock(&[("lodash", "4.17.20")]);
    let scan =
        submit(&node, submission(7, json!([{"path": "package-lock.json", "head_base64": b64(&head)}]))).await;
    assert_eq!(scan["status"], "error");
    assert_eq!(scan["errors"][0]["code"], "osv_unreachable", "{scan}");
    assert!(scan["errors"][0]["message"].as_str().unwrap().contains("address_special_purpose"), "{scan}");
    assert_eq!(gate(&node, "agent").await["policy_failure_code"], "dependency_gate_scan_error");

    // With loopback opened, the same scan against a real OSV mirror finds lodash's advisories.
    let (_mirror, url) = crate::deps::mirror(std::path::Path::new(&osv_mini()));
    let node =
        node_with("all", &[(names::OSV_URL, &url), (names::EGRESS_ALLOW_RANGES, "127.0.0.1/32")]).await;
    let scan =
        submit(&node, submission(7, json!([{"path": "package-lock.json", "head_base64": b64(&head)}]))).await;
    assert_eq!(scan["status"], "ok", "{scan}");
    assert!(scan["findings"].as_array().unwrap().iter().any(|f| f["id"] == "GHSA-35jh-r3h4-6jhm"), "{scan}");
    assert_eq!(gate(&node, "agent").await["policy_failure_code"], "dependency_gate_severity");
}

#[tokio::test]
async fn a_base_over_the_providers_limit_is_read_as_absent_and_every_head_version_is_checked() {
    let node = node_with("all", &[(names::OSV_DB, &osv_mini())]).await;
    let lock = npm_lock(&[("lodash", "4.17.20")]);
    // The same lockfile on both sides changes nothing, unless the base is too large to be read.
    let same = submit(
        &node,
        submission(
            7,
            json!([{"path": "package-lock.json", "head_base64": b64(&lock), "base_base64": b64(&lock)}]),
        ),
    )
    .await;
    assert_eq!(same["checked"], 0);
    let over = submit(
        &node,
        submission(
            7,
            json!([{"path": "package-lock.json", "head_base64": b64(&lock), "base_size": 2_000_000}]),
        ),
    )
    .await;
    assert_eq!(over["checked"], 1);
    assert_eq!(
        over["lockfiles"][0]["base_absent"],
        json!({"reason": "too_large", "bytes": 2_000_000, "limit": 1_048_576})
    );
    assert_eq!(over["gate"]["tripped"], true);
}

#[tokio::test]
async fn a_base_in_another_format_is_read_as_absent_never_as_a_clean_diff() {
    let node = node_with("all", &[(names::OSV_DB, &osv_mini())]).await;
    let head = npm_lock(&[("lodash", "4.17.20")]);
    // The base side of package-lock.json holds a yarn.lock (the project
    // switched package managers): what it pinned cannot be known, so every
    // head version is checked.
    let yarn = "lodash@^4.17.20:\n  version \"4.17.20\"\n  resolved \"https://registry.yarnpkg.com/lodash/-/lodash-4.17.20.tgz\"\n";
    let scan = submit(
        &node,
        submission(
            7,
            json!([{"path": "package-lock.json", "head_base64": b64(&head), "base_base64": b64(yarn)}]),
        ),
    )
    .await;
    assert_eq!((scan["status"].as_str(), scan["checked"].as_u64()), (Some("ok"), Some(1)), "{scan}");
    assert_eq!(scan["lockfiles"][0]["base_absent"]["reason"], "unreadable", "{scan}");
    assert_eq!(scan["gate"]["reason"], "dependency_gate_severity");
}

#[tokio::test]
async fn requirements_includes_are_read_from_the_submitted_lockfiles_only() {
    let node = node_with("all", &[(names::OSV_DB, &osv_mini())]).await;
    let req = "-r common/base.txt\nrequests==2.31.0\n";
    let included = submit(
        &node,
        submission(
            7,
            json!([{"path": "requirements.txt", "head_base64": b64(req)},
                   {"path": "common/base.txt", "head_base64": b64("urllib3==2.0.0\n")}]),
        ),
    )
    .await;
    assert_eq!(included["status"], "ok", "{included}");
    assert_eq!(included["checked"], 2, "requests and urllib3, once each: {included}");
    assert_eq!(
        included["lockfiles"][1],
        json!({"path": "common/base.txt", "included_by": ["requirements.txt"]})
    );

    // An include that was not submitted is never looked for anywhere else.
    let missing = submit(
        &node,
        submission(
            7,
            json!([{"path": "requirements.txt", "head_base64": b64("-r /etc/passwd\n-r other.txt\n")}]),
        ),
    )
    .await;
    assert_eq!(missing["status"], "error", "{missing}");
    assert!(missing["errors"][0]["code"].as_str().unwrap().starts_with("lockfile_include"), "{missing}");
}

#[tokio::test]
async fn bad_submissions_are_refused_with_nothing_recorded() {
    let node = node_with("all", &[(names::OSV_DB, &osv_mini())]).await;
    let lock = b64(&npm_lock(&[]));
    let file = |path: &str| json!([{"path": path, "head_base64": lock}]);
    let cases = [
        submission(7, file("../package-lock.json")),
        submission(7, file("/etc/package-lock.json")),
        submission(7, file("a//package-lock.json")),
        submission(0, file("package-lock.json")),
        submission(7, json!([])),
        submission(7, json!([{"path": "package-lock.json", "head_base64": "not base64!"}])),
        submission(
            7,
            json!([{"path": "p.json", "head_base64": lock}, {"path": "p.json", "head_base64": lock}]),
        ),
        json!({"repository": "octo", "pull_request": 7, "head_sha": SHA, "lockfiles": file("package-lock.json")}),
        json!({"repository": "octo/app", "pull_request": 7, "head_sha": "HEAD", "lockfiles": file("package-lock.json")}),
        json!({"repository": "octo/app", "pull_request": 7, "head_sha": SHA, "lockfiles": file("package-lock.json"), "x": 1}),
    ];
    for body in cases {
        let reply = call(&node, "/v1/tenants/t1/dependency-scans", body.clone()).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
        assert_eq!(reply.json()["error"]["code"], "bad_request", "{}", reply.text);
    }
    let reply = call(
        &node,
        "/v1/tenants/t1/gate-checks",
        json!({"repository": "octo/app", "pull_request": 7, "actor": "bot"}),
    )
    .await;
    assert_eq!(reply.status, 400);
    let listed = get(&node, "/v1/tenants/t1/dependency-scans").await.json();
    assert_eq!(listed["items"], json!([]));
    assert_eq!(gate(&node, "agent").await["policy_failure_code"], "dependency_gate_no_scan");
}

#[tokio::test]
async fn scans_are_the_workers_a_gateway_serves_none() {
    let node = node_with("gateway", &[]).await;
    let lock = b64(&npm_lock(&[]));
    let reply = call(
        &node,
        "/v1/tenants/t1/dependency-scans",
        submission(7, json!([{"path": "package-lock.json", "head_base64": lock}])),
    )
    .await;
    assert_eq!(reply.status, 403, "{}", reply.text);
}

#[tokio::test]
async fn credentials_in_a_lockfile_never_reach_the_answer_or_the_store() {
    let node = node_with("all", &[(names::OSV_DB, &osv_mini())]).await;
    let secret = "s3cr3t-registry-token-7f1c";
    let npm = json!({"name": "app", "lockfileVersion": 3, "packages": {
        "": {"name": "app"},
        "node_modules/lodash": {"version": "4.17.20",
            "resolved": format!("https://ci:{secret}@registry.example/lodash/-/lodash-4.17.20.tgz")},
        "node_modules/private": {"version": format!("git+https://x-access-token:{secret}@github.com/o/p.git")}}})
    .to_string();
    let requirements = format!(
        "--index-url https://u:{secret}@pypi.example/simple\nsix==1.16.0\nbroken @ https://u:{secret}@h/x.whl\n"
    );
    let reply = call(
        &node,
        "/v1/tenants/t1/dependency-scans",
        submission(
            7,
            json!([{"path": "package-lock.json", "head_base64": b64(&npm)},
                   {"path": "requirements.txt", "head_base64": b64(&requirements)}]),
        ),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert!(!reply.text.contains(secret), "{}", reply.text);
    let listed = get(&node, "/v1/tenants/t1/dependency-scans").await;
    assert!(!listed.text.contains(secret));
    for file in ["gatehouse.db", "gatehouse.db-wal"] {
        let bytes = std::fs::read(node.data.path().join(file)).unwrap_or_default();
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "{file} holds the credential");
    }
}

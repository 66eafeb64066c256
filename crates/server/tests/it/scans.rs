//! Dependency scans of pull requests and the gate at the worker's pass,
//! end to end through the API, on SQLite and on PostgreSQL.

use base64::Engine as _;
use gatehouse_config::names;
use gatehouse_core::Clock as _;
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
    gate_of(node, actor, SHA).await
}

/// The gate check for the head `head_sha` of pull request 7.
async fn gate_of(node: &Node, actor: &str, head_sha: &str) -> Value {
    let reply = call(
        node,
        "/v1/tenants/t1/gate-checks",
        json!({"repository": "octo/app", "pull_request": 7, "head_sha": head_sha, "actor": actor}),
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
    assert_eq!(actions.iter().filter(|a| **a == "dependency_scan.finish").count(), 3);
    assert_eq!(actions.iter().filter(|a| **a == "gate.check").count(), 6);
    let first_check =
        audit["items"].as_array().unwrap().iter().find(|e| e["action"] == "gate.check").unwrap();
    assert_eq!(first_check["detail"]["policy_failure_code"], "dependency_gate_no_scan");
    assert_eq!(first_check["subject"], "octo/app#7");
    assert_eq!(first_check["detail"]["head_sha"], SHA);

    // One scan by its id, as listed; another tenant's or an unknown id is not found.
    let one = get(&node, &format!("/v1/tenants/t1/dependency-scans/{bad_id}")).await;
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(one.json(), bad);
    assert_eq!(get(&node, &format!("/v1/tenants/t2/dependency-scans/{bad_id}")).await.status, 404);
    let unknown = get(&node, "/v1/tenants/t1/dependency-scans/scan_none").await;
    assert_eq!((unknown.status, unknown.json()["error"]["reason"].as_str()), (404, Some("scan_unknown")));
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
    for body in [
        json!({"repository": "octo/app", "pull_request": 7, "head_sha": SHA, "actor": "bot"}),
        // The head is part of the question: a check without it is refused, never answered for some head.
        json!({"repository": "octo/app", "pull_request": 7, "actor": "agent"}),
        json!({"repository": "octo/app", "pull_request": 7, "head_sha": "HEAD", "actor": "agent"}),
    ] {
        let reply = call(&node, "/v1/tenants/t1/gate-checks", body.clone()).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
    }
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

/// A TCP relay in front of `upstream` that holds every byte a client sends
/// while `open` is false: an OSV that stalls, request by request, even on
/// a connection kept from an earlier request.
#[allow(clippy::disallowed_methods, reason = "a test relay to the OSV mirror under test, on loopback")]
async fn stalling_relay(upstream: &str, open: tokio::sync::watch::Receiver<bool>) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else { return };
            let (upstream, mut open) = (upstream.clone(), open.clone());
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { return };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match client_read.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if open.wait_for(|o| *o).await.is_err()
                        || server_write.write_all(&buf[..n]).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// Polls a scan until it is no longer pending.
async fn finished(node: &Node, scan_id: &str) -> Value {
    for _ in 0..300 {
        let reply = get(node, &format!("/v1/tenants/t1/dependency-scans/{scan_id}")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let scan = reply.json();
        if scan["status"] != "pending" {
            return scan;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the scan {scan_id} never finished");
}

#[tokio::test]
async fn a_scan_of_an_older_head_never_vouches_for_a_newer_one_whose_scan_stalls() {
    let (_mirror, mirror_url) = crate::deps::mirror(std::path::Path::new(&osv_mini()));
    let (open, opened) = tokio::sync::watch::channel(true);
    let osv = stalling_relay(&mirror_url, opened).await;
    let node = node_with(
        "all",
        &[
            (names::OSV_URL, &osv),
            (names::EGRESS_ALLOW_RANGES, "127.0.0.1/32"),
            (names::DEPS_SCAN_WAIT_MS, "500"),
        ],
    )
    .await;
    let (clean_head, bad_head, unscanned_head) = ("a".repeat(40), "b".repeat(40), "c".repeat(40));
    let scan_of = |head: &str, lock: &str| {
        json!({"repository": "octo/app", "pull_request": 7, "head_sha": head,
            "lockfiles": [{"path": "package-lock.json", "head_base64": b64(lock)}]})
    };

    // The agent pushes a clean head; its scan finishes in time and passes.
    let clean = submit(&node, scan_of(&clean_head, &npm_lock(&[("lodash", "4.17.21")]))).await;
    assert_eq!((clean["status"].as_str(), clean["checked"].as_u64()), (Some("ok"), Some(1)), "{clean}");
    assert_eq!(gate_of(&node, "agent", &clean_head).await["blocked"], false);

    // Then a vulnerable head, whose scan stalls at OSV: answered 202, pending.
    open.send(false).unwrap();
    let reply = call(
        &node,
        "/v1/tenants/t1/dependency-scans",
        scan_of(&bad_head, &npm_lock(&[("lodash", "4.17.20")])),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let pending = reply.json();
    assert_eq!(pending["status"], "pending");
    assert_eq!(pending["head_sha"], bad_head.as_str());
    let scan_id = pending["scan_id"].as_str().unwrap().to_owned();
    let polled = get(&node, &format!("/v1/tenants/t1/dependency-scans/{scan_id}")).await.json();
    assert_eq!(polled, pending, "pollable while pending");

    // The gate asks about the new head: blocked while its scan is pending,
    // never passed on the older head's clean scan.
    assert_eq!(
        gate_of(&node, "agent", &bad_head).await,
        json!({"blocked": true, "policy_failure_code": "dependency_gate_scan_pending", "scan_id": scan_id})
    );
    assert_eq!(gate_of(&node, "person", &bad_head).await["blocked"], false, "a person is never held");
    // A head nobody submitted has no scan, whatever other heads have.
    assert_eq!(
        gate_of(&node, "agent", &unscanned_head).await,
        json!({"blocked": true, "policy_failure_code": "dependency_gate_no_scan", "scan_id": null})
    );

    // OSV answers again: the scan finishes in the background (its request
    // is long answered) and the gate judges the new head by its result.
    open.send(true).unwrap();
    let done = finished(&node, &scan_id).await;
    assert_eq!(done["status"], "ok", "{done}");
    assert!(done["findings"].as_array().unwrap().iter().any(|f| f["id"] == "GHSA-35jh-r3h4-6jhm"), "{done}");
    assert_eq!(
        gate_of(&node, "agent", &bad_head).await,
        json!({"blocked": true, "policy_failure_code": "dependency_gate_severity", "scan_id": scan_id})
    );
    let listed =
        get(&node, "/v1/tenants/t1/dependency-scans?repository=octo/app&pull_request=7").await.json();
    assert_eq!(listed["items"][0], done, "the list shows the finished scan");

    // A newer submission for the same head counts from the moment it is
    // submitted: pending again until it finishes.
    open.send(false).unwrap();
    let reply = call(
        &node,
        "/v1/tenants/t1/dependency-scans",
        scan_of(&bad_head, &npm_lock(&[("lodash", "4.17.21")])),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let again = reply.json()["scan_id"].as_str().unwrap().to_owned();
    assert_eq!(
        gate_of(&node, "agent", &bad_head).await["policy_failure_code"],
        "dependency_gate_scan_pending"
    );
    open.send(true).unwrap();
    assert_eq!(finished(&node, &again).await["status"], "ok");
    assert_eq!(
        gate_of(&node, "agent", &bad_head).await,
        json!({"blocked": false, "policy_failure_code": null, "scan_id": again})
    );
}

#[tokio::test]
async fn a_scan_left_pending_by_a_stopped_node_is_marked_errored_and_blocks() {
    let node = node_with("all", &[(names::OSV_DB, &osv_mini())]).await;
    let store = node.state.plane.store.clone().unwrap();
    // A node took the submission and stopped before finishing it.
    let submitted = gatehouse_store::NewScan {
        scan_id: "scan_orphan".into(),
        tenant_id: "t1".into(),
        repository: "octo/app".into(),
        pull_request: 7,
        head_sha: SHA.into(),
        created_at: node.clock.now(),
    };
    store.submit_scan(&submitted, "worker").await.unwrap();
    assert_eq!(gate(&node, "agent").await["policy_failure_code"], "dependency_gate_scan_pending");
    let before = node.clock.now() + 1;
    assert_eq!(store.fail_stale_scans(before, node.clock.now(), "gatehouse").await.unwrap(), 1);
    assert_eq!(
        gate(&node, "agent").await,
        json!({"blocked": true, "policy_failure_code": "dependency_gate_scan_error", "scan_id": "scan_orphan"})
    );
    let scan = get(&node, "/v1/tenants/t1/dependency-scans/scan_orphan").await.json();
    assert_eq!(
        (scan["status"].as_str(), scan["errors"][0]["code"].as_str()),
        (Some("error"), Some("scan_interrupted"))
    );
}

#[tokio::test]
async fn the_openapi_document_describes_the_pending_answer_and_the_scan_by_id() {
    let node = node_with("all", &[(names::OSV_DB, &osv_mini())]).await;
    let doc = get(&node, "/openapi.json").await.json();
    let paths = &doc["paths"];
    let submit = &paths["/v1/tenants/{tenant_id}/dependency-scans"]["post"]["responses"];
    assert!(submit["201"].is_object() && submit["202"].is_object(), "{submit}");
    let fields = submit["202"]["content"]["application/json"]["schema"]["properties"].as_object().unwrap();
    assert!(fields.contains_key("scan_id") && fields.contains_key("status"));
    assert!(paths["/v1/tenants/{tenant_id}/dependency-scans/{scan_id}"]["get"].is_object());
    let check =
        &paths["/v1/tenants/{tenant_id}/gate-checks"]["post"]["requestBody"]["content"]["application/json"];
    assert!(check["schema"]["properties"]["head_sha"].is_object());
}

/// More submissions than turns wait for one, however long the turns stay
/// held: each is answered (201, or 202 pending), none refused busy (503),
/// and every one finishes.
#[tokio::test]
async fn submissions_beyond_the_turns_queue_and_all_are_answered() {
    let logs = LogBuffer::global();
    let mark = logs.mark();
    let node = node_with(
        "all",
        &[
            (names::OSV_DB, &osv_mini()),
            (names::DEPS_SCAN_CONCURRENCY, "1"),
            (names::DEPS_SCAN_WAIT_MS, "100"),
        ],
    )
    .await;
    let body = |head: &str| {
        json!({"repository": "octo/app", "pull_request": 7, "head_sha": head,
            "lockfiles": [{"path": "package-lock.json", "head_base64": b64(&npm_lock(&[("lodash", "4.17.21")]))}]})
        .to_string()
    };
    // The one turn, held by a submission whose body stalls halfway.
    let slow = body(&"a".repeat(40));
    let (first, rest) = slow.split_at(slow.len() / 2);
    let (first, rest) = (bytes::Bytes::from(first.to_owned()), bytes::Bytes::from(rest.to_owned()));
    let (finish, finished_rx) = tokio::sync::oneshot::channel::<()>();
    let parts =
        futures_util::stream::unfold((Some(first), Some((finished_rx, rest))), |(first, later)| async move {
            if let Some(first) = first {
                return Some((Ok::<_, std::io::Error>(first), (None, later)));
            }
            let (wait, rest) = later?;
            let _ = wait.await;
            Some((Ok(rest), (None, None)))
        });
    let request = http::Request::post("/v1/tenants/t1/dependency-scans")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from_stream(parts))
        .unwrap();
    let router = node.router.clone();
    let stalled = tokio::spawn(async move { send(&router, request).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    // Three more, all waiting past GATEHOUSE_DEPS_SCAN_WAIT_MS for the turn.
    let queued: Vec<_> = ["b", "c", "d"]
        .into_iter()
        .map(|h| {
            let (router, body) = (node.router.clone(), body(&h.repeat(40)));
            tokio::spawn(async move { send(&router, post("/v1/tenants/t1/dependency-scans", &body)).await })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(
        queued.iter().all(|q| !q.is_finished()),
        "a submission was answered (refused busy?) while the one turn was held"
    );

    finish.send(()).unwrap();
    let mut replies = vec![stalled.await.unwrap()];
    for q in queued {
        replies.push(q.await.unwrap());
    }
    for reply in &replies {
        assert!(matches!(reply.status, 201 | 202), "{} {}", reply.status, reply.text);
        let scan_id = reply.json()["scan_id"].as_str().unwrap().to_owned();
        assert_eq!(finished(&node, &scan_id).await["status"], "ok");
    }
    // The route as the request limit's middleware names it, which
    // `scans::queues_for_a_turn` leaves out of the limit.
    let log = logs.since(mark);
    assert!(log.contains("path=/v1/tenants/{tenant_id}/dependency-scans "), "{log}");
}

//! Egress proposals through the API and the door, on SQLite and on
//! PostgreSQL: a run asks for a rule its policy refuses, a person approves
//! it for the run alone (in force for that run only, at the door) or for
//! the tenant (a new policy version with exactly that rule), or denies it;
//! every decision audited under the person's name and an event of the run.

use serde_json::{Value, json};

use crate::leases::Echo;
use crate::support::*;

async fn proposal_node(database: Option<&str>) -> Node {
    let mut settings = vec![("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.0/8")];
    if let Some(url) = database {
        settings.push(("GATEHOUSE_DATABASE_URL", url));
    }
    node_with("all", &settings).await
}

async fn new_run(node: &Node) -> (String, String) {
    let run = call(
        node,
        "/v1/runs",
        json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"},
            "budgets": {"max_requests": 100, "max_egress_bytes": 1_000_000}}),
    )
    .await;
    assert_eq!(run.status, 201, "{}", run.text);
    let run = run.json();
    (run["run_id"].as_str().unwrap().to_owned(), run["grant"].as_str().unwrap().to_owned())
}

/// A request of the run holding `grant` through the fetch API: the status
/// and the refusal's reason, if refused.
async fn fetch(node: &Node, grant: &str, method: &str, url: &str) -> (u16, String) {
    let reply = call(
        node,
        "/v1/egress/fetch",
        json!({"grant": grant, "method": method, "url": url, "purpose": "runtime"}),
    )
    .await;
    let reason = serde_json::from_str::<Value>(&reply.text)
        .ok()
        .and_then(|v| v["error"]["reason"].as_str().map(str::to_owned));
    (reply.status, reason.unwrap_or_default())
}

async fn ask(node: &Node, run_id: &str, body: Value) -> Reply {
    call(node, &format!("/v1/runs/{run_id}/egress-proposals"), body).await
}

async fn decide(node: &Node, proposal_id: &str, body: Value) -> Reply {
    call(node, &format!("/v1/egress-proposals/{proposal_id}/decide"), body).await
}

async fn a_run_asks_and_a_person_decides(node: &Node) {
    let upstream = Echo::start("127.0.0.1", 0);
    let host = format!("127.0.0.1:{}", upstream.port);
    let url = |path: &str| format!("http://{host}{path}");
    let policy = put(
        node,
        "/v1/tenants/t1/egress-policy",
        json!({"mode": "allowlist", "allow": ["docs.example"],
        "deny": ["evil.example"]}),
    )
    .await;
    assert_eq!(policy.status, 200, "{}", policy.text);
    let (run_a, grant_a) = new_run(node).await;
    let (run_b, grant_b) = new_run(node).await;
    // The refusal asks a person itself: its proposal named in the answer.
    let refused = call(
        node,
        "/v1/egress/fetch",
        json!({"grant": grant_a, "method": "GET", "url": url("/v1/x"), "purpose": "runtime"}),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let error = refused.json()["error"].clone();
    assert_eq!(
        (error["reason"].as_str(), error["retryable"].as_bool()),
        (Some("policy_not_allowed"), Some(false))
    );
    let id = error["proposal_id"].as_str().unwrap_or_else(|| panic!("{error}")).to_owned();
    assert_eq!(refused.headers["x-gatehouse-proposal"], id.as_str());
    // The same request refused again is the same proposal.
    let again = call(
        node,
        "/v1/egress/fetch",
        json!({"grant": grant_a, "method": "GET", "url": url("/v1/other"), "purpose": "runtime"}),
    )
    .await;
    assert_eq!(again.json()["error"]["proposal_id"], id.as_str());

    // The run asks for the same rule: the same proposal; another rule is new.
    let asked =
        ask(node, &run_a, json!({"host": host, "methods": ["GET"], "why": "to read the API docs"})).await;
    assert_eq!(
        (asked.status, asked.json()["proposal_id"].as_str()),
        (200, Some(id.as_str())),
        "{}",
        asked.text
    );
    let proposal = asked.json();
    assert_eq!((proposal["status"].as_str(), proposal["scope"].as_str()), (Some("pending"), None));
    assert_eq!(proposal["methods"], json!(["GET"]));
    assert_eq!(proposal["why"], "refused: policy_not_allowed");
    let other = ask(node, &run_a, json!({"host": host, "methods": ["HEAD"], "why": "to check"})).await;
    assert_eq!(other.status, 201, "{}", other.text);
    let other_id = other.json()["proposal_id"].as_str().unwrap().to_owned();
    // Nobody is asked to open what no policy may open, or a wildcard.
    for (body, status, reason) in [
        (json!({"host": "169.254.169.254", "why": "x"}), 403, "address_metadata"),
        (json!({"host": "10.0.0.1", "why": "x"}), 403, "address_special_purpose"),
        (json!({"host": "metadata.google.internal", "why": "x"}), 403, "host_metadata_name"),
        (json!({"host": "evil.example", "why": "x"}), 403, "policy_denied"),
        (json!({"host": "*.example.com", "why": "x"}), 400, "policy_unreadable"),
        (json!({"host": "api.example.com", "methods": ["get"], "why": "x"}), 400, "policy_unreadable"),
        (json!({"host": "api.example.com", "paths": ["v1"], "why": "x"}), 400, "policy_unreadable"),
    ] {
        let refused = ask(node, &run_a, body.clone()).await;
        assert_eq!(refused.status, status, "{body}: {}", refused.text);
        assert_eq!(refused.json()["error"]["reason"], reason, "{body}: {}", refused.text);
    }
    assert_eq!(ask(node, &run_a, json!({"host": "a.example", "why": ""})).await.status, 400);
    let pending = get(node, "/v1/tenants/t1/egress-proposals?status=pending").await.json();
    let mut listed: Vec<&str> =
        pending["items"].as_array().unwrap().iter().filter_map(|p| p["proposal_id"].as_str()).collect();
    listed.sort_unstable();
    let mut expected = [id.as_str(), other_id.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected, "{pending}");
    assert_eq!(get(node, &format!("/v1/egress-proposals/{other_id}")).await.json()["why"], "to check");

    // Approved once: that rule, for that run alone, in force at once.
    let bad = decide(node, &id, json!({"decision": "approve", "actor": "person:ada"})).await;
    assert_eq!(bad.status, 400, "an approval names its scope: {}", bad.text);
    let approved =
        decide(node, &id, json!({"decision": "approve", "scope": "run", "actor": "person:ada"})).await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    let approved = approved.json();
    assert_eq!((approved["status"].as_str(), approved["scope"].as_str()), (Some("approved"), Some("run")));
    assert_eq!(approved["decided_by"], "person:ada");
    assert_eq!(fetch(node, &grant_a, "GET", &url("/v1/x")).await.0, 200);
    assert!(upstream.last().starts_with("GET /v1/x"), "{}", upstream.last());
    assert_eq!(fetch(node, &grant_a, "POST", &url("/v1/x")).await, (403, "policy_method_not_allowed".into()));
    assert_eq!(fetch(node, &grant_b, "GET", &url("/v1/x")).await, (403, "policy_not_allowed".into()));
    let twice = decide(node, &id, json!({"decision": "deny", "actor": "person:bob"})).await;
    assert_eq!((twice.status, twice.json()["error"]["reason"].as_str()), (409, Some("proposal_not_pending")));

    // Approved always: a new policy version with exactly that rule.
    let asked = ask(
        node,
        &run_b,
        json!({"host": host, "methods": ["GET", "HEAD"], "paths": ["/v1/"], "why": "for good"}),
    )
    .await
    .json();
    let always = asked["proposal_id"].as_str().unwrap().to_owned();
    let decided =
        decide(node, &always, json!({"decision": "approve", "scope": "tenant", "actor": "person:ada"})).await;
    assert_eq!(decided.status, 200, "{}", decided.text);
    let policy = get(node, "/v1/tenants/t1/egress-policy").await.json();
    assert_eq!(policy["version"], 2, "{policy}");
    assert_eq!(policy["actor"], "person:ada");
    assert_eq!(
        policy["policy"]["allow"],
        json!(["docs.example", {"host": host, "methods": ["GET", "HEAD"], "paths": ["/v1/"]}]),
        "exactly that rule: {policy}"
    );
    assert_eq!(fetch(node, &grant_b, "GET", &url("/v1/y")).await.0, 200);
    assert_eq!(fetch(node, &grant_b, "GET", &url("/v2/y")).await, (403, "policy_path_not_allowed".into()));

    // Denied: nothing changes.
    let asked =
        ask(node, &run_b, json!({"host": host, "methods": ["DELETE"], "why": "clean up"})).await.json();
    let denied_id = asked["proposal_id"].as_str().unwrap().to_owned();
    let denied = decide(node, &denied_id, json!({"decision": "deny", "actor": "person:bob"})).await.json();
    assert_eq!(denied["status"], "denied");
    assert_eq!(
        fetch(node, &grant_b, "DELETE", &url("/v1/y")).await,
        (403, "policy_method_not_allowed".into())
    );

    // A run that ended has its pending asks decided no more.
    let asked = ask(node, &run_a, json!({"host": "api.example.com", "why": "later"})).await.json();
    let late = asked["proposal_id"].as_str().unwrap().to_owned();
    call(node, &format!("/v1/runs/{run_a}/end"), json!({"outcome": "succeeded"})).await;
    let refused =
        decide(node, &late, json!({"decision": "approve", "scope": "run", "actor": "person:ada"})).await;
    assert_eq!((refused.status, refused.json()["error"]["reason"].as_str()), (409, Some("run_not_live")));

    // The record: every decision audited under the person's name, every
    // ask and decision an event of its run.
    let audit = get(node, "/v1/audit?limit=100").await.json();
    let decisions: Vec<(String, String)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"].as_str().is_some_and(|a| a.starts_with("proposal.")))
        .map(|e| (e["action"].as_str().unwrap().to_owned(), e["actor"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("proposal.approve".to_owned(), "person:ada".to_owned()),
            ("proposal.approve".to_owned(), "person:ada".to_owned()),
            ("proposal.deny".to_owned(), "person:bob".to_owned()),
        ],
        "{audit}"
    );
    let events = get(node, &format!("/v1/runs/{run_a}/events")).await.json();
    let kinds: Vec<&str> =
        events["items"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"egress_proposal") && kinds.contains(&"egress_proposal_approved"), "{events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asks_and_a_person_decides_on_sqlite() {
    let node = proposal_node(None).await;
    a_run_asks_and_a_person_decides(&node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asks_and_a_person_decides_on_postgres() {
    let db = gatehouse_test_support::TestDatabase::create();
    let node = proposal_node(Some(db.url())).await;
    a_run_asks_and_a_person_decides(&node).await;
}

/// A run's pending asks are capped: past the cap it is told so, and its
/// other asks stand.
#[tokio::test]
async fn a_runs_pending_asks_are_capped() {
    let node = proposal_node(None).await;
    let (run, _) = new_run(&node).await;
    let cap = gatehouse_plane::proposals::LIMITS.per_run;
    for i in 0..cap {
        let asked = ask(&node, &run, json!({"host": format!("h{i}.example.com"), "why": "x"})).await;
        assert_eq!(asked.status, 201, "{i}: {}", asked.text);
    }
    let past = ask(&node, &run, json!({"host": "one-more.example.com", "why": "x"})).await;
    assert_eq!((past.status, past.json()["error"]["reason"].as_str()), (403, Some("proposal_limit")));
    // Asking again for one already pending is no new ask.
    assert_eq!(ask(&node, &run, json!({"host": "h0.example.com", "why": "x"})).await.status, 200);
}

/// The sandbox asks with its own grant, and follows its ask with it; it
/// reaches no other run's asks, and never decides.
#[tokio::test]
async fn a_sandbox_asks_with_its_own_grant() {
    use axum::body::Body;
    let node = proposal_node(None).await;
    let (run, grant) = new_run(&node).await;
    let (other_run, other_grant) = new_run(&node).await;
    let as_sandbox = |grant: &str, method: &str, path: String, body: Value| {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {grant}"))
            .header("content-type", "application/json")
            .body(Body::from(if body.is_null() { String::new() } else { body.to_string() }))
            .unwrap();
        send(&node.router, req)
    };
    let body = json!({"host": "pypi.org", "methods": ["GET"], "why": "pip install"});
    let asked = as_sandbox(&grant, "POST", format!("/v1/runs/{run}/egress-proposals"), body.clone()).await;
    assert_eq!(asked.status, 201, "{}", asked.text);
    let id = asked.json()["proposal_id"].as_str().unwrap().to_owned();
    let followed = as_sandbox(&grant, "GET", format!("/v1/egress-proposals/{id}"), Value::Null).await;
    assert_eq!((followed.status, followed.json()["status"].as_str()), (200, Some("pending")));
    // Not for another run, in either direction.
    let theirs = as_sandbox(&other_grant, "GET", format!("/v1/egress-proposals/{id}"), Value::Null).await;
    assert_eq!((theirs.status, theirs.json()["error"]["reason"].as_str()), (404, Some("proposal_unknown")));
    let for_other = as_sandbox(&grant, "POST", format!("/v1/runs/{other_run}/egress-proposals"), body).await;
    assert_eq!(for_other.status, 404, "{}", for_other.text);
    // A grant decides nothing, and reaches no other route.
    let decided = as_sandbox(
        &grant,
        "POST",
        format!("/v1/egress-proposals/{id}/decide"),
        json!({"decision": "approve", "scope": "run", "actor": "person:agent"}),
    )
    .await;
    assert_eq!(decided.status, 401, "{}", decided.text);
    assert_eq!(as_sandbox(&grant, "GET", "/v1/runs".into(), Value::Null).await.status, 401);
    // A bad grant is refused as the file routes refuse one.
    let bad = as_sandbox("ceg1.AAAA", "POST", format!("/v1/runs/{run}/egress-proposals"), json!({})).await;
    assert_eq!(
        (bad.status, bad.json()["error"]["reason"].as_str()),
        (403, Some("grant_malformed")),
        "{}",
        bad.text
    );
}

//! The record under pressure and across restarts (#27): noise from callers
//! who proved nothing is counted, not stored one by one.

use axum::body::Body;
use gatehouse_listener::PeerAddr;
use http::Request;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tower::ServiceExt as _;

use crate::support::*;

/// The bytes the node's SQLite database holds (pages in use, the WAL's
/// included: what a reader sees).
async fn db_bytes(node: &Node) -> i64 {
    let url = format!("sqlite://{}", node.data.path().join("gatehouse.db").display());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    let (bytes,): (i64,) = sqlx::query_as(
        "SELECT (p.page_count - f.freelist_count) * s.page_size \
         FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() s",
    )
    .fetch_one(&raw)
    .await
    .unwrap();
    raw.close().await;
    bytes
}

async fn audit_head(node: &Node) -> i64 {
    node.state.plane.store.as_ref().unwrap().audit_head().await.unwrap().0
}

/// Every refusal `GET /v1/refusals` lists (newest first), paged to the end.
async fn all_refusals(node: &Node) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/refusals?limit=500&cursor={c}"),
            None => "/v1/refusals?limit=500".to_owned(),
        };
        let page = get(node, &path).await;
        assert_eq!(page.status, 200, "{}", page.text);
        let page = page.json();
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return items,
        }
    }
}

fn counted(items: &[Value], listener: &str, reason: &str) -> i64 {
    items
        .iter()
        .filter(|i| i["listener"] == listener && i["reason"] == reason)
        .map(|i| i["count"].as_i64().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_bad_tokens_are_counted_not_itemized() {
    let node = node().await;
    // One refusal itemized before the flood (a caller who proved its token).
    call(&node, "/v1/grants/open", serde_json::json!({"token": "nope"})).await;
    let _ = all_refusals(&node).await;
    let (bytes_before, audit_before) = (db_bytes(&node).await, audit_head(&node).await);

    const TASKS: usize = 4;
    const EACH: usize = 25_000;
    let peer = PeerAddr("198.51.100.7:40000".parse().unwrap());
    let flood: Vec<_> = (0..TASKS)
        .map(|t| {
            let router = node.router.clone();
            tokio::spawn(async move {
                for n in 0..EACH {
                    let mut req = Request::get("/v1/runs");
                    // Most carry a wrong token; some none at all.
                    if n % 10 != 0 {
                        req = req.header("authorization", format!("Bearer wrong-{t}-{n}"));
                    }
                    let mut req = req.body(Body::empty()).unwrap();
                    req.extensions_mut().insert(peer);
                    let answer = router.clone().oneshot(req).await.unwrap();
                    assert_eq!(answer.status(), 401);
                }
            })
        })
        .collect();
    for task in flood {
        task.await.unwrap();
    }

    // The counters count each.
    let metrics = send(&node.router, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    let total = (TASKS * EACH) as i64;
    let missing = total / 10;
    for (reason, n) in [("service_token_invalid", total - missing), ("service_token_missing", missing)] {
        let line = format!("gatehouse_refusals_total{{kind=\"auth_refused\",reason=\"{reason}\"}} {n}");
        assert!(metrics.text.contains(&line), "{line} in\n{}", metrics.text);
    }
    // The record shows them as counts, by listener, client and reason.
    let items = all_refusals(&node).await;
    assert_eq!(counted(&items, "api", "service_token_invalid"), total - missing);
    assert_eq!(counted(&items, "api", "service_token_missing"), missing);
    assert!(items.len() < 20, "a few rows, not one a request: {}", items.len());
    let row = items.iter().find(|i| i["reason"] == "service_token_invalid").unwrap();
    assert_eq!((row["client"].as_str(), row["kind"].as_str()), (Some("198.51.100.7"), Some("auth_refused")));
    assert_eq!(row["at"], NOW - NOW % 60, "a minute's count is at the minute's start");
    let itemized = items.iter().find(|i| i["reason"] == "grant_bad_prefix").unwrap();
    assert_eq!(itemized["count"], 1);
    assert!(itemized.get("listener").is_none());

    let grown = db_bytes(&node).await - bytes_before;
    assert!(grown < 1_000_000, "the database grew by {grown} bytes");
    let audited = audit_head(&node).await - audit_before;
    assert!(audited < 20, "the audit log grew by {audited} entries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods, reason = "a test client talking to the proxy under test on loopback")]
async fn bad_grants_at_the_proxy_and_the_file_routes_are_counted_not_itemized() {
    let node = node().await;
    let audit_before = audit_head(&node).await;
    let proxy = serve_proxy(&node).await;
    for n in 0..30 {
        let mut conn = tokio::net::TcpStream::connect(proxy).await.unwrap();
        let auth = if n % 2 == 0 { "Proxy-Authorization: Bearer ceg1.forged\r\n" } else { "" };
        let request =
            format!("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n{auth}Connection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");
    }
    let peer = PeerAddr("203.0.113.9:5000".parse().unwrap());
    for n in 0..20 {
        let mut req = Request::get("/v1/files/file_1");
        if n % 2 == 0 {
            req = req.header("authorization", "Bearer ceg1.forged");
        }
        let mut req = req.body(Body::empty()).unwrap();
        req.extensions_mut().insert(peer);
        let answer = send(&node.router, req).await;
        assert!(matches!(answer.status, 401 | 403), "{}", answer.text);
    }
    let items = all_refusals(&node).await;
    let proxy_count: i64 =
        items.iter().filter(|i| i["listener"] == "proxy").map(|i| i["count"].as_i64().unwrap()).sum();
    assert_eq!(proxy_count, 30, "{items:?}");
    assert!(items.iter().filter(|i| i["listener"] == "proxy").all(|i| i["client"] == "127.0.0.1"));
    let files: Vec<&Value> = items.iter().filter(|i| i["client"] == "203.0.113.9").collect();
    assert_eq!(files.iter().map(|i| i["count"].as_i64().unwrap()).sum::<i64>(), 20, "{items:?}");
    assert!(files.iter().all(|i| i["listener"] == "api" && i["kind"] == "grant_refused"));
    assert!(items.iter().all(|i| i["listener"].is_string()), "nothing itemized: {items:?}");
    assert_eq!(audit_head(&node).await, audit_before, "none of it is audited");
}

/// A POST over a kept-alive connection; returns the status.
#[allow(clippy::disallowed_methods, reason = "a test client talking to the server under test on loopback")]
fn keep_alive_post(stream: &mut std::net::TcpStream, path: &str, token: &str, body: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
    let mut rest = vec![0_u8; length];
    stream.read_exact(&mut rest).unwrap();
    head[9..12].parse().unwrap()
}

/// `GET path` with a token on a fresh connection: the JSON answer.
fn get_json(addr: &str, path: &str, token: &str) -> Value {
    let answer = crate::cli::http(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
        ),
    );
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    // The refusals page is small and sent whole, or chunked: take the JSON.
    let json = body.find('{').map(|at| &body[at..]).unwrap_or(body);
    let json = &json[..=json.rfind('}').unwrap()];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

#[test]
#[allow(clippy::disallowed_methods, reason = "a test client talking to the server under test on loopback")]
fn refusals_queued_at_sigterm_are_written_before_the_process_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let start = || {
        let mut command = crate::cli::gatehouse(tmp.path());
        command.env("GATEHOUSE_LISTEN", "127.0.0.1:0").env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0");
        crate::cli::spawn_server(command)
    };
    let (mut server, addr, _, stderr) = start();
    let data = tmp.path().join("gatehouse-data");
    let token = std::fs::read_to_string(data.join("service-token")).unwrap().trim().to_owned();

    // Another writer holds the database's write lock: the node's event
    // writer cannot write, so what it is given stays queued.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let url = format!("sqlite://{}", data.join("gatehouse.db").display());
    let mut lock = runtime.block_on(async {
        use sqlx::Connection as _;
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await.unwrap();
        conn
    });
    const REFUSALS: usize = 1_000;
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    for _ in 0..REFUSALS {
        // An authenticated caller's refusal: itemized, a run-less event.
        assert_eq!(keep_alive_post(&mut stream, "/v1/grants/open", &token, r#"{"token":"nope"}"#), 200);
    }
    drop(stream);

    // SIGTERM while they wait; the lock goes a moment later, within the drain.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(700));
        runtime.block_on(async {
            sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
        });
    });
    let began = std::time::Instant::now();
    let status = server.terminate();
    releaser.join().unwrap();
    let log = stderr.join().unwrap();
    assert!(status.success(), "{status:?}: {log}");
    assert!(began.elapsed() < std::time::Duration::from_secs(10), "the drain is bounded");
    assert!(log.contains("writing the events still queued"), "{log}");

    // A restart on the same data directory has every one of them.
    let (_server, addr, _, _) = start();
    let mut listed = 0;
    let mut path = "/v1/refusals?limit=500&reason=grant_bad_prefix".to_owned();
    loop {
        let page = get_json(&addr, &path, &token);
        listed += page["items"].as_array().unwrap().len();
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/refusals?limit=500&reason=grant_bad_prefix&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(listed, REFUSALS, "every refusal queued at SIGTERM is in the store");
}

#[test]
fn a_run_expired_while_redis_is_down_has_its_grant_revoked_after_a_restart() {
    use gatehouse_config::names;
    // Redis keeps what it holds across a stop (an append-only file).
    let mut redis =
        gatehouse_test_support::RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let db = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}", db.path().join("gatehouse.db").display());
    let redis_url = redis.url();
    let settings = [
        (names::DATABASE_URL, db_url.as_str()),
        (names::REDIS_URL, redis_url.as_str()),
        (names::RUN_HEARTBEAT_TIMEOUT_SECS, "5"),
        (names::LEDGER_TIMEOUT_MS, "300"),
    ];
    let consume = |grant: &str| serde_json::json!({"token": grant, "operation": {"kind": "request"}});

    // The first process: a run, then Redis stops and the run's heartbeat is lost.
    let first = tokio::runtime::Runtime::new().unwrap();
    let (run_id, grant) = first.block_on(async {
        let node = node_with("all", &settings).await;
        let created = call(
            &node,
            "/v1/runs",
            serde_json::json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "print(1)"}}),
        )
        .await;
        assert_eq!(created.status, 201, "{}", created.text);
        let run_id = created.json()["run_id"].as_str().unwrap().to_owned();
        let grant = created.json()["grant"].as_str().unwrap().to_owned();
        assert_eq!(call(&node, "/v1/grants/consume", consume(&grant)).await.json()["allowed"], true);
        redis.stop();
        node.clock.advance(10);
        // A few sweeps find the run past its deadline while the ledger is down.
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        let run = get(&node, &format!("/v1/runs/{run_id}")).await.json();
        assert_eq!(run["status"], "live", "not written expired while its grant lives: {run}");
        (run_id, grant)
    });
    // The process ends, and whatever it kept in memory with it.
    drop(first);
    redis.restart();

    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let node = node_with("all", &settings).await;
        node.clock.advance(10);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let run = get(&node, &format!("/v1/runs/{run_id}")).await.json();
            if run["status"] == "expired" {
                assert_eq!(run["end_reason"], "heartbeat_lost");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the restarted node never expired the run: {run}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let spent = call(&node, "/v1/grants/consume", consume(&grant)).await.json();
        assert_eq!(spent["allowed"], false, "{spent}");
        assert_eq!(spent["reason"], "grant_revoked");
        let events = get(&node, &format!("/v1/runs/{run_id}/events")).await.json();
        assert!(events["items"].as_array().unwrap().iter().any(|e| e["kind"] == "run_ended"), "{events}");
    });
}

/// Holds the node's SQLite write lock until the returned connection commits.
async fn hold_write_lock(node: &Node) -> sqlx::SqliteConnection {
    use sqlx::Connection as _;
    let url = format!("sqlite://{}", node.data.path().join("gatehouse.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await.unwrap();
    conn
}

async fn release(mut lock: sqlx::SqliteConnection) {
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_switch_whose_ledger_fails_between_its_markers_says_what_it_did() {
    use gatehouse_config::names;
    // Redis keeps what it holds across a stop (an append-only file).
    let mut redis =
        gatehouse_test_support::RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let redis_url = redis.url();
    let node = node_with("all", &[(names::REDIS_URL, redis_url.as_str())]).await;
    let ledger = node.state.plane.ledger.clone().unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let created = call(
            &node,
            "/v1/runs",
            serde_json::json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "print(1)"}}),
        )
        .await;
        assert_eq!(created.status, 201, "{}", created.text);
        runs.push(created.json()["run_id"].as_str().unwrap().to_owned());
    }
    // The store is slow to record the switch; the ledger dies meanwhile,
    // after the first marker and before the second.
    let lock = hold_write_lock(&node).await;
    let router = node.router.clone();
    let thrown = tokio::spawn(async move {
        let req = post("/v1/tenants/t1/kill-switch", r#"{"engaged": true, "reason": "incident"}"#);
        send(&router, req).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // A grant registered between the markers (its run's record would come after the switch's).
    use gatehouse_ledger::LedgerBackend as _;
    let between = gatehouse_ledger::Registration {
        grant_id: "gr_between".into(),
        exec_id: "run_between".into(),
        tenant_id: Some("t1".into()),
        exp: NOW + 600,
        input_files: Vec::new(),
        read_sessions: Vec::new(),
        output_session_id: None,
        max_upload_bytes: 0,
        max_output_files: 0,
        max_requests: 100,
        max_egress_bytes: 0,
        max_tool_calls: 0,
    };
    ledger.register(&between).await.unwrap();
    redis.stop();
    release(lock).await;
    let answer = thrown.await.unwrap();
    assert_eq!(answer.status, 503, "{}", answer.text);
    let body = answer.json();
    assert_eq!(body["error"]["reason"], "ledger_unavailable", "{body}");
    assert_eq!(body["engaged"], true);
    assert_eq!(body["revoked"]["runs"], 2, "the runs it killed are said: {body}");
    assert_eq!(body["complete"], false);
    assert_eq!(body["pending"], serde_json::json!(["second_revocation_marker"]));
    for run_id in &runs {
        assert_eq!(get(&node, &format!("/v1/runs/{run_id}")).await.json()["status"], "killed");
        let events = get(&node, &format!("/v1/runs/{run_id}/events")).await.json();
        assert!(
            events["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "run_ended" && e["rule"] == "killed"),
            "{events}"
        );
    }
    // Redis back: the pending marker is written by the retry, and the
    // grant registered between the two markers dies.
    redis.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let spent =
            gatehouse_ledger::spend(&ledger, "gr_between", &gatehouse_ledger::Operation::Request, NOW, true)
                .await;
        if matches!(spent, Err(gatehouse_core::Reason::GrantRevoked)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the second marker was never written: {spent:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_revocation_that_cannot_be_audited_fails_and_a_retry_audits_it() {
    use gatehouse_config::names;
    let node = node_with("all", &[(names::STORE_TIMEOUT_MS, "300")]).await;
    let minted =
        call(&node, "/v1/grants", serde_json::json!({"exec_id": "e1", "tenant_id": "t1", "user_id": "u1"}))
            .await;
    assert_eq!(minted.status, 200, "{}", minted.text);
    let grant_id = minted.json()["grant_id"].as_str().unwrap().to_owned();
    let revoke = format!("/v1/grants/{grant_id}/revoke");
    let lock = hold_write_lock(&node).await;
    let answer = call(&node, &revoke, serde_json::json!({})).await;
    release(lock).await;
    assert_eq!(answer.status, 503, "an unaudited revocation is not a success: {}", answer.text);
    assert_eq!(answer.json()["error"]["reason"], "store_unavailable");
    let audited = |entries: &Value| {
        entries["items"].as_array().unwrap().iter().filter(|e| e["action"] == "grants.revoke").count()
    };
    assert_eq!(audited(&get(&node, "/v1/audit").await.json()), 0);
    let answer = call(&node, &revoke, serde_json::json!({})).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let audit = get(&node, "/v1/audit").await.json();
    assert_eq!(audited(&audit), 1, "{audit}");
    let entry = audit["items"].as_array().unwrap().iter().find(|e| e["action"] == "grants.revoke").unwrap();
    assert_eq!(
        (entry["actor"].as_str(), entry["subject"].as_str()),
        (Some("service"), Some(grant_id.as_str()))
    );
}

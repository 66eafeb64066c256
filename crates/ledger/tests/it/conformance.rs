//! One conformance suite, run against both backends: the in-process ledger
//! and a private `redis-server` started for each test on a free loopback port.

use gatehouse_test_support::RedisServer;

use gatehouse_core::Reason;
use gatehouse_ledger::{
    LedgerBackend, MemoryLedger, Operation, Rate, RedisLedger, RedisLedgerConfig, Registered, Registration,
    RevokeScope, Status,
};

const NOW: i64 = 1_800_000_000;

fn registration(grant_id: &str) -> Registration {
    Registration {
        grant_id: grant_id.into(),
        exec_id: "exec-1".into(),
        tenant_id: Some("t1".into()),
        exp: NOW + 300,
        input_files: vec!["in-a".into(), "in-b".into()],
        read_sessions: vec!["sess-1".into()],
        output_session_id: Some("out-1".into()),
        max_upload_bytes: 100,
        max_output_files: 2,
        max_requests: 10,
        max_egress_bytes: 1000,
        max_tool_calls: 5,
    }
}

fn upload(bytes: u64, file: &str) -> Operation {
    Operation::Upload { session: "out-1".into(), bytes, output_file_id: file.into() }
}

async fn registers_idempotently_and_refuses_conflicts(l: impl LedgerBackend) {
    let r = registration("g1");
    assert_eq!(l.register(&r).await, Ok(Registered::New));
    assert_eq!(l.register(&r).await, Ok(Registered::Existing));
    let other = Registration { max_requests: 11, ..r.clone() };
    assert_eq!(l.register(&other).await, Err(Reason::GrantConflict));
    let record = l.get("g1").await.unwrap().unwrap();
    assert_eq!(record.registration, r, "a conflicting registration changes nothing");
}

async fn spends_the_request_budget_exactly(l: impl LedgerBackend) {
    l.register(&Registration { max_requests: 3, ..registration("g1") }).await.unwrap();
    let mut left = Vec::new();
    for _ in 0..3 {
        left.push(l.consume("g1", &Operation::Request, NOW).await.unwrap().requests);
    }
    assert_eq!(left, [2, 1, 0]);
    for op in [Operation::Request, Operation::ToolCall, Operation::ReadFile { file: "in-a".into() }] {
        assert_eq!(l.consume("g1", &op, NOW).await, Err(Reason::BudgetRequestsExhausted));
    }
    assert_eq!(l.get("g1").await.unwrap().unwrap().request_count, 3);
}

async fn spends_the_tool_call_budget_within_the_requests(l: impl LedgerBackend) {
    l.register(&Registration { max_tool_calls: 2, ..registration("g1") }).await.unwrap();
    let mut left = Vec::new();
    for _ in 0..2 {
        let remaining = l.consume("g1", &Operation::ToolCall, NOW).await.unwrap();
        left.push((remaining.tool_calls, remaining.requests));
    }
    assert_eq!(left, [(1, 9), (0, 8)], "each tool call is a request too");
    assert_eq!(l.consume("g1", &Operation::ToolCall, NOW).await, Err(Reason::BudgetToolCallsExhausted));
    // Other requests go on; nothing of the refused call was counted.
    assert_eq!(l.consume("g1", &Operation::Request, NOW).await.unwrap().tool_calls, 0);
    let record = l.get("g1").await.unwrap().unwrap();
    assert_eq!((record.tool_call_count, record.request_count), (2, 3));
    // The request budget still comes first.
    l.register(&Registration { max_requests: 1, ..registration("g2") }).await.unwrap();
    l.consume("g2", &Operation::Request, NOW).await.unwrap();
    assert_eq!(l.consume("g2", &Operation::ToolCall, NOW).await, Err(Reason::BudgetRequestsExhausted));
}

async fn checks_scope(l: impl LedgerBackend) {
    l.register(&registration("g1")).await.unwrap();
    assert!(l.consume("g1", &Operation::ReadFile { file: "in-a".into() }, NOW).await.is_ok());
    assert_eq!(
        l.consume("g1", &Operation::ReadFile { file: "secret".into() }, NOW).await,
        Err(Reason::ScopeFileNotGranted)
    );
    assert!(l.consume("g1", &Operation::ReadSession { session: "sess-1".into() }, NOW).await.is_ok());
    assert_eq!(
        l.consume("g1", &Operation::ReadSession { session: "sess-2".into() }, NOW).await,
        Err(Reason::ScopeSessionNotGranted)
    );
    let wrong = Operation::Upload { session: "other".into(), bytes: 1, output_file_id: "f".into() };
    assert_eq!(l.consume("g1", &wrong, NOW).await, Err(Reason::ScopeOutputSessionMismatch));

    l.register(&Registration { output_session_id: None, ..registration("g2") }).await.unwrap();
    assert_eq!(l.consume("g2", &upload(1, "f"), NOW).await, Err(Reason::ScopeOutputSessionMismatch));

    let record = l.get("g1").await.unwrap().unwrap();
    assert_eq!((record.request_count, record.read_count), (2, 2), "refusals spend nothing");
}

async fn spends_upload_budgets_atomically(l: impl LedgerBackend) {
    l.register(&registration("g1")).await.unwrap();
    let r = l.consume("g1", &upload(60, "f1"), NOW).await.unwrap();
    assert_eq!((r.upload_bytes, r.output_files), (40, 1));
    // Too many bytes: refused, and neither bytes nor files nor requests move.
    assert_eq!(l.consume("g1", &upload(41, "f2"), NOW).await, Err(Reason::BudgetUploadBytesExhausted));
    assert_eq!(l.consume("g1", &upload(u64::MAX, "f2"), NOW).await, Err(Reason::BudgetUploadBytesExhausted));
    // Appending to an existing output file spends bytes, not files.
    let r = l.consume("g1", &upload(10, "f1"), NOW).await.unwrap();
    assert_eq!((r.upload_bytes, r.output_files), (30, 1));
    l.consume("g1", &upload(10, "f2"), NOW).await.unwrap();
    assert_eq!(l.consume("g1", &upload(1, "f3"), NOW).await, Err(Reason::BudgetOutputFilesExhausted));
    let record = l.get("g1").await.unwrap().unwrap();
    assert_eq!(
        (record.request_count, record.upload_count, record.uploaded_bytes),
        (3, 3, 80),
        "only the accepted uploads counted"
    );
    let mut files = record.output_file_ids.clone();
    files.sort();
    assert_eq!(files, ["f1", "f2"]);
}

async fn refuses_unknown_expired_and_revoked_grants(l: impl LedgerBackend) {
    assert_eq!(l.consume("nope", &Operation::Request, NOW).await, Err(Reason::GrantUnknown));
    assert_eq!(l.get("nope").await, Ok(None));
    l.register(&registration("g1")).await.unwrap();
    assert_eq!(l.consume("g1", &Operation::Request, NOW + 300).await, Err(Reason::GrantExpired));
    assert_eq!(l.revoke(&RevokeScope::Grant("g1".into())).await, Ok(1));
    assert_eq!(l.revoke(&RevokeScope::Grant("g1".into())).await, Ok(0), "already revoked");
    assert_eq!(l.consume("g1", &Operation::Request, NOW).await, Err(Reason::GrantRevoked));
    assert_eq!(l.get("g1").await.unwrap().unwrap().status, Status::Revoked);
    // Registering a revoked grant again does not revive it.
    assert_eq!(l.register(&registration("g1")).await, Ok(Registered::Existing));
    assert_eq!(l.consume("g1", &Operation::Request, NOW).await, Err(Reason::GrantRevoked));
}

async fn every_spend_answers_with_the_lease_generation(l: impl LedgerBackend) {
    assert_eq!(l.bump_lease_generation("nope").await, Err(Reason::GrantUnknown));
    assert_eq!(l.lease_generation("nope").await, Ok(0), "no record: nothing to bump");
    l.register(&registration("g1")).await.unwrap();
    assert_eq!(l.lease_generation("g1").await, Ok(0));
    let spent = l.consume("g1", &Operation::Request, NOW).await.unwrap();
    assert_eq!(spent.lease_generation, 0, "no lease changed yet");
    assert_eq!(l.bump_lease_generation("g1").await, Ok(1));
    assert_eq!(l.bump_lease_generation("g1").await, Ok(2));
    assert_eq!(l.consume("g1", &Operation::Request, NOW).await.unwrap().lease_generation, 2);
    assert_eq!(l.consume("g1", &Operation::Egress { bytes: 1 }, NOW).await.unwrap().lease_generation, 2);
    assert_eq!(l.get("g1").await.unwrap().unwrap().lease_generation, 2);
    assert_eq!(l.lease_generation("g1").await, Ok(2), "the door's one-field read agrees");
    // Nothing else moved: the generation is not a budget.
    assert_eq!(l.get("g1").await.unwrap().unwrap().request_count, 2);
}

async fn revokes_by_exec_tenant_and_all(l: impl LedgerBackend) {
    let grant = |id: &str, exec: &str, tenant: &str| Registration {
        exec_id: exec.into(),
        tenant_id: Some(tenant.into()),
        ..registration(id)
    };
    for r in [grant("a", "e1", "t1"), grant("b", "e1", "t1"), grant("c", "e2", "t1"), grant("d", "e3", "t2")]
    {
        l.register(&r).await.unwrap();
    }
    assert_eq!(l.revoke(&RevokeScope::Exec("e1".into())).await, Ok(2));
    assert_eq!(l.revoke(&RevokeScope::Tenant("t1".into())).await, Ok(1), "a and b were already revoked");
    assert!(l.consume("d", &Operation::Request, NOW).await.is_ok(), "another tenant is untouched");
    assert_eq!(l.revoke(&RevokeScope::All).await, Ok(1));
    for id in ["a", "b", "c", "d"] {
        assert_eq!(l.consume(id, &Operation::Request, NOW).await, Err(Reason::GrantRevoked), "{id}");
    }
}

/// Tenant-wide and global revocation are markers: they revoke what was
/// registered before them, in one step, and leave later grants live.
async fn scope_revocation_marks_and_later_grants_live(l: impl LedgerBackend) {
    let grant = |id: &str, tenant: Option<&str>| Registration {
        exec_id: format!("e-{id}"),
        tenant_id: tenant.map(str::to_owned),
        ..registration(id)
    };
    for (id, tenant) in [("a", Some("t1")), ("b", Some("t1")), ("c", Some("t2")), ("d", None)] {
        l.register(&grant(id, tenant)).await.unwrap();
    }
    assert_eq!(l.revoke(&RevokeScope::Tenant("t1".into())).await, Ok(2));
    assert_eq!(l.get("a").await.unwrap().unwrap().status, Status::Revoked, "the record reports the marker");
    assert_eq!(l.revoke(&RevokeScope::Grant("a".into())).await, Ok(0), "already revoked by the marker");
    assert_eq!(l.consume("b", &Operation::Request, NOW).await, Err(Reason::GrantRevoked));
    // Registering a covered grant again does not revive it.
    assert_eq!(l.register(&grant("b", Some("t1"))).await, Ok(Registered::Existing));
    assert_eq!(l.consume("b", &Operation::Request, NOW).await, Err(Reason::GrantRevoked));
    l.register(&grant("e", Some("t1"))).await.unwrap();
    assert!(l.consume("e", &Operation::Request, NOW).await.is_ok(), "a grant after the marker is live");
    assert!(l.consume("c", &Operation::Request, NOW).await.is_ok(), "another tenant is untouched");
    assert_eq!(l.revoke(&RevokeScope::Tenant("t3".into())).await, Ok(0), "a tenant with no grants");

    assert_eq!(l.revoke(&RevokeScope::All).await, Ok(3), "c, d and e");
    for id in ["a", "b", "c", "d", "e"] {
        assert_eq!(l.consume(id, &Operation::Request, NOW).await, Err(Reason::GrantRevoked), "{id}");
        assert_eq!(l.get(id).await.unwrap().unwrap().status, Status::Revoked, "{id}");
    }
    assert_eq!(l.revoke(&RevokeScope::Tenant("t1".into())).await, Ok(0), "the global marker took them");
    l.register(&grant("f", Some("t2"))).await.unwrap();
    assert!(l.consume("f", &Operation::Request, NOW).await.is_ok());
    assert_eq!(l.revoke(&RevokeScope::Tenant("t2".into())).await, Ok(1));
}

/// Many tasks against one budget spend exactly the budget, never one more.
async fn concurrent_consumers_never_overspend(l: impl LedgerBackend + Clone + Send + Sync + 'static) {
    l.register(&Registration { max_requests: 100, ..registration("g1") }).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0u32;
            for _ in 0..5 {
                if l.consume("g1", &Operation::Request, NOW).await.is_ok() {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 100);
    assert_eq!(l.get("g1").await.unwrap().unwrap().request_count, 100);
}

/// Egress bytes are paid exactly up to the budget and are not requests: a
/// tunnel opened with the last request still moves its bytes, and a spent
/// request budget does not stop them; a revoked grant's bytes stop.
async fn spends_egress_bytes_exactly_apart_from_requests(l: impl LedgerBackend) {
    l.register(&Registration { max_requests: 1, ..registration("g1") }).await.unwrap();
    l.consume("g1", &Operation::Request, NOW).await.unwrap();
    let left = l.consume("g1", &Operation::Egress { bytes: 600 }, NOW).await.unwrap();
    assert_eq!((left.egress_bytes, left.requests), (400, 0));
    assert_eq!(
        l.consume("g1", &Operation::Egress { bytes: 401 }, NOW).await,
        Err(Reason::BudgetEgressBytesExhausted),
        "one byte over refuses the whole chunk"
    );
    assert_eq!(l.consume("g1", &Operation::Egress { bytes: 400 }, NOW).await.unwrap().egress_bytes, 0);
    assert_eq!(
        l.consume("g1", &Operation::Egress { bytes: 1 }, NOW).await,
        Err(Reason::BudgetEgressBytesExhausted)
    );
    assert_eq!(
        l.consume("g1", &Operation::Egress { bytes: u64::MAX }, NOW).await,
        Err(Reason::BudgetEgressBytesExhausted)
    );
    let record = l.get("g1").await.unwrap().unwrap();
    assert_eq!((record.egress_bytes, record.request_count), (1000, 1));

    l.register(&registration("g2")).await.unwrap();
    l.consume("g2", &Operation::Egress { bytes: 10 }, NOW).await.unwrap();
    l.revoke(&RevokeScope::Tenant("t1".into())).await.unwrap();
    assert_eq!(l.consume("g2", &Operation::Egress { bytes: 10 }, NOW).await, Err(Reason::GrantRevoked));
    l.register(&registration("g3")).await.unwrap();
    assert_eq!(l.consume("g3", &Operation::Egress { bytes: 10 }, NOW + 300).await, Err(Reason::GrantExpired));
}

/// Many tasks paying egress bytes against one budget never pay past it.
async fn concurrent_egress_never_overspends(l: impl LedgerBackend + Clone + Send + Sync + 'static) {
    l.register(&Registration { max_egress_bytes: 1000, ..registration("g1") }).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            let mut paid = 0u64;
            for _ in 0..10 {
                if l.consume("g1", &Operation::Egress { bytes: 7 }, NOW).await.is_ok() {
                    paid += 7;
                }
            }
            paid
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 994, "142 chunks of 7 fit in 1000");
    assert_eq!(l.get("g1").await.unwrap().unwrap().egress_bytes, 994);
}

/// A rate is taken up to its limit in a window, refused past it (counting
/// nothing), slides into the next window by the overlap, and is kept per
/// key.
async fn takes_a_rate_and_slides_its_window(l: impl LedgerBackend) {
    const WINDOW: i64 = 60;
    let start = (NOW / WINDOW) * WINDOW;
    for _ in 0..5 {
        assert_eq!(l.take_rate("t1", 5, WINDOW, start + 10).await, Ok(Rate::Taken));
    }
    assert_eq!(l.take_rate("t1", 5, WINDOW, start + 20).await, Ok(Rate::Spent { retry_after_secs: 40 }));
    assert_eq!(l.take_rate("t2", 5, WINDOW, start + 20).await, Ok(Rate::Taken), "another key has its own");
    // A third into the next window, two thirds of the previous five still
    // count (3.33): two more fit (4.33 before the second), the third not.
    for _ in 0..2 {
        assert_eq!(l.take_rate("t1", 5, WINDOW, start + WINDOW + 20).await, Ok(Rate::Taken));
    }
    assert_eq!(
        l.take_rate("t1", 5, WINDOW, start + WINDOW + 20).await,
        Ok(Rate::Spent { retry_after_secs: 40 })
    );
    // Two windows on, nothing of the first counts.
    for _ in 0..5 {
        assert_eq!(l.take_rate("t1", 5, WINDOW, start + 3 * WINDOW).await, Ok(Rate::Taken));
    }
}

/// Many tasks taking one rate at once never take more than its limit.
async fn concurrent_takers_never_exceed_a_rate(l: impl LedgerBackend + Clone + Send + Sync + 'static) {
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            let mut taken = 0;
            for _ in 0..10 {
                taken += u32::from(l.take_rate("t1", 60, 60, NOW).await == Ok(Rate::Taken));
            }
            taken
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 60);
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(gatehouse_ledger::MemoryLedger::new()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let server = super::RedisServer::start();
                    super::$name(server.ledger()).await;
                }
            )*
        }
    };
}

conformance!(
    registers_idempotently_and_refuses_conflicts,
    spends_the_request_budget_exactly,
    spends_the_tool_call_budget_within_the_requests,
    checks_scope,
    spends_upload_budgets_atomically,
    refuses_unknown_expired_and_revoked_grants,
    revokes_by_exec_tenant_and_all,
    scope_revocation_marks_and_later_grants_live,
    concurrent_consumers_never_overspend,
    spends_egress_bytes_exactly_apart_from_requests,
    concurrent_egress_never_overspends,
    every_spend_answers_with_the_lease_generation,
    takes_a_rate_and_slides_its_window,
    concurrent_takers_never_exceed_a_rate,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_redis_clients_share_one_budget() {
    let server = RedisServer::start();
    let nodes: Vec<RedisLedger> = (0..4).map(|_| server.ledger()).collect();
    nodes[0].register(&Registration { max_requests: 60, ..registration("g1") }).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let node = nodes[i % nodes.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0u32;
            for _ in 0..3 {
                ok += u32::from(node.consume("g1", &Operation::Request, NOW).await.is_ok());
            }
            ok
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_going_away_fails_closed_and_coming_back_recovers() {
    let mut server = RedisServer::start();
    let l = server.ledger();
    l.register(&registration("g1")).await.unwrap();
    l.consume("g1", &Operation::Request, NOW).await.unwrap();

    server.stop();
    for op in [Operation::Request, upload(1, "f")] {
        assert_eq!(l.consume("g1", &op, NOW).await, Err(Reason::LedgerUnavailable));
    }
    assert_eq!(l.register(&registration("g2")).await, Err(Reason::LedgerUnavailable));
    assert_eq!(l.revoke(&RevokeScope::All).await, Err(Reason::LedgerUnavailable));
    assert_eq!(l.get("g1").await, Err(Reason::LedgerUnavailable));

    server.restart();
    // The same client reconnects by itself. A non-persistent Redis lost the
    // record, which is `grant_unknown`: still a refusal.
    let mut recovered = Err(Reason::LedgerUnavailable);
    for _ in 0..50 {
        recovered = l.consume("g1", &Operation::Request, NOW).await;
        if recovered != Err(Reason::LedgerUnavailable) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(recovered, Err(Reason::GrantUnknown));
    assert_eq!(l.register(&registration("g1")).await, Ok(Registered::New));
    assert!(l.consume("g1", &Operation::Request, NOW).await.is_ok());
}

#[test]
fn outside_a_runtime_construction_refuses_instead_of_panicking() {
    assert!(RedisLedger::new(&RedisLedgerConfig::new("redis://127.0.0.1:1/")).is_err());
}

#[tokio::test]
async fn a_bad_url_is_unavailable_not_a_panic() {
    let l = RedisLedger::new(&RedisLedgerConfig::new("redis://127.0.0.1:1/")).unwrap();
    assert_eq!(l.consume("g", &Operation::Request, NOW).await, Err(Reason::LedgerUnavailable));
    assert!(RedisLedger::new(&RedisLedgerConfig::new("not a url")).is_err());
    let _ = MemoryLedger::new();
}

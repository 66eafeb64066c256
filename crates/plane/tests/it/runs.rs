//! Runs: created whole or not at all; every way out revokes in the ledger
//! before the store records it; every change audited.

use gatehouse_core::Reason;
use gatehouse_ledger::{LedgerBackend as _, Status};
use gatehouse_plane::PlaneError;
use gatehouse_store::RunStatus;
use serde_json::json;

use crate::support::{T0, bound, node, platform, run_of};

#[tokio::test]
async fn a_run_is_its_record_its_registered_grant_and_its_audit_entry_together() {
    let node = node().await;
    let run = node.run("t1").await;
    let stored = node.plane.run(&run.run_id).await.unwrap();
    assert_eq!((stored.status, stored.grant_id.as_str()), (RunStatus::Live, run.grant_id.as_str()));
    let record = node.ledger.get(&run.grant_id).await.unwrap().expect("registered before it is handed out");
    assert_eq!(record.status, Status::Active);
    assert_eq!(record.registration.exp, T0 + 600);
    let audit = node.audit().await;
    assert!(
        audit.iter().any(|e| e.record.subject == run.run_id && e.record.tenant_id.as_deref() == Some("t1")),
        "the run's creation is audited: {:?}",
        audit.iter().map(|e| (&e.record.action, &e.record.subject)).collect::<Vec<_>>()
    );
    // The grant opens to the run's own claims.
    let opened = node.plane.open_token("req", Some(&run.grant)).unwrap().unwrap();
    assert_eq!((opened.exec_id.as_str(), opened.tenant_id.as_deref()), (run.run_id.as_str(), Some("t1")));
}

#[tokio::test]
async fn claims_that_contradict_the_run_leave_nothing_behind() {
    let node = node().await;
    let mut req = run_of("t1");
    req.claims.insert("tenant_id".into(), json!("t2"));
    let e = node.plane.create_run("req", &platform(), req).await.unwrap_err();
    assert_eq!(e, PlaneError::invalid("claims must not contradict the run's ids, files or budgets"));
    let mut req = run_of("t1");
    req.ttl_secs = Some(3601);
    assert!(matches!(node.plane.create_run("req", &platform(), req).await, Err(PlaneError::Invalid { .. })));
    let runs =
        node.store.runs(None, None, &gatehouse_store::PageRequest { limit: 10, cursor: None }).await.unwrap();
    assert!(runs.items.is_empty(), "no run was recorded");
}

#[tokio::test]
async fn a_bound_caller_creates_runs_of_its_own_tenants_only_and_is_recorded() {
    let node = node().await;
    let e = node.plane.create_run("req-x", &bound("ci", &["t1"]), run_of("t2")).await.unwrap_err();
    assert_eq!(e, PlaneError::Refused(Reason::TenantNotAllowed));
    node.plane.create_run("req-y", &bound("ci", &["t1"]), run_of("t1")).await.unwrap();
    assert!(node.plane.flush().await);
    let refusals = node
        .plane
        .refusals(
            "req",
            &platform(),
            Default::default(),
            &gatehouse_store::PageRequest { limit: 10, cursor: None },
        )
        .await
        .unwrap();
    let reasons: Vec<_> = refusals.read.items.iter().map(|e| e.event.reason.clone()).collect();
    assert_eq!(reasons, [Some("tenant_not_allowed".to_owned())]);
}

#[tokio::test]
async fn ending_a_run_revokes_its_grant_before_recording_it_and_twice_is_harmless() {
    let node = node().await;
    let run = node.run("t1").await;
    let finished = node.plane.finish(&run.run_id, RunStatus::Ended, "succeeded", "platform").await.unwrap();
    assert_eq!((finished.run.status, finished.leases), (RunStatus::Ended, Some(0)));
    assert_eq!(node.ledger.get(&run.grant_id).await.unwrap().unwrap().status, Status::Revoked);
    // The grant no longer opens for a spend.
    let spent = node
        .plane
        .consume_grant("req", &platform(), Some(&run.grant), &gatehouse_ledger::Operation::Request)
        .await
        .unwrap();
    assert_eq!(spent.unwrap_err(), Reason::GrantRevoked);
    // Again: nothing more is revoked, the run keeps its first ending.
    let again = node.plane.finish(&run.run_id, RunStatus::Cancelled, "cancelled", "platform").await.unwrap();
    assert_eq!((again.run.status, again.leases), (RunStatus::Ended, None));
    assert!(matches!(
        node.plane.finish("run_none", RunStatus::Ended, "succeeded", "platform").await,
        Err(PlaneError::NotFound(Some(Reason::RunUnknown)))
    ));
}

#[tokio::test]
async fn a_heartbeat_keeps_a_run_and_a_lost_one_expires_it_grant_first() {
    let node = node().await;
    let run = node.run("t1").await;
    node.clock.advance(100);
    let (kept, _) = node.plane.heartbeat(&run.run_id).await.unwrap();
    assert_eq!(kept.heartbeat_at, T0 + 100);
    node.clock.advance(100);
    node.plane.expire_due_runs().await;
    assert_eq!(node.plane.run(&run.run_id).await.unwrap().status, RunStatus::Live, "within its heartbeat");
    node.clock.advance(121);
    node.plane.expire_due_runs().await;
    assert_eq!(node.plane.run(&run.run_id).await.unwrap().status, RunStatus::Expired);
    assert_eq!(node.ledger.get(&run.grant_id).await.unwrap().unwrap().status, Status::Revoked);
    assert!(matches!(
        node.plane.heartbeat(&run.run_id).await,
        Err(PlaneError::Conflict(Some(Reason::RunNotLive)))
    ));
}

#[tokio::test]
async fn lists_of_runs_hold_only_what_the_caller_may_see() {
    let node = node().await;
    let a = node.run("t1").await;
    let b = node.run("t2").await;
    let page = gatehouse_store::PageRequest { limit: 10, cursor: None };
    let all = node.plane.list_runs("req", &platform(), None, None, &page).await.unwrap();
    assert_eq!(all.items.len(), 2);
    let own = node.plane.list_runs("req", &bound("ci", &["t2"]), None, None, &page).await.unwrap();
    assert_eq!(own.items.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), [b.run_id.as_str()]);
    let other = node.plane.list_runs("req", &bound("ci", &["t2"]), Some("t1".into()), None, &page).await;
    assert_eq!(other.unwrap_err(), PlaneError::Refused(Reason::TenantNotAllowed));
    let live = node.plane.list_runs("req", &platform(), None, Some(RunStatus::Ended), &page).await.unwrap();
    assert!(live.items.is_empty(), "{}", a.run_id);
}

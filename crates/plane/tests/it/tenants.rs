//! Tenants' settings and revocation: the kill switch in force for every way
//! out, emergency revoke only for a global caller, every change audited.

use gatehouse_capability::grant::GrantRequest;
use gatehouse_core::Reason;
use gatehouse_egress::PolicyDocument;
use gatehouse_egress::proxy::PolicySource as _;
use gatehouse_ledger::{LedgerBackend as _, RevokeScope, Status};
use gatehouse_plane::PlaneError;
use gatehouse_store::RunStatus;

use crate::support::{bound, node, platform, run_of};

fn policy(json: &str) -> PolicyDocument {
    serde_json::from_str(json).unwrap()
}

fn grant_request(tenant: &str, exec: &str) -> GrantRequest {
    serde_json::from_value(serde_json::json!({"exec_id": exec, "tenant_id": tenant, "user_id": "u1"}))
        .unwrap()
}

#[tokio::test]
async fn an_engaged_kill_switch_kills_runs_revokes_grants_and_refuses_every_new_way_out() {
    let node = node().await;
    let run = node.run("t1").await;
    let other = node.run("t2").await;
    let revoked =
        node.plane.throw_kill_switch("req", "t1", true, Some("incident 7"), "platform").await.unwrap();
    assert_eq!((revoked.runs, revoked.second_marker_pending), (1, false));
    assert!(revoked.grants >= 1);
    assert_eq!(node.plane.run(&run.run_id).await.unwrap().status, RunStatus::Killed);
    assert_eq!(node.ledger.get(&run.grant_id).await.unwrap().unwrap().status, Status::Revoked);
    assert_eq!(
        node.plane.run(&other.run_id).await.unwrap().status,
        RunStatus::Live,
        "another tenant's run lives"
    );
    // No new run, no grant minted outside a run.
    let refused = node.plane.create_run("req", &platform(), run_of("t1")).await.unwrap_err();
    assert_eq!(refused, PlaneError::Refused(Reason::TenantKillSwitch));
    let refused = node.plane.mint_grant("req", &platform(), grant_request("t1", "exec-1")).await.unwrap_err();
    assert_eq!(refused, PlaneError::Refused(Reason::TenantKillSwitch));
    // Released: runs start again.
    node.plane.throw_kill_switch("req", "t1", false, None, "platform").await.unwrap();
    node.run("t1").await;
    let actions = node.actions().await;
    assert!(actions.iter().filter(|a| a.contains("kill")).count() >= 2, "both throws audited: {actions:?}");
}

#[tokio::test]
async fn emergency_revoke_is_for_a_global_caller_and_kills_every_tenants_runs() {
    let node = node().await;
    let a = node.run("t1").await;
    let b = node.run("t2").await;
    let e = node.plane.require_global("req", &bound("ci", &["t1"])).unwrap_err();
    assert_eq!(e, PlaneError::Refused(Reason::TenantNotAllowed));
    let revoked = node.plane.revoke_everything("req", None, "platform").await.unwrap();
    assert_eq!(revoked.runs, 2);
    for run in [&a, &b] {
        assert_eq!(node.plane.run(&run.run_id).await.unwrap().status, RunStatus::Killed);
        assert_eq!(node.ledger.get(&run.grant_id).await.unwrap().unwrap().status, Status::Revoked);
    }
    assert!(matches!(
        node.plane.revoke_everything("req", Some("bad\u{7}reason"), "platform").await,
        Err(PlaneError::Invalid { .. })
    ));
}

#[tokio::test]
async fn a_minted_grant_is_audited_and_a_ledger_only_revocation_too() {
    let node = node().await;
    let minted = node.plane.mint_grant("req", &platform(), grant_request("t1", "exec-1")).await.unwrap();
    assert!(node.ledger.get(&minted.claims.grant_id).await.unwrap().is_some(), "registered");
    let revoked = node
        .plane
        .revoke_grants("req", &platform(), &RevokeScope::Grant(minted.claims.grant_id.clone()))
        .await
        .unwrap();
    assert_eq!(revoked, 1);
    let actions = node.actions().await;
    assert!(
        actions.contains(&"grant.mint".to_owned()) && actions.contains(&"grants.revoke".to_owned()),
        "{actions:?}"
    );
    // A bound caller revokes nothing of another tenant, nor everything.
    let ci = bound("ci", &["t1"]);
    assert!(node.plane.revoke_grants("req", &ci, &RevokeScope::Tenant("t2".into())).await.is_err());
    assert!(node.plane.revoke_grants("req", &ci, &RevokeScope::All).await.is_err());
}

#[tokio::test]
async fn a_policy_is_checked_before_it_is_stored_versioned_audited_and_in_force_here_at_once() {
    let node = node().await;
    let bad = policy(r#"{"mode": "allowlist", "allow": ["exa mple.com"]}"#);
    let e = node.plane.set_policy("req", "t1", &bad, "platform", None).await.unwrap_err();
    assert_eq!(e.reason(), Some(Reason::PolicyUnreadable));
    assert!(node.plane.policy("t1").await.unwrap().is_none(), "nothing stored");
    let good = policy(r#"{"mode": "allowlist", "allow": ["example.com"]}"#);
    let v1 = node.plane.set_policy("req", "t1", &good, "platform", None).await.unwrap();
    assert_eq!(v1.version, 1);
    // This node's replica holds it before the call returns.
    assert!(node.plane.policies.policy(Some("t1")).is_ok());
    let stale = node.plane.set_policy("req", "t1", &good, "person:ana", Some(0)).await.unwrap_err();
    assert_eq!(stale, PlaneError::Conflict(Some(Reason::PolicyStale)));
    node.plane.set_policy("req", "t1", &good, "person:ana", Some(1)).await.unwrap();
    assert!(node.actions().await.iter().filter(|a| *a == "policy.set").count() == 2);
}

#[tokio::test]
async fn the_gate_mode_is_one_of_three_and_high_by_default() {
    let node = node().await;
    assert_eq!(node.plane.gate_mode("t1").await.unwrap(), "high");
    assert!(matches!(
        node.plane.set_gate_mode("t1", "lenient", "platform").await,
        Err(PlaneError::Invalid { .. })
    ));
    node.plane.set_gate_mode("t1", "critical", "platform").await.unwrap();
    assert_eq!(node.plane.gate_mode("t1").await.unwrap(), "critical");
}

//! Credentials and leases: the secret sealed at once and never stored in
//! clear; every change to a run's leases reaches every door (the lease
//! generation) before the call returns.

use gatehouse_core::Reason;
use gatehouse_ledger::LedgerBackend as _;
use gatehouse_plane::PlaneError;
use gatehouse_plane::credential_kinds::{Kind, Material};
use gatehouse_plane::credentials::{InjectSpec, NewCredential};
use gatehouse_store::{Lease, RunStatus};
use zeroize::Zeroizing;

use crate::support::{Node, node};

const SECRET: &str = "ghp_plane-test-secret-0123456789";

fn credential() -> NewCredential {
    NewCredential {
        name: "github".into(),
        purpose: "git_provider".into(),
        hosts: vec!["GitHub.com.".into()],
        kind: Kind::Static,
        inject: Some(InjectSpec {
            header: Some("authorization".into()),
            format: Some("Bearer {secret}".into()),
            basic_username: None,
        }),
        allow_plain_http: false,
        material: Material::Static(Zeroizing::new(SECRET.into())),
    }
}

/// A `git_provider` lease of `run_id` on `credential_id` toward github.com.
async fn lease(node: &Node, run_id: &str, credential_id: &str) -> Result<Lease, PlaneError> {
    node.plane
        .grant_lease(
            run_id.to_owned(),
            credential_id.to_owned(),
            "git_provider".into(),
            "github.com",
            "platform",
        )
        .await
}

#[tokio::test]
async fn a_credential_is_sealed_at_once_and_its_secret_is_in_no_row() {
    let node = node().await;
    let stored = node.plane.create_credential("req", "t1".into(), credential(), "platform").await.unwrap();
    assert_eq!(stored.host, "github.com", "the host as leases compare it");
    assert!(!stored.sealed.contains(SECRET) && !stored.fingerprint.contains(SECRET));
    let dup = node.plane.create_credential("req", "t1".into(), credential(), "platform").await.unwrap_err();
    assert!(matches!(dup, PlaneError::Invalid { .. }));
    let rotated = node
        .plane
        .rotate_credential("req", "t1", &stored.credential_id, "another-secret-value", "platform")
        .await
        .unwrap();
    assert_eq!(rotated.version, 2);
    assert_ne!(rotated.fingerprint, stored.fingerprint);
    let e = node.plane.credential("t2", &stored.credential_id).await.unwrap_err();
    assert_eq!(e, PlaneError::NotFound(Some(Reason::CredentialUnknown)), "another tenant's id finds nothing");
    for entry in node.audit().await {
        assert!(!entry.record.detail.to_string().contains(SECRET));
    }
}

#[tokio::test]
async fn every_lease_change_moves_the_runs_lease_generation_before_it_returns() {
    let node = node().await;
    let stored = node.plane.create_credential("req", "t1".into(), credential(), "platform").await.unwrap();
    let run = node.run("t1").await;
    let generation = || async { node.ledger.lease_generation(&run.grant_id).await.unwrap() };
    let before = generation().await;
    let granted_lease = lease(&node, &run.run_id, &stored.credential_id).await.unwrap();
    let granted = generation().await;
    assert!(granted > before);
    assert_eq!(node.plane.revoke_lease(&granted_lease.lease_id, "platform").await.unwrap(), 1);
    let revoked = generation().await;
    assert!(revoked > granted);
    // Revoked before: 0, and the doors are told again.
    assert_eq!(node.plane.revoke_lease(&granted_lease.lease_id, "platform").await.unwrap(), 0);
    assert!(generation().await > revoked);
    // A lease revoked stays revoked for the run: none is granted again.
    let again = lease(&node, &run.run_id, &stored.credential_id).await.unwrap_err();
    assert_eq!(again, PlaneError::Refused(Reason::RunLeaseRevoked));
    // Another tenant's credential is no lease of a run's.
    let run = node.run("t1").await;
    let other = node.plane.create_credential("req", "t2".into(), credential(), "platform").await.unwrap();
    let e = lease(&node, &run.run_id, &other.credential_id).await.unwrap_err();
    assert_eq!(e, PlaneError::NotFound(Some(Reason::CredentialUnknown)));
}

#[tokio::test]
async fn a_run_that_ends_takes_its_leases_with_it_and_a_deleted_credential_too() {
    let node = node().await;
    let stored = node.plane.create_credential("req", "t1".into(), credential(), "platform").await.unwrap();
    let a = node.run("t1").await;
    let b = node.run("t1").await;
    for run in [&a, &b] {
        lease(&node, &run.run_id, &stored.credential_id).await.unwrap();
    }
    let finished = node.plane.finish(&a.run_id, RunStatus::Cancelled, "cancelled", "platform").await.unwrap();
    assert_eq!(finished.leases, Some(1));
    let e = lease(&node, &a.run_id, &stored.credential_id).await.unwrap_err();
    assert_eq!(e, PlaneError::Conflict(Some(Reason::RunNotLive)));
    assert_eq!(node.plane.delete_credential("t1", &stored.credential_id, "platform").await.unwrap(), 1);
}

//! Dependency scans and the gate: a submission is recorded before it is
//! scanned, the newest submission for a head decides, a person is never
//! held to the gate, and every check is audited.

use std::time::Duration;

use base64::Engine as _;
use gatehouse_deps::gate::GateReason;
use gatehouse_plane::PlaneError;
use gatehouse_plane::scans::{Submission, Submitted};

use crate::support::node;

const HEAD: &str = "0123456789abcdef0123456789abcdef01234567";

fn submission(lockfiles: serde_json::Value) -> Submission {
    Submission {
        repository: "octo/app".into(),
        pull_request: 7,
        head_sha: HEAD.into(),
        lockfiles: serde_json::from_value(lockfiles).unwrap(),
    }
}

#[tokio::test]
async fn a_head_without_a_scan_is_blocked_for_an_agent_and_a_clean_scan_passes_it() {
    let node = node().await;
    let check = |actor: &'static str| node.plane.gate_check("t1", "octo/app", 7, HEAD, actor, "worker");
    assert_eq!(check("agent").await.unwrap().reason, Some(GateReason::NoScan));
    assert_eq!(check("person").await.unwrap().reason, None, "a person is never held to the gate");
    let head = base64::engine::general_purpose::STANDARD.encode("requests==2.31.0\n");
    let lockfiles = serde_json::json!([{"path": "requirements.txt", "head_base64": head}]);
    let turn = node.plane.scan_limits.turn().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let submitted = node
        .plane
        .submit_scan("req", "worker", "t1".into(), submission(lockfiles), turn, deadline)
        .await
        .unwrap();
    let Submitted::Finished(answer) = submitted else { panic!("an offline scan finishes at once") };
    assert_eq!((answer["status"].as_str(), answer["checked"].as_u64()), (Some("ok"), Some(1)));
    let passed = check("agent").await.unwrap();
    assert_eq!((passed.reason, passed.scan_id.as_deref()), (None, answer["scan_id"].as_str()));
    let audited = node.actions().await.iter().filter(|a| *a == "gate.check").count();
    assert_eq!(audited, 3, "every check is audited");
}

#[tokio::test]
async fn a_malformed_submission_is_refused_before_anything_is_recorded() {
    let node = node().await;
    let turn = node.plane.scan_limits.turn().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let bad = serde_json::json!([{"path": "../requirements.txt", "head_base64": ""}]);
    let e = node
        .plane
        .submit_scan("req", "worker", "t1".into(), submission(bad), turn, deadline)
        .await
        .unwrap_err();
    assert!(matches!(e, PlaneError::Invalid { .. }), "{e:?}");
    let page = gatehouse_store::PageRequest { limit: 10, cursor: None };
    assert!(node.plane.scans("t1", None, None, &page).await.unwrap().items.is_empty());
    let e = node.plane.gate_check("t1", "octo/app", 7, "ABC", "agent", "worker").await.unwrap_err();
    assert!(matches!(e, PlaneError::Invalid { .. }));
}

//! Manifests: signed for a tenant the caller may act on, checked against
//! the body they are bound to, every refusal recorded.

use gatehouse_core::Reason;
use gatehouse_plane::PlaneError;
use gatehouse_plane::manifests::Checked;
use serde_json::json;

use crate::support::{bound, node, platform};

#[tokio::test]
async fn a_manifest_binds_its_body_and_a_bound_caller_signs_for_its_tenants_only() {
    let node = node().await;
    let claims = |tenant: &str| {
        json!({"exec_id": "exec-1", "tenant_id": tenant, "user_id": "u1"}).as_object().unwrap().clone()
    };
    let body = json!({"code": "print(1)"});
    let e = node.plane.sign_manifest("req", &bound("ci", &["t1"]), claims("t2"), &body, None).unwrap_err();
    assert_eq!(e, PlaneError::Refused(Reason::TenantNotAllowed));
    let (token, signed) = node.plane.sign_manifest("req", &platform(), claims("t1"), &body, None).unwrap();
    assert!(signed.exp > signed.iat);
    let checked = node.plane.check_manifest("req", &platform(), Some(&token), &body).unwrap();
    assert!(matches!(checked, Checked::Signed(m) if m.claims.tenant_id.as_deref() == Some("t1")));
    let other = json!({"code": "print(2)"});
    let checked = node.plane.check_manifest("req", &platform(), Some(&token), &other).unwrap();
    assert!(matches!(checked, Checked::Refused(_)), "another body is not the one signed");
    let checked = node.plane.check_manifest("req", &platform(), None, &body).unwrap();
    assert!(matches!(checked, Checked::Refused(_)), "a manifest is required here");
    let e = node.plane.check_manifest("req", &bound("ci", &["t2"]), Some(&token), &body).unwrap_err();
    assert_eq!(e, PlaneError::Refused(Reason::TenantNotAllowed), "not its run to start");
}

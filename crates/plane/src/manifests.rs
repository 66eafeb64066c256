//! Execution manifests: signed for a tenant the caller may act on, checked
//! against the execute body they are bound to.

use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::manifest::{ManifestClaims, ManifestPresence, SignError, VerifiedManifest};
use gatehouse_core::{Reason, RefusalKind};
use serde_json::{Map, Value};

use crate::{Caller, Plane, PlaneError, Result};

/// What checking an execute request's manifest found.
#[derive(Debug)]
pub enum Checked {
    /// A valid manifest, signed with `alg`.
    Signed(Box<VerifiedManifest>),
    /// No manifest, and none is required (`SANDBOX_REQUIRE_EGRESS_MANIFEST=false`).
    Unsigned,
    /// Refused (recorded), for this reason.
    Refused(Reason),
}

impl Plane {
    /// Signs a manifest of `claims` bound to `body` for `ttl_secs` (else the
    /// default). A tenant named must be one the caller may act on; with
    /// strict tenant isolation a manifest must name one
    /// (`tenant_missing`, recorded).
    pub fn sign_manifest(
        &self,
        request_id: &str,
        caller: &Caller,
        claims: Map<String, Value>,
        body: &Value,
        ttl_secs: Option<i64>,
    ) -> Result<(String, ManifestClaims)> {
        let signer = self.signer.as_ref().ok_or(PlaneError::NotServed)?;
        let tenant = claims.get("tenant_id").and_then(Value::as_str).map(str::to_owned);
        let exec = claims.get("exec_id").and_then(Value::as_str).map(str::to_owned);
        self.require(request_id, caller, tenant.as_deref())?;
        if self.settings.tenant_isolation_strict && tenant.is_none() {
            self.refusals.record(
                RefusalKind::ManifestRefused,
                Reason::TenantMissing,
                None,
                exec.as_deref(),
                Some(request_id),
            );
            return Err(PlaneError::refusal(Reason::TenantMissing));
        }
        let body = BodyDigest::of_value(body).map_err(|_| {
            PlaneError::invalid("body is not canonicalizable JSON (integers must be within ±2^53-1)")
        })?;
        let ttl = ttl_secs.unwrap_or(self.settings.manifest_ttl_secs);
        if ttl <= 0 {
            return Err(PlaneError::invalid("ttl_seconds must be positive"));
        }
        signer.sign_for_body(claims, &body, self.clock.now(), ttl).map_err(|e| {
            tracing::info!(request_id, error = %e, "manifest sign request rejected");
            match e {
                SignError::InvalidClaims(_) => {
                    PlaneError::invalid("claims are not a valid manifest (see the documentation)")
                }
                SignError::InvalidBody(_) => PlaneError::invalid("body is not canonicalizable JSON"),
            }
        })
    }

    /// Checks an execute request's manifest `token` against its `body`. A
    /// refusal is recorded; a valid manifest of a tenant the caller may not
    /// act on is not its to run (`tenant_not_allowed`).
    pub fn check_manifest(
        &self,
        request_id: &str,
        caller: &Caller,
        token: Option<&str>,
        body: &Value,
    ) -> Result<Checked> {
        let verifier = self.verifier.as_ref().ok_or(PlaneError::NotServed)?;
        let outcome = BodyDigest::of_value(body).map_err(|_| Reason::ManifestBodyInvalid).and_then(|body| {
            verifier.check_request(token, &body, self.clock.now(), self.settings.require_manifest)
        });
        Ok(match outcome {
            Ok(ManifestPresence::Signed(m)) => {
                self.require(request_id, caller, m.claims.tenant_id.as_deref())?;
                Checked::Signed(m)
            }
            Ok(ManifestPresence::Unsigned) => {
                tracing::warn!(
                    request_id,
                    "unsigned execute request passed (SANDBOX_REQUIRE_EGRESS_MANIFEST=false)"
                );
                Checked::Unsigned
            }
            Err(reason) => {
                self.refusals.record(RefusalKind::ManifestRefused, reason, None, None, Some(request_id));
                Checked::Refused(reason)
            }
        })
    }
}

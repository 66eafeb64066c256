//! Callers bound to tenants at the edge: which tenant a `/v1` request's
//! route names or reaches, checked before its handler runs (the plane
//! decides whether the caller may act on it).
//!
//! A named caller whose entry carries `tenants = [...]` acts on those
//! tenants only ([`Caller::may_act_on`]). Each route has a [`TenantRule`]
//! saying how it reaches a tenant: by its path (`{tenant_id}`, or a run,
//! lease or grant it names), by what its body or query names (checked by
//! the handler through [`require`]), or by listing (narrowed through
//! [`narrowed`] and [`merged`]). A route with no rule is closed to a bound
//! caller, as an unlisted route needs scope `admin`. Operations on every
//! tenant at once need an unbound caller with scope `admin`
//! ([`Caller::acts_globally`]). A refusal is `403 tenant_not_allowed`,
//! recorded like every other.

use std::collections::HashMap;

use axum::extract::{FromRequestParts as _, MatchedPath, Path, Request};
use gatehouse_core::{ErrorCode, is_valid_id};
use gatehouse_ledger::LedgerBackend as _;
use gatehouse_plane::PlaneError;
use http::Method;

use super::{
    Answer as _, ApiError, Caller, MAX_BODY_BYTES, RequestId, api_error, request_id_of, with_reason,
};
use crate::state::AppState;

/// How a `/v1` route names or reaches a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantRule {
    /// No caller: liveness, readiness, metrics, this API's description.
    Public,
    /// The sandbox's file routes: the run's own grant is the bearer token,
    /// and it reaches exactly what the grant names, in its own tenant.
    BearerGrant,
    /// It reaches no tenant (the content scanner's status).
    None,
    /// `{tenant_id}` in its path.
    Path,
    /// `{run_id}` in its path: the run's tenant.
    Run,
    /// `{lease_id}` in its path: the tenant of the lease's run.
    Lease,
    /// `{grant_id}` in its path: the grant's tenant, as the ledger registered
    /// it (a grant the ledger does not know reaches no tenant a bound caller
    /// may act on).
    Grant,
    /// The run's grant it carries (the body's `grant`, or
    /// `x-gatehouse-grant`): the grant's tenant.
    CarriedGrant,
    /// What its body or query names (a tenant, a run, a token of one),
    /// checked by its handler; a bound caller must name one of its tenants
    /// where the request needs a tenant at all.
    Named,
    /// A list, narrowed to the caller's tenants; a tenant asked for must be
    /// one of them.
    Narrowed,
    /// Every tenant at once: an unbound caller with scope `admin` only.
    Global,
    /// No rule was given: closed to a bound caller.
    Unlisted,
}

/// The tenant rule of a route, by its method and template. A route not
/// listed is [`TenantRule::Unlisted`], so a new route is closed to bound
/// callers until it is given a rule here.
pub fn tenant_rule(method: &Method, template: &str) -> TenantRule {
    if matches!(template, "/healthz" | "/readyz" | "/metrics" | "/openapi.json") {
        return TenantRule::Public;
    }
    let path = template.strip_prefix("/v1").unwrap_or(template);
    match path {
        "/files/{file_id}" | "/sessions/{session_id}/files" | "/sessions/{session_id}/files/{name}" => {
            TenantRule::BearerGrant
        }
        "/content/scanner" | "/egress-presets" => TenantRule::None,
        "/manifests/sign"
        | "/manifests/verify"
        | "/grants"
        | "/grants/open"
        | "/grants/consume"
        | "/grants/revoke"
        | "/content/scan"
        | "/files"
        | "/egress-proposals/{proposal_id}"
        | "/egress-proposals/{proposal_id}/decide" => TenantRule::Named,
        "/runs" if method == Method::POST => TenantRule::Named,
        "/runs" | "/leases" | "/refusals" | "/audit" => TenantRule::Narrowed,
        "/egress/fetch" | "/egress/fetch/raw" => TenantRule::CarriedGrant,
        "/grants/{grant_id}/revoke" => TenantRule::Grant,
        "/leases/{lease_id}/revoke" => TenantRule::Lease,
        "/emergency-revoke" => TenantRule::Global,
        p if p == "/runs/{run_id}" || p.starts_with("/runs/{run_id}/") => TenantRule::Run,
        p if p.starts_with("/tenants/{tenant_id}/") => TenantRule::Path,
        _ => TenantRule::Unlisted,
    }
}

/// Lets `req` through if its caller may act on the tenant its route
/// reaches by its path or the grant it carries; the rest is the handler's
/// ([`TenantRule::Named`], [`TenantRule::Narrowed`]). A caller unbound is
/// let through at once.
pub(crate) async fn gate(state: &AppState, caller: &Caller, req: Request) -> Result<Request, ApiError> {
    if caller.tenants.is_none() {
        return Ok(req);
    }
    let rid = request_id_of(&req);
    let template = req.extensions().get::<MatchedPath>().map_or("", MatchedPath::as_str).to_owned();
    let rule = tenant_rule(req.method(), &template);
    let (mut parts, body) = req.into_parts();
    // The ids as the handlers read them (percent-decoded); one that is not
    // a plain id names no tenant a bound caller may act on.
    let params = Path::<HashMap<String, String>>::from_request_parts(&mut parts, state)
        .await
        .map(|Path(p)| p)
        .unwrap_or_default();
    let param = |name: &str| params.get(name).filter(|v| is_valid_id(v)).cloned();
    let now = state.plane.clock.now();
    let (tenant, body) = match rule {
        TenantRule::Public
        | TenantRule::BearerGrant
        | TenantRule::None
        | TenantRule::Named
        | TenantRule::Narrowed => {
            return Ok(Request::from_parts(parts, body));
        }
        TenantRule::Global | TenantRule::Unlisted => (None, body),
        TenantRule::Path => (param("tenant_id"), body),
        TenantRule::Run => {
            let Some(run_id) = param("run_id") else {
                return Err(api_error(&rid, state.plane.not_allowed(&rid.0, caller, None)));
            };
            let store = state.plane.store().answer(&rid)?;
            match store.run(&run_id).await.map_err(PlaneError::from).answer(&rid)? {
                Some(run) => (Some(run.tenant_id), body),
                // No such run: the handler says so.
                None => return Ok(Request::from_parts(parts, body)),
            }
        }
        TenantRule::Lease => {
            let Some(lease_id) = param("lease_id") else {
                return Err(api_error(&rid, state.plane.not_allowed(&rid.0, caller, None)));
            };
            let store = state.plane.store().answer(&rid)?;
            match store.lease(&lease_id, now).await.map_err(PlaneError::from).answer(&rid)? {
                Some(lease) => (Some(lease.tenant_id), body),
                None => return Ok(Request::from_parts(parts, body)),
            }
        }
        TenantRule::Grant => {
            let record = match (param("grant_id"), state.plane.ledger.as_ref()) {
                (Some(grant_id), Some(ledger)) => ledger
                    .get(&grant_id)
                    .await
                    .map_err(|reason| with_reason(ErrorCode::Unavailable, &rid, reason))?,
                _ => None,
            };
            (record.and_then(|r| r.registration.tenant_id), body)
        }
        TenantRule::CarriedGrant => {
            let (token, body) = carried_grant(&rid, &template, &parts.headers, body).await?;
            let opened = state
                .plane
                .sealer
                .as_ref()
                .zip(token)
                .and_then(|(sealer, token)| sealer.open(token.trim(), now).ok());
            match opened {
                Some(claims) => (claims.tenant_id, body),
                // A grant that does not open reaches nothing: the handler
                // refuses it and records why.
                None => return Ok(Request::from_parts(parts, body)),
            }
        }
    };
    if caller.may_act_on(tenant.as_deref()) {
        Ok(Request::from_parts(parts, body))
    } else {
        Err(api_error(&rid, state.plane.not_allowed(&rid.0, caller, tenant.as_deref())))
    }
}

/// The grant a fetch carries, and the body to pass on: the raw fetch's
/// `x-gatehouse-grant` (its streamed body untouched), or the JSON fetch's
/// `grant` (its body read, within the cap every JSON body has, and handed
/// on as read; parsed by the same strict parser the handler uses).
async fn carried_grant(
    rid: &RequestId,
    template: &str,
    headers: &http::HeaderMap,
    body: axum::body::Body,
) -> Result<(Option<String>, axum::body::Body), ApiError> {
    if template.ends_with("/raw") {
        let token = headers.get("x-gatehouse-grant").and_then(|v| v.to_str().ok()).map(str::to_owned);
        return Ok((token, body));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::new(ErrorCode::PayloadTooLarge, rid))?;
    let token = gatehouse_capability::canonical::parse_strict(&bytes)
        .ok()
        .and_then(|v| v.get("grant").and_then(serde_json::Value::as_str).map(str::to_owned));
    Ok((token, axum::body::Body::from(bytes)))
}

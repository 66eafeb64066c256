//! The HTTP API. Handlers translate between wire shapes and the capability
//! crate's decisions; every refusal is recorded before it is answered.

use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::grant::GrantRequest;
use gatehouse_capability::manifest::{ManifestPresence, SignError};
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_core::{ErrorCode, PublicError, Reason, RefusalKind};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::http::{ApiError, MAX_BODY_BYTES, RequestId, StrictJson};
use crate::state::AppState;

/// The full router for this node.
pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/manifests/sign", post(sign_manifest))
        .route("/manifests/verify", post(verify_manifest))
        .route("/grants", post(mint_grant))
        .route("/grants/open", post(open_grant))
        .route("/refusals", get(list_refusals))
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::http::require_service_token));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .nest("/v1", v1)
        .fallback(crate::http::not_found)
        .method_not_allowed_fallback(crate::http::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), crate::http::request_context))
        .with_state(state)
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"status": "ready", "role": state.role.as_str()}))
}

async fn metrics(State(state): State<AppState>) -> Response {
    ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render(&state.refusals))
        .into_response()
}

fn forbidden(rid: &RequestId) -> ApiError {
    ApiError::new(ErrorCode::Forbidden, rid)
}

fn bad_request(rid: &RequestId, message: &'static str) -> ApiError {
    ApiError(PublicError::new(ErrorCode::BadRequest, rid.0.clone()).with_message(message))
}

fn refused(rid: &RequestId, reason: Reason) -> ApiError {
    ApiError(PublicError::new(ErrorCode::Refused, rid.0.clone()).with_reason(reason))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignRequest {
    claims: Map<String, Value>,
    body: Value,
    #[serde(default)]
    ttl_seconds: Option<i64>,
}

async fn sign_manifest(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    StrictJson(req): StrictJson<SignRequest>,
) -> Result<Json<Value>, ApiError> {
    let signer = state.signer.as_ref().ok_or_else(|| forbidden(&rid))?;
    let tenant = req.claims.get("tenant_id").and_then(Value::as_str).map(str::to_owned);
    let exec = req.claims.get("exec_id").and_then(Value::as_str).map(str::to_owned);
    if state.tenant_isolation_strict && tenant.is_none() {
        state.refusals.record(
            RefusalKind::ManifestRefused,
            Reason::TenantMissing,
            None,
            exec.as_deref(),
            Some(&rid.0),
        );
        return Err(refused(&rid, Reason::TenantMissing));
    }
    let body = BodyDigest::of_value(&req.body).map_err(|_| {
        bad_request(&rid, "body is not canonicalizable JSON (integers must be within ±2^53-1)")
    })?;
    let ttl = req.ttl_seconds.unwrap_or(state.manifest_ttl_secs);
    if ttl <= 0 {
        return Err(bad_request(&rid, "ttl_seconds must be positive"));
    }
    let (token, claims) = signer.sign_for_body(req.claims, &body, state.clock.now(), ttl).map_err(|e| {
        tracing::info!(request_id = %rid.0, error = %e, "manifest sign request rejected");
        match e {
            SignError::InvalidClaims(_) => {
                bad_request(&rid, "claims are not a valid manifest (see the documentation)")
            }
            SignError::InvalidBody(_) => bad_request(&rid, "body is not canonicalizable JSON"),
        }
    })?;
    Ok(Json(
        json!({"token": token, "kid": claims.kid, "exp": claims.exp, "execute_body_sha256": claims.execute_body_sha256}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyRequest {
    #[serde(default)]
    token: Option<String>,
    body: Value,
}

async fn verify_manifest(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    StrictJson(req): StrictJson<VerifyRequest>,
) -> Result<Json<Value>, ApiError> {
    let verifier = state.verifier.as_ref().ok_or_else(|| forbidden(&rid))?;
    let outcome = BodyDigest::of_value(&req.body).map_err(|_| Reason::ManifestBodyInvalid).and_then(|body| {
        verifier.check_request(req.token.as_deref(), &body, state.clock.now(), state.require_manifest)
    });
    Ok(Json(match outcome {
        Ok(ManifestPresence::Signed(m)) => json!({"valid": true, "alg": m.alg, "claims": m.claims}),
        Ok(ManifestPresence::Unsigned) => {
            state.metrics.record_unsigned();
            tracing::warn!(request_id = %rid.0, "unsigned execute request passed (SANDBOX_REQUIRE_EGRESS_MANIFEST=false)");
            json!({"valid": true, "unsigned": true})
        }
        Err(reason) => {
            state.refusals.record(RefusalKind::ManifestRefused, reason, None, None, Some(&rid.0));
            json!({"valid": false, "reason": reason})
        }
    }))
}

async fn mint_grant(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    StrictJson(req): StrictJson<GrantRequest>,
) -> Result<Json<Value>, ApiError> {
    let (Some(sealer), Some(sessions)) = (state.sealer.as_ref(), state.sessions.as_ref()) else {
        return Err(forbidden(&rid));
    };
    let principal = Principal { tenant_id: req.tenant_id.clone(), user_id: req.user_id.clone() };
    let session_key = sessions.derive(&principal, &Namespace::Output).map_err(|reason| {
        state.refusals.record(RefusalKind::GrantRefused, reason, None, Some(&req.exec_id), Some(&rid.0));
        refused(&rid, reason)
    })?;
    let claims = req.into_claims(session_key, state.clock.now(), state.grant_ttl_secs).map_err(|e| {
        tracing::info!(request_id = %rid.0, error = %e, "grant request rejected");
        bad_request(
            &rid,
            "the grant request is not valid (ids must be 1-128 characters of [A-Za-z0-9._:-]; exp after iat)",
        )
    })?;
    let token = sealer.mint(&claims).map_err(|e| {
        tracing::error!(request_id = %rid.0, error = %e, "grant mint failed");
        ApiError::new(ErrorCode::Internal, &rid)
    })?;
    Ok(Json(json!({"token": token, "grant_id": claims.grant_id, "exp": claims.exp})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenRequest {
    #[serde(default)]
    token: Option<String>,
}

async fn open_grant(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    StrictJson(req): StrictJson<OpenRequest>,
) -> Result<Json<Value>, ApiError> {
    let sealer = state.sealer.as_ref().ok_or_else(|| forbidden(&rid))?;
    let token = req.token.unwrap_or_default();
    Ok(Json(match sealer.open(token.trim(), state.clock.now()) {
        Ok(claims) => json!({"valid": true, "claims": claims}),
        Err(reason) => {
            state.refusals.record(RefusalKind::GrantRefused, reason, None, None, Some(&rid.0));
            json!({"valid": false, "reason": reason})
        }
    }))
}

async fn list_refusals(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"refusals": state.refusals.recent()}))
}

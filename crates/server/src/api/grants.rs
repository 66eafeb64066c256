//! `/v1/grants`: grants minted outside a run's creation, opened, spent and
//! revoked.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use gatehouse_capability::grant::GrantRequest;
use gatehouse_core::is_valid_id;
use gatehouse_ledger::{GrantRecord, Operation, RevokeScope};
use gatehouse_plane::grants::Opened;
use serde::Deserialize;
use serde_json::{Value, json};

use super::RouteTable;
use crate::http::{Answer as _, ApiError, Caller, RequestId, StrictJson, bad_request};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::post;
    table
        .route("/grants", post(mint_grant))
        .route("/grants/open", post(open_grant))
        .route("/grants/consume", post(consume_grant))
        .route("/grants/revoke", post(revoke_grants))
        .route("/grants/{grant_id}/revoke", post(revoke_grant))
}

/// The ledger's view of a grant, as API answers show it.
pub(super) fn ledger_json(r: &GrantRecord) -> Value {
    json!({
        "status": r.status,
        "request_count": r.request_count,
        "read_count": r.read_count,
        "upload_count": r.upload_count,
        "tool_call_count": r.tool_call_count,
        "uploaded_bytes": r.uploaded_bytes,
        "egress_bytes": r.egress_bytes,
        "output_file_ids": r.output_file_ids,
        "remaining": r.remaining(),
        "budgets": {
            "max_requests": r.registration.max_requests,
            "max_upload_bytes": r.registration.max_upload_bytes,
            "max_output_files": r.registration.max_output_files,
            "max_egress_bytes": r.registration.max_egress_bytes,
            "max_tool_calls": r.registration.max_tool_calls,
        },
        "exp": r.registration.exp,
    })
}

async fn mint_grant(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<GrantRequest>,
) -> Result<Json<Value>, ApiError> {
    let minted = state.plane.mint_grant(&rid.0, &caller, req).await.answer(&rid)?;
    Ok(Json(json!({"token": minted.token, "grant_id": minted.claims.grant_id, "exp": minted.claims.exp})))
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
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<OpenRequest>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(match state.plane.open_grant(&rid.0, &caller, req.token.as_deref()).await.answer(&rid)? {
        Opened::Valid(claims, record) => {
            let ledger = record.as_deref().map_or(Value::Null, ledger_json);
            json!({"valid": true, "claims": claims, "ledger": ledger})
        }
        Opened::Refused(reason) => json!({"valid": false, "reason": reason}),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsumeRequest {
    #[serde(default)]
    token: Option<String>,
    #[serde(deserialize_with = "crate::http::object")]
    operation: Operation,
}

/// Spends one operation of a grant: the check every outbound request and
/// file or tool access makes.
async fn consume_grant(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<ConsumeRequest>,
) -> Result<Json<Value>, ApiError> {
    let spent = state
        .plane
        .consume_grant(&rid.0, &caller, req.token.as_deref(), &req.operation)
        .await
        .answer(&rid)?;
    Ok(Json(match spent {
        Ok((grant_id, remaining)) => json!({"allowed": true, "grant_id": grant_id, "remaining": remaining}),
        Err(reason) => json!({"allowed": false, "reason": reason}),
    }))
}

async fn revoke(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    scope: RevokeScope,
) -> Result<Json<Value>, ApiError> {
    let revoked = state.plane.revoke_grants(&rid.0, caller, &scope).await.answer(rid)?;
    Ok(Json(json!({"revoked": revoked})))
}

async fn revoke_grant(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let grant_id = path.map(|Path(id)| id).unwrap_or_default();
    if !is_valid_id(&grant_id) {
        return Err(bad_request(&rid, "grant_id must be 1-128 characters of [A-Za-z0-9._:-]"));
    }
    revoke(&state, &rid, &caller, RevokeScope::Grant(grant_id)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokeRequest {
    #[serde(default)]
    exec_id: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    all: bool,
}

/// Revokes every grant of one run, of one tenant, or — `{"all": true}`,
/// the emergency revoke — every grant.
async fn revoke_grants(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<RevokeRequest>,
) -> Result<Json<Value>, ApiError> {
    let scope = match (req.exec_id, req.tenant_id, req.all) {
        (Some(exec), None, false) if is_valid_id(&exec) => RevokeScope::Exec(exec),
        (None, Some(tenant), false) if is_valid_id(&tenant) => RevokeScope::Tenant(tenant),
        (None, None, true) => RevokeScope::All,
        _ => return Err(bad_request(&rid, "give exactly one of exec_id, tenant_id or \"all\": true")),
    };
    revoke(&state, &rid, &caller, scope).await
}

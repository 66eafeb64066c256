//! `/v1/tenants/{t}/…` settings (egress policy, MCP servers, dependency
//! gate, kill switch) and the emergency revoke.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::response::{IntoResponse, Response};
use gatehouse_core::{ErrorCode, PublicError, Reason};
use gatehouse_egress::PolicyDocument;
use gatehouse_plane::tenants::{Revoked, SECOND_MARKER_PENDING};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{RouteTable, path_id};
use crate::http::{Answer as _, ApiError, Caller, RequestId, StrictJson};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::{get, post};
    table
        .route("/tenants/{tenant_id}/egress-policy", get(get_egress_policy).put(set_egress_policy))
        .route("/tenants/{tenant_id}/mcp-servers", get(get_mcp_servers).put(set_mcp_servers))
        .route("/egress-presets", get(egress_presets))
        .route("/tenants/{tenant_id}/dependency-gate", get(get_gate).put(set_gate))
        .route("/tenants/{tenant_id}/kill-switch", post(kill_switch))
        .route("/emergency-revoke", post(emergency_revoke))
}

async fn get_egress_policy(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    Ok(Json(match state.plane.policy(&tenant_id).await.answer(&rid)? {
        Some(p) => json!({
            "tenant_id": tenant_id,
            "version": p.version,
            "policy": serde_json::from_str::<Value>(&p.document).unwrap_or(Value::Null),
            "actor": p.actor,
            "created_at": p.created_at,
        }),
        None => json!({
            "tenant_id": tenant_id,
            "version": 0,
            "policy": {"mode": "open", "allow": [], "deny": [], "dry_run": false},
        }),
    }))
}

async fn set_egress_policy(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(doc): StrictJson<PolicyDocument>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let stored = state.plane.set_policy(&rid.0, &tenant_id, &doc, &caller.name, None).await.answer(&rid)?;
    Ok(Json(json!({"tenant_id": tenant_id, "version": stored.version, "policy": doc})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpServersRequest {
    servers: Vec<gatehouse_mcp::McpServer>,
}

async fn get_mcp_servers(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let declared = state.plane.mcp_servers(&tenant_id).await.answer(&rid)?;
    let mut answer =
        json!({"tenant_id": tenant_id, "version": declared.version, "servers": declared.servers});
    if let Some((actor, created_at)) = declared.declared {
        answer["actor"] = json!(actor);
        answer["created_at"] = json!(created_at);
    }
    Ok(Json(answer))
}

async fn set_mcp_servers(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<McpServersRequest>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let servers = req.servers;
    let stored =
        state.plane.set_mcp_servers(&rid.0, &tenant_id, servers.clone(), &caller.name).await.answer(&rid)?;
    Ok(Json(json!({"tenant_id": tenant_id, "version": stored.version, "servers": servers})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GateRequest {
    mode: String,
}

async fn get_gate(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let mode = state.plane.gate_mode(&tenant_id).await.answer(&rid)?;
    Ok(Json(json!({"tenant_id": tenant_id, "mode": mode})))
}

async fn set_gate(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<GateRequest>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    state.plane.set_gate_mode(&tenant_id, &req.mode, &caller.name).await.answer(&rid)?;
    Ok(Json(json!({"tenant_id": tenant_id, "mode": req.mode})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KillSwitchRequest {
    engaged: bool,
    #[serde(default)]
    reason: Option<String>,
}

async fn kill_switch(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<KillSwitchRequest>,
) -> Result<Response, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let revoked = state
        .plane
        .throw_kill_switch(&rid.0, &tenant_id, req.engaged, req.reason.as_deref(), &caller.name)
        .await
        .answer(&rid)?;
    let mut body = Map::new();
    body.insert("engaged".into(), json!(req.engaged));
    Ok(revoked_answer(revoked, &rid, body))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmergencyRequest {
    #[serde(default)]
    reason: Option<String>,
}

/// Every grant revoked (one marker) and every live run of every tenant
/// killed.
async fn emergency_revoke(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<EmergencyRequest>,
) -> Result<Response, ApiError> {
    state.plane.require_global(&rid.0, &caller).answer(&rid)?;
    let revoked =
        state.plane.revoke_everything(&rid.0, req.reason.as_deref(), &caller.name).await.answer(&rid)?;
    Ok(revoked_answer(revoked, &rid, Map::new()))
}

/// The answer to a revocation step: `200` with what was revoked, or, when
/// the second marker is still pending, `503 ledger_unavailable` that says
/// what was done all the same.
fn revoked_answer(revoked: Revoked, rid: &RequestId, mut body: Map<String, Value>) -> Response {
    body.insert(
        "revoked".into(),
        json!({"runs": revoked.runs, "grants": revoked.grants, "leases": revoked.leases}),
    );
    if !revoked.second_marker_pending {
        return Json(Value::Object(body)).into_response();
    }
    let error = PublicError::new(ErrorCode::Unavailable, rid.0.clone())
        .with_reason(Reason::LedgerUnavailable)
        .with_message(SECOND_MARKER_PENDING);
    // The error's own shape and headers, with what was done beside it.
    let mut full = error.to_json();
    if let Some(inner) = full.get_mut("error").and_then(Value::as_object_mut) {
        inner.insert("retryable".into(), json!(true));
    }
    body.insert("complete".into(), json!(false));
    body.insert("pending".into(), json!(["second_revocation_marker"]));
    if let Some(obj) = full.as_object_mut() {
        obj.extend(body);
    }
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, Json(full)).into_response();
    let headers = response.headers_mut();
    headers.insert("x-gatehouse-reason", http::HeaderValue::from_static(Reason::LedgerUnavailable.as_str()));
    headers.insert("x-gatehouse-retryable", http::HeaderValue::from_static("true"));
    response
}

/// `GET /v1/egress-presets`: the presets a policy may name, each with its
/// host entries and the documentation they come from.
async fn egress_presets() -> Json<Value> {
    let items: Vec<Value> = gatehouse_egress::policy::presets::all()
        .iter()
        .map(|p| json!({"name": p.name, "description": p.description, "entries": p.entries, "sources": p.sources}))
        .collect();
    Json(json!({"items": items}))
}

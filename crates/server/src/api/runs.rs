//! `/v1/runs`: a run's whole life (created, read, listed, kept alive,
//! ended, cancelled) and its events.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use gatehouse_core::is_valid_id;
use gatehouse_plane::runs::{Finished, NewRunRequest, RunBudgets, RunView};
use gatehouse_store::RunStatus;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::credentials::lease_json;
use super::grants::ledger_json;
use super::{MAX_PAGE, RouteTable, list_json, page, page_limit, path_id};
use crate::http::{Answer as _, ApiError, Caller, RequestId, StrictJson, bad_request, record_answer};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::{get, post};
    table
        .route("/runs", post(create_run).get(list_runs))
        .route("/runs/{run_id}", get(get_run))
        .route("/runs/{run_id}/heartbeat", post(heartbeat))
        .route("/runs/{run_id}/end", post(end_run))
        .route("/runs/{run_id}/cancel", post(cancel_run))
        .route("/runs/{run_id}/events", get(run_events))
        .route("/runs/{run_id}/artifacts", get(run_artifacts))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRun {
    tenant_id: String,
    user_id: String,
    body: Value,
    #[serde(default)]
    claims: Map<String, Value>,
    #[serde(default)]
    input_files: Vec<String>,
    #[serde(default)]
    read_sessions: Vec<String>,
    #[serde(default)]
    output_session_id: Option<String>,
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default, deserialize_with = "crate::http::object")]
    budgets: RunBudgets,
    #[serde(default)]
    ttl_secs: Option<i64>,
}

/// `POST /v1/runs`: the run, its manifest and grant, and what its sandbox
/// is handed (the proxy with the grant as its password, and the
/// interception CA to trust).
async fn create_run(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<CreateRun>,
) -> Result<Response, ApiError> {
    let req = NewRunRequest {
        tenant_id: req.tenant_id,
        user_id: req.user_id,
        body: req.body,
        claims: req.claims,
        input_files: req.input_files,
        read_sessions: req.read_sessions,
        output_session_id: req.output_session_id,
        conversation_id: req.conversation_id,
        budgets: req.budgets,
        ttl_secs: req.ttl_secs,
    };
    let run = state.plane.create_run(&rid.0, &caller, req).await.answer(&rid)?;
    let proxy_url = credentialed(&state.proxy_public_url, &run.grant);
    let mut body = json!({
        "run_id": run.run_id,
        "status": "live",
        "manifest": run.manifest,
        "execute_body_sha256": run.execute_body_sha256,
        "grant": run.grant,
        "grant_id": run.grant_id,
        "expires_at": run.expires_at,
        "proxy": {"url": state.proxy_public_url, "env": {"HTTP_PROXY": proxy_url, "HTTPS_PROXY": proxy_url}},
    });
    // What the sandbox adds to its trust store, so that HTTPS to the hosts
    // it holds leases for can be given their credentials.
    if let (Some(pem), Some(obj)) = (&state.intercept_ca_cert_pem, body.as_object_mut()) {
        obj.insert("ca_certificate_pem".into(), pem.as_str().into());
    }
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `http://host:port` with the grant as the proxy password.
fn credentialed(proxy_url: &str, grant: &str) -> String {
    match proxy_url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://grant:{grant}@{rest}"),
        None => proxy_url.to_owned(),
    }
}

/// A run as reads answer it: the record, its ledger and its leases.
fn run_json(view: &RunView) -> Value {
    let ledger = match &view.ledger {
        Ok(Some(r)) => ledger_json(r),
        Ok(None) => Value::Null,
        Err(reason) => json!({"unavailable": reason}),
    };
    let leases = match &view.leases {
        Ok(leases) => leases.iter().map(lease_json).collect(),
        Err(code) => json!({"unavailable": code}),
    };
    let mut v = serde_json::to_value(&view.run).unwrap_or_default();
    if let Some(obj) = v.as_object_mut() {
        obj.insert("ledger".into(), ledger);
        obj.insert("leases".into(), leases);
    }
    v
}

async fn get_run(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let run_id = path_id(path, &rid)?;
    let run = state.plane.run(&run_id).await.answer(&rid)?;
    Ok(Json(run_json(&state.plane.run_view(run).await)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

async fn list_runs(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<RunsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Ok(Query(q)) = query else {
        return Err(bad_request(&rid, "the query may hold tenant_id, status, limit and cursor only"));
    };
    if q.tenant_id.as_deref().is_some_and(|t| !is_valid_id(t)) {
        return Err(bad_request(&rid, "tenant_id is not a valid id"));
    }
    let status = match q.status.as_deref().map(RunStatus::parse) {
        None => None,
        Some(Some(s)) => Some(s),
        Some(None) => return Err(bad_request(&rid, "status is live, ended, cancelled, killed or expired")),
    };
    let page = page(&rid, q.limit, q.cursor)?;
    let runs = state.plane.list_runs(&rid.0, &caller, q.tenant_id, status, &page).await.answer(&rid)?;
    Ok(list_json(runs))
}

async fn heartbeat(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let run_id = path_id(path, &rid)?;
    let (run, renewed) = state.plane.heartbeat(&run_id).await.answer(&rid)?;
    Ok(Json(
        json!({"run_id": run.run_id, "status": run.status, "heartbeat_at": run.heartbeat_at, "leases_renewed": renewed}),
    ))
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Succeeded,
    Failed,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndRequest {
    outcome: Outcome,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CancelRequest {
    #[serde(default)]
    actor: Option<String>,
}

/// What ending a run answers.
fn finished_json(finished: Finished) -> Json<Value> {
    Json(json!({
        "run_id": finished.run.run_id,
        "status": finished.run.status,
        "revoked": {"grants": u64::from(finished.leases.is_some()), "leases": finished.leases.unwrap_or(0)},
    }))
}

async fn end_run(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<EndRequest>,
) -> Result<Json<Value>, ApiError> {
    let run_id = path_id(path, &rid)?;
    let reason = match req.outcome {
        Outcome::Succeeded => "succeeded",
        Outcome::Failed => "failed",
    };
    let finished = state.plane.finish(&run_id, RunStatus::Ended, reason, &caller.name).await.answer(&rid)?;
    Ok(finished_json(finished))
}

async fn cancel_run(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<CancelRequest>,
) -> Result<Json<Value>, ApiError> {
    let run_id = path_id(path, &rid)?;
    gatehouse_plane::check_text(req.actor.as_deref()).answer(&rid)?;
    let actor = match &req.actor {
        Some(named) => format!("{}:{named}", caller.name),
        None => caller.name.clone(),
    };
    let finished =
        state.plane.finish(&run_id, RunStatus::Cancelled, "cancelled", &actor).await.answer(&rid)?;
    Ok(finished_json(finished))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    #[serde(default)]
    after: Option<i64>,
    #[serde(default)]
    limit: Option<u32>,
}

async fn run_events(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let run_id = path_id(path, &rid)?;
    let Ok(Query(q)) = query else {
        return Err(bad_request(&rid, "the query may hold after and limit only"));
    };
    // A run's events are read whole in one call where they fit.
    let limit = page_limit(&rid, q.limit, MAX_PAGE)?;
    let events = state.plane.run_events(&run_id, q.after.unwrap_or(0), limit).await.answer(&rid)?;
    let items: Vec<Value> = events
        .read
        .into_iter()
        .map(|e| {
            json!({"seq": e.seq, "at": e.event.at, "kind": e.event.kind, "reason": e.event.reason,
                "host": e.event.host, "rule": e.event.rule, "lease_id": e.event.lease_id,
                "request_id": e.event.request_id, "dry_run": e.event.dry_run})
        })
        .collect();
    let next = items.last().and_then(|e| e["seq"].as_i64()).filter(|_| items.len() == limit as usize);
    Ok(record_answer(
        &rid,
        events.complete,
        json!({"items": items, "next_cursor": next.map(|s| s.to_string())}),
    ))
}

/// `GET /v1/runs/{run_id}/artifacts`: the files the run wrote, with their
/// content verdicts, and its uploads refused as content.
async fn run_artifacts(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let run_id = path_id(path, &rid)?;
    let artifacts = state.plane.run_artifacts(&run_id).await.answer(&rid)?;
    let left = &artifacts.read.left;
    let items: Vec<Value> = left
        .written
        .iter()
        .map(|f| {
            json!({"file_id": f.file_id, "name": f.name, "bytes": f.bytes, "sha256": f.sha256,
                "verdict": f.verdict, "at": f.created_at, "session_id": f.session_id})
        })
        .collect();
    let refused: Vec<Value> =
        left.refused.iter().map(|r| json!({"name": r.file_name, "reason": r.reason, "at": r.at})).collect();
    Ok(record_answer(
        &rid,
        artifacts.complete,
        json!({"run_id": run_id, "items": items, "refused": refused, "truncated": artifacts.read.truncated}),
    ))
}

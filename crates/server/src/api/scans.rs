//! `/v1/tenants/{t}/dependency-scans` and `/gate-checks`: pull requests'
//! dependency scans, submitted by the worker's pass, and the gate it asks.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Extension, FromRequest as _, Path, Query, Request, State};
use gatehouse_core::ErrorCode;
use gatehouse_deps::gate::GateReason;
use gatehouse_plane::scans::{MAX_SCAN_BODY_BYTES, Submission, Submitted, SubmittedLockfile};
use gatehouse_store::PageRequest;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RouteTable, page, path_id};
use crate::http::{Answer as _, ApiError, Caller, RequestId, StrictJson, bad_request};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::{get, post};
    table
        .route(
            "/tenants/{tenant_id}/dependency-scans",
            post(submit_scan).layer(DefaultBodyLimit::max(MAX_SCAN_BODY_BYTES)).get(list_scans),
        )
        .route("/tenants/{tenant_id}/dependency-scans/{scan_id}", get(get_scan))
        .route("/tenants/{tenant_id}/gate-checks", post(gate_check))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScanRequest {
    repository: String,
    pull_request: i64,
    head_sha: String,
    #[serde(deserialize_with = "crate::http::objects")]
    lockfiles: Vec<SubmittedLockfile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GateCheckRequest {
    repository: String,
    pull_request: i64,
    head_sha: String,
    actor: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScanQuery {
    repository: Option<String>,
    pull_request: Option<i64>,
    limit: Option<u32>,
    cursor: Option<String>,
}

/// `POST /v1/tenants/{t}/dependency-scans`: `201` with the scan when it
/// finished within `GATEHOUSE_DEPS_SCAN_WAIT_MS`, else `202` with its id.
async fn submit_scan(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<(http::StatusCode, Json<Value>), ApiError> {
    let deadline = tokio::time::Instant::now() + state.plane.scan_limits.wait();
    let tenant_id = path_id(path, &rid)?;
    state.plane.takes_scans().answer(&rid)?;
    // A turn before the body is read: at most that many bodies are in
    // memory (read, decoded, parsed) at once on this node. The rest queue
    // for one however long it takes, never refused for being busy: a
    // submission waiting its turn holds its connection, not its body, so
    // the node's memory is bounded whatever is submitted. (This route is
    // outside the 30 s request limit while it waits; see
    // `http::queues_for_a_turn`.)
    let turn = state.plane.scan_limits.turn().await.answer(&rid)?;
    // From its turn, the request limit every route has: the body, its
    // recording and the wait for its scan (until `deadline`, or at once
    // when it queued past it: 202, pending) fit in it.
    let submit = async {
        let StrictJson(req) = StrictJson::<ScanRequest>::from_request(request, &state).await?;
        let submission = Submission {
            repository: req.repository,
            pull_request: req.pull_request,
            head_sha: req.head_sha,
            lockfiles: req.lockfiles,
        };
        let submitted = state
            .plane
            .submit_scan(&rid.0, &caller.name, tenant_id, submission, turn, deadline)
            .await
            .answer(&rid)?;
        Ok(match submitted {
            Submitted::Finished(answer) => (http::StatusCode::CREATED, Json(answer)),
            Submitted::Pending(answer) => (http::StatusCode::ACCEPTED, Json(answer)),
        })
    };
    tokio::time::timeout(crate::http::REQUEST_TIMEOUT, submit)
        .await
        .map_err(|_| ApiError::new(ErrorCode::Timeout, &rid))?
}

/// `GET /v1/tenants/{t}/dependency-scans/{scan_id}`: one scan, pending or finished.
async fn get_scan(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path((tenant_id, scan_id)) =
        path.map_err(|_| bad_request(&rid, "the path names a tenant and a scan"))?;
    Ok(Json(state.plane.scan(&tenant_id, &scan_id).await.answer(&rid)?))
}

/// `GET /v1/tenants/{t}/dependency-scans?repository=&pull_request=`: newest first.
async fn list_scans(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ScanQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let Query(q) = query.map_err(|_| bad_request(&rid, "repository, pull_request, limit and cursor only"))?;
    let page: PageRequest = page(&rid, q.limit, q.cursor)?;
    let found =
        state.plane.scans(&tenant_id, q.repository.as_deref(), q.pull_request, &page).await.answer(&rid)?;
    Ok(Json(json!({"items": found.items, "next_cursor": found.next_cursor})))
}

/// `POST /v1/tenants/{t}/gate-checks`.
async fn gate_check(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<GateCheckRequest>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let check = state
        .plane
        .gate_check(&tenant_id, &req.repository, req.pull_request, &req.head_sha, &req.actor, &caller.name)
        .await
        .answer(&rid)?;
    Ok(Json(json!({"blocked": check.reason.is_some(),
        "policy_failure_code": check.reason.map(GateReason::as_str), "scan_id": check.scan_id})))
}

//! `/v1/content`: the content scanner, for what a platform wants judged
//! outside a run's files.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RouteTable, check_ids};
use crate::http::{Answer as _, ApiError, Caller, RequestId, bad_request};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::{get, post};
    table.route("/content/scan", post(scan_content)).route("/content/scanner", get(scanner_status))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScanQuery {
    tenant_id: Option<String>,
    run_id: Option<String>,
    /// The file's name, when the content is one of the run's artifacts: a
    /// refusal names it, and the run's artifacts list it.
    name: Option<String>,
}

/// `POST /v1/content/scan`: the body is the content itself, streamed
/// through the sniffer and capped at `GATEHOUSE_CONTENT_MAX_BYTES` (reading
/// stops there). The answer is the verdict, with status 200 whatever it is:
/// a refusal is a verdict, not a failed call. Refusals are recorded.
async fn scan_content(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ScanQuery>, QueryRejection>,
    body: axum::body::Body,
) -> Result<Json<Value>, ApiError> {
    use futures_util::StreamExt as _;
    let Ok(Query(query)) = query else {
        return Err(bad_request(&rid, "the query may hold tenant_id, run_id and name only"));
    };
    check_ids(&rid, [&query.tenant_id, &query.run_id])?;
    if let Some(name) = &query.name {
        gatehouse_plane::files::check_file_name(name).answer(&rid)?;
    }
    let (tenant_id, run_id) =
        state.plane.scan_attachment(&rid.0, &caller, query.tenant_id, query.run_id).await.answer(&rid)?;
    let scanner = &state.content;
    let mut intake = scanner.intake();
    let mut frames = body.into_data_stream();
    while let Some(frame) = frames.next().await {
        let frame = frame.map_err(|_| bad_request(&rid, "the body could not be read"))?;
        if !intake.push(&frame).await {
            break;
        }
    }
    let verdict = scanner.conclude(intake).await;
    state.metrics.record_content(verdict.verdict);
    if let Some(reason) = verdict.reason {
        let whose = (tenant_id.as_deref(), run_id.as_deref());
        let name = query.name.as_deref();
        state.plane.record_content_refusal(&rid.0, whose, reason, verdict.signature.clone(), name);
    }
    Ok(Json(serde_json::to_value(&verdict).unwrap_or_default()))
}

/// `GET /v1/content/scanner`: whether a malware scanner is configured and
/// answering (clamd `PING` and `VERSION`).
async fn scanner_status(State(state): State<AppState>) -> Json<Value> {
    let Some(clamd) = state.content.clamd() else {
        return Json(json!({"configured": false, "max_bytes": state.content.max_bytes()}));
    };
    let status = match clamd.version().await {
        Ok(version) => json!({"reachable": true, "version": version}),
        Err(e) => json!({"reachable": false, "reason": e.reason()}),
    };
    let mut body =
        json!({"configured": true, "address": clamd.describe(), "max_bytes": state.content.max_bytes()});
    if let (Some(body), Value::Object(status)) = (body.as_object_mut(), status) {
        body.extend(status);
    }
    Json(body)
}

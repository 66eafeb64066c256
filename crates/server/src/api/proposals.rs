//! Egress proposals: a run asks for a rule its policy refuses, a person
//! approves it once (for the run), always (a policy version) or denies it.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use gatehouse_plane::proposals::{Ask, Decision};
use gatehouse_store::proposals::Proposal;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RouteTable, page, path_id};
use crate::http::{Answer as _, ApiError, Caller, RequestId, StrictJson, bad_request};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::{get, post};
    table
        .route("/runs/{run_id}/egress-proposals", post(propose))
        .route("/egress-proposals/{proposal_id}", get(get_proposal))
        .route("/egress-proposals/{proposal_id}/decide", post(decide))
        .route("/tenants/{tenant_id}/egress-proposals", get(list_proposals))
}

/// A proposal as the API answers it: its rule's methods and paths apart.
pub(crate) fn proposal_json(p: &Proposal, now: gatehouse_core::UnixTime) -> Value {
    let rule: Value = serde_json::from_str(&p.rule).unwrap_or_default();
    json!({
        "proposal_id": p.proposal_id,
        "run_id": p.run_id,
        "tenant_id": p.tenant_id,
        "host": rule.get("host").cloned().unwrap_or_else(|| p.host.clone().into()),
        "methods": rule.get("methods").cloned().unwrap_or(Value::Null),
        "paths": rule.get("paths").cloned().unwrap_or(Value::Null),
        "rule": rule,
        "why": p.why,
        "status": p.status_at(now),
        "scope": p.scope,
        "decided_by": p.decided_by,
        "decided_at": p.decided_at,
        "created_at": p.created_at,
        "expires_at": p.expires_at,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProposeBody {
    host: String,
    #[serde(default)]
    methods: Option<Vec<String>>,
    #[serde(default)]
    paths: Option<Vec<String>>,
    why: String,
}

/// `POST /v1/runs/{run_id}/egress-proposals`: a live run asks for one
/// exact rule; `201` with the proposal (the same ask again is the same
/// proposal, `200`).
async fn propose(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(body): StrictJson<ProposeBody>,
) -> Result<Response, ApiError> {
    let run_id = path_id(path, &rid)?;
    let ask = Ask { host: body.host, methods: body.methods, paths: body.paths, why: body.why };
    let (proposal, created) =
        state.plane.propose(&rid.0, &caller, &run_id, &ask, &state.egress_guard).await.answer(&rid)?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(proposal_json(&proposal, state.plane.clock.now()))).into_response())
}

async fn get_proposal(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let proposal_id = path_id(path, &rid)?;
    let proposal = state.plane.proposal(&rid.0, &caller, &proposal_id).await.answer(&rid)?;
    Ok(Json(proposal_json(&proposal, state.plane.clock.now())))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

async fn list_proposals(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let Ok(Query(q)) = query else {
        return Err(bad_request(&rid, "the query may hold status, limit and cursor only"));
    };
    let page = page(&rid, q.limit, q.cursor)?;
    let found =
        state.plane.proposals(&rid.0, &caller, &tenant_id, q.status.as_deref(), &page).await.answer(&rid)?;
    let now = state.plane.clock.now();
    let items: Vec<Value> = found.items.iter().map(|p| proposal_json(p, now)).collect();
    Ok(Json(json!({"items": items, "next_cursor": found.next_cursor})))
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum DecisionName {
    Approve,
    Deny,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ScopeName {
    Run,
    Tenant,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    decision: DecisionName,
    #[serde(default)]
    scope: Option<ScopeName>,
    /// Who decided, as the platform relays it: `person:NAME`.
    actor: String,
}

/// `POST /v1/egress-proposals/{proposal_id}/decide`.
async fn decide(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(body): StrictJson<DecideBody>,
) -> Result<Json<Value>, ApiError> {
    let proposal_id = path_id(path, &rid)?;
    let Some(person) = gatehouse_plane::credential_use::person_of(&body.actor) else {
        return Err(bad_request(&rid, "actor is person:NAME, the person who decided"));
    };
    let decision = match (body.decision, body.scope) {
        (DecisionName::Approve, Some(ScopeName::Run)) => Decision::ApproveOnce,
        (DecisionName::Approve, Some(ScopeName::Tenant)) => Decision::ApproveAlways,
        (DecisionName::Approve, None) => {
            return Err(bad_request(
                &rid,
                "an approval has a scope: run (this run alone) or tenant (a policy version)",
            ));
        }
        (DecisionName::Deny, _) => Decision::Deny,
    };
    let actor = format!("person:{person}");
    let decided =
        state.plane.decide_proposal(&rid.0, &caller, &proposal_id, decision, &actor).await.answer(&rid)?;
    Ok(Json(proposal_json(&decided, state.plane.clock.now())))
}

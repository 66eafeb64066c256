//! The control plane's routes: runs and their whole life, tenants' durable
//! settings (egress policy, dependency gate, kill switch), emergency revoke,
//! and the durable record (refusals, run events, the audit log).
//!
//! Revocation order is always ledger first, then the store: a grant is dead
//! before the record says so, so a failure in between leaves a live-looking
//! run with a dead grant (fail closed), and retrying the call finishes it.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::grant::{GrantLifetime, GrantRequest};
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_core::{ErrorCode, PublicError, Reason, RefusalKind, is_valid_id, new_id};
use gatehouse_egress::{Policy, PolicyDocument};
use gatehouse_ledger::{GrantRecord, LedgerBackend as _, Registration, RevokeScope};
use gatehouse_store::{
    AuditRecord, NewEvent, NewRun, PageRequest, RefusalFilter, Run, RunStatus, Store, StoreError,
};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::http::{ApiError, Caller, RequestId, StrictJson, bad_request, with_reason};
use crate::state::AppState;

/// The control plane's `/v1` routes (authenticated by the caller).
pub fn routes(table: crate::api::RouteTable) -> crate::api::RouteTable {
    use axum::routing::{get, post};
    table
        .route("/runs", post(create_run).get(list_runs))
        .route("/runs/{run_id}", get(get_run))
        .route("/runs/{run_id}/heartbeat", post(heartbeat))
        .route("/runs/{run_id}/end", post(end_run))
        .route("/runs/{run_id}/cancel", post(cancel_run))
        .route("/runs/{run_id}/events", get(run_events))
        .route("/runs/{run_id}/leases", post(crate::credentials::grant_lease))
        .route("/leases", get(crate::credentials::list_leases))
        .route("/leases/{lease_id}/revoke", post(crate::credentials::revoke_lease))
        .route(
            "/tenants/{tenant_id}/credentials",
            post(crate::credentials::create_credential).get(crate::credentials::list_credentials),
        )
        .route(
            "/tenants/{tenant_id}/credentials/{credential_id}",
            get(crate::credentials::get_credential).delete(crate::credentials::delete_credential),
        )
        .route(
            "/tenants/{tenant_id}/credentials/{credential_id}/secret",
            axum::routing::put(crate::credentials::rotate_credential),
        )
        .route("/tenants/{tenant_id}/egress-policy", get(get_egress_policy).put(set_egress_policy))
        .route("/tenants/{tenant_id}/dependency-gate", get(get_gate).put(set_gate))
        .route(
            "/tenants/{tenant_id}/dependency-scans",
            post(crate::scans::submit_scan)
                .layer(axum::extract::DefaultBodyLimit::max(crate::scans::MAX_SCAN_BODY_BYTES))
                .get(crate::scans::list_scans),
        )
        .route("/tenants/{tenant_id}/dependency-scans/{scan_id}", get(crate::scans::get_scan))
        .route("/tenants/{tenant_id}/gate-checks", post(crate::scans::gate_check))
        .route("/tenants/{tenant_id}/kill-switch", post(kill_switch))
        .route("/emergency-revoke", post(emergency_revoke))
        .route("/refusals", get(list_refusals))
        .route("/audit", get(list_audit))
}

/// A store error as the caller sees it.
pub(crate) fn store_error(rid: &RequestId, e: &StoreError) -> ApiError {
    match e {
        StoreError::NotFound => with_reason(ErrorCode::NotFound, rid, Reason::RunUnknown),
        StoreError::RunNotLive => with_reason(ErrorCode::Conflict, rid, Reason::RunNotLive),
        StoreError::KillSwitch => with_reason(ErrorCode::Refused, rid, Reason::TenantKillSwitch),
        StoreError::Conflict => ApiError::new(ErrorCode::Conflict, rid),
        StoreError::Refused(Reason::RunNotLive) => with_reason(ErrorCode::Conflict, rid, Reason::RunNotLive),
        StoreError::Refused(Reason::CredentialUnknown) => {
            with_reason(ErrorCode::NotFound, rid, Reason::CredentialUnknown)
        }
        StoreError::Refused(reason) => with_reason(ErrorCode::Refused, rid, *reason),
        StoreError::Unavailable | StoreError::Full => with_reason(ErrorCode::Unavailable, rid, e.reason()),
        _ => {
            tracing::error!(request_id = %rid.0, code = e.code(), "store error");
            ApiError::new(ErrorCode::Internal, rid)
        }
    }
}

pub(crate) fn store<'a>(state: &'a AppState, rid: &RequestId) -> Result<&'a Store, ApiError> {
    state.store.as_ref().ok_or_else(|| ApiError::new(ErrorCode::Forbidden, rid))
}

pub(crate) fn path_id(
    path: Result<Path<String>, PathRejection>,
    rid: &RequestId,
) -> Result<String, ApiError> {
    // axum's own rejection text may quote the path: never let it through.
    match path {
        Ok(Path(id)) if is_valid_id(&id) => Ok(id),
        _ => Err(bad_request(rid, "ids are 1-128 characters of [A-Za-z0-9._:-], and not . or ..")),
    }
}

/// Free text a caller gives (a reason, an actor): stored and shown to
/// people, so bounded and free of control characters.
pub(crate) fn check_text(rid: &RequestId, text: Option<&str>) -> Result<(), ApiError> {
    match text {
        Some(t) if t.chars().count() > 500 || t.chars().any(char::is_control) => {
            Err(bad_request(rid, "free text is at most 500 characters, without control characters"))
        }
        _ => Ok(()),
    }
}

/// The most items one read of a list returns.
const MAX_PAGE: u32 = 500;

/// A list's `limit`: `default` when none is given, refused outside 1 to
/// [`MAX_PAGE`]. Every list route reads its limit here.
pub(crate) fn page_limit(rid: &RequestId, limit: Option<u32>, default: u32) -> Result<u32, ApiError> {
    let limit = limit.unwrap_or(default);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(bad_request(rid, "limit is 1 to 500"));
    }
    Ok(limit)
}

pub(crate) fn page(
    rid: &RequestId,
    limit: Option<u32>,
    cursor: Option<String>,
) -> Result<PageRequest, ApiError> {
    let limit = page_limit(rid, limit, 50)?;
    if cursor.as_deref().is_some_and(|c| !is_valid_id(c)) {
        return Err(bad_request(rid, "cursor is not one this API gave out"));
    }
    Ok(PageRequest { limit, cursor })
}

pub(crate) fn list_json<T: serde::Serialize>(page: gatehouse_store::Page<T>) -> Json<Value> {
    Json(json!({"items": page.items, "next_cursor": page.next_cursor}))
}

// ---- runs ----

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RunBudgets {
    #[serde(default)]
    max_requests: Option<u64>,
    #[serde(default)]
    max_upload_bytes: Option<u64>,
    #[serde(default)]
    max_output_files: Option<u64>,
    #[serde(default)]
    max_egress_bytes: Option<u64>,
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

/// The ledger's view of a grant, as API answers show it.
pub fn ledger_json(r: &GrantRecord) -> Value {
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
        },
        "exp": r.registration.exp,
    })
}

/// `POST /v1/runs`: records the run, registers its grant in the ledger,
/// signs the manifest bound to the execute body and mints the grant, in
/// one step: on any failure nothing usable is left behind (a registered
/// grant whose run could not be recorded is revoked again).
async fn create_run(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<CreateRun>,
) -> Result<Response, ApiError> {
    let (Some(signer), Some(sealer), Some(sessions), Some(ledger)) =
        (state.signer.as_ref(), state.sealer.as_ref(), state.sessions.as_ref(), state.ledger.as_ref())
    else {
        return Err(ApiError::new(ErrorCode::Forbidden, &rid));
    };
    let store = store(&state, &rid)?;
    let ids = [
        Some(&req.tenant_id),
        Some(&req.user_id),
        req.output_session_id.as_ref(),
        req.conversation_id.as_ref(),
    ];
    if ids.into_iter().flatten().any(|id| !is_valid_id(id)) {
        return Err(bad_request(&rid, "ids are 1-128 characters of [A-Za-z0-9._:-], and not . or .."));
    }
    crate::tenancy::require(&state, &rid, &caller, Some(&req.tenant_id))?;
    let ttl = req.ttl_secs.unwrap_or(state.grant_ttl_secs);
    if !(1..=state.grant_max_lifetime_secs).contains(&ttl) {
        return Err(bad_request(
            &rid,
            "ttl_secs must be positive and within GATEHOUSE_GRANT_MAX_LIFETIME_SECS",
        ));
    }
    let body = BodyDigest::of_value(&req.body).map_err(|_| {
        bad_request(&rid, "body is not canonicalizable JSON (integers must be within ±2^53-1)")
    })?;
    let now = state.clock.now();
    let run_id = new_id("run");

    // The manifest states what the run is: its ids, files, sessions and
    // budgets come from the request itself, and extra claims may not say
    // otherwise.
    let mut claims = req.claims;
    let derived = [
        ("exec_id", Some(json!(run_id))),
        ("tenant_id", Some(json!(req.tenant_id))),
        ("user_id", Some(json!(req.user_id))),
        ("input_files", Some(json!(req.input_files))),
        ("read_sessions", Some(json!(req.read_sessions))),
        ("output_session_id", req.output_session_id.as_ref().map(|s| json!(s))),
        ("max_requests", req.budgets.max_requests.map(|n| json!(n))),
        ("max_upload_bytes", req.budgets.max_upload_bytes.map(|n| json!(n))),
        ("max_output_files", req.budgets.max_output_files.map(|n| json!(n))),
        ("max_egress_bytes", req.budgets.max_egress_bytes.map(|n| json!(n))),
    ];
    for (key, value) in derived {
        match (claims.get(key), value) {
            (Some(given), Some(value)) if *given != value => {
                return Err(bad_request(&rid, "claims must not contradict the run's ids, files or budgets"));
            }
            (Some(_), None) => {
                return Err(bad_request(
                    &rid,
                    "the run's files, sessions and budgets are top-level fields, not claims",
                ));
            }
            (_, Some(value)) => {
                claims.insert(key.to_owned(), value);
            }
            (None, None) => {}
        }
    }
    let (manifest, manifest_claims) = signer.sign_for_body(claims, &body, now, ttl).map_err(|e| {
        tracing::info!(request_id = %rid.0, error = %e, "run manifest rejected");
        bad_request(&rid, "claims are not a valid manifest (see the documentation)")
    })?;
    let principal = Principal { tenant_id: Some(req.tenant_id.clone()), user_id: req.user_id.clone() };
    // Outputs are always the user's own; a run of a conversation writes and
    // reads that conversation's namespace, so two conversations of one user
    // share no session (the seed's limitation).
    let namespace = match req.conversation_id.as_deref() {
        Some(conversation) => Namespace::User { conversation: Some(conversation) },
        None => Namespace::Output,
    };
    let session_key = sessions.derive(&principal, &namespace).map_err(|reason| {
        state.refusals.record(RefusalKind::GrantRefused, reason, Some(&req.tenant_id), None, Some(&rid.0));
        with_reason(ErrorCode::Refused, &rid, reason)
    })?;
    let grant_request = GrantRequest {
        grant_id: None,
        exec_id: run_id.clone(),
        tenant_id: Some(req.tenant_id.clone()),
        user_id: req.user_id.clone(),
        input_files: req.input_files,
        read_sessions: req.read_sessions,
        output_session_id: req.output_session_id,
        max_upload_bytes: req.budgets.max_upload_bytes,
        max_output_files: req.budgets.max_output_files,
        max_requests: req.budgets.max_requests,
        max_egress_bytes: req.budgets.max_egress_bytes,
        iat: Some(now),
        exp: Some(now + ttl),
    };
    let lifetime = GrantLifetime { default_secs: ttl, max_secs: state.grant_max_lifetime_secs };
    let grant_claims = grant_request.into_claims(session_key, now, lifetime).map_err(|e| {
        tracing::info!(request_id = %rid.0, error = %e, "run grant rejected");
        bad_request(
            &rid,
            "the run's files, sessions or budgets are not valid (ids as above; budgets up to 2^53-1)",
        )
    })?;
    let grant = sealer.mint(&grant_claims).map_err(|e| crate::api::mint_refused(&rid, e))?;
    ledger
        .register(&Registration::from(&grant_claims))
        .await
        .map_err(|reason| crate::api::refused(&rid, reason))?;
    let new_run = NewRun {
        run_id: run_id.clone(),
        tenant_id: req.tenant_id.clone(),
        user_id: req.user_id.clone(),
        grant_id: grant_claims.grant_id.clone(),
        execute_body_sha256: manifest_claims.execute_body_sha256.clone(),
        created_at: now,
        expires_at: now + ttl,
    };
    if let Err(e) = store.create_run(&new_run, &caller.name).await {
        // The run does not exist, so neither may its grant.
        if ledger.revoke(&RevokeScope::Grant(grant_claims.grant_id.clone())).await.is_err() {
            tracing::error!(request_id = %rid.0, grant_id = %grant_claims.grant_id,
                "a grant of a run that was not recorded could not be revoked; it expires at its exp");
        }
        if e == StoreError::KillSwitch {
            state.refusals.record(
                RefusalKind::GrantRefused,
                Reason::TenantKillSwitch,
                Some(&req.tenant_id),
                None,
                Some(&rid.0),
            );
        }
        return Err(store_error(&rid, &e));
    }
    let proxy_url = credentialed(&state.proxy_public_url, &grant);
    let mut body = json!({
        "run_id": run_id,
        "status": "live",
        "manifest": manifest,
        "execute_body_sha256": manifest_claims.execute_body_sha256,
        "grant": grant,
        "grant_id": grant_claims.grant_id,
        "expires_at": now + ttl,
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

async fn run_json(state: &AppState, run: &Run) -> Value {
    let ledger = match state.ledger.as_ref() {
        Some(l) => match l.get(&run.grant_id).await {
            Ok(Some(r)) => ledger_json(&r),
            Ok(None) => Value::Null,
            Err(reason) => json!({"unavailable": reason}),
        },
        None => Value::Null,
    };
    let filter = gatehouse_store::LeaseFilter { run_id: Some(run.run_id.clone()), ..Default::default() };
    let page = PageRequest { limit: 500, cursor: None };
    let leases = match state.store.as_ref() {
        Some(store) => match store.leases(&filter, &page, state.clock.now()).await {
            Ok(listed) => listed.items.iter().map(crate::credentials::lease_json).collect(),
            Err(e) => json!({"unavailable": e.code()}),
        },
        None => json!([]),
    };
    let mut v = serde_json::to_value(run).unwrap_or_default();
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
    let store = store(&state, &rid)?;
    match store.run(&run_id).await {
        Ok(Some(run)) => Ok(Json(run_json(&state, &run).await)),
        Ok(None) => Err(with_reason(ErrorCode::NotFound, &rid, Reason::RunUnknown)),
        Err(e) => Err(store_error(&rid, &e)),
    }
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
    let store = store(&state, &rid)?;
    let tenants = crate::tenancy::narrowed(&state, &rid, &caller, q.tenant_id)?;
    let rid_ref = &rid;
    let runs = crate::tenancy::merged(
        rid_ref,
        tenants,
        &page,
        |r: &Run| r.run_id.clone(),
        |tenant, page| async move {
            store.runs(tenant.as_deref(), status, &page).await.map_err(|e| store_error(rid_ref, &e))
        },
    )
    .await?;
    Ok(list_json(runs))
}

async fn heartbeat(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let run_id = path_id(path, &rid)?;
    let (run, renewed) = store(&state, &rid)?
        .heartbeat(&run_id, state.clock.now(), state.run_heartbeat_timeout_secs)
        .await
        .map_err(|e| store_error(&rid, &e))?;
    if renewed > 0 {
        // Every node's door reads the new expiry at the run's next request.
        crate::credentials::leases_changed(&state, &rid, &run.grant_id).await?;
    }
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
    finish(&state, &rid, &run_id, RunStatus::Ended, reason, &caller.name).await
}

async fn cancel_run(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<CancelRequest>,
) -> Result<Json<Value>, ApiError> {
    let run_id = path_id(path, &rid)?;
    check_text(&rid, req.actor.as_deref())?;
    let actor = match &req.actor {
        Some(named) => format!("{}:{named}", caller.name),
        None => caller.name.clone(),
    };
    finish(&state, &rid, &run_id, RunStatus::Cancelled, "cancelled", &actor).await
}

/// Ends a live run by any path but expiry: its grant is revoked, then the
/// run is recorded as ended. Ending a run that is not live reports zeros.
pub(crate) async fn finish(
    state: &AppState,
    rid: &RequestId,
    run_id: &str,
    status: RunStatus,
    reason: &str,
    actor: &str,
) -> Result<Json<Value>, ApiError> {
    let store = store(state, rid)?;
    let ledger = state.ledger.as_ref().ok_or_else(|| ApiError::new(ErrorCode::Forbidden, rid))?;
    let run = match store.run(run_id).await {
        Ok(Some(run)) => run,
        Ok(None) => return Err(with_reason(ErrorCode::NotFound, rid, Reason::RunUnknown)),
        Err(e) => return Err(store_error(rid, &e)),
    };
    if run.status == RunStatus::Live {
        ledger
            .revoke(&RevokeScope::Grant(run.grant_id.clone()))
            .await
            .map_err(|reason| with_reason(ErrorCode::Unavailable, rid, reason))?;
    }
    let (run, leases) = store
        .finish_run(run_id, status, reason, actor, state.clock.now())
        .await
        .map_err(|e| store_error(rid, &e))?;
    if leases.is_some() {
        after_runs_ended(state, std::slice::from_ref(&run));
    }
    Ok(Json(json!({
        "run_id": run.run_id,
        "status": run.status,
        "revoked": {"grants": u64::from(leases.is_some()), "leases": leases.unwrap_or(0)},
    })))
}

/// What follows runs that stopped being live: a `run_ended` event each, and
/// their open tunnels and pooled connections closed (on this node now; on
/// the others within a second, by their own sweep).
pub fn after_runs_ended(state: &AppState, runs: &[Run]) {
    for run in runs {
        let mut event = NewEvent::run_event(run, "run_ended", run.end_reason.as_deref(), state.clock.now());
        event.rule = Some(run.status.as_str().to_owned());
        state.refusals.record_event(event);
    }
    if !runs.is_empty() {
        close_revoked_connections(state);
    }
}

/// Closes revoked grants' tunnels and pooled connections on this node now,
/// without waiting for the next sweep (the other nodes' sweeps follow
/// within a second).
pub fn close_revoked_connections(state: &AppState) {
    if let Some(proxy) = state.proxy.clone() {
        tokio::spawn(async move {
            proxy.close_revoked().await;
        });
    }
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
    let store = store(&state, &rid)?;
    let complete = flush(&state).await;
    if store.run(&run_id).await.map_err(|e| store_error(&rid, &e))?.is_none() {
        return Err(with_reason(ErrorCode::NotFound, &rid, Reason::RunUnknown));
    }
    let events =
        store.run_events(&run_id, q.after.unwrap_or(0), limit).await.map_err(|e| store_error(&rid, &e))?;
    let items: Vec<Value> = events
        .into_iter()
        .map(|e| {
            json!({"seq": e.seq, "at": e.event.at, "kind": e.event.kind, "reason": e.event.reason,
                "host": e.event.host, "rule": e.event.rule, "lease_id": e.event.lease_id,
                "request_id": e.event.request_id, "dry_run": e.event.dry_run})
        })
        .collect();
    let next = items.last().and_then(|e| e["seq"].as_i64()).filter(|_| items.len() == limit as usize);
    Ok(record_answer(&rid, complete, json!({"items": items, "next_cursor": next.map(|s| s.to_string())})))
}

/// How long a record read waits for this node's queued events.
const FLUSH_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Lets this node's queued events reach the store before a read, so a
/// caller sees what it just caused. Whether they did: a store too slow to
/// take them within [`FLUSH_WITHIN`] leaves the read short, which its
/// answer says ([`record_answer`]).
pub(crate) async fn flush(state: &AppState) -> bool {
    match state.refusals.queue() {
        Some(queue) => queue.flush(FLUSH_WITHIN).await,
        None => true,
    }
}

/// The answer of a read of the record (refusals, run events, audit), with
/// `x-gatehouse-record-complete`: `true` when every event this node had
/// queued before the read was in the store, `false` when the read did not
/// wait for them all (read again to see them).
pub(crate) fn record_answer(rid: &RequestId, complete: bool, body: Value) -> Response {
    if !complete {
        tracing::warn!(request_id = %rid.0, "a record read did not wait for every queued event");
    }
    let mut response = Json(body).into_response();
    response
        .headers_mut()
        .insert(RECORD_COMPLETE, http::HeaderValue::from_static(if complete { "true" } else { "false" }));
    response
}

/// The header a record read's answer says whether it is complete in.
pub const RECORD_COMPLETE: &str = "x-gatehouse-record-complete";

// ---- tenants ----

async fn get_egress_policy(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    let current = store(&state, &rid)?.current_policy(&tenant_id).await.map_err(|e| store_error(&rid, &e))?;
    Ok(Json(match current {
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

/// Stores a new version of a tenant's egress policy. An unreadable
/// document is refused here (400, nothing stored), so a typo never reaches
/// the door; this node's replica is refreshed before the answer, the
/// others' within a poll.
async fn set_egress_policy(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(doc): StrictJson<PolicyDocument>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    Policy::from_document(&doc).map_err(|e| {
        tracing::info!(request_id = %rid.0, error = %e, "egress policy rejected");
        ApiError(
            PublicError::new(ErrorCode::BadRequest, rid.0.clone())
                .with_message(
                    "the policy is unreadable: entries are host, *.domain, IP or CIDR, optionally :port",
                )
                .with_reason(Reason::PolicyUnreadable),
        )
    })?;
    let stored = store_policy(&state, &rid, &tenant_id, &doc, &caller.name, None).await?;
    Ok(Json(json!({"tenant_id": tenant_id, "version": stored.version, "policy": doc})))
}

/// Stores a new version of a tenant's policy, already checked readable by
/// the caller (only if the current one is still `expected_version`, when
/// given: else `409 policy_stale`); this node's replica is refreshed before
/// the answer, the others' within a poll.
pub(crate) async fn store_policy(
    state: &AppState,
    rid: &RequestId,
    tenant_id: &str,
    doc: &PolicyDocument,
    actor: &str,
    expected_version: Option<i64>,
) -> Result<gatehouse_store::PolicyVersion, ApiError> {
    let store = store(state, rid)?;
    let document = serde_json::to_string(doc).map_err(|_| ApiError::new(ErrorCode::Internal, rid))?;
    let now = state.clock.now();
    let stored = match expected_version {
        Some(expected) => store.set_policy_if_version(tenant_id, &document, actor, now, expected).await,
        None => store.set_policy(tenant_id, &document, actor, now).await,
    }
    .map_err(|e| match e {
        StoreError::Conflict => with_reason(ErrorCode::Conflict, rid, Reason::PolicyStale),
        e => store_error(rid, &e),
    })?;
    if let Err(e) = state.policies.refresh(store).await {
        tracing::warn!(code = e.code(), "policy replica not refreshed; the poll will catch up");
    }
    tracing::info!(request_id = %rid.0, tenant_id = %tenant_id, version = stored.version, mode = ?doc.mode,
        dry_run = doc.dry_run, "egress policy set");
    Ok(stored)
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
    let tenant = store(&state, &rid)?.tenant(&tenant_id).await.map_err(|e| store_error(&rid, &e))?;
    let mode = tenant.map_or_else(|| "high".to_owned(), |t| t.gate_mode);
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
    store_gate_mode(&state, &rid, &tenant_id, &req.mode, &caller.name).await?;
    Ok(Json(json!({"tenant_id": tenant_id, "mode": req.mode})))
}

/// Sets a tenant's dependency gate mode (`off`, `high`, `critical`), audited.
pub(crate) async fn store_gate_mode(
    state: &AppState,
    rid: &RequestId,
    tenant_id: &str,
    mode: &str,
    actor: &str,
) -> Result<(), ApiError> {
    if !matches!(mode, "off" | "high" | "critical") {
        return Err(bad_request(rid, "mode is off, high or critical"));
    }
    store(state, rid)?
        .set_gate_mode(tenant_id, mode, actor, state.clock.now())
        .await
        .map_err(|e| store_error(rid, &e))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KillSwitchRequest {
    engaged: bool,
    #[serde(default)]
    reason: Option<String>,
}

/// Revokes a scope in the ledger, mapping an outage to the caller's error.
async fn revoke_scope(state: &AppState, rid: &RequestId, scope: RevokeScope) -> Result<u64, ApiError> {
    let ledger = state.ledger.as_ref().ok_or_else(|| ApiError::new(ErrorCode::Forbidden, rid))?;
    ledger.revoke(&scope).await.map_err(|reason| with_reason(ErrorCode::Unavailable, rid, reason))
}

/// Engaging revokes every grant of the tenant (one marker), kills its live
/// runs and refuses new ones until released; a second marker after the
/// store's change covers a run registered while the switch was being thrown.
async fn kill_switch(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<KillSwitchRequest>,
) -> Result<Response, ApiError> {
    let tenant_id = path_id(path, &rid)?;
    check_text(&rid, req.reason.as_deref())?;
    let revoked =
        throw_kill_switch(&state, &rid, &tenant_id, req.engaged, req.reason.as_deref(), &caller.name).await?;
    let mut body = Map::new();
    body.insert("engaged".into(), json!(req.engaged));
    Ok(revoked.answer(&rid, body))
}

/// What one revocation step revoked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Revoked {
    pub runs: usize,
    pub grants: u64,
    pub leases: u64,
    /// The second revocation marker (after the store's change) is not
    /// written yet: the ledger stopped answering between the two. The
    /// runs are killed and recorded; the marker is retried in the
    /// background, and calling again writes it too.
    pub second_marker_pending: bool,
}

impl Revoked {
    fn json(self) -> Value {
        json!({"runs": self.runs, "grants": self.grants, "leases": self.leases})
    }

    /// The API's answer: `200` with what was revoked, or, when the second
    /// marker is still pending, `503 ledger_unavailable` that says what was
    /// done all the same.
    fn answer(self, rid: &RequestId, mut body: Map<String, Value>) -> Response {
        body.insert("revoked".into(), self.json());
        if !self.second_marker_pending {
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
        headers
            .insert("x-gatehouse-reason", http::HeaderValue::from_static(Reason::LedgerUnavailable.as_str()));
        headers.insert("x-gatehouse-retryable", http::HeaderValue::from_static("true"));
        response
    }
}

/// What a caller is told when the ledger stopped answering between the two markers.
const SECOND_MARKER_PENDING: &str = "the runs were killed and recorded and every grant registered before the \
     first revocation marker is revoked, but the second marker (which revokes grants registered meanwhile) \
     could not be written: it is retried; call again to be sure";

/// What a caller is told when the store could not record the change after the first marker.
const STORE_AFTER_FIRST_MARKER: &str = "every grant registered so far is revoked in the ledger, but the store \
     could not record the change (no run is recorded killed, no switch engaged): call again";

/// Engages or releases a tenant's kill switch. Engaging revokes every grant
/// of the tenant (one marker), kills its live runs and refuses new ones
/// until released; a second marker after the store's change covers a run
/// registered while the switch was being thrown.
pub(crate) async fn throw_kill_switch(
    state: &AppState,
    rid: &RequestId,
    tenant_id: &str,
    engaged: bool,
    reason: Option<&str>,
    actor: &str,
) -> Result<Revoked, ApiError> {
    let store = store(state, rid)?;
    let now = state.clock.now();
    if !engaged {
        store
            .set_kill_switch(tenant_id, false, reason, actor, now)
            .await
            .map_err(|e| store_error(rid, &e))?;
        return Ok(Revoked::default());
    }
    let scope = RevokeScope::Tenant(tenant_id.to_owned());
    let before = revoke_scope(state, rid, scope.clone()).await?;
    let killed = store
        .set_kill_switch(tenant_id, true, reason, actor, now)
        .await
        .map_err(|e| after_first_marker(rid, &e))?;
    tracing::warn!(request_id = %rid.0, tenant_id = %tenant_id, runs = killed.runs.len(), "kill switch engaged");
    Ok(second_marker(state, rid, scope, before, &killed).await)
}

/// A store failure after the first marker, told as what it is: every grant
/// registered so far is revoked, nothing is recorded.
fn after_first_marker(rid: &RequestId, e: &StoreError) -> ApiError {
    match e {
        StoreError::Unavailable | StoreError::Full => ApiError(
            PublicError::new(ErrorCode::Unavailable, rid.0.clone())
                .with_reason(e.reason())
                .with_message(STORE_AFTER_FIRST_MARKER),
        ),
        e => store_error(rid, e),
    }
}

/// After the store killed `killed`: their `run_ended` events, then the
/// second marker, which revokes what was registered between the two. A
/// ledger that stopped answering meanwhile does not undo what was done:
/// it is reported (`second_marker_pending`), and the marker is retried in
/// the background until it is written (or every grant that could have been
/// registered meanwhile is past its lifetime).
async fn second_marker(
    state: &AppState,
    rid: &RequestId,
    scope: RevokeScope,
    before: u64,
    killed: &gatehouse_store::Ended,
) -> Revoked {
    after_runs_ended(state, &killed.runs);
    let mut revoked = Revoked {
        runs: killed.runs.len(),
        grants: before,
        leases: killed.leases,
        second_marker_pending: false,
    };
    match revoke_scope(state, rid, scope.clone()).await {
        Ok(after) => revoked.grants += after,
        Err(_) => {
            tracing::error!(request_id = %rid.0, ?scope,
                "the second revocation marker could not be written; retrying it in the background");
            revoked.second_marker_pending = true;
            let (state, rid) = (state.clone(), rid.clone());
            tokio::spawn(async move {
                let give_up = state.clock.now() + state.grant_max_lifetime_secs;
                while state.clock.now() < give_up {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    if revoke_scope(&state, &rid, scope.clone()).await.is_ok() {
                        tracing::info!(request_id = %rid.0, ?scope, "the second revocation marker is written");
                        close_revoked_connections(&state);
                        return;
                    }
                }
            });
        }
    }
    revoked
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
    crate::tenancy::require_global(&state, &rid, &caller)?;
    check_text(&rid, req.reason.as_deref())?;
    let revoked = revoke_everything(&state, &rid, req.reason.as_deref(), &caller.name).await?;
    Ok(revoked.answer(&rid, Map::new()))
}

/// Every grant revoked (one marker) and every live run of every tenant
/// killed, in one step.
pub(crate) async fn revoke_everything(
    state: &AppState,
    rid: &RequestId,
    reason: Option<&str>,
    actor: &str,
) -> Result<Revoked, ApiError> {
    let store = store(state, rid)?;
    let before = revoke_scope(state, rid, RevokeScope::All).await?;
    let reason = reason.unwrap_or("emergency_revoke");
    let killed = store
        .kill_all_runs(reason, actor, state.clock.now())
        .await
        .map_err(|e| after_first_marker(rid, &e))?;
    tracing::warn!(request_id = %rid.0, runs = killed.runs.len(), "emergency revoke");
    Ok(second_marker(state, rid, RevokeScope::All, before, &killed).await)
}

/// The audit entry of a ledger-only revocation (`POST /v1/grants/.../revoke`,
/// `gatehouse grant revoke`): `grants.revoke` with the scope and how many
/// grants it revoked.
pub fn revocation_record(actor: &str, at: i64, scope: &RevokeScope, revoked: u64) -> AuditRecord {
    let (tenant_id, subject) = match scope {
        RevokeScope::Grant(id) | RevokeScope::Exec(id) => (None, id.clone()),
        RevokeScope::Tenant(t) => (Some(t.clone()), t.clone()),
        RevokeScope::All => (None, "all".to_owned()),
    };
    let scope_name = match scope {
        RevokeScope::Grant(_) => "grant",
        RevokeScope::Exec(_) => "exec",
        RevokeScope::Tenant(_) => "tenant",
        RevokeScope::All => "all",
    };
    AuditRecord {
        at,
        actor: actor.to_owned(),
        action: "grants.revoke".into(),
        tenant_id,
        subject,
        detail: json!({"scope": scope_name, "revoked": revoked}),
    }
}

/// Audits a ledger-only revocation, as part of the call: one that cannot
/// be audited fails the call (`store_unavailable`: the revocation stands,
/// and calling again, which revokes nothing more, audits it).
pub async fn audit_revocation(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    scope: &RevokeScope,
    revoked: u64,
) -> Result<(), ApiError> {
    let Some(store) = state.store.as_ref() else { return Ok(()) };
    let record = revocation_record(&caller.name, state.clock.now(), scope, revoked);
    store.audit(&[record]).await.map_err(|e| {
        tracing::error!(request_id = %rid.0, code = e.code(),
            "grants were revoked, but the revocation could not be audited: the call fails, and a retry audits it");
        store_error(rid, &e)
    })
}

/// Entries of the audit log after `after` that `caller` may read (those of
/// its tenants, and its own actions), at most `limit`, reading at most
/// [`AUDIT_SCAN_ENTRIES`] of the chain: a page that stops there may hold
/// fewer, with a cursor to read on from (`None`: the end of the chain).
async fn audit_narrowed(
    store: &Store,
    rid: &RequestId,
    caller: &Caller,
    mut after: i64,
    limit: u32,
) -> Result<(Vec<gatehouse_store::AuditEntry>, Option<i64>), ApiError> {
    let wanted = usize::try_from(limit).unwrap_or(usize::MAX);
    let own = |actor: &str| {
        actor == caller.name
            || actor.strip_prefix(caller.name.as_str()).is_some_and(|rest| rest.starts_with(':'))
    };
    let mut kept = Vec::new();
    let mut read = 0;
    loop {
        let chunk = store.audit_entries(after, 500).await.map_err(|e| store_error(rid, &e))?;
        let full = chunk.len() == 500;
        for entry in chunk {
            read += 1;
            after = entry.seq;
            let record = &entry.record;
            let theirs = record.tenant_id.as_deref().is_some_and(|t| caller.may_act_on(Some(t)));
            if theirs || own(&record.actor) {
                kept.push(entry);
                if kept.len() == wanted {
                    return Ok((kept, Some(after)));
                }
            }
        }
        if !full {
            return Ok((kept, None));
        }
        if read >= AUDIT_SCAN_ENTRIES {
            return Ok((kept, Some(after)));
        }
    }
}

/// How much of the audit chain one narrowed page reads at most.
const AUDIT_SCAN_ENTRIES: usize = 10_000;

// ---- tenants' kill switch on grants, and what scans attach to ----

/// `403 tenant_kill_switch` (recorded) when `tenant`'s kill switch is
/// engaged. A store that cannot say is `store_unavailable`: no grant is
/// minted on a guess.
pub(crate) async fn refuse_kill_switched(
    state: &AppState,
    rid: &RequestId,
    tenant: Option<&str>,
    exec_id: Option<&str>,
) -> Result<(), ApiError> {
    let (Some(tenant), Some(store)) = (tenant, state.store.as_ref()) else { return Ok(()) };
    let settings = store.tenant(tenant).await.map_err(|e| store_error(rid, &e))?;
    if settings.is_some_and(|t| t.kill_switch) {
        state.refusals.record(
            RefusalKind::GrantRefused,
            Reason::TenantKillSwitch,
            Some(tenant),
            exec_id,
            Some(&rid.0),
        );
        return Err(with_reason(ErrorCode::Refused, rid, Reason::TenantKillSwitch));
    }
    Ok(())
}

/// After a grant minted by `POST /v1/grants` is registered: its tenant's
/// kill switch checked again (engaged meanwhile: the grant is revoked and
/// refused), then the mint audited (`grant.mint`: ids and a summary of its
/// scope, never the token). A mint that cannot be audited is revoked and
/// refused: no grant is handed out unrecorded.
pub(crate) async fn minted(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    claims: &gatehouse_capability::GrantClaims,
) -> Result<(), ApiError> {
    let Some(store) = state.store.as_ref() else { return Ok(()) };
    let tenant = claims.tenant_id.as_deref();
    let revoke_it = || async {
        if let Some(ledger) = state.ledger.as_ref()
            && ledger.revoke(&RevokeScope::Grant(claims.grant_id.clone())).await.is_err()
        {
            tracing::error!(request_id = %rid.0, grant_id = %claims.grant_id,
                "a refused grant could not be revoked; it expires at its exp");
        }
    };
    if let Err(refused) = refuse_kill_switched(state, rid, tenant, Some(&claims.exec_id)).await {
        revoke_it().await;
        return Err(refused);
    }
    let record = AuditRecord {
        at: state.clock.now(),
        actor: caller.name.clone(),
        action: "grant.mint".into(),
        tenant_id: claims.tenant_id.clone(),
        subject: claims.grant_id.clone(),
        detail: json!({
            "grant_id": claims.grant_id,
            "tenant_id": claims.tenant_id,
            "exec_id": claims.exec_id,
            "user_id": claims.user_id,
            "exp": claims.exp,
            "scope": {
                "input_files": claims.input_files.len(),
                "read_sessions": claims.read_sessions.len(),
                "output_session_id": claims.output_session_id,
                "max_requests": claims.max_requests,
                "max_upload_bytes": claims.max_upload_bytes,
                "max_output_files": claims.max_output_files,
                "max_egress_bytes": claims.max_egress_bytes,
            },
        }),
    };
    if let Err(e) = store.audit(&[record]).await {
        tracing::error!(request_id = %rid.0, code = e.code(), "a grant mint could not be audited; revoked");
        revoke_it().await;
        return Err(store_error(rid, &e));
    }
    Ok(())
}

/// The tenant and run a content scan's refusal is recorded under. A
/// tenant named must be one the caller may act on; a run named must be of
/// such a tenant (and of the tenant named, if both are), and the refusal
/// becomes one of its events only while it is live: otherwise it is kept
/// for the tenant alone.
pub(crate) async fn scan_attachment(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    query: crate::api::ScanQuery,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let Some(run_id) = query.run_id else {
        if let Some(tenant) = &query.tenant_id {
            crate::tenancy::require(state, rid, caller, Some(tenant))?;
        }
        return Ok((query.tenant_id, None));
    };
    let run = match state.store.as_ref() {
        Some(_) => crate::tenancy::reach_run(state, rid, caller, &run_id).await?,
        None => None,
    };
    match run {
        Some(run) if query.tenant_id.as_ref().is_some_and(|t| *t != run.tenant_id) => {
            Err(bad_request(rid, "run_id is not a run of tenant_id"))
        }
        Some(run) if run.status == RunStatus::Live => Ok((Some(run.tenant_id), Some(run.run_id))),
        Some(run) => Ok((Some(run.tenant_id), None)),
        None => {
            if let Some(tenant) = &query.tenant_id {
                crate::tenancy::require(state, rid, caller, Some(tenant))?;
            } else if caller.tenants.is_some() {
                // An unknown run names no tenant of the caller's.
                return Err(crate::tenancy::not_allowed(state, rid, caller, None));
            }
            Ok((query.tenant_id, None))
        }
    }
}

// ---- the record ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefusalQuery {
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    since: Option<i64>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

/// `GET /v1/refusals`: durable, newest first, paged; narrowed by tenant,
/// run, kind, reason, host and time.
async fn list_refusals(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<RefusalQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Ok(Query(q)) = query else {
        return Err(bad_request(
            &rid,
            "the query may hold tenant_id, run_id, kind, reason, host, since, limit and cursor only",
        ));
    };
    if [&q.tenant_id, &q.run_id].into_iter().flatten().any(|id| !is_valid_id(id)) {
        return Err(bad_request(&rid, "ids are 1-128 characters of [A-Za-z0-9._:-]"));
    }
    if q.kind.as_deref().is_some_and(|k| RefusalKind::parse(k).is_none()) {
        return Err(bad_request(&rid, "kind is not a refusal kind"));
    }
    if q.reason.as_deref().is_some_and(|r| Reason::parse(r).is_none()) {
        return Err(bad_request(&rid, "reason is not a reason code"));
    }
    if q.host
        .as_deref()
        .is_some_and(|h| h.len() > 253 || h.chars().any(|c| c.is_control() || c.is_whitespace()))
    {
        return Err(bad_request(&rid, "host is not a host name"));
    }
    let page = page(&rid, q.limit, q.cursor)?;
    let store = store(&state, &rid)?;
    let tenants = crate::tenancy::narrowed(&state, &rid, &caller, q.tenant_id)?;
    let complete = flush(&state).await;
    let filter = RefusalFilter {
        tenant_id: None,
        run_id: q.run_id,
        kind: q.kind,
        reason: q.reason,
        since: q.since,
        host: q.host,
    };
    let rid_ref = &rid;
    let found = crate::tenancy::merged(
        rid_ref,
        tenants,
        &page,
        |e: &gatehouse_store::Event| e.seq,
        |tenant_id, page| {
            let filter = RefusalFilter { tenant_id, ..filter.clone() };
            async move { store.refusals(&filter, &page).await.map_err(|e| store_error(rid_ref, &e)) }
        },
    )
    .await?;
    let items: Vec<Value> = found
        .items
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e.as_refusal()).unwrap_or_default();
            if let Some(obj) = v.as_object_mut() {
                obj.insert("seq".into(), json!(e.seq));
                // 1, but for a minute's count of refusals from callers who
                // proved nothing, which also names its listener and client.
                obj.insert("count".into(), json!(e.count));
                if let Some(listener) = &e.listener {
                    obj.insert("listener".into(), json!(listener));
                    obj.insert("client".into(), json!(e.client));
                }
            }
            v
        })
        .collect();
    Ok(record_answer(&rid, complete, json!({"items": items, "next_cursor": found.next_cursor})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    #[serde(default)]
    after: Option<i64>,
    #[serde(default)]
    limit: Option<u32>,
}

/// `GET /v1/audit?after=SEQ`: the chain in order.
async fn list_audit(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Ok(Query(q)) = query else {
        return Err(bad_request(&rid, "the query may hold after and limit only"));
    };
    let limit = page_limit(&rid, q.limit, 100)?;
    let store = store(&state, &rid)?;
    let complete = flush(&state).await;
    let after = q.after.unwrap_or(0);
    if caller.acts_globally() {
        let entries = store.audit_entries(after, limit).await.map_err(|e| store_error(&rid, &e))?;
        let next = entries.last().map(|e| e.seq.to_string()).filter(|_| entries.len() == limit as usize);
        return Ok(record_answer(&rid, complete, json!({"items": entries, "next_cursor": next})));
    }
    // Anyone else reads the entries of its tenants (and its own actions),
    // a bounded stretch of the chain per page.
    let (entries, next) = audit_narrowed(store, &rid, &caller, after, limit).await?;
    Ok(record_answer(
        &rid,
        complete,
        json!({"items": entries, "next_cursor": next.map(|seq| seq.to_string())}),
    ))
}

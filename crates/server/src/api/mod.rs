//! The HTTP API: one module per resource, each translating HTTP into a
//! plane operation and the plane's answer (or error) into the wire shape.
//! Every refusal is recorded by the plane before it is answered.
//!
//! Modules here never import the settings page (`crate::admin`), nor it
//! them: both call the plane; what they share is the edge (`crate::http`).

use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use gatehouse_core::{ErrorCode, PublicError, Reason, is_valid_id, new_id};
use gatehouse_ledger::LedgerBackend as _;
use gatehouse_store::{Page, PageRequest};
use serde_json::{Value, json};

use crate::http::{ApiError, MAX_BODY_BYTES, RequestId, bad_request};
use crate::state::AppState;

mod content;
mod credentials;
mod egress;
mod files;
mod grants;
mod manifests;
mod proposals;
mod record;
mod runs;
pub mod scans;
mod tenants;

/// A router being built, and every path given to it: the OpenAPI test
/// compares this list, and the methods the router answers on each path, with
/// the document, so neither can name a route the other lacks.
pub struct RouteTable {
    router: Router<AppState>,
    prefix: &'static str,
    paths: Vec<String>,
}

impl RouteTable {
    fn new(prefix: &'static str) -> Self {
        Self { router: Router::new(), prefix, paths: Vec::new() }
    }

    /// Serves `path` (under the table's prefix) with `methods`.
    pub fn route(mut self, path: &'static str, methods: axum::routing::MethodRouter<AppState>) -> Self {
        self.paths.push(format!("{}{path}", self.prefix));
        self.router = self.router.route(path, methods);
        self
    }
}

/// The public routes, the `/v1` ones (service token) and the sandbox's
/// (a run's grant), before state and layers.
fn tables() -> (RouteTable, RouteTable, RouteTable) {
    let public = RouteTable::new("")
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi));
    let v1 = [
        manifests::routes,
        grants::routes,
        egress::routes,
        content::routes,
        runs::routes,
        credentials::routes,
        tenants::routes,
        proposals::routes,
        scans::routes,
        record::routes,
        files::routes,
    ]
    .into_iter()
    .fold(RouteTable::new("/v1"), |table, routes| routes(table));
    let sandbox = files::sandbox_routes(RouteTable::new(""));
    (public, v1, sandbox)
}

/// Every path the router serves, as registered.
pub fn served_paths() -> Vec<String> {
    let (public, v1, sandbox) = tables();
    public.paths.into_iter().chain(v1.paths).chain(sandbox.paths).collect()
}

/// The API's router for this node, with `pages` (the settings page, when
/// served) beside it under the same edge: request ids, the body limit, the
/// safe errors.
pub fn router(state: AppState, pages: Router<AppState>) -> Router {
    let (public, v1, sandbox) = tables();
    let v1 = v1
        .router
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::http::require_service_token));
    public
        .router
        .nest("/v1", v1)
        // The sandbox's file routes authenticate with the run's grant, in
        // the handler, not with a service token.
        .merge(sandbox.router)
        .merge(pages)
        .fallback(crate::http::not_found)
        .method_not_allowed_fallback(crate::http::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), crate::http::request_context))
        .with_state(state)
}

async fn openapi(State(state): State<AppState>) -> Json<Value> {
    Json(crate::openapi::document(state.plane.settings.tenant_isolation_strict))
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Ready when every dependency this node needs can answer (its ledger, its
/// store where its role has one, a configured clamd): a node whose ledger
/// or database is unreachable refuses the traffic that needs them, so it
/// says so here and load balancers route around it.
async fn readyz(State(state): State<AppState>) -> Response {
    match readiness(&state).await {
        Ok(()) => Json(json!({"status": "ready", "role": state.role.as_str()})).into_response(),
        Err(reason) => {
            let body = json!({"status": "not_ready", "role": state.role.as_str(), "reason": reason});
            (http::StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

/// How long one readiness answer stands. `/readyz` is unauthenticated: with
/// the answer kept for a second, however often it is called it costs the
/// ledger, the store and clamd at most one round trip each per second.
const READINESS_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// The ledger answers (and, on Redis, cannot evict what it is told:
/// `ledger_eviction_unsafe`), the store answers where the role has one
/// (`store_unavailable`: runs, policies, refusals and leases all live
/// there), and a configured scanner answers (a node whose scanner cannot
/// would refuse every upload: route traffic elsewhere). One caller probes
/// while the others wait for its answer.
async fn readiness(state: &AppState) -> Result<(), Reason> {
    let mut cached = state.readiness.lock().await;
    if let Some((at, answer)) = *cached
        && at.elapsed() < READINESS_TTL
    {
        return answer;
    }
    let answer = probe_readiness(state).await;
    *cached = Some((std::time::Instant::now(), answer));
    answer
}

async fn probe_readiness(state: &AppState) -> Result<(), Reason> {
    if let Some(ledger) = state.plane.ledger.as_ref() {
        ledger.get("readyz-probe").await?;
        ledger.check_retention().await?;
    }
    if let Some(store) = state.plane.store.as_ref() {
        store.ping().await.map_err(|e| e.reason())?;
    }
    if let Some(clamd) = state.content.clamd() {
        clamd.ping().await.map_err(|e| e.reason())?;
    }
    Ok(())
}

/// Prometheus text. With `GATEHOUSE_METRICS_TOKEN` set it needs that token
/// as a bearer token (a scraper holds it, not a caller's API token).
async fn metrics(State(state): State<AppState>, headers: http::HeaderMap) -> Response {
    if let Some(token) = &state.metrics_token {
        let presented = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(gatehouse_core::credentials::bearer_token)
            .unwrap_or_default();
        if headers.get_all(http::header::AUTHORIZATION).iter().count() != 1 || !token.verify(presented) {
            let body = PublicError::new(ErrorCode::Unauthorized, new_id("req")).to_json();
            return (
                http::StatusCode::UNAUTHORIZED,
                [(http::header::WWW_AUTHENTICATE, "Bearer")],
                Json(body),
            )
                .into_response();
        }
    }
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(
            &state.plane.refusals,
            state.plane.proxy.as_deref().map(|p| &p.stats),
            state.plane.door_leases.as_deref(),
        ),
    )
        .into_response()
}

fn forbidden(rid: &RequestId) -> ApiError {
    ApiError::new(ErrorCode::Forbidden, rid)
}

/// The id in a route's path, checked.
fn path_id(path: Result<Path<String>, PathRejection>, rid: &RequestId) -> Result<String, ApiError> {
    // axum's own rejection text may quote the path: never let it through.
    match path {
        Ok(Path(id)) if is_valid_id(&id) => Ok(id),
        _ => Err(bad_request(rid, gatehouse_plane::ID_RULE)),
    }
}

/// The most items one read of a list returns.
const MAX_PAGE: u32 = 500;

/// A list's `limit`: `default` when none is given, refused outside 1 to
/// [`MAX_PAGE`]. Every list route reads its limit here.
fn page_limit(rid: &RequestId, limit: Option<u32>, default: u32) -> Result<u32, ApiError> {
    let limit = limit.unwrap_or(default);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(bad_request(rid, "limit is 1 to 500"));
    }
    Ok(limit)
}

/// A page request from a list's query: 50 items unless it says otherwise,
/// read on from a cursor this API gave out.
fn page(rid: &RequestId, limit: Option<u32>, cursor: Option<String>) -> Result<PageRequest, ApiError> {
    let limit = page_limit(rid, limit, 50)?;
    if cursor.as_deref().is_some_and(|c| !is_valid_id(c)) {
        return Err(bad_request(rid, "cursor is not one this API gave out"));
    }
    Ok(PageRequest { limit, cursor })
}

/// A page as a list answers it.
fn list_json<T: serde::Serialize>(page: Page<T>) -> Json<Value> {
    Json(json!({"items": page.items, "next_cursor": page.next_cursor}))
}

/// Tenant and run ids from a query string follow the id rules.
fn check_ids(rid: &RequestId, ids: [&Option<String>; 2]) -> Result<(), ApiError> {
    if ids.into_iter().flatten().any(|id| !is_valid_id(id)) {
        return Err(bad_request(rid, "ids are 1-128 characters of [A-Za-z0-9._:-]"));
    }
    Ok(())
}

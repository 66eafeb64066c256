//! The HTTP API. Handlers translate between wire shapes and the capability
//! crate's decisions; every refusal is recorded before it is answered.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, State};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gatehouse_capability::GrantClaims;
use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::grant::{GrantLifetime, GrantRequest, MintError};
use gatehouse_capability::manifest::{ManifestPresence, SignError};
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_core::{ErrorCode, PublicError, Reason, Refusal, RefusalKind, is_valid_id, new_id};
use gatehouse_egress::leases::mentions_placeholder;
use gatehouse_egress::proxy::PolicySource as _;
use gatehouse_ledger::{
    LedgerBackend as _, Operation, Registration, RevokeScope, Status, refusal_kind, spend,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::http::{ApiError, Caller, MAX_BODY_BYTES, RequestId, StrictJson, bad_request, with_reason};
use crate::state::AppState;

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
    let v1 = RouteTable::new("/v1")
        .route("/manifests/sign", post(sign_manifest))
        .route("/manifests/verify", post(verify_manifest))
        .route("/grants", post(mint_grant))
        .route("/grants/open", post(open_grant))
        .route("/grants/consume", post(consume_grant))
        .route("/grants/revoke", post(revoke_grants))
        .route("/grants/{grant_id}/revoke", post(revoke_grant))
        .route("/egress/fetch", post(egress_fetch))
        .route("/egress/fetch/raw", post(egress_fetch_raw))
        .route("/content/scan", post(scan_content))
        .route("/content/scanner", get(scanner_status));
    let sandbox = crate::file_routes::sandbox_routes(RouteTable::new(""));
    (public, crate::file_routes::routes(crate::control::routes(v1)), sandbox)
}

/// Every path the router serves, as registered.
pub fn served_paths() -> Vec<String> {
    let (public, v1, sandbox) = tables();
    public.paths.into_iter().chain(v1.paths).chain(sandbox.paths).collect()
}

/// The full router for this node.
pub fn router(state: AppState) -> Router {
    let (public, v1, sandbox) = tables();
    let v1 = v1
        .router
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::http::require_service_token));
    let pages = crate::admin::router(&state).unwrap_or_default();
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
    Json(crate::openapi::document(state.tenant_isolation_strict))
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
    if let Some(ledger) = state.ledger.as_ref() {
        ledger.get("readyz-probe").await?;
        ledger.check_retention().await?;
    }
    if let Some(store) = state.store.as_ref() {
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
            &state.refusals,
            state.proxy.as_deref().map(|p| &p.stats),
            state.door_leases.as_deref(),
        ),
    )
        .into_response()
}

pub(crate) fn forbidden(rid: &RequestId) -> ApiError {
    ApiError::new(ErrorCode::Forbidden, rid)
}

/// A refusal: 403, or 503 when it is an outage (worth retrying).
pub(crate) fn refused(rid: &RequestId, reason: Reason) -> ApiError {
    with_reason(reason.refusal_code(), rid, reason)
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
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<SignRequest>,
) -> Result<Json<Value>, ApiError> {
    let signer = state.signer.as_ref().ok_or_else(|| forbidden(&rid))?;
    let tenant = req.claims.get("tenant_id").and_then(Value::as_str).map(str::to_owned);
    let exec = req.claims.get("exec_id").and_then(Value::as_str).map(str::to_owned);
    crate::tenancy::require(&state, &rid, &caller, tenant.as_deref())?;
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
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<VerifyRequest>,
) -> Result<Json<Value>, ApiError> {
    let verifier = state.verifier.as_ref().ok_or_else(|| forbidden(&rid))?;
    let outcome = BodyDigest::of_value(&req.body).map_err(|_| Reason::ManifestBodyInvalid).and_then(|body| {
        verifier.check_request(req.token.as_deref(), &body, state.clock.now(), state.require_manifest)
    });
    if let Ok(ManifestPresence::Signed(m)) = &outcome {
        // A manifest of a tenant the caller may not act on is not its to run.
        crate::tenancy::require(&state, &rid, &caller, m.claims.tenant_id.as_deref())?;
    }
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
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<GrantRequest>,
) -> Result<Json<Value>, ApiError> {
    let (Some(sealer), Some(sessions)) = (state.sealer.as_ref(), state.sessions.as_ref()) else {
        return Err(forbidden(&rid));
    };
    crate::tenancy::require(&state, &rid, &caller, req.tenant_id.as_deref())?;
    if is_valid_id(&req.exec_id) && caller.tenants.is_some() {
        // An exec id that is a run names that run's tenant.
        crate::tenancy::reach_run(&state, &rid, &caller, &req.exec_id).await?;
    }
    // A tenant whose kill switch is engaged gets no grant, as it gets no run.
    crate::control::refuse_kill_switched(&state, &rid, req.tenant_id.as_deref(), Some(&req.exec_id)).await?;
    let principal = Principal { tenant_id: req.tenant_id.clone(), user_id: req.user_id.clone() };
    let session_key = sessions.derive(&principal, &Namespace::Output).map_err(|reason| {
        state.refusals.record(RefusalKind::GrantRefused, reason, None, Some(&req.exec_id), Some(&rid.0));
        refused(&rid, reason)
    })?;
    let lifetime =
        GrantLifetime { default_secs: state.grant_ttl_secs, max_secs: state.grant_max_lifetime_secs };
    let claims = req.into_claims(session_key, state.clock.now(), lifetime).map_err(|e| {
        tracing::info!(request_id = %rid.0, error = %e, "grant request rejected");
        mint_refused(&rid, e)
    })?;
    // Sealed first (what could never be opened is refused before anything
    // is registered), handed out only once registered: with the ledger
    // required, a grant that could not be registered is never handed out.
    let token = sealer.mint(&claims).map_err(|e| mint_refused(&rid, e))?;
    if let Some(ledger) = state.ledger.as_ref() {
        match ledger.register(&Registration::from(&claims)).await {
            Ok(_) => {}
            Err(Reason::LedgerUnavailable) if !state.ledger_required => {
                tracing::warn!(request_id = %rid.0, "grant minted without a ledger record (ledger not required)");
            }
            Err(Reason::LedgerUnavailable) => {
                return Err(ApiError(
                    PublicError::new(ErrorCode::Unavailable, rid.0.clone())
                        .with_reason(Reason::LedgerUnavailable),
                ));
            }
            Err(reason) => {
                state.refusals.record(
                    RefusalKind::GrantRefused,
                    reason,
                    claims.tenant_id.as_deref(),
                    Some(&claims.exec_id),
                    Some(&rid.0),
                );
                return Err(refused(&rid, reason));
            }
        }
    }
    // Checked again once registered: a switch engaged since the first check
    // is seen here, or its second revocation marker (written after the
    // switch is stored) comes after this registration and revokes it.
    crate::control::minted(&state, &rid, &caller, &claims).await?;
    Ok(Json(json!({"token": token, "grant_id": claims.grant_id, "exp": claims.exp})))
}

/// A grant request that cannot be minted: what is wrong with it (the
/// message names the field, never its value), or an internal failure.
pub(crate) fn mint_refused(rid: &RequestId, e: MintError) -> ApiError {
    match e {
        MintError::Invalid(what) => bad_request(rid, what),
        MintError::Random => {
            tracing::error!(request_id = %rid.0, "grant mint failed: no randomness");
            ApiError::new(ErrorCode::Internal, rid)
        }
    }
}

/// Opens a grant token, recording a refusal when it does not open. The
/// outer error is for nodes that hold no grant secret.
pub(crate) fn open_token(
    state: &AppState,
    rid: &RequestId,
    token: Option<&str>,
) -> Result<Result<GrantClaims, Reason>, ApiError> {
    let sealer = state.sealer.as_ref().ok_or_else(|| forbidden(rid))?;
    Ok(sealer.open(token.unwrap_or_default().trim(), state.clock.now()).inspect_err(|reason| {
        state.refusals.record(RefusalKind::GrantRefused, *reason, None, None, Some(&rid.0));
    }))
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
    let claims = match open_token(&state, &rid, req.token.as_deref())? {
        Ok(claims) => claims,
        Err(reason) => return Ok(Json(json!({"valid": false, "reason": reason}))),
    };
    crate::tenancy::require(&state, &rid, &caller, claims.tenant_id.as_deref())?;
    let record = match state.ledger.as_ref() {
        Some(ledger) => ledger.get(&claims.grant_id).await,
        None => Ok(None),
    };
    let refusal = match &record {
        Ok(Some(r)) if r.status == Status::Revoked => Some(Reason::GrantRevoked),
        Ok(None) if state.ledger_required => Some(Reason::GrantUnknown),
        Err(reason) if state.ledger_required => Some(*reason),
        _ => None,
    };
    if let Some(reason) = refusal {
        state.refusals.record(
            RefusalKind::GrantRefused,
            reason,
            claims.tenant_id.as_deref(),
            Some(&claims.exec_id),
            Some(&rid.0),
        );
        return Ok(Json(json!({"valid": false, "reason": reason})));
    }
    let ledger = match record {
        Ok(Some(r)) => crate::control::ledger_json(&r),
        _ => Value::Null,
    };
    Ok(Json(json!({"valid": true, "claims": claims, "ledger": ledger})))
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
/// file or tool access makes. Opens the grant, then consumes atomically.
async fn consume_grant(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    StrictJson(req): StrictJson<ConsumeRequest>,
) -> Result<Json<Value>, ApiError> {
    let ledger = state.ledger.as_ref().ok_or_else(|| forbidden(&rid))?;
    let claims = match open_token(&state, &rid, req.token.as_deref())? {
        Ok(claims) => claims,
        Err(reason) => return Ok(Json(json!({"allowed": false, "reason": reason}))),
    };
    crate::tenancy::require(&state, &rid, &caller, claims.tenant_id.as_deref())?;
    let now = state.clock.now();
    match spend(ledger, &claims.grant_id, &req.operation, now, state.ledger_required).await {
        Ok(remaining) => {
            Ok(Json(json!({"allowed": true, "grant_id": claims.grant_id, "remaining": remaining})))
        }
        Err(reason) => {
            state.refusals.record(
                refusal_kind(reason),
                reason,
                claims.tenant_id.as_deref(),
                Some(&claims.exec_id),
                Some(&rid.0),
            );
            Ok(Json(json!({"allowed": false, "reason": reason})))
        }
    }
}

async fn revoke(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    scope: RevokeScope,
) -> Result<Json<Value>, ApiError> {
    let ledger = state.ledger.as_ref().ok_or_else(|| forbidden(rid))?;
    let revoked = ledger.revoke(&scope).await.map_err(|reason| {
        ApiError(PublicError::new(ErrorCode::Unavailable, rid.0.clone()).with_reason(reason))
    })?;
    tracing::info!(request_id = %rid.0, ?scope, revoked, "grants revoked");
    crate::control::close_revoked_connections(state);
    crate::control::audit_revocation(state, rid, caller, &scope, revoked).await?;
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
    match &scope {
        // A bound caller revokes a run's grants only for a run of its own
        // tenants (an exec id that is no run may be any tenant's).
        RevokeScope::Exec(exec) if caller.tenants.is_some() => {
            if crate::tenancy::reach_run(&state, &rid, &caller, exec).await?.is_none() {
                return Err(crate::tenancy::not_allowed(&state, &rid, &caller, None));
            }
        }
        RevokeScope::Tenant(tenant) => crate::tenancy::require(&state, &rid, &caller, Some(tenant))?,
        RevokeScope::All => crate::tenancy::require_global(&state, &rid, &caller)?,
        RevokeScope::Exec(_) | RevokeScope::Grant(_) => {}
    }
    revoke(&state, &rid, &caller, scope).await
}

/// Why the platform fetches. Each is counted on its own
/// (`gatehouse_egress_fetch_total{purpose}`) and logged with the request, so
/// an operator sees what kind of traffic runs send; `webhook` also follows
/// no redirect (a delivery goes exactly where it was addressed).
#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub enum FetchPurpose {
    /// A git host's API or repository.
    GitProvider,
    /// An MCP server.
    Mcp,
    /// A webhook delivery.
    Webhook,
    /// The run's own runtime traffic.
    Runtime,
    /// Delivering events to the platform's consumers.
    EventDelivery,
    /// A vulnerability database (OSV).
    VulnerabilityDb,
}

impl FetchPurpose {
    /// Every purpose, in the order metrics list them.
    pub const ALL: [FetchPurpose; 6] = [
        FetchPurpose::GitProvider,
        FetchPurpose::Mcp,
        FetchPurpose::Webhook,
        FetchPurpose::Runtime,
        FetchPurpose::EventDelivery,
        FetchPurpose::VulnerabilityDb,
    ];

    /// The name in requests, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            FetchPurpose::GitProvider => "git_provider",
            FetchPurpose::Mcp => "mcp",
            FetchPurpose::Webhook => "webhook",
            FetchPurpose::Runtime => "runtime",
            FetchPurpose::EventDelivery => "event_delivery",
            FetchPurpose::VulnerabilityDb => "vulnerability_db",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchBody {
    #[serde(default)]
    grant: Option<String>,
    #[serde(default = "default_method")]
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body_base64: Option<String>,
    purpose: FetchPurpose,
    /// A webhook signing lease of the run: the delivery is signed with
    /// Standard Webhooks headers, the secret never leaving gatehouse.
    #[serde(default)]
    sign_with: Option<String>,
}

fn default_method() -> String {
    "GET".into()
}

/// A fetch on a run's behalf: its grant opened and a request spent.
struct RunFetch<'a> {
    state: &'a AppState,
    rid: &'a RequestId,
    claims: GrantClaims,
    fetcher: &'a gatehouse_egress::fetch::Fetcher,
    meter: gatehouse_egress::meter::EgressMeter,
    /// The run's lease generation, as its spend answered (`None`: unknown).
    lease_generation: Option<u64>,
}

impl<'a> RunFetch<'a> {
    /// Opens `grant` and spends one request from it for `fetch`.
    async fn start(
        state: &'a AppState,
        rid: &'a RequestId,
        grant: Option<&str>,
        fetch: &gatehouse_egress::fetch::FetchRequest,
    ) -> Result<Self, ApiError> {
        let (Some(fetcher), Some(ledger)) = (state.fetcher.as_ref(), state.ledger.as_ref()) else {
            return Err(forbidden(rid));
        };
        let claims = open_token(state, rid, grant)?.map_err(|reason| refused(rid, reason))?;
        let meter = gatehouse_egress::meter::EgressMeter::new(
            ledger.clone(),
            &claims.grant_id,
            state.clock.clone(),
            state.ledger_required,
        );
        let mut run = Self { state, rid, claims, fetcher, meter, lease_generation: None };
        match spend(
            ledger,
            &run.claims.grant_id,
            &Operation::Request,
            state.clock.now(),
            state.ledger_required,
        )
        .await
        {
            Ok(spent) => run.lease_generation = spent.map(|s| s.lease_generation),
            // A request carrying a placeholder is told what became of its
            // credential, as at the proxy.
            Err(reason)
                if state.door_leases.is_some() && mentions_placeholder(&fetch.headers, &fetch.url) =>
            {
                let reason = gatehouse_egress::leases::refused_before_the_leases(reason);
                run.note(RefusalKind::SecretRefused, reason, None, None, false);
                return Err(refused(rid, reason));
            }
            Err(reason) => {
                run.note(refusal_kind(reason), reason, None, None, false);
                return Err(refused(rid, reason));
            }
        }
        Ok(run)
    }

    /// The run's leases applied to the request (see `gatehouse_egress::leases`):
    /// its credential put in (and the answer to be scrubbed of it), or the
    /// request refused. Redirects stay on the origin, so the credential never
    /// follows one elsewhere. `body_in_hand`: the request's body is
    /// `fetch.body` (not streamed), and is looked at too.
    ///
    /// Returns the run's placeholders, which a streamed body is watched for
    /// (`gatehouse_egress::leases::WatchedBody`).
    async fn inject(
        &self,
        fetch: &mut gatehouse_egress::fetch::FetchRequest,
        body_in_hand: bool,
    ) -> Result<Vec<String>, ApiError> {
        let Some(source) = self.state.door_leases.as_ref() else {
            return Ok(Vec::new());
        };
        // A URL that does not parse is refused by the fetch itself.
        let Ok(target) = gatehouse_egress::parse_url(&fetch.url) else {
            return Ok(Vec::new());
        };
        let host = target.host.to_string();
        let run = gatehouse_egress::leases::OfRun {
            grant_id: &self.claims.grant_id,
            run_id: &self.claims.exec_id,
            generation: self.lease_generation,
        };
        let outbound = gatehouse_egress::leases::Outbound {
            headers: &mut fetch.headers,
            path_and_query: &target.path_and_query,
            host: &host,
            over_tls: target.scheme == gatehouse_egress::Scheme::Https,
            body: body_in_hand.then_some(&fetch.body[..]),
        };
        let at_the_door =
            gatehouse_egress::leases::at_the_door(source.as_ref(), run, outbound, self.state.clock.now());
        match at_the_door.await {
            Ok(injected) => {
                if let Some(lease_id) = injected.lease_id {
                    fetch.last_check = Some(self.lease_still_usable(lease_id, injected.generation));
                }
                fetch.scrub = injected.scrub;
                Ok(injected.watch)
            }
            Err(refusal) => {
                self.note_lease(refusal.reason, Some(host), refusal.lease_id);
                Err(refused(self.rid, refusal.reason))
            }
        }
    }

    /// The fetcher's last check for a request carrying `lease_id`'s secret:
    /// the fetch resolves its name after the credential went in, so the
    /// lease is checked again right before each hop goes out. A refusal
    /// there is recorded as the lease's.
    fn lease_still_usable(&self, lease_id: String, generation: u64) -> gatehouse_egress::leases::LastCheck {
        let state = self.state.clone();
        let grant_id = self.claims.grant_id.clone();
        let run_id = self.claims.exec_id.clone();
        gatehouse_egress::leases::LastCheck::new(move || {
            let (state, grant_id, run_id, lease_id) =
                (state.clone(), grant_id.clone(), run_id.clone(), lease_id.clone());
            Box::pin(async move {
                let Some(source) = state.door_leases.as_ref() else { return Ok(()) };
                let now = state.clock.now();
                gatehouse_egress::leases::still_usable(
                    source.as_ref(),
                    &grant_id,
                    &run_id,
                    &lease_id,
                    generation,
                    now,
                )
                .await
            })
        })
    }

    /// Signs a webhook delivery with the run's signing lease `lease_id`.
    async fn sign(
        &self,
        fetch: &mut gatehouse_egress::fetch::FetchRequest,
        lease_id: &str,
    ) -> Result<(), ApiError> {
        let source = self.state.door_leases.as_ref().ok_or_else(|| forbidden(self.rid))?;
        let host = gatehouse_egress::parse_url(&fetch.url).map(|t| t.host.to_string()).unwrap_or_default();
        let secret = source
            .signing_secret(&self.claims.exec_id, self.claims.tenant_id.as_deref(), lease_id, &host)
            .await
            .map_err(|reason| {
                self.note_lease(reason, Some(host.clone()), Some(lease_id.to_owned()));
                refused(self.rid, reason)
            })?;
        let id = new_id("msg");
        let timestamp = self.state.clock.now();
        let signature = gatehouse_capability::webhook_signature(&secret, &id, timestamp, &fetch.body);
        let headers = [
            ("webhook-id", id),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ];
        for (name, value) in headers {
            let value = http::HeaderValue::try_from(value)
                .map_err(|_| ApiError::new(ErrorCode::Internal, self.rid))?;
            fetch.headers.insert(name, value);
        }
        Ok(())
    }

    /// Records a lease refusal: a security refusal of the run's request.
    fn note_lease(&self, reason: Reason, host: Option<String>, lease_id: Option<String>) {
        self.state.refusals.record_refusal(Refusal {
            kind: RefusalKind::SecretRefused,
            reason,
            tenant_id: self.claims.tenant_id.clone(),
            run_id: Some(self.claims.exec_id.clone()),
            request_id: Some(self.rid.0.clone()),
            host,
            rule: None,
            lease_id,
            dry_run: false,
            at: 0,
        });
    }

    /// Records a refusal (or, `dry_run`, what a dry-run policy would have refused).
    fn note(
        &self,
        kind: RefusalKind,
        reason: Reason,
        host: Option<String>,
        rule: Option<String>,
        dry_run: bool,
    ) {
        self.state.refusals.record_refusal(Refusal {
            kind,
            reason,
            tenant_id: self.claims.tenant_id.clone(),
            run_id: Some(self.claims.exec_id.clone()),
            request_id: Some(self.rid.0.clone()),
            host,
            rule,
            lease_id: None,
            dry_run,
            at: 0,
        });
    }

    fn policy(&self) -> Result<std::sync::Arc<gatehouse_egress::Policy>, gatehouse_egress::PolicyError> {
        self.state.policies.policy(self.claims.tenant_id.as_deref())
    }

    /// Records what the fetch came to and turns a refusal into the answer.
    fn finish<T>(
        &self,
        purpose: FetchPurpose,
        would_refuse: Vec<gatehouse_egress::fetch::FetchRefusal>,
        fetched: Result<T, gatehouse_egress::fetch::FetchRefusal>,
    ) -> Result<T, ApiError> {
        for dry in would_refuse {
            self.note(RefusalKind::EgressRefused, dry.reason, dry.host, dry.rule, true);
        }
        tracing::info!(
            request_id = %self.rid.0,
            run_id = %self.claims.exec_id,
            purpose = purpose.as_str(),
            allowed = fetched.is_ok(),
            "fetch"
        );
        match fetched {
            Ok(answer) => {
                self.state.metrics.record_fetch(purpose);
                Ok(answer)
            }
            Err(refusal) => {
                self.note(
                    gatehouse_egress::meter::door_refusal_kind(refusal.reason),
                    refusal.reason,
                    refusal.host,
                    refusal.rule,
                    false,
                );
                let code = match refusal.reason {
                    Reason::UpstreamUnreachable
                    | Reason::UpstreamTimeout
                    | Reason::TlsFailed
                    | Reason::UpstreamBadResponse
                    | Reason::ContentEncodingInvalid
                    | Reason::ResponseTooLarge => ErrorCode::BadGateway,
                    Reason::HeaderNotAllowed => ErrorCode::BadRequest,
                    r => r.refusal_code(),
                };
                Err(ApiError(PublicError::new(code, self.rid.0.clone()).with_reason(refusal.reason)))
            }
        }
    }
}

/// The upstream request's method and headers, checked.
fn fetch_request(
    rid: &RequestId,
    method: &str,
    url: String,
    headers: impl IntoIterator<Item = (String, String)>,
    purpose: FetchPurpose,
) -> Result<gatehouse_egress::fetch::FetchRequest, ApiError> {
    let method = http::Method::from_bytes(method.as_bytes())
        .map_err(|_| bad_request(rid, "method is not an HTTP method"))?;
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        let (Ok(name), Ok(value)) =
            (http::HeaderName::from_bytes(name.trim().as_bytes()), http::HeaderValue::from_str(value.trim()))
        else {
            return Err(bad_request(rid, "headers must be valid HTTP header names and values"));
        };
        map.append(name, value);
    }
    let purpose = match purpose {
        FetchPurpose::Webhook => gatehouse_egress::Purpose::Webhook,
        _ => gatehouse_egress::Purpose::Request,
    };
    Ok(gatehouse_egress::fetch::FetchRequest {
        method,
        url,
        headers: map,
        body: bytes::Bytes::new(),
        purpose,
        scrub: Default::default(),
        last_check: None,
    })
}

/// A request the platform makes on a run's behalf, through the door: the
/// run's grant is opened and spent, the tenant's policy and the address guard
/// decide every hop, and the upstream answer comes back whole (capped).
async fn egress_fetch(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    StrictJson(req): StrictJson<FetchBody>,
) -> Result<Json<Value>, ApiError> {
    use base64::Engine as _;
    let mut fetch = fetch_request(&rid, &req.method, req.url, req.headers, req.purpose)?;
    let run = RunFetch::start(&state, &rid, req.grant.as_deref(), &fetch).await?;
    if let Some(b) = &req.body_base64 {
        let body = base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|_| bad_request(&rid, "body_base64 is not base64"))?;
        fetch.body = body.into();
    }
    run.inject(&mut fetch, true).await?;
    if let Some(lease_id) = &req.sign_with {
        if req.purpose != FetchPurpose::Webhook || !is_valid_id(lease_id) {
            return Err(bad_request(&rid, "sign_with is a webhook signing lease id, for purpose webhook"));
        }
        run.sign(&mut fetch, lease_id).await?;
    }
    let policy = run.policy();
    let mut would_refuse = Vec::new();
    let fetched =
        run.fetcher.fetch_for_run(policy.as_deref(), fetch, Some(&run.meter), &mut would_refuse).await;
    let response = run.finish(req.purpose, would_refuse, fetched)?;
    let headers: Vec<(String, String)> = response
        .headers
        .iter()
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str().to_owned(), v.to_owned())))
        .collect();
    Ok(Json(json!({
        "status": response.status.as_u16(),
        "headers": headers,
        "body_base64": base64::engine::general_purpose::STANDARD.encode(&response.body),
        "redirects": response.redirects,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFetchQuery {
    url: String,
    #[serde(default = "default_method")]
    method: String,
    purpose: FetchPurpose,
}

/// The header that carries the run's grant on the raw route.
const RAW_GRANT_HEADER: &str = "x-gatehouse-grant";
/// Each header to send upstream, as `name: value` (repeated).
const RAW_FORWARD_HEADER: &str = "x-gatehouse-header";

/// `POST /v1/egress/fetch/raw`: the same fetch with the bodies streamed both
/// ways, never held whole. The request body is the upstream body; the
/// answer is the upstream's status, headers and body (decoded, capped, cut
/// off with the connection where a cap or the budget ends it), with
/// `x-gatehouse-redirects`. Headers of the upstream's own named
/// `x-gatehouse-*` are dropped, so a gatehouse refusal (which carries
/// `x-gatehouse-reason` and the JSON error) cannot be impersonated.
async fn egress_fetch_raw(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    query: Result<Query<RawFetchQuery>, QueryRejection>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let Ok(Query(q)) = query else {
        return Err(bad_request(&rid, "give url, purpose and optionally method in the query string"));
    };
    let headers = request.headers();
    let grant = headers.get(RAW_GRANT_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut forward = Vec::new();
    for value in headers.get_all(RAW_FORWARD_HEADER) {
        let pair = value.to_str().ok().and_then(|v| v.split_once(':'));
        let Some((name, value)) = pair else {
            return Err(bad_request(&rid, "x-gatehouse-header is `name: value`"));
        };
        forward.push((name.to_owned(), value.to_owned()));
    }
    let mut fetch = fetch_request(&rid, &q.method, q.url, forward, q.purpose)?;
    let run = RunFetch::start(&state, &rid, grant.as_deref(), &fetch).await?;
    let watch = run.inject(&mut fetch, false).await?;
    let body = match watch.is_empty() {
        true => gatehouse_egress::fetch::stream_body(request.into_body()),
        false => gatehouse_egress::fetch::stream_body(gatehouse_egress::leases::WatchedBody::new(
            request.into_body(),
            watch,
        )),
    };
    let policy = run.policy();
    let mut would_refuse = Vec::new();
    let fetched =
        run.fetcher.fetch_streamed(policy.as_deref(), fetch, body, &run.meter, &mut would_refuse).await;
    let answer = run.finish(q.purpose, would_refuse, fetched)?;
    let mut response = Response::new(axum::body::Body::new(answer.body));
    *response.status_mut() = answer.status;
    let out = response.headers_mut();
    for (name, value) in &answer.headers {
        if !name.as_str().starts_with("x-gatehouse-") {
            out.append(name.clone(), value.clone());
        }
    }
    out.insert("x-gatehouse-redirects", http::HeaderValue::from(u16::from(answer.redirects)));
    Ok(response)
}

/// Tenant and run ids from a query string follow the id rules.
fn check_ids(rid: &RequestId, ids: [&Option<String>; 2]) -> Result<(), ApiError> {
    if ids.into_iter().flatten().any(|id| !is_valid_id(id)) {
        return Err(bad_request(rid, "ids are 1-128 characters of [A-Za-z0-9._:-]"));
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScanQuery {
    pub(crate) tenant_id: Option<String>,
    pub(crate) run_id: Option<String>,
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
        return Err(bad_request(&rid, "the query may hold tenant_id and run_id only"));
    };
    check_ids(&rid, [&query.tenant_id, &query.run_id])?;
    let (tenant_id, run_id) = crate::control::scan_attachment(&state, &rid, &caller, query).await?;
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
        state.refusals.record_refusal(Refusal {
            kind: RefusalKind::ContentRefused,
            reason,
            tenant_id,
            run_id,
            request_id: Some(rid.0.clone()),
            host: None,
            rule: verdict.signature.clone(),
            lease_id: None,
            dry_run: false,
            at: 0,
        });
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

//! The HTTP edge: request ids, the safe error response (and the one
//! translation of the plane's errors into it), strict JSON bodies,
//! service-token authentication and the tenant gate.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt as _;
use gatehouse_core::{ErrorCode, PublicError, Reason, RefusalKind, is_valid_id, new_id};
use http::{HeaderValue, StatusCode, header};
use serde::de::DeserializeOwned;

use gatehouse_capability::Scope;
use gatehouse_plane::PlaneError;

use crate::state::AppState;

pub mod tenancy;

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The id of the request being served, in request extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// An error on its way to the caller. Converting it to a response is the
/// only way out, and that conversion emits only the safe public shape.
#[derive(Debug)]
pub struct ApiError(pub PublicError);

impl ApiError {
    /// An error with the code's default message.
    pub fn new(code: ErrorCode, request_id: &RequestId) -> Self {
        Self(PublicError::new(code, request_id.0.clone()))
    }
}

/// A `bad_request` with a fixed message.
pub fn bad_request(request_id: &RequestId, message: &'static str) -> ApiError {
    ApiError(PublicError::new(ErrorCode::BadRequest, request_id.0.clone()).with_message(message))
}

/// A plane error as the API answers it: its code, its reason and its
/// message, nothing else. A fault of gatehouse's own is logged here, with
/// the request id, and answered as a bare `internal`.
pub fn api_error(request_id: &RequestId, e: PlaneError) -> ApiError {
    if let PlaneError::Internal(code) = e {
        tracing::error!(request_id = %request_id.0, code, "internal error");
    }
    let mut error = PublicError::new(e.code(), request_id.0.clone());
    if let Some(reason) = e.reason() {
        error = error.with_reason(reason);
    }
    if let Some(message) = e.message() {
        error = error.with_message(message);
    }
    match e {
        PlaneError::RateLimited { retry_after_secs, .. } => error = error.with_retry_after(retry_after_secs),
        PlaneError::RefusedByPolicy { rule_reason, proposal_id, .. } => {
            error = error.with_rule_reason(rule_reason).with_proposal(proposal_id);
        }
        _ => {}
    }
    ApiError(error)
}

/// A plane operation's result as the API answers it.
pub trait Answer<T> {
    /// The value, or the error as [`api_error`] tells it.
    fn answer(self, request_id: &RequestId) -> Result<T, ApiError>;
}

impl<T> Answer<T> for Result<T, PlaneError> {
    fn answer(self, request_id: &RequestId) -> Result<T, ApiError> {
        self.map_err(|e| api_error(request_id, e))
    }
}

/// `code` with a refusal reason.
pub fn with_reason(code: ErrorCode, request_id: &RequestId, reason: Reason) -> ApiError {
    ApiError(PublicError::new(code, request_id.0.clone()).with_reason(reason))
}

impl IntoResponse for ApiError {
    /// The safe shape. A refusal (an error with a reason) also says whether
    /// it is retryable, in the body and in `x-gatehouse-reason` /
    /// `x-gatehouse-retryable` headers, as the proxy's refusals do: an agent
    /// reads them to stop retrying what will be refused again.
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = self.0.to_json();
        let Some(reason) = self.0.reason else { return (status, axum::Json(body)).into_response() };
        let retryable = self.0.code.retryable();
        if let Some(error) = body.get_mut("error").and_then(serde_json::Value::as_object_mut) {
            error.insert("retryable".into(), retryable.into());
        }
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert("x-gatehouse-reason", HeaderValue::from_static(reason.as_str()));
        headers.insert(
            "x-gatehouse-retryable",
            HeaderValue::from_static(if retryable { "true" } else { "false" }),
        );
        if let Some(secs) = self.0.retry_after_secs {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(value) = self.0.rule_reason_header().and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert("x-gatehouse-rule-reason", value);
        }
        if let Some(value) = self.0.proposal_id.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert("x-gatehouse-proposal", value);
        }
        response
    }
}

/// Outermost middleware: assigns the request id, logs one line per request,
/// enforces the timeout, and turns a panic into a safe 500 — so no stack
/// trace or panic message ever reaches a caller.
pub async fn request_context(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    // A caller-supplied id is kept only if it is a plain token: ids land in
    // log lines, and a newline or escape sequence there would forge entries.
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| is_valid_id(v))
        .map_or_else(|| new_id("req"), str::to_owned);
    let request_id = RequestId(id.clone());
    req.extensions_mut().insert(request_id.clone());
    let method = req.method().clone();
    // The route template, never the raw path or query: a confused client may
    // put a token in either, and tokens must not reach the log.
    let path = req.extensions().get::<MatchedPath>().map_or("<unmatched>", MatchedPath::as_str).to_owned();
    let started = Instant::now();

    let handler = AssertUnwindSafe(next.run(req)).catch_unwind();
    // A scan submission queues for its turn outside the limit (its handler
    // applies the limit from its turn on): a queue, not a refusal.
    let outcome = if queues_for_a_turn(&method, &path) {
        Ok(handler.await)
    } else {
        tokio::time::timeout(REQUEST_TIMEOUT, handler).await
    };
    let mut response = match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(_panic)) => {
            tracing::error!(request_id = %id, %method, %path, "handler panicked");
            ApiError::new(ErrorCode::Internal, &request_id).into_response()
        }
        Err(_) => {
            tracing::warn!(request_id = %id, %method, %path, "request timed out");
            ApiError::new(ErrorCode::Timeout, &request_id).into_response()
        }
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    let status = response.status().as_u16();
    state.metrics.record_response(status);
    tracing::info!(
        request_id = %id,
        %method,
        %path,
        status,
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "request"
    );
    response
}

pub use gatehouse_plane::Caller;

/// The routes a run's own grant may call as its credential (besides the
/// sandbox's file routes): asking for egress, and following an ask.
fn takes_a_grant(req: &Request) -> bool {
    let template = req.extensions().get::<MatchedPath>().map_or("", MatchedPath::as_str);
    matches!(
        (req.method(), template),
        (&http::Method::POST, "/v1/runs/{run_id}/egress-proposals")
            | (&http::Method::GET, "/v1/egress-proposals/{proposal_id}")
    )
}

/// The scope a `/v1` route needs, by its route template. Anything not
/// listed needs `admin`, the strictest, so a new route is closed until it
/// is given a scope here.
pub fn required_scope(template: &str) -> Scope {
    let path = template.strip_prefix("/v1").unwrap_or(template);
    match path {
        "/manifests/sign" => Scope::ManifestsSign,
        "/manifests/verify" => Scope::ManifestsVerify,
        "/grants" | "/grants/revoke" | "/grants/{grant_id}/revoke" => Scope::Grants,
        "/grants/open" | "/grants/consume" => Scope::Ledger,
        "/egress/fetch" | "/egress/fetch/raw" | "/content/scan" | "/content/scanner" => Scope::Egress,
        // Leases are part of a run's life: granted to it, renewed by its heartbeat.
        p if p == "/runs" || p.starts_with("/runs/") || p == "/leases" || p.starts_with("/leases/") => {
            Scope::Runs
        }
        p if p.contains("/credentials") => Scope::Credentials,
        // The platform stores its users' input files for their runs.
        p if p == "/files" || p.contains("/files/") => Scope::Runs,
        p if p.ends_with("/egress-policy")
            || p.ends_with("/mcp-servers")
            || p.ends_with("/dependency-gate")
            || p == "/egress-presets"
            || p.ends_with("/egress-proposals")
            || p.starts_with("/egress-proposals/") =>
        {
            Scope::Policies
        }
        // The worker's pass: it submits pull requests' scans and asks the gate.
        p if p.ends_with("/dependency-scans")
            || p.ends_with("/dependency-scans/{scan_id}")
            || p.ends_with("/gate-checks") =>
        {
            Scope::Runs
        }
        _ => Scope::Admin,
    }
}

/// Authenticates `/v1` calls: the internal service token (every scope) or a
/// named caller's token, which must carry the route's scope.
pub async fn require_service_token(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if state.service_token.is_none() && state.callers.is_empty() {
        req.extensions_mut().insert(Caller::unbound("anonymous"));
        return next.run(req).await;
    }
    let request_id = request_id_of(&req);
    let mut given = req.headers().get_all(header::AUTHORIZATION).iter();
    let (first, second) = (given.next(), given.next());
    let presented = first.and_then(|v| v.to_str().ok()).and_then(gatehouse_core::credentials::bearer_token);
    let reason = match presented {
        // Two credentials: refused, never a guess at which one counts.
        _ if second.is_some() => Reason::CredentialsAmbiguous,
        None => Reason::ServiceTokenMissing,
        Some(token) if state.service_token.as_ref().is_some_and(|t| t.verify(token)) => {
            req.extensions_mut().insert(Caller::unbound("service"));
            return next.run(req).await;
        }
        // A run's sandbox asking for egress, or following its ask, with its
        // own grant: a caller bound to that run.
        Some(token)
            if token.starts_with(gatehouse_capability::grant::GRANT_PREFIX) && takes_a_grant(&req) =>
        {
            let client = req.extensions().get::<gatehouse_listener::PeerAddr>().map(|p| p.0.ip());
            let bearer = gatehouse_plane::files::Bearer::Token(token);
            return match state.plane.file_grant(&request_id.0, bearer, client) {
                Ok(claims) => {
                    req.extensions_mut().insert(Caller::of_run(&claims));
                    next.run(req).await
                }
                Err(e) => api_error(&request_id, e).into_response(),
            };
        }
        Some(token) => match state.callers.identify(token) {
            None => Reason::ServiceTokenInvalid,
            Some(caller) => {
                let template = req.extensions().get::<MatchedPath>().map_or("", MatchedPath::as_str);
                let needed = required_scope(template);
                if caller.scopes().contains(&needed) {
                    let caller = Caller::named(caller);
                    // A caller bound to tenants passes only where the
                    // route's tenant rule lets it.
                    let mut req = match tenancy::gate(&state, &caller, req).await {
                        Ok(req) => req,
                        Err(refused) => return refused.into_response(),
                    };
                    req.extensions_mut().insert(caller);
                    return next.run(req).await;
                }
                tracing::warn!(request_id = %request_id.0, caller = caller.name(), scope = needed.as_str(),
                    "caller lacks the route's scope");
                state.plane.refusals.record(
                    RefusalKind::AuthRefused,
                    Reason::ScopeMissing,
                    None,
                    None,
                    Some(&request_id.0),
                );
                return ApiError(
                    PublicError::new(ErrorCode::Refused, request_id.0).with_reason(Reason::ScopeMissing),
                )
                .into_response();
            }
        },
    };
    // A caller who proved nothing: counted, never itemized (anyone can send these).
    let client = req.extensions().get::<gatehouse_listener::PeerAddr>().map(|p| p.0.ip());
    state.plane.refusals.record_unauthenticated(
        "api",
        client,
        RefusalKind::AuthRefused,
        reason,
        Some(&request_id.0),
    );
    let mut response =
        ApiError(PublicError::new(ErrorCode::Unauthorized, request_id.0).with_reason(reason)).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Whether a route's requests queue for a turn outside the request timeout
/// (a dependency scan's submission; its handler applies the limit from its
/// turn on).
pub fn queues_for_a_turn(method: &http::Method, route: &str) -> bool {
    method == http::Method::POST && route.ends_with("/tenants/{tenant_id}/dependency-scans")
}

/// The header a record read's answer says whether it is complete in.
pub const RECORD_COMPLETE: &str = "x-gatehouse-record-complete";

/// The answer of a read of the record (refusals, run events, audit), with
/// [`RECORD_COMPLETE`]: `true` when every event this node had queued before
/// the read was in the store, `false` when the read did not wait for them
/// all (read again to see them).
pub fn record_answer(rid: &RequestId, complete: bool, body: serde_json::Value) -> Response {
    if !complete {
        tracing::warn!(request_id = %rid.0, "a record read did not wait for every queued event");
    }
    let mut response = axum::Json(body).into_response();
    response
        .headers_mut()
        .insert(RECORD_COMPLETE, HeaderValue::from_static(if complete { "true" } else { "false" }));
    response
}

/// The request id set by [`request_context`].
pub fn request_id_of<B>(req: &http::Request<B>) -> RequestId {
    req.extensions().get::<RequestId>().cloned().unwrap_or_else(|| RequestId(new_id("req")))
}

/// A JSON body parsed strictly: `application/json` only, size-capped, an
/// object (never an array or a scalar), duplicate keys refused (a body two parsers read differently is an attack
/// on whatever signs or checks it), and every failure mapped to the safe
/// error shape with no fragment of the input echoed back.
pub struct StrictJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for StrictJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let request_id = request_id_of(&req);
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::new(ErrorCode::UnsupportedMediaType, &request_id));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            let code = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ErrorCode::PayloadTooLarge
            } else {
                ErrorCode::BadRequest
            };
            ApiError::new(code, &request_id)
        })?;
        let value = gatehouse_capability::canonical::parse_strict(&bytes).map_err(|e| {
            tracing::debug!(request_id = %request_id.0, error = %e, "rejected request body");
            ApiError::new(ErrorCode::InvalidJson, &request_id)
        })?;
        let mut value = value;
        integral_numbers(&mut value);
        // Every body this API takes is an object: a derived `Deserialize`
        // would also read a struct from an array (`[]`, `[null, null]`).
        if !value.is_object() {
            return Err(bad_request(&request_id, "the request body must be a JSON object"));
        }
        T::deserialize(value).map(StrictJson).map_err(|_| {
            ApiError(
                PublicError::new(ErrorCode::BadRequest, request_id.0.clone())
                    .with_message("the request body does not match the expected shape"),
            )
        })
    }
}

/// Numbers written with a fraction or an exponent whose value is an integer
/// within ±(2^53-1) (`2.0`, `1e3`) become that integer: JSON has one number
/// type, JSON Schema's `integer` is any number without a fractional part,
/// and RFC 8785 writes both forms alike, so a count or an id given as `2.0`
/// means 2 here too (and a body's digest is the same either way).
fn integral_numbers(value: &mut serde_json::Value) {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    match value {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() <= MAX_SAFE
            {
                // Exact: an integral f64 within ±2^53-1 converts without loss.
                let integer = f as i64;
                *value = serde_json::Value::from(integer);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(integral_numbers),
        _ => {}
    }
}

/// A field that is a JSON object, read as `T`, for `#[serde(deserialize_with)]`:
/// a derived `Deserialize` also reads a struct (and an internally tagged
/// enum) from an array, which this API never takes for one.
pub(crate) fn object<'de, D: serde::Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    use serde::Deserialize as _;
    let value = serde_json::Value::deserialize(d)?;
    if !value.is_object() {
        return Err(serde::de::Error::custom("expected a JSON object"));
    }
    T::deserialize(value).map_err(serde::de::Error::custom)
}

/// [`object`] for an optional field: `null` or absent is `None`.
pub(crate) fn optional_object<'de, D: serde::Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    use serde::Deserialize as _;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        value => object(value).map(Some).map_err(serde::de::Error::custom),
    }
}

/// [`object`] for each element of a list.
pub(crate) fn objects<'de, D: serde::Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    use serde::Deserialize as _;
    Vec::<serde_json::Value>::deserialize(d)?
        .into_iter()
        .map(|value| object(value).map_err(serde::de::Error::custom))
        .collect()
}

/// Fallback for unknown routes.
pub async fn not_found(req: Request<Body>) -> ApiError {
    ApiError::new(ErrorCode::NotFound, &request_id_of(&req))
}

/// Fallback for known routes with the wrong method.
pub async fn method_not_allowed(req: Request<Body>) -> ApiError {
    ApiError::new(ErrorCode::MethodNotAllowed, &request_id_of(&req))
}

//! `/v1/egress/fetch`: the door for requests the platform makes on a run's
//! behalf (JSON, or raw with a streamed body), spending from the run's
//! grant, under its tenant's policy, with its leases injected and their
//! secrets scrubbed from the answer.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::response::Response;
use gatehouse_core::is_valid_id;
use gatehouse_egress::run_fetch::{DoorError, FetchDoor, RunFetch};
use gatehouse_plane::PlaneError;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RouteTable, forbidden};
use crate::http::{ApiError, RequestId, StrictJson, api_error, bad_request};
use crate::metrics::FetchPurpose;
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::post;
    table.route("/egress/fetch", post(egress_fetch)).route("/egress/fetch/raw", post(egress_fetch_raw))
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

pub(super) fn default_method() -> String {
    "GET".into()
}

/// A door error as the API answers it (the plane's one mapping).
fn door_error(rid: &RequestId, e: DoorError) -> ApiError {
    api_error(rid, PlaneError::from(e))
}

/// The door, on nodes that carry runs' traffic.
fn door<'a>(state: &'a AppState, rid: &RequestId) -> Result<&'a FetchDoor, ApiError> {
    state.plane.fetch_door.as_deref().ok_or_else(|| forbidden(rid))
}

/// One line per fetch, and the count by purpose of those let through.
fn counted<T>(
    state: &AppState,
    rid: &RequestId,
    run: &RunFetch<'_>,
    purpose: FetchPurpose,
    fetched: Result<T, DoorError>,
) -> Result<T, ApiError> {
    tracing::info!(request_id = %rid.0, run_id = %run.run_id(), purpose = purpose.as_str(),
        allowed = fetched.is_ok(), "fetch");
    let answer = fetched.map_err(|e| door_error(rid, e))?;
    state.metrics.record_fetch(purpose);
    Ok(answer)
}

/// How the door treats a fetch of `purpose`: a webhook delivery, or an
/// ordinary request.
fn door_purpose(purpose: FetchPurpose) -> gatehouse_egress::Purpose {
    match purpose {
        FetchPurpose::Webhook => gatehouse_egress::Purpose::Webhook,
        _ => gatehouse_egress::Purpose::Request,
    }
}

/// The upstream request's method and headers, checked.
pub(super) fn fetch_request(
    rid: &RequestId,
    method: &str,
    url: String,
    headers: impl IntoIterator<Item = (String, String)>,
    purpose: gatehouse_egress::Purpose,
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
    let mut fetch = fetch_request(&rid, &req.method, req.url, req.headers, door_purpose(req.purpose))?;
    let run = door(&state, &rid)?
        .start(&rid.0, req.grant.as_deref(), &fetch)
        .await
        .map_err(|e| door_error(&rid, e))?;
    fetch.body = decoded_body(&rid, req.body_base64.as_deref())?;
    run.inject(&mut fetch, true).await.map_err(|e| door_error(&rid, e))?;
    if let Some(lease_id) = &req.sign_with {
        if req.purpose != FetchPurpose::Webhook || !is_valid_id(lease_id) {
            return Err(bad_request(&rid, "sign_with is a webhook signing lease id, for purpose webhook"));
        }
        run.sign(&mut fetch, lease_id).await.map_err(|e| door_error(&rid, e))?;
    }
    let fetched = run.fetch(fetch).await;
    let response = counted(&state, &rid, &run, req.purpose, fetched)?;
    Ok(Json(fetch_answer(&response)))
}

/// An upstream answer as the fetch API gives it.
pub(super) fn fetch_answer(response: &gatehouse_egress::fetch::FetchResponse) -> Value {
    use base64::Engine as _;
    let headers: Vec<(String, String)> = response
        .headers
        .iter()
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str().to_owned(), v.to_owned())))
        .collect();
    json!({
        "status": response.status.as_u16(),
        "headers": headers,
        "body_base64": base64::engine::general_purpose::STANDARD.encode(&response.body),
        "redirects": response.redirects,
    })
}

/// A request body's `body_base64`, decoded.
pub(super) fn decoded_body(rid: &RequestId, body_base64: Option<&str>) -> Result<bytes::Bytes, ApiError> {
    use base64::Engine as _;
    let Some(b) = body_base64 else { return Ok(bytes::Bytes::new()) };
    base64::engine::general_purpose::STANDARD
        .decode(b)
        .map(bytes::Bytes::from)
        .map_err(|_| bad_request(rid, "body_base64 is not base64"))
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
    let mut fetch = fetch_request(&rid, &q.method, q.url, forward, door_purpose(q.purpose))?;
    let run =
        door(&state, &rid)?.start(&rid.0, grant.as_deref(), &fetch).await.map_err(|e| door_error(&rid, e))?;
    if run.reads_as_mcp(&fetch.url) {
        // A message to a declared MCP server is read whole and judged, the
        // answer narrowed whole: the fetch API's own path.
        let limit = gatehouse_egress::mcp_door::MAX_MESSAGE_BYTES + 1;
        fetch.body = axum::body::to_bytes(request.into_body(), limit)
            .await
            .map_err(|_| ApiError::new(gatehouse_core::ErrorCode::PayloadTooLarge, &rid))?;
        run.inject(&mut fetch, true).await.map_err(|e| door_error(&rid, e))?;
        let fetched = run.fetch(fetch).await;
        let answer = counted(&state, &rid, &run, q.purpose, fetched)?;
        return Ok(raw_answer(
            answer.status,
            &answer.headers,
            axum::body::Body::from(answer.body),
            answer.redirects,
        ));
    }
    let watch = run.inject(&mut fetch, false).await.map_err(|e| door_error(&rid, e))?;
    let body = match watch.is_empty() {
        true => gatehouse_egress::fetch::stream_body(request.into_body()),
        false => gatehouse_egress::fetch::stream_body(gatehouse_egress::leases::WatchedBody::new(
            request.into_body(),
            watch,
        )),
    };
    let fetched = run.fetch_streamed(fetch, body).await;
    let answer = counted(&state, &rid, &run, q.purpose, fetched)?;
    Ok(raw_answer(answer.status, &answer.headers, axum::body::Body::new(answer.body), answer.redirects))
}

/// An upstream answer as the raw route gives it: the upstream's status,
/// headers (none of gatehouse's own names) and body, and the redirects
/// followed.
fn raw_answer(
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: axum::body::Body,
    redirects: u8,
) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let out = response.headers_mut();
    for (name, value) in headers {
        if !name.as_str().starts_with("x-gatehouse-") {
            out.append(name.clone(), value.clone());
        }
    }
    out.insert("x-gatehouse-redirects", http::HeaderValue::from(u16::from(redirects)));
    response
}

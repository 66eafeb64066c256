//! `/v1/tenants/{t}/credentials` and `/v1/…/leases`: credentials (their
//! secrets sealed at once, never answered) and the leases runs hold on them.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use gatehouse_core::is_valid_id;
use gatehouse_egress::inject::placeholder_for;
use gatehouse_plane::credential_use::PersonRequest;
use gatehouse_plane::credentials::{InjectSpec, NewCredential, stored_delivery};
use gatehouse_store::{Credential, Lease, LeaseFilter, LeaseStatus, Page};
use http::StatusCode;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::{RouteTable, list_json, page, path_id};
use crate::http::{Answer as _, ApiError, Caller, RequestId, StrictJson, bad_request};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::{get, post, put};
    table
        .route("/runs/{run_id}/leases", post(grant_lease))
        .route("/leases", get(list_leases))
        .route("/leases/{lease_id}/revoke", post(revoke_lease))
        .route("/tenants/{tenant_id}/credentials", post(create_credential).get(list_credentials))
        .route(
            "/tenants/{tenant_id}/credentials/{credential_id}",
            get(get_credential).delete(delete_credential),
        )
        .route("/tenants/{tenant_id}/credentials/{credential_id}/secret", put(rotate_credential))
        .route("/tenants/{tenant_id}/credentials/{credential_id}/fetch", post(use_credential))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PersonFetch {
    /// Who acted: `person:NAME`.
    actor: String,
    #[serde(default = "super::egress::default_method")]
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body_base64: Option<String>,
}

/// `POST /v1/tenants/{t}/credentials/{id}/fetch`: a person's own request
/// with a stored credential, made by the door (gateway and `all` roles:
/// where credentials open), answered as the fetch API answers.
async fn use_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String)>, PathRejection>,
    StrictJson(req): StrictJson<PersonFetch>,
) -> Result<Json<Value>, ApiError> {
    let (tenant_id, credential_id) = credential_path(path, &rid)?;
    let mut fetch = super::egress::fetch_request(
        &rid,
        &req.method,
        req.url,
        req.headers,
        gatehouse_egress::Purpose::Request,
    )?;
    fetch.body = super::egress::decoded_body(&rid, req.body_base64.as_deref())?;
    let person =
        PersonRequest { tenant_id: &tenant_id, credential_id: &credential_id, actor: &req.actor, fetch };
    let answer = state.plane.use_credential(&rid.0, &caller, person).await.answer(&rid)?;
    Ok(Json(super::egress::fetch_answer(&answer)))
}

/// A secret as a caller sends it: wiped when dropped, never printed.
struct SecretText(Zeroizing<String>);

impl<'de> Deserialize<'de> for SecretText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| Self(Zeroizing::new(s)))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateCredential {
    name: String,
    purpose: String,
    host: String,
    #[serde(default, deserialize_with = "crate::http::optional_object")]
    inject: Option<InjectSpec>,
    #[serde(default)]
    allow_plain_http: bool,
    secret: SecretText,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RotateSecret {
    secret: SecretText,
}

/// What a response says of a credential: never its secret or sealed form.
fn credential_json(c: &Credential) -> Value {
    let delivery = stored_delivery(&c.inject);
    json!({
        "credential_id": c.credential_id,
        "tenant_id": c.tenant_id,
        "name": c.name,
        "purpose": c.purpose,
        "host": c.host,
        "inject": delivery.as_ref().map_or(Value::Null, |(spec, _)| spec.stored()),
        "allow_plain_http": delivery.is_some_and(|(_, allowed)| allowed),
        "fingerprint": c.fingerprint,
        "key_id": c.key_id,
        "version": c.version,
        "created_at": c.created_at,
        "updated_at": c.updated_at,
    })
}

/// What a response says of a lease, its placeholder included (the
/// placeholder is not a secret: it works only for its own run, toward its
/// own host).
pub(super) fn lease_json(l: &Lease) -> Value {
    let mut v = serde_json::to_value(l).unwrap_or_default();
    if let (Some(obj), Some(placeholder)) = (v.as_object_mut(), placeholder_for(&l.lease_id)) {
        obj.insert("placeholder".into(), placeholder.into());
    }
    v
}

/// The tenant and credential ids of a credential route.
fn credential_path(
    path: Result<Path<(String, String)>, PathRejection>,
    rid: &RequestId,
) -> Result<(String, String), ApiError> {
    match path {
        Ok(Path((t, c))) if is_valid_id(&t) && is_valid_id(&c) => Ok((t, c)),
        _ => Err(bad_request(rid, gatehouse_plane::ID_RULE)),
    }
}

/// Only the worker (and `all`) keeps credentials: its routes answer
/// `forbidden` elsewhere before reading anything of the request.
fn serving(state: &AppState, rid: &RequestId) -> Result<(), ApiError> {
    state.plane.keeps_credentials().answer(rid)
}

async fn create_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<CreateCredential>,
) -> Result<Response, ApiError> {
    serving(&state, &rid)?;
    let tenant_id = path_id(path, &rid)?;
    let new = NewCredential {
        name: req.name,
        purpose: req.purpose,
        host: req.host,
        inject: req.inject,
        allow_plain_http: req.allow_plain_http,
        secret: req.secret.0,
    };
    let created = state.plane.create_credential(&rid.0, tenant_id, new, &caller.name).await.answer(&rid)?;
    Ok((StatusCode::CREATED, Json(credential_json(&created))).into_response())
}

async fn get_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let (tenant_id, credential_id) = credential_path(path, &rid)?;
    let credential = state.plane.credential(&tenant_id, &credential_id).await.answer(&rid)?;
    Ok(Json(credential_json(&credential)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

async fn list_credentials(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let tenant_id = path_id(path, &rid)?;
    let Ok(Query(q)) = query else {
        return Err(bad_request(&rid, "the query may hold limit and cursor only"));
    };
    let page = page(&rid, q.limit, q.cursor)?;
    let listed = state.plane.credentials(&tenant_id, &page).await.answer(&rid)?;
    Ok(Json(json!({
        "items": listed.items.iter().map(credential_json).collect::<Vec<_>>(),
        "next_cursor": listed.next_cursor,
    })))
}

/// `PUT .../credentials/{id}/secret`: a new secret, one version up.
async fn rotate_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String)>, PathRejection>,
    StrictJson(req): StrictJson<RotateSecret>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let (tenant_id, credential_id) = credential_path(path, &rid)?;
    let rotated = state
        .plane
        .rotate_credential(&rid.0, &tenant_id, &credential_id, &req.secret.0, &caller.name)
        .await
        .answer(&rid)?;
    Ok(Json(credential_json(&rotated)))
}

async fn delete_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let (tenant_id, credential_id) = credential_path(path, &rid)?;
    let revoked =
        state.plane.delete_credential(&tenant_id, &credential_id, &caller.name).await.answer(&rid)?;
    Ok(Json(json!({"deleted": true, "revoked": {"leases": revoked}})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantLease {
    credential_id: String,
    purpose: String,
    host: String,
}

/// `POST /v1/runs/{id}/leases`.
async fn grant_lease(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<GrantLease>,
) -> Result<Response, ApiError> {
    serving(&state, &rid)?;
    let run_id = path_id(path, &rid)?;
    let lease = state
        .plane
        .grant_lease(run_id, req.credential_id, req.purpose, &req.host, &caller.name)
        .await
        .answer(&rid)?;
    Ok((StatusCode::CREATED, Json(lease_json(&lease))).into_response())
}

/// `POST /v1/leases/{id}/revoke`.
async fn revoke_lease(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let lease_id = path_id(path, &rid)?;
    let revoked = state.plane.revoke_lease(&lease_id, &caller.name).await.answer(&rid)?;
    Ok(Json(json!({"revoked": revoked})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeasesQuery {
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    credential_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

/// `GET /v1/leases`.
async fn list_leases(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<LeasesQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let Ok(Query(q)) = query else {
        return Err(bad_request(
            &rid,
            "the query may hold tenant_id, run_id, credential_id, status, limit and cursor only",
        ));
    };
    let ids = [&q.tenant_id, &q.run_id, &q.credential_id];
    if ids.into_iter().flatten().any(|id| !is_valid_id(id)) {
        return Err(bad_request(&rid, gatehouse_plane::ID_RULE));
    }
    let status = match q.status.as_deref().map(LeaseStatus::parse) {
        None => None,
        Some(Some(s)) => Some(s),
        Some(None) => return Err(bad_request(&rid, "status is live, expired or revoked")),
    };
    let page = page(&rid, q.limit, q.cursor)?;
    let filter =
        LeaseFilter { tenant_id: q.tenant_id, run_id: q.run_id, status, credential_id: q.credential_id };
    let listed = state.plane.list_leases(&rid.0, &caller, filter, &page).await.answer(&rid)?;
    let items: Vec<Value> = listed.items.iter().map(lease_json).collect();
    Ok(list_json(Page { items, next_cursor: listed.next_cursor }))
}

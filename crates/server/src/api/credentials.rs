//! `/v1/tenants/{t}/credentials` and `/v1/…/leases`: credentials (their
//! secrets sealed at once, never answered) and the leases runs hold on them.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use gatehouse_core::is_valid_id;
use gatehouse_egress::inject::placeholder_for;
use gatehouse_plane::credential_use::PersonRequest;
use std::collections::BTreeMap;

use gatehouse_capability::sigv4::Scope;
use gatehouse_plane::credential_kinds::{self, Kind, Material, OAuthSecrets, Stored};
use gatehouse_plane::credentials::{InjectSpec, NewCredential};
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

/// `POST .../credentials`: the fields every kind has, then each kind's
/// own (see [`CreateCredential::into_new`]: a field of another kind is
/// refused, never ignored).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateCredential {
    name: String,
    purpose: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default, deserialize_with = "crate::http::optional_object")]
    inject: Option<InjectSpec>,
    #[serde(default)]
    allow_plain_http: bool,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    hosts: Option<Vec<String>>,
    // static
    #[serde(default)]
    secret: Option<SecretText>,
    // github_app
    #[serde(default)]
    app_id: Option<u64>,
    #[serde(default)]
    installation_id: Option<u64>,
    #[serde(default)]
    private_key: Option<SecretText>,
    #[serde(default)]
    api_url: Option<String>,
    #[serde(default)]
    repositories: Option<Vec<String>>,
    #[serde(default)]
    permissions: Option<BTreeMap<String, String>>,
    // oauth2_refresh
    #[serde(default)]
    token_url: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    client_secret: Option<SecretText>,
    #[serde(default)]
    refresh_token: Option<SecretText>,
    #[serde(default)]
    scope: Option<String>,
    // aws_sigv4
    #[serde(default)]
    access_key_id: Option<String>,
    #[serde(default)]
    secret_access_key: Option<SecretText>,
    #[serde(default)]
    session_token: Option<SecretText>,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    service: Option<String>,
}

impl CreateCredential {
    /// The credential the request describes, its kind's fields checked:
    /// required ones present, other kinds' absent. The error is the caller's.
    fn into_new(self) -> Result<NewCredential, &'static str> {
        let kind = self.kind.as_deref().unwrap_or("static");
        let present = |fields: &[(&'static str, bool)], allowed: &[&str]| {
            fields.iter().find(|(name, set)| *set && !allowed.contains(name)).map(|(name, _)| *name)
        };
        let fields = [
            ("host", self.host.is_some()),
            ("hosts", self.hosts.is_some()),
            ("secret", self.secret.is_some()),
            ("app_id", self.app_id.is_some()),
            ("installation_id", self.installation_id.is_some()),
            ("private_key", self.private_key.is_some()),
            ("api_url", self.api_url.is_some()),
            ("repositories", self.repositories.is_some()),
            ("permissions", self.permissions.is_some()),
            ("token_url", self.token_url.is_some()),
            ("client_id", self.client_id.is_some()),
            ("client_secret", self.client_secret.is_some()),
            ("refresh_token", self.refresh_token.is_some()),
            ("scope", self.scope.is_some()),
            ("access_key_id", self.access_key_id.is_some()),
            ("secret_access_key", self.secret_access_key.is_some()),
            ("session_token", self.session_token.is_some()),
            ("region", self.region.is_some()),
            ("service", self.service.is_some()),
        ];
        let allowed = credential_kinds::fields_of(kind)
            .ok_or("kind is static, github_app, oauth2_refresh or aws_sigv4")?;
        if present(&fields, allowed).is_some() {
            return Err(match kind {
                "static" => "a static credential has host and secret (and inject, allow_plain_http)",
                "github_app" => {
                    "a github_app credential has app_id, installation_id, private_key, hosts, and optionally api_url, repositories, permissions, inject"
                }
                "oauth2_refresh" => {
                    "an oauth2_refresh credential has token_url, client_id, refresh_token, host, and optionally client_secret, scope, inject"
                }
                _ => {
                    "an aws_sigv4 credential has access_key_id, secret_access_key, region, service, hosts, and optionally session_token"
                }
            });
        }
        let missing = "a field this kind requires is missing";
        let plain = self.allow_plain_http;
        let (hosts, kind, material) = match kind {
            "static" => (
                vec![self.host.ok_or(missing)?],
                Kind::Static,
                Material::Static(self.secret.ok_or(missing)?.0),
            ),
            "github_app" => {
                let app = credential_kinds::github_app(
                    self.app_id.ok_or(missing)?,
                    self.installation_id.ok_or(missing)?,
                    self.api_url.as_deref(),
                    self.repositories,
                    self.permissions,
                    plain,
                )?;
                (
                    self.hosts.ok_or(missing)?,
                    Kind::GithubApp(app),
                    Material::GithubApp(self.private_key.ok_or(missing)?.0),
                )
            }
            "oauth2_refresh" => {
                let oauth = credential_kinds::oauth2_refresh(
                    &self.token_url.ok_or(missing)?,
                    self.client_id.ok_or(missing)?,
                    self.scope,
                    plain,
                )?;
                let secrets = OAuthSecrets {
                    refresh_token: self.refresh_token.ok_or(missing)?.0,
                    client_secret: self.client_secret.map(|s| s.0),
                };
                (
                    vec![self.host.ok_or(missing)?],
                    Kind::OAuth2Refresh(oauth),
                    Material::OAuth2Refresh(secrets),
                )
            }
            _ => {
                let scope = Scope::new(&self.region.ok_or(missing)?, &self.service.ok_or(missing)?)?;
                let material = Material::AwsSigV4 {
                    access_key_id: self.access_key_id.ok_or(missing)?,
                    secret_access_key: self.secret_access_key.ok_or(missing)?.0,
                    session_token: self.session_token.map(|s| s.0),
                };
                (self.hosts.ok_or(missing)?, Kind::AwsSigV4(scope), material)
            }
        };
        Ok(NewCredential {
            name: self.name,
            purpose: self.purpose,
            hosts,
            kind,
            inject: self.inject,
            allow_plain_http: plain,
            material,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RotateSecret {
    secret: SecretText,
}

/// What a response says of a credential: never its secret or sealed form.
fn credential_json(c: &Credential) -> Value {
    let stored = Stored::read(&c.inject);
    let hosts: Vec<&str> = c.hosts().collect();
    json!({
        "credential_id": c.credential_id,
        "tenant_id": c.tenant_id,
        "name": c.name,
        "purpose": c.purpose,
        "kind": stored.as_ref().map(|s| s.kind.name()),
        "host": hosts.first(),
        "hosts": hosts,
        "params": stored.as_ref().map_or(Value::Null, Stored::shown),
        "inject": stored.as_ref().and_then(|s| s.inject.as_ref()).map_or(Value::Null, InjectSpec::stored),
        "allow_plain_http": stored.as_ref().is_some_and(|s| s.allow_plain_http),
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
    let new = req.into_new().map_err(|message| bad_request(&rid, message))?;
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

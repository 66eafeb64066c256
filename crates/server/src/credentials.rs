//! Credentials and the leases runs hold on them (worker and `all` roles).
//!
//! A credential's secret arrives once, is sealed at once to the gateway
//! role's public key (HPKE, bound to tenant, id and version) and is never
//! answered, listed, logged or stored in clear: responses carry a keyed
//! fingerprint. The worker cannot open what it stored.
//!
//! A lease binds one live run to one credential, its purpose and its one
//! host for two minutes, renewed by the run's heartbeat. Every change to a
//! run's leases bumps its grant's lease generation in the ledger before the
//! call returns; every node's door reads the generation with the run's next
//! spend and re-reads the leases when it moved, so a revocation on one node
//! stops injection on all of them at their next request.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use gatehouse_capability::credential::{CredentialContext, CredentialSecret, seal};
use gatehouse_core::{ErrorCode, Reason, is_valid_id, new_id};
use gatehouse_egress::inject::{InjectRule, placeholder_for};
use gatehouse_egress::target::parse_authority;
use gatehouse_ledger::LedgerBackend as _;
use gatehouse_store::{Credential, Lease, LeaseFilter, LeaseStatus, NewEvent, NewLease, Resealed};
use http::StatusCode;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::control::{list_json, page, path_id, store, store_error};
use crate::http::{ApiError, Caller, RequestId, StrictJson, bad_request, with_reason};
use crate::state::AppState;

/// What a credential may be for.
pub const PURPOSES: [&str; 4] = ["git_provider", "mcp_server", "runtime_secret", "webhook_signing"];

/// A secret as a caller sends it: wiped when dropped, never printed.
struct SecretText(Zeroizing<String>);

impl<'de> Deserialize<'de> for SecretText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| Self(Zeroizing::new(s)))
    }
}

/// `{"header", "format"}` or `{"basic_username"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InjectSpec {
    #[serde(default)]
    header: Option<String>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    basic_username: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateCredential {
    name: String,
    purpose: String,
    host: String,
    #[serde(default, deserialize_with = "crate::http::optional_object")]
    inject: Option<InjectSpec>,
    /// The secret may go over plain `http://` (a test server, an internal
    /// host); by default it is injected over TLS only.
    #[serde(default)]
    allow_plain_http: bool,
    secret: SecretText,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateSecret {
    secret: SecretText,
}

/// How a stored credential is sent (its `inject` column, JSON text): the
/// rule it reads back as, and whether plain HTTP is allowed.
pub fn delivery(stored: &str) -> Option<(InjectRule, bool)> {
    let (spec, allow_plain_http) = stored_delivery(stored)?;
    Some((spec.rule().ok()?, allow_plain_http))
}

fn stored_delivery(stored: &str) -> Option<(InjectSpec, bool)> {
    let mut fields: serde_json::Map<String, Value> = serde_json::from_str(stored).ok()?;
    let allow_plain_http = match fields.remove("allow_plain_http") {
        None => false,
        Some(Value::Bool(allowed)) => allowed,
        Some(_) => return None,
    };
    Some((serde_json::from_value(Value::Object(fields)).ok()?, allow_plain_http))
}

const INJECT_SHAPE: &str = "inject is {\"header\", \"format\"} or {\"basic_username\"}";

impl InjectSpec {
    /// The rule the spec gives, checked; the reason for the caller otherwise.
    fn rule(&self) -> Result<InjectRule, &'static str> {
        match (&self.header, &self.format, &self.basic_username) {
            (Some(header), Some(format), None) => InjectRule::header(header, format),
            (None, None, Some(username)) => InjectRule::basic(username),
            _ => Err(INJECT_SHAPE),
        }
    }

    /// Its stored form: the fields given, nothing else.
    fn stored(&self) -> Value {
        match (&self.header, &self.format, &self.basic_username) {
            (Some(header), Some(format), _) => json!({"header": header, "format": format}),
            (_, _, Some(username)) => json!({"basic_username": username}),
            _ => json!({}),
        }
    }
}

/// A host as leases and the door compare it: lowercase ASCII (IDNA), no
/// trailing dot, no port.
pub fn normalized_host(host: &str) -> Result<String, Reason> {
    match parse_authority(host)? {
        (host, None) => Ok(host.to_string()),
        (_, Some(_)) => Err(Reason::PortInvalid),
    }
}

/// A purpose and a host as a caller gives them, checked; the host
/// normalized (`GitHub.com.` is `github.com`), as leases compare it.
fn purpose_and_host(rid: &RequestId, purpose: &str, host: &str) -> Result<String, ApiError> {
    if !PURPOSES.contains(&purpose) {
        return Err(bad_request(
            rid,
            "purpose is git_provider, mcp_server, runtime_secret or webhook_signing",
        ));
    }
    normalized_host(host)
        .map_err(|_| bad_request(rid, "host is one host name or address, without scheme, port or path"))
}

/// What a response says of a credential: never its secret or sealed form.
fn credential_json(c: &Credential) -> Value {
    json!({
        "credential_id": c.credential_id,
        "tenant_id": c.tenant_id,
        "name": c.name,
        "purpose": c.purpose,
        "host": c.host,
        "inject": stored_delivery(&c.inject).map_or(Value::Null, |(spec, _)| spec.stored()),
        "allow_plain_http": stored_delivery(&c.inject).is_some_and(|(_, allowed)| allowed),
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
pub fn lease_json(l: &Lease) -> Value {
    let mut v = serde_json::to_value(l).unwrap_or_default();
    if let (Some(obj), Some(placeholder)) = (v.as_object_mut(), placeholder_for(&l.lease_id)) {
        obj.insert("placeholder".into(), placeholder.into());
    }
    v
}

/// Only the worker (and `all`) keeps credentials and grants leases.
fn serving(state: &AppState, rid: &RequestId) -> Result<(), ApiError> {
    if state.role.mints() { Ok(()) } else { Err(ApiError::new(ErrorCode::Forbidden, rid)) }
}

fn credential_secret(rid: &RequestId, text: &SecretText) -> Result<CredentialSecret, ApiError> {
    CredentialSecret::new(&text.0)
        .map_err(|_| bad_request(rid, "secret must be 1-4096 bytes without control characters"))
}

/// Seals `secret` for the credential row `context` names (its facts bound
/// in), with its fingerprint.
fn sealed_for(
    state: &AppState,
    rid: &RequestId,
    context: &CredentialContext<'_>,
    secret: &CredentialSecret,
) -> Result<(String, String, String), ApiError> {
    let (Some(public), Some(fingerprints)) =
        (state.credential_public_key.as_ref(), state.fingerprints.as_ref())
    else {
        return Err(ApiError::new(ErrorCode::Forbidden, rid));
    };
    let sealed = seal(public, secret, context).map_err(|e| {
        tracing::error!(request_id = %rid.0, code = e.code(), "a credential could not be sealed");
        ApiError::new(ErrorCode::Internal, rid)
    })?;
    Ok((sealed.as_str().to_owned(), public.kid().to_owned(), fingerprints.fingerprint(secret)))
}

pub(crate) async fn create_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<CreateCredential>,
) -> Result<Response, ApiError> {
    serving(&state, &rid)?;
    let tenant_id = path_id(path, &rid)?;
    let store = store(&state, &rid)?;
    if req.name.is_empty() || req.name.chars().count() > 128 || req.name.chars().any(char::is_control) {
        return Err(bad_request(&rid, "name is 1-128 characters without control characters"));
    }
    let host = purpose_and_host(&rid, &req.purpose, &req.host)?;
    // A webhook signing secret signs deliveries; it is never sent as a header.
    let inject = match (req.purpose.as_str(), req.inject) {
        ("webhook_signing", None) => json!({}),
        ("webhook_signing", Some(_)) => {
            return Err(bad_request(
                &rid,
                "a webhook_signing credential signs deliveries and takes no inject rule",
            ));
        }
        (_, None) => return Err(bad_request(&rid, INJECT_SHAPE)),
        (_, Some(spec)) => {
            spec.rule().map_err(|why| bad_request(&rid, why))?;
            let mut stored = spec.stored();
            if req.allow_plain_http {
                stored["allow_plain_http"] = Value::Bool(true);
            }
            stored
        }
    };
    let secret = credential_secret(&rid, &req.secret)?;
    let now = state.clock.now();
    let mut credential = Credential {
        credential_id: new_id("cred"),
        tenant_id,
        name: req.name,
        purpose: req.purpose,
        host,
        inject: inject.to_string(),
        sealed: String::new(),
        key_id: String::new(),
        version: 1,
        fingerprint: String::new(),
        created_at: now,
        updated_at: now,
    };
    (credential.sealed, credential.key_id, credential.fingerprint) =
        sealed_for(&state, &rid, &credential.sealing_context(), &secret)?;
    drop(secret);
    let created = store.create_credential(&credential, &caller.name).await.map_err(|e| match e {
        gatehouse_store::StoreError::Conflict => {
            bad_request(&rid, "the tenant already has a credential of this name")
        }
        e => store_error(&rid, &e),
    })?;
    Ok((StatusCode::CREATED, Json(credential_json(&created))).into_response())
}

/// The tenant and credential ids of a credential route.
fn credential_path(
    path: Result<Path<(String, String)>, PathRejection>,
    rid: &RequestId,
) -> Result<(String, String), ApiError> {
    match path {
        Ok(Path((t, c))) if is_valid_id(&t) && is_valid_id(&c) => Ok((t, c)),
        _ => Err(bad_request(rid, "ids are 1-128 characters of [A-Za-z0-9._:-], and not . or ..")),
    }
}

fn credential_unknown(rid: &RequestId) -> ApiError {
    with_reason(ErrorCode::NotFound, rid, Reason::CredentialUnknown)
}

pub(crate) async fn get_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let (tenant_id, credential_id) = credential_path(path, &rid)?;
    match store(&state, &rid)?.credential(&tenant_id, &credential_id).await {
        Ok(Some(c)) => Ok(Json(credential_json(&c))),
        Ok(None) => Err(credential_unknown(&rid)),
        Err(e) => Err(store_error(&rid, &e)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

pub(crate) async fn list_credentials(
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
    let listed =
        store(&state, &rid)?.credentials(Some(&tenant_id), &page).await.map_err(|e| store_error(&rid, &e))?;
    Ok(Json(json!({
        "items": listed.items.iter().map(credential_json).collect::<Vec<_>>(),
        "next_cursor": listed.next_cursor,
    })))
}

/// `PUT .../credentials/{id}/secret`: a new secret, one version up. Runs
/// holding leases on it inject the new secret from their next request.
pub(crate) async fn rotate_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String)>, PathRejection>,
    StrictJson(req): StrictJson<RotateSecret>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let (tenant_id, credential_id) = credential_path(path, &rid)?;
    let store = store(&state, &rid)?;
    let current = match store.credential(&tenant_id, &credential_id).await {
        Ok(Some(c)) => c,
        Ok(None) => return Err(credential_unknown(&rid)),
        Err(e) => return Err(store_error(&rid, &e)),
    };
    let secret = credential_secret(&rid, &req.secret)?;
    let version = current.version + 1;
    let context = CredentialContext { version, ..current.sealing_context() };
    let (sealed, key_id, fingerprint) = sealed_for(&state, &rid, &context, &secret)?;
    drop(secret);
    let rotation = Resealed {
        credential_id: credential_id.clone(),
        version: current.version,
        previous_sealed: None,
        sealed,
        key_id,
        fingerprint,
    };
    let mut changed = store
        .reseal_credentials(Some(&tenant_id), &[rotation], &caller.name, state.clock.now())
        .await
        .map_err(|e| match e {
            gatehouse_store::StoreError::NotFound => credential_unknown(&rid),
            e => store_error(&rid, &e),
        })?;
    let rotated = changed.pop().ok_or_else(|| ApiError::new(ErrorCode::Conflict, &rid))?;
    let filter = LeaseFilter {
        credential_id: Some(credential_id),
        status: Some(LeaseStatus::Live),
        ..LeaseFilter::default()
    };
    let holders = live_leases(&state, &rid, &filter).await?;
    runs_leases_changed(&state, &rid, holders.iter().map(|l| l.run_id.as_str())).await?;
    Ok(Json(credential_json(&rotated)))
}

pub(crate) async fn delete_credential(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let (tenant_id, credential_id) = credential_path(path, &rid)?;
    let revoked = store(&state, &rid)?
        .delete_credential(&tenant_id, &credential_id, &caller.name, state.clock.now())
        .await
        .map_err(|e| match e {
            gatehouse_store::StoreError::NotFound => credential_unknown(&rid),
            e => store_error(&rid, &e),
        })?;
    leases_revoked(&state, &rid, &revoked).await?;
    Ok(Json(json!({"deleted": true, "revoked": {"leases": revoked.len()}})))
}

/// Every live lease `filter` selects, all pages.
async fn live_leases(
    state: &AppState,
    rid: &RequestId,
    filter: &LeaseFilter,
) -> Result<Vec<Lease>, ApiError> {
    let store = store(state, rid)?;
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let page = gatehouse_store::PageRequest { limit: 500, cursor };
        let listed =
            store.leases(filter, &page, state.clock.now()).await.map_err(|e| store_error(rid, &e))?;
        all.extend(listed.items);
        match listed.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(all),
        }
    }
}

/// Revoked leases: their runs' doors told, a `lease_revoked` event each.
async fn leases_revoked(state: &AppState, rid: &RequestId, revoked: &[Lease]) -> Result<(), ApiError> {
    let now = state.clock.now();
    for lease in revoked {
        state.refusals.record_event(NewEvent::lease_event(
            lease,
            "lease_revoked",
            lease.revoke_reason.as_deref(),
            now,
        ));
    }
    runs_leases_changed(state, rid, revoked.iter().map(|l| l.run_id.as_str())).await
}

/// Bumps the lease generation of each run's grant (see the module docs).
async fn runs_leases_changed<'a>(
    state: &AppState,
    rid: &RequestId,
    run_ids: impl Iterator<Item = &'a str>,
) -> Result<(), ApiError> {
    let mut run_ids: Vec<&str> = run_ids.collect();
    run_ids.sort_unstable();
    run_ids.dedup();
    let store = store(state, rid)?;
    for run_id in run_ids {
        if let Some(run) = store.run(run_id).await.map_err(|e| store_error(rid, &e))? {
            leases_changed(state, rid, &run.grant_id).await?;
        }
    }
    Ok(())
}

/// Tells every node's door that the leases of `grant_id`'s run changed.
/// A ledger that cannot take it is `lease_unavailable`: the change is
/// recorded, but the caller must not believe it is in force everywhere
/// (retrying bumps again).
pub async fn leases_changed(state: &AppState, rid: &RequestId, grant_id: &str) -> Result<(), ApiError> {
    let ledger = state.ledger.as_ref().ok_or_else(|| ApiError::new(ErrorCode::Forbidden, rid))?;
    match ledger.bump_lease_generation(grant_id).await {
        // No record: nothing spends on this grant anywhere, so nothing injects.
        Ok(_) | Err(Reason::GrantUnknown) => Ok(()),
        Err(_) => Err(with_reason(ErrorCode::Unavailable, rid, Reason::LeaseUnavailable)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrantLease {
    credential_id: String,
    purpose: String,
    host: String,
}

/// `POST /v1/runs/{id}/leases`.
pub(crate) async fn grant_lease(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    StrictJson(req): StrictJson<GrantLease>,
) -> Result<Response, ApiError> {
    serving(&state, &rid)?;
    let run_id = path_id(path, &rid)?;
    if !is_valid_id(&req.credential_id) {
        return Err(bad_request(&rid, "credential_id is not a valid id"));
    }
    let host = purpose_and_host(&rid, &req.purpose, &req.host)?;
    let new = NewLease {
        lease_id: new_id("lease"),
        run_id,
        credential_id: req.credential_id,
        purpose: req.purpose,
        host,
    };
    let now = state.clock.now();
    let (lease, run) = store(&state, &rid)?
        .grant_lease(&new, &caller.name, now, state.run_heartbeat_timeout_secs)
        .await
        .map_err(|e| match e {
            gatehouse_store::StoreError::NotFound => {
                with_reason(ErrorCode::NotFound, &rid, Reason::RunUnknown)
            }
            e => store_error(&rid, &e),
        })?;
    leases_changed(&state, &rid, &run.grant_id).await?;
    state.refusals.record_event(NewEvent::lease_event(&lease, "lease_granted", None, now));
    Ok((StatusCode::CREATED, Json(lease_json(&lease))).into_response())
}

/// `POST /v1/leases/{id}/revoke`.
pub(crate) async fn revoke_lease(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    serving(&state, &rid)?;
    let lease_id = path_id(path, &rid)?;
    let revoked = revoke_one_lease(&state, &rid, &lease_id, &caller.name).await?;
    Ok(Json(json!({"revoked": revoked})))
}

/// Revokes one lease (1) or reports it was revoked before (0); either way
/// every door hears of it before the answer.
pub(crate) async fn revoke_one_lease(
    state: &AppState,
    rid: &RequestId,
    lease_id: &str,
    actor: &str,
) -> Result<u64, ApiError> {
    let store = store(state, rid)?;
    let now = state.clock.now();
    let revoked = store.revoke_lease(lease_id, "revoked", actor, now).await.map_err(|e| match e {
        gatehouse_store::StoreError::NotFound => ApiError::new(ErrorCode::NotFound, rid),
        e => store_error(rid, &e),
    })?;
    match revoked {
        Some(lease) => {
            leases_revoked(state, rid, std::slice::from_ref(&lease)).await?;
            Ok(1)
        }
        None => {
            // Revoked before: tell the doors again, in case that call's
            // bump did not land.
            if let Some(lease) = store.lease(lease_id, now).await.map_err(|e| store_error(rid, &e))? {
                runs_leases_changed(state, rid, std::iter::once(lease.run_id.as_str())).await?;
            }
            Ok(0)
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeasesQuery {
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
pub(crate) async fn list_leases(
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
        return Err(bad_request(&rid, "ids are 1-128 characters of [A-Za-z0-9._:-], and not . or .."));
    }
    let status = match q.status.as_deref().map(LeaseStatus::parse) {
        None => None,
        Some(Some(s)) => Some(s),
        Some(None) => return Err(bad_request(&rid, "status is live, expired or revoked")),
    };
    let page = page(&rid, q.limit, q.cursor)?;
    let store = store(&state, &rid)?;
    let tenants = crate::tenancy::narrowed(&state, &rid, &caller, q.tenant_id)?;
    let filter = LeaseFilter { tenant_id: None, run_id: q.run_id, status, credential_id: q.credential_id };
    let now = state.clock.now();
    let rid_ref = &rid;
    let listed = crate::tenancy::merged(
        rid_ref,
        tenants,
        &page,
        |l: &Lease| l.lease_id.clone(),
        |tenant_id, page| {
            let filter = LeaseFilter { tenant_id, ..filter.clone() };
            async move { store.leases(&filter, &page, now).await.map_err(|e| store_error(rid_ref, &e)) }
        },
    )
    .await?;
    let items: Vec<Value> = listed.items.iter().map(lease_json).collect();
    Ok(list_json(gatehouse_store::Page { items, next_cursor: listed.next_cursor }))
}

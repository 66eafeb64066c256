//! Files through grants: the platform stores a user's input files; a run's
//! sandbox, with its grant as its credential, reads exactly its inputs and
//! sessions and writes only its output session.
//!
//! Every sandbox operation is spent in the ledger before it happens (a
//! `read_file`, a `read_session`, or an upload's bytes and output file),
//! and the ledger's scope check is what refuses a file, a session or an
//! output session the grant does not name. Uploads stream through the
//! content scanner into an object that becomes visible only once the
//! verdict accepts it; refused content is never stored and is a
//! `content_refused` event of the run. Storage paths come only from session
//! keys and generated ids (`gatehouse_files::layout`); names are metadata.

use std::net::IpAddr;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use futures_util::StreamExt as _;
use gatehouse_capability::GrantClaims;
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_core::credentials::bearer_token;
use gatehouse_core::{ErrorCode, PublicError, Reason, Refusal, RefusalKind, is_valid_id, new_id};
use gatehouse_files::{FileError, ObjectPath, Storage, check_name};
use gatehouse_ledger::{Operation, refusal_kind, spend};
use gatehouse_listener::PeerAddr;
use gatehouse_store::Store;
use gatehouse_store::files::{FileUpload, StoredFile, UploadFate};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RouteTable, forbidden, refused, store_error};
use crate::http::{Answer as _, ApiError, Caller, RequestId, bad_request, with_reason};
use crate::state::AppState;

/// The platform's routes (service token, worker role).
pub(super) fn routes(v1: RouteTable) -> RouteTable {
    v1.route("/files", post(store_input))
        .route("/tenants/{tenant_id}/files/{file_id}", get(input_metadata).delete(delete_input))
}

/// The sandbox's routes (the run's grant as the bearer token, gateway role),
/// served beside `/v1` under their full paths.
pub(super) fn sandbox_routes(table: RouteTable) -> RouteTable {
    table
        .route("/v1/files/{file_id}", get(read_input))
        .route("/v1/sessions/{session_id}/files", get(list_session))
        .route("/v1/sessions/{session_id}/files/{name}", get(read_session_file).put(upload))
}

fn storage_and_store<'a>(state: &'a AppState, rid: &RequestId) -> Result<(&'a Storage, &'a Store), ApiError> {
    match (&state.storage, &state.plane.store) {
        (Some(storage), Some(store)) => Ok((storage, store)),
        _ => Err(forbidden(rid)),
    }
}

fn file_error(rid: &RequestId, e: &FileError) -> ApiError {
    let code = match e {
        FileError::NameInvalid(_) => ErrorCode::BadRequest,
        FileError::NotFound | FileError::PathInvalid => ErrorCode::NotFound,
        FileError::Unavailable | FileError::Config(_) => ErrorCode::Unavailable,
    };
    with_reason(code, rid, e.reason())
}

fn unknown(rid: &RequestId) -> ApiError {
    with_reason(ErrorCode::NotFound, rid, Reason::FileUnknown)
}

/// What an upload's answer says of the file.
fn kept(file: &StoredFile) -> Value {
    json!({"file_id": file.file_id, "bytes": file.bytes, "sha256": file.sha256, "verdict": file.verdict})
}

/// A file's record as the platform and a session's listing show it.
fn described(file: &StoredFile) -> Value {
    json!({"file_id": file.file_id, "name": file.name, "bytes": file.bytes, "sha256": file.sha256,
        "verdict": file.verdict, "created_at": file.created_at, "user_id": file.user_id,
        "session_id": file.session_id, "resource": file.resource})
}

/// A resource named `kind:id:version` (version a number) is shared inside
/// its tenant, such as a skill bundle: its files live in a namespace of the
/// resource's own, which a new version moves. Any other resource is the
/// user's own.
fn shared(resource: &str) -> Option<Namespace<'_>> {
    let mut parts = resource.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(kind), Some(id), Some(version), None) if !kind.is_empty() && !id.is_empty() => {
            Some(Namespace::Shared { kind, id, version: version.parse().ok()? })
        }
        _ => None,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreQuery {
    #[serde(default)]
    tenant_id: Option<String>,
    user_id: String,
    resource: String,
    name: String,
    #[serde(default)]
    conversation_id: Option<String>,
}

/// `POST /v1/files?tenant_id=&user_id=&resource=&name=[&conversation_id=]`:
/// the body is the file, streamed through the content scanner into the
/// user's namespace (narrowed to the conversation when one is given) or,
/// for a shared resource, the resource's.
async fn store_input(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<StoreQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Result<Response, ApiError> {
    let Ok(Query(q)) = query else {
        return Err(bad_request(
            &rid,
            "give user_id, resource and name (and tenant_id, conversation_id) in the query",
        ));
    };
    let (storage, store) = storage_and_store(&state, &rid)?;
    let sessions = state.plane.sessions.as_ref().ok_or_else(|| forbidden(&rid))?;
    let ids = [Some(&q.user_id), Some(&q.resource), q.tenant_id.as_ref(), q.conversation_id.as_ref()];
    if ids.into_iter().flatten().any(|id| !is_valid_id(id)) {
        return Err(bad_request(&rid, "user_id, resource, tenant_id and conversation_id are ids"));
    }
    check_name(&q.name).map_err(|e| file_error(&rid, &e))?;
    state.plane.require(&rid.0, &caller, q.tenant_id.as_deref()).answer(&rid)?;
    let principal = Principal { tenant_id: q.tenant_id.clone(), user_id: q.user_id.clone() };
    let namespace =
        shared(&q.resource).unwrap_or(Namespace::User { conversation: q.conversation_id.as_deref() });
    let key = sessions.derive(&principal, &namespace).map_err(|reason| refused(&rid, reason))?;
    let file_id = new_id("file");
    let path = ObjectPath::new(&key, &file_id).map_err(|e| file_error(&rid, &e))?;
    begin_upload(&state, store, &rid, &path).await?;
    let outcome = take_in(&state, storage, &path, body, None).await;
    let (stored, verdict) = match outcome {
        Ok(kept) => kept,
        Err(failed) => {
            forget_upload(store, &file_id).await;
            return Err(failed.answer(&state, &rid, q.tenant_id.as_deref(), None));
        }
    };
    let file = StoredFile {
        file_id,
        tenant_id: q.tenant_id.unwrap_or_default(),
        user_id: q.user_id,
        namespace: key,
        session_id: None,
        resource: Some(q.resource),
        name: q.name,
        bytes: i64::try_from(stored.bytes).unwrap_or(i64::MAX),
        sha256: stored.sha256,
        verdict: verdict.verdict.as_str().to_owned(),
        created_at: state.plane.clock.now(),
    };
    record(store, storage, &rid, &file, &caller.name).await?;
    Ok((StatusCode::CREATED, Json(kept(&file))).into_response())
}

#[derive(Deserialize)]
struct TenantPath {
    tenant_id: String,
    file_id: String,
}

/// `GET /v1/tenants/{tenant_id}/files/{file_id}`: an input file's record.
async fn input_metadata(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Path(p): Path<TenantPath>,
) -> Result<Json<Value>, ApiError> {
    let (_, store) = storage_and_store(&state, &rid)?;
    let file = store
        .file(Some(&p.tenant_id), &p.file_id)
        .await
        .map_err(|e| store_error(&rid, e))?
        .ok_or_else(|| unknown(&rid))?;
    Ok(Json(described(&file)))
}

/// `DELETE /v1/tenants/{tenant_id}/files/{file_id}`: the record goes first,
/// then the object (an object left by a failure there is an orphan the
/// sweeper removes; never a record without its object).
async fn delete_input(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    Path(p): Path<TenantPath>,
) -> Result<Json<Value>, ApiError> {
    let (storage, store) = storage_and_store(&state, &rid)?;
    let file = store
        .delete_file(Some(&p.tenant_id), &p.file_id, &caller.name, state.plane.clock.now())
        .await
        .map_err(|e| store_error(&rid, e))?
        .ok_or_else(|| unknown(&rid))?;
    remove_object(storage, &file).await;
    Ok(Json(json!({"deleted": true})))
}

/// The client address of a request on the API listener.
fn client(peer: Option<Extension<PeerAddr>>) -> Option<IpAddr> {
    peer.map(|Extension(PeerAddr(addr))| addr.ip())
}

/// The run's grant, from `Authorization: Bearer …`, opened. With strict
/// tenant isolation a grant without a tenant reaches no file. A missing,
/// doubled or bad grant proved nothing: its refusal is counted, not
/// itemized.
fn grant_of(
    state: &AppState,
    rid: &RequestId,
    headers: &HeaderMap,
    client: Option<IpAddr>,
) -> Result<GrantClaims, ApiError> {
    let sealer = state.plane.sealer.as_ref().ok_or_else(|| forbidden(rid))?;
    let unproven = |reason: Reason| {
        state.plane.refusals.record_unauthenticated(
            "api",
            client,
            RefusalKind::GrantRefused,
            reason,
            Some(&rid.0),
        );
    };
    let mut given = headers.get_all(header::AUTHORIZATION).iter();
    let token = match (given.next(), given.next()) {
        (Some(value), None) => value.to_str().ok().and_then(bearer_token),
        (Some(_), Some(_)) => {
            unproven(Reason::CredentialsAmbiguous);
            return Err(with_reason(ErrorCode::Unauthorized, rid, Reason::CredentialsAmbiguous));
        }
        _ => None,
    };
    let Some(token) = token else {
        unproven(Reason::GrantMalformed);
        return Err(with_reason(ErrorCode::Unauthorized, rid, Reason::GrantMalformed));
    };
    let claims = sealer.open(token.trim(), state.plane.clock.now()).map_err(|reason| {
        unproven(reason);
        refused(rid, reason)
    })?;
    if claims.tenant_id.is_none() && state.plane.settings.tenant_isolation_strict {
        return Err(refused(rid, Reason::TenantMissing));
    }
    Ok(claims)
}

/// Spends `op` from the run's grant; a refusal is recorded as the run's.
async fn spend_for(
    state: &AppState,
    rid: &RequestId,
    claims: &GrantClaims,
    op: &Operation,
) -> Result<(), ApiError> {
    let ledger = state.plane.ledger.as_ref().ok_or_else(|| forbidden(rid))?;
    match spend(ledger, &claims.grant_id, op, state.plane.clock.now(), state.plane.settings.ledger_required)
        .await
    {
        Ok(_) => Ok(()),
        Err(reason) => {
            note(state, rid, of_run(claims), refusal_kind(reason), reason, None);
            Err(refused(rid, reason))
        }
    }
}

/// Records a refusal of `tenant`'s file operation (of `run`, for a sandbox's).
fn note(
    state: &AppState,
    rid: &RequestId,
    (tenant, run): (Option<&str>, Option<&str>),
    kind: RefusalKind,
    reason: Reason,
    rule: Option<String>,
) {
    state.plane.refusals.record_refusal(Refusal {
        kind,
        reason,
        tenant_id: tenant.map(str::to_owned),
        run_id: run.map(str::to_owned),
        request_id: Some(rid.0.clone()),
        host: None,
        rule,
        lease_id: None,
        dry_run: false,
        at: 0,
    });
}

/// Whose a sandbox's operation is, for its refusals.
fn of_run(claims: &GrantClaims) -> (Option<&str>, Option<&str>) {
    (claims.tenant_id.as_deref(), Some(claims.exec_id.as_str()))
}

/// `GET /v1/files/{file_id}`: an input file the grant names.
async fn read_input(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Path(file_id): Path<String>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (storage, store) = storage_and_store(&state, &rid)?;
    let claims = grant_of(&state, &rid, &headers, client(peer))?;
    spend_for(&state, &rid, &claims, &Operation::ReadFile { file: file_id.clone() }).await?;
    let file = store
        .file(claims.tenant_id.as_deref(), &file_id)
        .await
        .map_err(|e| store_error(&rid, e))?
        .ok_or_else(|| unknown(&rid))?;
    // Named by the platform in the grant, and still: only the user's own
    // file or a resource shared in the tenant.
    let shared_resource = file.resource.as_deref().and_then(shared).is_some();
    if file.user_id != claims.user_id && !shared_resource {
        return Err(unknown(&rid));
    }
    stream_out(storage, &rid, &file).await
}

/// `GET /v1/sessions/{session_id}/files`: a session the grant may read.
async fn list_session(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Path(session_id): Path<String>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let files = session(&state, &rid, &headers, client(peer), &session_id).await?;
    Ok(Json(json!({"session_id": session_id, "items": files.iter().map(described).collect::<Vec<_>>()})))
}

#[derive(Deserialize)]
struct SessionFilePath {
    session_id: String,
    name: String,
}

/// `GET /v1/sessions/{session_id}/files/{name}`: one file of a session the
/// grant may read.
async fn read_session_file(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Path(p): Path<SessionFilePath>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let files = session(&state, &rid, &headers, client(peer), &p.session_id).await?;
    let file = files.into_iter().find(|f| f.name == p.name).ok_or_else(|| unknown(&rid))?;
    // `session` found the storage there.
    stream_out(state.storage.as_ref().ok_or_else(|| forbidden(&rid))?, &rid, &file).await
}

/// The files of a session the bearer's grant may read (a `read_session`
/// spend): its user's session of that id in the run's namespace.
async fn session(
    state: &AppState,
    rid: &RequestId,
    headers: &HeaderMap,
    client: Option<IpAddr>,
    session_id: &str,
) -> Result<Vec<StoredFile>, ApiError> {
    let (_, store) = storage_and_store(state, rid)?;
    let claims = grant_of(state, rid, headers, client)?;
    spend_for(state, rid, &claims, &Operation::ReadSession { session: session_id.to_owned() }).await?;
    let tenant = claims.tenant_id.as_deref();
    store
        .session_files(tenant, &claims.user_id, &claims.session_key, session_id, state.plane.clock.now())
        .await
        .map_err(|e| store_error(rid, e))
}

/// `PUT /v1/sessions/{session_id}/files/{name}`: a file into the run's
/// output session, in the requesting user's own namespace whatever the
/// run read. The upload is one spend of its declared `Content-Length` (an
/// output file for a new name, the bytes), before a byte is read: a body of
/// unknown length is refused (411), and one that ends short or runs long is
/// cut off with nothing kept.
async fn upload(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Path(p): Path<SessionFilePath>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (storage, store) = storage_and_store(&state, &rid)?;
    let claims = grant_of(&state, &rid, &headers, client(peer))?;
    check_name(&p.name).map_err(|e| file_error(&rid, &e))?;
    let declared =
        headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError(PublicError::new(ErrorCode::LengthRequired, rid.0.clone()).with_message(
                    "an upload declares its Content-Length: it is paid for before a byte is read",
                ))
            })?;
    let op =
        Operation::Upload { session: p.session_id.clone(), bytes: declared, output_file_id: p.name.clone() };
    spend_for(&state, &rid, &claims, &op).await?;
    let file_id = new_id("file");
    let path = ObjectPath::new(&claims.session_key, &file_id).map_err(|e| file_error(&rid, &e))?;
    begin_upload(&state, store, &rid, &path).await?;
    let outcome = take_in(&state, storage, &path, body, Some(declared)).await;
    let (stored, verdict) = match outcome {
        Ok(kept) => kept,
        Err(failed) => {
            forget_upload(store, &file_id).await;
            return Err(failed.answer(&state, &rid, claims.tenant_id.as_deref(), Some(&claims)));
        }
    };
    let file = StoredFile {
        file_id,
        tenant_id: claims.tenant_id.clone().unwrap_or_default(),
        user_id: claims.user_id.clone(),
        namespace: claims.session_key.clone(),
        session_id: Some(p.session_id.clone()),
        resource: None,
        name: p.name.clone(),
        bytes: i64::try_from(stored.bytes).unwrap_or(i64::MAX),
        sha256: stored.sha256,
        verdict: verdict.verdict.as_str().to_owned(),
        created_at: state.plane.clock.now(),
    };
    record(store, storage, &rid, &file, &format!("run:{}", claims.exec_id)).await?;
    Ok((StatusCode::CREATED, Json(kept(&file))).into_response())
}

/// This process's name in the upload rows it writes (for an operator
/// reading the table: which node took an upload in).
fn node_name() -> &'static str {
    static NODE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NODE.get_or_init(|| new_id("node"))
}

/// Records the upload to `path` before a byte of it is written: until its
/// record replaces this row, the sweeper keeps what the upload writes
/// (however old the storage dates it), and removes it once the row is
/// older than the sweeper's bound.
async fn begin_upload(
    state: &AppState,
    store: &Store,
    rid: &RequestId,
    path: &ObjectPath,
) -> Result<(), ApiError> {
    let upload = FileUpload {
        file_id: path.file_id().to_owned(),
        namespace: path.namespace().to_owned(),
        node: node_name().to_owned(),
        started_at: state.plane.clock.now(),
    };
    store.begin_upload(&upload).await.map_err(|e| store_error(rid, e))
}

/// An upload that kept nothing: its row goes (left behind on failure, the
/// sweeper expires it).
async fn forget_upload(store: &Store, file_id: &str) {
    if let Err(e) = store.abandon_upload(file_id).await {
        tracing::warn!(
            file_id,
            code = e.code(),
            "an upload's row could not be removed; the sweeper expires it"
        );
    }
}

/// Records a file whose object is complete; a file it replaces loses its
/// object. A commit that errs may still have gone through (the store timed
/// out or the connection broke after the commit was sent): the store is
/// asked again, in a way no late commit can overtake, and the new object is
/// deleted only when its record is certainly absent. When the store cannot
/// say, the object stays for the sweeper, which judges it by its record.
async fn record(
    store: &Store,
    storage: &Storage,
    rid: &RequestId,
    file: &StoredFile,
    actor: &str,
) -> Result<(), ApiError> {
    match store.record_file(file, actor).await {
        Ok(replaced) => {
            if let Some(old) = replaced {
                remove_object(storage, &old).await;
            }
            Ok(())
        }
        Err(e) => match store.abandon_upload(&file.file_id).await {
            // Kept after all. The record it replaced, if any, is gone and its
            // object is an orphan the sweeper removes.
            Ok(UploadFate::Committed) => {
                tracing::warn!(file_id = %file.file_id, code = e.code(), "a commit that erred had gone through; the file is kept");
                Ok(())
            }
            Ok(UploadFate::Abandoned) => {
                remove_object(storage, file).await;
                Err(store_error(rid, e))
            }
            Err(again) => {
                tracing::warn!(file_id = %file.file_id, code = again.code(), "whether a file's record was written is unknown; its object is left to the sweeper");
                Err(store_error(rid, e))
            }
        },
    }
}

async fn remove_object(storage: &Storage, file: &StoredFile) {
    let Ok(path) = ObjectPath::new(&file.namespace, &file.file_id) else { return };
    if let Err(e) = storage.delete(&path).await {
        tracing::warn!(file_id = %file.file_id, reason = %e.reason(), "an object could not be deleted; the sweeper removes it");
    }
}

/// A file's content as the answer's body, streamed from the store.
async fn stream_out(storage: &Storage, rid: &RequestId, file: &StoredFile) -> Result<Response, ApiError> {
    let path = ObjectPath::new(&file.namespace, &file.file_id).map_err(|e| file_error(rid, &e))?;
    let (size, chunks) = storage.read(&path).await.map_err(|e| file_error(rid, &e))?;
    let mut response = Response::new(Body::from_stream(chunks));
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    if let Ok(v) = HeaderValue::from_str(&file.sha256) {
        h.insert("x-gatehouse-sha256", v);
    }
    if let Ok(v) = HeaderValue::from_str(&file.verdict) {
        h.insert("x-gatehouse-verdict", v);
    }
    Ok(response)
}

/// Why a file was not taken in. Nothing of it is visible in every case.
enum NotKept {
    /// The body stopped short (the client went away).
    Cut,
    /// The content scanner refused it.
    Content(gatehouse_content::Verdict),
    /// The object store failed.
    Storage(FileError),
}

impl NotKept {
    fn answer(
        self,
        state: &AppState,
        rid: &RequestId,
        tenant: Option<&str>,
        run: Option<&GrantClaims>,
    ) -> ApiError {
        let whose = run.map_or((tenant, None), of_run);
        let note_it = |kind, reason, rule| note(state, rid, whose, kind, reason, rule);
        match self {
            Self::Cut => {
                bad_request(rid, "the body was cut off or not its declared length: nothing was kept")
            }
            Self::Content(verdict) => {
                // A verdict that is not accepted always names its reason; a
                // scanner that could not answer is an outage (503).
                let reason = verdict.reason.unwrap_or(Reason::ScannerUnavailable);
                note_it(RefusalKind::ContentRefused, reason, verdict.signature.clone());
                refused(rid, reason)
            }
            Self::Storage(e) => file_error(rid, &e),
        }
    }
}

/// Streams `body` into a new object at `path`, each frame shown to the
/// content scanner before it is written; the object is completed only if
/// the scanner accepts the whole and, when `length` is given, the body was
/// exactly that long (what was paid for is what is kept).
async fn take_in(
    state: &AppState,
    storage: &Storage,
    path: &ObjectPath,
    body: Body,
    length: Option<u64>,
) -> Result<(gatehouse_files::Stored, gatehouse_content::Verdict), NotKept> {
    let scanner = &state.content;
    let mut intake = scanner.intake();
    let mut upload = storage.begin(path).await.map_err(NotKept::Storage)?;
    let mut frames = body.into_data_stream();
    while let Some(frame) = frames.next().await {
        let Ok(frame) = frame else {
            upload.abort().await;
            return Err(NotKept::Cut);
        };
        if length.is_some_and(|n| upload.bytes() + frame.len() as u64 > n) {
            upload.abort().await;
            return Err(NotKept::Cut);
        }
        if !intake.push(&frame).await {
            // The scanner has decided (a refusal): read no further.
            break;
        }
        if let Err(e) = upload.write(frame).await {
            upload.abort().await;
            return Err(NotKept::Storage(e));
        }
    }
    let verdict = scanner.conclude(intake).await;
    state.metrics.record_content(verdict.verdict);
    if verdict.accepted() && length.is_some_and(|n| upload.bytes() != n) {
        upload.abort().await;
        return Err(NotKept::Cut);
    }
    if !verdict.accepted() {
        upload.abort().await;
        return Err(NotKept::Content(verdict));
    }
    let stored = upload.finish().await.map_err(NotKept::Storage)?;
    Ok((stored, verdict))
}

//! `/v1/files` and the sandbox's `/v1/sessions/…/files`: the bytes of files
//! through grants. The platform stores a user's input files; a run's
//! sandbox, its grant as its credential, reads its inputs and sessions and
//! writes its output session. Every decision and record is the plane's
//! (`gatehouse_plane::files`); here bodies are streamed through the content
//! scanner into the object store, and objects out to the caller.

use std::net::IpAddr;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use futures_util::StreamExt as _;
use gatehouse_capability::GrantClaims;
use gatehouse_core::credentials::bearer_token;
use gatehouse_core::{ErrorCode, PublicError};
use gatehouse_files::{FileError, ObjectPath, Storage};
use gatehouse_ledger::Operation;
use gatehouse_listener::PeerAddr;
use gatehouse_plane::PlaneError;
use gatehouse_plane::files::{Bearer, InputFile, check_file_name, file_unknown};
use gatehouse_store::files::StoredFile;
use serde::Deserialize;
use serde_json::{Value, json};

use super::RouteTable;
use crate::http::{Answer as _, ApiError, Caller, RequestId, api_error, bad_request};
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
    let input = InputFile {
        tenant_id: q.tenant_id.as_deref(),
        user_id: &q.user_id,
        resource: &q.resource,
        name: &q.name,
        conversation_id: q.conversation_id.as_deref(),
    };
    let namespace = state.plane.input_namespace(&rid.0, &caller, &input).answer(&rid)?;
    let new = NewFile {
        namespace,
        tenant_id: q.tenant_id,
        run_id: None,
        user_id: q.user_id,
        session_id: None,
        resource: Some(q.resource),
        name: q.name,
        actor: caller.name,
    };
    keep(&state, &rid, new, body, None).await
}

/// A new file, all but its bytes.
struct NewFile {
    namespace: String,
    tenant_id: Option<String>,
    /// The run writing it (its refusals are the run's).
    run_id: Option<String>,
    user_id: String,
    session_id: Option<String>,
    resource: Option<String>,
    name: String,
    /// Who the record names.
    actor: String,
}

/// Takes `body` in as `new`: its upload row first, the bytes through the
/// content scanner into the object store (held to `length` when given),
/// then its record; `201` with what was kept. Refused content is recorded
/// as the tenant's (and the run's), and nothing of it is kept.
async fn keep(
    state: &AppState,
    rid: &RequestId,
    new: NewFile,
    body: Body,
    length: Option<u64>,
) -> Result<Response, ApiError> {
    let (storage, _) = state.plane.file_places().answer(rid)?;
    let path = state.plane.begin_upload(&new.namespace).await.answer(rid)?;
    let (stored, verdict) = match take_in(state, storage, &path, body, length).await {
        Ok(kept) => kept,
        Err(failed) => {
            state.plane.forget_upload(path.file_id()).await;
            let whose = (new.tenant_id.as_deref(), new.run_id.as_deref());
            return Err(failed.answer(state, rid, whose, &new.name));
        }
    };
    let file = StoredFile {
        file_id: path.file_id().to_owned(),
        tenant_id: new.tenant_id.unwrap_or_default(),
        user_id: new.user_id,
        namespace: new.namespace,
        session_id: new.session_id,
        resource: new.resource,
        name: new.name,
        bytes: i64::try_from(stored.bytes).unwrap_or(i64::MAX),
        sha256: stored.sha256,
        verdict: verdict.verdict.as_str().to_owned(),
        created_at: state.plane.clock.now(),
        run_id: new.run_id,
    };
    state.plane.record_file(&file, &new.actor).await.answer(rid)?;
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
    let file = state.plane.input_file(&p.tenant_id, &p.file_id).await.answer(&rid)?;
    Ok(Json(described(&file)))
}

/// `DELETE /v1/tenants/{tenant_id}/files/{file_id}`.
async fn delete_input(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    Path(p): Path<TenantPath>,
) -> Result<Json<Value>, ApiError> {
    state.plane.delete_input(&p.tenant_id, &p.file_id, &caller.name).await.answer(&rid)?;
    Ok(Json(json!({"deleted": true})))
}

/// The client address of a request on the API listener.
fn client(peer: Option<Extension<PeerAddr>>) -> Option<IpAddr> {
    peer.map(|Extension(PeerAddr(addr))| addr.ip())
}

/// The run's grant, from `Authorization: Bearer …` (exactly one), opened
/// by the plane.
fn grant_of(
    state: &AppState,
    rid: &RequestId,
    headers: &HeaderMap,
    client: Option<IpAddr>,
) -> Result<GrantClaims, ApiError> {
    let mut given = headers.get_all(header::AUTHORIZATION).iter();
    let bearer = match (given.next(), given.next()) {
        (Some(value), None) => {
            value.to_str().ok().and_then(bearer_token).map_or(Bearer::Missing, Bearer::Token)
        }
        (Some(_), Some(_)) => Bearer::Ambiguous,
        _ => Bearer::Missing,
    };
    state.plane.file_grant(&rid.0, bearer, client).answer(rid)
}

/// `GET /v1/files/{file_id}`: an input file the grant names.
async fn read_input(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Path(file_id): Path<String>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (storage, _) = state.plane.file_places().answer(&rid)?;
    let claims = grant_of(&state, &rid, &headers, client(peer))?;
    let file = state.plane.input_file_of_run(&rid.0, &claims, &file_id).await.answer(&rid)?;
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
    let file = files.into_iter().find(|f| f.name == p.name).ok_or_else(|| api_error(&rid, file_unknown()))?;
    let (storage, _) = state.plane.file_places().answer(&rid)?;
    stream_out(storage, &rid, &file).await
}

/// The files of a session the bearer's grant may read.
async fn session(
    state: &AppState,
    rid: &RequestId,
    headers: &HeaderMap,
    client: Option<IpAddr>,
    session_id: &str,
) -> Result<Vec<StoredFile>, ApiError> {
    state.plane.file_places().answer(rid)?;
    let claims = grant_of(state, rid, headers, client)?;
    state.plane.session_files_of_run(&rid.0, &claims, session_id).await.answer(rid)
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
    state.plane.file_places().answer(&rid)?;
    let claims = grant_of(&state, &rid, &headers, client(peer))?;
    check_file_name(&p.name).answer(&rid)?;
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
    state.plane.spend_for_file(&rid.0, &claims, &op).await.answer(&rid)?;
    let new = NewFile {
        namespace: claims.session_key.clone(),
        tenant_id: claims.tenant_id.clone(),
        run_id: Some(claims.exec_id.clone()),
        user_id: claims.user_id.clone(),
        session_id: Some(p.session_id),
        resource: None,
        name: p.name,
        actor: format!("run:{}", claims.exec_id),
    };
    keep(&state, &rid, new, body, Some(declared)).await
}

/// A file's content as the answer's body, streamed from the store.
async fn stream_out(storage: &Storage, rid: &RequestId, file: &StoredFile) -> Result<Response, ApiError> {
    let path = ObjectPath::new(&file.namespace, &file.file_id).map_err(|e| file_error(rid, e))?;
    let (size, chunks) = storage.read(&path).await.map_err(|e| file_error(rid, e))?;
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

/// A storage error as the plane tells it.
fn file_error(rid: &RequestId, e: FileError) -> ApiError {
    api_error(rid, PlaneError::from(e))
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
    /// The caller's answer; refused content is recorded as `whose`, naming the file.
    fn answer(
        self,
        state: &AppState,
        rid: &RequestId,
        whose: (Option<&str>, Option<&str>),
        name: &str,
    ) -> ApiError {
        match self {
            Self::Cut => {
                bad_request(rid, "the body was cut off or not its declared length: nothing was kept")
            }
            Self::Content(verdict) => {
                let refused =
                    state.plane.refuse_content(&rid.0, whose, verdict.reason, verdict.signature, Some(name));
                api_error(rid, refused)
            }
            Self::Storage(e) => file_error(rid, e),
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

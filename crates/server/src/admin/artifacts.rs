//! A run's security checks: the files it wrote with their content
//! verdicts, and its uploads refused as content (what
//! `GET /v1/runs/{run_id}/artifacts` lists), opened from the run's row.

use askama::Template;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use http::StatusCode;

use super::pages::{Notice, when};
use super::{PageError, Person, ids_path, page, plane_failure, store_failure};
use crate::state::AppState;

struct FileView {
    name: String,
    file_id: String,
    bytes: i64,
    sha256: String,
    verdict: String,
    at: String,
}

struct RefusedView {
    name: String,
    reason: String,
    at: String,
}

#[derive(Template)]
#[template(path = "admin/artifacts.html")]
struct ArtifactsPage {
    person: String,
    csrf: String,
    tenant_id: String,
    run_id: String,
    notice: Option<Notice>,
    files: Vec<FileView>,
    refused: Vec<RefusedView>,
}

/// `GET /admin/tenants/{t}/runs/{run_id}/artifacts`.
pub async fn run_artifacts(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    person: Person,
) -> Result<Response, PageError> {
    let (tenant_id, run_id) = ids_path(path)?;
    let store = state.plane.store().map_err(|e| plane_failure(&person.rid, e))?;
    match store.run(&run_id).await.map_err(|e| store_failure(&person.rid, e))? {
        Some(run) if run.tenant_id == tenant_id => {}
        _ => return Err(PageError::NotFound),
    }
    let artifacts = state.plane.run_artifacts(&run_id).await.map_err(|e| plane_failure(&person.rid, e))?;
    let notice = match (artifacts.complete, artifacts.read.truncated) {
        (false, _) => Some(Notice {
            kind: "error",
            text: "The store is slow: the latest refused uploads may not be listed yet. Reload the page to see them."
                .to_owned(),
        }),
        (true, true) => Some(Notice {
            kind: "info",
            text: format!(
                "This run left more than {} files or refused uploads: the first are listed.",
                gatehouse_plane::files::ARTIFACTS_LIMIT
            ),
        }),
        (true, false) => None,
    };
    let left = artifacts.read.left;
    let template = ArtifactsPage {
        csrf: person.csrf(),
        person: person.actor,
        tenant_id,
        run_id,
        notice,
        files: left
            .written
            .into_iter()
            .map(|f| FileView {
                name: f.name,
                file_id: f.file_id,
                bytes: f.bytes,
                sha256: f.sha256,
                verdict: f.verdict,
                at: when(f.created_at),
            })
            .collect(),
        refused: left
            .refused
            .into_iter()
            .map(|r| RefusedView {
                name: r.file_name.unwrap_or_else(|| "(unnamed)".to_owned()),
                reason: r.reason.unwrap_or_default(),
                at: when(r.at),
            })
            .collect(),
    };
    Ok(page(StatusCode::OK, &template))
}

//! The tenant's credentials on the page, each with a **Test**: a person
//! makes a GET on the credential's host with it, as the platform's
//! `POST /v1/tenants/{t}/credentials/{id}/fetch` would, and sees the status,
//! the headers and the first few KB of the answer, scrubbed of the secret.
//! The test is that same plane operation: audited as `credential.use`
//! under the person's name, rate-limited with the tenant's other uses.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use gatehouse_plane::Caller;
use gatehouse_plane::credential_use::PersonRequest;
use serde::Deserialize;

use super::pages::{CredentialTestView, Extras, RefusalQuery, explain, render_tenant};
use super::{PageError, Submitted, ids_path};
use crate::state::AppState;

/// How much of an answer's body the page shows.
pub const BODY_SHOWN: usize = 4096;
/// The longest URL a test takes.
const MAX_URL: usize = 8192;

#[derive(Deserialize)]
pub struct TestForm {
    #[serde(default)]
    url: String,
}

/// `POST /admin/tenants/{t}/credentials/{id}/test`.
pub async fn test_credential(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    submitted: Submitted<TestForm>,
) -> Result<Response, PageError> {
    let (tenant_id, credential_id) = ids_path(path)?;
    let Submitted { person, form } = submitted;
    let url = form.url.trim().to_owned();
    if url.is_empty() || url.len() > MAX_URL {
        return Err(PageError::Bad("a URL is 1 to 8192 characters"));
    }
    let fetch = gatehouse_egress::fetch::FetchRequest {
        method: http::Method::GET,
        url: url.clone(),
        headers: http::HeaderMap::new(),
        body: bytes::Bytes::new(),
        purpose: gatehouse_egress::Purpose::Request,
        scrub: Default::default(),
        last_check: None,
    };
    let request =
        PersonRequest { tenant_id: &tenant_id, credential_id: &credential_id, actor: &person.actor, fetch };
    // The person acts on this tenant as the page's operator: every tenant.
    let caller = Caller::unbound(&person.actor);
    let answered = state.plane.use_credential(&person.rid.0, &caller, request).await;
    let mut view = CredentialTestView {
        credential_id,
        url,
        status: None,
        refused: None,
        headers: Vec::new(),
        body: String::new(),
        body_cut: false,
    };
    match answered {
        Ok(answer) => {
            view.status = Some(answer.status.as_u16());
            view.headers = answer
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            view.body_cut = answer.body.len() > BODY_SHOWN;
            view.body =
                String::from_utf8_lossy(&answer.body[..answer.body.len().min(BODY_SHOWN)]).into_owned();
        }
        Err(e) => {
            let code = e.reason().map_or_else(|| e.code().as_str().to_owned(), |r| r.as_str().to_owned());
            let meaning = explain(e.reason()).or(e.message()).unwrap_or(e.code().default_message());
            view.refused = Some((code, meaning.to_owned()));
        }
    }
    let extras = Extras { credential_test: Some(view), ..Extras::default() };
    render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await
}

//! The forms that act: the gate mode, cancelling a run, revoking a lease,
//! the kill switch and emergency revoke. Every change is a plane
//! operation, audited under the person's name.

use askama::Template;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use gatehouse_store::{PageRequest, RunStatus};
use http::StatusCode;
use serde::Deserialize;

use super::pages::{Extras, Notice, RefusalQuery, back_to, render_tenant};
use super::{PageError, Person, Submitted, ids_path, page, plane_failure, store_failure, tenant_path};
use crate::state::AppState;

#[derive(Deserialize)]
pub struct GateForm {
    #[serde(default)]
    mode: String,
}

pub async fn save_gate(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    submitted: Submitted<GateForm>,
) -> Result<Response, PageError> {
    let tenant_id = tenant_path(path)?;
    let Submitted { person, form } = submitted;
    state
        .plane
        .set_gate_mode(&tenant_id, &form.mode, &person.actor)
        .await
        .map_err(|e| plane_failure(&person.rid, e))?;
    Ok(back_to(&tenant_id))
}

#[derive(Deserialize)]
pub struct Nothing {}

pub async fn cancel_run(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    submitted: Submitted<Nothing>,
) -> Result<Response, PageError> {
    let (tenant_id, run_id) = ids_path(path)?;
    let person = submitted.person;
    let store = state.plane.store().map_err(|e| plane_failure(&person.rid, e))?;
    match store.run(&run_id).await.map_err(|e| store_failure(&person.rid, e))? {
        Some(run) if run.tenant_id == tenant_id => {}
        _ => return Err(PageError::NotFound),
    }
    state
        .plane
        .finish(&run_id, RunStatus::Cancelled, "cancelled", &person.actor)
        .await
        .map_err(|e| plane_failure(&person.rid, e))?;
    Ok(back_to(&tenant_id))
}

pub async fn revoke_lease(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    submitted: Submitted<Nothing>,
) -> Result<Response, PageError> {
    let (tenant_id, lease_id) = ids_path(path)?;
    let person = submitted.person;
    let store = state.plane.store().map_err(|e| plane_failure(&person.rid, e))?;
    match store.lease(&lease_id, state.plane.clock.now()).await.map_err(|e| store_failure(&person.rid, e))? {
        Some(lease) if lease.tenant_id == tenant_id => {}
        _ => return Err(PageError::NotFound),
    }
    state.plane.revoke_lease(&lease_id, &person.actor).await.map_err(|e| plane_failure(&person.rid, e))?;
    Ok(back_to(&tenant_id))
}

#[derive(Deserialize)]
pub struct KillForm {
    #[serde(default)]
    engaged: String,
    #[serde(default)]
    reason: String,
}

/// Free text a person gives: bounded, no control characters.
fn reason_text(text: &str) -> Result<Option<&str>, PageError> {
    let text = text.trim();
    if text.len() > 500 || text.chars().any(char::is_control) {
        return Err(PageError::Bad("a reason is at most 500 characters, without control characters"));
    }
    Ok((!text.is_empty()).then_some(text))
}

pub async fn kill_switch(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    submitted: Submitted<KillForm>,
) -> Result<Response, PageError> {
    let tenant_id = tenant_path(path)?;
    let Submitted { person, form } = submitted;
    let engaged = match form.engaged.as_str() {
        "true" => true,
        "false" => false,
        _ => return Err(PageError::Bad("engage or release")),
    };
    let reason = reason_text(&form.reason)?;
    let revoked = state
        .plane
        .throw_kill_switch(&person.rid.0, &tenant_id, engaged, reason, &person.actor)
        .await
        .map_err(|e| plane_failure(&person.rid, e))?;
    let notice = if revoked.second_marker_pending {
        Notice::error(format!(
            "Kill switch engaged and {} run(s) killed ({} lease(s) revoked), but the ledger stopped answering \
             before the second revocation marker: it is being retried. Engage the switch again to be sure.",
            revoked.runs, revoked.leases
        ))
    } else if engaged {
        Notice::ok(format!(
            "Kill switch engaged: {} run(s) killed, {} grant(s) and {} lease(s) revoked.",
            revoked.runs, revoked.grants, revoked.leases
        ))
    } else {
        Notice::ok("Kill switch released: runs can start again.")
    };
    let extras = Extras { notice, ..Extras::default() };
    render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await
}

// ---- emergency revoke ----

#[derive(Template)]
#[template(path = "admin/emergency.html")]
struct EmergencyPage {
    person: String,
    csrf: String,
    notice: Option<Notice>,
    live_runs: String,
}

/// How many runs are live, in words ("at least 500" past a page).
async fn live_run_count(state: &AppState, person: &Person) -> Result<String, PageError> {
    let store = state.plane.store().map_err(|e| plane_failure(&person.rid, e))?;
    let live = store
        .runs(None, Some(RunStatus::Live), &PageRequest { limit: 500, cursor: None })
        .await
        .map_err(|e| store_failure(&person.rid, e))?;
    Ok(if live.next_cursor.is_some() { "at least 500".to_owned() } else { live.items.len().to_string() })
}

pub async fn emergency_page(State(state): State<AppState>, person: Person) -> Result<Response, PageError> {
    let live_runs = live_run_count(&state, &person).await?;
    Ok(page(
        StatusCode::OK,
        &EmergencyPage { csrf: person.csrf(), person: person.actor, notice: None, live_runs },
    ))
}

#[derive(Deserialize)]
pub struct EmergencyForm {
    #[serde(default)]
    reason: String,
}

pub async fn emergency_revoke(
    State(state): State<AppState>,
    submitted: Submitted<EmergencyForm>,
) -> Result<Response, PageError> {
    let Submitted { person, form } = submitted;
    let reason = reason_text(&form.reason)?;
    let revoked = state
        .plane
        .revoke_everything(&person.rid.0, reason, &person.actor)
        .await
        .map_err(|e| plane_failure(&person.rid, e))?;
    let notice = if revoked.second_marker_pending {
        Notice::error(format!(
            "{} run(s) killed and {} lease(s) revoked, but the ledger stopped answering before the second \
             revocation marker: it is being retried. Revoke again to be sure.",
            revoked.runs, revoked.leases
        ))
    } else {
        Notice::ok(format!(
            "Done: {} run(s) killed, every grant revoked ({} marker(s)), {} lease(s) revoked.",
            revoked.runs, revoked.grants, revoked.leases
        ))
    };
    let live_runs = live_run_count(&state, &person).await?;
    Ok(page(StatusCode::OK, &EmergencyPage { csrf: person.csrf(), person: person.actor, notice, live_runs }))
}

#[derive(Deserialize)]
pub struct DecisionForm {
    #[serde(default)]
    decision: String,
}

/// A person's decision on a run's egress proposal: approve once (the run),
/// approve always (a new policy version with exactly the rule), or deny.
pub async fn decide_proposal(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    submitted: Submitted<DecisionForm>,
) -> Result<Response, PageError> {
    use gatehouse_plane::proposals::Decision;
    let (tenant_id, proposal_id) = ids_path(path)?;
    let Submitted { person, form } = submitted;
    let decision = match form.decision.as_str() {
        "once" => Decision::ApproveOnce,
        "always" => Decision::ApproveAlways,
        "deny" => Decision::Deny,
        _ => return Err(PageError::Bad("a decision is once, always or deny")),
    };
    let caller = gatehouse_plane::Caller::unbound(&person.actor);
    let plane = &state.plane;
    let proposal = plane
        .proposal(&person.rid.0, &caller, &proposal_id)
        .await
        .map_err(|e| plane_failure(&person.rid, e))?;
    if proposal.tenant_id != tenant_id {
        return Err(PageError::NotFound);
    }
    let decided = plane
        .decide_proposal(&person.rid.0, &caller, &proposal_id, decision, &person.actor)
        .await
        .map_err(|e| plane_failure(&person.rid, e))?;
    let text = match decision {
        Decision::ApproveOnce => {
            format!("Approved for run {} until it ends: {}", decided.run_id, decided.rule)
        }
        Decision::ApproveAlways => {
            format!("Approved for the tenant (a new policy version): {}", decided.rule)
        }
        Decision::Deny => format!("Denied: {}", decided.rule),
    };
    let extras = Extras { notice: Notice::ok(text), ..Extras::default() };
    render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await
}

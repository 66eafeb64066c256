//! The policy's forms: edit and save (with the version it was read at),
//! test a URL as the door would decide it, and allow one host in two steps.
//! Every change is a plane operation, audited under the person's name.

use std::net::IpAddr;

use askama::Template;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use gatehouse_core::Reason;
use gatehouse_egress::policy::{Entry, Mode};
use gatehouse_egress::{Decision, Policy, PolicyDocument, Purpose, decide_target_resolving, parse_url};
use http::StatusCode;
use serde::Deserialize;

use gatehouse_plane::PlaneError;

use super::pages::{Extras, Notice, RefusalQuery, SubmittedPolicy, TestView, allowable, render_tenant};
use super::{PageError, Person, Submitted, page, plane_failure, store_failure, tenant_path};
use crate::state::AppState;

#[derive(Deserialize)]
pub struct PolicyForm {
    #[serde(default)]
    version: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    default_methods: String,
    #[serde(default)]
    allow: String,
    #[serde(default)]
    deny: String,
    #[serde(default)]
    dry_run: Option<String>,
    /// On the confirmation: `save`, or `edit` to go back to the form.
    #[serde(default)]
    action: String,
}

/// A form's entries: one a line, a host entry as written, a rule object
/// (`{"host": ..., "methods": [...]}`, `{"preset": ...}`) as JSON.
fn rules(text: &str) -> Result<Vec<Entry>, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|line| match line.starts_with('{') {
            true => serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line)
                .map(Entry::Object)
                .map_err(|_| format!("entry {line}: a line starting with {{ is a rule object in JSON")),
            false => Ok(Entry::host(line)),
        })
        .collect()
}

/// The form's default methods: names apart by spaces or commas; none, none.
fn default_methods(text: &str) -> Option<Vec<String>> {
    let names: Vec<String> =
        text.split([' ', ',']).map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned).collect();
    (!names.is_empty()).then_some(names)
}

fn version_of(text: &str) -> Result<i64, PageError> {
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or(PageError::Bad("the form's policy version is missing"))
}

/// The form's document, checked: the document, or why it is not saved.
fn checked_document(form: &PolicyForm, mode: Mode) -> Result<PolicyDocument, String> {
    let doc = match (rules(&form.allow), rules(&form.deny)) {
        (Ok(allow), Ok(deny)) => PolicyDocument {
            mode,
            default_methods: default_methods(&form.default_methods),
            allow,
            deny,
            dry_run: form.dry_run.is_some(),
        },
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    Policy::from_document(&doc).map(|_| doc).map_err(|e| e.detail)
}

fn mode_of(form: &PolicyForm) -> Result<Mode, PageError> {
    match form.mode.as_str() {
        "open" => Ok(Mode::Open),
        "allowlist" => Ok(Mode::Allowlist),
        _ => Err(PageError::Bad("the mode is open or allowlist")),
    }
}

impl PolicyForm {
    /// The form as the person sent it, to show again.
    fn as_sent(&self, mode: Mode) -> Option<SubmittedPolicy> {
        Some(SubmittedPolicy {
            mode,
            default_methods: self.default_methods.clone(),
            allow: self.allow.clone(),
            deny: self.deny.clone(),
            dry_run: self.dry_run.is_some(),
        })
    }
}

/// One line of a change: kept (` `), added (`+`) or removed (`-`).
pub struct DiffLine {
    pub mark: char,
    pub text: String,
}

/// `old` to `new`, line by line: the old lines in their order, each kept or
/// removed, then the lines added.
fn diff(old: &[String], new: &[String]) -> Vec<DiffLine> {
    let mut lines: Vec<DiffLine> = old
        .iter()
        .map(|line| DiffLine { mark: if new.contains(line) { ' ' } else { '-' }, text: line.clone() })
        .collect();
    lines.extend(new.iter().filter(|l| !old.contains(l)).map(|l| DiffLine { mark: '+', text: l.clone() }));
    lines
}

#[derive(Template)]
#[template(path = "admin/confirm_policy.html")]
struct ConfirmPolicyPage {
    person: String,
    csrf: String,
    tenant_id: String,
    version: i64,
    /// What changes beside the lists, in words.
    changes: Vec<String>,
    allow: Vec<DiffLine>,
    deny: Vec<DiffLine>,
    /// The form, carried to the confirmation as sent.
    mode: &'static str,
    default_methods: String,
    allow_text: String,
    deny_text: String,
    dry_run: bool,
}

/// `POST /admin/tenants/{t}/policy`: the policy as edited, checked, and its
/// change against the current version shown before anything is saved.
pub async fn save_policy(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    submitted: Submitted<PolicyForm>,
) -> Result<Response, PageError> {
    let tenant_id = tenant_path(path)?;
    let Submitted { person, form } = submitted;
    let version = version_of(&form.version)?;
    let mode = mode_of(&form)?;
    let doc = match checked_document(&form, mode) {
        Ok(doc) => doc,
        Err(detail) => {
            let extras = Extras {
                notice: Notice::error(format!("Not saved: {detail}")),
                policy_form: form.as_sent(mode),
                ..Extras::default()
            };
            return render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await;
        }
    };
    let store = state.plane.store().map_err(|e| plane_failure(&person.rid, e))?;
    let current = store.current_policy(&tenant_id).await.map_err(|e| store_failure(&person.rid, e))?;
    let old = current
        .as_ref()
        .and_then(|p| serde_json::from_str::<PolicyDocument>(&p.document).ok())
        .unwrap_or_default();
    let texts = |entries: &[Entry]| entries.iter().map(ToString::to_string).collect::<Vec<_>>();
    let mut changes = Vec::new();
    if old.mode != doc.mode || current.is_none() {
        changes.push(format!("Mode: {}", if mode == Mode::Open { "open" } else { "allowlist" }));
    }
    if old.default_methods != doc.default_methods {
        changes.push(match &doc.default_methods {
            Some(methods) => format!("Default methods: {}", methods.join(" ")),
            None => "Default methods: none (every method)".to_owned(),
        });
    }
    if old.dry_run != doc.dry_run {
        changes.push(if doc.dry_run { "Dry run: on" } else { "Dry run: off" }.to_owned());
    }
    let confirm = ConfirmPolicyPage {
        csrf: person.csrf(),
        person: person.actor,
        tenant_id,
        version,
        changes,
        allow: diff(&texts(&old.allow), &texts(&doc.allow)),
        deny: diff(&texts(&old.deny), &texts(&doc.deny)),
        mode: if mode == Mode::Open { "open" } else { "allowlist" },
        default_methods: form.default_methods,
        allow_text: form.allow,
        deny_text: form.deny,
        dry_run: doc.dry_run,
    };
    Ok(page(StatusCode::OK, &confirm))
}

/// `POST /admin/tenants/{t}/policy/confirm`: saves the policy shown, if it
/// is still the version the person edited (or takes them back to editing).
pub async fn confirm_policy(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    submitted: Submitted<PolicyForm>,
) -> Result<Response, PageError> {
    let tenant_id = tenant_path(path)?;
    let Submitted { person, form } = submitted;
    let version = version_of(&form.version)?;
    let mode = mode_of(&form)?;
    let not_saved = |notice| Extras { notice, policy_form: form.as_sent(mode), ..Extras::default() };
    if form.action == "edit" {
        let extras = not_saved(None);
        return render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await;
    }
    let doc = match checked_document(&form, mode) {
        Ok(doc) => doc,
        Err(detail) => {
            let extras = not_saved(Notice::error(format!("Not saved: {detail}")));
            return render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await;
        }
    };
    match state.plane.set_policy(&person.rid.0, &tenant_id, &doc, &person.actor, Some(version)).await {
        Ok(stored) => {
            let extras = Extras {
                notice: Notice::ok(format!("Policy saved as version {}.", stored.version)),
                ..Extras::default()
            };
            render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await
        }
        Err(PlaneError::Conflict(Some(Reason::PolicyStale))) => {
            let extras = not_saved(Notice::error(
                "Not saved: the policy changed since this page was loaded (shown below as it is now). Your edit is kept in the form: check it against the current policy and save again.",
            ));
            // The version in the form is the current one now, so a second
            // save is a deliberate overwrite of what the person has seen.
            render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await
        }
        Err(e) => Err(plane_failure(&person.rid, e)),
    }
}

#[derive(Deserialize)]
pub struct TestForm {
    #[serde(default)]
    url: String,
    /// The request's method, for the policy's method and path rules [GET].
    #[serde(default)]
    method: String,
}

/// Runs the door's decision for a URL under the tenant's stored policy,
/// connecting nowhere.
pub async fn test_url(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    submitted: Submitted<TestForm>,
) -> Result<Response, PageError> {
    let tenant_id = tenant_path(path)?;
    let Submitted { person, form } = submitted;
    let url = form.url.trim().to_owned();
    if url.len() > 8192 {
        return Err(PageError::Bad("a URL is at most 8192 characters"));
    }
    let store = state.plane.store().map_err(|e| plane_failure(&person.rid, e))?;
    let current = store.current_policy(&tenant_id).await.map_err(|e| store_failure(&person.rid, e))?;
    let policy = match &current {
        Some(p) => Policy::from_json(p.document.as_bytes()),
        None => Ok(Policy::open()),
    };
    let method = match form.method.trim() {
        "" => http::Method::GET,
        m => http::Method::from_bytes(m.as_bytes())
            .map_err(|_| PageError::Bad("that is not an HTTP method"))?,
    };
    let now = state.plane.clock.now();
    let decision =
        check(&state, &url, policy.as_ref(), now).await.with_request(policy.as_ref(), &method, now);
    let test = TestView {
        verdict: if decision.allowed() { "allow" } else { "refuse" },
        reason: decision.reason.clone(),
        rule: decision.rule.clone(),
        rule_reason: decision.rule_reason.clone(),
        host: decision.host.clone(),
        port: decision.port,
        addresses: decision.addresses.iter().map(IpAddr::to_string).collect(),
        dry_run: decision.dry_run_would_refuse.as_ref().map(|d| match &d.rule {
            Some(rule) => format!("{}, by rule {rule}", d.reason.as_str()),
            None => d.reason.as_str().to_owned(),
        }),
    };
    let extras =
        Extras { test_url: url, test_method: method.to_string(), test: Some(test), ..Extras::default() };
    render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await
}

/// The door's decision without connecting, looking the name up with this
/// node's resolver only when everything before the lookup allows it, as
/// the door does.
async fn check(
    state: &AppState,
    url: &str,
    policy: Result<&Policy, &gatehouse_egress::PolicyError>,
    now: gatehouse_core::UnixTime,
) -> Decision {
    let Ok(target) = parse_url(url) else {
        return gatehouse_egress::decide(
            url,
            policy,
            &state.egress_guard,
            Purpose::Request,
            now,
            |_| Err(()),
        );
    };
    let resolver = &state.resolver;
    decide_target_resolving(target, policy, &state.egress_guard, Purpose::Request, now, async |name: &str| {
        resolver.resolve(name).await
    })
    .await
}

// ---- one-click Allow ----

#[derive(Deserialize)]
pub struct AllowForm {
    #[serde(default)]
    host: String,
    #[serde(default)]
    version: String,
}

#[derive(Template)]
#[template(path = "admin/confirm_allow.html")]
struct ConfirmAllowPage {
    person: String,
    csrf: String,
    tenant_id: String,
    host: String,
    version: i64,
    unchanged: Vec<String>,
}

/// The current policy document and version, readable, or why not.
async fn current_document(
    state: &AppState,
    person: &Person,
    tenant_id: &str,
) -> Result<(PolicyDocument, i64), PageError> {
    let store = state.plane.store().map_err(|e| plane_failure(&person.rid, e))?;
    match store.current_policy(tenant_id).await.map_err(|e| store_failure(&person.rid, e))? {
        None => Ok((PolicyDocument::default(), 0)),
        Some(p) => match serde_json::from_str::<PolicyDocument>(&p.document) {
            Ok(doc) => Ok((doc, p.version)),
            Err(_) => {
                Err(PageError::Bad("the stored policy is unreadable: replace it in the policy form first"))
            }
        },
    }
}

/// What allowing a host works from: the current policy, if it is still
/// the version the person saw (else the tenant page saying so), and the
/// host as the narrowest entry, if the policy refuses it as not allowed.
enum AllowStep {
    Ready { doc: PolicyDocument, version: i64, host: String },
    Stale(Response),
}

async fn allow_step(
    state: &AppState,
    person: &Person,
    tenant_id: &str,
    form: &AllowForm,
) -> Result<AllowStep, PageError> {
    let seen_version = version_of(&form.version)?;
    let (doc, version) = current_document(state, person, tenant_id).await?;
    if version != seen_version {
        let extras = Extras {
            notice: Notice::error(
                "Not saved: the policy changed since this page was loaded. Look at it again before allowing a host.",
            ),
            ..Extras::default()
        };
        return Ok(AllowStep::Stale(
            render_tenant(state, person, tenant_id, RefusalQuery::default(), extras).await?,
        ));
    }
    let policy =
        Policy::from_document(&doc).map_err(|_| PageError::Bad("the stored policy is unreadable"))?;
    let Some(host) = allowable(Some(&policy), form.host.trim(), state.plane.clock.now()) else {
        return Err(PageError::Bad("that host is not one the policy refuses as not allowed"));
    };
    Ok(AllowStep::Ready { doc, version, host })
}

/// Shows what allowing the host changes, before anything is saved.
pub async fn preview_allow(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    submitted: Submitted<AllowForm>,
) -> Result<Response, PageError> {
    let tenant_id = tenant_path(path)?;
    let Submitted { person, form } = submitted;
    let (doc, version, host) = match allow_step(&state, &person, &tenant_id, &form).await? {
        AllowStep::Ready { doc, version, host } => (doc, version, host),
        AllowStep::Stale(page) => return Ok(page),
    };
    let confirm = ConfirmAllowPage {
        csrf: person.csrf(),
        person: person.actor,
        tenant_id,
        host,
        version,
        unchanged: doc.allow.iter().map(ToString::to_string).collect(),
    };
    Ok(page(StatusCode::OK, &confirm))
}

/// Saves the policy with the host added, if it is still the version shown.
pub async fn confirm_allow(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    submitted: Submitted<AllowForm>,
) -> Result<Response, PageError> {
    let tenant_id = tenant_path(path)?;
    let Submitted { person, form } = submitted;
    let (mut doc, version, host) = match allow_step(&state, &person, &tenant_id, &form).await? {
        AllowStep::Ready { doc, version, host } => (doc, version, host),
        AllowStep::Stale(page) => return Ok(page),
    };
    doc.allow.push(Entry::host(host.clone()));
    let stored = state
        .plane
        .set_policy(&person.rid.0, &tenant_id, &doc, &person.actor, Some(version))
        .await
        .map_err(|e| plane_failure(&person.rid, e))?;
    let extras = Extras {
        notice: Notice::ok(format!("{host} is allowed (policy version {}).", stored.version)),
        ..Extras::default()
    };
    render_tenant(&state, &person, &tenant_id, RefusalQuery::default(), extras).await
}

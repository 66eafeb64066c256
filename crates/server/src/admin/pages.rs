//! The pages: what each shows (sign-in, the tenants, a tenant's page with
//! its policy, gate, scans, runs, leases and refusals). Reads are bounded
//! (one page of each list). The forms behind them are `policy` and
//! `actions`.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use gatehouse_core::{Reason, RefusalKind, UnixTime, is_valid_id};
use gatehouse_egress::policy::Mode;
use gatehouse_egress::{Policy, PolicyDocument, parse_url};
use gatehouse_plane::credential_kinds::Stored;
use gatehouse_store::{Credential, LeaseFilter, LeaseStatus, PageRequest, RefusalFilter, RunStatus};
use http::StatusCode;
use serde::Deserialize;

use super::{PageError, Person, page, plane_failure, query_of, store_failure, tenant_path};
use crate::state::AppState;

/// A line at the top of a page: what just happened.
pub struct Notice {
    /// `ok` or `error` (a style).
    pub kind: &'static str,
    /// What to say.
    pub text: String,
}

impl Notice {
    pub(super) fn ok(text: impl Into<String>) -> Option<Self> {
        Some(Self { kind: "ok", text: text.into() })
    }
    pub(super) fn error(text: impl Into<String>) -> Option<Self> {
        Some(Self { kind: "error", text: text.into() })
    }
}

/// What a refusal or failure means for the person looking at it.
pub fn explain(reason: Option<Reason>) -> Option<&'static str> {
    Some(match reason? {
        Reason::PolicyStale => {
            "The policy changed since this page was loaded. Nothing was overwritten: reload the page, look at the current policy and make your change again."
        }
        Reason::StoreUnavailable => "The store does not answer: nothing was changed. Try again shortly.",
        Reason::LedgerUnavailable => "The ledger does not answer: nothing was revoked. Try again shortly.",
        Reason::RunUnknown => "There is no such run.",
        Reason::RunNotLive => "That run is no longer live.",
        Reason::TenantKillSwitch => "This tenant's kill switch is engaged.",
        Reason::LeaseHostMismatch => "The URL is not on the credential's host: nothing was sent.",
        Reason::LeasePlainHttp => {
            "The credential goes over HTTPS only (it was not stored with allow_plain_http): nothing was sent."
        }
        Reason::LeasePurposeMismatch => "A webhook signing secret signs deliveries; it is never sent.",
        Reason::CredentialUnknown => "There is no such credential in this tenant.",
        Reason::CredentialUseRateLimited => {
            "This tenant used its stored credentials for people too often in the last minute: try again shortly."
        }
        Reason::PolicyNotAllowed => "The tenant's egress policy does not allow this host.",
        Reason::ProposalNotPending => "That proposal was decided already, or has expired.",
        Reason::ProposalUnknown => "There is no such proposal.",
        Reason::PolicyDenied => "The tenant's egress policy denies this host.",
        _ => return None,
    })
}

/// `2026-12-04 19:30:05Z` for a time in seconds since the epoch.
pub fn when(at: UnixTime) -> String {
    let t = gatehouse_core::CivilTime::of(at);
    format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z", t.year, t.month, t.day, t.hour, t.minute, t.second)
}

// ---- sign-in ----

#[derive(Template)]
#[template(path = "admin/login.html")]
struct LoginPage<'a> {
    notice: Option<Notice>,
    person: &'a str,
}

/// The sign-in page with a message.
pub fn login(status: StatusCode, text: &str, person: &str) -> Response {
    page(status, &LoginPage { notice: Notice::error(text), person })
}

#[derive(Deserialize)]
pub struct LoginQuery {
    #[serde(default)]
    expired: Option<String>,
}

pub async fn login_page(query: Result<Query<LoginQuery>, QueryRejection>) -> Response {
    let expired = query.is_ok_and(|Query(q)| q.expired.is_some());
    let notice = if expired { Notice::error("Your session has ended. Sign in again.") } else { None };
    page(StatusCode::OK, &LoginPage { notice, person: "" })
}

/// A message on a page of its own.
#[derive(Template)]
#[template(path = "admin/message.html")]
pub struct MessagePage {
    pub heading: &'static str,
    pub text: String,
    pub code: Option<String>,
    pub request_id: Option<String>,
    pub back: &'static str,
}

// ---- the tenant list ----

struct TenantRow {
    tenant_id: String,
    policy: String,
    gate_mode: String,
    kill_switch: bool,
}

#[derive(Template)]
#[template(path = "admin/index.html")]
struct IndexPage {
    person: String,
    csrf: String,
    tenants: Vec<TenantRow>,
}

/// The tenants with settings, and a way to open any tenant.
pub async fn index(State(state): State<AppState>, person: Person) -> Result<Response, PageError> {
    let store = state.plane.store().map_err(|e| plane_failure(&person.rid, e))?;
    let (_, tenants) = store.settings_since(0).await.map_err(|e| store_failure(&person.rid, e))?;
    let tenants = tenants
        .into_iter()
        .map(|t| TenantRow {
            policy: match &t.policy {
                Some(p) => match serde_json::from_str::<PolicyDocument>(&p.document) {
                    Ok(doc) => format!("{} (version {})", mode_name(doc.mode), p.version),
                    Err(_) => format!("unreadable (version {})", p.version),
                },
                // Its current version is gone from the store: the door
                // refuses the tenant's requests, so the page never says open.
                None if t.policy_missing => "unreadable (its current version is missing)".to_owned(),
                None => "open (never set)".to_owned(),
            },
            tenant_id: t.tenant_id,
            gate_mode: t.gate_mode,
            kill_switch: t.kill_switch,
        })
        .collect();
    Ok(page(StatusCode::OK, &IndexPage { csrf: person.csrf(), person: person.actor, tenants }))
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Open => "open",
        Mode::Allowlist => "allowlist",
    }
}

#[derive(Deserialize)]
pub struct OpenTenant {
    tenant_id: String,
}

pub async fn open_tenant(
    _person: Person,
    query: Result<Query<OpenTenant>, QueryRejection>,
) -> Result<Response, PageError> {
    let q = query_of(query)?;
    let id = q.tenant_id.trim();
    if !is_valid_id(id) {
        return Err(PageError::Bad("a tenant id is 1-128 characters of letters, digits, ., _, : and -"));
    }
    Ok(Redirect::to(&format!("/admin/tenants/{id}")).into_response())
}

// ---- one tenant ----

struct PolicyView {
    version: i64,
    actor: Option<String>,
    created_at: String,
    mode: &'static str,
    default_methods: String,
    allow: String,
    deny: String,
    dry_run: bool,
    unreadable: Option<String>,
    /// Rules past their expiry, ignored by the door.
    expired: Vec<String>,
    /// The presets the policy names, each with the hosts it stands for.
    presets: Vec<(String, String)>,
}

/// A policy form as the person submitted it, shown again when it is not saved.
pub(super) struct SubmittedPolicy {
    pub(super) mode: Mode,
    pub(super) default_methods: String,
    pub(super) allow: String,
    pub(super) deny: String,
    pub(super) dry_run: bool,
}

pub(super) struct TestView {
    pub(super) verdict: &'static str,
    pub(super) reason: String,
    pub(super) rule: Option<String>,
    pub(super) rule_reason: Option<String>,
    pub(super) host: Option<String>,
    pub(super) port: Option<u16>,
    pub(super) addresses: Vec<String>,
    pub(super) dry_run: Option<String>,
}

/// A credential as its row on the page shows it (never its secret).
pub struct CredentialView {
    pub credential_id: String,
    pub name: String,
    pub purpose: String,
    /// `static`, `github_app`, `oauth2_refresh` or `aws_sigv4`.
    pub kind: &'static str,
    /// For a minted kind, when the current token expires (or that none is).
    pub token_expires: Option<String>,
    /// Its hosts, `, `-separated.
    pub host: String,
    pub fingerprint: String,
    /// The URL its Test form starts with: the first host's root.
    pub test_url: String,
    /// A signing secret signs deliveries and is never sent: no Test.
    pub testable: bool,
}

impl CredentialView {
    pub fn of(c: &Credential) -> Self {
        let stored = Stored::read(&c.inject);
        let plain = stored.as_ref().is_some_and(|s| s.allow_plain_http);
        let first_host = c.hosts().next().unwrap_or_default();
        Self {
            credential_id: c.credential_id.clone(),
            name: c.name.clone(),
            purpose: c.purpose.clone(),
            kind: stored.as_ref().map_or("unreadable", |s| s.kind.name()),
            token_expires: None,
            host: c.hosts().collect::<Vec<_>>().join(", "),
            fingerprint: c.fingerprint.clone(),
            test_url: format!("{}://{first_host}/", if plain { "http" } else { "https" }),
            testable: c.purpose != "webhook_signing",
        }
    }
}

/// What a test answered, as the page shows it.
pub struct CredentialTestView {
    pub credential_id: String,
    pub url: String,
    /// The upstream's status, when the request went out and came back.
    pub status: Option<u16>,
    /// Why not, when it did not: a reason code and what it means.
    pub refused: Option<(String, String)>,
    pub headers: Vec<(String, String)>,
    /// The body's first [`super::credentials::BODY_SHOWN`] bytes, as text.
    pub body: String,
    pub body_cut: bool,
}

/// A pending egress proposal as its row shows it.
struct ProposalView {
    proposal_id: String,
    run_id: String,
    rule: String,
    why: String,
    created_at: String,
}

struct Candidate {
    host: String,
    why: String,
}

struct FindingView {
    id: String,
    link: Option<String>,
    package: String,
    severity: String,
    summary: String,
}

struct ScanView {
    repository: String,
    pull_request: i64,
    head_sha: String,
    status: String,
    created_at: String,
    findings: Vec<FindingView>,
}

struct ScannerView {
    configured: bool,
    address: String,
    reachable: bool,
    reason: String,
    version: String,
    signatures: String,
}

struct RunView {
    run_id: String,
    user_id: String,
    status: &'static str,
    end: Option<String>,
    created_at: String,
    heartbeat_at: String,
}

struct LeaseView {
    lease_id: String,
    run_id: String,
    credential: String,
    purpose: String,
    host: String,
    expires_at: String,
}

/// One option of a filter's list.
struct Choice {
    value: &'static str,
    selected: bool,
}

impl Choice {
    fn of(value: &'static str, current: &str) -> Self {
        Self { value, selected: value == current }
    }
}

struct RefusalView {
    at: String,
    kind: String,
    reason: String,
    host: Option<String>,
    rule: Option<String>,
    run_id: Option<String>,
    request_id: Option<String>,
    dry_run: bool,
    allow: Option<String>,
}

/// The refusal filters, as the form shows them.
#[derive(Default, Deserialize)]
pub struct RefusalQuery {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    run_id: String,
    #[serde(default)]
    host: String,
    #[serde(default)]
    cursor: String,
}

impl RefusalQuery {
    fn any(&self) -> bool {
        !(self.kind.is_empty() && self.reason.is_empty() && self.run_id.is_empty() && self.host.is_empty())
    }

    /// The store's filter; a value that is not a known code, id or host is
    /// refused rather than silently dropped.
    fn filter(&self, tenant_id: &str) -> Result<RefusalFilter, PageError> {
        let kind = (!self.kind.is_empty()).then(|| self.kind.clone());
        let reason = (!self.reason.is_empty()).then(|| self.reason.clone());
        let run_id = (!self.run_id.trim().is_empty()).then(|| self.run_id.trim().to_owned());
        let host = (!self.host.trim().is_empty()).then(|| self.host.trim().to_ascii_lowercase());
        if kind.as_deref().is_some_and(|k| RefusalKind::parse(k).is_none())
            || reason.as_deref().is_some_and(|r| Reason::parse(r).is_none())
            || run_id.as_deref().is_some_and(|r| !is_valid_id(r))
            || host
                .as_deref()
                .is_some_and(|h| h.len() > 253 || h.chars().any(|c| c.is_control() || c.is_whitespace()))
        {
            return Err(PageError::Bad("a filter is not a known kind, reason, run id or host"));
        }
        Ok(RefusalFilter { tenant_id: Some(tenant_id.to_owned()), run_id, kind, reason, host, since: None })
    }

    /// The query of the next (older) page.
    fn older(&self, cursor: &str) -> String {
        let mut q = form_urlencoded_pairs(&[
            ("kind", &self.kind),
            ("reason", &self.reason),
            ("run_id", &self.run_id),
            ("host", &self.host),
        ]);
        if !q.is_empty() {
            q.push('&');
        }
        q.push_str("cursor=");
        q.push_str(&percent_encode(cursor));
        q
    }
}

fn form_urlencoded_pairs(pairs: &[(&str, &String)]) -> String {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Template)]
#[template(path = "admin/tenant.html")]
struct TenantPage {
    person: String,
    csrf: String,
    tenant_id: String,
    notice: Option<Notice>,
    policy: PolicyView,
    test_url: String,
    test_method: String,
    test: Option<TestView>,
    allow_candidates: Vec<Candidate>,
    proposals: Vec<ProposalView>,
    gate_mode: String,
    scans: Vec<ScanView>,
    scanner: ScannerView,
    runs: Vec<RunView>,
    live_runs: usize,
    leases: Vec<LeaseView>,
    credentials: Vec<CredentialView>,
    /// This node opens credentials (gateway keys): their Test works here.
    tests_credentials: bool,
    credential_test: Option<CredentialTestView>,
    kill_switch: bool,
    kill_reason: Option<String>,
    filter: RefusalQuery,
    kinds: Vec<Choice>,
    reasons: Vec<Choice>,
    refusals: Vec<RefusalView>,
    older: Option<String>,
}

/// What a tenant page shows beyond what it reads: a notice, a test's result,
/// a policy form as the person submitted it.
#[derive(Default)]
pub(super) struct Extras {
    pub(super) notice: Option<Notice>,
    pub(super) test_url: String,
    pub(super) test_method: String,
    pub(super) test: Option<TestView>,
    pub(super) policy_form: Option<SubmittedPolicy>,
    pub(super) credential_test: Option<CredentialTestView>,
}

/// How many of each list a page shows.
const RUNS_SHOWN: u32 = 25;
const LEASES_SHOWN: u32 = 100;
const SCANS_READ: u32 = 100;
const REFUSALS_SHOWN: u32 = 50;
const PROPOSALS_SHOWN: u32 = 100;
/// The tenant's newest refusals read for Allow candidates.
const REFUSALS_FOR_ALLOW: u32 = 500;

pub(super) async fn render_tenant(
    state: &AppState,
    person: &Person,
    tenant_id: &str,
    query: RefusalQuery,
    extras: Extras,
) -> Result<Response, PageError> {
    let rid = &person.rid;
    let store = state.plane.store().map_err(|e| plane_failure(rid, e))?;
    let fail = |e: gatehouse_store::StoreError| store_failure(rid, e);
    let now = state.plane.clock.now();
    // What this node recorded a moment ago is on the page, or the page
    // says it may not be.
    let complete = state.plane.flush().await;
    let settings = store.tenant(tenant_id).await.map_err(fail)?;
    let missing = settings.as_ref().is_some_and(|t| t.policy_missing);
    let (policy_view, policy) = match settings.as_ref().and_then(|t| t.policy.as_ref()) {
        None => {
            // Never set: the documented default, open. Set, but its current
            // version gone from the store: the door refuses the tenant, and
            // the form to replace it starts from the closed mode.
            let policy = if missing {
                Err(gatehouse_egress::PolicyError::unreadable(
                    "its current version is missing from the store",
                ))
            } else {
                Ok(Policy::open())
            };
            let view = PolicyView {
                version: 0,
                actor: None,
                created_at: String::new(),
                mode: if missing { "allowlist" } else { "open" },
                default_methods: String::new(),
                allow: String::new(),
                deny: String::new(),
                dry_run: false,
                unreadable: policy.as_ref().err().map(|e| e.detail.clone()),
                expired: Vec::new(),
                presets: Vec::new(),
            };
            (view, policy)
        }
        Some(p) => {
            let doc = serde_json::from_str::<PolicyDocument>(&p.document).ok();
            let policy = Policy::from_json(p.document.as_bytes());
            let doc = doc.unwrap_or_default();
            (
                PolicyView {
                    version: p.version,
                    actor: Some(p.actor.clone()),
                    created_at: when(p.created_at),
                    mode: mode_name(doc.mode),
                    default_methods: doc.default_methods.as_deref().unwrap_or_default().join(" "),
                    allow: lines(&doc.allow),
                    deny: lines(&doc.deny),
                    dry_run: doc.dry_run,
                    unreadable: policy.as_ref().err().map(|e| e.detail.clone()),
                    expired: policy.as_ref().map(|p| p.expired(now)).unwrap_or_default(),
                    presets: presets_named(&doc),
                },
                policy,
            )
        }
    };
    let mut policy_view = policy_view;
    if let Some(form) = extras.policy_form {
        policy_view.default_methods = form.default_methods;
        policy_view.allow = form.allow;
        policy_view.deny = form.deny;
        policy_view.mode = mode_name(form.mode);
        policy_view.dry_run = form.dry_run;
    }

    // Hosts the tenant needs that its policy does not allow: refused as
    // not allowed lately, or reached by its credentials.
    let mut candidates: BTreeMap<String, String> = BTreeMap::new();
    // "Lately": among the tenant's newest refusals, whatever their reason,
    // so the page reads a bounded stretch of one index however many
    // refusals are stored.
    let tenants = RefusalFilter { tenant_id: Some(tenant_id.to_owned()), ..RefusalFilter::default() };
    let recent = store
        .refusals(&tenants, &PageRequest { limit: REFUSALS_FOR_ALLOW, cursor: None })
        .await
        .map_err(fail)?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let not_allowed =
        recent.items.iter().filter(|e| e.event.reason.as_deref() == Some(Reason::PolicyNotAllowed.as_str()));
    for event in not_allowed {
        if let Some(host) = event.event.host.as_deref().and_then(|h| allowable(policy.as_ref().ok(), h, now))
        {
            *counts.entry(host).or_default() += 1;
        }
    }
    for (host, n) in counts {
        candidates.insert(host, format!("refused {n} time(s) lately as not allowed"));
    }
    let credentials =
        store.credentials(Some(tenant_id), &PageRequest { limit: 500, cursor: None }).await.map_err(fail)?;
    for c in &credentials.items {
        if let Some(host) = allowable(policy.as_ref().ok(), &c.host, now) {
            candidates.entry(host).or_insert_with(|| format!("the credential {} reaches it", c.name));
        }
    }
    let allow_candidates: Vec<Candidate> =
        candidates.into_iter().map(|(host, why)| Candidate { host, why }).collect();
    let allow_set: std::collections::BTreeSet<&str> =
        allow_candidates.iter().map(|c| c.host.as_str()).collect();

    let pending = store
        .proposals(tenant_id, Some("pending"), now, &PageRequest { limit: PROPOSALS_SHOWN, cursor: None })
        .await
        .map_err(fail)?;
    let scans = newest_scans(store, tenant_id).await.map_err(fail)?;
    let scanner = scanner_view(state).await;

    let runs = store
        .runs(Some(tenant_id), None, &PageRequest { limit: RUNS_SHOWN, cursor: None })
        .await
        .map_err(fail)?;
    let live_runs = store
        .runs(Some(tenant_id), Some(RunStatus::Live), &PageRequest { limit: 500, cursor: None })
        .await
        .map_err(fail)?;
    let leases = store
        .leases(
            &LeaseFilter {
                tenant_id: Some(tenant_id.to_owned()),
                status: Some(LeaseStatus::Live),
                ..LeaseFilter::default()
            },
            &PageRequest { limit: LEASES_SHOWN, cursor: None },
            now,
        )
        .await
        .map_err(fail)?;
    let names: BTreeMap<&str, &str> =
        credentials.items.iter().map(|c| (c.credential_id.as_str(), c.name.as_str())).collect();

    let filter = query.filter(tenant_id)?;
    let cursor = (!query.cursor.is_empty()).then(|| query.cursor.clone());
    if cursor.as_deref().is_some_and(|c| c.len() > 64 || !c.bytes().all(|b| b.is_ascii_digit())) {
        return Err(PageError::Bad("that page of refusals does not exist"));
    }
    let refusals =
        store.refusals(&filter, &PageRequest { limit: REFUSALS_SHOWN, cursor }).await.map_err(fail)?;
    let older = refusals.next_cursor.as_deref().map(|c| query.older(c));

    let template = TenantPage {
        person: person.actor.clone(),
        csrf: person.csrf(),
        tenant_id: tenant_id.to_owned(),
        notice: extras.notice.or_else(|| {
            (!complete).then(|| Notice {
                kind: "error",
                text: "The store is slow: the latest refusals may not be listed yet. Reload the page to see them."
                    .to_owned(),
            })
        }),
        policy: policy_view,
        test_url: extras.test_url,
        test_method: extras.test_method,
        test: extras.test,
        gate_mode: settings.as_ref().map_or_else(|| "high".to_owned(), |t| t.gate_mode.clone()),
        kill_switch: settings.as_ref().is_some_and(|t| t.kill_switch),
        kill_reason: settings.as_ref().and_then(|t| t.kill_switch_reason.clone()),
        scans,
        scanner,
        live_runs: live_runs.items.len(),
        runs: runs
            .items
            .iter()
            .map(|r| RunView {
                run_id: r.run_id.clone(),
                user_id: r.user_id.clone(),
                status: r.status.as_str(),
                end: r.end_reason.as_ref().map(|why| match &r.ended_by {
                    Some(by) => format!("{why}, by {by}"),
                    None => why.clone(),
                }),
                created_at: when(r.created_at),
                heartbeat_at: when(r.heartbeat_at),
            })
            .collect(),
        leases: leases
            .items
            .iter()
            .map(|l| LeaseView {
                lease_id: l.lease_id.clone(),
                run_id: l.run_id.clone(),
                credential: names
                    .get(l.credential_id.as_str())
                    .map_or_else(|| l.credential_id.clone(), |n| (*n).to_owned()),
                purpose: l.purpose.clone(),
                host: l.host.clone(),
                expires_at: when(l.expires_at),
            })
            .collect(),
        credentials: {
            let mut views: Vec<CredentialView> = credentials.items.iter().map(CredentialView::of).collect();
            // A minted kind: when the fleet's current token expires, never the token.
            for view in views.iter_mut().filter(|v| matches!(v.kind, "github_app" | "oauth2_refresh")) {
                let expires = match state.plane.store.as_ref() {
                    Some(store) => gatehouse_plane::mint::Minter::expires_at(store, &view.credential_id).await,
                    None => None,
                };
                view.token_expires = Some(expires.map_or_else(|| "no token minted now".to_owned(), when));
            }
            views
        },
        tests_credentials: state.plane.uses_credentials(),
        credential_test: extras.credential_test,
        refusals: refusals
            .items
            .iter()
            .map(|e| {
                let ev = &e.event;
                let allow = (ev.reason.as_deref() == Some(Reason::PolicyNotAllowed.as_str()))
                    .then(|| ev.host.as_deref().and_then(|h| allowable(policy.as_ref().ok(), h, now)))
                    .flatten()
                    .filter(|h| allow_set.contains(h.as_str()));
                RefusalView {
                    at: when(ev.at),
                    kind: ev.kind.clone(),
                    reason: ev.reason.clone().unwrap_or_default(),
                    host: ev.host.clone(),
                    rule: ev.rule.clone(),
                    run_id: ev.run_id.clone(),
                    request_id: ev.request_id.clone(),
                    dry_run: ev.dry_run,
                    allow,
                }
            })
            .collect(),
        kinds: RefusalKind::ALL.iter().map(|k| Choice::of(k.as_str(), &query.kind)).collect(),
        reasons: Reason::ALL.iter().map(|r| Choice::of(r.as_str(), &query.reason)).collect(),
        filter: query,
        older,
        allow_candidates,
        proposals: pending
            .items
            .into_iter()
            .map(|p| ProposalView {
                proposal_id: p.proposal_id,
                run_id: p.run_id,
                rule: p.rule,
                why: p.why,
                created_at: when(p.created_at),
            })
            .collect(),
    };
    Ok(page(StatusCode::OK, &template))
}

/// The presets `doc` names, each with the hosts it stands for.
fn presets_named(doc: &PolicyDocument) -> Vec<(String, String)> {
    let mut named: Vec<(String, String)> = Vec::new();
    for entry in doc.allow.iter().chain(&doc.deny) {
        let gatehouse_egress::policy::Entry::Object(object) = entry else { continue };
        let Some(name) = object.get("preset").and_then(serde_json::Value::as_str) else { continue };
        if named.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(preset) = gatehouse_egress::policy::presets::find(name) {
            named.push((name.to_owned(), preset.entries.join(", ")));
        }
    }
    named
}

/// A policy's entries as the form shows them: one per line, a rule object
/// as its JSON.
fn lines(entries: &[gatehouse_egress::policy::Entry]) -> String {
    entries.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

/// `host` as the narrowest allow entry, if it is a host name the policy
/// refuses as not allowed (not one it allows, denies, or cannot read).
pub(super) fn allowable(policy: Option<&Policy>, host: &str, now: UnixTime) -> Option<String> {
    let policy = policy?;
    let Ok(gatehouse_egress::Host::Name(name)) = gatehouse_egress::target::parse_host(host) else {
        return None;
    };
    let target = parse_url(&format!("https://{name}/")).ok()?;
    match policy.check_host(&target, now) {
        Err(refusal) if refusal.reason == Reason::PolicyNotAllowed => Some(name),
        _ => None,
    }
}

/// The newest scan of each pull request, newest first.
async fn newest_scans(
    store: &gatehouse_store::Store,
    tenant_id: &str,
) -> Result<Vec<ScanView>, gatehouse_store::StoreError> {
    let scans = store.scans(tenant_id, None, None, &PageRequest { limit: SCANS_READ, cursor: None }).await?;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for scan in scans.items {
        if !seen.insert((scan.repository.clone(), scan.pull_request)) {
            continue;
        }
        let report: serde_json::Value = serde_json::from_str(&scan.report).unwrap_or_default();
        let findings = report["findings"]
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|f| {
                        let id = f["id"].as_str().unwrap_or_default().to_owned();
                        FindingView {
                            link: is_valid_id(&id).then(|| format!("https://osv.dev/vulnerability/{id}")),
                            package: format!(
                                "{} {} ({})",
                                f["package"]["name"].as_str().unwrap_or_default(),
                                f["package"]["version"].as_str().unwrap_or_default(),
                                f["package"]["ecosystem"].as_str().unwrap_or_default(),
                            ),
                            severity: f["severity"].as_str().unwrap_or("unknown").to_owned(),
                            summary: f["summary"].as_str().unwrap_or_default().to_owned(),
                            id,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(ScanView {
            repository: scan.repository,
            pull_request: scan.pull_request,
            head_sha: scan.head_sha,
            status: scan.status,
            created_at: when(scan.created_at),
            findings,
        });
    }
    Ok(out)
}

async fn scanner_view(state: &AppState) -> ScannerView {
    let Some(clamd) = state.content.clamd() else {
        return ScannerView {
            configured: false,
            address: String::new(),
            reachable: false,
            reason: String::new(),
            version: String::new(),
            signatures: String::new(),
        };
    };
    let (reachable, reason, version, signatures) = match clamd.version().await {
        // `ClamAV 1.4.3/27480/Wed Dec  2 09:45:02 2026`: the engine, the
        // signature database's version and its date.
        Ok(reply) => {
            let mut parts = reply.splitn(3, '/');
            let engine = parts.next().unwrap_or_default().to_owned();
            let db = parts.next().map(str::to_owned);
            let date = parts.next().map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "));
            let signatures = match (db, date) {
                (Some(db), Some(date)) => format!("version {db}, dated {date}"),
                _ => "unknown".to_owned(),
            };
            (true, String::new(), engine, signatures)
        }
        Err(e) => (false, e.reason().as_str().to_owned(), "unknown".to_owned(), "unknown".to_owned()),
    };
    ScannerView { configured: true, address: clamd.describe(), reachable, reason, version, signatures }
}

pub async fn tenant_page(
    State(state): State<AppState>,
    person: Person,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<RefusalQuery>, QueryRejection>,
) -> Result<Response, PageError> {
    let tenant_id = tenant_path(path)?;
    let query = query_of(query)?;
    render_tenant(&state, &person, &tenant_id, query, Extras::default()).await
}

/// Back to the tenant page after a change, with what happened (a redirect,
/// so a reload does not post the form again).
pub(super) fn back_to(tenant_id: &str) -> Response {
    Redirect::to(&format!("/admin/tenants/{tenant_id}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc() {
        assert_eq!(when(0), "1970-01-01 00:00:00Z");
        assert_eq!(when(1_800_000_000), "2027-01-15 08:00:00Z");
        assert_eq!(when(951_782_400), "2000-02-29 00:00:00Z");
        assert_eq!(when(-1), "1969-12-31 23:59:59Z");
    }

    #[test]
    fn only_unreserved_characters_pass_unencoded() {
        assert_eq!(percent_encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
        let q = RefusalQuery { kind: "egress_refused".into(), host: "a&b".into(), ..RefusalQuery::default() };
        assert_eq!(q.older("42"), "kind=egress_refused&host=a%26b&cursor=42");
    }

    #[test]
    fn allow_offers_only_names_the_policy_refuses_as_not_allowed() {
        let policy =
            Policy::from_json(br#"{"mode":"allowlist","allow":["a.example"],"deny":["bad.example"]}"#)
                .unwrap();
        assert_eq!(allowable(Some(&policy), "b.example", 0).as_deref(), Some("b.example"));
        assert_eq!(allowable(Some(&policy), "B.Example.", 0).as_deref(), Some("b.example"));
        assert_eq!(allowable(Some(&policy), "a.example", 0), None, "already allowed");
        assert_eq!(
            allowable(Some(&policy), "bad.example", 0),
            None,
            "denied: Allow cannot override a deny rule"
        );
        assert_eq!(allowable(Some(&policy), "10.0.0.1", 0), None, "addresses are not offered");
        assert_eq!(allowable(Some(&policy), "a/b", 0), None);
        assert_eq!(allowable(Some(&Policy::open()), "b.example", 0), None, "open mode allows it already");
        assert_eq!(allowable(None, "b.example", 0), None, "an unreadable policy offers nothing");
    }
}

//! Callers bound to tenants: the one place that decides which tenant a
//! `/v1` request names or reaches, and whether its caller may act on it.
//!
//! A named caller whose entry carries `tenants = [...]` acts on those
//! tenants only ([`Caller::may_act_on`]). Each route has a [`TenantRule`]
//! saying how it reaches a tenant: by its path (`{tenant_id}`, or a run,
//! lease or grant it names), by what its body or query names (checked by
//! the handler through [`require`]), or by listing (narrowed through
//! [`narrowed`] and [`merged`]). A route with no rule is closed to a bound
//! caller, as an unlisted route needs scope `admin`. Operations on every
//! tenant at once need an unbound caller with scope `admin`
//! ([`Caller::acts_globally`]). A refusal is `403 tenant_not_allowed`,
//! recorded like every other.

use std::collections::HashMap;
use std::future::Future;

use axum::extract::{FromRequestParts as _, MatchedPath, Path, Request};
use gatehouse_core::{ErrorCode, Reason, RefusalKind, is_valid_id};
use gatehouse_ledger::LedgerBackend as _;
use gatehouse_store::{Page, PageRequest, Run};
use http::Method;

use crate::http::{ApiError, Caller, MAX_BODY_BYTES, RequestId, request_id_of, with_reason};
use crate::state::AppState;

/// How a `/v1` route names or reaches a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantRule {
    /// No caller: liveness, readiness, metrics, this API's description.
    Public,
    /// The sandbox's file routes: the run's own grant is the bearer token,
    /// and it reaches exactly what the grant names, in its own tenant.
    BearerGrant,
    /// It reaches no tenant (the content scanner's status).
    None,
    /// `{tenant_id}` in its path.
    Path,
    /// `{run_id}` in its path: the run's tenant.
    Run,
    /// `{lease_id}` in its path: the tenant of the lease's run.
    Lease,
    /// `{grant_id}` in its path: the grant's tenant, as the ledger registered
    /// it (a grant the ledger does not know reaches no tenant a bound caller
    /// may act on).
    Grant,
    /// The run's grant it carries (the body's `grant`, or
    /// `x-gatehouse-grant`): the grant's tenant.
    CarriedGrant,
    /// What its body or query names (a tenant, a run, a token of one),
    /// checked by its handler; a bound caller must name one of its tenants
    /// where the request needs a tenant at all.
    Named,
    /// A list, narrowed to the caller's tenants; a tenant asked for must be
    /// one of them.
    Narrowed,
    /// Every tenant at once: an unbound caller with scope `admin` only.
    Global,
    /// No rule was given: closed to a bound caller.
    Unlisted,
}

/// The tenant rule of a route, by its method and template. A route not
/// listed is [`TenantRule::Unlisted`], so a new route is closed to bound
/// callers until it is given a rule here.
pub fn tenant_rule(method: &Method, template: &str) -> TenantRule {
    if matches!(template, "/healthz" | "/readyz" | "/metrics" | "/openapi.json") {
        return TenantRule::Public;
    }
    let path = template.strip_prefix("/v1").unwrap_or(template);
    match path {
        "/files/{file_id}" | "/sessions/{session_id}/files" | "/sessions/{session_id}/files/{name}" => {
            TenantRule::BearerGrant
        }
        "/content/scanner" => TenantRule::None,
        "/manifests/sign" | "/manifests/verify" | "/grants" | "/grants/open" | "/grants/consume"
        | "/grants/revoke" | "/content/scan" | "/files" => TenantRule::Named,
        "/runs" if method == Method::POST => TenantRule::Named,
        "/runs" | "/leases" | "/refusals" | "/audit" => TenantRule::Narrowed,
        "/egress/fetch" | "/egress/fetch/raw" => TenantRule::CarriedGrant,
        "/grants/{grant_id}/revoke" => TenantRule::Grant,
        "/leases/{lease_id}/revoke" => TenantRule::Lease,
        "/emergency-revoke" => TenantRule::Global,
        p if p == "/runs/{run_id}" || p.starts_with("/runs/{run_id}/") => TenantRule::Run,
        p if p.starts_with("/tenants/{tenant_id}/") => TenantRule::Path,
        _ => TenantRule::Unlisted,
    }
}

/// `403 tenant_not_allowed`, recorded (with the tenant reached, when known).
pub(crate) fn not_allowed(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    tenant: Option<&str>,
) -> ApiError {
    tracing::warn!(request_id = %rid.0, caller = %caller.name, tenant = tenant.unwrap_or("-"),
        "caller bound to tenants refused another tenant");
    state.refusals.record(RefusalKind::AuthRefused, Reason::TenantNotAllowed, tenant, None, Some(&rid.0));
    with_reason(ErrorCode::Refused, rid, Reason::TenantNotAllowed)
}

/// The caller may act on `tenant` (a bound caller never on a request that
/// names none); else `403 tenant_not_allowed`.
pub(crate) fn require(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    tenant: Option<&str>,
) -> Result<(), ApiError> {
    if caller.may_act_on(tenant) { Ok(()) } else { Err(not_allowed(state, rid, caller, tenant)) }
}

/// The caller may act on every tenant at once; else `403 tenant_not_allowed`.
pub(crate) fn require_global(state: &AppState, rid: &RequestId, caller: &Caller) -> Result<(), ApiError> {
    if caller.acts_globally() { Ok(()) } else { Err(not_allowed(state, rid, caller, None)) }
}

/// The run `run_id`, if there is one, after checking the caller may act on
/// its tenant.
pub(crate) async fn reach_run(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    run_id: &str,
) -> Result<Option<Run>, ApiError> {
    let store = crate::control::store(state, rid)?;
    let run = store.run(run_id).await.map_err(|e| crate::control::store_error(rid, &e))?;
    if let Some(run) = &run {
        require(state, rid, caller, Some(&run.tenant_id))?;
    }
    Ok(run)
}

/// The tenant filters a list is read under: what the caller asked for
/// (checked), or, when it asked for none, each of its tenants (an unbound
/// caller: none, so every tenant).
pub(crate) fn narrowed(
    state: &AppState,
    rid: &RequestId,
    caller: &Caller,
    asked: Option<String>,
) -> Result<Vec<Option<String>>, ApiError> {
    match (&caller.tenants, asked) {
        (None, asked) => Ok(vec![asked]),
        (Some(_), Some(asked)) => {
            require(state, rid, caller, Some(&asked))?;
            Ok(vec![Some(asked)])
        }
        (Some(own), None) => Ok(own.iter().cloned().map(Some).collect()),
    }
}

/// One page of a list read once per tenant filter and merged, newest first
/// by `key` (unique across tenants). Each read covers its items down to its
/// own next cursor; the merged page holds only what every read has covered,
/// so no item is skipped or repeated, and its cursor is one of the lists'
/// own (no id of another tenant's item). One filter is one plain read.
pub(crate) async fn merged<T, K, F, Fut>(
    rid: &RequestId,
    filters: Vec<Option<String>>,
    page: &PageRequest,
    key: impl Fn(&T) -> K,
    mut read: F,
) -> Result<Page<T>, ApiError>
where
    K: CursorKey,
    F: FnMut(Option<String>, PageRequest) -> Fut,
    Fut: Future<Output = Result<Page<T>, ApiError>>,
{
    if filters.len() == 1 {
        let filter = filters.into_iter().next().flatten();
        return read(filter, page.clone()).await;
    }
    let mut items = Vec::new();
    // The highest key some read has not covered below: the merged page
    // reaches down to it and no further.
    let mut frontier: Option<(K, String)> = None;
    for filter in filters {
        let got = read(filter, page.clone()).await?;
        items.extend(got.items);
        if let Some(cursor) = got.next_cursor {
            let k = K::from_cursor(&cursor).ok_or_else(|| {
                tracing::error!(request_id = %rid.0, "a list's own cursor does not read back");
                ApiError::new(ErrorCode::Internal, rid)
            })?;
            if frontier.as_ref().is_none_or(|(f, _)| k > *f) {
                frontier = Some((k, cursor));
            }
        }
    }
    items.sort_by_key(|item| std::cmp::Reverse(key(item)));
    if let Some((f, _)) = &frontier {
        items.retain(|item| key(item) >= *f);
    }
    let limit = usize::try_from(page.limit).unwrap_or(usize::MAX);
    if items.len() > limit {
        items.truncate(limit);
        let next_cursor = items.last().map(|last| key(last).as_cursor());
        return Ok(Page { items, next_cursor });
    }
    Ok(Page { items, next_cursor: frontier.map(|(_, cursor)| cursor) })
}

/// A list's sort key and its cursor text (the cursor reads on below it).
pub(crate) trait CursorKey: Ord + Sized {
    /// The cursor that reads on below this key.
    fn as_cursor(&self) -> String;
    /// The key a cursor of the list stands for.
    fn from_cursor(cursor: &str) -> Option<Self>;
}

/// Ids made by gatehouse in creation order (runs, leases).
impl CursorKey for String {
    fn as_cursor(&self) -> String {
        self.clone()
    }
    fn from_cursor(cursor: &str) -> Option<Self> {
        Some(cursor.to_owned())
    }
}

/// Sequence numbers (refusals).
impl CursorKey for i64 {
    fn as_cursor(&self) -> String {
        self.to_string()
    }
    fn from_cursor(cursor: &str) -> Option<Self> {
        cursor.parse().ok()
    }
}

/// Lets `req` through if its caller may act on the tenant its route
/// reaches by its path or the grant it carries; the rest is the handler's
/// ([`TenantRule::Named`], [`TenantRule::Narrowed`]). A caller unbound is
/// let through at once.
pub(crate) async fn gate(state: &AppState, caller: &Caller, req: Request) -> Result<Request, ApiError> {
    if caller.tenants.is_none() {
        return Ok(req);
    }
    let rid = request_id_of(&req);
    let template = req.extensions().get::<MatchedPath>().map_or("", MatchedPath::as_str).to_owned();
    let rule = tenant_rule(req.method(), &template);
    let (mut parts, body) = req.into_parts();
    // The ids as the handlers read them (percent-decoded); one that is not
    // a plain id names no tenant a bound caller may act on.
    let params = Path::<HashMap<String, String>>::from_request_parts(&mut parts, state)
        .await
        .map(|Path(p)| p)
        .unwrap_or_default();
    let param = |name: &str| params.get(name).filter(|v| is_valid_id(v)).cloned();
    let now = state.clock.now();
    let (tenant, body) = match rule {
        TenantRule::Public
        | TenantRule::BearerGrant
        | TenantRule::None
        | TenantRule::Named
        | TenantRule::Narrowed => {
            return Ok(Request::from_parts(parts, body));
        }
        TenantRule::Global | TenantRule::Unlisted => (None, body),
        TenantRule::Path => (param("tenant_id"), body),
        TenantRule::Run => {
            let Some(run_id) = param("run_id") else { return Err(not_allowed(state, &rid, caller, None)) };
            let store = crate::control::store(state, &rid)?;
            match store.run(&run_id).await.map_err(|e| crate::control::store_error(&rid, &e))? {
                Some(run) => (Some(run.tenant_id), body),
                // No such run: the handler says so.
                None => return Ok(Request::from_parts(parts, body)),
            }
        }
        TenantRule::Lease => {
            let Some(lease_id) = param("lease_id") else {
                return Err(not_allowed(state, &rid, caller, None));
            };
            let store = crate::control::store(state, &rid)?;
            match store.lease(&lease_id, now).await.map_err(|e| crate::control::store_error(&rid, &e))? {
                Some(lease) => (Some(lease.tenant_id), body),
                None => return Ok(Request::from_parts(parts, body)),
            }
        }
        TenantRule::Grant => {
            let record = match (param("grant_id"), state.ledger.as_ref()) {
                (Some(grant_id), Some(ledger)) => ledger
                    .get(&grant_id)
                    .await
                    .map_err(|reason| with_reason(ErrorCode::Unavailable, &rid, reason))?,
                _ => None,
            };
            (record.and_then(|r| r.registration.tenant_id), body)
        }
        TenantRule::CarriedGrant => {
            let (token, body) = carried_grant(&rid, &template, &parts.headers, body).await?;
            let opened = state
                .sealer
                .as_ref()
                .zip(token)
                .and_then(|(sealer, token)| sealer.open(token.trim(), now).ok());
            match opened {
                Some(claims) => (claims.tenant_id, body),
                // A grant that does not open reaches nothing: the handler
                // refuses it and records why.
                None => return Ok(Request::from_parts(parts, body)),
            }
        }
    };
    if caller.may_act_on(tenant.as_deref()) {
        Ok(Request::from_parts(parts, body))
    } else {
        Err(not_allowed(state, &rid, caller, tenant.as_deref()))
    }
}

/// The grant a fetch carries, and the body to pass on: the raw fetch's
/// `x-gatehouse-grant` (its streamed body untouched), or the JSON fetch's
/// `grant` (its body read, within the cap every JSON body has, and handed
/// on as read; parsed by the same strict parser the handler uses).
async fn carried_grant(
    rid: &RequestId,
    template: &str,
    headers: &http::HeaderMap,
    body: axum::body::Body,
) -> Result<(Option<String>, axum::body::Body), ApiError> {
    if template.ends_with("/raw") {
        let token = headers.get("x-gatehouse-grant").and_then(|v| v.to_str().ok()).map(str::to_owned);
        return Ok((token, body));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::new(ErrorCode::PayloadTooLarge, rid))?;
    let token = gatehouse_capability::canonical::parse_strict(&bytes)
        .ok()
        .and_then(|v| v.get("grant").and_then(serde_json::Value::as_str).map(str::to_owned));
    Ok((token, axum::body::Body::from(bytes)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    /// A list of one tenant's sequence numbers as the store pages it: below
    /// the cursor, newest first, and (like the refusals' bounded walk) a
    /// read of at most `scan` numbers, which may end a page early with a
    /// cursor at its floor.
    fn read_one(seqs: &[i64], page: &PageRequest, scan: usize) -> Page<i64> {
        let before = page.cursor.as_deref().map_or(i64::MAX, |c| c.parse().unwrap());
        let below: Vec<i64> = seqs.iter().copied().filter(|s| *s < before).collect();
        let walked = &below[..below.len().min(scan)];
        let limit = usize::try_from(page.limit).unwrap();
        if walked.len() > limit {
            return Page {
                items: walked[..limit].to_vec(),
                next_cursor: Some(walked[limit - 1].to_string()),
            };
        }
        let floor = (below.len() > walked.len()).then(|| walked.last().map_or(before, |s| *s).to_string());
        Page { items: walked.to_vec(), next_cursor: floor }
    }

    /// Paging through the merge of several tenants' lists yields each item
    /// once, newest first, whatever the page size and however early a
    /// tenant's read stops.
    #[tokio::test]
    async fn merged_pages_hold_every_item_once_in_order() {
        let rid = RequestId("req".into());
        let lists: Vec<Vec<i64>> =
            vec![vec![97, 60, 59, 58, 20, 3], vec![99, 98, 61, 40, 39, 38, 37, 2, 1], vec![], vec![50]];
        let mut everything: Vec<i64> = lists.concat();
        everything.sort_unstable_by(|a, b| b.cmp(a));
        for limit in 1..=7 {
            for scan in [1, 2, 3, 100] {
                let mut seen = Vec::new();
                let mut cursor = None;
                for _ in 0..100 {
                    let page = PageRequest { limit, cursor: cursor.clone() };
                    let filters = (0..lists.len()).map(|i| Some(i.to_string())).collect();
                    let got = merged(
                        &rid,
                        filters,
                        &page,
                        |s: &i64| *s,
                        |tenant, page| {
                            let i: usize = tenant.unwrap().parse().unwrap();
                            let list = lists[i].clone();
                            async move { Ok(read_one(&list, &page, scan)) }
                        },
                    )
                    .await
                    .unwrap();
                    assert!(got.items.len() <= usize::try_from(limit).unwrap());
                    seen.extend(got.items);
                    match got.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                assert_eq!(seen, everything, "limit {limit}, scan {scan}");
            }
        }
    }
}

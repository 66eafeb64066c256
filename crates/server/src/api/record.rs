//! `/v1/refusals` and `/v1/audit`: the durable record, narrowed to what the
//! caller may see.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::response::Response;
use gatehouse_core::{Reason, RefusalKind, is_valid_id};
use gatehouse_store::RefusalFilter;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RouteTable, page, page_limit};
use crate::http::{Answer as _, ApiError, Caller, RequestId, bad_request, record_answer};
use crate::state::AppState;

pub(super) fn routes(table: RouteTable) -> RouteTable {
    use axum::routing::get;
    table.route("/refusals", get(list_refusals)).route("/audit", get(list_audit))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefusalQuery {
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    since: Option<i64>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

/// `GET /v1/refusals`: durable, newest first, paged; narrowed by tenant,
/// run, kind, reason, host and time.
async fn list_refusals(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<RefusalQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Ok(Query(q)) = query else {
        return Err(bad_request(
            &rid,
            "the query may hold tenant_id, run_id, kind, reason, host, since, limit and cursor only",
        ));
    };
    if [&q.tenant_id, &q.run_id].into_iter().flatten().any(|id| !is_valid_id(id)) {
        return Err(bad_request(&rid, "ids are 1-128 characters of [A-Za-z0-9._:-]"));
    }
    if q.kind.as_deref().is_some_and(|k| RefusalKind::parse(k).is_none()) {
        return Err(bad_request(&rid, "kind is not a refusal kind"));
    }
    if q.reason.as_deref().is_some_and(|r| Reason::parse(r).is_none()) {
        return Err(bad_request(&rid, "reason is not a reason code"));
    }
    if q.host
        .as_deref()
        .is_some_and(|h| h.len() > 253 || h.chars().any(|c| c.is_control() || c.is_whitespace()))
    {
        return Err(bad_request(&rid, "host is not a host name"));
    }
    let page = page(&rid, q.limit, q.cursor)?;
    let filter = RefusalFilter {
        tenant_id: q.tenant_id,
        run_id: q.run_id,
        kind: q.kind,
        reason: q.reason,
        since: q.since,
        host: q.host,
    };
    let found = state.plane.refusals(&rid.0, &caller, filter, &page).await.answer(&rid)?;
    let items: Vec<Value> = found
        .read
        .items
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e.as_refusal()).unwrap_or_default();
            if let Some(obj) = v.as_object_mut() {
                obj.insert("seq".into(), json!(e.seq));
                // 1, but for a minute's count of refusals from callers who
                // proved nothing, which also names its listener and client.
                obj.insert("count".into(), json!(e.count));
                if let Some(listener) = &e.listener {
                    obj.insert("listener".into(), json!(listener));
                    obj.insert("client".into(), json!(e.client));
                }
            }
            v
        })
        .collect();
    Ok(record_answer(&rid, found.complete, json!({"items": items, "next_cursor": found.read.next_cursor})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    #[serde(default)]
    after: Option<i64>,
    #[serde(default)]
    limit: Option<u32>,
}

/// `GET /v1/audit?after=SEQ`: the chain in order (a caller bound to tenants
/// reads the entries of its tenants and its own actions).
async fn list_audit(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Ok(Query(q)) = query else {
        return Err(bad_request(&rid, "the query may hold after and limit only"));
    };
    let limit = page_limit(&rid, q.limit, 100)?;
    let audit = state.plane.audit(&caller, q.after.unwrap_or(0), limit).await.answer(&rid)?;
    let (entries, next) = audit.read;
    Ok(record_answer(
        &rid,
        audit.complete,
        json!({"items": entries, "next_cursor": next.map(|seq| seq.to_string())}),
    ))
}

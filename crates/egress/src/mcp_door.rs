//! MCP at the door, its I/O half: a run's request to a declared MCP server
//! read with `gatehouse_mcp`'s rules, each call the rules let through paid
//! as a `tool_call` in the ledger (in order; one the budget cannot pay for
//! is refused `budget_tool_calls_exhausted`, and one the ledger cannot be
//! asked about is refused as the ledger's outage: fail closed), each
//! refused call recorded, and the server's answer narrowed. Both doors use
//! it, so a run meets one set of MCP rules whichever way it goes out.

use bytes::Bytes;
use gatehouse_core::{Reason, Refusal, RefusalKind, UnixTime};
use gatehouse_ledger::{Ledger, Operation, refusal_kind, spend};
use gatehouse_mcp::{SseFilter, ToolRules, filter_json, judge, parse_post};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::Value;

use crate::policy::mcp::McpDeclared;
use crate::proxy::RefusalSink;

/// The largest `POST` body read as MCP messages.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// What becomes of a run's request to a declared server.
#[derive(Debug)]
pub enum McpRequest {
    /// Send it on (with `body` in place of the run's, when some of its
    /// messages were refused), and answer with the server's answer,
    /// narrowed, `errors` added.
    Forward {
        /// The body to send instead of the run's.
        body: Option<Bytes>,
        /// The refused requests' JSON-RPC errors.
        errors: Vec<Value>,
    },
    /// Nothing is left to send: gatehouse answers alone.
    Answer {
        /// The refused requests' JSON-RPC errors (none: only notifications
        /// were refused, answered `202 Accepted` as a server would).
        errors: Vec<Value>,
        /// Whether the body was a batch (answered as an array).
        batch: bool,
    },
}

/// A call refused at the door: the tool it named and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedCall {
    /// The tool.
    pub tool: Option<String>,
    /// Why.
    pub reason: Reason,
}

/// A run's request read: what becomes of it, and its calls to record.
#[derive(Debug)]
pub struct McpRead {
    /// What becomes of the request.
    pub outcome: McpRequest,
    /// The calls refused.
    pub refused: Vec<RefusedCall>,
    /// The tools of the calls let through (and paid).
    pub allowed: Vec<String>,
}

impl McpRead {
    /// Tells `sink` of every call: each let through, and each refused, as
    /// `refusal(kind, reason, rule)` makes its record (`rule` is
    /// `SERVER:TOOL`). Returns the outcome.
    pub fn record(
        self,
        sink: &dyn RefusalSink,
        server: &str,
        refusal: impl Fn(RefusalKind, Reason, String) -> Refusal,
    ) -> McpRequest {
        for tool in &self.allowed {
            sink.tool_call(tool, None);
        }
        for call in self.refused {
            let tool = call.tool.unwrap_or_default();
            // A spent budget is `budget_exhausted`; the rest the door's.
            let kind = match refusal_kind(call.reason) {
                RefusalKind::BudgetExhausted => RefusalKind::BudgetExhausted,
                _ => RefusalKind::EgressRefused,
            };
            sink.tool_call(&tool, Some(refusal(kind, call.reason, format!("{server}:{tool}"))));
        }
        self.outcome
    }
}

/// Whether `headers` say the body is `media` (parameters ignored).
pub(crate) fn is_media(headers: &HeaderMap, media: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case(media))
}

/// Reads a run's request to `declared`. `GET` (the server's stream) and
/// `DELETE` (the end of a session) go on as they are; a `POST` must be
/// JSON-RPC 2.0 in `application/json`; any other method, or a message that
/// does not read, is `mcp_message_invalid`. Returns the calls refused
/// and the tools let through beside the outcome, for the caller to record
/// ([`McpRead::record`]).
#[allow(
    clippy::too_many_arguments,
    reason = "the ledger's spend takes what it takes; one call site per door"
)]
pub async fn read_request(
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
    declared: &McpDeclared,
    ledger: &Ledger,
    grant_id: &str,
    ledger_required: bool,
    now: UnixTime,
) -> Result<McpRead, Reason> {
    if *method == Method::GET || *method == Method::DELETE {
        let outcome = McpRequest::Forward { body: None, errors: Vec::new() };
        return Ok(McpRead { outcome, refused: Vec::new(), allowed: Vec::new() });
    }
    if *method != Method::POST || !is_media(headers, "application/json") || body.len() > MAX_MESSAGE_BYTES {
        return Err(Reason::McpMessageInvalid);
    }
    let parsed = parse_post(body).map_err(|_| Reason::McpMessageInvalid)?;
    let mut judged = judge(parsed, &declared.tools);
    let calls = judged.calls_to_spend();
    let mut allowed = Vec::with_capacity(calls.len());
    for (index, tool) in calls {
        match spend(ledger, grant_id, &Operation::ToolCall, now, ledger_required).await {
            Ok(_) => allowed.push(tool),
            Err(reason) => judged.refuse(index, reason),
        }
    }
    let refused: Vec<RefusedCall> = judged
        .refused()
        .into_iter()
        .map(|(tool, reason)| RefusedCall { tool: tool.map(str::to_owned), reason })
        .collect();
    let errors = judged.error_responses();
    let outcome = match judged.forward_body() {
        None => McpRequest::Answer { errors, batch: judged.is_batch() },
        Some(_) if judged.untouched() => McpRequest::Forward { body: None, errors },
        Some(body) => McpRequest::Forward { body: Some(Bytes::from(body)), errors },
    };
    Ok(McpRead { outcome, refused, allowed })
}

/// The answer gatehouse gives alone, for a body it sent nothing of: the
/// refused requests' errors as JSON (one, or an array for a batch), or a
/// bare `202 Accepted` when only notifications were refused, as a server
/// answers them. Status, headers, body.
pub fn own_answer(errors: &[Value], batch: bool) -> (StatusCode, HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    if errors.is_empty() {
        return (StatusCode::ACCEPTED, headers, Bytes::new());
    }
    let value = match errors {
        [only] if !batch => only.clone(),
        all => Value::Array(all.to_vec()),
    };
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (StatusCode::OK, headers, Bytes::from(serde_json::to_vec(&value).unwrap_or_default()))
}

/// A whole answer from the server, narrowed by content type: JSON and SSE
/// are read; an answer of another type passes as it came when there is
/// nothing to add, and is `None` (the caller answers with the errors
/// alone) when there is.
pub fn filter_whole_answer(
    headers: &HeaderMap,
    body: &[u8],
    rules: &ToolRules,
    errors: &[Value],
) -> Result<Option<Bytes>, Reason> {
    if is_media(headers, "application/json") {
        return filter_json(body, rules, errors)
            .map(|b| Some(Bytes::from(b)))
            .map_err(|_| Reason::McpMessageInvalid);
    }
    if is_media(headers, "text/event-stream") {
        let mut filter = SseFilter::new(rules.clone(), errors);
        let mut out = filter.start();
        out.extend(filter.push(body).map_err(|_| Reason::McpMessageInvalid)?);
        out.extend(filter.finish().map_err(|_| Reason::McpMessageInvalid)?);
        return Ok(Some(Bytes::from(out)));
    }
    Ok(errors.is_empty().then(|| Bytes::copy_from_slice(body)))
}

//! Each `tools/call` of a body judged: the tool rules here, the budget by
//! the door (it spends one `tool_call` in the ledger for every call the
//! rules let through, in order, and refuses the rest as
//! `budget_tool_calls_exhausted`). What was refused never reaches the
//! server; the client gets, for each refused request's id, a JSON-RPC error
//! it understands.

use gatehouse_core::Reason;
use serde_json::{Value, json};

use crate::message::{Body, Message};
use crate::servers::ToolRules;

/// What becomes of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Sent on to the server.
    Forward,
    /// Kept from the server, for `reason`.
    Refuse {
        /// Why.
        reason: Reason,
    },
}

/// A body with a step for each of its messages.
#[derive(Debug, Clone)]
pub struct Judged {
    body: Body,
    steps: Vec<Step>,
}

/// Applies the tool rules to every `tools/call` of `body`.
pub fn judge(body: Body, rules: &ToolRules) -> Judged {
    let steps = body
        .messages()
        .iter()
        .map(|m| match m.tool_call() {
            Some(Ok(tool)) if !rules.permits(tool) => Step::Refuse { reason: Reason::McpToolDenied },
            _ => Step::Forward,
        })
        .collect();
    Judged { body, steps }
}

impl Judged {
    /// The calls the rules let through, each `(index, tool)`: the door
    /// spends one `tool_call` for each, in order.
    pub fn calls_to_spend(&self) -> Vec<(usize, String)> {
        self.body
            .messages()
            .iter()
            .zip(&self.steps)
            .enumerate()
            .filter(|(_, (_, step))| **step == Step::Forward)
            .filter_map(|(i, (m, _))| m.tool_call().and_then(Result::ok).map(|tool| (i, tool.to_owned())))
            .collect()
    }

    /// Refuses message `index` (a call the budget could not pay for, or that
    /// the ledger could not be asked about).
    pub fn refuse(&mut self, index: usize, reason: Reason) {
        if let Some(step) = self.steps.get_mut(index) {
            *step = Step::Refuse { reason };
        }
    }

    /// Each refused message: the tool it named and why.
    pub fn refused(&self) -> Vec<(Option<&str>, Reason)> {
        self.body
            .messages()
            .iter()
            .zip(&self.steps)
            .filter_map(|(m, step)| match step {
                Step::Refuse { reason } => Some((m.tool_call().and_then(Result::ok), *reason)),
                Step::Forward => None,
            })
            .collect()
    }

    /// Whether the body was a batch (answered as an array).
    pub fn is_batch(&self) -> bool {
        matches!(self.body, Body::Batch(_))
    }

    /// The body to send on: the messages not refused, a batch staying a
    /// batch; `None` when nothing is left to send.
    pub fn forward_body(&self) -> Option<Vec<u8>> {
        let kept: Vec<&Message> = self
            .body
            .messages()
            .iter()
            .zip(&self.steps)
            .filter(|(_, s)| **s == Step::Forward)
            .map(|(m, _)| m)
            .collect();
        let encode = |m: &Message| Value::Object(m.raw().clone());
        match (&self.body, kept.as_slice()) {
            (_, []) => None,
            (Body::Single(_), [only]) => serde_json::to_vec(&encode(only)).ok(),
            (_, kept) => serde_json::to_vec(&Value::Array(kept.iter().map(|m| encode(m)).collect())).ok(),
        }
    }

    /// Whether every message goes on unchanged (the body can be sent as it
    /// came, byte for byte).
    pub fn untouched(&self) -> bool {
        self.steps.iter().all(|s| *s == Step::Forward)
    }

    /// The answers gatehouse gives in the server's place: a JSON-RPC error
    /// for each refused request (a refused notification has no one to
    /// answer).
    pub fn error_responses(&self) -> Vec<Value> {
        self.body
            .messages()
            .iter()
            .zip(&self.steps)
            .filter_map(|(m, step)| match (m, step) {
                (Message::Request { id, .. }, Step::Refuse { reason }) => {
                    Some(error_response(id, *reason, m.tool_call().and_then(Result::ok)))
                }
                _ => None,
            })
            .collect()
    }
}

/// The JSON-RPC error for a refused request: code -32003, a message for a
/// person, `data.reason` for a program, `data.tool` when a tool was named.
pub fn error_response(id: &Value, reason: Reason, tool: Option<&str>) -> Value {
    let message = match reason {
        Reason::McpToolDenied => "gatehouse: this tool is not allowed for this run",
        Reason::BudgetToolCallsExhausted => "gatehouse: this run's tool-call budget is spent",
        Reason::McpMessageInvalid => "gatehouse: not a valid JSON-RPC 2.0 message",
        _ => "gatehouse: refused",
    };
    let code =
        if reason == Reason::McpMessageInvalid { crate::INVALID_REQUEST_CODE } else { crate::REFUSED_CODE };
    let mut data = json!({"reason": reason.as_str()});
    if let Some(tool) = tool {
        data["tool"] = Value::from(tool);
    }
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": data}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::parse_post;

    fn rules() -> ToolRules {
        ToolRules { allow: Some(vec!["echo".into(), "big".into(), "rm".into()]), deny: vec!["rm".into()] }
    }

    fn call(id: u64, tool: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"x": 1}}})
    }

    #[test]
    fn a_denied_call_is_answered_in_the_servers_place_and_never_sent() {
        let body = parse_post(call(7, "rm").to_string().as_bytes()).unwrap();
        let judged = judge(body, &rules());
        assert_eq!(judged.forward_body(), None);
        assert_eq!(
            judged.error_responses(),
            vec![json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32003,
                "message": "gatehouse: this tool is not allowed for this run",
                "data": {"reason": "mcp_tool_denied", "tool": "rm"}}})]
        );
        assert_eq!(judged.refused(), vec![(Some("rm"), Reason::McpToolDenied)]);
    }

    #[test]
    fn a_batch_goes_on_without_what_was_refused() {
        let batch = json!([call(1, "echo"), call(2, "rm"), {"jsonrpc": "2.0", "method": "notifications/x"}, call(3, "big"), call(4, "unknown")]);
        let mut judged = judge(parse_post(batch.to_string().as_bytes()).unwrap(), &rules());
        assert!(!judged.untouched());
        // The door pays for echo and big, in order; big's is refused.
        assert_eq!(judged.calls_to_spend(), vec![(0, "echo".to_owned()), (3, "big".to_owned())]);
        judged.refuse(3, Reason::BudgetToolCallsExhausted);
        let sent: Value = serde_json::from_slice(&judged.forward_body().unwrap()).unwrap();
        assert_eq!(sent, json!([call(1, "echo"), {"jsonrpc": "2.0", "method": "notifications/x"}]));
        let errors = judged.error_responses();
        let reasons: Vec<(&Value, &Value)> =
            errors.iter().map(|e| (&e["id"], &e["error"]["data"]["reason"])).collect();
        assert_eq!(
            reasons,
            vec![
                (&json!(2), &json!("mcp_tool_denied")),
                (&json!(3), &json!("budget_tool_calls_exhausted")),
                (&json!(4), &json!("mcp_tool_denied")),
            ]
        );
        assert!(judged.is_batch());
    }

    #[test]
    fn everything_else_passes_untouched() {
        for body in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
            json!({"jsonrpc": "2.0", "id": "s", "method": "tools/list"}),
            call(9, "echo"),
        ] {
            let judged = judge(parse_post(body.to_string().as_bytes()).unwrap(), &rules());
            assert!(judged.untouched(), "{body}");
            assert_eq!(serde_json::from_slice::<Value>(&judged.forward_body().unwrap()).unwrap(), body);
        }
        // A denied tool in a notification: nothing to answer, nothing sent.
        let note = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "rm"}});
        let judged = judge(parse_post(note.to_string().as_bytes()).unwrap(), &rules());
        assert_eq!((judged.forward_body(), judged.error_responses()), (None, vec![]));
    }
}

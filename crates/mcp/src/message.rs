//! JSON-RPC 2.0 messages as an MCP client sends them in a `POST` body: one
//! message or a batch, read strictly.
//!
//! Strict, because the door decides on what it reads and the server acts on
//! what it reads: a body the two could read differently is how a call gets
//! past a rule. So duplicate keys are refused anywhere in the document
//! (`{"method": "tools/list", "method": "tools/call"}`), every message must
//! say `"jsonrpc": "2.0"`, a `method` is a string, an `id` a string or an
//! integer (never `null` in a request, never a fraction), `params` an
//! object or an array, and a response carries exactly one of `result` and
//! `error`. Members beyond these are passed on untouched.

use serde_json::{Map, Value};

/// One JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A call that expects an answer for its `id`.
    Request {
        /// Its id (a string or an integer).
        id: Value,
        /// The method called.
        method: String,
        /// The message as sent.
        raw: Map<String, Value>,
    },
    /// A call without an id: no answer.
    Notification {
        /// The method called.
        method: String,
        /// The message as sent.
        raw: Map<String, Value>,
    },
    /// A client's answer to a server's request.
    Response {
        /// The message as sent.
        raw: Map<String, Value>,
    },
}

impl Message {
    /// The method, for requests and notifications.
    pub fn method(&self) -> Option<&str> {
        match self {
            Self::Request { method, .. } | Self::Notification { method, .. } => Some(method),
            Self::Response { .. } => None,
        }
    }

    /// The id a request must be answered under.
    pub fn id(&self) -> Option<&Value> {
        match self {
            Self::Request { id, .. } => Some(id),
            _ => None,
        }
    }

    /// The message as sent.
    pub fn raw(&self) -> &Map<String, Value> {
        match self {
            Self::Request { raw, .. } | Self::Notification { raw, .. } | Self::Response { raw } => raw,
        }
    }

    /// The tool a `tools/call` names: `Some(Ok(name))`, `Some(Err(()))`
    /// when it names none (its `params.name` is missing or not a string), or
    /// `None` for any other method.
    pub fn tool_call(&self) -> Option<Result<&str, ()>> {
        (self.method() == Some("tools/call"))
            .then(|| self.raw().get("params").and_then(|p| p.get("name")).and_then(Value::as_str).ok_or(()))
    }
}

/// A `POST` body: one message, or a batch (a non-empty array).
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// One message.
    Single(Message),
    /// Several, answered as an array.
    Batch(Vec<Message>),
}

impl Body {
    /// Its messages, in order.
    pub fn messages(&self) -> &[Message] {
        match self {
            Self::Single(m) => std::slice::from_ref(m),
            Self::Batch(ms) => ms,
        }
    }
}

/// A body that is not JSON-RPC 2.0 (refused `mcp_message_invalid`); which rule it
/// broke, for the log, never a fragment of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid(pub &'static str);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Invalid {}

/// Messages one batch may hold at most.
pub const MAX_BATCH: usize = 256;

/// Reads a `POST` body.
pub fn parse_post(bytes: &[u8]) -> Result<Body, Invalid> {
    let value = gatehouse_capability::canonical::parse_strict(bytes)
        .map_err(|_| Invalid("not JSON, or duplicate keys"))?;
    match value {
        Value::Object(message) => parse_message(message).map(Body::Single),
        Value::Array(items) if items.is_empty() => Err(Invalid("an empty batch")),
        Value::Array(items) if items.len() > MAX_BATCH => Err(Invalid("a batch of more than 256 messages")),
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Object(message) => parse_message(message),
                _ => Err(Invalid("a batch item that is not an object")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Body::Batch),
        _ => Err(Invalid("neither a message nor a batch")),
    }
}

/// An id as JSON-RPC allows it in a request: a string or an integer.
fn is_request_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

fn parse_message(raw: Map<String, Value>) -> Result<Message, Invalid> {
    if raw.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Invalid("a message without \"jsonrpc\": \"2.0\""));
    }
    if let Some(params) = raw.get("params")
        && !(params.is_object() || params.is_array())
    {
        return Err(Invalid("params that are neither an object nor an array"));
    }
    match raw.get("method") {
        Some(Value::String(method)) => {
            if raw.contains_key("result") || raw.contains_key("error") {
                return Err(Invalid("a call that is also an answer"));
            }
            let method = method.clone();
            let message = match raw.get("id") {
                None => Message::Notification { method, raw },
                Some(id) if is_request_id(id) => Message::Request { id: id.clone(), method, raw },
                Some(_) => return Err(Invalid("a request id that is neither a string nor an integer")),
            };
            if message.tool_call() == Some(Err(())) {
                return Err(Invalid("a tools/call without a tool name"));
            }
            Ok(message)
        }
        Some(_) => Err(Invalid("a method that is not a string")),
        None => {
            let id_ok = raw.get("id").is_some_and(|id| is_request_id(id) || id.is_null());
            if !id_ok || raw.contains_key("result") == raw.contains_key("error") {
                return Err(Invalid("neither a call nor an answer"));
            }
            Ok(Message::Response { raw })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Body, Invalid> {
        parse_post(s.as_bytes())
    }

    #[test]
    fn requests_notifications_answers_and_batches_are_read() {
        let body = parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
        )
        .unwrap();
        let [m] = body.messages() else { panic!() };
        assert_eq!((m.id(), m.tool_call()), (Some(&Value::from(1)), Some(Ok("echo"))));
        let body = parse(r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","id":"x","method":"tools/list"}]"#).unwrap();
        assert!(matches!(
            body.messages(),
            [Message::Notification { .. }, Message::Response { .. }, Message::Request { .. }]
        ));
        assert!(matches!(body, Body::Batch(_)));
        // An error answer may carry a null id.
        parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}"#).unwrap();
    }

    #[test]
    fn anything_two_parsers_could_read_differently_is_refused() {
        for bad in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"rm"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"rm"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#,
            r#"{"id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"echo"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["echo"]}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":["echo"]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"[]"#,
            r#"[1]"#,
            r#""tools/call""#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"} {}"#,
            "not json",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let many = format!("[{}]", vec![r#"{"jsonrpc":"2.0","method":"x"}"#; 257].join(","));
        assert_eq!(parse(&many), Err(Invalid("a batch of more than 256 messages")));
    }

    proptest::proptest! {
        #[test]
        fn no_input_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse_post(&bytes);
        }

        #[test]
        fn a_tool_name_is_read_back_exactly(name in "\\PC{1,40}", id in proptest::prelude::any::<i64>()) {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name}});
            let parsed = parse_post(body.to_string().as_bytes()).unwrap();
            proptest::prop_assert_eq!(parsed.messages()[0].tool_call(), Some(Ok(name.as_str())));
        }
    }
}

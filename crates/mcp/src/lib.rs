//! MCP at the door.
//!
//! A tenant declares its MCP servers (Streamable HTTP endpoints) and, for
//! each, which tools a run may call. The door reads every request a run
//! sends to a declared endpoint as MCP: JSON-RPC 2.0 messages over `POST`,
//! one or a batch. This crate is the reading and the rules, with no I/O, so
//! both doors (the proxy and the fetch API) apply exactly one of each:
//!
//! - [`servers`]: the declarations, their validation, and which request is
//!   an endpoint's (scheme, host, port and path; the query never takes a
//!   request out of MCP reading).
//! - [`message`]: a `POST` body read strictly (duplicate keys refused, so no
//!   two parsers can read one message two ways; `"jsonrpc": "2.0"` on every
//!   message); anything else is `mcp_message_invalid`.
//! - [`judge`]: each `tools/call` against the tool rules (deny wins; with an
//!   allow list, only those), the budget spend the door then makes for what
//!   passed, the body forwarded without what was refused, and the JSON-RPC
//!   errors (code -32003, `data.reason`, `data.tool`) answered in its place.
//! - [`answer`]: the server's answer, JSON or an SSE stream read event by
//!   event, with every `tools/list` result narrowed to the tools the run may
//!   call and the refusals put in front.

#![forbid(unsafe_code)]
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod answer;
pub mod judge;
pub mod message;
pub mod servers;

pub use answer::{SseFilter, filter_json};
pub use judge::{Judged, Step, error_response, judge};
pub use message::{Body, Invalid, Message, parse_post};
pub use servers::{Endpoint, McpServer, ServerError, ToolRules, validate_servers};

/// The JSON-RPC error code of a call gatehouse refused (in the range the
/// specification leaves to implementations, -32000 to -32099).
pub const REFUSED_CODE: i64 = -32003;
/// The JSON-RPC error code of a message that is not valid JSON-RPC 2.0.
pub const INVALID_REQUEST_CODE: i64 = -32600;

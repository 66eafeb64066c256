//! The safe public error: the only error shape that crosses to a caller.
//!
//! Internals — file paths, user ids, host names, addresses, stack traces, key
//! material — are informative to an attacker, so a [`PublicError`] can only
//! carry a closed [`ErrorCode`], a `&'static str` message chosen by gatehouse's
//! own code, an optional reason code, and the request id that joins it to the
//! log line where the detail went. Because the message is `'static`, no runtime
//! value (and so no secret or input echo) can reach a caller through it.

use serde::Serialize;

use crate::refusal::{Reason, closed_codes};

closed_codes! {
    /// Error codes a caller may see.
    pub enum ErrorCode {
        /// The request is malformed or fails validation.
        BadRequest => "bad_request",
        /// The request body is not valid JSON (or has duplicate keys).
        InvalidJson => "invalid_json",
        /// No or wrong credentials.
        Unauthorized => "unauthorized",
        /// Authenticated, but this node's role does not serve the route.
        Forbidden => "forbidden",
        /// No such route or resource.
        NotFound => "not_found",
        /// The route exists but not for this method.
        MethodNotAllowed => "method_not_allowed",
        /// The request body exceeds the cap.
        PayloadTooLarge => "payload_too_large",
        /// The body is not `application/json`.
        UnsupportedMediaType => "unsupported_media_type",
        /// A security decision refused the request; see `reason`.
        Refused => "refused",
        /// A dependency (store, ledger, scanner) cannot answer; gatehouse fails closed.
        Unavailable => "unavailable",
        /// The request took too long.
        Timeout => "timeout",
        /// An upstream the request went to failed (unreachable, timed out, bad TLS, too large).
        BadGateway => "bad_gateway",
        /// Anything else. Details are in the log under the request id.
        Internal => "internal",
        /// The resource is not in a state that allows this (a run that is not live); see `reason`.
        Conflict => "conflict",
        /// The body must declare its length (`Content-Length`): an upload is paid for before it is read.
        LengthRequired => "length_required",
        /// Too many requests of this kind in the last minute; try again after `Retry-After` seconds. See `reason`.
        RateLimited => "rate_limited",
    }
}

impl ErrorCode {
    /// Whether the same call may succeed later unchanged: only when a
    /// service gatehouse needs (or the upstream) failed or was slow, or a
    /// rate ran out (it refills). A refusal is never retryable, so an agent
    /// told so stops trying.
    pub const fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::Unavailable | ErrorCode::Timeout | ErrorCode::BadGateway | ErrorCode::RateLimited
        )
    }

    /// The HTTP status this code is served with.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest | ErrorCode::InvalidJson => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden | ErrorCode::Refused => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Conflict => 409,
            ErrorCode::LengthRequired => 411,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::RateLimited => 429,
            ErrorCode::Unavailable => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::BadGateway => 502,
            ErrorCode::Internal => 500,
        }
    }

    /// The message used when the caller gives none.
    pub const fn default_message(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "the request is not valid",
            ErrorCode::InvalidJson => "the request body is not valid JSON",
            ErrorCode::Unauthorized => "authentication required",
            ErrorCode::Forbidden => "this node does not serve that operation",
            ErrorCode::NotFound => "not found",
            ErrorCode::MethodNotAllowed => "method not allowed",
            ErrorCode::PayloadTooLarge => "the request body is too large",
            ErrorCode::UnsupportedMediaType => "expected an application/json body",
            ErrorCode::Refused => "refused by policy",
            ErrorCode::Unavailable => "a required service is unavailable",
            ErrorCode::Timeout => "the request timed out",
            ErrorCode::BadGateway => "the upstream failed",
            ErrorCode::Internal => "internal error",
            ErrorCode::Conflict => "the resource is not in a state that allows this",
            ErrorCode::LengthRequired => "the request body must declare its length",
            ErrorCode::RateLimited => "too many requests; try again later",
        }
    }
}

/// An error as a caller sees it: `{"error": {"code", "message", "reason"?, "request_id"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicError {
    /// What kind of error.
    pub code: ErrorCode,
    /// Safe, fixed text.
    pub message: &'static str,
    /// The refusal reason, for [`ErrorCode::Refused`] and authentication failures.
    pub reason: Option<Reason>,
    /// Joins this response to the server's log lines.
    pub request_id: String,
    /// For a rate that ran out: seconds until trying again can succeed
    /// (`Retry-After`).
    pub retry_after_secs: Option<u32>,
    /// For a refusal by a tenant's deny rule: the reason the tenant wrote
    /// for the agent (its own policy text, at most 200 printable
    /// characters, checked when the policy was stored).
    pub rule_reason: Option<String>,
    /// For a refusal a person may lift: the egress proposal it made, for
    /// the agent to follow (`x-gatehouse-proposal`).
    pub proposal_id: Option<String>,
}

impl PublicError {
    /// An error with the code's default message.
    pub fn new(code: ErrorCode, request_id: impl Into<String>) -> Self {
        Self {
            code,
            message: code.default_message(),
            reason: None,
            request_id: request_id.into(),
            retry_after_secs: None,
            rule_reason: None,
            proposal_id: None,
        }
    }

    /// Replaces the message with another fixed text.
    #[must_use]
    pub fn with_message(mut self, message: &'static str) -> Self {
        self.message = message;
        self
    }

    /// Attaches a refusal reason.
    #[must_use]
    pub fn with_reason(mut self, reason: Reason) -> Self {
        self.reason = Some(reason);
        self
    }

    /// Says when trying again can succeed.
    #[must_use]
    pub fn with_retry_after(mut self, secs: u32) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// Carries a deny rule's reason for the agent.
    #[must_use]
    pub fn with_rule_reason(mut self, rule_reason: Option<String>) -> Self {
        self.rule_reason = rule_reason;
        self
    }

    /// Carries the proposal a refusal made.
    #[must_use]
    pub fn with_proposal(mut self, proposal_id: Option<String>) -> Self {
        self.proposal_id = proposal_id;
        self
    }

    /// The rule reason as the `x-gatehouse-rule-reason` header carries it:
    /// visible ASCII and spaces as they are, every other byte of its UTF-8
    /// (and `%` itself) percent-encoded.
    pub fn rule_reason_header(&self) -> Option<String> {
        self.rule_reason.as_deref().map(header_text)
    }

    /// The JSON body.
    pub fn to_json(&self) -> serde_json::Value {
        #[derive(Serialize)]
        struct Inner<'a> {
            code: ErrorCode,
            message: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<Reason>,
            request_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            retry_after_secs: Option<u32>,
            #[serde(skip_serializing_if = "Option::is_none")]
            rule_reason: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            proposal_id: Option<&'a str>,
        }
        #[derive(Serialize)]
        struct Outer<'a> {
            error: Inner<'a>,
        }
        serde_json::to_value(Outer {
            error: Inner {
                code: self.code,
                message: self.message,
                reason: self.reason,
                request_id: &self.request_id,
                retry_after_secs: self.retry_after_secs,
                rule_reason: self.rule_reason.as_deref(),
                proposal_id: self.proposal_id.as_deref(),
            },
        })
        .unwrap_or(serde_json::Value::Null)
    }
}

/// `text` as a header value may hold it: visible ASCII and spaces kept,
/// every other byte (and `%`) percent-encoded.
pub fn header_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (byte == b' ' || byte.is_ascii_graphic()) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shape_is_stable() {
        let e = PublicError::new(ErrorCode::Refused, "req_1").with_reason(Reason::ManifestMissing);
        assert_eq!(
            e.to_json(),
            serde_json::json!({"error": {
                "code": "refused",
                "message": "refused by policy",
                "reason": "manifest_missing",
                "request_id": "req_1"
            }})
        );
        let e = PublicError::new(ErrorCode::Internal, "req_2");
        assert_eq!(
            e.to_json(),
            serde_json::json!({"error": {"code": "internal", "message": "internal error", "request_id": "req_2"}})
        );
    }

    #[test]
    fn every_code_has_an_error_status() {
        for c in ErrorCode::ALL {
            assert!((400..600).contains(&c.http_status()), "{c}");
            assert!(!c.default_message().is_empty());
        }
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            codes,
            [
                "bad_request",
                "invalid_json",
                "unauthorized",
                "forbidden",
                "not_found",
                "method_not_allowed",
                "payload_too_large",
                "unsupported_media_type",
                "refused",
                "unavailable",
                "timeout",
                "bad_gateway",
                "internal",
                "conflict",
                "length_required",
                "rate_limited",
            ]
        );
    }
}

//! What a refused client is told, and what the record of it holds: the
//! proxy answers refusals in the shape the API does, so an agent reads one
//! the same way whichever door refused it.

use bytes::Bytes;
use gatehouse_core::{ErrorCode, PublicError, Reason, RefusalKind};
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full};

use super::ProxyBody;
use crate::decision::Decision;

/// A refusal on its way to the client and the record.
pub(super) struct Refused {
    pub(super) status: StatusCode,
    pub(super) reason: Reason,
    pub(super) kind: RefusalKind,
    pub(super) rule: Option<String>,
    /// A deny rule's reason for the agent.
    pub(super) rule_reason: Option<Box<str>>,
    /// The proposal the refusal made, for a person to decide.
    pub(super) proposal_id: Option<Box<str>>,
    pub(super) host: Option<String>,
    pub(super) lease_id: Option<String>,
}

impl Refused {
    pub(super) fn new(status: StatusCode, kind: RefusalKind, reason: Reason) -> Self {
        Self {
            status,
            reason,
            kind,
            rule: None,
            rule_reason: None,
            proposal_id: None,
            host: None,
            lease_id: None,
        }
    }

    /// A lease refusal: a security refusal of the run's request.
    pub(super) fn lease(refusal: crate::inject::LeaseRefusal, host: Option<String>) -> Self {
        let status = refusal_status(refusal.reason);
        Self {
            host,
            lease_id: refusal.lease_id,
            ..Self::new(status, RefusalKind::SecretRefused, refusal.reason)
        }
    }

    pub(super) fn from_decision(d: &Decision) -> Self {
        let reason = d.refusal().unwrap_or(Reason::UpstreamUnreachable);
        Self {
            // A policy that could not be read is an outage, not an answer.
            status: refusal_status(reason),
            reason,
            kind: RefusalKind::EgressRefused,
            rule: d.rule.clone(),
            rule_reason: d.rule_reason.as_deref().map(Box::from),
            proposal_id: None,
            host: d.host.clone(),
            lease_id: None,
        }
    }
}

/// The status of a refusal with this reason: its public error's
/// ([`Reason::refusal_code`]), 503 for an outage and 403 for an answer.
pub(super) fn refusal_status(reason: Reason) -> StatusCode {
    StatusCode::from_u16(reason.refusal_code().http_status()).unwrap_or(StatusCode::FORBIDDEN)
}

pub(super) fn refusal_response(refused: &Refused, request_id: &str) -> Response<ProxyBody> {
    let code = match refused.status {
        StatusCode::PROXY_AUTHENTICATION_REQUIRED => ErrorCode::Unauthorized,
        StatusCode::BAD_GATEWAY => ErrorCode::BadGateway,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        // An outage: the same code the API answers one with.
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        _ => ErrorCode::Refused,
    };
    let retryable = code.retryable();
    let error = PublicError::new(code, request_id)
        .with_reason(refused.reason)
        .with_rule_reason(refused.rule_reason.as_deref().map(str::to_owned))
        .with_proposal(refused.proposal_id.as_deref().map(str::to_owned));
    let mut body = error.to_json();
    if let Some(error) = body.get_mut("error").and_then(serde_json::Value::as_object_mut) {
        error.insert("retryable".into(), retryable.into());
    }
    let body = body.to_string();
    let mut response =
        Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = refused.status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("x-gatehouse-reason", HeaderValue::from_static(refused.reason.as_str()));
    // An agent reads this to stop retrying: only an outage may pass.
    headers
        .insert("x-gatehouse-retryable", HeaderValue::from_static(if retryable { "true" } else { "false" }));
    headers
        .insert("x-request-id", HeaderValue::from_str(request_id).unwrap_or(HeaderValue::from_static("req")));
    if let Some(value) = error.rule_reason_header().and_then(|v| HeaderValue::from_str(&v).ok()) {
        headers.insert("x-gatehouse-rule-reason", value);
    }
    if let Some(value) = refused.proposal_id.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
        headers.insert("x-gatehouse-proposal", value);
    }
    if refused.status == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
        headers.insert(header::PROXY_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"gatehouse\""));
    }
    response
}

#[cfg(test)]
mod tests {
    use gatehouse_ledger::refusal_kind;

    use super::*;

    /// What a refusal's body says: its code and whether to retry.
    async fn answered(refused: &Refused) -> (StatusCode, serde_json::Value, String) {
        let response = refusal_response(refused, "req_1");
        let status = response.status();
        let retryable = response.headers()["x-gatehouse-retryable"].to_str().unwrap_or_default().to_owned();
        let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        (status, serde_json::from_slice(&body).unwrap_or_default(), retryable)
    }

    #[tokio::test]
    async fn a_refusal_reads_as_the_api_answers_it() {
        for (reason, status, code, retryable) in [
            (Reason::LedgerUnavailable, StatusCode::SERVICE_UNAVAILABLE, "unavailable", "true"),
            (Reason::LeaseUnavailable, StatusCode::SERVICE_UNAVAILABLE, "unavailable", "true"),
            (Reason::PolicyNotAllowed, StatusCode::FORBIDDEN, "refused", "false"),
            (Reason::BudgetRequestsExhausted, StatusCode::FORBIDDEN, "refused", "false"),
        ] {
            let (got, body, again) =
                answered(&Refused::new(refusal_status(reason), refusal_kind(reason), reason)).await;
            assert_eq!((got, again.as_str()), (status, retryable), "{reason:?}");
            assert_eq!(body["error"]["code"], code, "{reason:?}: {body}");
            assert_eq!(body["error"]["code"], reason.refusal_code().as_str(), "the API's code for it");
            assert_eq!(body["error"]["reason"], reason.as_str());
        }
    }
}

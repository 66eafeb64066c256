//! The one error every operation of the plane returns.

use gatehouse_core::{ErrorCode, Reason};
use gatehouse_store::StoreError;

/// Why an operation did not happen. Each variant fixes the public error
/// code a face answers with ([`PlaneError::code`]); the reason code and the
/// message, where there is one, are written for the caller and are stable.
/// Nothing in it is secret: it carries codes and fixed texts only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaneError {
    /// What was asked breaks a rule the message names.
    #[error("invalid: {message}")]
    Invalid {
        /// The rule, for the caller.
        message: &'static str,
        /// A reason code, where the refusal has one (`policy_unreadable`).
        reason: Option<Reason>,
    },
    /// What was given is malformed, as the reason says (a file's name).
    #[error("bad input: {0}")]
    BadInput(Reason),
    /// The caller proved nothing (a missing, doubled or bad credential).
    #[error("unauthenticated: {0}")]
    Unauthenticated(Reason),
    /// What was named does not exist.
    #[error("not found")]
    NotFound(Option<Reason>),
    /// It exists, but not in a state that allows this.
    #[error("conflict")]
    Conflict(Option<Reason>),
    /// Policy says no.
    #[error("refused: {0}")]
    Refused(Reason),
    /// The tenant's policy says no, with what the agent is told beside
    /// the reason.
    #[error("refused by the policy: {reason}")]
    RefusedByPolicy {
        /// The reason code.
        reason: Reason,
        /// A deny rule's reason, as the tenant wrote it.
        rule_reason: Option<String>,
        /// The proposal the refusal made, for a person to decide.
        proposal_id: Option<String>,
    },
    /// A dependency (the ledger, the store) cannot answer now: retry.
    #[error("unavailable: {reason}")]
    Unavailable {
        /// Which dependency.
        reason: Reason,
        /// What was done all the same, when something was.
        message: Option<&'static str>,
    },
    /// A rate ran out: the same call succeeds after `retry_after_secs`.
    #[error("rate limited: {reason}")]
    RateLimited {
        /// Which rate.
        reason: Reason,
        /// Seconds until trying again can succeed.
        retry_after_secs: u32,
    },
    /// The upstream a request went to failed (unreachable, timed out, bad
    /// TLS, an answer too large or not HTTP).
    #[error("upstream failed: {0}")]
    Upstream(Reason),
    /// This node's role does not hold what the operation needs.
    #[error("not served by this node's role")]
    NotServed,
    /// A fault of gatehouse's own; the code goes to the log only.
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl PlaneError {
    /// A broken rule, told by `message`.
    pub const fn invalid(message: &'static str) -> Self {
        Self::Invalid { message, reason: None }
    }

    /// A dependency that cannot answer.
    pub const fn unavailable(reason: Reason) -> Self {
        Self::Unavailable { reason, message: None }
    }

    /// The public error code a face answers with.
    pub const fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid { .. } | Self::BadInput(_) => ErrorCode::BadRequest,
            Self::Unauthenticated(_) => ErrorCode::Unauthorized,
            Self::NotFound(_) => ErrorCode::NotFound,
            Self::Conflict(_) => ErrorCode::Conflict,
            Self::Refused(_) | Self::RefusedByPolicy { .. } => ErrorCode::Refused,
            Self::Unavailable { .. } => ErrorCode::Unavailable,
            Self::RateLimited { .. } => ErrorCode::RateLimited,
            Self::Upstream(_) => ErrorCode::BadGateway,
            Self::NotServed => ErrorCode::Forbidden,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The reason code, where there is one.
    pub const fn reason(&self) -> Option<Reason> {
        match self {
            Self::Invalid { reason, .. } | Self::NotFound(reason) | Self::Conflict(reason) => *reason,
            Self::Refused(reason)
            | Self::Unavailable { reason, .. }
            | Self::BadInput(reason)
            | Self::RateLimited { reason, .. }
            | Self::RefusedByPolicy { reason, .. }
            | Self::Upstream(reason)
            | Self::Unauthenticated(reason) => Some(*reason),
            Self::NotServed | Self::Internal(_) => None,
        }
    }

    /// The message for the caller, where there is one.
    pub const fn message(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { message, .. } => Some(message),
            Self::Unavailable { message, .. } => *message,
            _ => None,
        }
    }

    /// A refusal for `reason`: unavailable when it is an outage (retry),
    /// refused otherwise ([`Reason::refusal_code`], the one mapping).
    pub fn refusal(reason: Reason) -> Self {
        match reason.refusal_code() {
            ErrorCode::Unavailable => Self::unavailable(reason),
            _ => Self::Refused(reason),
        }
    }

    /// A run that is not there.
    pub const fn run_unknown() -> Self {
        Self::NotFound(Some(Reason::RunUnknown))
    }
}

/// How the door's refusals read as the plane's: the one mapping the fetch
/// API uses too ([`DoorError::code`]).
impl From<gatehouse_egress::run_fetch::DoorError> for PlaneError {
    fn from(e: gatehouse_egress::run_fetch::DoorError) -> Self {
        use gatehouse_egress::run_fetch::DoorError;
        match e {
            DoorError::Refused(reason) => match e.code() {
                ErrorCode::BadGateway => Self::Upstream(reason),
                ErrorCode::BadRequest => Self::BadInput(reason),
                _ => Self::refusal(reason),
            },
            DoorError::Policy { reason, rule_reason, proposal_id } => {
                Self::RefusedByPolicy { reason, rule_reason, proposal_id }
            }
            DoorError::NotServed => Self::NotServed,
            DoorError::Internal => Self::Internal("door_internal"),
        }
    }
}

/// How every storage error reads as the plane's: the one mapping.
impl From<gatehouse_files::FileError> for PlaneError {
    fn from(e: gatehouse_files::FileError) -> Self {
        use gatehouse_files::FileError;
        match e {
            FileError::NameInvalid(_) => Self::BadInput(e.reason()),
            FileError::NotFound | FileError::PathInvalid => Self::NotFound(Some(e.reason())),
            FileError::Unavailable | FileError::Config(_) => Self::unavailable(e.reason()),
        }
    }
}

/// How every store error reads as the plane's: the one mapping.
impl From<StoreError> for PlaneError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::run_unknown(),
            StoreError::RunNotLive | StoreError::Refused(Reason::RunNotLive) => {
                Self::Conflict(Some(Reason::RunNotLive))
            }
            StoreError::KillSwitch => Self::Refused(Reason::TenantKillSwitch),
            StoreError::Conflict => Self::Conflict(None),
            StoreError::Refused(Reason::CredentialUnknown) => Self::NotFound(Some(Reason::CredentialUnknown)),
            StoreError::Refused(reason) => Self::Refused(reason),
            StoreError::Unavailable | StoreError::Full => Self::unavailable(e.reason()),
            e => Self::Internal(e.code()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_store_error_keeps_the_answer_it_had() {
        let cases = [
            (StoreError::NotFound, ErrorCode::NotFound, Some(Reason::RunUnknown)),
            (StoreError::RunNotLive, ErrorCode::Conflict, Some(Reason::RunNotLive)),
            (StoreError::KillSwitch, ErrorCode::Refused, Some(Reason::TenantKillSwitch)),
            (StoreError::Conflict, ErrorCode::Conflict, None),
            (
                StoreError::Refused(Reason::CredentialUnknown),
                ErrorCode::NotFound,
                Some(Reason::CredentialUnknown),
            ),
            (
                StoreError::Refused(Reason::LeaseHostMismatch),
                ErrorCode::Refused,
                Some(Reason::LeaseHostMismatch),
            ),
            (StoreError::Unavailable, ErrorCode::Unavailable, Some(Reason::StoreUnavailable)),
        ];
        for (store, code, reason) in cases {
            let e = PlaneError::from(store.clone());
            assert_eq!((e.code(), e.reason()), (code, reason), "{store:?}");
        }
    }
}

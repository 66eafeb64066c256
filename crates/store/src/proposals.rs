//! Egress proposals as the store keeps them.

use gatehouse_core::UnixTime;
use serde::Serialize;

/// A new proposal: a run's ask for one exact rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewProposal {
    /// Derived from the run and the rule: the same ask is one proposal.
    pub proposal_id: String,
    /// The run's tenant.
    pub tenant_id: String,
    /// The run.
    pub run_id: String,
    /// The host asked for.
    pub host: String,
    /// The rule asked for, as a policy entry's JSON.
    pub rule: String,
    /// Why, as the agent (or the refusal) put it.
    pub why: String,
    /// When.
    pub created_at: UnixTime,
    /// Past this a pending proposal is expired.
    pub expires_at: UnixTime,
}

/// A proposal as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Proposal {
    /// Its id.
    pub proposal_id: String,
    /// The run's tenant.
    pub tenant_id: String,
    /// The run.
    pub run_id: String,
    /// The host asked for.
    pub host: String,
    /// The rule asked for, as a policy entry's JSON.
    pub rule: String,
    /// Why.
    pub why: String,
    /// `pending`, `approved` or `denied` as stored (see [`Proposal::status_at`]).
    pub status: String,
    /// Approved for the `run` or the `tenant`.
    pub scope: Option<String>,
    /// Who decided.
    pub decided_by: Option<String>,
    /// When.
    pub decided_at: Option<UnixTime>,
    /// When it was asked.
    pub created_at: UnixTime,
    /// Past this, pending is expired.
    pub expires_at: UnixTime,
}

impl Proposal {
    /// Its status at `now`: a pending proposal past its expiry is `expired`.
    pub fn status_at(&self, now: UnixTime) -> &str {
        if self.status == "pending" && now >= self.expires_at { "expired" } else { &self.status }
    }
}

/// What the store refuses a new proposal for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProposalLimits {
    /// Pending proposals one run may have.
    pub per_run: i64,
    /// Pending proposals one tenant may have.
    pub per_tenant: i64,
}
